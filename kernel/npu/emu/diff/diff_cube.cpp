/*
 * Differential harness of the cube tile ops our kernel uses (the chunk path's tile shapes: 16 rows, D 128,
 * 128-token pieces): compiled against pto-isa's A2/A3 implementations on the emulator (PA_EMU_DIFF_DEV) and
 * against pto-isa's CPU implementations (PA_EMU_DIFF_CPU).  Two chains, compared on the global-memory result:
 *
 *   qk: TEXPANDS zero the L1 tiles, TLOAD Q (ND -> Nz), TLOAD K^T (DN -> Zn), TMOV to L0A / L0B, TMATMUL, TSTORE S
 *   pv: TEXPANDS, TLOAD P into a window (ND -> Nz), TLOAD V (ND -> Nz), TEXTRACT P at a column, TMOV V (Nz ->
 *       Zn), TMATMUL then TMATMUL_ACC (acc = 2 x P.V), TSTORE O
 *
 *   int32_t pa_diff_cube(int32_t chain, int32_t dtype, int32_t rows, int32_t tokens, int32_t dim,
 *                        int32_t col, const void *x, const void *y, float *out)
 * qk: x = Q [rows x dim], y = K page rows [tokens x dim] (pitch dim); out = S [rows x tokens].
 * pv: x = P [rows x 512] (the window, pitch 512), y = V [tokens x dim]; out = O [rows x dim]; col: the column of the
 *     window the sub-tile starts at.  dtype 0 fp16, 1 bf16.
 */
#include <exception>
#include <string>

#include "diff_common.hpp"
#include "pa_cube_state.hpp"

using namespace pto;
using pa_diff::GmNd;
using pa_diff::Place;

namespace {

constexpr int kRows = 16, kDCap = 128, kTok = 128, kWindow = pa::kPieceTokens;

/* The kernel's own tile family of the chunk path (pa_cube_state.hpp), so the harness runs its layouts. */
template <typename T>
using Tiles = pa::CubeTiles<T, kDCap, kRows, kTok>;
template <typename E>
using GmDn = GlobalTensor<E, Shape<1, 1, 1, DYNAMIC, DYNAMIC>, Stride<1, 1, 1, DYNAMIC, DYNAMIC>, Layout::DN>;

/* L1 and L0 offsets (bytes); every tile of a space at its own offset, none at 0 (pto-isa's cost model). */
constexpr uint32_t kL1Q = 0, kL1K = 65536, kL1P = 131072, kL1V = 262144;

template <typename T>
void Qk(uint32_t rows, uint32_t tokens, uint32_t dim, const void *x, const void *y, float *out)
{
    using C = Tiles<T>;
    typename C::QMat qMat(rows, dim);
    typename C::KMat kMat(dim, tokens);
    typename C::QLeft qLeft(rows, dim);
    typename C::KRight kRight(dim, tokens);
    typename C::SAcc acc(rows, tokens);
    Place(qMat, kL1Q);
    Place(kMat, kL1K);
    Place(qLeft, 0);
    Place(kRight, 0);
    Place(acc, 0);
    TEXPANDS(qMat, T(0.0f));
    TEXPANDS(kMat, T(0.0f));
    T *q = reinterpret_cast<T *>(const_cast<void *>(x));
    T *k = reinterpret_cast<T *>(const_cast<void *>(y));
    GmNd<T> qv(q, typename GmNd<T>::Shape(rows, dim), typename GmNd<T>::Stride(dim, 1));
    TLOAD(qMat, qv);
    GmDn<T> kv(k, typename GmDn<T>::Shape(dim, tokens), typename GmDn<T>::Stride(1, dim));
    TLOAD(kMat, kv);
    TMOV(qLeft, qMat);
    TMOV(kRight, kMat);
    TMATMUL(acc, qLeft, kRight);
    GmNd<float> sv(out, typename GmNd<float>::Shape(rows, tokens), typename GmNd<float>::Stride(tokens, 1));
    TSTORE(sv, acc);
}

template <typename T>
void Pv(uint32_t rows, uint32_t tokens, uint32_t dim, uint32_t col, const void *x, const void *y, float *out)
{
    using C = Tiles<T>;
    typename C::PMat pMat(rows, kWindow);
    typename C::VMat vMat(tokens, dim);
    typename C::PLeft pLeft(rows, tokens);
    typename C::VRight vRight(tokens, dim);
    typename C::OAcc acc(rows, dim);
    Place(pMat, kL1P);
    Place(vMat, kL1V);
    Place(pLeft, 0);
    Place(vRight, 0);
    Place(acc, 0);
    TEXPANDS(pMat, T(0.0f));
    TEXPANDS(vMat, T(0.0f));
    T *p = reinterpret_cast<T *>(const_cast<void *>(x));
    T *v = reinterpret_cast<T *>(const_cast<void *>(y));
    GmNd<T> pv(p, typename GmNd<T>::Shape(rows, kWindow), typename GmNd<T>::Stride(kWindow, 1));
    TLOAD(pMat, pv);
    GmNd<T> vv(v, typename GmNd<T>::Shape(tokens, dim), typename GmNd<T>::Stride(dim, 1));
    TLOAD(vMat, vv);
    TEXTRACT(pLeft, pMat, 0, col);
    TMOV(vRight, vMat);
    TMATMUL(acc, pLeft, vRight);
    TMATMUL_ACC(acc, acc, pLeft, vRight);
    GmNd<float> ov(out, typename GmNd<float>::Shape(rows, dim), typename GmNd<float>::Stride(dim, 1));
    TSTORE(ov, acc);
}

}  // namespace

extern "C" int32_t pa_diff_cube(int32_t chain, int32_t dtype, int32_t rows, int32_t tokens, int32_t dim, int32_t col,
                                const void *x, const void *y, float *out)
{
    return pa_diff::Guarded(true, [&] {
        const uint32_t r = uint32_t(rows), n = uint32_t(tokens), d = uint32_t(dim);
        if (chain == 0) {
            dtype ? Qk<bfloat16_t>(r, n, d, x, y, out) : Qk<half>(r, n, d, x, y, out);
        } else {
            dtype ? Pv<bfloat16_t>(r, n, d, uint32_t(col), x, y, out) : Pv<half>(r, n, d, uint32_t(col), x, y, out);
        }
    });
}
