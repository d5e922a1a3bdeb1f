/*
 * Host side of the device-path simulation (build/lib/libpa_sim.so): the kernel ABI exports and the mock API with
 * the mock's semantics.  call_kernel checks the launch with the shared contract checker, then runs the kernel
 * compiled against pto-isa's A2/A3 implementations on the emulated clusters (devsim_sched.hpp): every intrinsic
 * the device would execute, executed by the A2/A3 intrinsic emulator.  Nothing of pto-isa's CPU implementations
 * is linked in (`nm -C` shows no pto::cpu symbol).
 *
 * Controls: PA_SIM_SEED (a launch's seed; unset: a fresh one per launch, reported with every failure and by
 * pa_sim_last_seed), PA_SIM_SOC (910B1..910B4, A3; default 910B2), PA_SIM_SWITCH_EVERY (mean intrinsics between
 * baton passes, default 16), PA_SIM_IN_FLIGHT (instructions a core's pipes hold before retiring, default 256; 0
 * retires in program order), PA_SIM_INITCHECK (0 turns initcheck's UNINIT faults off; on by default in checked
 * mode), PA_SIM_MAD_INPUT_CHECK (0 turns off the fault on a non-finite mad operand element, for experiments;
 * default on).  The same through pa_sim_set_seed / pa_sim_set_soc.
 */
#include <atomic>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>

#include "contract/pa_contract.h"
#include "pa_config.hpp"
#include "pa_sim_api.h"
#include "pa_sync.hpp"
#include "devsim_hooks.hpp"
#include "devsim_sched.hpp"

#define PA_PTR_PARAM(name) , void *name
#define PA_PTR_VALUE(name) name,
#define PA_DEVICE_PARAM(name) uint8_t *name,

extern "C" void pa_decode_kernel_cube(PA_PTR_ARGS(PA_DEVICE_PARAM) uint32_t block_num, uint64_t ffts_base);
extern "C" void pa_decode_kernel_vec(PA_PTR_ARGS(PA_DEVICE_PARAM) uint32_t block_num, uint64_t ffts_base);

