/*
 * Control intrinsics: vector mask and its mode, CTRL, intra-core flags and barriers, cross-core counters,
 * core ids; plus the field check every intrinsic's Field<T> arguments go through.
 *
 * Flags are checked in program order at issue (one instruction stream per core): a set of a (src, dst, event)
 * bit already set is a fault (the device leaves it undefined and a later PIPE_ALL barrier hangs), and a wait on
 * a bit nobody set is a deadlock in program order, also a fault.  Their pipe halves then go to the pipes
 * (emu_pipes.cpp), which retire them as the device would.  A cross-core wait that finds its counter at 0 first
 * lets the core's queued cross-core sets leave (the pipes keep running while the scalar unit waits) and then, on a
 * zero counter, asks the scheduler hook (a simulation that runs the other cores); it faults as a deadlock when
 * there is none.  A counter holds 0-15 (RaiseCrossCounter); at kernel exit every flag must be back at rest
 * (CheckTrailingFlags: msSanitizer's synccheck reports the same leftovers on a device).
 */
#include <string>

#include "emu_core.hpp"
#include "emu_intrinsics.hpp"

namespace pa::emu {

template <typename T>
T Field<T>::Get(const char *intrinsic, int pipe, const char *name) const
{
    if (negative) Raise(intrinsic, Pipe(pipe), name, raw, "negative value for an unsigned field");
    CheckField(intrinsic, Pipe(pipe), name, raw, unsigned(8 * sizeof(T)));
    return static_cast<T>(raw);
}
template struct Field<uint8_t>;
template struct Field<uint16_t>;
template struct Field<uint32_t>;

void Unemulated(const char *intrinsic)
{
    Raise(intrinsic, Pipe::S, "intrinsic", 0, "not executed by the emulator (no row in SEMANTICS.md)");
}

void Trap() { Raise("trap", Pipe::S, "assert", 0, "a pto-isa run-time check failed (trap)"); }

namespace {
CrossWaitHook g_cross_wait = nullptr;

/* pipe_t values of the device toolchain as pto-isa's qualifiers define them, plus PIPE_FIX (7 here). */
Pipe PipeOf(int pipe, const char *intrinsic)
{
    switch (pipe) {
        case 0: return Pipe::S;
        case 1: return Pipe::V;
        case 2: return Pipe::MTE1;
        case 3: return Pipe::MTE2;
        case 4: return Pipe::MTE3;
        case 5: return Pipe::M;
        case 6: return Pipe::ALL;
        case 7: return Pipe::FIX;
        default: Raise(intrinsic, Pipe::S, "pipe", uint64_t(pipe), "not a pipe");
    }
}
}  // namespace

void SetCrossWaitHook(CrossWaitHook hook) { g_cross_wait = hook; }

void RaiseCrossCounter(Core &core, int flag, const std::string &who)
{
    CheckRange("ffts_cross_core_sync", Pipe::S, "flag", uint64_t(flag), 0, kCrossFlags - 1);
    uint8_t &counter = core.cross[flag];
    if (counter >= kCrossCounterMax) {
        throw Fault("emu fault: ffts_cross_core_sync: the cross-core counter of flag " + std::to_string(flag) + " on " +
                    who + " is already " + std::to_string(counter) +
                    " (0-15, 4 bits): one more set is an error on the device (CrossCoreSetFlag)");
    }
    ++counter;
}

void CheckTrailingFlags(const Core &core, const std::string &who, bool intra, bool cross)
{
    for (int s = 0; intra && s < kPipes; ++s) {
        for (int d = 0; d < kPipes; ++d) {
            for (int e = 0; e < kEvents; ++e) {
                if (!core.flag[s][d][e]) continue;
                throw Fault("TRAILING_FLAG (HAZARD): " + who + " ends with flag " + PipeName(Pipe(s)) + "->" +
                            PipeName(Pipe(d)) + " event " + std::to_string(e) +
                            " still set (a set without its wait): the next kernel on this core finds it set");
            }
        }
    }
    for (int f = 0; cross && f < kCrossFlags; ++f) {
        if (core.cross[f] == 0) continue;
        throw Fault("TRAILING_FLAG (HAZARD): " + who + " ends with cross-core flag " + std::to_string(f) +
                    "'s counter at " + std::to_string(core.cross[f]) +
                    " (sets without their waits): the next kernel on this core starts with it raised");
    }
}

}  // namespace pa::emu

using namespace pa::emu;

void set_mask_count()
{
    Current().mask_counter = true;
    Report({"set_mask_count", Pipe::S, {}});
}

void set_mask_norm()
{
    Current().mask_counter = false;
    Report({"set_mask_norm", Pipe::S, {}});
}

void set_vector_mask(uint64_t maskHigh, uint64_t maskLow)
{
    Core &core = Current();
    core.mask_hi = maskHigh;
    core.mask_lo = maskLow;
    Report({"set_vector_mask", Pipe::S, {}});
}

int64_t get_ctrl()
{
    Report({"get_ctrl", Pipe::S, {}});
    return int64_t(Current().ctrl);
}

