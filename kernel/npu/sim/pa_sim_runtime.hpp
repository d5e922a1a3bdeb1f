/*
 * CPU-simulation runtime of the pa-kit NPU kernel (compiled only with __CPU_SIM).
 *
 * One launch = block_dim clusters, each one cube thread and two vector threads.  Everything the device
 * would provide (flag registers, the all-vector barrier, extent checks, error reporting) lives in a Launch;
 * each worker thread knows its Launch, core and role through a thread_local ThreadCtx.
 */
#ifndef PA_SIM_RUNTIME_HPP
#define PA_SIM_RUNTIME_HPP

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "../../pa_mock_api.h"
#include "../pa_config.hpp"
#include "../pa_sim_api.h"
#include "pa_sim_hazard.hpp"

namespace pa::sim {

/* Thrown inside a worker to unwind it after the launch failed (the first failure is recorded). */
struct Abort {};

enum Role : int32_t { kRoleCube = 0, kRoleVec0 = 1, kRoleVec1 = 2 };
constexpr int kRolesPerCluster = 3;

/* Flag registers of one cluster: counters, like FFTS flags.  Each pending set carries the signalling pipe's
 * vector clock for the hazard checker (empty when it is off).  toCube counts per vector sub-core: the cube's
 * mode-2 wait completes once both sub-cores have set, not on two sets of one. */
struct Cluster {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<hz::Clock> toVec[kFlagCount][kVecSubCores];
    std::deque<hz::Clock> toCube[kFlagCount][kVecSubCores];
};

/* A cross-core flag counter holds at most this many pending sets (4 bits on the device). */
constexpr size_t kMaxPendingSets = 15;
/* How a cross-core flag id is used; one use per id. */
enum FlagUse : int { kUseNone = 0, kUseCubeToVec = 1, kUseVecToCube = 2, kUseAllVector = 3 };

/* Per-thread counters, summed into pa_sim_stats after the join. */
struct Counters {
    uint64_t gmReadBytes = 0, gmWriteBytes = 0, kvReadBytes = 0, scratchBytes = 0, partialBytes = 0;
    uint64_t handoffs = 0, units = 0, tasks = 0, matmuls = 0, waits = 0;
    uint32_t peak[PA_SIM_REGIONS] = {};
};

struct Launch {
    uint64_t extentBytes[PA_NUM_PTR_ARGS] = {};
    int64_t numBlocks = 0;
    bool checked = true;
    uint32_t blockDim = 0;
    std::chrono::milliseconds timeout{0};
    /* Fault injection for the deadlock negative control: the n-th flag signal of the launch is lost. */
    int64_t dropSignal = -1;
    std::atomic<int64_t> signalCount{0};
    std::atomic<bool> abort{false};
    std::mutex errMu;
    bool hasError = false;
    pa_mock_error error{};
    std::vector<std::unique_ptr<Cluster>> clusters;
    /* all-vector barrier */
    std::mutex barMu;
    std::condition_variable barCv;
    uint32_t barArrived = 0;
    uint32_t barGeneration = 0;
    std::vector<Counters> counters; /* [core * kRolesPerCluster + role] */
    /* hazard checker: on in checked mode */
    bool hazards = false;
    hz::LaunchState hazard;
    /* instruction trace for the timing model: one stream per core role, [core * kRolesPerCluster + role] */
    bool tracing = false;
    std::vector<std::vector<pa_sim_trace_event>> trace;
    std::atomic<int> flagUse[kFlagCount] = {};
};

struct ThreadCtx {
    Launch *launch = nullptr;
    int32_t core = -1;
    int32_t role = kRoleCube;
    int32_t seq = -1, head = -1, split = -1, unit = -1;
    Counters *ctr = nullptr;
    hz::Role *hz = nullptr; /* the hazard checker's view of this core role, or null when it is off */
    std::vector<pa_sim_trace_event> *trace = nullptr; /* this role's trace stream, or null */
};

extern thread_local ThreadCtx tctx;

/* Records the first failure of the launch, wakes every waiter, and unwinds the calling worker. */
[[noreturn]] void Fail(int32_t code, int32_t slot, int64_t elemOffset, int64_t extentElems, const char *fmt, ...);
/* Unwinds a worker that noticed another worker's failure. */
[[noreturn]] void Unwind();

/* Cross-core signals are issued from pipe `pipe` (hz::Pipe) and cover only its earlier work. */
void SignalVectors(uint16_t flag, int pipe);
void WaitFromCube(uint16_t flag);
void SignalCube(uint16_t flag, int pipe);
void WaitFromVectors(uint16_t flag);
void VectorBarrier(int pipe);

/* Synchronisation edges removed from launches (pa_sim_drop_sync): both ends of edge `id` do nothing. */
bool EdgeDropped(int32_t id);
void DropEdge(int32_t id);
/* The edge mutated by kind `kind` (PA_SIM_MUTATE_*), or -1. */
int32_t MutatedEdge(int32_t kind);
void MutateEdge(int32_t kind, int32_t id);

/* GM access check of `span` elements (of `elemBytes`) starting at element `off` of slot `slot`:
 * rows x cols with strides (rowStride, colStride) in elements. */
void CheckAccess(int32_t slot, uint64_t off, uint64_t rows, uint64_t cols, uint64_t rowStride, uint64_t colStride,
                 uint32_t elemBytes, bool write);
void CheckBlockId(int64_t id, int64_t tableIndex);
void RecordAssign(int region, uint64_t endByte);

}  // namespace pa::sim

#endif /* PA_SIM_RUNTIME_HPP */
