/*
 * Differential harness of the cube tile ops our kernel uses: compiled against pto-isa's A2/A3 implementations on
 * the emulator (PA_EMU_DIFF_DEV) and against pto-isa's CPU implementations (PA_EMU_DIFF_CPU).  Two chains, compared
 * on the global-memory result:
 *
 *   qk: TEXPANDS zero the L1 tiles, TLOAD Q (ND -> Nz), TLOAD K^T (DN -> Zn), TMOV to L0A / L0B, TMATMUL, TSTORE S
 *   pv: TEXPANDS, TLOAD P into a window (ND -> Nz), TLOAD V (ND -> Nz), TEXTRACT P at a column, TMOV V (Nz ->
 *       Zn), TMATMUL then TMATMUL_ACC (acc = 2 x P.V), TSTORE O
 *
 *   int32_t pa_diff_cube(int32_t chain, int32_t dtype, int32_t path, int32_t operands, int32_t rows,
 *                        int32_t tokens, int32_t dim, int32_t col, const void *x, const void *y, float *out)
 * chain 0 qk, 1 pv; dtype 0 fp16, 1 bf16; path 0 the chunk path's tiles (16 rows, 128 tokens, DCap 128), 1 the
 * head path's (kCubeRows rows, SubTokens(128) tokens, DCap 128); operands 0 every tile valid over the data's
 * extent (what the kernel did before defects 2-3 were fixed), 1 the kernel's own operands (CubeTiles::Qk / Pv:
 * the right operand and accumulator valid over their static width, the valid columns stored; on the head path
 * one 16-row block per matmul, HeadPath's blocks).
 * qk: x = Q [rows x dim], y = K page rows [tokens x dim] (pitch dim); out = S [rows x tokens].
 * pv: x = P [rows x 512] (the window, pitch 512), y = V [tokens x dim]; out = O [rows x dim]; col: the column of the
 *     window the sub-tile starts at.
 */
#include <exception>
#include <string>

#include "diff_common.hpp"
#include "pa_cube_head.hpp"

using namespace pto;
using pa_diff::GmNd;
using pa_diff::Place;

