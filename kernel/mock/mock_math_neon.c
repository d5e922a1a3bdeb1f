/*
 * NEON (AdvSIMD) path of the mock's arithmetic for aarch64 hosts (Kunpeng 920 and other Armv8-A servers): a
 * 16-lane vector is four q registers (lanes 0-3, 4-7, 8-11, 12-15), so the lane order and the reduction tree are
 * those of the other exact paths and the results are theirs bit for bit.  AdvSIMD is part of every Armv8-A
 * CPU, so the path needs no run-time test beyond the architecture; fp16 is widened and narrowed by the NEON
 * conversions (exact, and round-to-nearest-even under Linux's default FPCR), bf16 by shifts (its rounding is
 * the integer one of mock_scalar.h).  Compare-and-select stands in for NEON's min/max, whose NaN rule differs
 * from the portable `(a < b) ? a : b`.
 */
#include "mock_math.h"

#if defined(__aarch64__)
#include <arm_neon.h>

#include "pa_kernel_abi.h"

typedef struct {
    float32x4_t a, b, c, d;
} V16;

#define PA_QK_BLOCK 4
#define PA_QK_WIDE_ROWS 4
#define PA_SIMD_ALIGN 16
#define PA_PV_ROWS 4
#define PA_PV_CHUNKS 1
#define PA_QUARTER_LANES 4

static inline V16 v_make(float32x4_t a, float32x4_t b, float32x4_t c, float32x4_t d) {
    V16 r = {a, b, c, d};
    return r;
}
static inline V16 v_zero(void) {
    float32x4_t z = vdupq_n_f32(0.0f);
    return v_make(z, z, z, z);
}
static inline V16 v_set1(float x) {
    float32x4_t s = vdupq_n_f32(x);
    return v_make(s, s, s, s);
}
static inline V16 v_loadu(const float *p) {
    return v_make(vld1q_f32(p), vld1q_f32(p + PA_QUARTER_LANES), vld1q_f32(p + 2 * PA_QUARTER_LANES),
                  vld1q_f32(p + 3 * PA_QUARTER_LANES));
}
static inline void v_storeu(float *p, V16 x) {
    vst1q_f32(p, x.a);
    vst1q_f32(p + PA_QUARTER_LANES, x.b);
    vst1q_f32(p + 2 * PA_QUARTER_LANES, x.c);
    vst1q_f32(p + 3 * PA_QUARTER_LANES, x.d);
}
#define PA_V16_BINARY(NAME, OP)                                                                               \
    static inline V16 NAME(V16 x, V16 y) { return v_make(OP(x.a, y.a), OP(x.b, y.b), OP(x.c, y.c), OP(x.d, y.d)); }
PA_V16_BINARY(v_add, vaddq_f32)
PA_V16_BINARY(v_sub, vsubq_f32)
PA_V16_BINARY(v_mul, vmulq_f32)
PA_V16_BINARY(v_div, vdivq_f32)

/* (a < b) ? a : b and (a > b) ? a : b, lane by lane: the portable order's choice when a NaN is involved. */
static inline float32x4_t min_q(float32x4_t a, float32x4_t b) { return vbslq_f32(vcltq_f32(a, b), a, b); }
static inline float32x4_t max_q(float32x4_t a, float32x4_t b) { return vbslq_f32(vcgtq_f32(a, b), a, b); }
PA_V16_BINARY(v_min, min_q)
PA_V16_BINARY(v_max, max_q)

/* a * b + c with one rounding: used only where the product is exact (fp16/bf16 values), see mock_math.h. */
static inline V16 v_fma(V16 x, V16 y, V16 z) {
    return v_make(vfmaq_f32(z.a, x.a, y.a), vfmaq_f32(z.b, x.b, y.b), vfmaq_f32(z.c, x.c, y.c),
                  vfmaq_f32(z.d, x.d, y.d));
}
static inline V16 v_round(V16 x) { return v_make(vrndnq_f32(x.a), vrndnq_f32(x.b), vrndnq_f32(x.c), vrndnq_f32(x.d)); }

static inline float32x4_t pow2i_q(float32x4_t n) {
    int32x4_t e = vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(PA_F32_EXP_BIAS));
    return vreinterpretq_f32_s32(vshlq_n_s32(e, PA_F32_MANT_BITS));
}
static inline V16 v_pow2i(V16 n) { return v_make(pow2i_q(n.a), pow2i_q(n.b), pow2i_q(n.c), pow2i_q(n.d)); }