void set_ctrl(uint64_t config)
{
    Current().ctrl = config;
    Report({"set_ctrl", Pipe::S, {}});
}

int64_t sbitset0(int64_t value, int64_t bit)
{
    CheckRange("sbitset0", Pipe::S, "bit", uint64_t(bit), 0, 63);
    return int64_t(uint64_t(value) & ~(1ull << bit));
}

int64_t sbitset1(int64_t value, int64_t bit)
{
    CheckRange("sbitset1", Pipe::S, "bit", uint64_t(bit), 0, 63);
    return int64_t(uint64_t(value) | (1ull << bit));
}

void pipe_barrier(int pipe)
{
    const Pipe p = PipeOf(pipe, "pipe_barrier");
    if (p == Pipe::S) Raise("pipe_barrier", p, "pipe", uint64_t(pipe), "PIPE_S has no barrier");
    Issue issue{"pipe_barrier", p, {}};
    issue.kind = Kind::Barrier;
    Report(issue);
    if (p == Pipe::ALL) Drain(); /* one pipe retires in order: its own barrier needs nothing more here */
}

void set_flag(int srcPipe, int dstPipe, int event)
{
    const Pipe src = PipeOf(srcPipe, "set_flag"), dst = PipeOf(dstPipe, "set_flag");
    CheckRange("set_flag", src, "event", uint64_t(event), 0, kEvents - 1);
    uint8_t &bit = Current().flag[int(src)][int(dst)][event];
    if (bit) {
        Raise("set_flag", src, "event", uint64_t(event),
              std::string("HAZARD: flag ") + PipeName(src) + "->" + PipeName(dst) +
                  " set twice without a wait (the device keeps one bit: the second set is lost)");
    }
    bit = 1;
    Report({"set_flag", src, {}, Kind::SetFlag, src, dst, event});
    Dispatch(src, {Kind::SetFlag, src, dst, event, {}});
}

void wait_flag(int srcPipe, int dstPipe, int event)
{
    const Pipe src = PipeOf(srcPipe, "wait_flag"), dst = PipeOf(dstPipe, "wait_flag");
    CheckRange("wait_flag", dst, "event", uint64_t(event), 0, kEvents - 1);
    uint8_t &bit = Current().flag[int(src)][int(dst)][event];
    if (!bit) {
        Raise("wait_flag", dst, "event", uint64_t(event),
              std::string("DEADLOCK: waits for flag ") + PipeName(src) + "->" + PipeName(dst) +
                  " that no earlier instruction of this core set");
    }
    bit = 0;
    Report({"wait_flag", dst, {}, Kind::WaitFlag, src, dst, event});
    if (dst == Pipe::S) {
        RetireUntilLanded(src, dst, event); /* the scalar unit stalls until the set retires */
    } else {
        Dispatch(dst, {Kind::WaitFlag, src, dst, event, {}});
    }
}

void ffts_cross_core_sync(int pipe, uint64_t config)
{
    const Pipe p = PipeOf(pipe, "ffts_cross_core_sync");
    if (p == Pipe::S || p == Pipe::ALL) {
        Raise("ffts_cross_core_sync", p, "pipe", uint64_t(pipe), "must be V, M, MTE1, MTE2, MTE3 or FIX");
    }
    CheckField("ffts_cross_core_sync", p, "config", config, 16);
    if ((config & 1) == 0) Raise("ffts_cross_core_sync", p, "config", config, "bit 0 (valid) is clear");
    const Issue issue{"ffts_cross_core_sync", p, {}, Kind::CrossSet, p, p, int((config >> 8) & 0xf), config};
    Report(issue);
    /* The message leaves when the pipe retires it; the counters of the receiving cores are the scheduler's (a
     * simulation of several cores, CrossSetHook); alone, it is recorded by the issue hook only. */
    Dispatch(p, {Kind::CrossSet, p, p, issue.event, [issue] { CrossSetRetired(issue); }});
}

void wait_flag_dev(int64_t flagId)
{
    CheckRange("wait_flag_dev", Pipe::S, "flag", uint64_t(flagId), 0, kCrossFlags - 1);
    Core &core = Current();
    if (core.cross[flagId] == 0) SendCrossSets(); /* about to block: the pipes go on and send what is queued */
    if (core.cross[flagId] == 0 && (g_cross_wait == nullptr || !g_cross_wait(int(flagId)))) {
        Raise("wait_flag_dev", Pipe::S, "flag", uint64_t(flagId),
              "DEADLOCK: the cross-core counter is 0 and no other core can raise it");
    }
    --core.cross[flagId];
    Report({"wait_flag_dev", Pipe::S, {}, Kind::CrossWait, Pipe::S, Pipe::S, int(flagId)});
}

void set_ffts_base_addr(uint64_t address)
{
    CheckField("set_ffts_base_addr", Pipe::S, "address", address, 48);
    Current().ffts_base = address;
    Report({"set_ffts_base_addr", Pipe::S, {}});
}

int64_t get_block_idx() { return Current().block; }
int64_t get_subblockid() { return Current().sub; }