namespace {

using namespace pa::devsim;

struct HostState {
    bool bound = false;
    pa_mock_config config{};
    pa_mock_error lastError{};
    bool hasStats = false;
    pa_sim_stats stats{};
    uint64_t lastSeed = 0; /* the seed of this thread's last launch */
    bool tracing = false;  /* pa_sim_trace_enable */
    std::vector<pa_sim_trace_event> trace; /* the last launch's instruction stream, role stream after role stream */
    std::string errorText; /* the whole text; the record's message holds its first 255 bytes */
};
thread_local HostState host;

std::atomic<int32_t> g_droppedEdge{-1};
std::atomic<int32_t> g_skipZeroPadding{0}; /* pa_sim_skip_zero_padding: a mask of pa::ZeroFill kinds */
std::atomic<bool> g_keepInheritedAtomics{false};
std::atomic<int32_t> g_shortenedSlot{-1};
std::atomic<int32_t> g_mutationKind{-1}, g_mutationEdge{-1};
std::atomic<int64_t> g_seed{-1};      /* -1: PA_SIM_SEED or a fresh seed per launch */
std::mutex g_socMutex;
std::string g_soc;                     /* empty: PA_SIM_SOC or 910B2 */

/* What one launch's cores read and record beside the emulator: the block-table bound the kernel checks ids
 * against, and the first failure the kernel's own checks recorded with the mock's fields (a bad block id).  It
 * lives on the launching thread's stack and reaches the cores through LaunchConfig::caller, so two host threads
 * launching at once never see each other's bound or record (the fault-injection switches below stay
 * process-wide: they are test controls). */
struct LaunchState {
    int64_t numBlocks = 0;
    bool hasRecord = false;
    pa_mock_error record{};
};

LaunchState &CurrentLaunch()
{
    const LaunchConfig *cfg = CurrentConfig();
    if (cfg == nullptr || cfg->caller == nullptr) throw std::logic_error("a kernel hook ran outside a launch");
    return *static_cast<LaunchState *>(cfg->caller);
}

uint64_t NextSeed()
{
    if (g_seed >= 0) return uint64_t(g_seed.load());
    if (const char *env = std::getenv("PA_SIM_SEED"); env != nullptr && *env != '\0') {
        return std::strtoull(env, nullptr, 0);
    }
    static std::random_device device;
    return (uint64_t(device()) << 32 | device()) & ((1ull << 53) - 1); /* exact in a Python float too */
}

std::string SocName()
{
    std::lock_guard<std::mutex> lock(g_socMutex);
    if (!g_soc.empty()) return g_soc;
    const char *env = std::getenv("PA_SIM_SOC");
    return env != nullptr && *env != '\0' ? env : "910B2";
}

void SetError(int32_t code, const std::string &text)
{
    host.lastError.code = code;
    host.lastError.arg_slot = host.lastError.core = host.lastError.seq = -1;
    host.lastError.head = host.lastError.split = -1;
    std::snprintf(host.lastError.message, sizeof(host.lastError.message), "%s", text.c_str());
    host.errorText = text;
}

int32_t Launch(uint32_t blockDim, void *const *ptr)
{
    std::memset(&host.lastError, 0, sizeof(host.lastError));
    host.errorText.clear();
    if (!host.bound) {
        SetError(PA_ERR_BAD_LAUNCH, "no pa_mock_bind() configuration on this thread");
        return PA_ERR_BAD_LAUNCH;
    }
    pa_contract contract;
    const int32_t rc = pa_contract_check(&contract, &host.config, blockDim, ptr, PA_NPU_KERNEL_FEATURES, &host.lastError);
    if (rc != PA_OK) return rc;

    LaunchConfig cfg;
    const std::string soc = SocName();
    cfg.soc = soc.c_str();
    cfg.blockDim = blockDim;
    cfg.seed = NextSeed();
    host.lastSeed = cfg.seed;
    cfg.checked = host.config.checked != 0;
    if (const char *drop = std::getenv("PA_SIM_DROP_SIGNAL")) cfg.dropSignal = std::atoll(drop);
    if (const char *init = std::getenv("PA_SIM_INITCHECK")) cfg.initcheck = std::atoi(init) != 0;
    if (const char *every = std::getenv("PA_SIM_SWITCH_EVERY")) cfg.switchEvery = uint32_t(std::max(1, std::atoi(every)));
    if (const char *depth = std::getenv("PA_SIM_IN_FLIGHT")) cfg.inFlight = uint32_t(std::max(0, std::atoi(depth)));
    if (const char *mad = std::getenv("PA_SIM_MAD_INPUT_CHECK")) cfg.checkMadInputs = std::strcmp(mad, "0") != 0;
    for (int slot = 0; slot < PA_NUM_PTR_ARGS; ++slot) {
        const uint64_t start = reinterpret_cast<uint64_t>(ptr[slot]), bytes = host.config.extent_bytes[slot];
        if (start == 0 || bytes == 0) continue;
        cfg.gmBuffers.emplace_back(start, bytes);
        int kind = 0;
        bool written = false;
        switch (slot) {
            case PA_ARG_K: case PA_ARG_V: case PA_ARG_K_ROPE: kind = 1; break; /* the caches (MLA: latent, rope) */
            case PA_ARG_S: case PA_ARG_P: case PA_ARG_O_TMP: kind = 2; written = true; break;
            case PA_ARG_O_CORE: case PA_ARG_L: kind = 3; written = true; break;
            case PA_ARG_O: case PA_ARG_LSE: written = true; break;
            default: break;
        }
        cfg.classes.push_back({start, start + bytes, kind, slot});
        if (written) cfg.watched.push_back({{start, bytes}, pa_contract_slot_name(slot)});
    }
    auto *b = reinterpret_cast<uint8_t *const *>(ptr);
    cfg.body = [b, blockDim](uint32_t, int role) {
        auto entry = role == 0 ? pa_decode_kernel_cube : pa_decode_kernel_vec;
        entry(b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15],
              b[16], b[17], b[18], b[19], b[20], b[21], b[22], blockDim, /*ffts_base=*/0);
    };
    static_assert(PA_NUM_PTR_ARGS == 23, "the entry call above passes 23 pointers");

