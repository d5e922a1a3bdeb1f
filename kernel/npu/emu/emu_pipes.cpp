/*
 * The pipes of an emulated core: the scalar unit issues, each pipe retires its own instructions in order, and
 * the pipes run concurrently, ordered only by flags, barriers and cross-core signals.
 *
 * With in_flight_max > 0 an issued instruction waits in its pipe's queue; after every issue the queue total is
 * cut back to a seeded random bound by retiring, one at a time, the head of a pipe whose head may go (a
 * wait_flag head only once the matching set has retired on its source pipe).  Which one: mostly the pipe ranked
 * first among those, the ranks reshuffled every kRankPeriod retirements, otherwise any at random.  Ranks let one
 * pipe run far ahead of another for a while, the schedule in which a buffer is overwritten before its reader has
 * read it; a uniform pick keeps every queue short and rarely shows that.  So a kernel
 * missing a flag computes with stale or hostile data, as on the device, instead of silently in program order.
 * What a pipe executes was decided at issue (operands checked, mask, CTRL, FMATRIX and ND_PARA captured), as
 * the device latches them when it dispatches the instruction.
 *
 * A retired cross-core set (ffts_cross_core_sync) does not send its message at once: it joins the core's outbox,
 * and after each later issue one message of the outbox, picked at random, leaves with odds 1 in kSendOdds; all
 * leave, in a random order, before a cross-core wait blocks the core (SendCrossSets) and at a drain.  So
 * consecutive sets of one core, from one pipe or several, reach their receivers in a seeded order, as
 * CrossCoreSetFlag's page allows (the device does not execute them in a guaranteed order); each still left
 * only after its own pipe's earlier work, the one ordering the page does give.
 *
 * Flags are kept twice: Core::flag in program order (the issue-time faults of emu_control.cpp) and
 * Core::landed as retirement leaves them.  A set that retires onto a landed bit is the device's lost set: a
 * HAZARD fault.  A queue whose every head waits for a flag no queued set provides is a DEADLOCK fault.
 */
#include <string>
#include <utility>

#include "emu_core.hpp"
#include "emu_ubsan.hpp"

