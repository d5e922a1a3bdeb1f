/*
 * What the platform layer tells the simulation about each instruction (compiled only with __CPU_SIM).
 *
 * - Footprints: the bytes an A2/A3 instruction touches.  A UB tile: its valid rows, each rounded up to the
 *   32-byte block the vector unit works in; an L1/L0 tile: its whole fractal (NZ/ZN) storage, padding
 *   included.  GM: rows x row bytes at a pitch, inside an argument slot.
 * - Device padding: on the device a DMA into L1 leaves the tile's padding as it was, TMOV/TEXTRACT move
 *   whole 16 x 16 fractals, and the cube multiplies over the inner length rounded up to 16.  The CPU
 *   implementations zero-fill on load and move and multiply valid elements only.  In checked mode the
 *   simulation starts every core's on-chip memory as NaN and reproduces the three device behaviours, so a
 *   kernel that relies on zero padding computes NaN here.
 * - Sync: flags, barriers and cross-core signals, each with its edge id (pa_sync.hpp); a dropped edge
 *   (pa_sim_drop_sync) does nothing at either end.
 */
#ifndef PA_RECORD_HPP
#define PA_RECORD_HPP

#include <cstring>
#include <functional>
#include <initializer_list>
#include <vector>

#include <pto/pto-inst.hpp>

#include "../pa_config.hpp"
#include "../pa_sync.hpp"
#include "pa_sim_runtime.hpp"