    host.trace.clear();
    if (host.tracing) cfg.trace = &host.trace;
    LaunchState launch;
    launch.numBlocks = host.config.num_blocks;
    cfg.caller = &launch;
    Figures fig;
    const auto start = std::chrono::steady_clock::now();
    std::string error;
    try {
        error = RunLaunch(cfg, fig);
    } catch (const std::exception &err) {
        error = err.what();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    pa_sim_stats &st = host.stats;
    st = pa_sim_stats{};
    st.gm_read_bytes = fig.gmReadBytes;
    st.gm_write_bytes = fig.gmWriteBytes;
    st.kv_read_bytes = fig.kvReadBytes;
    st.scratch_bytes = fig.scratchBytes;
    st.partial_bytes = fig.partialBytes;
    st.handoffs = fig.handoffs;
    st.units = fig.units;
    st.tasks = fig.tasks;
    st.matmuls = fig.matmuls;
    st.score_tiles = fig.scoreTiles;
    st.masked_score_tiles = fig.maskedScoreTiles;
    std::memcpy(st.peak_bytes, fig.peak, sizeof(st.peak_bytes));
    const uint32_t caps[PA_SIM_REGIONS] = {pa::kUbBytes, pa::kL1Bytes, pa::kL0aBytes, pa::kL0bBytes, pa::kL0cBytes};
    std::memcpy(st.capacity_bytes, caps, sizeof(caps));
    st.block_dim = blockDim;
    st.threads = blockDim * kRoles;
    st.wall_seconds = seconds;
    host.hasStats = true;

    if (error.empty()) return PA_OK;
    if (launch.hasRecord) {
        host.lastError = launch.record;
        host.errorText = error;
        return launch.record.code;
    }
    /* the checker's reports, and the emulator's own ordering faults (a flag set twice), are hazards */
    const bool hazard = error.find("HAZARD") != std::string::npos;
    /* mad's operand check (emu_cube.cpp): a non-finite Q, K or V reached the cube, as the mock's NON_FINITE */
    const bool nonFinite =
        error.find("mad on ") != std::string::npos && error.find("non-finite element") != std::string::npos;
    SetError(hazard ? PA_ERR_HAZARD : nonFinite ? PA_ERR_NON_FINITE : PA_ERR_INTERNAL, error);
    return host.lastError.code;
}

}  // namespace

namespace pa::devsim {
bool SkipZeroFill(int kind) { return (g_skipZeroPadding.load(std::memory_order_relaxed) & kind) == kind; }
bool KeepInheritedAtomics() { return g_keepInheritedAtomics.load(std::memory_order_relaxed); }
bool ShortenedLoad(int slot) { return g_shortenedSlot.load(std::memory_order_relaxed) == slot; }
bool EdgeDropped(int edge) { return g_droppedEdge.load(std::memory_order_relaxed) == edge; }
bool Mutated(int edge, int kind) { return g_mutationKind == kind && g_mutationEdge == edge; }
void Count(int counter)
{
    Figures *f = CurrentFigures();
    if (f == nullptr) return;
    switch (counter) {
        case pa::kCountHandoff: ++f->handoffs; break;
        case pa::kCountUnit: ++f->units; break;
        case pa::kCountTask: ++f->tasks; break;
        case pa::kCountMatmul: ++f->matmuls; break;
        case pa::kCountScoreTile: ++f->scoreTiles; break;
        case pa::kCountMaskedScoreTile: ++f->maskedScoreTiles; break;
        default: break;
    }
}
void SetWorkItem(int32_t seq, int32_t head, int32_t split) { CurrentItem() = WorkItem{seq, head, split, -1}; }
void SetUnit(int32_t unit) { CurrentItem().unit = unit; }
void CheckBlockId(int64_t id, int64_t tableIndex)
{
    LaunchState &launch = CurrentLaunch();
    if (id >= 0 && id < launch.numBlocks) return;
    char text[200];
    std::snprintf(text, sizeof text, "block id %lld at block_tables element %lld (sequence %d) outside [0, %lld)",
                  static_cast<long long>(id), static_cast<long long>(tableIndex), CurrentItem().seq,
                  static_cast<long long>(launch.numBlocks));
    if (!launch.hasRecord) { /* one core runs at a time (the scheduler's baton): no lock needed */
        launch.hasRecord = true;
        pa_mock_error &r = launch.record;
        r = pa_mock_error{};
        r.code = PA_ERR_BAD_BLOCK_ID;
        r.arg_slot = PA_ARG_BLOCK_TABLES;
        r.element_offset = tableIndex;
        r.extent_elems = launch.numBlocks;
        r.core = CurrentBlock();
        r.seq = CurrentItem().seq;
        r.head = CurrentItem().head;
        r.split = CurrentItem().split;
        std::snprintf(r.message, sizeof r.message, "%s", text);
    }
    throw std::runtime_error(text);
}
void UbAssigned(uint64_t begin, uint64_t end, uint64_t tempBegin, uint64_t tempEnd)
{
    const LaunchConfig *cfg = CurrentConfig();
    if (cfg == nullptr || !cfg->checked || begin >= tempEnd || end <= tempBegin) return;
    char text[240];
    std::snprintf(text, sizeof text,
                  "HAZARD: UB buffer [%llu, %llu) on block %d overlaps A2/A3's fixed temporary [%llu, %llu) that "
                  "row-expand and some conversion instructions write",
                  static_cast<unsigned long long>(begin), static_cast<unsigned long long>(end), CurrentBlock(),
                  static_cast<unsigned long long>(tempBegin), static_cast<unsigned long long>(tempEnd));
    throw std::runtime_error(text);
}
}  // namespace pa::devsim

