/*
 * The device-path simulation's scheduler: one launch of the kernel on emulated A2/A3 clusters.
 *
 * Each block is a cluster of one cube core and two vector cores, each an emulated core (pa::emu::Core) run by
 * its own host thread, whose pipes retire its instructions out of program order as far as its flags permit
 * (emu_pipes.cpp, up to `inFlight` queued); one baton lets exactly one of them execute at a time, so a launch is a function of its
 * seed.  The baton passes, to a core picked by the seeded generator among those that can run, at every
 * cross-core set and wait and at random intrinsics (on average every `switchEvery`); a replay with the same seed
 * (PA_SIM_SEED) repeats the launch exactly.
 *
 * As on the device: only as many blocks are resident as the SoC has clusters, the rest start when a resident
 * block ends; blocks start in a seeded random order; on-chip memory and mode state start hostile.  Cross-core
 * messages (FFTS) raise the receivers' 4-bit counters: mode 2 within the cluster (a vector core's set reaches the
 * cube once both vector cores have set), mode 0 across every vector core of the launch.  A wait that no core
 * left can satisfy ends the launch with a DEADLOCK error naming the waiting cores, pipe and flag.
 */
#ifndef PA_DEVSIM_SCHED_HPP
#define PA_DEVSIM_SCHED_HPP

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "devsim_hazard.hpp"
#include "devsim_trace.hpp"
#include "emu_core.hpp"
#include "emu_initcheck.hpp"

namespace pa::devsim {

inline constexpr int kRoles = 3; /* cube, vector 0, vector 1 */

/* Figures of one launch (what pa_sim_stats reports). */
struct Figures {
    uint64_t gmReadBytes = 0, gmWriteBytes = 0, kvReadBytes = 0, scratchBytes = 0, partialBytes = 0;
    uint64_t handoffs = 0, units = 0, tasks = 0, matmuls = 0, intrinsics = 0, switches = 0;
    uint64_t scoreTiles = 0, maskedScoreTiles = 0;
    uint32_t peak[5] = {}; /* UB, L1, L0A, L0B, L0C: highest end offset touched */
};

/* How a GM access is counted in the figures: which argument range it lies in. */

struct LaunchConfig {
    uint32_t blockDim = 1;
    const char *soc = "910B2";
    uint64_t seed = 1;
    uint32_t switchEvery = 16;
    uint32_t inFlight = 256;                               /* per core: instructions queued in its pipes (0: program order) */
    bool checked = true;                                   /* hazard checker on */
    bool checkMadInputs = true;                            /* a non-finite mad operand element faults (PA_SIM_MAD_INPUT_CHECK) */
    bool initcheck = true;                                 /* with checked: UNINIT faults (emu_initcheck.hpp) */
    int64_t dropSignal = -1;                               /* fault injection: the n-th FFTS message is lost */
    std::vector<std::pair<uint64_t, uint64_t>> gmBuffers;  /* every registered argument range */
    std::vector<std::pair<std::pair<uint64_t, uint64_t>, std::string>> watched; /* written buffers, named */
    std::vector<GmClass> classes;
    std::function<void(uint32_t block, int role)> body;   /* runs the kernel on the current core */
    void *caller = nullptr; /* the caller's own per-launch state, reached from the cores by CurrentConfig() */
    std::vector<pa_sim_trace_event> *trace = nullptr; /* non-null: the launch's instruction stream is appended here */
};

/* Runs one launch to its end; returns "" or the first failure's text (a fault, a HAZARD or a DEADLOCK). */
std::string RunLaunch(const LaunchConfig &config, Figures &figures);

/* The work item of the calling core (the kernel's SetWorkItem/SetUnit), for reports. */
WorkItem &CurrentItem();
/* The block of the calling core (-1 off a core thread). */
int32_t CurrentBlock();
Figures *CurrentFigures();
/* The configuration of the launch the calling core thread belongs to (nullptr outside a launch). */
const LaunchConfig *CurrentConfig();

}  // namespace pa::devsim

#endif /* PA_DEVSIM_SCHED_HPP */
