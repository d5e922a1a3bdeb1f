/*
 * A library of small kernels with one deliberate synchronisation defect each, beside a fixed twin that must pass:
 * the device-path simulation's negative controls against real code, through the same platform layer, emulator
 * and hazard checker as the decode kernel (compiled only with PA_DEVICE_SIM, once per core role like the kernel:
 * emu/build_emu.sh renames pa_sim_race_body per role).  devsim/devsim_races.cpp runs one as a one-cluster launch:
 * pa_sim_race_run(i, fixed, err) fails for the defective kernel (a HAZARD, or a DEADLOCK where the device hangs)
 * and returns PA_OK for its twin.  Cube-only and vector-only code is compiled in its own role only.
 */
#include "pa_platform.hpp"

#if defined(__DAV_C220_CUBE__)
#define PA_RACE_CUBE 1
#else
#define PA_RACE_CUBE 0
#endif

namespace pa::races {

namespace {

/* Edge ids of the race kernels' own flags: far from the decode kernel's, so pa_sim_drop_sync never hits them. */
constexpr int kRaceEdge = 1000;

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

constexpr int kRoleCube = 0, kRoleVec0 = 1;

#if !PA_RACE_CUBE

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

#else
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
#endif

bool Vec0(int role) { return role == kRoleVec0; }

/* Each race has a cube part and a vector part (either may be empty); a vector part runs on both vector cores
 * unless it returns for the second.  Only the role's own part is compiled in each role's object. */
#if PA_RACE_CUBE
#define PA_RACE(Name) void Name(bool fixed, [[maybe_unused]] int role, [[maybe_unused]] Bufs &g)
#define PA_CUBE_PART(...) __VA_ARGS__
#define PA_VEC_PART(...) (void)fixed;
#else
#define PA_RACE(Name) void Name(bool fixed, [[maybe_unused]] int role, [[maybe_unused]] Bufs &g)
#define PA_CUBE_PART(...) (void)fixed;
#define PA_VEC_PART(...) __VA_ARGS__
#endif

PA_RACE(LoadThenVector)
{
    PA_VEC_PART(if (!Vec0(role)) return;
                VecF x = LoadVec(g.a, 0, fixed);
                MulS(x, x, 2.0f);
                StoreVec(g.b, x);)
}

PA_RACE(VectorThenStore)
{
    PA_VEC_PART(if (!Vec0(role)) return;
                VecF x = LoadVec(g.a, 0);
                MulS(x, x, 2.0f);
                StoreVec(g.b, x, fixed);)
}

PA_RACE(ReloadWhileVectorReads)
{
    PA_VEC_PART(if (!Vec0(role)) return;
                VecF x = LoadVec(g.a, 0);
                VecF y(8, 64);
                Assign(y, 4096);
                MulS(y, x, 2.0f);
                if (fixed) Handoff(F<kPipeV, kPipeMte2>());
                LoadNd(x, g.b, 0, 8, 64, 64, kTrafficOther);
                Handoff(F<kPipeMte2, kPipeV>());
                VecBarrier(kRaceEdge);
                Add(y, y, x);
                StoreVec(g.a, y);)
}

PA_RACE(VectorWithoutBarrier)
{
    PA_VEC_PART(if (!Vec0(role)) return;
                VecF x = LoadVec(g.a, 0);
                VecF y(8, 64);
                Assign(y, 4096);
                Exp(x, x);
                if (fixed) VecBarrier(kRaceEdge);
                Add(y, x, x);
                StoreVec(g.b, y);)
}

PA_RACE(ScalarReadWithoutFlag)
{
    PA_VEC_PART(if (!Vec0(role)) return;
                RowF x(64), tmp(64);
                ScalarF mx;
                Assign(x, 0);
                Assign(tmp, 512);
                Assign(mx, 1024);
                LoadNd(x, g.a, 0, 1, 64, 64, kTrafficOther);
                Handoff(F<kPipeMte2, kPipeV>());
                RowMax(mx, x, tmp);
                if (fixed) Handoff(F<kPipeV, kPipeS>());
                (void)ScalarRead(mx, 0);)
}

PA_RACE(MoveBeforeLoad)
{
    PA_CUBE_PART((void)CubeMatmul(g, fixed, true);)
}

PA_RACE(StoreBeforeMatmul)
{
    PA_CUBE_PART(AccF acc = CubeMatmul(g, true, true);
                 if (fixed) Handoff(F<kPipeM, kPipeFix>());
                 StoreNd(g.a, 0, 16, 16, 16, acc, kTrafficOther);)
}

PA_RACE(PingPongOnOneEvent)
{
    PA_VEC_PART(if (!Vec0(role)) return;
                VecF x0(8, 64), x1(8, 64);
                Assign(x0, 0);
                Assign(x1, 4096);
                LoadNd(x0, g.a, 0, 8, 64, 64, kTrafficOther);
                SetFlag(F<kPipeMte2, kPipeV>(0));
                LoadNd(x1, g.b, 0, 8, 64, 64, kTrafficOther);
                SetFlag(F<kPipeMte2, kPipeV>(fixed ? 1 : 0));
                WaitFlag(F<kPipeMte2, kPipeV>(0));
                WaitFlag(F<kPipeMte2, kPipeV>(fixed ? 1 : 0));
                Add(x0, x0, x1);)
}

/* cube: S-like result to GM, then a cross-core signal (the racy one from MTE2, which wrote nothing of it);
 * vectors: wait, then load it */
PA_RACE(SignalFromWrongPipe)
{
    constexpr CrossFlag kReady{3, kRaceEdge};
    PA_CUBE_PART(AccF acc = CubeMatmul(g, true, true);
                 Handoff(F<kPipeM, kPipeFix>());
                 StoreNd(g.a, 0, 16, 16, 16, acc, kTrafficOther);
                 if (fixed) SignalVectors(kReady);
                 else CrossSet(PIPE_MTE2, FftsMsg(kFftsModeCluster, kReady.id), kReady.edge);)
    PA_VEC_PART(WaitFromCube(kReady);
                VecF x = LoadVec(g.a, 0);
                MulS(x, x, 2.0f);)
}

/* vector 0 writes fp16 rows for the cube; the racy cube reads them with no cross-core wait */
PA_RACE(CubeReadsWithoutWait)
{
    constexpr CrossFlag kReady{4, kRaceEdge};
    PA_CUBE_PART(if (fixed) WaitFromVectors(kReady);
                 MatH a(16, 16);
                 Assign(a, 0);
                 LoadNd(a, g.h, 0, 16, 16, 16, kTrafficOther);)
    PA_VEC_PART(if (Vec0(role)) {
                    VecF x = LoadVec(g.a, 0);
                    VecH y(8, 64);
                    Assign(y, 8192);
                    Cvt(y, x, RoundMode::CAST_RINT);
                    Handoff(F<kPipeV, kPipeMte3>());
                    StoreNd(g.h, 0, 8, 64, 64, y, kTrafficOther);
                }
                if (fixed) SignalCube(kReady); /* mode 2: the cube's wait needs both sub-cores */)
}

PA_RACE(ReadBackWithoutFlag)
{
    PA_VEC_PART(if (!Vec0(role)) return;
                VecF x = LoadVec(g.a, 0);
                MulS(x, x, 2.0f);
                StoreVec(g.b, x);
                if (fixed) Handoff(F<kPipeMte3, kPipeMte2>());
                VecF y(8, 64);
                Assign(y, 4096);
                LoadNd(y, g.b, 0, 8, 64, 64, kTrafficOther);)
}

PA_RACE(FlagLeftSet)
{
    PA_VEC_PART(if (!Vec0(role)) return;
                VecF x(8, 64);
                Assign(x, 0);
                LoadNd(x, g.a, 0, 8, 64, 64, kTrafficOther);
                SetFlag(F<kPipeMte2, kPipeV>());
                if (fixed) WaitFlag(F<kPipeMte2, kPipeV>());)
}

PA_RACE(WaitWithoutSet)
{
    PA_VEC_PART(if (!Vec0(role)) return;
                VecF x(8, 64);
                Assign(x, 0);
                LoadNd(x, g.a, 0, 8, 64, 64, kTrafficOther);
                if (fixed) SetFlag(F<kPipeMte2, kPipeV>());
                WaitFlag(F<kPipeMte2, kPipeV>());)
}

PA_RACE(BufferOverFixedTemp)
{
    PA_VEC_PART(if (!Vec0(role)) return;
                (void)LoadVec(g.a, fixed ? 0 : 184 * 1024 - 1024);)
}

/* vector 0 writes partial-like rows before the all-vector barrier; vector 1 reads them after it.  The racy
 * barrier is signalled from V, whose work is done; MTE3's store may not be. */
PA_RACE(BarrierFromWrongPipe)
{
    PA_VEC_PART(if (Vec0(role)) {
                    VecF x = LoadVec(g.b, 0);
                    MulS(x, x, 2.0f);
                    StoreVec(g.a, x);
                }
                CrossSet(fixed ? PIPE_MTE3 : PIPE_V, FftsMsg(kFftsModeAllVector, 6), kRaceEdge);
                CrossWait(6, kRaceEdge);
                if (!Vec0(role)) (void)LoadVec(g.a, 0);)
}

#undef PA_RACE
#undef PA_CUBE_PART
#undef PA_VEC_PART

struct Race {
    const char *name;
    void (*body)(bool fixed, int role, Bufs &g);
};

/* (The CPU-implementation build's scalar-GM-read-without-dcci race has no twin here: the emulator models no
 * scalar data cache, and the kernel reads no GM another core wrote with a scalar load.) */
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
    {"all-vector barrier signalled from a pipe that did not write", BarrierFromWrongPipe},
};
constexpr int kRaceCount = int(sizeof(kRaces) / sizeof(kRaces[0]));

}  // namespace
}  // namespace pa::races

