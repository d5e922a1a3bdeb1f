/*
 * The native BF16 path of the mock's arithmetic (AVX512-BF16): Q.K and P.V of bf16 launches as VDPBF16PS dot
 * products of bf16 pairs into fp32 lanes, with no widening of K and V.  Everything else, and every fp16 launch
 * (this CPU family has no fp16 dot product into fp32: F16C's widening feeding fp32 FMAs is fp16's native path),
 * is the AVX-512 path's code.
 *
 * Not bit-identical with the exact paths: each lane adds its products in pairs (token or dimension 2i, 2i+1),
 * and VDPBF16PS treats bf16 subnormal inputs as zero.  Products of two bf16 values are exact in fp32, so the
 * result is as accurate as the exact paths' (fp32 sums of exact products, in another order): it is tested
 * against the float64 golden, not against their bits.
 */
#include "mock_math.h"

#if defined(__x86_64__)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")
#include "mock_avx512_prims.h"

static void bf16_qk(const float *q, int32_t rows, int32_t d, const uint16_t *k, int64_t k_stride, int32_t ntok,
                    float *s, int32_t s_stride, int bf16, const uint16_t *const *pf);
static void bf16_pv(const float *pf, int32_t p_stride, int32_t rows, const uint16_t *v, int64_t v_stride,
                    int32_t ntok, int32_t d, float *o, int32_t o_stride, int accumulate, int bf16,
                    const uint16_t *const *vpf);

#define PA_SIMD_QK_ENTRY bf16_qk
#define PA_SIMD_PV_ENTRY bf16_pv
#define PA_SIMD_TABLE pa_math_avx512bf16
#define PA_SIMD_NAME "avx512bf16"
#include "mock_simd_body.h"

#define PA_BF16_STEP 32    /* bf16 values of one zmm: 16 pairs                                                    */
#define PA_NQ_ROWS 4       /* Q.K rows per block (PA_QK_BLOCK / rows tokens)                                     */
#define PA_NP_ROWS 4       /* P.V rows per block                                                                 */
#define PA_NP_CHUNKS 2     /* P.V chunks of 32 columns per block (their P pairs broadcast once)                  */
#define PA_NP_TOKENS 64    /* P.V tokens whose P pairs are packed at once                                        */
#define PA_MAX_D PA_MLA_LATENT_DIM /* the widest q row of any launch                                   */

/* fp32 values that are bf16 values (widened from bf16) back to their bf16 bits, by the paths' own rounding (exact
 * here). */
static void to_bf16(const float *src, int32_t n, uint16_t *dst) {
    int32_t i = 0;
    for (; i + PA_LANES <= n; i += PA_LANES) {
        v_narrow_store(dst + i, v_loadu(src + i), 1);
    }
    for (; i < n; ++i) {
        dst[i] = pa_narrow(src[i], 1);
    }
}

/* TB tokens x HB rows of S (TB * HB = PA_QK_BLOCK accumulators over d in steps of 32), reduced by the fixed tree.
 * The accumulators are row-major, as store_block_sums takes them. */
static inline __attribute__((always_inline)) void bf16_qk_block(const uint16_t *qb, int32_t d, const uint16_t *k,
                                                                int64_t k_stride, float *s, int32_t s_stride,
                                                                const int tb, const int hb, int nt,
                                                                const uint16_t *const *pf) {
    if (pf) {
        for (int t = 0; t < tb && t < nt; ++t) {
            pa_prefetch_row(pf[t], d);
        }
    }
    __m512 acc[PA_QK_BLOCK];
    float sums[PA_QK_BLOCK] __attribute__((aligned(PA_SIMD_ALIGN)));
    for (int i = 0; i < PA_QK_BLOCK; ++i) {
        acc[i] = _mm512_setzero_ps();
    }
    for (int32_t c = 0; c < d; c += PA_BF16_STEP) {
        __m512bh qc[PA_NQ_ROWS];
        for (int h = 0; h < hb; ++h) {
            qc[h] = (__m512bh)_mm512_loadu_si512((const void *)(qb + (int64_t)h * d + c));
        }
        for (int t = 0; t < tb; ++t) {
            if (t >= nt) {
                break;
            }
            __m512bh kc = (__m512bh)_mm512_loadu_si512((const void *)(k + (int64_t)t * k_stride + c));
            for (int h = 0; h < hb; ++h) {
                acc[h * tb + t] = _mm512_dpbf16_ps(acc[h * tb + t], kc, qc[h]);
            }
        }
    }
    v_reduce_add_block(acc, sums);
    store_block_sums(sums, s, s_stride, tb, hb, nt);
}