extern "C" {

int32_t pa_abi_version(void) { return PA_ABI_VERSION; }

uint32_t pa_supported_keys(void) { return PA_SUPPORTED_KEYS_ALL; }

/* The ABI v3/v4 features the kernel executes (kernel/npu/pa_config.hpp). */
uint32_t pa_supported_features(void) { return PA_NPU_KERNEL_FEATURES; }

/* 1: this library runs the kernel's A2/A3 code path on the intrinsic emulator. */
int32_t pa_sim_device_path(void) { return 1; }

int32_t call_kernel(uint32_t block_dim, void *stream PA_PTR_ARGS(PA_PTR_PARAM))
{
    (void)stream;
    void *const ptr[PA_NUM_PTR_ARGS] = {PA_PTR_ARGS(PA_PTR_VALUE)};
    return Launch(block_dim, ptr);
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

/* The whole text of this thread's last error ("" after a launch that passed or failed the contract check). */
const char *pa_sim_last_error_text(void) { return host.errorText.c_str(); }

int32_t pa_sim_stats_get(pa_sim_stats *out)
{
    if (!host.hasStats) return PA_ERR_BAD_LAUNCH;
    if (out != nullptr) *out = host.stats;
    return PA_OK;
}

/* The instruction stream of the calling thread's later launches (devsim_trace.hpp), for the timing model. */
void pa_sim_trace_enable(int32_t on) { host.tracing = on != 0; }
int64_t pa_sim_trace_count(void) { return int64_t(host.trace.size()); }
int64_t pa_sim_trace_copy(pa_sim_trace_event *out, int64_t capacity)
{
    const int64_t n = std::min<int64_t>(capacity, int64_t(host.trace.size()));
    if (out != nullptr && n > 0) std::memcpy(out, host.trace.data(), size_t(n) * sizeof(pa_sim_trace_event));
    return n;
}
const char *pa_sim_trace_op_name(int32_t op) { return pa::devsim::TraceOpName(op); }
int32_t pa_sim_trace_event_bytes(void) { return int32_t(sizeof(pa_sim_trace_event)); }

int32_t pa_sim_sync_point_count(void) { return pa::kEdgeCount; }
void pa_sim_drop_sync(int32_t id) { g_droppedEdge = id; }
void pa_sim_skip_zero_padding(int32_t on) { g_skipZeroPadding = on; }
void pa_sim_keep_inherited_atomics(int32_t on) { g_keepInheritedAtomics = on != 0; }
void pa_sim_shorten_load(int32_t slot) { g_shortenedSlot = slot; }
void pa_sim_mutate_sync(int32_t kind, int32_t edge)
{
    g_mutationKind = kind;
    g_mutationEdge = edge;
}

/* The seed of later launches (negative: PA_SIM_SEED, else a fresh one per launch), and the seed of the calling
 * thread's last launch. */
void pa_sim_set_seed(int64_t seed) { g_seed = seed; }
uint64_t pa_sim_last_seed(void) { return host.lastSeed; }

/* The SoC whose cluster count bounds residency (NULL: PA_SIM_SOC or 910B2); -1 for an unknown name. */
int32_t pa_sim_set_soc(const char *name)
{
    try {
        if (name != nullptr) (void)pa::emu::Soc(name);
    } catch (const std::exception &) {
        return -1;
    }
    std::lock_guard<std::mutex> lock(g_socMutex);
    g_soc = name != nullptr ? name : "";
    return 0;
}

/* Clusters of the SoC named (NULL: the current one); -1 for an unknown name. */
int32_t pa_sim_soc_clusters(const char *name)
{
    try {
        return pa::emu::Soc(name != nullptr ? name : SocName().c_str()).clusters;
    } catch (const std::exception &) {
        return -1;
    }
}

}  // extern "C"
