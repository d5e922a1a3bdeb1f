/*
 * Hazard checker of the CPU simulation (checked mode): finds two accesses to the same bytes, at least one a
 * write, that the device would not order.
 *
 * The simulation runs each core's instructions one after another, so it computes right even where the
 * device would race.  The checker records, per core and in program order, every instruction's pipe and the
 * byte ranges it reads and writes (UB, L1, L0A, L0B, L0C and the writable GM buffers), every
 * set_flag/wait_flag/pipe_barrier and every cross-core signal and wait, and keeps a vector clock per pipe
 * queue ("agent" = one pipe of one core).  The ordering rules are the device's:
 *   - a pipe is an in-order queue: MTE2, MTE1, M, FIX, MTE3 and S complete their instructions in order;
 *     the vector pipe does not interlock dependent instructions: V after V needs pipe_barrier(PIPE_V)
 *     (or a flag round trip through another pipe);
 *   - set_flag(src, dst, id) covers src's earlier instructions; wait_flag orders only dst's later ones;
 *     one bit per (src, dst, id), ids 0..7: a second set before the wait, a wait with no set (the device
 *     would hang) and a flag still set when the core exits are errors, and so is a set that the previous
 *     wait of the same flag is not ordered before (the source pipe may run ahead and set the bit while it is
 *     still set: the set is lost, as when two ping-pong halves share one event id);
 *   - pipe_barrier(PIPE_ALL) orders everything after it after everything before it;
 *   - a scalar read (GetValue) stalls issue, so it is ordered before every later instruction; a scalar
 *     write is not (it needs set_flag(PIPE_S, dst));
 *   - a cross-core signal covers only earlier work of the pipe it is issued from; a cross-core wait
 *     orders everything after it; a scalar read of GM another core wrote needs a cache invalidate (dcci)
 *     after the wait that ordered the write.
 * A violation fails the launch with PA_ERR_HAZARD, naming both instructions, their pipes, the region and
 * byte range, the core, the task and the hand-off unit.
 */
#ifndef PA_SIM_HAZARD_HPP
#define PA_SIM_HAZARD_HPP

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace pa::sim {

struct Launch;

namespace hz {

/* Pipes of one core, in the order the checker numbers them. */
enum Pipe : uint8_t { kPipeS, kPipeMte2, kPipeMte1, kPipeM, kPipeFix, kPipeV, kPipeMte3, kPipes };
/* What an access touches: an on-chip region of the issuing core, or a GM argument slot. */
enum Space : uint8_t { kSpaceUb, kSpaceL1, kSpaceL0a, kSpaceL0b, kSpaceL0c, kSpaceGm, kSpaces };

const char *PipeName(int pipe);

/* rows x rowBytes bytes at `base`, rows `pitchBytes` apart (GM: byte offset inside slot `slot`). */
struct Access {
    uint8_t space;
    bool write;
    int32_t slot;
    uint64_t base, rows, rowBytes, pitchBytes;
};

using Clock = std::vector<uint32_t>;

/* An access stamp: which agent (core, role, pipe), at which of its clock ticks. 0 = none. */
struct Epoch {
    uint32_t agent = 0, clock = 0;
};

/* The shadow of one granule: its last write and the reads since that no later read subsumes. */
struct Cell {
    static constexpr int kReads = 3;
    Epoch w;
    Epoch r[kReads];
};

/* What is known of an instruction, for the report. */
struct Instr {
    const char *op;
    int32_t seq, head, split, unit;
};

/* Append-only per-agent instruction log with stable storage: other threads read old entries while the
 * owner appends (the GM shadow's mutex orders the append before the read). */
class InstrLog {
public:
    static constexpr uint32_t kChunk = 1u << 14, kMaxChunks = 1u << 12;
    void Append(const Instr &in);
    const Instr *At(uint32_t clock) const; /* the instruction that got this clock tick, or nullptr */

private:
    std::unique_ptr<std::unique_ptr<Instr[]>[]> chunks_{new std::unique_ptr<Instr[]>[kMaxChunks]};
    uint32_t size_ = 0;
};

/* Shadow of one writable GM slot, granule = its element size; chunks allocated on first touch. */
struct GmShadow {
    static constexpr uint64_t kChunkCells = 1u << 14;
    std::mutex mu;
    uint32_t grain = 4;
    uint64_t cells = 0;
    std::vector<std::unique_ptr<Cell[]>> chunks;
    Cell &At(uint64_t cell);
};

/* Everything the checker keeps per launch (owned by the Launch). */
struct LaunchState {
    uint32_t agents = 0;
    std::vector<InstrLog> logs; /* [agent] */
    std::vector<std::unique_ptr<GmShadow>> gm; /* [slot]; null for read-only slots */
    std::mutex barMu;
    Clock barJoin, barReady; /* all-vector barrier: the join of this generation's signals, and the last one's */
};

void InitLaunch(Launch &L);

/* One core role's pipes, flags and on-chip shadows; lives in the role's thread. */
class Role {
public:
    Role(Launch &L, uint32_t core, int32_t role);
    void Issue(int pipe, const char *op, const Access *acc, int n);
    void SetFlag(int src, int dst, int event);
    void WaitFlag(int src, int dst, int event);
    void Barrier(int pipe); /* kPipes = PIPE_ALL */
    void InvalidateCache();
    Clock Snapshot(int pipe) const { return vc_[pipe]; }
    void JoinAll(const Clock &c);
    void Finish(); /* at core exit: every flag waited for */

private:
    uint32_t Agent(int pipe) const { return base_ + uint32_t(pipe); }
    bool Ordered(const Epoch &e, int pipe, uint32_t clock) const;
    void CheckRange(const Access &a, int pipe, uint32_t clock, const char *op);
    void Visit(Cell &c, const Access &a, uint64_t addr, int pipe, uint32_t clock, const char *op, bool scalarGm);
    [[noreturn]] void Report(const char *kind, const Access &a, uint64_t addr, const Epoch &prior, int pipe,
                             const char *op);
    Launch &L_;
    LaunchState &st_;
    uint32_t core_;
    int32_t role_;
    uint32_t base_;
    Clock vc_[kPipes];
    uint32_t vDone_ = 0; /* V instructions up to this clock are complete as far as later V ones know */
    Clock dcci_;         /* what the last cache invalidate made visible to scalar reads */
    struct Flag {
        bool set = false;
        Clock at;                /* the source pipe's clock at the set */
        uint32_t waitClock = 0;  /* the destination pipe's tick of the last wait (0: none yet) */
    };
    Flag flags_[kPipes][kPipes][8];
    std::vector<Cell> onChip_[kSpaceGm];
};

}  // namespace hz
}  // namespace pa::sim

#endif /* PA_SIM_HAZARD_HPP */
