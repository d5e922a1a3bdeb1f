/*
 * The thin layer between the kernel and the machine: global-memory accessors, on-chip buffer assignment and
 * cross-core flags.  On the NPU everything here is a plain pointer, TASSIGN or FFTS call.  Under __CPU_SIM
 * every GM access is checked against the extents registered with pa_mock_bind() (PA_ERR_OUT_OF_BOUNDS with
 * slot, element offset, core, sequence, head and split, like the mock), traffic is counted for pa_sim_stats,
 * and every wait has a deadlock timeout (PA_ERR_INTERNAL).
 */
#ifndef PA_PLATFORM_HPP
#define PA_PLATFORM_HPP

#include <pto/pto-inst.hpp>

#include "pa_config.hpp"
#ifdef __CPU_SIM
#include "sim/pa_sim_runtime.hpp"
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

/* Traffic class of an access, for the simulation figures. */
enum Traffic : int { kTrafficOther = 0, kTrafficKv = 1, kTrafficScratch = 2, kTrafficPartial = 3 };

AICORE inline void NoteAccess(int32_t slot, uint64_t off, uint64_t rows, uint64_t cols, uint64_t rowStride,
                              uint64_t colStride, uint32_t elemBytes, bool write, int traffic)
{
#ifdef __CPU_SIM
    sim::CheckAccess(slot, off, rows, cols, rowStride, colStride, elemBytes, write);
    sim::Counters &c = *sim::tctx.ctr;
    const uint64_t bytes = rows * cols * elemBytes;
    (write ? c.gmWriteBytes : c.gmReadBytes) += bytes;
    if (traffic == kTrafficKv) c.kvReadBytes += bytes;
    if (traffic == kTrafficScratch) c.scratchBytes += bytes;
    if (traffic == kTrafficPartial) c.partialBytes += bytes;
#else
    (void)slot; (void)off; (void)rows; (void)cols; (void)rowStride; (void)colStride; (void)elemBytes;
    (void)write; (void)traffic;
#endif
}

/* TLOAD of rows x cols elements at element offset `off`, row pitch `pitch` (row-major source). */
template <typename TileT, typename E>
AICORE inline void LoadNd(TileT &tile, Gm<E> g, uint64_t off, uint32_t rows, uint32_t cols, uint64_t pitch,
                          int traffic)
{
    NoteAccess(g.slot, off, rows, cols, pitch, 1, sizeof(E), false, traffic);
    GmNd<E> view(g.ptr + off, typename GmNd<E>::Shape(rows, cols), typename GmNd<E>::Stride(pitch, 1));
    TLOAD(tile, view);
}

/* TLOAD of a rows x cols matrix stored column-major with column pitch `pitch` (K^T from a K page). */
template <typename TileT, typename E>
AICORE inline void LoadDn(TileT &tile, Gm<E> g, uint64_t off, uint32_t rows, uint32_t cols, uint64_t pitch,
                          int traffic)
{
    NoteAccess(g.slot, off, rows, cols, 1, pitch, sizeof(E), false, traffic);
    GmDn<E> view(g.ptr + off, typename GmDn<E>::Shape(rows, cols), typename GmDn<E>::Stride(1, pitch));
    TLOAD(tile, view);
}

/* TSTORE of the tile's valid rows x cols to element offset `off` with row pitch `pitch`. */
template <typename TileT, typename E>
AICORE inline void StoreNd(Gm<E> g, uint64_t off, uint32_t rows, uint32_t cols, uint64_t pitch, TileT &tile,
                           int traffic)
{
    NoteAccess(g.slot, off, rows, cols, pitch, 1, sizeof(E), true, traffic);
    GmNd<E> view(g.ptr + off, typename GmNd<E>::Shape(rows, cols), typename GmNd<E>::Stride(pitch, 1));
    TSTORE(view, tile);
}

/* One scalar read (tiling words, block-table entries). */
template <typename E>
AICORE inline E ReadScalar(Gm<E> g, uint64_t index)
{
    NoteAccess(g.slot, index, 1, 1, 1, 1, sizeof(E), false, kTrafficOther);
    return g.ptr[index];
}