extern "C" {

/* One core's part of race `index`: `role` 0 the cube, 1 and 2 the vector cores; `gm` the buffers a, b, in, h. */
void pa_sim_race_body(int32_t index, int32_t fixed, int32_t role, uint8_t *const *gm)
{
    using namespace pa;
    if (index < 0 || index >= races::kRaceCount) return;
    /* the decode kernel's entry state (pa_kernel.cpp): mode state starts hostile in the simulation */
    set_ctrl(sbitset1(get_ctrl(), 48));
    set_atomic_none();
#if !PA_RACE_CUBE
    set_mask_norm();
    set_vector_mask((uint64_t)-1, (uint64_t)-1);
#endif
    races::Bufs g{{reinterpret_cast<float *>(gm[0]), PA_ARG_S}, {reinterpret_cast<float *>(gm[1]), PA_ARG_O_TMP},
                  {reinterpret_cast<half *>(gm[2]), PA_ARG_Q}, {reinterpret_cast<half *>(gm[3]), PA_ARG_P}};
    races::kRaces[index].body(fixed != 0, role, g);
}

#if PA_RACE_CUBE
/* The table is compiled into both roles' objects; the names are exported from the cube's alone. */
int32_t pa_sim_race_count(void) { return pa::races::kRaceCount; }

const char *pa_sim_race_name(int32_t index)
{
    return index >= 0 && index < pa::races::kRaceCount ? pa::races::kRaces[index].name : nullptr;
}
#endif

}  // extern "C"
