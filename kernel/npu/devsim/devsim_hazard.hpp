/*
 * The device-path simulation's hazard checker: reads the emulator's instruction stream (pa::emu::Issue: each
 * intrinsic's pipe, the bytes it reads and writes in which buffer, the flags it sets and waits, the cross-core
 * messages) and finds two accesses to the same bytes, at least one a write, that the device would not order.
 *
 * Its rules are the A2/A3 core's, nothing of this kernel's structure:
 *   - each pipe of a core (S, V, M, MTE1, MTE2, MTE3, FIX) is an in-order queue, except that the vector pipe does
 *     not interlock dependent instructions: V after V is ordered only by pipe_barrier(PIPE_V) (or PIPE_ALL);
 *   - set_flag(src, dst, e) covers src's earlier instructions, wait_flag orders dst's later ones; a set that the
 *     previous wait of the same flag is not ordered before may be lost (the source ran ahead);
 *   - the scalar unit issues every instruction, so a scalar instruction (a scalar read of on-chip memory, a
 *     wait_flag to PIPE_S, a cross-core wait) is ordered before everything issued after it;
 *   - pipe_barrier(PIPE_ALL) orders everything after it after everything before it;
 *   - a cross-core set covers its pipe's earlier work, and the wait that consumes it orders everything after it.
 * (Flags left set at kernel exit are the scheduler's TRAILING_FLAG check, on whether or not this checker is.)
 * Vector clocks per (core, pipe) agent; shadow cells of 32 bytes on chip (the UB block, a fractal row) and of 4
 * bytes in the GM buffers the kernel writes.  Execution is one core at a time (the scheduler's baton), so nothing
 * here locks.
 */
#ifndef PA_DEVSIM_HAZARD_HPP
#define PA_DEVSIM_HAZARD_HPP

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "emu_core.hpp"

namespace pa::devsim {

using Clock = std::vector<uint32_t>;
inline constexpr int kPipes = 7; /* emu::Pipe S..FIX; ALL is not an agent */

/* into = max(into, from) element-wise; `into` grows to `from`'s size (an empty clock is the zero clock). */
inline void Join(Clock &into, const Clock &from)
{
    if (into.size() < from.size()) into.resize(from.size(), 0);
    for (size_t i = 0; i < from.size(); ++i) into[i] = into[i] > from[i] ? into[i] : from[i];
}

struct WorkItem {
    int32_t seq = -1, head = -1, split = -1, unit = -1;
};

/* A violation: the text names both instructions, their cores and pipes, the buffer and the bytes. */
struct HazardError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

class Hazards {
public:
    /* `cores` emulated cores (3 per block: cube, vector 0, vector 1); `label(core)` names one in reports;
     * `describe(address)` names a GM address (argument slot and offset). */
    void Init(uint32_t cores, std::vector<std::string> labels);
    /* GM ranges whose accesses are checked (the buffers the kernel writes); others are read-only inputs. */
    void WatchGm(uint64_t start, uint64_t bytes, std::string name);
    void OnIssue(uint32_t core, const emu::Issue &issue, const WorkItem &item);
    /* The clock a cross-core set from `pipe` of `core` carries; the wait that consumes it joins it. */
    Clock Snapshot(uint32_t core, emu::Pipe pipe) const { return state_[core].vc[int(pipe)]; }
    void JoinAll(uint32_t core, const Clock &clock);

private:
    struct Epoch {
        uint32_t agent = 0, clock = 0; /* agent 0: none */
    };
    struct Cell {
        static constexpr int kReads = 3;
        Epoch w;
        Epoch r[kReads];
    };
    struct Instr {
        const char *op;
        WorkItem item;
    };
    struct FlagState {
        bool set = false;
        Clock at;
        uint32_t waitClock = 0;
    };
    struct CoreState {
        Clock vc[kPipes];
        uint32_t vDone = 0;
        FlagState flags[kPipes][kPipes][emu::kEvents];
        std::vector<Cell> onChip[6]; /* by emu::Space; GM unused */
    };
    struct GmRange {
        uint64_t start, end;
        std::string name;
    };
    static constexpr uint64_t kChipGrain = 32, kGmGrain = 4, kGmPage = 4096;

    uint32_t Agent(uint32_t core, int pipe) const { return core * kPipes + uint32_t(pipe) + 1; }
    uint32_t Tick(uint32_t core, int pipe, const char *op, const WorkItem &item);
    void JoinInto(uint32_t core, int pipe, const Clock &clock);
    void SyncScalar(uint32_t core);
    bool Ordered(uint32_t core, int pipe, uint32_t now, const Epoch &e) const;
    void Touch(uint32_t core, int pipe, uint32_t now, const emu::Access &a);
    void Visit(Cell &cell, uint32_t core, int pipe, uint32_t now, bool write, const emu::Access &a, uint64_t at);
    Cell *GmCell(uint64_t address);
    [[noreturn]] void Report(const char *what, uint32_t core, int pipe, uint32_t now, const Epoch &prior,
                             const emu::Access &a, uint64_t at);
    std::string Where(const emu::Access &a, uint64_t at) const;
    std::string Describe(uint32_t agent, uint32_t clock) const;

    std::vector<CoreState> state_;
    std::vector<std::string> labels_;
    std::vector<std::vector<Instr>> logs_; /* [agent]: the instruction at each clock tick */
    std::vector<GmRange> watched_;
    std::unordered_map<uint64_t, std::unique_ptr<Cell[]>> gm_;
    uint32_t agents_ = 0;
};

}  // namespace pa::devsim

#endif /* PA_DEVSIM_HAZARD_HPP */