/* A block id the kernel is about to use; the NPU kernel trusts the table (the host validated it). */
AICORE inline void CheckBlockId(int64_t id, uint64_t tableIndex)
{
#ifdef __CPU_SIM
    sim::CheckBlockId(id, int64_t(tableIndex));
#else
    (void)id; (void)tableIndex;
#endif
}

/* Which logical work item the calling core is on: only the simulation's error records use it. */
AICORE inline void SetWorkItem(int32_t seq, int32_t head, int32_t split)
{
#ifdef __CPU_SIM
    sim::tctx.seq = seq;
    sim::tctx.head = head;
    sim::tctx.split = split;
#else
    (void)seq; (void)head; (void)split;
#endif
}

enum Counter : int { kCountHandoff, kCountUnit, kCountTask, kCountMatmul };

/* Event counters of the simulation figures; nothing on the NPU. */
AICORE inline void Count(Counter what)
{
#ifdef __CPU_SIM
    sim::Counters &c = *sim::tctx.ctr;
    switch (what) {
        case kCountHandoff: ++c.handoffs; break;
        case kCountUnit: ++c.units; break;
        case kCountTask: ++c.tasks; break;
        case kCountMatmul: ++c.matmuls; break;
    }
#else
    (void)what;
#endif
}

template <typename TileT>
constexpr int RegionOf()
{
    if constexpr (TileT::Loc == TileType::Mat) return PA_SIM_REGION_L1;
    else if constexpr (TileT::Loc == TileType::Left) return PA_SIM_REGION_L0A;
    else if constexpr (TileT::Loc == TileType::Right) return PA_SIM_REGION_L0B;
    else if constexpr (TileT::Loc == TileType::Acc) return PA_SIM_REGION_L0C;
    else return PA_SIM_REGION_UB;
}

/* TASSIGN that also records the high-water mark of the tile's on-chip region (simulation figures). */
template <typename TileT>
AICORE inline void Assign(TileT &tile, uint32_t byteOffset)
{
#ifdef __CPU_SIM
    sim::RecordAssign(RegionOf<TileT>(), byteOffset + uint64_t(TileT::Numel) * sizeof(typename TileT::DType));
#endif
    TASSIGN(tile, byteOffset);
}

/* ---- cross-core flags ---------------------------------------------------------------------------------- */
#ifndef __CPU_SIM
/* FFTS message: bit 0 valid, bits 4-7 mode (2 = within the cluster, 0 = all vector cores), bits 8+ flag id. */
constexpr uint16_t kFftsModeCluster = 2;
constexpr uint16_t kFftsModeAllVector = 0;
AICORE inline uint16_t FftsMsg(uint16_t mode, uint16_t flag) { return uint16_t(1 | (mode << 4) | (flag << 8)); }
/* GM writes must be visible before the flag is (simpler PR #1091: stale S/P/O_tmp reads without it). */
AICORE inline void GmFence()
{
    pipe_barrier(PIPE_ALL);
    dsb(DSB_DDR);
}
#endif

AICORE inline void SignalVectors(uint16_t flag)
{
    Count(kCountHandoff);
#ifdef __CPU_SIM
    sim::SignalVectors(flag);
#else
    GmFence();
    ffts_cross_core_sync(PIPE_FIX, FftsMsg(kFftsModeCluster, flag));
#endif
}

AICORE inline void SignalCube(uint16_t flag)
{
    Count(kCountHandoff);
#ifdef __CPU_SIM
    sim::SignalCube(flag);
#else
    GmFence();
    ffts_cross_core_sync(PIPE_MTE3, FftsMsg(kFftsModeCluster, flag));
#endif
}

AICORE inline void WaitFromCube(uint16_t flag)
{
#ifdef __CPU_SIM
    sim::WaitFromCube(flag);
#else
    wait_flag_dev(flag);
#endif
}

AICORE inline void WaitFromVectors(uint16_t flag)
{
#ifdef __CPU_SIM
    sim::WaitFromVectors(flag);
#else
    wait_flag_dev(flag);
#endif
}

AICORE inline void VectorBarrier()
{
#ifdef __CPU_SIM
    sim::VectorBarrier();
#else
    GmFence();
    ffts_cross_core_sync(PIPE_MTE3, FftsMsg(kFftsModeAllVector, kFlagReduceBarrier));
    wait_flag_dev(kFlagReduceBarrier);
#endif
}

}  // namespace pa

#endif /* PA_PLATFORM_HPP */