namespace {

constexpr int kDCap = 128, kWindow = pa::kPieceTokens;
/* The kernel's own tile families (pa_cube_state.hpp), so the harness runs its layouts and operands. */
template <typename T>
using ChunkTiles = pa::CubeTiles<T, kDCap, 16, 128>;
template <typename T>
using Head = pa::HeadPath<T, kDCap>;
template <typename T>
using HeadTiles = typename Head<T>::Tiles;
template <typename E>
using GmDn = GlobalTensor<E, Shape<1, 1, 1, DYNAMIC, DYNAMIC>, Stride<1, 1, 1, DYNAMIC, DYNAMIC>, Layout::DN>;

/* L1 and L0 offsets (bytes); every tile of a space at its own offset, none at 0 (pto-isa's cost model). */
constexpr uint32_t kL1Q = 0, kL1K = 65536, kL1P = 131072, kL1V = 262144;

/* kHeadBlocks: the head path's row blocks (HeadPath::MoveQBlocks / QkBlocks, ExtractPBlocks / PvBlocks and their
 * stores) with the harness's placement: the kernel's block types, sizes and row counts, the same loop.  Otherwise
 * one matmul of the tile family C, with the kernel's operands or the data-extent ones. */
template <typename C, typename T, bool kHeadBlocks>
void Qk(bool kernelOperands, uint32_t rows, uint32_t tokens, uint32_t dim, const void *x, const void *y, float *out)
{
    typename C::QMat qMat(rows, dim);
    typename C::KMat kMat(dim, tokens);
    auto op = kernelOperands ? C::Qk(rows, dim, tokens)
                             : typename C::QkOperands{typename C::KMat(dim, tokens), typename C::KRight(dim, tokens),
                                                      typename C::SAcc(rows, tokens), typename C::SAcc(rows, tokens)};
    Place(qMat, kL1Q);
    Place(kMat, kL1K);
    Place(op.kMat, kL1K);
    Place(op.kRight, 0);
    TEXPANDS(qMat, T(0.0f));
    TEXPANDS(kMat, T(0.0f));
    T *q = reinterpret_cast<T *>(const_cast<void *>(x));
    T *k = reinterpret_cast<T *>(const_cast<void *>(y));
    GmNd<T> qv(q, typename GmNd<T>::Shape(rows, dim), typename GmNd<T>::Stride(dim, 1));
    TLOAD(qMat, qv);
    GmDn<T> kv(k, typename GmDn<T>::Shape(dim, tokens), typename GmDn<T>::Stride(1, dim));
    TLOAD(kMat, kv);
    TMOV(op.kRight, op.kMat);
    if constexpr (kHeadBlocks) {
        using H = Head<T>;
        for (uint32_t blk = 0; blk < H::Blocks(rows); ++blk) {
            const uint32_t mb = H::BlockRows(rows, blk);
            typename H::Block::QLeft qBlock(mb, dim);
            auto ob = H::Block::Qk(mb, dim, tokens);
            Place(qBlock, blk * H::kQBlockBytes);
            TEXTRACT(qBlock, qMat, blk * H::kBlockRows, 0);
            Place(ob.acc, blk * H::kSBlockBytes);
            Place(ob.s, blk * H::kSBlockBytes);
            TMATMUL(ob.acc, qBlock, op.kRight);
            GmNd<float> sv(out + blk * H::kBlockRows * tokens, typename GmNd<float>::Shape(mb, tokens),
                           typename GmNd<float>::Stride(tokens, 1));
            TSTORE(sv, ob.s);
        }
    } else {
        typename C::QLeft qLeft(rows, dim);
        Place(qLeft, 0);
        Place(op.acc, 0);
        Place(op.s, 0);
        TMOV(qLeft, qMat);
        TMATMUL(op.acc, qLeft, op.kRight);
        GmNd<float> sv(out, typename GmNd<float>::Shape(rows, tokens), typename GmNd<float>::Stride(tokens, 1));
        TSTORE(sv, op.s);
    }
}

template <typename C, typename T, bool kHeadBlocks>
void Pv(bool kernelOperands, uint32_t rows, uint32_t tokens, uint32_t dim, uint32_t col, const void *x, const void *y,
        float *out)
{
    typename C::PMat pMat(rows, kWindow);
    typename C::VMat vMat(tokens, dim);
    auto op = kernelOperands ? C::Pv(rows, dim, tokens)
                             : typename C::PvOperands{typename C::VMat(tokens, dim), typename C::VRight(tokens, dim),
                                                      typename C::OAcc(rows, dim), typename C::OAcc(rows, dim)};
    Place(pMat, kL1P);
    Place(vMat, kL1V);
    Place(op.vMat, kL1V);
    Place(op.vRight, 0);
    TEXPANDS(pMat, T(0.0f));
    TEXPANDS(vMat, T(0.0f));
    T *p = reinterpret_cast<T *>(const_cast<void *>(x));
    T *v = reinterpret_cast<T *>(const_cast<void *>(y));
    GmNd<T> pv(p, typename GmNd<T>::Shape(rows, kWindow), typename GmNd<T>::Stride(kWindow, 1));
    TLOAD(pMat, pv);
    GmNd<T> vv(v, typename GmNd<T>::Shape(tokens, dim), typename GmNd<T>::Stride(dim, 1));
    TLOAD(vMat, vv);
    TMOV(op.vRight, op.vMat);
    if constexpr (kHeadBlocks) {
        using H = Head<T>;
        for (uint32_t blk = 0; blk < H::Blocks(rows); ++blk) {
            const uint32_t mb = H::BlockRows(rows, blk);
            typename H::Block::PLeft pBlock(mb, tokens);
            auto ob = H::Block::Pv(mb, dim, tokens);
            Place(pBlock, blk * H::kPBlockBytes);
            TEXTRACT(pBlock, pMat, blk * H::kBlockRows, col);
            Place(ob.acc, blk * H::kOBlockBytes);
            Place(ob.o, blk * H::kOBlockBytes);
            TMATMUL(ob.acc, pBlock, op.vRight);
            TMATMUL_ACC(ob.acc, ob.acc, pBlock, op.vRight);
            GmNd<float> ov(out + blk * H::kBlockRows * dim, typename GmNd<float>::Shape(mb, dim),
                           typename GmNd<float>::Stride(dim, 1));
            TSTORE(ov, ob.o);
        }
    } else {
        typename C::PLeft pLeft(rows, tokens);
        Place(pLeft, 0);
        Place(op.acc, 0);
        Place(op.o, 0);
        TEXTRACT(pLeft, pMat, 0, col);
        TMATMUL(op.acc, pLeft, op.vRight);
        TMATMUL_ACC(op.acc, op.acc, pLeft, op.vRight);
        GmNd<float> ov(out, typename GmNd<float>::Shape(rows, dim), typename GmNd<float>::Stride(dim, 1));
        TSTORE(ov, op.o);
    }
}

template <template <typename> class Tiles, typename T, bool kHeadBlocks = false>
void Chain(int32_t chain, bool kernelOperands, uint32_t r, uint32_t n, uint32_t d, uint32_t col, const void *x,
           const void *y, float *out)
{
    if (chain == 0) {
        Qk<Tiles<T>, T, kHeadBlocks>(kernelOperands, r, n, d, x, y, out);
    } else {
        Pv<Tiles<T>, T, kHeadBlocks>(kernelOperands, r, n, d, col, x, y, out);
    }
}

}  // namespace

extern "C" int32_t pa_diff_cube(int32_t chain, int32_t dtype, int32_t path, int32_t operands, int32_t rows,
                                int32_t tokens, int32_t dim, int32_t col, const void *x, const void *y, float *out)
{
    return pa_diff::Guarded(true, [&] {
        const uint32_t r = uint32_t(rows), n = uint32_t(tokens), d = uint32_t(dim), c = uint32_t(col);
        const bool kernel = operands != 0;
        if (path == 0) {
            dtype ? Chain<ChunkTiles, bfloat16_t>(chain, kernel, r, n, d, c, x, y, out)
                  : Chain<ChunkTiles, half>(chain, kernel, r, n, d, c, x, y, out);
        } else if (kernel) {
            dtype ? Chain<HeadTiles, bfloat16_t, true>(chain, kernel, r, n, d, c, x, y, out)
                  : Chain<HeadTiles, half, true>(chain, kernel, r, n, d, c, x, y, out);
        } else {
            dtype ? Chain<HeadTiles, bfloat16_t>(chain, kernel, r, n, d, c, x, y, out)
                  : Chain<HeadTiles, half>(chain, kernel, r, n, d, c, x, y, out);
        }
    });
}
