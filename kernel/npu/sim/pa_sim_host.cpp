/*
 * Host side of libpa_sim.so: the ABI exports, the mock API (bind, last error; the host probes are the mock's
 * alone) with the mock's semantics, and pa_sim_stats_get.  call_kernel validates the launch, then runs
 * block_dim clusters of one cube and two vector threads over the kernel in pa_kernel.cpp and joins them.  A
 * pto-isa on-chip overflow asserts and aborts the process: run simulated launches in a subprocess.
 */
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include <pto/pto-inst.hpp>

#include "../pa_sync.hpp"

#include "../../contract/pa_contract.h"
#include "pa_record.hpp"
#include "pa_sim_runtime.hpp"

/* the argument list of every entry point: the ABI header's X-macro */
#define PA_PTR_PARAM(name) , void *name
#define PA_PTR_VALUE(name) name,
#define PA_DEVICE_PARAM(name) uint8_t *name,

extern "C" void pa_decode_kernel(PA_PTR_ARGS(PA_DEVICE_PARAM) uint32_t block_num, uint64_t ffts_base);

/* clang lowers float -> __bf16 casts to this libgcc >= 13 helper; Debian 12's libgcc lacks it. */
extern "C" __bf16 __truncsfbf2(float f)
{
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    constexpr uint32_t kAbsMask = 0x7fffffffu, kInf = 0x7f800000u, kQuietBit = 0x40u, kRoundBias = 0x7fffu;
    const uint16_t h = (u & kAbsMask) > kInf ? uint16_t((u >> 16) | kQuietBit)
                                             : uint16_t((u + kRoundBias + ((u >> 16) & 1u)) >> 16);
    __bf16 r;
    std::memcpy(&r, &h, sizeof(r));
    return r;
}

