/*
 * The running maximum of an MLA task's rows (pa_vector_mla.hpp): lazy, and for AMLA on a grid of powers of two.
 *
 * Lazy: the reference max m of a row moves only when a unit's row max x exceeds it by more than the headroom h
 * (kMlaHeadroomLog2 powers of two), and then to x - h, so P = exp(S - m) <= e^h = 256 (an fp16 or bf16 P holds it;
 * l and the accumulator are fp32).  Most units move no row's m, and the vectors then hand P over to the cube without
 * waiting for the previous unit's P.V or touching the accumulator: the cube never waits on a rescale in steady
 * state.  A unit that moves some row's m rescales the accumulator's rows by dm = exp(m_old - m_new) (1 for a row
 * whose m stays) between the previous unit's P.V and its own.
 *
 * AMLA (PA_MLA_RESCALE_POW2): m = k ln 2 for an integer grid index k, so dm = 2^n with n = k_old - k_new <= 0, which
 * the vectors apply as an integer add of n * 2^23 to the accumulator's fp32 bits (write-only).  The grid index of
 * x is k = round_half_even(x * log2(e) + 0.5) >= x * log2(e), computed in fp32 by adding and subtracting 1.5 * 2^23
 * (the sum's rounding is the integer rounding while |x * log2(e)| < 2^22); k is kept beside m (re-deriving it from m
 * would round up again).  A row whose keys of a unit are all masked has x near -1e30, where the add rounds to
 * nothing; its n is then far below the int32 shift range and is clamped to -kAmlaMaxShift (the accumulator keeps
 * 2^-64 of what such a unit added, next to at least one full term; l's rescale uses the unclamped factor, 0).
 */
#ifndef PA_AMLA_HPP
#define PA_AMLA_HPP

#include "pa_platform.hpp"

namespace pa {

constexpr float kLog2E = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
/* 1.5 * 2^23: adding it rounds an fp32 of magnitude below 2^22 to an integer. */
constexpr float kRoundMagic = 12582912.0f;
/* The fp32 exponent field starts at bit 23: an integer add of n * 2^23 to the bits multiplies by 2^n. */
constexpr float kExponentUnit = 8388608.0f;
/* The largest shift applied: 2^-64 of a term is far below fp32's resolution of the terms after it. */
constexpr float kAmlaMaxShift = 64.0f;
/* The headroom h of the lazy max, in powers of two: P <= 2^8. */
constexpr float kMlaHeadroomLog2 = 8.0f;

/* k = the grid index of x (rows of one group); k may be x. */
template <typename Row>
AICORE inline void GridIndex(Row &k, Row &x)
{
    MulS(k, x, kLog2E);
    VecBarrier(kEdgeBarGrid);
    AddS(k, k, 0.5f);
    VecBarrier(kEdgeBarGrid);
    AddS(k, k, kRoundMagic);
    VecBarrier(kEdgeBarGrid);
    AddS(k, k, -kRoundMagic);
    VecBarrier(kEdgeBarGrid);
}

/* The rows' lazy max after unit u, exact (PA_MLA_RESCALE_PLAIN): m (in place), whose unit row max is x; for u > 0
 * dm = exp(m_old - m_new) and rise = m_new - m_old >= 0 (0 where m stays).  The caller barriers before and after. */
template <typename Row>
AICORE inline void LazyMax(uint32_t u, Row &m, Row &x, Row &dm, Row &rise, Row &tmp)
{
    if (u == 0) {
        AddS(m, x, 0.0f);
        return;
    }
    AddS(tmp, x, -kMlaHeadroomLog2 * kLn2);
    VecBarrier(kEdgeBarGrid);
    Max(tmp, tmp, m); /* the new m */
    VecBarrier(kEdgeBarGrid);
    Sub(dm, m, tmp);
    Sub(rise, tmp, m);
    VecBarrier(kEdgeBarGrid);
    AddS(m, tmp, 0.0f);
    Exp(dm, dm);
}

/* The same on AMLA's grid (PA_MLA_RESCALE_POW2): k and m = k ln 2 (in place), and for u > 0 dm = 2^n, rise = -n,
 * negShift = min(-n, kAmlaMaxShift) * 2^23 (what the accumulator's bits lose). */
template <typename Row>
AICORE inline void LazyGridMax(uint32_t u, Row &m, Row &k, Row &x, Row &dm, Row &rise, Row &negShift, Row &tmp)
{
    if (u == 0) {
        GridIndex(k, x);
        MulS(m, k, kLn2);
        return;
    }
    GridIndex(tmp, x);
    AddS(tmp, tmp, -kMlaHeadroomLog2);
    VecBarrier(kEdgeBarGrid);
    Max(tmp, tmp, k); /* the new index */
    Fill(negShift, -kAmlaMaxShift);
    VecBarrier(kEdgeBarGrid);
    Sub(dm, k, tmp);   /* n <= 0 */
    Sub(rise, tmp, k); /* -n */
    VecBarrier(kEdgeBarGrid);
    AddS(k, tmp, 0.0f);
    Max(negShift, negShift, dm);
    MulS(m, tmp, kLn2);
    VecBarrier(kEdgeBarGrid);
    MulS(dm, dm, kLn2);
    MulS(negShift, negShift, -kExponentUnit);
    VecBarrier(kEdgeBarGrid);
    Exp(dm, dm);
}

}  // namespace pa

#endif /* PA_AMLA_HPP */
