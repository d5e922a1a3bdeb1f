/*
 * The thin layer between the kernel and the machine: global-memory accessors, on-chip buffer assignment,
 * every tile instruction the kernel issues, intra-core flags and barriers, and cross-core flags.
 *
 * On the NPU (and in the A2/A3 compile check, -D__COSTMODEL) each wrapper is exactly the pto-isa instruction
 * or the CCE intrinsic.
 *
 * Under PA_DEVICE_SIM (the device-path simulation: -D__COSTMODEL against the A2/A3 intrinsic emulator) the
 * wrappers are the device's, plus what a host process needs: on-chip addresses carry the emulator's tag, a scalar
 * read of UB goes to the emulated UB, and a synchronisation edge can be dropped or mutated for the hazard
 * checker's negative controls (devsim/devsim_hooks.hpp).
 *
 * Over 400 lines: every wrapper carries its build modes side by side, so the device's instruction and what the
 * simulation adds to it are read together.
 */
#ifndef PA_PLATFORM_HPP
#define PA_PLATFORM_HPP

#include <pto/pto-inst.hpp>

#include "pa_config.hpp"
#include "pa_sync.hpp"
#ifdef PA_DEVICE_SIM
#include "devsim/devsim_hooks.hpp"
#include "emu/emu_core.hpp"
#include "pa_sim_api.h"
#endif