namespace pa::rec {

using sim::hz::Access;

constexpr uint64_t kUbBlockBytes = 32;
constexpr uint32_t kFractalRows = 16;
constexpr uint64_t kFixedTempBytes = 8 * 1024; /* A2/A3's TMP_UB_OFFSET scratch */

inline uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

template <typename TileT>
constexpr int SpaceOf()
{
    if constexpr (TileT::Loc == pto::TileType::Mat) return sim::hz::kSpaceL1;
    else if constexpr (TileT::Loc == pto::TileType::Left) return sim::hz::kSpaceL0a;
    else if constexpr (TileT::Loc == pto::TileType::Right) return sim::hz::kSpaceL0b;
    else if constexpr (TileT::Loc == pto::TileType::Acc) return sim::hz::kSpaceL0c;
    else return sim::hz::kSpaceUb;
}

inline char *RegionBase(int space)
{
    auto &m = pto::NPUMemoryModel::Instance();
    switch (space) {
        case sim::hz::kSpaceL1: return m.GetL1Base();
        case sim::hz::kSpaceL0a: return m.GetL0ABase();
        case sim::hz::kSpaceL0b: return m.GetL0BBase();
        case sim::hz::kSpaceL0c: return m.GetL0CBase();
        default: return m.GetUBBase();
    }
}

template <typename TileT>
uint64_t OffsetOf(TileT &tile)
{
    return uint64_t(reinterpret_cast<char *>(tile.data()) - RegionBase(SpaceOf<TileT>()));
}

/* The bytes the A2/A3 instruction touches in the tile (see the file comment). */
template <typename TileT>
Access Of(TileT &tile, bool write)
{
    using E = typename TileT::DType;
    const uint64_t base = OffsetOf(tile);
    const uint8_t space = uint8_t(SpaceOf<TileT>());
    if constexpr (TileT::Loc != pto::TileType::Vec) {
        return Access{space, write, -1, base, 1, uint64_t(TileT::Numel) * sizeof(E), 0};
    } else if constexpr (TileT::isRowMajor) {
        return Access{space, write, -1, base, tile.GetValidRow(), RoundUp(tile.GetValidCol() * sizeof(E), kUbBlockBytes),
                      uint64_t(TileT::Cols) * sizeof(E)};
    } else {
        return Access{space, write, -1, base, tile.GetValidCol(), RoundUp(tile.GetValidRow() * sizeof(E), kUbBlockBytes),
                      uint64_t(TileT::Rows) * sizeof(E)};
    }
}

/* One element of a UB tile, as the scalar unit reads it. */
template <typename TileT>
Access Element(TileT &tile, uint32_t index, bool write)
{
    using E = typename TileT::DType;
    return Access{uint8_t(sim::hz::kSpaceUb), write, -1, OffsetOf(tile) + index * sizeof(E), 1, sizeof(E), 0};
}

/* The row-expand ops' fixed UB temporary, when the instruction variant uses it (else an empty access). */
inline Access FixedTemp(bool used, bool write)
{
    return Access{uint8_t(sim::hz::kSpaceUb), write, -1, pto::TMP_UB_OFFSET, used ? 1u : 0u, kFixedTempBytes, 0};
}

inline Access Gm(int32_t slot, uint64_t off, uint64_t rows, uint64_t cols, uint64_t pitch, uint32_t elemBytes,
                 bool write)
{
    return Access{uint8_t(sim::hz::kSpaceGm), write, slot, off * elemBytes, rows, cols * elemBytes,
                  pitch * elemBytes};
}

/* The shape the timing model prices an instruction by: valid rows x columns of elemBytes (matmul: m x n, k). */
struct Shape {
    uint32_t rows, cols, k, elemBytes;
};

template <typename TileT>
Shape ShapeOf(TileT &tile)
{
    return Shape{uint32_t(tile.GetValidRow()), uint32_t(tile.GetValidCol()), 0,
                 uint32_t(sizeof(typename TileT::DType))};
}

template <typename AccT, typename LeftT>
Shape MatmulShape(AccT &acc, LeftT &a)
{
    return Shape{uint32_t(acc.GetValidRow()), uint32_t(acc.GetValidCol()), uint32_t(a.GetValidCol()),
                 uint32_t(sizeof(typename LeftT::DType))};
}

inline Shape GmShape(uint64_t rows, uint64_t cols, uint32_t elemBytes)
{
    return Shape{uint32_t(rows), uint32_t(cols), 0, elemBytes};
}

/* The trace's name of op code `op`, or nullptr past the table. */
const char *OpName(int32_t op);
/* Appends an instruction to the calling role's trace (when the launch records one). */
void TraceInstr(int pipe, const char *op, const Shape &shape, const Access *acc, int n);

inline void Issue(int pipe, const char *op, const Shape &shape, std::initializer_list<Access> acc)
{
    if (sim::tctx.hz) sim::tctx.hz->Issue(pipe, op, acc.begin(), int(acc.size()));
    if (sim::tctx.trace) TraceInstr(pipe, op, shape, acc.begin(), int(acc.size()));
}

/* GM extent check and traffic figures of one access (rows x cols with element strides). */
void GmTraffic(int32_t slot, uint64_t off, uint64_t rows, uint64_t cols, uint64_t rowStride, uint64_t colStride,
               uint32_t elemBytes, bool write, int traffic);
void Count(int counter);
void SetFlag(int src, int dst, int event, int edge);
void WaitFlag(int src, int dst, int event, int edge);
void Barrier(int pipe, int edge);
enum Direction : int { kToVectors, kToCube };
void Signal(uint16_t id, int edge, int pipe, Direction dir);
void Wait(uint16_t id, int edge, Direction dir);
void AllVectorBarrier(int edge, int pipe);
/* Runs `body` as core `core`'s role `role` of launch L in the calling thread: execution context, counters,
 * the hazard checker (checked mode, with NaN-initialised on-chip memory), the core-exit flag check, and the
 * unwinding of a failed launch. */
void RunCoreRole(sim::Launch &L, uint32_t core, int32_t role, const std::function<void()> &body);
/* pa_sim_skip_zero_padding: the kernel's zero fills of kind `kind` (pa::ZeroFill) are skipped. */
bool SkipZeroFill(int kind);
/* dcci: makes GM that other cores wrote visible to this core's scalar reads. */
void InvalidateCache();
/* Peak on-chip use, and the A2/A3 fixed UB temporary kept free of the kernel's own buffers. */
void NoteAssign(int space, uint64_t begin, uint64_t end);

template <typename TileT>
void Assigned(TileT &tile, uint32_t byteOffset)
{
    NoteAssign(SpaceOf<TileT>(), byteOffset, byteOffset + uint64_t(TileT::Numel) * sizeof(typename TileT::DType));
}

inline bool DevicePadding() { return sim::tctx.launch != nullptr && sim::tctx.launch->checked; }

/* Keeps an L1/L0 tile's padding across a CPU TLOAD (which zero-fills it; the device's DMA does not). */
template <typename TileT>
class PaddingGuard {
public:
    explicit PaddingGuard(TileT &tile) : tile_(tile)
    {
        if constexpr (TileT::Loc != pto::TileType::Vec) {
            if (DevicePadding()) saved_.assign(tile.data(), tile.data() + TileT::Numel);
        }
    }
    ~PaddingGuard()
    {
        if constexpr (TileT::Loc != pto::TileType::Vec) {
            if (saved_.empty()) return;
            const uint32_t vr = tile_.GetValidRow(), vc = tile_.GetValidCol();
            for (uint32_t r = 0; r < uint32_t(TileT::Rows); ++r) {
                for (uint32_t c = 0; c < uint32_t(TileT::Cols); ++c) {
                    if (r < vr && c < vc) continue;
                    const size_t i = pto::GetTileElementOffset<TileT>(r, c);
                    tile_.data()[i] = saved_[i];
                }
            }
        }
    }
    PaddingGuard(const PaddingGuard &) = delete;
    PaddingGuard &operator=(const PaddingGuard &) = delete;

private:
    TileT &tile_;
    std::vector<typename TileT::DType> saved_;
};

/* After TMOV/TEXTRACT: the device moved whole fractals, so the destination's padding up to the next
 * multiple of 16 rows and columns holds what the source held there. */
template <typename DstT, typename SrcT>
void CopyFractalPadding(DstT &dst, SrcT &src, uint32_t row0, uint32_t col0)
{
    if (!DevicePadding()) return;
    const uint32_t vr = dst.GetValidRow(), vc = dst.GetValidCol();
    const uint32_t rEnd = std::min<uint32_t>(RoundUp(vr, kFractalRows), DstT::Rows);
    const uint32_t cEnd = std::min<uint32_t>(RoundUp(vc, kFractalRows), DstT::Cols);
    for (uint32_t r = 0; r < rEnd; ++r) {
        for (uint32_t c = 0; c < cEnd; ++c) {
            if (r < vr && c < vc) continue;
            if (r + row0 >= uint32_t(SrcT::Rows) || c + col0 >= uint32_t(SrcT::Cols)) continue;
            dst.data()[pto::GetTileElementOffset<DstT>(r, c)] =
                src.data()[pto::GetTileElementOffset<SrcT>(r + row0, c + col0)];
        }
    }
}

/* After TMATMUL: add what the device also multiplies, the inner positions [K, round_up(K, 16)). */
template <typename AccT, typename LeftT, typename RightT>
void AddPaddedInner(AccT &acc, LeftT &a, RightT &b)
{
    if (!DevicePadding()) return;
    const uint32_t k0 = a.GetValidCol();
    const uint32_t k1 = std::min<uint32_t>(RoundUp(k0, kFractalRows), LeftT::Cols);
    if (k1 == k0) return;
    for (uint32_t i = 0; i < acc.GetValidRow(); ++i) {
        for (uint32_t j = 0; j < acc.GetValidCol(); ++j) {
            float sum = 0.0f;
            for (uint32_t k = k0; k < k1; ++k) {
                sum += float(a.data()[pto::GetTileElementOffset<LeftT>(i, k)]) *
                       float(b.data()[pto::GetTileElementOffset<RightT>(k, j)]);
            }
            acc.data()[pto::GetTileElementOffset<AccT>(i, j)] += sum;
        }
    }
}

}  // namespace pa::rec

#endif /* PA_RECORD_HPP */