namespace pa::emu {
namespace {

CrossSetHook g_cross_set = nullptr;
constexpr uint32_t kRankPeriod = 64;
constexpr uint64_t kSendOdds = 4; /* after an issue, one pending cross-core message leaves with odds 1 in 4 */

uint64_t Next(uint64_t &state)
{
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

std::string FlagText(const Pending &p)
{
    return std::string(PipeName(p.src)) + "->" + PipeName(p.dst) + " event " + std::to_string(p.event);
}

bool MayRetire(const Core &core, const Pending &p)
{
    return p.kind != Kind::WaitFlag || core.landed[int(p.src)][int(p.dst)][p.event] != 0;
}

/* What retiring `p` does on its pipe. */
void Retire(Core &core, Pending &p)
{
    switch (p.kind) {
        case Kind::SetFlag: {
            uint8_t &bit = core.landed[int(p.src)][int(p.dst)][p.event];
            if (bit) {
                Raise("set_flag", p.src, "event", uint64_t(p.event),
                      "HAZARD: flag " + FlagText(p) +
                          " retired while still set (its wait has not run yet): the device keeps one bit, the set is lost");
            }
            bit = 1;
            break;
        }
        case Kind::WaitFlag: core.landed[int(p.src)][int(p.dst)][p.event] = 0; break;
        case Kind::CrossSet:
            if (core.in_flight_max > 0) {
                core.outbox.push_back(std::move(p)); /* its message leaves in a seeded order (SendOne) */
            } else if (p.body) {
                p.body();
            }
            break;
        default:
            if (p.body) p.body();
            break;
    }
}

/* Retires one queued instruction: the head of a pipe picked at random among those whose head may go. */
void RetireOne(Core &core)
{
    int ready[kPipes];
    int n = 0;
    for (int pipe = 0; pipe < kPipes; ++pipe) {
        if (!core.queue[pipe].empty() && MayRetire(core, core.queue[pipe].front())) ready[n++] = pipe;
    }
    if (n == 0) {
        std::string heads;
        for (int pipe = 0; pipe < kPipes; ++pipe) {
            if (core.queue[pipe].empty()) continue;
            heads += std::string(" pipe ") + PipeName(Pipe(pipe)) + " waits for flag " + FlagText(core.queue[pipe].front()) + ";";
        }
        Raise("wait_flag", Pipe::S, "queued", core.in_flight, "DEADLOCK: no pipe can retire its next instruction:" + heads);
    }
    if (core.retired++ % kRankPeriod == 0) {
        for (int i = kPipes - 1; i > 0; --i) std::swap(core.pipe_rank[i], core.pipe_rank[Next(core.retire_state) % uint64_t(i + 1)]);
    }
    int pick = 0;
    const uint64_t draw = Next(core.retire_state);
    if (n > 1 && draw % 4 == 0) {
        pick = int((draw >> 8) % uint64_t(n));
    } else {
        for (int i = 1; i < n; ++i) {
            if (core.pipe_rank[ready[i]] < core.pipe_rank[ready[pick]]) pick = i;
        }
    }
    const int pipe = ready[pick];
    Pending p = std::move(core.queue[pipe].front());
    core.queue[pipe].pop_front();
    --core.in_flight;
    if (p.kind == Kind::CrossSet) --core.cross_in_flight;
    Retire(core, p);
}

/* One pending cross-core message leaves the core: any of those pending, picked by the seed. */
void SendOne(Core &core)
{
    const size_t pick = size_t(Next(core.retire_state) % uint64_t(core.outbox.size()));
    Pending p = std::move(core.outbox[pick]);
    core.outbox.erase(core.outbox.begin() + std::ptrdiff_t(pick));
    if (p.body) p.body();
}

void SendAll(Core &core)
{
    while (!core.outbox.empty()) SendOne(core);
}

}  // namespace

void SetCrossSetHook(CrossSetHook hook) { g_cross_set = hook; }

void SetPipeReorder(Core &core, uint32_t inFlightMax, uint64_t seed)
{
    core.in_flight_max = inFlightMax;
    core.retire_state = seed ^ 0x27d4eb2f165667c5ull;
    for (int pipe = 0; pipe < kPipes; ++pipe) core.pipe_rank[pipe] = uint8_t(pipe);
    core.retired = 0;
}

void Dispatch(Pipe pipe, Pending entry)
{
    Core &core = Current();
    if (core.in_flight_max == 0 || pipe == Pipe::S) { /* the scalar unit's own instructions retire at issue */
        if (!MayRetire(core, entry)) {
            Raise("wait_flag", pipe, "event", uint64_t(entry.event),
                  "DEADLOCK: waits for flag " + FlagText(entry) + " that no earlier instruction set");
        }
        Retire(core, entry);
        return;
    }
    if (entry.kind == Kind::CrossSet) ++core.cross_in_flight;
    core.queue[int(pipe)].push_back(std::move(entry));
    ++core.in_flight;
    const uint64_t draw = Next(core.retire_state);
    const uint64_t bound = draw % 8 == 0 ? (draw >> 8) % (uint64_t(core.in_flight_max) + 1) : core.in_flight_max;
    while (core.in_flight > bound) RetireOne(core);
    if (!core.outbox.empty() && Next(core.retire_state) % kSendOdds == 0) SendOne(core);
}

void Execute(const Issue &issue, std::function<void()> body)
{
    Report(issue);
    Dispatch(issue.pipe, {Kind::Work, issue.pipe, issue.pipe, -1, std::move(body)});
}

void Drain()
{
    RaisePendingConversion(); /* the kernel's end (PIPE_ALL and the core's last drain) */
    Core &core = Current();
    while (core.in_flight > 0) RetireOne(core);
    SendAll(core);
}

void SendCrossSets()
{
    Core &core = Current();
    while (core.cross_in_flight > 0) RetireOne(core);
    SendAll(core);
}

void RetireUntilLanded(Pipe src, Pipe dst, int event)
{
    Core &core = Current();
    while (!core.landed[int(src)][int(dst)][event]) {
        if (core.in_flight == 0) {
            Raise("wait_flag", dst, "event", uint64_t(event),
                  std::string("DEADLOCK: waits for flag ") + PipeName(src) + "->" + PipeName(dst) +
                      " and no queued instruction sets it");
        }
        RetireOne(core);
    }
    core.landed[int(src)][int(dst)][event] = 0;
}

void CrossSetRetired(const Issue &issue)
{
    if (g_cross_set != nullptr) g_cross_set(issue);
}

}  // namespace pa::emu