namespace pa {

using namespace pto;

/* A typed global-memory buffer: the kernel argument slot it came from and its element pointer. */
template <typename E>
struct Gm {
    __gm__ E *ptr;
    int32_t slot;
};

template <typename E>
AICORE inline Gm<E> BindGm(__gm__ uint8_t *raw, int32_t slot)
{
    return Gm<E>{reinterpret_cast<__gm__ E *>(raw), slot};
}

/* 2-D GM views with run-time shape and strides: ND (row-major) and DN (column-major, e.g. K read as K^T). */
template <typename E>
using GmNd = GlobalTensor<E, Shape<1, 1, 1, DYNAMIC, DYNAMIC>, Stride<1, 1, 1, DYNAMIC, DYNAMIC>, Layout::ND>;
template <typename E>
using GmDn = GlobalTensor<E, Shape<1, 1, 1, DYNAMIC, DYNAMIC>, Stride<1, 1, 1, DYNAMIC, DYNAMIC>, Layout::DN>;

/* TLOAD of rows x cols elements at element offset `off`, row pitch `pitch` (row-major source). */
template <typename TileT, typename E>
AICORE inline void LoadNd(TileT &tile, Gm<E> g, uint64_t off, uint32_t rows, uint32_t cols, uint64_t pitch,
                          int traffic)
{
#ifdef PA_DEVICE_SIM
    if (devsim::ShortenedLoad(g.slot) && rows > 1) --rows; /* negative control of initcheck */
#endif
    GmNd<E> view(g.ptr + off, typename GmNd<E>::Shape(rows, cols), typename GmNd<E>::Stride(pitch, 1));
    TLOAD(tile, view);
}

/* TLOAD of a rows x cols matrix stored column-major with column pitch `pitch` (K^T from a K page). */
template <typename TileT, typename E>
AICORE inline void LoadDn(TileT &tile, Gm<E> g, uint64_t off, uint32_t rows, uint32_t cols, uint64_t pitch,
                          int traffic)
{
    GmDn<E> view(g.ptr + off, typename GmDn<E>::Shape(rows, cols), typename GmDn<E>::Stride(1, pitch));
    TLOAD(tile, view);
}

/* TSTORE of the tile's valid rows x cols to element offset `off` with row pitch `pitch`. */
template <typename TileT, typename E>
AICORE inline void StoreNd(Gm<E> g, uint64_t off, uint32_t rows, uint32_t cols, uint64_t pitch, TileT &tile,
                           int traffic)
{
    GmNd<E> view(g.ptr + off, typename GmNd<E>::Shape(rows, cols), typename GmNd<E>::Stride(pitch, 1));
    TSTORE(view, tile);
}

/* TSTORE as StoreNd, added into GM's contents (pto-isa sets the store-atomic mode of GM's element type around the
 * store and clears it after): the cube's P.V into an MLA task's output accumulator, the exponent shifts of AMLA's
 * rescale (int32) into the same accumulator's bits. */
template <typename TileT, typename E>
AICORE inline void StoreNdAdd(Gm<E> g, uint64_t off, uint32_t rows, uint32_t cols, uint64_t pitch, TileT &tile,
                              int traffic)
{
    GmNd<E> view(g.ptr + off, typename GmNd<E>::Shape(rows, cols), typename GmNd<E>::Stride(pitch, 1));
    TSTORE<TileT, GmNd<E>, AtomicType::AtomicAdd>(view, tile);
}
/* One scalar read of GM (tiling words, block-table entries): the scalar pipe. */
template <typename E>
AICORE inline E ReadScalar(Gm<E> g, uint64_t index)
{
#ifdef PA_DEVICE_SIM
    devsim::ScalarGmRead();
#endif
    return g.ptr[index];
}

/* ---- cube instructions ----------------------------------------------------------------------------------- */
/* L1 -> L0A/L0B (MTE1).  The device moves whole 16-row/column fractals. */
template <typename DstT, typename SrcT>
AICORE inline void Mov(DstT &dst, SrcT &src)
{
    TMOV(dst, src);
}

template <typename DstT, typename SrcT>
AICORE inline void Extract(DstT &dst, SrcT &src, uint32_t row, uint32_t col)
{
    TEXTRACT(dst, src, row, col);
}

/* Why a zero fill is there: the padding of a ragged inner length, or the operand columns/rows a matmul multiplies
 * but never stores (CubeTiles), or both.  The negative controls (pa_sim_skip_zero_padding, a mask) skip a fill
 * when every reason it has is masked. */
enum ZeroFill : int { kFillPadding = 1, kFillOperand = 2 };
AICORE inline ZeroFill FillKind(bool padding, bool operand)
{
    return ZeroFill((padding ? kFillPadding : 0) | (operand ? kFillOperand : 0));
}

/* Zero a whole L1 tile, padding included (the fill the cube uses where a matmul reads padding).  On A2/A3
 * the L1 fill runs on MTE2 (pto-isa's op-to-pipe map: TEXPANDS_MAT), in order with the loads after it. */
template <typename TileT>
AICORE inline void ZeroL1(TileT &tile, ZeroFill kind = kFillPadding)
{
#if defined(PA_DEVICE_SIM)
    if (devsim::SkipZeroFill(kind)) return; /* negative control: the tile left as the device leaves it */
#else
    (void)kind;
#endif
    TEXPANDS(tile, typename TileT::DType(0.0f));
}

/* acc = a.b (M); the device multiplies over the inner length rounded up to 16, padding included. */
template <typename AccT, typename LeftT, typename RightT>
AICORE inline void Matmul(AccT &acc, LeftT &a, RightT &b)
{
    TMATMUL(acc, a, b);
}

template <typename AccT, typename LeftT, typename RightT>
AICORE inline void MatmulAcc(AccT &acc, LeftT &a, RightT &b)
{
    TMATMUL_ACC(acc, acc, a, b);
}

/* ---- vector instructions (V pipe) -------------------------------------------------------------------------
 * Row-expand binary ops with a column (DN) per-row operand use A2/A3's fixed 8 KiB UB temporary at
 * TMP_UB_OFFSET (pto-isa a2a3 TRowExpandBinOp): the emulator executes that write, so no UB buffer may lie there. */
#define PA_VEC_UNARY(Name, OP)                                                             \
    template <typename D, typename S>                                                      \
    AICORE inline void Name(D &d, S &s)                                                    \
    {                                                                                      \
        OP(d, s);                                                                          \
    }
#define PA_VEC_SCALAR(Name, OP)                                                            \
    template <typename D, typename S>                                                      \
    AICORE inline void Name(D &d, S &s, float x)                                           \
    {                                                                                      \
        OP(d, s, x);                                                                       \
    }
#define PA_VEC_BINARY(Name, OP)                                                            \
    template <typename D, typename S0, typename S1>                                        \
    AICORE inline void Name(D &d, S0 &a, S1 &b)                                            \
    {                                                                                      \
        OP(d, a, b);                                                                       \
    }
#define PA_VEC_REDUCE(Name, OP)                                                                                \
    template <typename D, typename S, typename T>                                                              \
    AICORE inline void Name(D &d, S &s, T &tmp)                                                                \
    {                                                                                                          \
        OP(d, s, tmp);                                                                                         \
    }
#define PA_VEC_ROW_EXPAND(Name, OP)                                                                    \
    template <typename D, typename S0, typename S1>                                                    \
    AICORE inline void Name(D &d, S0 &a, S1 &b)                                                        \
    {                                                                                                  \
        OP(d, a, b);                                                                                   \
    }
PA_VEC_UNARY(Exp, TEXP)
PA_VEC_UNARY(Log, TLOG)
PA_VEC_UNARY(ColSum, TCOLSUM)
PA_VEC_UNARY(RowExpand, TROWEXPAND)
PA_VEC_SCALAR(MulS, TMULS)
PA_VEC_SCALAR(AddS, TADDS)
PA_VEC_BINARY(Add, TADD)
PA_VEC_BINARY(Sub, TSUB)
PA_VEC_BINARY(Mul, TMUL)
PA_VEC_BINARY(Max, TMAX)
PA_VEC_BINARY(ColExpandSub, TCOLEXPANDSUB) /* a (rows x n) - b (1 x n), b's row from every row */
PA_VEC_REDUCE(RowMax, TROWMAX)
PA_VEC_REDUCE(RowSum, TROWSUM)
PA_VEC_ROW_EXPAND(RowExpandSub, TROWEXPANDSUB)
PA_VEC_ROW_EXPAND(RowExpandMul, TROWEXPANDMUL)
PA_VEC_ROW_EXPAND(RowExpandDiv, TROWEXPANDDIV)
#undef PA_VEC_UNARY
#undef PA_VEC_SCALAR
#undef PA_VEC_BINARY
#undef PA_VEC_REDUCE
#undef PA_VEC_ROW_EXPAND

template <typename D, typename S>
AICORE inline void Cvt(D &d, S &s, RoundMode mode)
{
    TCVT(d, s, mode);
}

template <typename D>
AICORE inline void Fill(D &d, typename D::DType x)
{
    TEXPANDS(d, x);
}

/* V: each of the first 8 x `groups` fp32 of `src` into a 32-byte block of its own (vbrcb): block j of `dst` holds
 * element j in all 8 lanes, the operand a row-major row-expand op takes one block per row of. */
template <typename D, typename S>
AICORE inline void SpreadToBlocks(D &dst, S &src, uint32_t groups)
{
    static_assert(sizeof(typename D::DType) == 4 && sizeof(typename S::DType) == 4, "vbrcb of 32-bit elements");
    vbrcb((__ubuf__ uint32_t *)dst.data(), (__ubuf__ uint32_t *)src.data(), 1, 8, uint8_t(groups));
}

/* V: `count` 32-byte blocks of `src`, one every `stride` blocks, to consecutive blocks of `dst` (one UB -> UB copy
 * of `count` bursts of one block, `stride - 1` blocks skipped between them). */
template <typename D, typename S>
AICORE inline void PickBlocks(D &dst, S &src, uint32_t count, uint32_t stride)
{
    copy_ubuf_to_ubuf((__ubuf__ void *)dst.data(), (__ubuf__ void *)src.data(), 0, uint16_t(count), 1,
                      uint16_t(stride - 1), 0);
}

/* A scalar read of UB (the scalar pipe): needs a V -> S flag after the vector wrote it. */
template <typename TileT>
AICORE inline typename TileT::DType ScalarRead(TileT &tile, uint32_t index)
{
#if defined(PA_DEVICE_SIM)
    using E = typename TileT::DType;
    static_assert(sizeof(E) == 4, "scalar reads of UB are fp32 words");
    const uint64_t bits = emu::ScalarLoad(emu::Space::UB, tile.data() + index, sizeof(E));
    uint32_t word = uint32_t(bits);
    E value;
    __builtin_memcpy(&value, &word, sizeof(E));
    return value;
#elif defined(__COSTMODEL)
    /* the cost model moves no data and its GetValue reads a raw on-chip offset (a2a3/pa_costmodel_shim.hpp) */
    (void)tile;
    (void)index;
    return typename TileT::DType(1.0f);
#else
    return tile.GetValue(index);
#endif
}

/* ---- intra-core flags and barriers --------------------------------------------------------------------- */
template <Pipe P>
constexpr pipe_t HwPipe()
{
    if constexpr (P == kPipeS) return PIPE_S;
    else if constexpr (P == kPipeMte2) return PIPE_MTE2;
    else if constexpr (P == kPipeMte1) return PIPE_MTE1;
    else if constexpr (P == kPipeM) return PIPE_M;
    else if constexpr (P == kPipeFix) return PIPE_FIX;
    else if constexpr (P == kPipeV) return PIPE_V;
    else if constexpr (P == kPipeMte3) return PIPE_MTE3;
    else return PIPE_ALL;
}

#ifdef PA_DEVICE_SIM
/* The negative controls' fault injection: false when the edge is dropped; else the source pipe and the event
 * the (possibly mutated) edge uses. */
template <Pipe Src>
inline bool EdgeOperands(int edge, pipe_t &src, int &event)
{
    if (devsim::EdgeDropped(edge)) return false;
    src = devsim::Mutated(edge, PA_SIM_MUTATE_WRONG_SOURCE) ? PIPE_S : HwPipe<Src>();
    if (devsim::Mutated(edge, PA_SIM_MUTATE_SHARED_EVENT)) event = 0;
    return true;
}
#endif

template <Pipe Src, Pipe Dst>
AICORE inline void SetFlag(Flag<Src, Dst> f)
{
#if defined(PA_DEVICE_SIM)
    pipe_t src;
    int event = f.event;
    if (EdgeOperands<Src>(f.edge, src, event)) set_flag(src, HwPipe<Dst>(), static_cast<event_t>(event));
#else
    set_flag(HwPipe<Src>(), HwPipe<Dst>(), static_cast<event_t>(f.event));
#endif
}

template <Pipe Src, Pipe Dst>
AICORE inline void WaitFlag(Flag<Src, Dst> f)
{
#if defined(PA_DEVICE_SIM)
    pipe_t src;
    int event = f.event;
    if (EdgeOperands<Src>(f.edge, src, event)) wait_flag(src, HwPipe<Dst>(), static_cast<event_t>(event));
#else
    wait_flag(HwPipe<Src>(), HwPipe<Dst>(), static_cast<event_t>(f.event));
#endif
}

/* The wait of a write-after-read flag at core exit: every flag a core sets must be waited before it ends, or the
 * next kernel on the core finds it set (the device-path simulation's TRAILING_FLAG check; its negative control
 * skips one drain). */
template <Pipe Src, Pipe Dst>
AICORE inline void DrainFlag(Flag<Src, Dst> f)
{
#ifdef PA_DEVICE_SIM
    if (devsim::Mutated(f.edge, PA_SIM_MUTATE_NO_DRAIN)) return;
#endif
    WaitFlag(f);
}

/* set + wait: the destination pipe's next instruction waits for the source pipe's earlier ones. */
template <Pipe Src, Pipe Dst>
AICORE inline void Handoff(Flag<Src, Dst> f)
{
    SetFlag(f);
    WaitFlag(f);
}

/* pipe_barrier(PIPE_V): the vector pipe does not interlock dependent instructions. */
AICORE inline void VecBarrier(int edge)
{
#if defined(PA_DEVICE_SIM)
    if (!devsim::EdgeDropped(edge)) pipe_barrier(PIPE_V);
#else
    (void)edge;
    pipe_barrier(PIPE_V);
#endif
}

/* ---- simulation bookkeeping (nothing on the NPU) ------------------------------------------------------- */
/* A block id the kernel is about to use; the NPU kernel trusts the table (the host validated it). */
AICORE inline void CheckBlockId(int64_t id, uint64_t tableIndex)
{
#if defined(PA_DEVICE_SIM)
    devsim::CheckBlockId(id, int64_t(tableIndex));
#else
    (void)id; (void)tableIndex;
#endif
}

/* Which logical work item (and hand-off unit) the calling core is on: only the simulation's reports use it. */
AICORE inline void SetWorkItem(int32_t seq, int32_t head, int32_t split)
{
#if defined(PA_DEVICE_SIM)
    devsim::SetWorkItem(seq, head, split);
#else
    (void)seq; (void)head; (void)split;
#endif
}

AICORE inline void SetUnit(uint32_t unit)
{
#if defined(PA_DEVICE_SIM)
    devsim::SetUnit(int32_t(unit));
#else
    (void)unit;
#endif
}

/* Event counters of the simulation figures; nothing on the NPU. */
AICORE inline void Count(Counter what)
{
#if defined(PA_DEVICE_SIM)
    devsim::Count(what);
#else
    (void)what;
#endif
}

/* A2/A3's fixed UB temporary at TMP_UB_OFFSET: row-expand ops with a column operand and some conversions write it. */
constexpr uint64_t kFixedTempBytes = 8 * 1024;

/* TASSIGN of the tile's on-chip region; in the device-path simulation a UB tile over the fixed temporary fails
 * the launch (whatever the tile holds, the next row-expand overwrites). */
template <typename TileT>
AICORE inline void Assign(TileT &tile, uint32_t byteOffset)
{
#ifdef PA_DEVICE_SIM
    TASSIGN(tile, uint64_t(byteOffset) | emu::kOnChipTag); /* offset 0 is not a null pointer on the device */
    if constexpr (TileT::Loc == TileType::Vec) {
        devsim::UbAssigned(byteOffset, byteOffset + uint64_t(TileT::Numel) * sizeof(typename TileT::DType),
                           TMP_UB_OFFSET, TMP_UB_OFFSET + kFixedTempBytes);
    }
#else
    TASSIGN(tile, byteOffset);
#endif
}

/* ---- cross-core flags ---------------------------------------------------------------------------------
 * An FFTS set is issued on the pipe that produced the data and waits for that pipe's earlier writes;
 * the wait (wait_flag_dev) blocks everything after it.  No PIPE_ALL drain is needed around them. */
/* FFTS message: bit 0 valid, bits 4-7 mode (2 = within the cluster, 0 = all vector cores), bits 8+ flag id. */
constexpr uint16_t kFftsModeCluster = 2;
constexpr uint16_t kFftsModeAllVector = 0;
AICORE inline uint16_t FftsMsg(uint16_t mode, uint16_t flag) { return uint16_t(1 | (mode << 4) | (flag << 8)); }

/* An FFTS set issued from `pipe`, and a wait, of edge `edge`.  In the device-path simulation a dropped edge
 * does nothing at either end and a mutated one signals from MTE2, a pipe that produced none of the data. */
AICORE inline void CrossSet(pipe_t pipe, uint16_t msg, int edge)
{
#ifdef PA_DEVICE_SIM
    if (devsim::EdgeDropped(edge)) return;
    if (devsim::Mutated(edge, PA_SIM_MUTATE_SIGNAL_PIPE)) pipe = PIPE_MTE2;
#else
    (void)edge;
#endif
    ffts_cross_core_sync(pipe, msg);
}

AICORE inline void CrossWait(uint16_t id, int edge)
{
#ifdef PA_DEVICE_SIM
    if (devsim::EdgeDropped(edge) || devsim::Mutated(edge, PA_SIM_MUTATE_SKIP_CROSS_WAIT)) return;
#else
    (void)edge;
#endif
    wait_flag_dev(id);
}

/* Cube (from FIX, after the stores of S or O_tmp) -> both vector sub-cores of the cluster. */
AICORE inline void SignalVectors(CrossFlag f)
{
    Count(kCountHandoff);
    CrossSet(PIPE_FIX, FftsMsg(kFftsModeCluster, f.id), f.edge);
}

/* A vector sub-core (from MTE3, after the store of P) -> its cube; the cube counts both sub-cores. */
AICORE inline void SignalCube(CrossFlag f)
{
    Count(kCountHandoff);
    CrossSet(PIPE_MTE3, FftsMsg(kFftsModeCluster, f.id), f.edge);
}

AICORE inline void WaitFromCube(CrossFlag f)
{
    CrossWait(f.id, f.edge);
}

AICORE inline void WaitFromVectors(CrossFlag f)
{
    CrossWait(f.id, f.edge);
}

/* All vector sub-cores of the launch (from MTE3, after the partial stores), then wait for all of them. */
AICORE inline void VectorBarrier()
{
    CrossSet(PIPE_MTE3, FftsMsg(kFftsModeAllVector, kReduceBarrier.id), kReduceBarrier.edge);
    CrossWait(kReduceBarrier.id, kReduceBarrier.edge);
}

}  // namespace pa

#endif /* PA_PLATFORM_HPP */
