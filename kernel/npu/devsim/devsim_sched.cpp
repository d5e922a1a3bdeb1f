/* The device-path simulation's scheduler (see devsim_sched.hpp). */
#include "devsim_sched.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>

namespace pa::devsim {

namespace {

using emu::Kind;

enum class State { Pending, Runnable, Blocked, Done };

struct Agent {
    uint32_t index = 0, block = 0;
    int role = 0;
    emu::Core core;
    State state = State::Pending;
    int waitFlag = -1;
    std::deque<Clock> delivered[emu::kCrossFlags]; /* the clocks of the sets a wait will consume */
    /* per pipe: issued cross-core sets' messages and clocks until they leave; they may leave in another order
     * (emu_pipes.cpp's outbox), and two of one pipe with the same message are interchangeable */
    std::deque<std::pair<uint64_t, Clock>> leaving[emu::kPipes];
    WorkItem item;
    Figures figures;
    std::unique_ptr<TraceStream> trace; /* with LaunchConfig::trace */
    std::condition_variable turn; /* notified when the baton comes to this core (or the launch aborts) */
};

/* Thrown in a core's thread when another core failed the launch: unwinds it quietly. */
struct Aborted {};

struct Run {
    const LaunchConfig &cfg;
    const emu::SocSpec &soc;
    std::vector<std::unique_ptr<Agent>> agents;
    std::mutex mu;
    int64_t running = -1;
    bool aborted = false;
    std::string error;
    std::mt19937_64 rng;
    std::vector<uint32_t> order; /* blocks in the order they become resident */
    size_t admitted = 0;
    /* mode 2, vector -> cube: each vector core's sets not yet matched by the other's, per block and flag */
    std::vector<std::deque<Clock>> fromVec; /* [(block * 2 + sub) * kCrossFlags + flag] */
    /* mode 0: arrivals of this generation of each flag, and the join of their clocks */
    uint32_t allVecArrivals[emu::kCrossFlags] = {};
    Clock allVecClock[emu::kCrossFlags];
    Hazards hazards;
    int64_t messages = 0;

