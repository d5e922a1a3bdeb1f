/*
 * The simulation side of the platform layer's records: GM checks and figures, flags and barriers with their
 * edge ids, cross-core signals, on-chip high-water marks.  See pa_record.hpp.
 */
#include "pa_record.hpp"

#include <algorithm>
#include <atomic>
#include <memory>

namespace pa::rec {

void GmTraffic(int32_t slot, uint64_t off, uint64_t rows, uint64_t cols, uint64_t rowStride, uint64_t colStride,
               uint32_t elemBytes, bool write, int traffic)
{
    sim::CheckAccess(slot, off, rows, cols, rowStride, colStride, elemBytes, write);
    sim::Counters &c = *sim::tctx.ctr;
    const uint64_t bytes = rows * cols * elemBytes;
    (write ? c.gmWriteBytes : c.gmReadBytes) += bytes;
    if (traffic == 1) c.kvReadBytes += bytes;      /* kTrafficKv      */
    if (traffic == 2) c.scratchBytes += bytes;     /* kTrafficScratch */
    if (traffic == 3) c.partialBytes += bytes;     /* kTrafficPartial */
}

void Count(int counter)
{
    sim::Counters &c = *sim::tctx.ctr;
    switch (counter) {
        case kCountHandoff: ++c.handoffs; break;
        case kCountUnit: ++c.units; break;
        case kCountTask: ++c.tasks; break;
        case kCountMatmul: ++c.matmuls; break;
        default: break;
    }
}

namespace {

/* A mutation of edge `edge` (pa_sim_mutate_sync): what a plausible wrong kernel would issue instead. */
int Mutated(int edge, int kind) { return sim::MutatedEdge(kind) == edge; }

}  // namespace

void SetFlag(int src, int dst, int event, int edge)
{
    if (sim::EdgeDropped(edge)) return;
    if (Mutated(edge, PA_SIM_MUTATE_WRONG_SOURCE)) src = kPipeS;   /* set (and waited) from the scalar pipe */
    if (Mutated(edge, PA_SIM_MUTATE_SHARED_EVENT)) event = 0;      /* both ping-pong halves on event 0 */
    if (sim::tctx.hz) sim::tctx.hz->SetFlag(src, dst, event);
}

void WaitFlag(int src, int dst, int event, int edge)
{
    if (sim::EdgeDropped(edge)) return;
    if (Mutated(edge, PA_SIM_MUTATE_WRONG_SOURCE)) src = kPipeS;
    if (Mutated(edge, PA_SIM_MUTATE_SHARED_EVENT)) event = 0;
    if (sim::tctx.hz) sim::tctx.hz->WaitFlag(src, dst, event);
}

void Barrier(int pipe, int edge)
{
    if (sim::EdgeDropped(edge)) return;
    if (sim::tctx.hz) sim::tctx.hz->Barrier(pipe);
}

void Signal(uint16_t id, int edge, int pipe, Direction dir)
{
    if (sim::EdgeDropped(edge)) return;
    if (Mutated(edge, PA_SIM_MUTATE_SIGNAL_PIPE)) pipe = kPipeS; /* covers only scalar work */
    if (dir == kToVectors) sim::SignalVectors(id, pipe);
    else sim::SignalCube(id, pipe);
}

void Wait(uint16_t id, int edge, Direction dir)
{
    if (sim::EdgeDropped(edge)) return;
    if (dir == kToVectors) sim::WaitFromCube(id);
    else sim::WaitFromVectors(id);
}

void AllVectorBarrier(int edge, int pipe)
{
    if (sim::EdgeDropped(edge)) return;
    if (Mutated(edge, PA_SIM_MUTATE_SIGNAL_PIPE)) pipe = kPipeS;
    sim::VectorBarrier(pipe);
}

namespace {

/* Checked mode: a core's on-chip memory starts as NaN (all-ones bytes are NaN in fp16, bf16 and fp32), as
 * stale as the device leaves it, so a read of memory the kernel never wrote shows in the output. */
void PoisonOnChip(int32_t role)
{
    auto &m = pto::NPUMemoryModel::Instance();
    if (role == sim::kRoleCube) {
        std::memset(m.GetL1Base(), 0xff, kL1Bytes);
        std::memset(m.GetL0ABase(), 0xff, kL0aBytes);
        std::memset(m.GetL0BBase(), 0xff, kL0bBytes);
        std::memset(m.GetL0CBase(), 0xff, kL0cBytes);
    } else {
        std::memset(m.GetUBBase(), 0xff, kUbBytes);
    }
}

}  // namespace

void RunCoreRole(sim::Launch &L, uint32_t core, int32_t role, const std::function<void()> &body)
{
    using namespace sim;
    pto::cpu_sim::ScopedExecutionContext ctx(core, role == kRoleCube ? 0 : uint32_t(role - kRoleVec0), kVecSubCores);
    tctx = ThreadCtx{};
    tctx.launch = &L;
    tctx.core = int32_t(core);
    tctx.role = role;
    tctx.ctr = &L.counters[core * kRolesPerCluster + uint32_t(role)];
    std::unique_ptr<hz::Role> checker;
    if (L.hazards) {
        checker = std::make_unique<hz::Role>(L, core, role);
        tctx.hz = checker.get();
        PoisonOnChip(role);
    }
    try {
        body();
        if (checker) checker->Finish();
    } catch (const Abort &) {
        /* the launch failed; the first error is in L.error */
    }
    tctx.hz = nullptr;
}

namespace {
std::atomic<bool> g_skipZeroPadding{false};
}  // namespace

bool SkipZeroPadding() { return g_skipZeroPadding.load(std::memory_order_relaxed); }

void InvalidateCache()
{
    if (sim::tctx.hz) sim::tctx.hz->InvalidateCache();
}

void NoteAssign(int space, uint64_t begin, uint64_t end)
{
    static const int kRegion[sim::hz::kSpaceGm] = {PA_SIM_REGION_UB, PA_SIM_REGION_L1, PA_SIM_REGION_L0A,
                                                   PA_SIM_REGION_L0B, PA_SIM_REGION_L0C};
    sim::RecordAssign(kRegion[space], end);
    if (space == sim::hz::kSpaceUb && sim::tctx.launch->checked && begin < pto::TMP_UB_OFFSET + kFixedTempBytes &&
        end > pto::TMP_UB_OFFSET) {
        sim::Fail(PA_ERR_HAZARD, -1, int64_t(begin), int64_t(pto::TMP_UB_OFFSET),
                  "UB buffer [%llu, %llu) on core %d overlaps A2/A3's fixed temporary [%u, %llu) that row-expand "
                  "and some conversion instructions write",
                  static_cast<unsigned long long>(begin), static_cast<unsigned long long>(end), sim::tctx.core,
                  pto::TMP_UB_OFFSET, static_cast<unsigned long long>(pto::TMP_UB_OFFSET + kFixedTempBytes));
    }
}

}  // namespace pa::rec

extern "C" void pa_sim_skip_zero_padding(int32_t on) { pa::rec::g_skipZeroPadding.store(on != 0); }