/* The blocks of HB rows over the tile's tokens; a full block gets a constant token count, so its loops unroll. */
static inline __attribute__((always_inline)) void bf16_qk_blocks(const uint16_t *qb, const int hb, int32_t d,
                                                                 const uint16_t *k, int64_t k_stride, int32_t ntok,
                                                                 float *s, int32_t s_stride,
                                                                 const uint16_t *const *pf) {
    const int tb = PA_QK_BLOCK / hb;
    for (int32_t j = 0; j < ntok; j += tb) {
        const uint16_t *const *at = pf ? pf + j : 0;
        if (ntok - j >= tb) {
            bf16_qk_block(qb, d, k + (int64_t)j * k_stride, k_stride, s + j, s_stride, tb, hb, tb, at);
        } else {
            bf16_qk_block(qb, d, k + (int64_t)j * k_stride, k_stride, s + j, s_stride, tb, hb, ntok - j, at);
        }
    }
}

static void bf16_qk_rows(const uint16_t *qb, int hb, int32_t d, const uint16_t *k, int64_t k_stride, int32_t ntok,
                         float *s, int32_t s_stride, const uint16_t *const *pf) {
    if (hb == PA_NQ_ROWS) {
        bf16_qk_blocks(qb, PA_NQ_ROWS, d, k, k_stride, ntok, s, s_stride, pf);
    } else if (hb == 2) {
        bf16_qk_blocks(qb, 2, d, k, k_stride, ntok, s, s_stride, pf);
    } else {
        bf16_qk_blocks(qb, 1, d, k, k_stride, ntok, s, s_stride, pf);
    }
}

static void bf16_qk(const float *q, int32_t rows, int32_t d, const uint16_t *k, int64_t k_stride, int32_t ntok,
                    float *s, int32_t s_stride, int bf16, const uint16_t *const *pf) {
    if (!bf16 || d % PA_BF16_STEP != 0 || d > PA_MAX_D) {
        simd_qk(q, rows, d, k, k_stride, ntok, s, s_stride, bf16, pf);
        return;
    }
    uint16_t qb[PA_NQ_ROWS * PA_MAX_D] __attribute__((aligned(PA_SIMD_ALIGN)));
    for (int32_t r = 0; r < rows;) {
        const int hb = rows - r >= PA_NQ_ROWS ? PA_NQ_ROWS : rows - r >= 2 ? 2 : 1;
        to_bf16(q + (int64_t)r * d, hb * d, qb);
        bf16_qk_rows(qb, hb, d, k, k_stride, ntok, s + (int64_t)r * s_stride, s_stride, r ? 0 : pf);
        r += hb;
    }
}

/* o[r][c0 .. c0 + 32 NC - 1] (accumulate ? += : =) sum over tokens of p[r][j] v[j][c]: token pairs (j, j + 1) as
 * bf16 pairs (V rows interleaved by unpack, P pairs broadcast once for the NC chunks); v_store_unpacked puts the
 * columns back in order. */
static inline __attribute__((always_inline)) void bf16_pv_block(const uint32_t *pp, int32_t pp_stride, const int nr,
                                                                const uint16_t *v, int64_t v_stride, int32_t ntok,
                                                                int32_t c0, const int nc, float *o, int32_t o_stride,
                                                                int accumulate, const uint16_t *const *vpf,
                                                                int32_t d) {
    __m512 lo_acc[PA_NP_ROWS][PA_NP_CHUNKS], hi_acc[PA_NP_ROWS][PA_NP_CHUNKS];
    for (int r = 0; r < nr; ++r) {
        for (int c = 0; c < nc; ++c) {
            lo_acc[r][c] = _mm512_setzero_ps();
            hi_acc[r][c] = _mm512_setzero_ps();
        }
    }
    for (int32_t j = 0; j < ntok; j += 2) {
        if (vpf) {
            pa_prefetch_row(vpf[j], d);
            pa_prefetch_row(j + 1 < ntok ? vpf[j + 1] : 0, d);
        }
        __m512bh lo[PA_NP_CHUNKS], hi[PA_NP_CHUNKS];
        for (int c = 0; c < nc; ++c) {
            const uint16_t *at = v + (int64_t)j * v_stride + c0 + c * PA_BF16_STEP;
            __m512i a = _mm512_loadu_si512((const void *)at);
            __m512i b = j + 1 < ntok ? _mm512_loadu_si512((const void *)(at + v_stride)) : _mm512_setzero_si512();
            lo[c] = (__m512bh)_mm512_unpacklo_epi16(a, b);
            hi[c] = (__m512bh)_mm512_unpackhi_epi16(a, b);
        }
        for (int r = 0; r < nr; ++r) {
            __m512bh pr = (__m512bh)_mm512_set1_epi32((int)pp[(int64_t)r * pp_stride + j / 2]);
            for (int c = 0; c < nc; ++c) {
                lo_acc[r][c] = _mm512_dpbf16_ps(lo_acc[r][c], lo[c], pr);
                hi_acc[r][c] = _mm512_dpbf16_ps(hi_acc[r][c], hi[c], pr);
            }
        }
    }
    for (int r = 0; r < nr; ++r) {
        for (int c = 0; c < nc; ++c) {
            v_store_unpacked(o + (int64_t)r * o_stride + c0 + c * PA_BF16_STEP, lo_acc[r][c], hi_acc[r][c],
                             accumulate);
        }
    }
}

