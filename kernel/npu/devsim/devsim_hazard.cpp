/* The device-path hazard checker (see devsim_hazard.hpp for its rules). */
#include "devsim_hazard.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

namespace pa::devsim {

using emu::Kind;
using emu::Pipe;
using emu::Space;

namespace {
constexpr int kS = int(Pipe::S), kV = int(Pipe::V);
}  // namespace

void Hazards::Init(uint32_t cores, std::vector<std::string> labels)
{
    agents_ = cores * kPipes + 1;
    labels_ = std::move(labels);
    state_.assign(cores, CoreState{});
    logs_.assign(agents_, {});
    for (CoreState &st : state_) {
        for (Clock &c : st.vc) c.assign(agents_, 0);
    }
    watched_.clear();
    gm_.clear();
}

void Hazards::WatchGm(uint64_t start, uint64_t bytes, std::string name)
{
    if (bytes > 0) watched_.push_back({start, start + bytes, std::move(name)});
}

uint32_t Hazards::Tick(uint32_t core, int pipe, const char *op, const WorkItem &item)
{
    const uint32_t agent = Agent(core, pipe);
    uint32_t &mine = state_[core].vc[pipe][agent];
    ++mine;
    logs_[agent].push_back({op, item});
    return mine;
}

/* Join `clock` into `pipe`'s: what another pipe knew complete (V's own earlier instructions included, after a
 * flag round trip) is now ordered before `pipe`'s later instructions. */
void Hazards::JoinInto(uint32_t core, int pipe, const Clock &clock)
{
    CoreState &st = state_[core];
    Join(st.vc[pipe], clock);
    if (pipe == kV) st.vDone = std::max(st.vDone, clock[Agent(core, kV)]);
}

/* The scalar unit issues everything: what it did is ordered before every later instruction of the core. */
void Hazards::SyncScalar(uint32_t core)
{
    const Clock scalar = state_[core].vc[kS];
    for (int p = 0; p < kPipes; ++p) {
        if (p != kS) JoinInto(core, p, scalar);
    }
}

void Hazards::JoinAll(uint32_t core, const Clock &clock)
{
    for (int p = 0; p < kPipes; ++p) JoinInto(core, p, clock);
}

bool Hazards::Ordered(uint32_t core, int pipe, uint32_t now, const Epoch &e) const
{
    if (e.agent == 0) return true;
    const uint32_t self = Agent(core, pipe);
    if (e.agent == self) {
        if (e.clock == now) return true;                      /* the same instruction */
        return pipe != kV || e.clock <= state_[core].vDone;  /* V does not interlock without a barrier */
    }
    return e.clock <= state_[core].vc[pipe][e.agent];
}

void Hazards::OnIssue(uint32_t core, const emu::Issue &issue, const WorkItem &item)
{
    CoreState &st = state_[core];
    const int pipe = int(issue.pipe);
    switch (issue.kind) {
        case Kind::Barrier: {
            if (issue.pipe == Pipe::ALL) {
                Clock all(agents_, 0);
                for (const Clock &c : st.vc) Join(all, c);
                for (Clock &c : st.vc) c = all;
                st.vDone = st.vc[kV][Agent(core, kV)];
            } else if (pipe == kV) {
                st.vDone = st.vc[kV][Agent(core, kV)];
            }
            return;
        }
        case Kind::SetFlag: {
            const int src = int(issue.src), dst = int(issue.dst);
            Tick(core, src, issue.intrinsic, item);
            FlagState &f = st.flags[src][dst][issue.event];
            if (f.waitClock != 0 && f.waitClock > st.vc[src][Agent(core, dst)]) {
                char text[320];
                std::snprintf(text, sizeof text,
                              "HAZARD: set_flag(%s -> %s, event %d) on %s may be lost: the previous wait_flag of that "
                              "flag (%s) is not ordered before it, so %s may set the bit while it is still set",
                              emu::PipeName(issue.src), emu::PipeName(issue.dst), issue.event, labels_[core].c_str(),
                              Describe(Agent(core, dst), f.waitClock).c_str(), emu::PipeName(issue.src));
                throw HazardError(text);
            }
            f.set = true;
            f.at = st.vc[src];
            if (src == kS) SyncScalar(core);
            return;
        }
        case Kind::WaitFlag: {
            const int src = int(issue.src), dst = int(issue.dst);
            FlagState &f = st.flags[src][dst][issue.event];
            const uint32_t now = Tick(core, dst, issue.intrinsic, item);
            if (f.set) JoinInto(core, dst, f.at);
            f.set = false;
            f.waitClock = now;
            if (dst == kS) SyncScalar(core);
            return;
        }
        case Kind::CrossSet:
            Tick(core, pipe, issue.intrinsic, item);
            return;
        case Kind::CrossWait:
            Tick(core, kS, issue.intrinsic, item);
            SyncScalar(core);
            return;
        case Kind::ScalarRead:
        case Kind::Work: {
            if (issue.accesses.empty() && pipe == kS) return; /* mode-state writes: nothing to order */
            const uint32_t now = Tick(core, pipe, issue.intrinsic, item);
            for (const emu::Access &a : issue.accesses) {
                if (!a.write) Touch(core, pipe, now, a);
            }
            for (const emu::Access &a : issue.accesses) {
                if (a.write) Touch(core, pipe, now, a);
            }
            if (pipe == kS) SyncScalar(core);
            return;
        }
    }
}

Hazards::Cell *Hazards::GmCell(uint64_t address)
{
    const uint64_t page = address / kGmPage;
    auto &slot = gm_[page];
    if (!slot) slot.reset(new Cell[kGmPage / kGmGrain]());
    return &slot[(address % kGmPage) / kGmGrain];
}

void Hazards::Touch(uint32_t core, int pipe, uint32_t now, const emu::Access &a)
{
    if (a.bytes == 0) return;
    if (a.space == Space::GM) {
        for (const GmRange &r : watched_) {
            const uint64_t lo = std::max(a.start, r.start), hi = std::min(a.start + a.bytes, r.end);
            for (uint64_t at = lo / kGmGrain * kGmGrain; at < hi; at += kGmGrain) {
                Visit(*GmCell(at), core, pipe, now, a.write, a, at);
            }
        }
        return;
    }
    std::vector<Cell> &cells = state_[core].onChip[int(a.space)];
    const uint64_t first = a.start / kChipGrain, last = (a.start + a.bytes - 1) / kChipGrain;
    if (cells.size() <= last) cells.resize(last + 1);
    for (uint64_t g = first; g <= last; ++g) Visit(cells[g], core, pipe, now, a.write, a, g * kChipGrain);
}

void Hazards::Visit(Cell &cell, uint32_t core, int pipe, uint32_t now, bool write, const emu::Access &a, uint64_t at)
{
    const Epoch self{Agent(core, pipe), now};
    if (!Ordered(core, pipe, now, cell.w)) Report(write ? "write after write" : "read after write", core, pipe, now, cell.w, a, at);
    if (write) {
        for (const Epoch &r : cell.r) {
            if (!Ordered(core, pipe, now, r)) Report("write after read", core, pipe, now, r, a, at);
        }
        cell.w = self;
        for (Epoch &r : cell.r) r = Epoch{};
        return;
    }
    /* keep the reads a later write must be ordered after: replace this agent's own or one already ordered */
    for (Epoch &r : cell.r) {
        if (r.agent == self.agent || r.agent == 0) {
            r = self;
            return;
        }
    }
    for (Epoch &r : cell.r) {
        if (Ordered(core, pipe, now, r)) {
            r = self;
            return;
        }
    }
    cell.r[0] = self; /* more concurrent readers than slots: keep the newest */
}

std::string Hazards::Describe(uint32_t agent, uint32_t clock) const
{
    const uint32_t core = (agent - 1) / kPipes;
    const int pipe = int((agent - 1) % kPipes);
    const Instr *in = clock >= 1 && clock <= logs_[agent].size() ? &logs_[agent][clock - 1] : nullptr;
    char text[256];
    std::snprintf(text, sizeof text, "%s on %s pipe %s (instruction %u of that pipe; seq %d head %d split %d unit %d)",
                  in ? in->op : "?", labels_[core].c_str(), emu::PipeName(Pipe(pipe)), clock,
                  in ? in->item.seq : -1, in ? in->item.head : -1, in ? in->item.split : -1, in ? in->item.unit : -1);
    return text;
}

std::string Hazards::Where(const emu::Access &a, uint64_t at) const
{
    char text[160];
    if (a.space == Space::GM) {
        for (const GmRange &r : watched_) {
            if (at >= r.start && at < r.end) {
                std::snprintf(text, sizeof text, "GM buffer %s, byte %" PRIu64, r.name.c_str(), at - r.start);
                return text;
            }
        }
    }
    std::snprintf(text, sizeof text, "%s bytes [%" PRIu64 ", %" PRIu64 ")", emu::SpaceName(a.space), at,
                  at + (a.space == Space::GM ? kGmGrain : kChipGrain));
    return text;
}

void Hazards::Report(const char *what, uint32_t core, int pipe, uint32_t now, const Epoch &prior,
                     const emu::Access &a, uint64_t at)
{
    std::string text = std::string("HAZARD (") + what + "): " + Describe(Agent(core, pipe), now) + " " +
                       (a.write ? "writes " : "reads ") + Where(a, at) + ", which " + Describe(prior.agent, prior.clock) +
                       " also touches, and no flag, barrier or cross-core wait orders the two on the device";
    throw HazardError(text);
}

}  // namespace pa::devsim
