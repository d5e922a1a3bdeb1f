/*
 * AVX2 + FMA + F16C path of the mock's arithmetic: a 16-lane vector is a pair of ymm registers (lanes 0-7,
 * 8-15), so the lane order and reduction tree are those of the other paths.  Compiled with a target pragma;
 * mock_dispatch.c calls it only when the CPU has these extensions.
 */
#include "mock_math.h"

#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

#include "pa_kernel_abi.h"

typedef struct {
    __m256 lo, hi;
} V16;

#define PA_QK_BLOCK 4
#define PA_QK_WIDE_ROWS 4
#define PA_SIMD_ALIGN 32
#define PA_PV_ROWS 4
#define PA_PV_CHUNKS 1
#define PA_HALF_LANES 8
#define PA_ROUND_NEAREST (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define PA_PACK_ORDER 0xD8 /* 64-bit lanes 0, 2, 1, 3: undo the per-128-bit-lane interleave of packus */

static inline V16 v_make(__m256 lo, __m256 hi) {
    V16 r = {lo, hi};
    return r;
}
static inline V16 v_zero(void) { return v_make(_mm256_setzero_ps(), _mm256_setzero_ps()); }
static inline V16 v_set1(float x) { return v_make(_mm256_set1_ps(x), _mm256_set1_ps(x)); }
static inline V16 v_loadu(const float *p) { return v_make(_mm256_loadu_ps(p), _mm256_loadu_ps(p + PA_HALF_LANES)); }
static inline void v_storeu(float *p, V16 x) {
    _mm256_storeu_ps(p, x.lo);
    _mm256_storeu_ps(p + PA_HALF_LANES, x.hi);
}
static inline V16 v_add(V16 a, V16 b) { return v_make(_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)); }
static inline V16 v_sub(V16 a, V16 b) { return v_make(_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)); }
static inline V16 v_mul(V16 a, V16 b) { return v_make(_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)); }
static inline V16 v_div(V16 a, V16 b) { return v_make(_mm256_div_ps(a.lo, b.lo), _mm256_div_ps(a.hi, b.hi)); }
static inline V16 v_fma(V16 a, V16 b, V16 c) {
    return v_make(_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi));
}
static inline V16 v_max(V16 a, V16 b) { return v_make(_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)); }
static inline V16 v_min(V16 a, V16 b) { return v_make(_mm256_min_ps(a.lo, b.lo), _mm256_min_ps(a.hi, b.hi)); }
static inline V16 v_round(V16 x) {
    return v_make(_mm256_round_ps(x.lo, PA_ROUND_NEAREST), _mm256_round_ps(x.hi, PA_ROUND_NEAREST));
}

static inline __m256 pow2i_half(__m256 n) {
    __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(PA_F32_EXP_BIAS));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, PA_F32_MANT_BITS));
}
static inline V16 v_pow2i(V16 n) { return v_make(pow2i_half(n.lo), pow2i_half(n.hi)); }

static inline V16 v_zero_below(V16 res, V16 x, float threshold) {
    __m256 t = _mm256_set1_ps(threshold);
    return v_make(_mm256_andnot_ps(_mm256_cmp_ps(x.lo, t, _CMP_LT_OQ), res.lo),
                  _mm256_andnot_ps(_mm256_cmp_ps(x.hi, t, _CMP_LT_OQ), res.hi));
}

/* bf16 -> fp32 is the bf16 bits in the upper half of each fp32 lane: one byte shuffle of the 8 values loaded
 * into both 128-bit lanes (the load's broadcast costs no shuffle), instead of a zero extension and a shift,
 * which would take a slot of the FMA ports (vpslld runs there).  Byte 0x80 of the control writes a zero. */
static inline __m256 widen_bf16_half(const uint16_t *p) {
    const __m256i to_upper = _mm256_setr_epi8(-128, -128, 0, 1, -128, -128, 2, 3, -128, -128, 4, 5, -128, -128, 6, 7,
                                              -128, -128, 8, 9, -128, -128, 10, 11, -128, -128, 12, 13, -128, -128, 14,
                                              15);
    __m256i raw = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_shuffle_epi8(raw, to_upper));
}
static inline __m256 widen_half(const uint16_t *p, int bf16) {
    if (bf16) {
        return widen_bf16_half(p);
    }
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
static inline V16 v_widen(const uint16_t *p, int bf16) {
    return v_make(widen_half(p, bf16), widen_half(p + PA_HALF_LANES, bf16));
}

static inline __m256i bf16_round_half(__m256 x) {
    __m256i u = _mm256_castps_si256(x);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, PA_BF16_SHIFT), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(PA_BF16_ROUND_HALF)), lsb);
    r = _mm256_srli_epi32(r, PA_BF16_SHIFT);
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    return _mm256_blendv_epi8(r, _mm256_set1_epi32(PA_BF16_QNAN), nan);
}

