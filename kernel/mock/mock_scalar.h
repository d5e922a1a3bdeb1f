/*
 * Scalar building blocks shared by every SIMD path: fp16/bf16 <-> fp32 conversions (round to nearest even,
 * as torch and the NPU's casts) and the exp polynomial.  The SIMD paths evaluate exactly these operations
 * lane by lane, so all paths agree bit for bit.
 */
#ifndef PA_MOCK_SCALAR_H
#define PA_MOCK_SCALAR_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* IEEE binary32 / binary16 / bfloat16 fields. */
#define PA_F32_SIGN 0x80000000u
#define PA_F32_ABS 0x7FFFFFFFu
#define PA_F32_INF 0x7F800000u
#define PA_F32_MANT_BITS 23
#define PA_F32_EXP_BIAS 127
#define PA_F16_SIGN 0x8000u
#define PA_F16_EXP_MASK 0x1Fu
#define PA_F16_MANT_MASK 0x3FFu
#define PA_F16_MANT_BITS 10
#define PA_F16_INF 0x7C00u
#define PA_F16_QNAN 0x7E00u
#define PA_F16_EXP_SPECIAL 31u
#define PA_F16_SHIFT 13               /* fp32 mantissa bits dropped by fp16                               */
#define PA_F16_REBIAS 0x38000000u     /* (127 - 15) << 23                                                 */
#define PA_F16_ROUND_HALF 0xFFFu      /* half an fp16 ulp minus one, at fp32 bit 13                       */
#define PA_F16_OVERFLOW 0x477FF000u   /* |x| >= 65520 rounds to inf                                       */
#define PA_F16_MIN_NORMAL 0x38800000u /* 2^-14                                                            */
#define PA_F16_SUBNORMAL_SCALE 0x1p24f
#define PA_F16_SUBNORMAL_ULP 0x1p-24f
#define PA_BF16_SHIFT 16
#define PA_BF16_ROUND_HALF 0x7FFFu
#define PA_BF16_QNAN 0x7FC0u
/* Lanes of the canonical dot-product / row-sum order (one AVX-512 register of fp32). */
#define PA_LANES 16

/* exp(x) = 2^n * e^r, n = rint(x log2 e), r = x - n ln2 in two parts; e^r = 1 + r + r^2 P(r) with the
 * classic single-precision minimax P (Cephes expf coefficients).  Below EXP_LO (2^-126) the result is 0. */
#define PA_LOG2E 1.44269504088896341f
#define PA_EXP_C1 0.693359375f
#define PA_EXP_C2 (-2.12194440e-4f)
#define PA_EXP_P0 1.9875691500e-4f
#define PA_EXP_P1 1.3981999507e-3f
#define PA_EXP_P2 8.3334519073e-3f
#define PA_EXP_P3 4.1665795894e-2f
#define PA_EXP_P4 1.6666665459e-1f
#define PA_EXP_P5 5.0000001201e-1f
#define PA_EXP_HI 88.0f
#define PA_EXP_LO (-87.33654f)

static inline uint32_t pa_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float pa_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float pa_half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & PA_F16_SIGN) << PA_BF16_SHIFT;
    uint32_t exp = (h >> PA_F16_MANT_BITS) & PA_F16_EXP_MASK;
    uint32_t mant = h & PA_F16_MANT_MASK;
    if (exp == 0) {
        return pa_bits_f32(sign | pa_f32_bits((float)mant * PA_F16_SUBNORMAL_ULP));
    }
    if (exp == PA_F16_EXP_SPECIAL) {
        return pa_bits_f32(sign | PA_F32_INF | (mant << PA_F16_SHIFT));
    }
    return pa_bits_f32(sign | (((exp << PA_F16_MANT_BITS | mant) << PA_F16_SHIFT) + PA_F16_REBIAS));
}

static inline uint16_t pa_float_to_half(float f) {
    uint32_t x = pa_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> PA_BF16_SHIFT) & PA_F16_SIGN);
    uint32_t ax = x & PA_F32_ABS;
    if (ax > PA_F32_INF) {
        return (uint16_t)(sign | PA_F16_QNAN | ((ax >> PA_F16_SHIFT) & PA_F16_MANT_MASK));
    }
    if (ax >= PA_F16_OVERFLOW) {
        return (uint16_t)(sign | PA_F16_INF);
    }
    if (ax < PA_F16_MIN_NORMAL) {
        return (uint16_t)(sign | (uint16_t)rintf(pa_bits_f32(ax) * PA_F16_SUBNORMAL_SCALE));
    }
    uint32_t rounded = ax + PA_F16_ROUND_HALF + ((ax >> PA_F16_SHIFT) & 1u) - PA_F16_REBIAS;
    return (uint16_t)(sign | (rounded >> PA_F16_SHIFT));
}

static inline float pa_bf16_to_float(uint16_t b) {
    return pa_bits_f32((uint32_t)b << PA_BF16_SHIFT);
}

static inline uint16_t pa_float_to_bf16(float f) {
    uint32_t x = pa_f32_bits(f);
    if ((x & PA_F32_ABS) > PA_F32_INF) {
        return PA_BF16_QNAN;
    }
    return (uint16_t)((x + PA_BF16_ROUND_HALF + ((x >> PA_BF16_SHIFT) & 1u)) >> PA_BF16_SHIFT);
}

static inline float pa_widen(uint16_t x, int bf16) {
    return bf16 ? pa_bf16_to_float(x) : pa_half_to_float(x);
}

static inline uint16_t pa_narrow(float x, int bf16) {
    return bf16 ? pa_float_to_bf16(x) : pa_float_to_half(x);
}

static inline float pa_pow2i(int32_t n) {
    return pa_bits_f32((uint32_t)(n + PA_F32_EXP_BIAS) << PA_F32_MANT_BITS);
}

static inline float pa_expf(float x) {
    x = (PA_EXP_HI < x) ? PA_EXP_HI : x;
    if (x != x) {
        return x;
    }
    if (x < PA_EXP_LO) {
        return 0.0f;
    }
    float n = rintf(x * PA_LOG2E);
    float r = x - n * PA_EXP_C1;
    r = r - n * PA_EXP_C2;
    float z = r * r;
    float y = PA_EXP_P0;
    y = y * r + PA_EXP_P1;
    y = y * r + PA_EXP_P2;
    y = y * r + PA_EXP_P3;
    y = y * r + PA_EXP_P4;
    y = y * r + PA_EXP_P5;
    y = y * z + r;
    y = y + 1.0f;
    return y * pa_pow2i((int32_t)n);
}

/* The fixed 16-lane reduction tree: (l + l+8), (l + l+4), (l + l+2), (l + l+1). */
static inline float pa_reduce_lanes(float lane[PA_LANES]) {
    for (int width = PA_LANES / 2; width >= 1; width /= 2) {
        for (int l = 0; l < width; ++l) {
            lane[l] = lane[l] + lane[l + width];
        }
    }
    return lane[0];
}

#endif /* PA_MOCK_SCALAR_H */
