/*
 * The state of an emulated A2/A3 AI core and the checks every intrinsic shares.
 *
 * An AI core here is one cube core or one of its two vector cores, each with the on-chip buffers that core
 * has (vector: UB; cube: L1, L0A, L0B, L0C), sized from a per-SoC table, and the control state the
 * intrinsics read (vector mask and its mode, CTRL, the FMATRIX registers, ND_PARA, intra-core flags,
 * cross-core counters).  Global memory is host memory.
 *
 * On-chip operands arrive as pointers whose value is the byte offset in their buffer, as on the device
 * (pto-isa's TASSIGN turns the integer offset into the tile's pointer).  Because an offset-0 tile would be a
 * null pointer, which pto-isa's cost-model build replaces by a host allocation, callers may set kOnChipTag
 * in the value; the decoder strips it.  A value of 2^32 or more without the tag is a host pointer where an
 * on-chip address was expected: a fault.
 *
 * A fault is a C++ exception (pa::emu::Fault) naming the intrinsic, the core, the pipe, the operand and the
 * value; the C entry points catch it and return an error code, so nothing here aborts or wraps silently.
 */
#ifndef PA_EMU_CORE_HPP
#define PA_EMU_CORE_HPP

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace pa::emu {

enum class Space : uint8_t { GM, UB, L1, L0A, L0B, L0C };
enum class Pipe : uint8_t { S, V, M, MTE1, MTE2, MTE3, FIX, ALL };
enum class CoreKind : uint8_t { Cube, Vector };

inline constexpr uint64_t kOnChipTag = 1ull << 56;
inline constexpr uint64_t kHostPointerFloor = 1ull << 32;
inline constexpr int kPipes = 8;
inline constexpr int kEvents = 8;
inline constexpr int kCrossFlags = 16;
inline constexpr int kCrossCounterMax = 15;

const char *SpaceName(Space space);
const char *PipeName(Pipe pipe);

/* Buffer sizes and cluster counts per SoC (A2: Atlas 800T/900 A2 = 910B1..B4; A3: one die). */
struct SocSpec {
    const char *name;
    uint32_t ub_bytes, l1_bytes, l0a_bytes, l0b_bytes, l0c_bytes;
    int clusters;
};
const SocSpec &Soc(const char *name);

/* The store-atomic mode (CCE "Atomic原子操作"): GM stores of UB (MTE3) and L0C (FIX) data add, max or min into GM. */
enum class StoreAtomicOp : uint8_t { None, Add, Max, Min };
enum class StoreAtomicType : uint8_t { F32, F16, Bf16, S32, S16, S8 };

/* An instruction issued to a pipe and not yet retired (emu_pipes.cpp): its operands were checked and its
 * mode state captured at issue; `body` moves the data when the pipe retires it. */
enum class Kind : uint8_t;
struct Pending {
    Kind kind;
    Pipe src, dst;
    int event = -1;
    std::function<void()> body;
};

/* initcheck (emu_initcheck.hpp): per byte of each on-chip buffer, 0 when written in this launch from data that
 * derives from written bytes only, kUnwritten when never written, else the id of the origin of the unwritten data
 * the byte derives from (origins[id - 1]: the first instruction that read unwritten bytes, its region and offset). */
using Taint = uint16_t;
struct InitOrigin {
    const char *intrinsic;
    Space space;
    uint64_t offset;
};
struct InitShadow {
    bool on = false;
    std::vector<Taint> ub, l1, l0a, l0b, l0c;
    std::vector<InitOrigin> origins;
    std::map<std::tuple<const char *, Space, uint64_t>, Taint> known; /* an origin seen again keeps its id */
};

struct Core {
    CoreKind kind = CoreKind::Vector;
    int block = 0;
    int sub = 0;
    std::vector<uint8_t> ub, l1, l0a, l0b, l0c;
    bool mask_counter = false;             /* set_mask_count / set_mask_norm */
    uint64_t mask_hi = ~0ull, mask_lo = ~0ull;
    uint64_t ctrl = 0;                     /* CTRL: bit 48 float saturation off when 1 (the only bit A2/A3 documents) */
    uint64_t fmatrix = 0, fmatrix_b = 0;   /* set_fmatrix / set_fmatrix_b */
    bool fmatrix_set = false, fmatrix_b_set = false;
    uint64_t nd_para = 0;                  /* set_nd_para */
    bool nd_para_set = false;
    bool check_mad_inputs = true;          /* mad faults on a non-finite operand element (emu_cube.cpp) */
    /* Store atomics (emu_atomic.cpp): the operation and element type GM stores apply (set_atomic_*), and whether
     * each was set in this launch (false: what the previous kernel on the core left, RandomiseModeState). */
    StoreAtomicOp atomic_op = StoreAtomicOp::None;
    StoreAtomicType atomic_type = StoreAtomicType::F32;
    bool atomic_op_set = true, atomic_type_set = false;
    uint8_t flag[kPipes][kPipes][kEvents] = {};
    uint8_t cross[kCrossFlags] = {};
    uint64_t ffts_base = 0;
    /* The pipes (emu_pipes.cpp): with in_flight_max = 0 every instruction executes at issue, in program order;
     * above 0 up to that many wait in per-pipe queues and retire in a seeded order the flags permit. */
    std::deque<Pending> queue[kPipes];
    uint8_t landed[kPipes][kPipes][kEvents] = {}; /* flags as the pipes retire their sets and waits */
    uint32_t in_flight = 0, in_flight_max = 0, cross_in_flight = 0;
    uint64_t retire_state = 0;
    uint8_t pipe_rank[kPipes] = {};  /* which pipe runs ahead for now: reshuffled every kRankPeriod retirements */
    uint32_t retired = 0;
    /* Cross-core sets their pipe retired whose message has not left yet: they leave in a seeded order, so two
     * pending together may overtake each other (emu_pipes.cpp). */
    std::vector<Pending> outbox;
    InitShadow init;
};

/* A core of `kind` for `soc`, its buffers filled with a seeded hostile pattern (never zero: NaN payloads and
 * random bytes), as on-chip memory is on a device after the previous kernel. */
Core MakeCore(const SocSpec &soc, CoreKind kind, int block, int sub, uint64_t seed);
Core &Current();
void SetCurrent(Core *core);

struct Fault : std::runtime_error {
    using std::runtime_error::runtime_error;
};

[[noreturn]] void Raise(const char *intrinsic, Pipe pipe, const char *operand, uint64_t value,
                        const std::string &why);
/* The value must fit an unsigned field of `bits` bits. */
void CheckField(const char *intrinsic, Pipe pipe, const char *field, uint64_t value, unsigned bits);
void CheckRange(const char *intrinsic, Pipe pipe, const char *field, uint64_t value, uint64_t lo, uint64_t hi);

/* Bytes [offset, offset + bytes) of an on-chip operand in `space` of the current core; checks that the core
 * has that buffer, the alignment (bytes) and the bounds. */
uint8_t *OnChip(Space space, const void *ptr, uint64_t bytes, unsigned align, const char *intrinsic, Pipe pipe,
                const char *operand);
/* The on-chip buffer `space` of `core` (null for GM). */
std::vector<uint8_t> *Buffer(Core &core, Space space);
/* The byte offset an on-chip pointer stands for (no bounds check). */
uint64_t OnChipOffset(const void *ptr, const char *intrinsic, Pipe pipe, const char *operand);
uint8_t *Gm(const void *ptr, uint64_t bytes, const char *intrinsic, Pipe pipe, const char *operand);
void RegisterGm(const void *ptr, uint64_t bytes);
void ClearGm();

/* The instruction stream, for a hazard checker: every intrinsic reports its pipe and what it touched. */
struct Access {
    Space space;
    uint64_t start;
    uint64_t bytes;
    bool write;
};
/* What an instruction means for ordering: most are Work on their pipe; the rest carry their operands. */
enum class Kind : uint8_t {
    Work,        /* an instruction on `pipe` touching `accesses` */
    SetFlag,     /* set_flag(src, dst, event): issued on src */
    WaitFlag,    /* wait_flag(src, dst, event): blocks dst */
    Barrier,     /* pipe_barrier(pipe); Pipe::ALL orders every pipe */
    CrossSet,    /* ffts_cross_core_sync(pipe, config) */
    CrossWait,   /* wait_flag_dev(event): blocks every later instruction of the core */
    ScalarRead,  /* the scalar unit reads on-chip memory (stalls issue until the value arrives) */
};
struct Issue {
    const char *intrinsic;
    Pipe pipe;
    std::vector<Access> accesses;
    Kind kind = Kind::Work;
    Pipe src = Pipe::S, dst = Pipe::S;
    int event = -1;
    uint64_t config = 0;
    /* What the timing model prices a work instruction by (devsim's trace): a GM transfer {bursts, bytes per
     * burst}, mad {m, k, n}, a vector instruction {repeats it executes}; 0 where not set. */
    uint32_t shape[3] = {0, 0, 0};
};
/* A work instruction with its shape (Issue::shape). */
inline Issue Work(const char *intrinsic, Pipe pipe, std::vector<Access> accesses, uint64_t s0, uint64_t s1 = 0,
                  uint64_t s2 = 0)
{
    Issue issue{intrinsic, pipe, std::move(accesses)};
    issue.shape[0] = uint32_t(s0);
    issue.shape[1] = uint32_t(s1);
    issue.shape[2] = uint32_t(s2);
    return issue;
}
/* `count` runs of `bytes` bytes, `stride` bytes apart from `start`, as accesses (one when they are contiguous):
 * a strided transfer reports the bytes it touches, not its span, so the hazard checker sees no false overlap. */
void AddStrided(std::vector<Access> &accesses, Space space, uint64_t start, uint64_t count, uint64_t bytes,
                uint64_t stride, bool write);
using IssueHook = void (*)(const Issue &);
void SetIssueHook(IssueHook hook);
void Report(const Issue &issue);

/* The pipes of the current core (emu_pipes.cpp).  Execute reports `issue` (program order: what the hazard
 * checker reads) and hands `body` to the issue's pipe; the other entries are the flag and cross-core
 * instructions' pipe halves.  Drain retires everything queued (PIPE_ALL barrier, kernel end); SendCrossSets
 * retires until no cross-core set is queued (before a cross-core wait blocks the scalar unit: the pipes go on
 * on the device, and another core may be waiting for this one's message); RetireUntilLanded retires until a
 * flag to the scalar unit lands (wait_flag(x, S)). */
void Execute(const Issue &issue, std::function<void()> body);
void Dispatch(Pipe pipe, Pending entry);
void Drain();
void SendCrossSets();
void RetireUntilLanded(Pipe src, Pipe dst, int event);
/* Up to `inFlightMax` instructions of `core` wait in its pipes, retired in the order `seed` picks among those
 * the flags permit (0: program order, the emulator's default). */
void SetPipeReorder(Core &core, uint32_t inFlightMax, uint64_t seed);
/* Called when a pipe retires an ffts_cross_core_sync (the message leaves the core): a scheduler's delivery. */
using CrossSetHook = void (*)(const Issue &);
void SetCrossSetHook(CrossSetHook hook);
void CrossSetRetired(const Issue &issue);

/* A cross-core message reaches `core`'s counter of `flag` (the scheduler's delivery): past 15 (4 bits) is a fault
 * naming `who`, the flag and the count. */
void RaiseCrossCounter(Core &core, int flag, const std::string &who);
/* TRAILING_FLAG at kernel exit: an intra-core flag still set (`intra`), or a cross-core counter not back at 0
 * (`cross`); the fault names `who`, the pipe pair or the cross-core flag id, and the flag. */
void CheckTrailingFlags(const Core &core, const std::string &who, bool intra, bool cross);

/* Who may raise a cross-core counter a wait finds at 0: a scheduler running the other cores returns true
 * once it has (the wait then proceeds); without one such a wait is a deadlock. */
using CrossWaitHook = bool (*)(int flag);
void SetCrossWaitHook(CrossWaitHook hook);

/* A scalar load of `bytes` (1, 2, 4 or 8) from the current core's on-chip `space` at `ptr` (a tagged offset), as the
 * scalar unit's load of a __ubuf__/__cbuf__ pointer: reported as a ScalarRead on the S pipe. */
uint64_t ScalarLoad(Space space, const void *ptr, unsigned bytes);

/* The store-atomic mode a GM store of `elemBytes`-byte elements latches at issue (emu_atomic.cpp): faults when the
 * mode is inherited from the previous kernel, its type does not match the element, or the path does not document
 * the operation (`fixpipe`: L0C -> GM takes only add). */
struct StoreAtomic {
    StoreAtomicOp op;
    StoreAtomicType type;
};
StoreAtomic LatchStoreAtomic(const char *intrinsic, Pipe pipe, uint32_t elemBytes, bool fixpipe);
/* Writes `bytes` bytes of elements from `src` to GM at `dst` under `mode` (a copy when op is None); a non-finite
 * float operand or result and an integer overflow fault (the device's handling is not published). */
void StoreWithAtomic(const StoreAtomic &mode, uint8_t *dst, const uint8_t *src, uint64_t bytes, const char *intrinsic,
                     Pipe pipe);

/* The mode state a kernel finds at entry on a device is whatever the previous kernel on that core left: vector
 * mask mode and bits, CTRL, FMATRIX, ND_PARA, the store-atomic mode.  Randomised from `seed` (flags and cross-core counters stay
 * clear: a kernel that ends with one pending is a defect the checker reports). */
void RandomiseModeState(Core &core, uint64_t seed);

}  // namespace pa::emu

#endif /* PA_EMU_CORE_HPP */
