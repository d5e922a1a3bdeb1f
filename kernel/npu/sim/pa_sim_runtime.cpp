/*
 * CPU-simulation runtime: flag registers and the all-vector barrier with deadlock timeouts, GM extent checks,
 * block-id checks, on-chip high-water marks and the launch's first error.
 */
#include "pa_sim_runtime.hpp"

#include <algorithm>

#include "../../contract/pa_contract.h"
#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace pa::sim {

thread_local ThreadCtx tctx;

namespace {

const char *RoleName(int32_t role) { return role == kRoleCube ? "cube" : role == kRoleVec0 ? "vector 0" : "vector 1"; }

void WakeAll(Launch &L)
{
    for (auto &c : L.clusters) {
        std::lock_guard<std::mutex> lock(c->mu);
        c->cv.notify_all();
    }
    std::lock_guard<std::mutex> lock(L.barMu);
    L.barCv.notify_all();
}

/* Waits on cv until ready() holds; unwinds on another worker's failure, fails on timeout. */
template <typename Ready>
void WaitUntil(std::condition_variable &cv, std::unique_lock<std::mutex> &lock, Ready ready, const char *what,
               int flag)
{
    Launch &L = *tctx.launch;
    ++tctx.ctr->waits;
    const auto deadline = std::chrono::steady_clock::now() + L.timeout;
    while (!ready()) {
        if (L.abort.load()) {
            lock.unlock();
            Unwind();
        }
        if (cv.wait_until(lock, deadline) == std::cv_status::timeout && !ready()) {
            lock.unlock();
            Fail(PA_ERR_INTERNAL, -1, -1, -1, "simulated deadlock: %s %d on core %d (%s) timed out after %lld ms",
                 what, flag, tctx.core, RoleName(tctx.role), static_cast<long long>(L.timeout.count()));
        }
    }
}

}  // namespace

void Unwind() { throw Abort{}; }

void Fail(int32_t code, int32_t slot, int64_t elemOffset, int64_t extentElems, const char *fmt, ...)
{
    Launch &L = *tctx.launch;
    {
        std::lock_guard<std::mutex> lock(L.errMu);
        if (!L.hasError) {
            L.hasError = true;
            pa_mock_error &e = L.error;
            e.code = code;
            e.arg_slot = slot;
            e.element_offset = elemOffset;
            e.extent_elems = extentElems;
            e.core = tctx.core;
            e.seq = tctx.seq;
            e.head = tctx.head;
            e.split = tctx.split;
            va_list ap;
            va_start(ap, fmt);
            std::vsnprintf(e.message, sizeof(e.message), fmt, ap);
            va_end(ap);
        }
    }
    L.abort.store(true);
    WakeAll(L);
    Unwind();
}

bool SignalLost()
{
    Launch &L = *tctx.launch;
    return L.dropSignal >= 0 && L.signalCount.fetch_add(1) == L.dropSignal;
}

namespace {

std::atomic<int32_t> g_droppedEdge{-1};
std::atomic<int32_t> g_mutatedEdge[PA_SIM_MUTATIONS] = {-1, -1, -1, -1, -1, -1};
static_assert(PA_SIM_MUTATIONS == 6, "one -1 per mutation kind above");

hz::Clock SnapshotOf(int pipe) { return tctx.hz ? tctx.hz->Snapshot(pipe) : hz::Clock{}; }

void JoinSnapshot(const hz::Clock &c)
{
    if (tctx.hz) tctx.hz->JoinAll(c);
}

/* One use per cross-core flag id: the device's counters cannot tell two uses apart. */
void ClaimFlag(uint16_t flag, FlagUse use)
{
    Launch &L = *tctx.launch;
    int expected = kUseNone;
    if (L.flagUse[flag].compare_exchange_strong(expected, use) || expected == use) return;
    Fail(PA_ERR_HAZARD, -1, flag, -1, "cross-core flag %d used two ways (%d and %d) on core %d (%s)", flag,
         expected, int(use), tctx.core, RoleName(tctx.role));
}

void PushPending(std::deque<hz::Clock> &q, uint16_t flag, hz::Clock c)
{
    if (q.size() >= kMaxPendingSets) {
        Fail(PA_ERR_HAZARD, -1, flag, int64_t(kMaxPendingSets),
             "cross-core flag %d set a %zu-th time with no wait on core %d (%s): the device counter holds 15",
             flag, q.size() + 1, tctx.core, RoleName(tctx.role));
    }
    q.push_back(std::move(c));
}

}  // namespace

bool EdgeDropped(int32_t id) { return g_droppedEdge.load(std::memory_order_relaxed) == id; }
void DropEdge(int32_t id) { g_droppedEdge.store(id); }

int32_t MutatedEdge(int32_t kind)
{
    return kind >= 0 && kind < PA_SIM_MUTATIONS ? g_mutatedEdge[kind].load(std::memory_order_relaxed) : -1;
}

void MutateEdge(int32_t kind, int32_t id)
{
    for (int32_t k = 0; k < PA_SIM_MUTATIONS; ++k) g_mutatedEdge[k].store(k == kind ? id : -1);
}

