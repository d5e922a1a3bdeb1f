/*
 * AMLA's running maximum (MLA under PA_MLA_RESCALE_POW2): kept on the grid of multiples of ln 2, so every rescale
 * factor of the output accumulator is a power of two, 2^n with an integer n <= 0, which the vectors apply as an
 * integer add of n * 2^23 to the accumulator's fp32 bits in GM (pa_vector_mla.hpp).
 *
 * The grid index of a row max x is k = round_half_even(x * log2(e) + 0.5) >= x * log2(e), computed in fp32 by adding
 * and subtracting 1.5 * 2^23 (the sum's rounding is the integer rounding while |x * log2(e)| < 2^22); the row's max
 * is then m = k * ln 2 >= x (to fp32 rounding), so P = exp(S - m) <= 1 as with the exact max.  k is kept beside m:
 * re-deriving it from m would round up again.  A row whose keys of a unit are all masked has x near -1e30, where the
 * add rounds to nothing; its n is then far below the int32 shift range and is clamped to -kAmlaMaxShift (the
 * accumulator then keeps 2^-64 of what such a unit added, next to at least one full term; the l rescale uses the
 * unclamped factor, 0).
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

/* k = the grid index of x (rows of one group), in place over `k` (k may alias x only at u == 0). */
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

/* The running max after unit u of a group whose unit row max is lm: m (the grid max), k (its index), and for u > 0
 * dm = 2^n (the rescale of l) and negShift = min(-n, kAmlaMaxShift) * 2^23 (what the accumulator's bits lose);
 * tmp is scratch.  The caller puts a V barrier before (lm) and after. */
template <typename Row>
AICORE inline void AmlaMax(uint32_t u, Row &m, Row &k, Row &lm, Row &dm, Row &negShift, Row &tmp)
{
    if (u == 0) {
        GridIndex(k, lm);
        MulS(m, k, kLn2);
        return;
    }
    GridIndex(tmp, lm);
    Max(tmp, tmp, k); /* the new index */
    VecBarrier(kEdgeBarGrid);
    Sub(dm, k, tmp); /* n <= 0 */
    Fill(negShift, -kAmlaMaxShift);
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