static inline void v_narrow_store(uint16_t *p, V16 x, int bf16) {
    if (bf16) {
        __m256i packed = _mm256_packus_epi32(bf16_round_half(x.lo), bf16_round_half(x.hi));
        _mm256_storeu_si256((__m256i *)p, _mm256_permute4x64_epi64(packed, PA_PACK_ORDER));
        return;
    }
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(x.lo, PA_ROUND_NEAREST));
    _mm_storeu_si128((__m128i *)(p + PA_HALF_LANES), _mm256_cvtps_ph(x.hi, PA_ROUND_NEAREST));
}

/* (l + l+8), (l + l+4), (l + l+2), (l + l+1). */
static inline float v_reduce_add(V16 v) {
    __m256 s8 = _mm256_add_ps(v.lo, v.hi);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    return _mm_cvtss_f32(s1);
}

static inline void v_reduce_add_block(const V16 *acc, float *out) {
    for (int t = 0; t < PA_QK_BLOCK; ++t) {
        out[t] = v_reduce_add(acc[t]);
    }
}

static inline float v_reduce_max(V16 v) {
    __m256 m8 = _mm256_max_ps(v.lo, v.hi);
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
    __m128 m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    __m128 m1 = _mm_max_ss(m2, _mm_shuffle_ps(m2, m2, 1));
    return _mm_cvtss_f32(m1);
}

/* Four fixed-tree reductions at once, the same additions in the same order as v_reduce_add: (l + l+8) per
 * vector, then (l + l+4) for two vectors per instruction and (l + l+2), (l + l+1) for four.  Returns the sums of
 * a, b, c, d in lanes 0, 4, 1, 5. */
