/*
 * The AVX-512 (F + BW + VL) primitives of the mock's arithmetic, one zmm register per 16-lane vector: what
 * mock_simd_body.h needs (see its comment).  Included by the AVX-512 paths (mock_math_avx512.c and the native
 * BF16 path mock_math_avx512bf16.c) after their target pragma.
 */
#ifndef PA_MOCK_AVX512_PRIMS_H
#define PA_MOCK_AVX512_PRIMS_H

#include <immintrin.h>

#include "pa_kernel_abi.h"

typedef __m512 V16;

#define PA_QK_BLOCK 16
#define PA_QK_WIDE_ROWS 4
#define PA_SIMD_ALIGN 64
#define PA_PV_ROWS 4
#define PA_PV_CHUNKS 4
#define PA_ROUND_NEAREST (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

static inline V16 v_zero(void) { return _mm512_setzero_ps(); }
static inline V16 v_set1(float x) { return _mm512_set1_ps(x); }
static inline V16 v_loadu(const float *p) { return _mm512_loadu_ps(p); }
static inline void v_storeu(float *p, V16 x) { _mm512_storeu_ps(p, x); }
static inline V16 v_add(V16 a, V16 b) { return _mm512_add_ps(a, b); }
static inline V16 v_sub(V16 a, V16 b) { return _mm512_sub_ps(a, b); }
static inline V16 v_mul(V16 a, V16 b) { return _mm512_mul_ps(a, b); }
static inline V16 v_div(V16 a, V16 b) { return _mm512_div_ps(a, b); }
static inline V16 v_fma(V16 a, V16 b, V16 c) { return _mm512_fmadd_ps(a, b, c); }
static inline V16 v_max(V16 a, V16 b) { return _mm512_max_ps(a, b); }
static inline V16 v_min(V16 a, V16 b) { return _mm512_min_ps(a, b); }
static inline V16 v_round(V16 x) { return _mm512_roundscale_ps(x, PA_ROUND_NEAREST); }

static inline V16 v_pow2i(V16 n) {
    __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(PA_F32_EXP_BIAS));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, PA_F32_MANT_BITS));
}

static inline V16 v_zero_below(V16 res, V16 x, float threshold) {
    __mmask16 below = _mm512_cmp_ps_mask(x, _mm512_set1_ps(threshold), _CMP_LT_OQ);
    return _mm512_mask_mov_ps(res, below, _mm512_setzero_ps());
}

static inline V16 v_widen(const uint16_t *p, int bf16) {
    __m256i raw = _mm256_loadu_si256((const __m256i *)p);
    if (bf16) {
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), PA_BF16_SHIFT));
    }
    return _mm512_cvtph_ps(raw);
}

static inline void v_narrow_store(uint16_t *p, V16 x, int bf16) {
    __m256i out;
    if (bf16) {
        __m512i u = _mm512_castps_si512(x);
        __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, PA_BF16_SHIFT), _mm512_set1_epi32(1));
        __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(PA_BF16_ROUND_HALF)), lsb);
        r = _mm512_srli_epi32(r, PA_BF16_SHIFT);
        __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
        r = _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(PA_BF16_QNAN));
        out = _mm512_cvtepi32_epi16(r);
    } else {
        out = _mm512_cvtps_ph(x, PA_ROUND_NEAREST);
    }
    _mm256_storeu_si256((__m256i *)p, out);
}

/* (l + l+8), (l + l+4), (l + l+2), (l + l+1). */
static inline float v_reduce_add(V16 v) {
    __m256 lo = _mm512_castps512_ps256(v);
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    __m256 s8 = _mm256_add_ps(lo, hi);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    return _mm_cvtss_f32(s1);
}

/* Sixteen fixed-tree reductions at once: each step adds lane i and lane i + w of every vector (w = 8, 4,
 * 2, 1) while packing two vectors into one; a final permutation puts accumulator i's sum in lane i. */
static inline void v_reduce_add_block(const V16 *acc, float *out) {
    __m512 s8[8], s4[4], s2[2];
    for (int m = 0; m < 8; ++m) {
        s8[m] = _mm512_add_ps(_mm512_shuffle_f32x4(acc[2 * m], acc[2 * m + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm512_shuffle_f32x4(acc[2 * m], acc[2 * m + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    }
    for (int m = 0; m < 4; ++m) {
        s4[m] = _mm512_add_ps(_mm512_shuffle_f32x4(s8[2 * m], s8[2 * m + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm512_shuffle_f32x4(s8[2 * m], s8[2 * m + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    }
    for (int m = 0; m < 2; ++m) {
        s2[m] = _mm512_add_ps(_mm512_shuffle_ps(s4[2 * m], s4[2 * m + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm512_shuffle_ps(s4[2 * m], s4[2 * m + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    }
    __m512 s1 = _mm512_add_ps(_mm512_shuffle_ps(s2[0], s2[1], _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm512_shuffle_ps(s2[0], s2[1], _MM_SHUFFLE(3, 1, 3, 1)));
    /* lane 4b + j holds token b + 4j */
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_storeu_ps(out, _mm512_permutexvar_ps(order, s1));
}

static inline float v_reduce_max(V16 v) { return _mm512_reduce_max_ps(v); }

/* row[0 .. 31] (accumulate ? += : =) 32 columns from the two halves that pairing bf16 rows with
 * vpunpck{l,h}wd leaves them in (the native paths' P.V): lane k of `lo` holds column 8 (k / 4) + k % 4, lane k of
 * `hi` column 8 (k / 4) + 4 + k % 4. */
static inline void v_store_unpacked(float *row, V16 lo, V16 hi, int accumulate) {
    const __m512i first = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    const __m512i second = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
    V16 x0 = _mm512_permutex2var_ps(lo, first, hi), x1 = _mm512_permutex2var_ps(lo, second, hi);
    if (accumulate) {
        x0 = _mm512_add_ps(_mm512_loadu_ps(row), x0);
        x1 = _mm512_add_ps(_mm512_loadu_ps(row + PA_LANES), x1);
    }
    _mm512_storeu_ps(row, x0);
    _mm512_storeu_ps(row + PA_LANES, x1);
}

#endif /* PA_MOCK_AVX512_PRIMS_H */
