/*
 * The device's 16-bit float types, from the IEEE 754 definitions (not from the host compiler's _Float16 or
 * __bf16, which are what pto-isa's CPU implementations use: the emulator must not share their rounding).
 *
 *   fp16: 1 sign, 5 exponent (bias 15), 10 fraction bits; bf16: 1 sign, 8 exponent (bias 127), 7 fraction.
 *
 * Narrowing conversions take a rounding mode (the vconv suffixes: r = RINT half-to-even, a = half away from
 * zero, f = floor, c = ceil, z = toward zero, o = odd) and a saturation flag.  With CTRL[48] = 0 (the reset
 * value) the A2/A3 vector unit saturates: +-inf becomes +-MAX of the target type and NaN becomes 0
 * (SetCtrlSpr(ISASI) tables 4-5 in asc-devkit); with CTRL[48] = 1 inf and NaN pass through.
 */
#ifndef PA_EMU_NUMERIC_HPP
#define PA_EMU_NUMERIC_HPP

#include <cmath>
#include <cstdint>
#include <cstring>

namespace pa::emu {

enum class Round : uint8_t { Rint, Away, Floor, Ceil, Trunc, Odd };

inline uint32_t BitsOf(float x)
{
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return u;
}

inline float FloatOf(uint32_t u)
{
    float x;
    std::memcpy(&x, &u, 4);
    return x;
}

inline float F32FromF16(uint16_t h)
{
    const uint32_t sign = uint32_t(h >> 15) << 31;
    const uint32_t exp = (h >> 10) & 0x1f;
    const uint32_t frac = h & 0x3ff;
    if (exp == 0x1f) return FloatOf(sign | 0x7f800000u | (frac << 13));  /* inf, NaN (payload kept) */
    if (exp == 0) {                                                        /* zero, subnormal: frac x 2^-24 */
        const float magnitude = std::ldexp(float(frac), -24);
        return sign ? -magnitude : magnitude;
    }
    return FloatOf(sign | ((exp + 112) << 23) | (frac << 13));
}

inline float F32FromBf16(uint16_t b) { return FloatOf(uint32_t(b) << 16); }

/* Round the non-negative integer-valued quotient: `whole` with remainder fraction `rem` / `den` (den > 0). */
inline uint64_t RoundQuotient(uint64_t whole, uint64_t rem, uint64_t den, Round mode, bool negative)
{
    if (rem == 0) return whole;
    switch (mode) {
        case Round::Rint:
            if (2 * rem > den || (2 * rem == den && (whole & 1))) return whole + 1;
            return whole;
        case Round::Away: return 2 * rem >= den ? whole + 1 : whole;
        case Round::Floor: return negative ? whole + 1 : whole;
        case Round::Ceil: return negative ? whole : whole + 1;
        case Round::Trunc: return whole;
        case Round::Odd: return whole | 1;
    }
    return whole;
}

/* fp32 -> a binary16-like format with `expBits` exponent and `fracBits` fraction bits, exact rounding. */
inline uint16_t NarrowFloat(float x, unsigned expBits, unsigned fracBits, Round mode, bool saturate)
{
    const uint32_t u = BitsOf(x);
    const uint16_t sign = uint16_t((u >> 31) << (expBits + fracBits));
    const uint32_t expMax = (1u << expBits) - 1;
    const uint16_t maxFinite = uint16_t(((expMax - 1) << fracBits) | ((1u << fracBits) - 1));
    const uint16_t inf = uint16_t(expMax << fracBits);
    if (std::isnan(x)) return saturate ? 0 : uint16_t(sign | inf | (1u << (fracBits - 1)));
    if (std::isinf(x)) return uint16_t(sign | (saturate ? maxFinite : inf));
    const bool negative = (u >> 31) != 0;
    const int bias = int(expMax >> 1);
    if ((u & 0x7fffffffu) == 0) return sign;
    /* |x| = m x 2^k exactly, m an integer below 2^24 (frexp is exact on a float widened to double) */
    int e2 = 0;
    const double f = std::frexp(std::fabs(double(x)), &e2);  /* |x| = f x 2^e2, f in [0.5, 1) */
    const uint64_t m = uint64_t(std::ldexp(f, 24));
    const int k = e2 - 24;
    /* the target's quantum at this magnitude is 2^(E - fracBits), E = max(floor(log2|x|), 1 - bias) */
    const int expUnbiased = e2 - 1 < 1 - bias ? 1 - bias : e2 - 1;
    const int shift = (expUnbiased - int(fracBits)) - k;
    uint64_t q;
    if (shift <= 0) {
        q = m << (-shift);
    } else if (shift >= 60) {
        q = RoundQuotient(0, 1, 4, mode, negative);  /* far below half a quantum: only directed modes move */
    } else {
        const uint64_t den = 1ull << shift;
        q = RoundQuotient(m >> shift, m & (den - 1), den, mode, negative);
    }
    /* q counts quanta of 2^(expUnbiased - fracBits); renormalise if rounding carried into the next binade */
    int E = expUnbiased;
    if (q >= (2ull << fracBits)) {
        q >>= 1;
        ++E;
    }
    const bool normal = q >= (1ull << fracBits);
    if (!normal) return uint16_t(sign | q);                      /* subnormal or zero */
    if (E + bias >= int(expMax)) {                               /* overflow */
        const bool toInf = mode == Round::Rint || mode == Round::Away || (mode == Round::Ceil && !negative) ||
                           (mode == Round::Floor && negative);
        return uint16_t(sign | ((toInf && !saturate) ? inf : maxFinite));
    }
    return uint16_t(sign | (uint32_t(E + bias) << fracBits) | (q & ((1u << fracBits) - 1)));
}

inline uint16_t F16FromF32(float x, Round mode, bool saturate) { return NarrowFloat(x, 5, 10, mode, saturate); }
inline uint16_t Bf16FromF32(float x, Round mode, bool saturate) { return NarrowFloat(x, 8, 7, mode, saturate); }

}  // namespace pa::emu

#endif /* PA_EMU_NUMERIC_HPP */