static inline __m256 reduce_add4(V16 a, V16 b, V16 c, V16 d) {
    __m256 sa = _mm256_add_ps(a.lo, a.hi), sb = _mm256_add_ps(b.lo, b.hi);
    __m256 sc = _mm256_add_ps(c.lo, c.hi), sd = _mm256_add_ps(d.lo, d.hi);
    __m256 ab = _mm256_add_ps(_mm256_permute2f128_ps(sa, sb, 0x20), _mm256_permute2f128_ps(sa, sb, 0x31));
    __m256 cd = _mm256_add_ps(_mm256_permute2f128_ps(sc, sd, 0x20), _mm256_permute2f128_ps(sc, sd, 0x31));
    __m256 s2 = _mm256_add_ps(_mm256_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm256_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm256_add_ps(_mm256_shuffle_ps(s2, s2, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm256_shuffle_ps(s2, s2, _MM_SHUFFLE(3, 1, 3, 1)));
}

#define PA_AVX2_QK_ROWS 4 /* q rows per token pass: 4 accumulators (8 ymm) + a widened K chunk (2) fit 16 ymm */

/* Q.K of `hb` q rows (4, 2 or 1) against every token, one token at a time: each K chunk is widened once for
 * the hb rows and multiplied with q chunks read from L1 as FMA operands, so the hb accumulators and the chunk
 * stay in registers (q rows held in registers as well would need 18 ymm and spill); the hb sums are reduced
 * together (reduce_add4).  Each accumulator sums d in the canonical order, so the sums are the other exact
 * paths' bits. */
static inline __attribute__((always_inline)) void avx2_qk_rows(const float *q, int32_t d, const uint16_t *k,
                                                               int64_t k_stride, int32_t ntok, float *s,
                                                               int32_t s_stride, const int hb, const int bf16,
                                                               const uint16_t *const *pf) {
    for (int32_t j = 0; j < ntok; ++j) {
        if (pf) {
            pa_prefetch_row(pf[j], d);
        }
        const uint16_t *row = k + (int64_t)j * k_stride;
        V16 acc[PA_AVX2_QK_ROWS];
        for (int h = 0; h < hb; ++h) {
            acc[h] = v_zero();
        }
        for (int32_t c = 0; c < d; c += PA_LANES) {
            V16 kc = v_widen(row + c, bf16);
            for (int h = 0; h < hb; ++h) {
                acc[h] = v_fma(v_loadu(q + (int64_t)h * d + c), kc, acc[h]);
            }
        }
        if (hb == PA_AVX2_QK_ROWS) {
            __m256 sums = reduce_add4(acc[0], acc[1], acc[2], acc[3]);
            __m128 ac = _mm256_castps256_ps128(sums), bd = _mm256_extractf128_ps(sums, 1);
            _mm_store_ss(s + j, ac);
            _mm_store_ss(s + s_stride + j, bd);
            _mm_store_ss(s + 2 * (int64_t)s_stride + j, _mm_movehdup_ps(ac));
            _mm_store_ss(s + 3 * (int64_t)s_stride + j, _mm_movehdup_ps(bd));
        } else if (hb == 2) {
            __m256 sums = reduce_add4(acc[0], acc[1], acc[0], acc[1]);
            _mm_store_ss(s + j, _mm256_castps256_ps128(sums));
            _mm_store_ss(s + s_stride + j, _mm256_extractf128_ps(sums, 1));
        } else {
            s[j] = v_reduce_add(acc[0]);
        }
    }
}

static void avx2_qk_dtype(const float *q, int32_t rows, int32_t d, const uint16_t *k, int64_t k_stride, int32_t ntok,
                          float *s, int32_t s_stride, const int bf16, const uint16_t *const *pf) {
    int32_t r = 0; /* the first row block prefetches the next rows, the others find them requested already */
    for (; r + PA_AVX2_QK_ROWS <= rows; r += PA_AVX2_QK_ROWS) {
        avx2_qk_rows(q + (int64_t)r * d, d, k, k_stride, ntok, s + (int64_t)r * s_stride, s_stride,
                     PA_AVX2_QK_ROWS, bf16, r ? 0 : pf);
    }
    for (; r + 2 <= rows; r += 2) {
        avx2_qk_rows(q + (int64_t)r * d, d, k, k_stride, ntok, s + (int64_t)r * s_stride, s_stride, 2, bf16,
                     r ? 0 : pf);
    }
    for (; r < rows; ++r) {
        avx2_qk_rows(q + (int64_t)r * d, d, k, k_stride, ntok, s + (int64_t)r * s_stride, s_stride, 1, bf16,
                     r ? 0 : pf);
    }
}

static void avx2_qk(const float *q, int32_t rows, int32_t d, const uint16_t *k, int64_t k_stride, int32_t ntok,
                    float *s, int32_t s_stride, int bf16, const uint16_t *const *pf) {
    if (d % PA_LANES != 0) {
        pa_math_portable.qk(q, rows, d, k, k_stride, ntok, s, s_stride, bf16, pf);
    } else if (bf16) {
        avx2_qk_dtype(q, rows, d, k, k_stride, ntok, s, s_stride, 1, pf);
    } else {
        avx2_qk_dtype(q, rows, d, k, k_stride, ntok, s, s_stride, 0, pf);
    }
}

static void avx2_pv(const float *pf, int32_t p_stride, int32_t rows, const uint16_t *v, int64_t v_stride,
                    int32_t ntok, int32_t d, float *o, int32_t o_stride, int accumulate, int bf16,
                    const uint16_t *const *vpf);

#define PA_SIMD_QK_ENTRY avx2_qk
#define PA_SIMD_PV_ENTRY avx2_pv
#define PA_SIMD_TABLE pa_math_avx2
#define PA_SIMD_NAME "avx2"
#include "mock_simd_body.h"

/* The body's P.V with the dtype a constant: with it a run-time argument, GCC kept the widening's test in the
 * token loop and loaded each bf16 chunk with a load and an insert (a shuffle) instead of one broadcast load. */
static void avx2_pv(const float *pf, int32_t p_stride, int32_t rows, const uint16_t *v, int64_t v_stride,
                    int32_t ntok, int32_t d, float *o, int32_t o_stride, int accumulate, int bf16,
                    const uint16_t *const *vpf) {
    if (d % PA_LANES != 0) {
        pa_math_portable.pv(pf, p_stride, rows, v, v_stride, ntok, d, o, o_stride, accumulate, bf16, vpf);
    } else if (bf16) {
        simd_pv_tile(pf, p_stride, rows, v, v_stride, ntok, d, o, o_stride, accumulate, 1, vpf);
    } else {
        simd_pv_tile(pf, p_stride, rows, v, v_stride, ntok, d, o, o_stride, accumulate, 0, vpf);
    }
}

#endif /* __x86_64__ */
