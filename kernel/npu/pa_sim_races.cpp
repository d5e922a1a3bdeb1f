/*
 * A library of small kernels with one deliberate race each, beside a fixed twin that must pass: the hazard
 * checker's negative controls against real code (compiled only with __CPU_SIM).
 *
 * Each kernel runs as one cluster (a cube and two vector sub-cores, one host thread each) through the same
 * platform layer and checker as the decode kernel.  pa_sim_race_run(i, fixed, err) returns PA_ERR_HAZARD for
 * the racy kernel and PA_OK for its twin.
 */
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "pa_platform.hpp"
#include "sim/pa_record.hpp"

namespace pa::races {

namespace {

/* Edge ids of the race kernels' own flags: far from the decode kernel's, so pa_sim_drop_sync never hits them. */
constexpr int kRaceEdge = 1000;
constexpr int kElems = 4096;

using VecF = Tile<TileType::Vec, float, 8, 64, BLayout::RowMajor, DYNAMIC, DYNAMIC>;
using RowF = Tile<TileType::Vec, float, 1, 64, BLayout::RowMajor, 1, DYNAMIC>;
using VecH = Tile<TileType::Vec, half, 8, 64, BLayout::RowMajor, DYNAMIC, DYNAMIC>;
using ScalarF = Tile<TileType::Vec, float, 1, 8, BLayout::RowMajor, 1, 1>;
using MatH = Tile<TileType::Mat, half, 16, 16, BLayout::ColMajor, DYNAMIC, DYNAMIC, SLayout::RowMajor, kFractalBytes>;
using LeftH = TileLeft<half, 16, 16, DYNAMIC, DYNAMIC>;
using RightH = TileRight<half, 16, 16, DYNAMIC, DYNAMIC>;
using AccF = TileAcc<float, 16, 16, DYNAMIC, DYNAMIC>;

template <Pipe S, Pipe D>
constexpr Flag<S, D> F(int event = 0) { return {event, kRaceEdge}; }

struct Bufs {
    Gm<float> a, b;   /* writable fp32 buffers (slots s and o_tmp) */
    Gm<half> in, h;   /* read-only fp16 input (slot q), writable fp16 buffer (slot p) */
};

/* Loads 8 x 64 floats of `g` into a UB tile at `ub` and makes them visible to V (ev 0). */
VecF LoadVec(Gm<float> g, uint32_t ub, bool flag = true)
{
    VecF x(8, 64);
    Assign(x, ub);
    LoadNd(x, g, 0, 8, 64, 64, kTrafficOther);
    if (flag) Handoff(F<kPipeMte2, kPipeV>());
    return x;
}

void StoreVec(Gm<float> g, VecF &x, bool flag = true)
{
    if (flag) Handoff(F<kPipeV, kPipeMte3>());
    StoreNd(g, 0, 8, 64, 64, x, kTrafficOther);
}

/* The cube's Q.K-like step: two L1 loads, moves to L0A/L0B, one matmul; returns with the result in L0C. */
AccF CubeMatmul(Bufs &g, bool loadFlag, bool movFlag)
{
    MatH a(16, 16), b(16, 16);
    LeftH l(16, 16);
    RightH r(16, 16);
    AccF acc(16, 16);
    Assign(a, 0);
    Assign(b, 2048);
    Assign(l, 0);
    Assign(r, 0);
    Assign(acc, 0);
    LoadNd(a, g.in, 0, 16, 16, 16, kTrafficOther);
    LoadNd(b, g.in, 256, 16, 16, 16, kTrafficOther);
    if (loadFlag) Handoff(F<kPipeMte2, kPipeMte1>());
    Mov(l, a);
    Mov(r, b);
    if (movFlag) Handoff(F<kPipeMte1, kPipeM>());
    Matmul(acc, l, r);
    return acc;
}

bool Vec0(int role) { return role == sim::kRoleVec0; }
bool Cube(int role) { return role == sim::kRoleCube; }

void LoadThenVector(bool fixed, int role, Bufs &g)
{
    if (!Vec0(role)) return;
    VecF x = LoadVec(g.a, 0, fixed);
    MulS(x, x, 2.0f);
    StoreVec(g.b, x);
}

void VectorThenStore(bool fixed, int role, Bufs &g)
{
    if (!Vec0(role)) return;
    VecF x = LoadVec(g.a, 0);
    MulS(x, x, 2.0f);
    StoreVec(g.b, x, fixed);
}

void ReloadWhileVectorReads(bool fixed, int role, Bufs &g)
{
    if (!Vec0(role)) return;
    VecF x = LoadVec(g.a, 0);
    VecF y(8, 64);
    Assign(y, 4096);
    MulS(y, x, 2.0f);
    if (fixed) Handoff(F<kPipeV, kPipeMte2>());
    LoadNd(x, g.b, 0, 8, 64, 64, kTrafficOther);
    Handoff(F<kPipeMte2, kPipeV>());
    VecBarrier(kRaceEdge);
    Add(y, y, x);
    StoreVec(g.a, y);
}

void VectorWithoutBarrier(bool fixed, int role, Bufs &g)
{
    if (!Vec0(role)) return;
    VecF x = LoadVec(g.a, 0);
    VecF y(8, 64);
    Assign(y, 4096);
    Exp(x, x);
    if (fixed) VecBarrier(kRaceEdge);
    Add(y, x, x);
    StoreVec(g.b, y);
}

void ScalarReadWithoutFlag(bool fixed, int role, Bufs &g)
{
    if (!Vec0(role)) return;
    RowF x(64), tmp(64);
    ScalarF mx;
    Assign(x, 0);
    Assign(tmp, 512);
    Assign(mx, 1024);
    LoadNd(x, g.a, 0, 1, 64, 64, kTrafficOther);
    Handoff(F<kPipeMte2, kPipeV>());
    RowMax(mx, x, tmp);
    if (fixed) Handoff(F<kPipeV, kPipeS>());
    (void)ScalarRead(mx, 0);
}

void MoveBeforeLoad(bool fixed, int role, Bufs &g)
{
    if (!Cube(role)) return;
    (void)CubeMatmul(g, fixed, true);
}

void StoreBeforeMatmul(bool fixed, int role, Bufs &g)
{
    if (!Cube(role)) return;
    AccF acc = CubeMatmul(g, true, true);
    if (fixed) Handoff(F<kPipeM, kPipeFix>());
    StoreNd(g.a, 0, 16, 16, 16, acc, kTrafficOther);
}

void PingPongOnOneEvent(bool fixed, int role, Bufs &g)
{
    if (!Vec0(role)) return;
    VecF x0(8, 64), x1(8, 64);
    Assign(x0, 0);
    Assign(x1, 4096);
    LoadNd(x0, g.a, 0, 8, 64, 64, kTrafficOther);
    SetFlag(F<kPipeMte2, kPipeV>(0));
    LoadNd(x1, g.b, 0, 8, 64, 64, kTrafficOther);
    SetFlag(F<kPipeMte2, kPipeV>(fixed ? 1 : 0));
    WaitFlag(F<kPipeMte2, kPipeV>(0));
    WaitFlag(F<kPipeMte2, kPipeV>(fixed ? 1 : 0));
    Add(x0, x0, x1);
}

/* cube: S-like result to GM, then a cross-core signal; vectors: wait, then load it */
void SignalFromWrongPipe(bool fixed, int role, Bufs &g)
{
    constexpr CrossFlag kReady{3, kRaceEdge};
    if (Cube(role)) {
        AccF acc = CubeMatmul(g, true, true);
        Handoff(F<kPipeM, kPipeFix>());
        StoreNd(g.a, 0, 16, 16, 16, acc, kTrafficOther);
        if (fixed) SignalVectors(kReady);
        else rec::Signal(kReady.id, kReady.edge, kPipeMte2, rec::kToVectors); /* covers only MTE2's loads */
        return;
    }
    WaitFromCube(kReady);
    VecF x = LoadVec(g.a, 0);
    MulS(x, x, 2.0f);
}

/* vector 0 writes fp16 rows for the cube; the racy cube reads them with no cross-core wait */
void CubeReadsWithoutWait(bool fixed, int role, Bufs &g)
{
    constexpr CrossFlag kReady{4, kRaceEdge};
    if (Cube(role)) {
        if (fixed) WaitFromVectors(kReady);
        MatH a(16, 16);
        Assign(a, 0);
        LoadNd(a, g.h, 0, 16, 16, 16, kTrafficOther);
        return;
    }
    if (Vec0(role)) {
        VecF x = LoadVec(g.a, 0);
        VecH y(4, 64);
        Assign(y, 8192);
        Cvt(y, x, RoundMode::CAST_RINT);
        Handoff(F<kPipeV, kPipeMte3>());
        StoreNd(g.h, 0, 4, 64, 64, y, kTrafficOther);
    }
    if (fixed) SignalCube(kReady); /* mode 2: the cube's wait needs both sub-cores */
}

void ReadBackWithoutFlag(bool fixed, int role, Bufs &g)
{
    if (!Vec0(role)) return;
    VecF x = LoadVec(g.a, 0);
    MulS(x, x, 2.0f);
    StoreVec(g.b, x);
    if (fixed) Handoff(F<kPipeMte3, kPipeMte2>());
    VecF y(8, 64);
    Assign(y, 4096);
    LoadNd(y, g.b, 0, 8, 64, 64, kTrafficOther);
}

void FlagLeftSet(bool fixed, int role, Bufs &g)
{
    if (!Vec0(role)) return;
    VecF x(8, 64);
    Assign(x, 0);
    LoadNd(x, g.a, 0, 8, 64, 64, kTrafficOther);
    SetFlag(F<kPipeMte2, kPipeV>());
    if (fixed) WaitFlag(F<kPipeMte2, kPipeV>());
}

void WaitWithoutSet(bool fixed, int role, Bufs &g)
{
    if (!Vec0(role)) return;
    VecF x(8, 64);
    Assign(x, 0);
    LoadNd(x, g.a, 0, 8, 64, 64, kTrafficOther);
    if (fixed) SetFlag(F<kPipeMte2, kPipeV>());
    WaitFlag(F<kPipeMte2, kPipeV>());
}

void BufferOverFixedTemp(bool fixed, int role, Bufs &g)
{
    if (!Vec0(role)) return;
    (void)LoadVec(g.a, fixed ? 0 : 184 * 1024 - 1024);
}

/* vector 0 writes GM and signals; the cube reads a word of it with a scalar load */
void ScalarGmReadWithoutInvalidate(bool fixed, int role, Bufs &g)
{
    constexpr CrossFlag kReady{5, kRaceEdge};
    if (Cube(role)) {
        WaitFromVectors(kReady);
        if (fixed) rec::InvalidateCache();
        (void)ReadScalar(g.a, 0);
        return;
    }
    if (Vec0(role)) {
        VecF x = LoadVec(g.b, 0);
        MulS(x, x, 2.0f);
        StoreVec(g.a, x);
    }
    SignalCube(kReady);
}

/* vector 0 writes partial-like rows before the all-vector barrier; vector 1 reads them after it */
void BarrierFromWrongPipe(bool fixed, int role, Bufs &g)
{
    if (Cube(role)) return;
    if (Vec0(role)) {
        VecF x = LoadVec(g.b, 0);
        MulS(x, x, 2.0f);
        StoreVec(g.a, x);
    }
    rec::AllVectorBarrier(kRaceEdge, fixed ? kPipeMte3 : kPipeV); /* V's work is done; MTE3's store may not be */
    if (!Vec0(role)) (void)LoadVec(g.a, 0);
}

struct Race {
    const char *name;
    void (*body)(bool fixed, int role, Bufs &g);
};

const Race kRaces[] = {
    {"MTE2 load read by V without a flag", LoadThenVector},
    {"V result stored by MTE3 without a flag", VectorThenStore},
    {"MTE2 reload of a buffer V still reads", ReloadWhileVectorReads},
    {"V reads a V result without pipe_barrier(PIPE_V)", VectorWithoutBarrier},
    {"scalar GetValue of a V result without a V->S flag", ScalarReadWithoutFlag},
    {"TMOV of an L1 tile before its MTE2 load is done", MoveBeforeLoad},
    {"FIX store of L0C before the matmul is done", StoreBeforeMatmul},
    {"both ping-pong halves on one event id", PingPongOnOneEvent},
    {"cross-core signal issued from a pipe that did not write", SignalFromWrongPipe},
    {"cube loads what the vectors write, with no cross-core wait", CubeReadsWithoutWait},
    {"MTE2 reads back GM that MTE3 of the same core is writing", ReadBackWithoutFlag},
    {"a flag still set when the core exits", FlagLeftSet},
    {"a wait_flag with no set_flag (the device hangs)", WaitWithoutSet},
    {"a UB buffer over A2/A3's fixed row-expand temporary", BufferOverFixedTemp},
    {"scalar read of GM another core wrote, without dcci", ScalarGmReadWithoutInvalidate},
    {"all-vector barrier signalled from a pipe that did not write", BarrierFromWrongPipe},
};
constexpr int kRaceCount = int(sizeof(kRaces) / sizeof(kRaces[0]));

int32_t Run(int32_t index, bool fixed, pa_mock_error *err)
{
    std::vector<float> a(kElems, 1.0f), b(kElems, 0.5f);
    std::vector<half> in(kElems, half(0.25f)), h(kElems, half(0.0f));
    sim::Launch L;
    L.extentBytes[PA_ARG_S] = a.size() * sizeof(float);
    L.extentBytes[PA_ARG_O_TMP] = b.size() * sizeof(float);
    L.extentBytes[PA_ARG_Q] = in.size() * sizeof(half);
    L.extentBytes[PA_ARG_P] = h.size() * sizeof(half);
    L.checked = true;
    L.blockDim = 1;
    L.timeout = std::chrono::milliseconds(5000);
    L.counters.resize(sim::kRolesPerCluster);
    L.clusters.emplace_back(new sim::Cluster());
    L.hazards = true;
    sim::hz::InitLaunch(L);
    Bufs g{{a.data(), PA_ARG_S}, {b.data(), PA_ARG_O_TMP}, {in.data(), PA_ARG_Q}, {h.data(), PA_ARG_P}};
    std::vector<std::thread> threads;
    for (int32_t role = 0; role < sim::kRolesPerCluster; ++role) {
        threads.emplace_back([&, role] { rec::RunCoreRole(L, 0, role, [&] { kRaces[index].body(fixed, role, g); }); });
    }
    for (auto &t : threads) t.join();
    if (err != nullptr) *err = L.error;
    return L.hasError ? L.error.code : PA_OK;
}

}  // namespace
}  // namespace pa::races

extern "C" {

int32_t pa_sim_race_count(void) { return pa::races::kRaceCount; }

const char *pa_sim_race_name(int32_t index)
{
    return index >= 0 && index < pa::races::kRaceCount ? pa::races::kRaces[index].name : nullptr;
}

int32_t pa_sim_race_run(int32_t index, int32_t fixed, pa_mock_error *err)
{
    if (index < 0 || index >= pa::races::kRaceCount) return PA_ERR_BAD_LAUNCH;
    return pa::races::Run(index, fixed != 0, err);
}

}  // extern "C"