static inline float32x4_t zero_below_q(float32x4_t res, float32x4_t x, float32x4_t t) {
    return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(res), vcltq_f32(x, t)));
}
static inline V16 v_zero_below(V16 res, V16 x, float threshold) {
    float32x4_t t = vdupq_n_f32(threshold);
    return v_make(zero_below_q(res.a, x.a, t), zero_below_q(res.b, x.b, t), zero_below_q(res.c, x.c, t),
                  zero_below_q(res.d, x.d, t));
}

/* 8 IN-dtype values -> two fp32 quarters. */
static inline void widen8(const uint16_t *p, int bf16, float32x4_t *lo, float32x4_t *hi) {
    uint16x8_t raw = vld1q_u16(p);
    if (bf16) {
        *lo = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(raw), PA_BF16_SHIFT));
        *hi = vreinterpretq_f32_u32(vshll_high_n_u16(raw, PA_BF16_SHIFT));
        return;
    }
    float16x8_t h = vreinterpretq_f16_u16(raw);
    *lo = vcvt_f32_f16(vget_low_f16(h));
    *hi = vcvt_high_f32_f16(h);
}
static inline V16 v_widen(const uint16_t *p, int bf16) {
    V16 r;
    widen8(p, bf16, &r.a, &r.b);
    widen8(p + 2 * PA_QUARTER_LANES, bf16, &r.c, &r.d);
    return r;
}

/* Round to nearest even by the integer rule of pa_float_to_bf16; NaN -> the canonical quiet NaN. */
static inline uint16x4_t bf16_round_q(float32x4_t x) {
    uint32x4_t u = vreinterpretq_u32_f32(x);
    uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, PA_BF16_SHIFT), vdupq_n_u32(1));
    uint32x4_t r = vaddq_u32(vaddq_u32(u, vdupq_n_u32(PA_BF16_ROUND_HALF)), lsb);
    uint32x4_t nan = vmvnq_u32(vceqq_f32(x, x));
    r = vbslq_u32(nan, vdupq_n_u32((uint32_t)PA_BF16_QNAN << PA_BF16_SHIFT), r);
    return vshrn_n_u32(r, PA_BF16_SHIFT);
}
static inline void v_narrow_store(uint16_t *p, V16 x, int bf16) {
    if (bf16) {
        vst1q_u16(p, vcombine_u16(bf16_round_q(x.a), bf16_round_q(x.b)));
        vst1q_u16(p + 2 * PA_QUARTER_LANES, vcombine_u16(bf16_round_q(x.c), bf16_round_q(x.d)));
        return;
    }
    vst1q_u16(p, vreinterpretq_u16_f16(vcvt_high_f16_f32(vcvt_f16_f32(x.a), x.b)));
    vst1q_u16(p + 2 * PA_QUARTER_LANES, vreinterpretq_u16_f16(vcvt_high_f16_f32(vcvt_f16_f32(x.c), x.d)));
}

/* (l + l+8), (l + l+4), (l + l+2), (l + l+1). */
static inline float v_reduce_add(V16 v) {
    float32x4_t s4 = vaddq_f32(vaddq_f32(v.a, v.c), vaddq_f32(v.b, v.d));
    float32x2_t s2 = vadd_f32(vget_low_f32(s4), vget_high_f32(s4));
    return vget_lane_f32(s2, 0) + vget_lane_f32(s2, 1);
}

static inline void v_reduce_add_block(const V16 *acc, float *out) {
    for (int t = 0; t < PA_QK_BLOCK; ++t) {
        out[t] = v_reduce_add(acc[t]);
    }
}

static inline float v_reduce_max(V16 v) {
    float32x4_t m4 = max_q(max_q(v.a, v.c), max_q(v.b, v.d));
    float32x2_t lo = vget_low_f32(m4), hi = vget_high_f32(m4);
    float32x2_t m2 = vbsl_f32(vcgt_f32(lo, hi), lo, hi);
    float x = vget_lane_f32(m2, 0), y = vget_lane_f32(m2, 1);
    return (x > y) ? x : y;
}

#define PA_SIMD_TABLE pa_math_neon
#define PA_SIMD_NAME "neon"
#include "mock_simd_body.h"

#endif /* __aarch64__ */
