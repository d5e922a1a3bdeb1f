/*
 * Hazard checker of the CPU simulation: vector clocks per pipe queue, shadow cells per granule, the device's
 * flag rules.  See pa_sim_hazard.hpp for the model.
 */
#include "pa_sim_hazard.hpp"

#include <algorithm>

#include "../../contract/pa_contract.h"

#include "pa_sim_runtime.hpp"

namespace pa::sim::hz {

namespace {

/* On-chip shadow granule: one 32-byte UB block (also the smallest L1/L0 transfer unit). */
constexpr uint64_t kOnChipGrain = 32;
constexpr int kEvents = 8; /* intra-core event ids 0..7 per (src, dst) pipe pair */

const char *const kSpaceNames[kSpaces] = {"UB", "L1", "L0A", "L0B", "L0C", "GM"};
uint64_t Capacity(int space)
{
    switch (space) {
        case kSpaceUb: return kUbBytes;
        case kSpaceL1: return kL1Bytes;
        case kSpaceL0a: return kL0aBytes;
        case kSpaceL0b: return kL0bBytes;
        default: return kL0cBytes;
    }
}

const char *RoleOf(uint32_t agent)
{
    const uint32_t role = agent / kPipes % kRolesPerCluster;
    return role == kRoleCube ? "cube" : role == kRoleVec0 ? "vector 0" : "vector 1";
}

void Join(Clock &into, const Clock &from)
{
    for (size_t i = 0; i < into.size() && i < from.size(); ++i) into[i] = std::max(into[i], from[i]);
}

}  // namespace

const char *PipeName(int pipe)
{
    static const char *const kNames[kPipes + 1] = {"S", "MTE2", "MTE1", "M", "FIX", "V", "MTE3", "ALL"};
    return kNames[pipe];
}

void InstrLog::Append(const Instr &in)
{
    const uint32_t chunk = size_ / kChunk;
    if (chunk >= kMaxChunks) return; /* past 64M instructions an agent's later ones are reported unnamed */
    if (!chunks_[chunk]) chunks_[chunk].reset(new Instr[kChunk]);
    chunks_[chunk][size_ % kChunk] = in;
    ++size_;
}

const Instr *InstrLog::At(uint32_t clock) const
{
    if (clock == 0 || clock > uint64_t(kChunk) * kMaxChunks) return nullptr;
    const uint32_t i = clock - 1;
    const auto &chunk = chunks_[i / kChunk];
    return chunk ? &chunk[i % kChunk] : nullptr;
}

Cell &GmShadow::At(uint64_t cell)
{
    auto &chunk = chunks[cell / kChunkCells];
    if (!chunk) chunk.reset(new Cell[kChunkCells]());
    return chunk[cell % kChunkCells];
}

void InitLaunch(Launch &L)
{
    LaunchState &st = L.hazard;
    st.agents = L.blockDim * kRolesPerCluster * kPipes;
    st.logs = std::vector<InstrLog>(st.agents);
    st.gm.clear();
    st.gm.resize(PA_NUM_PTR_ARGS);
    /* the buffers the kernel writes; every other slot is read-only for it */
    const int32_t writable[] = {PA_ARG_O, PA_ARG_S, PA_ARG_P, PA_ARG_O_TMP, PA_ARG_O_CORE, PA_ARG_L, PA_ARG_LSE};
    for (int32_t slot : writable) {
        auto g = std::make_unique<GmShadow>();
        g->grain = slot == PA_ARG_O || slot == PA_ARG_P ? 2 : 4; /* element size: fp16/bf16 or fp32 */
        g->cells = (L.extentBytes[slot] + g->grain - 1) / g->grain;
        g->chunks.resize((g->cells + GmShadow::kChunkCells - 1) / GmShadow::kChunkCells);
        st.gm[slot] = std::move(g);
    }
    st.barJoin.assign(st.agents, 0);
    st.barReady.assign(st.agents, 0);
}

Role::Role(Launch &L, uint32_t core, int32_t role)
    : L_(L), st_(L.hazard), core_(core), role_(role), base_((core * kRolesPerCluster + uint32_t(role)) * kPipes)
{
    for (auto &c : vc_) c.assign(st_.agents, 0);
    dcci_.assign(st_.agents, 0);
    if (role == kRoleCube) {
        for (int s : {kSpaceL1, kSpaceL0a, kSpaceL0b, kSpaceL0c}) onChip_[s].resize(Capacity(s) / kOnChipGrain);
    } else {
        onChip_[kSpaceUb].resize(Capacity(kSpaceUb) / kOnChipGrain);
    }
}

bool Role::Ordered(const Epoch &e, int pipe, uint32_t clock) const
{
    if (e.clock == 0) return true;
    if (e.agent == Agent(pipe)) {
        /* in-order queues complete in order; the vector pipe only up to its last barrier or flag */
        return pipe != kPipeV || e.clock == clock || e.clock <= vDone_;
    }
    return vc_[pipe][e.agent] >= e.clock;
}

void Role::Report(const char *kind, const Access &a, uint64_t addr, const Epoch &prior, int pipe, const char *op)
{
    const Instr *p = st_.logs[prior.agent].At(prior.clock);
    const uint32_t priorCore = prior.agent / kPipes / kRolesPerCluster;
    const char *where = a.space == kSpaceGm ? pa_contract_slot_name(a.slot) : kSpaceNames[a.space];
    Fail(PA_ERR_HAZARD, a.space == kSpaceGm ? a.slot : -1, int64_t(addr), -1,
         "hazard (%s) on %s%s byte %llu (access of %llu x %llu B at %llu, pitch %llu): %s on %s of core %u (%s) "
         "[seq %d head %d split %d unit %d] is not ordered after %s on %s of core %u (%s) "
         "[seq %d head %d split %d unit %d]",
         kind, a.space == kSpaceGm ? "GM " : "", where, static_cast<unsigned long long>(addr),
         static_cast<unsigned long long>(a.rows), static_cast<unsigned long long>(a.rowBytes),
         static_cast<unsigned long long>(a.base), static_cast<unsigned long long>(a.pitchBytes), op, PipeName(pipe),
         core_, RoleOf(base_), tctx.seq, tctx.head, tctx.split, tctx.unit, p ? p->op : "?",
         PipeName(int(prior.agent % kPipes)), priorCore, RoleOf(prior.agent), p ? p->seq : -1, p ? p->head : -1,
         p ? p->split : -1, p ? p->unit : -1);
}

void Role::Visit(Cell &c, const Access &a, uint64_t addr, int pipe, uint32_t clock, const char *op, bool scalarGm)
{
    const Epoch me{Agent(pipe), clock};
    if (!Ordered(c.w, pipe, clock)) Report(a.write ? "write after write" : "read after write", a, addr, c.w, pipe, op);
    if (scalarGm && c.w.clock != 0 && c.w.agent / kPipes != base_ / kPipes && dcci_[c.w.agent] < c.w.clock) {
        Report("scalar read of GM another core wrote, without a cache invalidate after the wait", a, addr, c.w,
               pipe, op);
    }
    if (a.write) {
        for (const Epoch &r : c.r) {
            if (!Ordered(r, pipe, clock)) Report("write after read", a, addr, r, pipe, op);
        }
        c.w = me;
        for (Epoch &r : c.r) r = Epoch{};
        return;
    }
    /* a read that happens after an earlier one subsumes it for later write-after-read checks */
    int slot = -1;
    for (int i = 0; i < Cell::kReads; ++i) {
        if (c.r[i].clock == 0 || c.r[i].agent == me.agent || Ordered(c.r[i], pipe, clock)) {
            if (slot < 0) slot = i;
            else if (c.r[i].agent == me.agent) c.r[i] = Epoch{};
        }
    }
    c.r[slot < 0 ? Cell::kReads - 1 : slot] = me; /* more concurrent readers than slots: the last is replaced */
}

void Role::CheckRange(const Access &a, int pipe, uint32_t clock, const char *op)
{
    if (a.rows == 0 || a.rowBytes == 0) return;
    if (a.space == kSpaceGm) {
        GmShadow *g = st_.gm[a.slot].get();
        if (g == nullptr) return; /* read-only for the kernel */
        const bool scalarGm = pipe == kPipeS && !a.write;
        std::lock_guard<std::mutex> lock(g->mu);
        for (uint64_t r = 0; r < a.rows; ++r) {
            const uint64_t lo = a.base + r * a.pitchBytes, hi = lo + a.rowBytes;
            const uint64_t c1 = std::min<uint64_t>((hi + g->grain - 1) / g->grain, g->cells);
            for (uint64_t c = lo / g->grain; c < c1; ++c) Visit(g->At(c), a, c * g->grain, pipe, clock, op, scalarGm);
        }
        return;
    }
    std::vector<Cell> &cells = onChip_[a.space];
    for (uint64_t r = 0; r < a.rows; ++r) {
        const uint64_t lo = a.base + r * a.pitchBytes, hi = lo + a.rowBytes;
        const uint64_t c1 = (hi + kOnChipGrain - 1) / kOnChipGrain;
        if (c1 > cells.size()) {
            Fail(PA_ERR_INTERNAL, -1, int64_t(hi), int64_t(cells.size() * kOnChipGrain),
                 "%s on %s of core %u (%s) touches %s bytes up to %llu, past the region's %llu", op, PipeName(pipe),
                 core_, RoleOf(base_), kSpaceNames[a.space], static_cast<unsigned long long>(hi),
                 static_cast<unsigned long long>(cells.size() * kOnChipGrain));
        }
        for (uint64_t c = lo / kOnChipGrain; c < c1; ++c) Visit(cells[c], a, c * kOnChipGrain, pipe, clock, op, false);
    }
}

void Role::Issue(int pipe, const char *op, const Access *acc, int n)
{
    const uint32_t clock = ++vc_[pipe][Agent(pipe)];
    st_.logs[Agent(pipe)].Append(Instr{op, tctx.seq, tctx.head, tctx.split, tctx.unit});
    bool writes = false;
    for (int i = 0; i < n; ++i) writes |= acc[i].write;
    for (int i = 0; i < n; ++i) {
        if (!acc[i].write) CheckRange(acc[i], pipe, clock, op);
    }
    for (int i = 0; i < n; ++i) {
        if (acc[i].write) CheckRange(acc[i], pipe, clock, op);
    }
    if (pipe == kPipeS && !writes) {
        /* the scalar unit waits for the value before it issues anything else */
        for (auto &c : vc_) c[Agent(kPipeS)] = std::max(c[Agent(kPipeS)], clock);
    }
}

void Role::SetFlag(int src, int dst, int event)
{
    if (event < 0 || event >= kEvents) {
        Fail(PA_ERR_HAZARD, -1, event, kEvents, "set_flag(%s, %s, %d) on core %u (%s): event ids are 0..7",
             PipeName(src), PipeName(dst), event, core_, RoleOf(base_));
    }
    Flag &f = flags_[src][dst][event];
    if (f.set) {
        Fail(PA_ERR_HAZARD, -1, event, -1,
             "set_flag(%s, %s, %d) on core %u (%s) [seq %d head %d split %d unit %d] while the flag is still set: "
             "a second set before its wait is lost on the device",
             PipeName(src), PipeName(dst), event, core_, RoleOf(base_), tctx.seq, tctx.head, tctx.split, tctx.unit);
    }
    if (f.waitClock != 0 && vc_[src][Agent(dst)] < f.waitClock) {
        Fail(PA_ERR_HAZARD, -1, event, -1,
             "set_flag(%s, %s, %d) on core %u (%s) [seq %d head %d split %d unit %d] is not ordered after the "
             "previous wait_flag of the same flag on %s: the source pipe may set the bit again before the wait "
             "cleared it, and the set is lost (one bit per flag; ping-pong halves need their own event ids)",
             PipeName(src), PipeName(dst), event, core_, RoleOf(base_), tctx.seq, tctx.head, tctx.split, tctx.unit,
             PipeName(dst));
    }
    f.set = true;
    f.at = vc_[src];
}

void Role::WaitFlag(int src, int dst, int event)
{
    Flag *f = event >= 0 && event < kEvents ? &flags_[src][dst][event] : nullptr;
    if (f == nullptr || !f->set) {
        Fail(PA_ERR_HAZARD, -1, event, -1,
             "wait_flag(%s, %s, %d) on core %u (%s) [seq %d head %d split %d unit %d] with no set_flag before it: "
             "the device would hang",
             PipeName(src), PipeName(dst), event, core_, RoleOf(base_), tctx.seq, tctx.head, tctx.split, tctx.unit);
    }
    Join(vc_[dst], f->at);
    if (dst == kPipeV) vDone_ = std::max(vDone_, f->at[Agent(kPipeV)]);
    f->set = false;
    /* the wait is a step of the destination queue: what is ordered after it knows this tick */
    f->waitClock = ++vc_[dst][Agent(dst)];
    st_.logs[Agent(dst)].Append(Instr{"wait_flag", tctx.seq, tctx.head, tctx.split, tctx.unit});
}

void Role::Barrier(int pipe)
{
    if (pipe == kPipeV) {
        vDone_ = vc_[kPipeV][Agent(kPipeV)];
        return;
    }
    if (pipe != kPipes) return; /* other pipes complete in order already */
    Clock all = vc_[0];
    for (int p = 1; p < kPipes; ++p) Join(all, vc_[p]);
    for (auto &c : vc_) c = all;
    vDone_ = all[Agent(kPipeV)];
}

void Role::InvalidateCache() { dcci_ = vc_[kPipeS]; }

void Role::JoinAll(const Clock &c)
{
    for (auto &v : vc_) Join(v, c);
    if (!c.empty()) vDone_ = std::max(vDone_, c[Agent(kPipeV)]);
}

void Role::Finish()
{
    for (int s = 0; s < kPipes; ++s) {
        for (int d = 0; d < kPipes; ++d) {
            for (int e = 0; e < kEvents; ++e) {
                if (!flags_[s][d][e].set) continue;
                Fail(PA_ERR_HAZARD, -1, e, -1,
                     "set_flag(%s, %s, %d) on core %u (%s) is still set when the core exits: every flag must be "
                     "waited for before the kernel ends",
                     PipeName(s), PipeName(d), e, core_, RoleOf(base_));
            }
        }
    }
}

}  // namespace pa::sim::hz