    Run(const LaunchConfig &c, const emu::SocSpec &s) : cfg(c), soc(s), rng(c.seed) {}
};

thread_local Agent *t_agent = nullptr;
Run *g_run = nullptr; /* the launch in progress (launches are serialised) */
std::mutex g_launchMutex;

std::string Label(uint32_t block, int role)
{
    char text[48];
    std::snprintf(text, sizeof text, role == 0 ? "cube core %u.0" : "vec core %u.%d", block, role - 1);
    return text;
}

void WakeAll(Run &r)
{
    for (const auto &a : r.agents) a->turn.notify_one();
}

void Admit(Run &r)
{
    const uint32_t block = r.order[r.admitted++];
    for (int role = 0; role < kRoles; ++role) r.agents[block * kRoles + role]->state = State::Runnable;
}

std::string DeadlockText(Run &r)
{
    std::string text = "DEADLOCK (PA_SIM_SEED=" + std::to_string(r.cfg.seed) + "): no core can run;";
    for (const auto &a : r.agents) {
        if (a->state != State::Blocked) continue;
        text += " " + Label(a->block, a->role) + " waits on pipe S for cross-core flag " + std::to_string(a->waitFlag) +
                " (wait_flag_dev, counter 0);";
    }
    const size_t pending = r.order.size() - r.admitted;
    if (pending > 0) {
        text += " " + std::to_string(pending) + " of " + std::to_string(r.order.size()) +
                " blocks are not resident (" + r.soc.name + " holds " + std::to_string(r.soc.clusters) +
                " clusters; a block starts when a resident one ends)";
    }
    return text;
}

/* Hands the baton to a core picked at random among those that can run and waits to get it back.  Called with
 * the lock held by the core holding the baton; `me` may be null (a core that ended). */
void PassLocked(Run &r, std::unique_lock<std::mutex> &lock, Agent *me)
{
    std::vector<uint32_t> ready;
    bool blocked = false;
    for (const auto &a : r.agents) {
        if (a->state == State::Runnable) ready.push_back(a->index);
        blocked |= a->state == State::Blocked;
    }
    if (ready.empty()) {
        if (blocked) {
            r.error = DeadlockText(r);
            r.aborted = true;
            WakeAll(r);
            if (me != nullptr) throw Aborted{};
        }
        r.running = -1;
        return;
    }
    const uint32_t next = ready[r.rng() % ready.size()];
    if (me != nullptr && next == me->index) return;
    if (me != nullptr) ++me->figures.switches;
    r.running = next;
    r.agents[next]->turn.notify_one();
    if (me == nullptr) return;
    me->turn.wait(lock, [&] { return r.running == int64_t(me->index) || r.aborted; });
    if (r.aborted) throw Aborted{};
}

void Raise(Agent &to, int flag, Clock clock)
{
    emu::RaiseCrossCounter(to.core, flag, Label(to.block, to.role));
    to.delivered[flag].push_back(std::move(clock));
    if (to.state == State::Blocked && to.waitFlag == flag) {
        to.state = State::Runnable;
        to.waitFlag = -1;
    }
}

/* An FFTS message from the current core, as its pipe retires it: mode bits 4-7, flag bits 8-11.  `clock` is
 * the sending pipe's clock when the set was issued. */
void Deliver(Run &r, Agent &from, const emu::Issue &issue, Clock clock)
{
    const int mode = int((issue.config >> 4) & 0xf), flag = int((issue.config >> 8) & 0xf);
    if (r.messages++ == r.cfg.dropSignal) return; /* the fault injection of the deadlock negative control */
    const uint32_t base = from.block * kRoles;
    if (mode == 2 && from.role == 0) {
        Raise(*r.agents[base + 1], flag, clock);
        Raise(*r.agents[base + 2], flag, clock);
    } else if (mode == 2) {
        std::deque<Clock> &mine = r.fromVec[(from.block * 2 + uint32_t(from.role - 1)) * emu::kCrossFlags + flag];
        std::deque<Clock> &other = r.fromVec[(from.block * 2 + uint32_t(2 - from.role)) * emu::kCrossFlags + flag];
        mine.push_back(std::move(clock));
        if (!other.empty()) {
            Clock both = mine.front();
            Join(both, other.front());
            mine.pop_front();
            other.pop_front();
            Raise(*r.agents[base], flag, std::move(both));
        }
    } else if (mode == 0 && from.role != 0) {
        Clock &join = r.allVecClock[flag];
        Join(join, clock);
        if (++r.allVecArrivals[flag] == 2 * r.cfg.blockDim) {
            for (const auto &a : r.agents) {
                if (a->role != 0) Raise(*a, flag, join);
            }
            r.allVecArrivals[flag] = 0;
            join.clear();
        }
    } else {
        throw emu::Fault("emu fault: ffts_cross_core_sync on " + Label(from.block, from.role) + ": mode " +
                         std::to_string(mode) + " from a " + (from.role == 0 ? "cube" : "vector") +
                         " core is not one the emulated FFTS delivers (2: within the cluster, 0: vector cores)");
    }
}

/* After the whole launch, when no message is left to arrive: every cross-core counter back at 0 and no FFTS
 * half-set (one vector core's mode-2 set its partner never matched, a mode-0 barrier some vector cores never
 * reached) pending.  Checked at the launch's end, not a core's: a core's counter can still be raised by another
 * core after it ended, and on a device the leftover reaches the next kernel (or the next block) on that core. */
std::string TrailingCrossText(Run &r)
{
    const std::string seed = " [PA_SIM_SEED=" + std::to_string(r.cfg.seed) + "]";
    for (const auto &a : r.agents) {
        try {
            emu::CheckTrailingFlags(a->core, Label(a->block, a->role), false, true);
        } catch (const emu::Fault &fault) {
            return fault.what() + seed;
        }
    }
    for (size_t i = 0; i < r.fromVec.size(); ++i) {
        if (r.fromVec[i].empty()) continue;
        const uint32_t block = uint32_t(i / (2 * emu::kCrossFlags)), sub = uint32_t(i / emu::kCrossFlags % 2);
        return "TRAILING_FLAG (HAZARD): " + Label(block, int(sub) + 1) + " ends the launch with " +
               std::to_string(r.fromVec[i].size()) + " mode-2 set(s) of cross-core flag " +
               std::to_string(i % emu::kCrossFlags) + " its partner vector core never matched (the cube's counter " +
               "waits for both)" + seed;
    }
    for (int f = 0; f < emu::kCrossFlags; ++f) {
        if (r.allVecArrivals[f] == 0) continue;
        return "TRAILING_FLAG (HAZARD): the launch ends with " + std::to_string(r.allVecArrivals[f]) + " of " +
               std::to_string(2 * r.cfg.blockDim) + " vector cores' mode-0 sets of cross-core flag " + std::to_string(f) +
               " (a barrier some vector cores never reached)" + seed;
    }
    return "";
}

void CountFigures(Agent &a, const emu::Issue &issue, const LaunchConfig &cfg)
{
    Figures &f = a.figures;
    ++f.intrinsics;
    const bool transfer = issue.pipe == emu::Pipe::MTE2 || issue.pipe == emu::Pipe::MTE3 || issue.pipe == emu::Pipe::FIX;
    for (const emu::Access &acc : issue.accesses) {
        if (acc.space != emu::Space::GM) {
            const int region = int(acc.space) - 1; /* UB, L1, L0A, L0B, L0C */
            f.peak[region] = std::max<uint32_t>(f.peak[region], uint32_t(acc.start + acc.bytes));
            continue;
        }
        if (!transfer) continue;
        (acc.write ? f.gmWriteBytes : f.gmReadBytes) += acc.bytes;
        for (const GmClass &c : cfg.classes) {
            if (acc.start < c.start || acc.start >= c.end) continue;
            if (c.kind == 1 && !acc.write) f.kvReadBytes += acc.bytes;
            if (c.kind == 2) f.scratchBytes += acc.bytes;
            if (c.kind == 3) f.partialBytes += acc.bytes;
            break; /* one class per access: aliased buffers (MLA's K and V, the one latent cache) count once */
        }
    }
}

void OnIssue(const emu::Issue &issue)
{
    Agent &a = *t_agent;
    Run &r = *g_run;
    CountFigures(a, issue, r.cfg);
    if (a.trace) a.trace->Record(issue, r.cfg.classes);
    if (issue.kind == Kind::CrossWait && r.cfg.checked) {
        std::deque<Clock> &q = a.delivered[issue.event];
        if (!q.empty()) {
            r.hazards.JoinAll(a.index, q.front());
            q.pop_front();
        }
    } else if (issue.kind == Kind::CrossWait) {
        a.delivered[issue.event].clear();
    }
    if (r.cfg.checked) r.hazards.OnIssue(a.index, issue, a.item);
    if (issue.kind == Kind::CrossSet) {
        a.leaving[int(issue.pipe)].emplace_back(issue.config, r.cfg.checked ? r.hazards.Snapshot(a.index, issue.pipe) : Clock{});
    }
    std::unique_lock<std::mutex> lock(r.mu);
    if (issue.kind == Kind::CrossWait || r.rng() % r.cfg.switchEvery == 0) PassLocked(r, lock, &a);
}

/* A cross-core set retired on its pipe: the message reaches its receivers, who may now run. */
void OnCrossSetRetired(const emu::Issue &issue)
{
    Agent &a = *t_agent;
    Run &r = *g_run;
    auto &leaving = a.leaving[int(issue.pipe)];
    auto it = std::find_if(leaving.begin(), leaving.end(), [&](const auto &m) { return m.first == issue.config; });
    if (it == leaving.end()) throw emu::Fault("devsim: a cross-core message left that its core never issued");
    Clock clock = std::move(it->second);
    leaving.erase(it);
    std::unique_lock<std::mutex> lock(r.mu);
    Deliver(r, a, issue, std::move(clock));
    PassLocked(r, lock, &a);
}

bool OnCrossWait(int flag)
{
    Agent &a = *t_agent;
    Run &r = *g_run;
    std::unique_lock<std::mutex> lock(r.mu);
    a.state = State::Blocked;
    a.waitFlag = flag;
    PassLocked(r, lock, &a);
    return a.core.cross[flag] > 0;
}

void CoreThread(Run &r, Agent &a)
{
    t_agent = &a;
    emu::SetCurrent(&a.core);
    try {
        {
            std::unique_lock<std::mutex> lock(r.mu);
            a.turn.wait(lock, [&] { return r.running == int64_t(a.index) || r.aborted; });
            if (r.aborted) throw Aborted{};
        }
        r.cfg.body(a.block, a.role);
        emu::Drain(); /* the pipes finish what the scalar unit issued and its messages leave before the core ends */
        emu::CheckTrailingFlags(a.core, Label(a.block, a.role), true, false); /* its own flags: nobody else's */
        std::unique_lock<std::mutex> lock(r.mu);
        a.state = State::Done;
        const uint32_t base = a.block * kRoles;
        bool blockDone = true;
        for (int role = 0; role < kRoles; ++role) blockDone &= r.agents[base + role]->state == State::Done;
        if (blockDone && r.admitted < r.order.size()) Admit(r);
        PassLocked(r, lock, nullptr);
    } catch (const Aborted &) {
    } catch (const std::exception &err) {
        std::unique_lock<std::mutex> lock(r.mu);
        if (!r.aborted) {
            r.error = std::string(err.what()) + " [PA_SIM_SEED=" + std::to_string(r.cfg.seed) + "]";
            r.aborted = true;
        }
        WakeAll(r);
    }
    {
        std::unique_lock<std::mutex> lock(r.mu);
        a.state = State::Done;
    }
    emu::SetCurrent(nullptr);
    t_agent = nullptr;
}

}  // namespace

WorkItem &CurrentItem()
{
    static thread_local WorkItem none;
    return t_agent != nullptr ? t_agent->item : none;
}

int32_t CurrentBlock() { return t_agent != nullptr ? int32_t(t_agent->block) : -1; }

Figures *CurrentFigures() { return t_agent != nullptr ? &t_agent->figures : nullptr; }

void ScalarGmRead()
{
    if (t_agent != nullptr && t_agent->trace) t_agent->trace->RecordScalarGmRead();
}

const LaunchConfig *CurrentConfig() { return t_agent != nullptr && g_run != nullptr ? &g_run->cfg : nullptr; }

std::string RunLaunch(const LaunchConfig &cfg, Figures &figures)
{
    std::lock_guard<std::mutex> serial(g_launchMutex);
    const emu::SocSpec &soc = emu::Soc(cfg.soc);
    Run r(cfg, soc);
    const uint32_t cores = cfg.blockDim * kRoles;
    std::vector<std::string> labels;
    for (uint32_t b = 0; b < cfg.blockDim; ++b) {
        for (int role = 0; role < kRoles; ++role) {
            auto a = std::make_unique<Agent>();
            a->index = b * kRoles + uint32_t(role);
            a->block = b;
            a->role = role;
            a->core = emu::MakeCore(soc, role == 0 ? emu::CoreKind::Cube : emu::CoreKind::Vector, int(b), role == 0 ? 0 : role - 1,
                                    cfg.seed);
            emu::RandomiseModeState(a->core, cfg.seed * 1315423911ull + a->index);
            emu::SetInitCheck(a->core, cfg.checked && cfg.initcheck);
            emu::SetPipeReorder(a->core, cfg.inFlight, cfg.seed * 2654435761ull + a->index);
            if (cfg.trace != nullptr) a->trace = std::make_unique<TraceStream>(b, role);
            a->core.check_mad_inputs = cfg.checkMadInputs;
            labels.push_back(Label(b, role));
            r.agents.push_back(std::move(a));
        }
    }
    if (r.cfg.checked) {
        r.hazards.Init(cores, labels);
        for (const auto &[range, name] : cfg.watched) r.hazards.WatchGm(range.first, range.second, name);
    }
    r.fromVec.resize(size_t(cfg.blockDim) * 2 * emu::kCrossFlags);
    r.order.resize(cfg.blockDim);
    for (uint32_t b = 0; b < cfg.blockDim; ++b) r.order[b] = b;
    std::shuffle(r.order.begin(), r.order.end(), r.rng);
    for (uint32_t b = 0; b < std::min<uint32_t>(cfg.blockDim, uint32_t(soc.clusters)); ++b) Admit(r);

    emu::ClearGm();
    for (const auto &[start, bytes] : cfg.gmBuffers) emu::RegisterGm(reinterpret_cast<void *>(start), bytes);
    g_run = &r;
    emu::SetIssueHook(OnIssue);
    emu::SetCrossWaitHook(OnCrossWait);
    emu::SetCrossSetHook(OnCrossSetRetired);

    std::vector<std::thread> threads;
    threads.reserve(cores);
    for (const auto &a : r.agents) threads.emplace_back(CoreThread, std::ref(r), std::ref(*a));
    {
        std::unique_lock<std::mutex> lock(r.mu);
        PassLocked(r, lock, nullptr);
    }
    for (auto &t : threads) t.join();

    emu::SetIssueHook(nullptr);
    emu::SetCrossWaitHook(nullptr);
    emu::SetCrossSetHook(nullptr);
    emu::ClearGm();
    g_run = nullptr;
    figures = Figures{};
    for (const auto &a : r.agents) {
        const Figures &f = a->figures;
        figures.gmReadBytes += f.gmReadBytes;
        figures.gmWriteBytes += f.gmWriteBytes;
        figures.kvReadBytes += f.kvReadBytes;
        figures.scratchBytes += f.scratchBytes;
        figures.partialBytes += f.partialBytes;
        figures.handoffs += f.handoffs;
        figures.units += f.units;
        figures.tasks += f.tasks;
        figures.matmuls += f.matmuls;
        figures.scoreTiles += f.scoreTiles;
        figures.maskedScoreTiles += f.maskedScoreTiles;
        figures.intrinsics += f.intrinsics;
        figures.switches += f.switches;
        for (int i = 0; i < 5; ++i) figures.peak[i] = std::max(figures.peak[i], f.peak[i]);
    }
    if (cfg.trace != nullptr) {
        for (const auto &a : r.agents) cfg.trace->insert(cfg.trace->end(), a->trace->Events().begin(), a->trace->Events().end());
    }
    if (r.error.empty() && r.aborted) r.error = DeadlockText(r);
    if (r.error.empty()) r.error = TrailingCrossText(r);
    return r.error;
}

}  // namespace pa::devsim