void SignalVectors(uint16_t flag, int pipe)
{
    if (SignalLost()) return;
    ClaimFlag(flag, kUseCubeToVec);
    Cluster &c = *tctx.launch->clusters[tctx.core];
    {
        std::unique_lock<std::mutex> lock(c.mu);
        for (int s = 0; s < kVecSubCores; ++s) PushPending(c.toVec[flag][s], flag, SnapshotOf(pipe));
    }
    c.cv.notify_all();
}

void SignalCube(uint16_t flag, int pipe)
{
    if (SignalLost()) return;
    ClaimFlag(flag, kUseVecToCube);
    Cluster &c = *tctx.launch->clusters[tctx.core];
    {
        std::lock_guard<std::mutex> lock(c.mu);
        PushPending(c.toCube[flag][tctx.role - kRoleVec0], flag, SnapshotOf(pipe));
    }
    c.cv.notify_all();
}

void WaitFromCube(uint16_t flag)
{
    Cluster &c = *tctx.launch->clusters[tctx.core];
    const int s = tctx.role - kRoleVec0;
    std::unique_lock<std::mutex> lock(c.mu);
    WaitUntil(c.cv, lock, [&] { return !c.toVec[flag][s].empty(); }, "vector wait for cube flag", flag);
    const hz::Clock got = std::move(c.toVec[flag][s].front());
    c.toVec[flag][s].pop_front();
    lock.unlock();
    JoinSnapshot(got);
}

void WaitFromVectors(uint16_t flag)
{
    /* Mode-2 FFTS: the cube's wait completes once each vector sub-core has set the flag. */
    Cluster &c = *tctx.launch->clusters[tctx.core];
    std::unique_lock<std::mutex> lock(c.mu);
    WaitUntil(c.cv, lock, [&] { return !c.toCube[flag][0].empty() && !c.toCube[flag][1].empty(); },
              "cube wait for vector flag", flag);
    hz::Clock got[kVecSubCores];
    for (int s = 0; s < kVecSubCores; ++s) {
        got[s] = std::move(c.toCube[flag][s].front());
        c.toCube[flag][s].pop_front();
    }
    lock.unlock();
    for (const auto &g : got) JoinSnapshot(g);
}

void VectorBarrier(int pipe)
{
    Launch &L = *tctx.launch;
    ClaimFlag(kFlagReduceBarrier, kUseAllVector);
    const hz::Clock mine = SnapshotOf(pipe);
    std::unique_lock<std::mutex> lock(L.barMu);
    const uint32_t generation = L.barGeneration;
    if (!mine.empty()) {
        for (size_t i = 0; i < mine.size(); ++i) L.hazard.barJoin[i] = std::max(L.hazard.barJoin[i], mine[i]);
    }
    if (++L.barArrived == L.blockDim * kVecSubCores) {
        L.barArrived = 0;
        ++L.barGeneration;
        L.hazard.barReady = L.hazard.barJoin;
        L.barCv.notify_all();
    } else {
        WaitUntil(L.barCv, lock, [&] { return L.barGeneration != generation; }, "all-vector barrier, flag",
                  kFlagReduceBarrier);
    }
    const hz::Clock all = L.hazard.barReady;
    lock.unlock();
    JoinSnapshot(all);
}

void CheckAccess(int32_t slot, uint64_t off, uint64_t rows, uint64_t cols, uint64_t rowStride, uint64_t colStride,
                 uint32_t elemBytes, bool write)
{
    Launch &L = *tctx.launch;
    if (L.abort.load()) Unwind();
    if (!L.checked || rows == 0 || cols == 0) return;
    const uint64_t extent = L.extentBytes[slot] / elemBytes;
    const uint64_t last = off + (rows - 1) * rowStride + (cols - 1) * colStride;
    if (last < extent) return;
    /* first offending element: the lowest accessed index at or past the extent */
    uint64_t bad = last;
    for (uint64_t r = 0; r < rows; ++r) {
        for (uint64_t c = 0; c < cols; ++c) {
            const uint64_t idx = off + r * rowStride + c * colStride;
            if (idx >= extent) bad = std::min(bad, idx);
        }
    }
    Fail(PA_ERR_OUT_OF_BOUNDS, slot, int64_t(bad), int64_t(extent),
         "%s of %s element %llu (%llu x %llu block at %llu) outside its extent of %llu elements, core %d (%s)",
         write ? "write" : "read", pa_contract_slot_name(slot), static_cast<unsigned long long>(bad),
         static_cast<unsigned long long>(rows), static_cast<unsigned long long>(cols),
         static_cast<unsigned long long>(off), static_cast<unsigned long long>(extent), tctx.core,
         RoleName(tctx.role));
}

void CheckBlockId(int64_t id, int64_t tableIndex)
{
    Launch &L = *tctx.launch;
    if (id >= 0 && id < L.numBlocks) return;
    Fail(PA_ERR_BAD_BLOCK_ID, PA_ARG_BLOCK_TABLES, tableIndex, L.numBlocks,
         "block id %lld at block_tables element %lld (sequence %d) outside [0, %lld)", static_cast<long long>(id),
         static_cast<long long>(tableIndex), tctx.seq, static_cast<long long>(L.numBlocks));
}

void RecordAssign(int region, uint64_t endByte)
{
    uint32_t &peak = tctx.ctr->peak[region];
    peak = std::max<uint32_t>(peak, uint32_t(endByte));
}

}  // namespace pa::sim