/* The row block's columns, PA_NP_CHUNKS chunks at a time; the first block prefetches the next tile's rows. */
static inline __attribute__((always_inline)) void bf16_pv_span(const uint32_t *pp, int32_t pp_stride, const int nr,
                                                               const uint16_t *v, int64_t v_stride, int32_t ntok,
                                                               int32_t d, float *o, int32_t o_stride, int accumulate,
                                                               const uint16_t *const *vpf) {
    for (int32_t c0 = 0; c0 < d;) {
        const uint16_t *const *at = c0 ? 0 : vpf;
        if (c0 + PA_NP_CHUNKS * PA_BF16_STEP <= d) {
            bf16_pv_block(pp, pp_stride, nr, v, v_stride, ntok, c0, PA_NP_CHUNKS, o, o_stride, accumulate, at, d);
            c0 += PA_NP_CHUNKS * PA_BF16_STEP;
        } else {
            bf16_pv_block(pp, pp_stride, nr, v, v_stride, ntok, c0, 1, o, o_stride, accumulate, at, d);
            c0 += PA_BF16_STEP;
        }
    }
}

static void bf16_pv(const float *pf, int32_t p_stride, int32_t rows, const uint16_t *v, int64_t v_stride,
                    int32_t ntok, int32_t d, float *o, int32_t o_stride, int accumulate, int bf16,
                    const uint16_t *const *vpf) {
    if (!bf16 || d % PA_BF16_STEP != 0) {
        simd_pv(pf, p_stride, rows, v, v_stride, ntok, d, o, o_stride, accumulate, bf16, vpf);
        return;
    }
    /* P of PA_NP_ROWS rows x PA_NP_TOKENS tokens as bf16 pairs (an odd count ends in a zero partner) */
    uint32_t pp[PA_NP_ROWS * (PA_NP_TOKENS / 2 + 1)] __attribute__((aligned(PA_SIMD_ALIGN)));
    const int32_t pp_stride = PA_NP_TOKENS / 2 + 1;
    for (int32_t j0 = 0; j0 < ntok; j0 += PA_NP_TOKENS) {
        const int32_t n = ntok - j0 < PA_NP_TOKENS ? ntok - j0 : PA_NP_TOKENS;
        for (int32_t r0 = 0; r0 < rows; r0 += PA_NP_ROWS) {
            const int nr = rows - r0 < PA_NP_ROWS ? rows - r0 : PA_NP_ROWS;
            for (int r = 0; r < nr; ++r) {
                uint16_t *dst = (uint16_t *)(pp + (int64_t)r * pp_stride);
                to_bf16(pf + (int64_t)(r0 + r) * p_stride + j0, n, dst);
                if (n & 1) {
                    dst[n] = 0; /* the partner of an odd last token */
                }
            }
            const uint16_t *const *at = (r0 || !vpf) ? 0 : vpf + j0;
            if (nr == PA_NP_ROWS) { /* a constant row count keeps the accumulators in registers */
                bf16_pv_span(pp, pp_stride, PA_NP_ROWS, v + (int64_t)j0 * v_stride, v_stride, n, d,
                             o + (int64_t)r0 * o_stride, o_stride, accumulate || j0 > 0, at);
            } else {
                bf16_pv_span(pp, pp_stride, nr, v + (int64_t)j0 * v_stride, v_stride, n, d,
                             o + (int64_t)r0 * o_stride, o_stride, accumulate || j0 > 0, at);
            }
        }
    }
}

#endif /* __x86_64__ */