namespace {

using namespace pa::sim;

constexpr int32_t kDefaultTimeoutMs = 30000; /* far above any CI launch; a deadlock fails instead of hanging */

struct HostState {
    bool bound = false;
    pa_mock_config config{};
    pa_mock_error lastError{};
    bool hasStats = false;
    pa_sim_stats stats{};
    bool tracing = false;
    std::vector<pa_sim_trace_event> trace; /* the last launch's, role stream after role stream */
};
thread_local HostState host;
std::atomic<int32_t> g_timeoutMs{0};

int32_t TimeoutMs()
{
    if (g_timeoutMs > 0) return g_timeoutMs;
    const char *env = std::getenv("PA_SIM_TIMEOUT_MS");
    const int32_t v = env ? std::atoi(env) : 0;
    return v > 0 ? v : kDefaultTimeoutMs;
}

void Worker(Launch *L, uint32_t core, int32_t role, void *const *ptr)
{
    auto *b = reinterpret_cast<uint8_t *const *>(ptr);
    pa::rec::RunCoreRole(*L, core, role, [&] {
        pa_decode_kernel(b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                         b[14], b[15], b[16], b[17], b[18], b[19], b[20], b[21], b[22], L->blockDim,
                         /*ffts_base=*/0);
    });
}

void CollectStats(const Launch &L, double seconds)
{
    pa_sim_stats &st = host.stats;
    st = pa_sim_stats{};
    for (const Counters &c : L.counters) {
        st.gm_read_bytes += c.gmReadBytes;
        st.gm_write_bytes += c.gmWriteBytes;
        st.kv_read_bytes += c.kvReadBytes;
        st.scratch_bytes += c.scratchBytes;
        st.partial_bytes += c.partialBytes;
        st.handoffs += c.handoffs;
        st.units += c.units;
        st.tasks += c.tasks;
        st.matmuls += c.matmuls;
        for (int r = 0; r < PA_SIM_REGIONS; ++r) st.peak_bytes[r] = std::max(st.peak_bytes[r], c.peak[r]);
    }
    const uint32_t caps[PA_SIM_REGIONS] = {pa::kUbBytes, pa::kL1Bytes, pa::kL0aBytes, pa::kL0bBytes, pa::kL0cBytes};
    std::copy(caps, caps + PA_SIM_REGIONS, st.capacity_bytes);
    st.block_dim = L.blockDim;
    st.threads = L.blockDim * kRolesPerCluster;
    st.wall_seconds = seconds;
    host.hasStats = true;
}

int32_t Launch23(uint32_t blockDim, void *const *ptr)
{
    std::memset(&host.lastError, 0, sizeof(host.lastError));
    if (!host.bound) {
        host.lastError.code = PA_ERR_BAD_LAUNCH;
        host.lastError.arg_slot = host.lastError.core = host.lastError.seq = -1;
        host.lastError.head = host.lastError.split = -1;
        std::snprintf(host.lastError.message, sizeof(host.lastError.message),
                      "no pa_mock_bind() configuration on this thread");
        return PA_ERR_BAD_LAUNCH;
    }
    Launch L;
    std::copy(host.config.extent_bytes, host.config.extent_bytes + PA_NUM_PTR_ARGS, L.extentBytes);
    L.numBlocks = host.config.num_blocks;
    L.checked = host.config.checked != 0;
    L.blockDim = blockDim;
    L.timeout = std::chrono::milliseconds(TimeoutMs());
    if (const char *drop = std::getenv("PA_SIM_DROP_SIGNAL")) L.dropSignal = std::atoll(drop);
    pa_contract contract;
    const int32_t rc = pa_contract_check(&contract, &host.config, blockDim, ptr, PA_NPU_KERNEL_FEATURES, &host.lastError);
    if (rc != PA_OK) return rc;
    L.counters.resize(size_t(blockDim) * kRolesPerCluster);
    for (uint32_t c = 0; c < blockDim; ++c) L.clusters.emplace_back(new Cluster());
    L.hazards = L.checked;
    if (L.hazards) hz::InitLaunch(L);
    L.tracing = host.tracing;
    if (L.tracing) L.trace.resize(size_t(blockDim) * kRolesPerCluster);
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    threads.reserve(size_t(blockDim) * kRolesPerCluster);
    for (uint32_t c = 0; c < blockDim; ++c) {
        for (int32_t role = 0; role < kRolesPerCluster; ++role) threads.emplace_back(Worker, &L, c, role, ptr);
    }
    for (auto &t : threads) t.join();
    CollectStats(L, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    host.trace.clear();
    for (const auto &stream : L.trace) host.trace.insert(host.trace.end(), stream.begin(), stream.end());
    if (L.hasError) {
        host.lastError = L.error;
        return L.error.code;
    }
    return PA_OK;
}

}  // namespace

extern "C" {

int32_t pa_abi_version(void) { return PA_ABI_VERSION; }

uint32_t pa_supported_keys(void) { return PA_SUPPORTED_KEYS_ALL; }

/* The ABI v3/v4 features the kernel executes (kernel/npu/pa_config.hpp). */
uint32_t pa_supported_features(void) { return PA_NPU_KERNEL_FEATURES; }

int32_t call_kernel(uint32_t block_dim, void *stream PA_PTR_ARGS(PA_PTR_PARAM))
{
    (void)stream;
    void *const ptr[PA_NUM_PTR_ARGS] = {PA_PTR_ARGS(PA_PTR_VALUE)};
    return Launch23(block_dim, ptr);
}

int32_t call_kernel_noop(uint32_t block_dim, void *stream PA_PTR_ARGS(PA_PTR_PARAM))
{
    (void)block_dim;
    (void)stream;
    void *const ptr[PA_NUM_PTR_ARGS] = {PA_PTR_ARGS(PA_PTR_VALUE)};
    (void)ptr;
    return PA_OK;
}

int32_t pa_mock_bind(const pa_mock_config *config)
{
    if (config == nullptr) {
        host.bound = false;
        return PA_OK;
    }
    host.config = *config;
    host.bound = true;
    return PA_OK;
}

int32_t pa_mock_last_error(pa_mock_error *out)
{
    if (out != nullptr) *out = host.lastError;
    return PA_OK;
}

int32_t pa_sim_stats_get(pa_sim_stats *out)
{
    if (!host.hasStats) return PA_ERR_BAD_LAUNCH;
    if (out != nullptr) *out = host.stats;
    return PA_OK;
}

void pa_sim_trace_enable(int32_t on) { host.tracing = on != 0; }

int64_t pa_sim_trace_count(void) { return int64_t(host.trace.size()); }

int64_t pa_sim_trace_copy(pa_sim_trace_event *out, int64_t capacity)
{
    const int64_t n = std::min<int64_t>(capacity, int64_t(host.trace.size()));
    if (out != nullptr && n > 0) std::memcpy(out, host.trace.data(), size_t(n) * sizeof(pa_sim_trace_event));
    return out != nullptr ? std::max<int64_t>(n, 0) : 0;
}

const char *pa_sim_trace_op_name(int32_t op) { return pa::rec::OpName(op); }

int32_t pa_sim_trace_event_bytes(void) { return int32_t(sizeof(pa_sim_trace_event)); }

int32_t pa_sim_sync_point_count(void) { return pa::kEdgeCount; }

void pa_sim_drop_sync(int32_t id) { DropEdge(id); }

void pa_sim_mutate_sync(int32_t kind, int32_t edge) { MutateEdge(kind, edge); }

int32_t pa_sim_set_timeout_ms(int32_t ms)
{
    const int32_t old = TimeoutMs();
    g_timeoutMs = ms;
    return old;
}

}  // extern "C"
