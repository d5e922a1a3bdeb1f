/*
 * The device's instruction stream of a launch, as the timing model reads it (pa_sim_trace_event, pa_sim_api.h):
 * every intrinsic each emulated core issues, in program order per core role, with its pipe and what prices it
 * (bytes and bursts of a GM transfer, m/k/n of a mad, repeats of a vector instruction), intra-core flags and
 * barriers, cross-core sets and waits.  The model (timing/replay.py) then costs the intrinsics the device
 * executes, not a CPU implementation's tile operations.
 */
#ifndef PA_DEVSIM_TRACE_HPP
#define PA_DEVSIM_TRACE_HPP

#include <cstdint>
#include <vector>

#include "pa_sim_api.h"
#include "emu_core.hpp"

namespace pa::devsim {

/* A GM argument buffer of the launch: its kind for the sim's figures and its kernel-ABI slot (the timing model
 * serves the scratch slots from L2). */
struct GmClass {
    uint64_t start, end;
    int kind; /* 0 other, 1 K/V, 2 scratch, 3 split partials */
    int slot;
};

/* One core role's stream.  A cross-core set in mode 0 (all vector cores) is the all-vector barrier: the
 * model's EV_ALLVEC stands for the set and the wait on the same flag that follows it, so that wait is dropped. */
class TraceStream {
public:
    TraceStream(uint32_t block, int role) : block_(block), role_(role) {}
    void Record(const emu::Issue &issue, const std::vector<GmClass> &gm);
    /* A scalar read of a GM word (a tiling word, a block-table entry): the scalar unit stalls on it. */
    void RecordScalarGmRead();
    const std::vector<pa_sim_trace_event> &Events() const { return events_; }

private:
    pa_sim_trace_event Event(uint8_t kind, emu::Pipe pipe) const;
    uint32_t block_;
    int role_;
    uint32_t allVecArmed_ = 0; /* flags whose mode-0 set was recorded and whose wait is still to come */
    std::vector<pa_sim_trace_event> events_;
};

/* The op-code of an intrinsic name in every trace of this process, and the name of an op-code (nullptr past
 * the last); at most 255 names. */
uint8_t TraceOp(const char *name);
const char *TraceOpName(int32_t op);

}  // namespace pa::devsim

#endif /* PA_DEVSIM_TRACE_HPP */
