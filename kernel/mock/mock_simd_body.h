/*
 * The SIMD arithmetic of the mock, written once over a 16-lane vector type V16 and included by each SIMD
 * path (mock_math_avx2.c, mock_math_avx512.c) after it has defined V16 and its primitives:
 *   v_zero v_set1 v_loadu v_storeu v_add v_sub v_mul v_div v_fma(a,b,c)=a*b+c v_max v_min(a,b)=(a<b)?a:b
 *   v_widen(const uint16_t *, bf16) v_narrow_store(uint16_t *, V16, bf16) v_reduce_add (the fixed tree)
 *   v_reduce_max v_round (nearest even) v_pow2i (2^n of an integral V16) v_zero_below(res, x, threshold)
 * v_reduce_add_block (PA_QK_BLOCK vectors, each by the fixed tree), PA_QK_BLOCK and PA_QK_WIDE_ROWS (Q.K
 * accumulators = rows x tokens, and the widest row count),
 * PA_PV_ROWS x PA_PV_CHUNKS (P.V accumulator block) and PA_SIMD_ALIGN.
 * It defines the pa_math_ops table PA_SIMD_TABLE named PA_SIMD_NAME (Q.K and P.V: PA_SIMD_QK_ENTRY and
 * PA_SIMD_PV_ENTRY when the path defines them, else the ones below).  Heads whose dimension is not a
 * multiple of PA_LANES take the portable path, which computes the same values.
 */
#ifndef PA_SIMD_TABLE
#error "define V16, its primitives and PA_SIMD_TABLE before including mock_simd_body.h"
#endif

#define PA_INLINE static inline __attribute__((always_inline))
#define PA_QK_PAIR_ROWS 2 /* the row block between PA_QK_WIDE_ROWS and single rows                        */

PA_INLINE V16 v_exp(V16 x) {
    x = v_min(v_set1(PA_EXP_HI), x);
    V16 n = v_round(v_mul(x, v_set1(PA_LOG2E)));
    V16 r = v_sub(x, v_mul(n, v_set1(PA_EXP_C1)));
    r = v_sub(r, v_mul(n, v_set1(PA_EXP_C2)));
    V16 z = v_mul(r, r);
    V16 y = v_set1(PA_EXP_P0);
    y = v_add(v_mul(y, r), v_set1(PA_EXP_P1));
    y = v_add(v_mul(y, r), v_set1(PA_EXP_P2));
    y = v_add(v_mul(y, r), v_set1(PA_EXP_P3));
    y = v_add(v_mul(y, r), v_set1(PA_EXP_P4));
    y = v_add(v_mul(y, r), v_set1(PA_EXP_P5));
    y = v_add(v_mul(y, z), r);
    y = v_add(y, v_set1(1.0f));
    return v_zero_below(v_mul(y, v_pow2i(n)), x, PA_EXP_LO);
}

static void simd_widen(const uint16_t *src, int64_t n, float *dst, int bf16) {
    int64_t i = 0;
    for (; i + PA_LANES <= n; i += PA_LANES) {
        v_storeu(dst + i, v_widen(src + i, bf16));
    }
    for (; i < n; ++i) {
        dst[i] = pa_widen(src[i], bf16);
    }
}

/* A Q.K block's reduced sums (row-major: HB rows of TB tokens side by side) into S, each row's tokens below `nt`
 * stored as one run. */
PA_INLINE void store_block_sums(const float *sums, float *s, int32_t s_stride, const int tb, const int hb, int nt) {
    for (int h = 0; h < hb; ++h) {
        if (nt >= tb) { /* a full block: a constant count, so the run is stored as one vector */
            for (int t = 0; t < tb; ++t) {
                s[(int64_t)h * s_stride + t] = sums[h * tb + t];
            }
        } else {
            for (int t = 0; t < nt; ++t) {
                s[(int64_t)h * s_stride + t] = sums[h * tb + t];
            }
        }
    }
}

/* Q.K for TB tokens x HB q rows (TB * HB = PA_QK_BLOCK independent 16-lane accumulations over d in ascending
 * order, each K chunk widened once for the HB rows), reduced together by the fixed tree.  Tokens at or past
 * `nt` contribute nothing and are not stored. */
PA_INLINE void qk_block(const float *q, int32_t d, const uint16_t *k, int64_t k_stride, float *s, int32_t s_stride,
                        const int tb, const int hb, int nt, int bf16, const uint16_t *const *pf) {
    if (pf) {
        for (int t = 0; t < tb && t < nt; ++t) {
            pa_prefetch_row(pf[t], d);
        }
    }
    V16 acc[PA_QK_BLOCK];
    float sums[PA_QK_BLOCK] __attribute__((aligned(PA_SIMD_ALIGN)));
    for (int i = 0; i < PA_QK_BLOCK; ++i) {
        acc[i] = v_zero();
    }
    for (int32_t c = 0; c < d; c += PA_LANES) {
        V16 qc[PA_QK_WIDE_ROWS];
        for (int h = 0; h < hb; ++h) {
            qc[h] = v_loadu(q + (int64_t)h * d + c);
        }
        for (int t = 0; t < tb; ++t) {
            if (t >= nt) {
                break;
            }
            V16 kc = v_widen(k + (int64_t)t * k_stride + c, bf16);
            for (int h = 0; h < hb; ++h) {
                acc[h * tb + t] = v_fma(qc[h], kc, acc[h * tb + t]);
            }
        }
    }
    v_reduce_add_block(acc, sums);
    store_block_sums(sums, s, s_stride, tb, hb, nt);
}

static inline const uint16_t *const *pf_at(const uint16_t *const *pf, int32_t j) {
    return pf ? pf + j : 0;
}

/* The first row block prefetches the next tile's rows, the others find them requested already. */
#define PA_QK_CALL(HB)                                                                                        \
    for (int32_t j = 0; j < ntok; j += PA_QK_BLOCK / (HB)) {                                                  \
        int nt = ntok - j;                                                                                    \
        if (nt >= PA_QK_BLOCK / (HB)) {                                                                       \
            qk_block(q + (int64_t)r * d, d, k + (int64_t)j * k_stride, k_stride, s + (int64_t)r * s_stride + j, \
                     s_stride, PA_QK_BLOCK / (HB), HB, PA_QK_BLOCK / (HB), bf16, r ? 0 : pf_at(pf, j)); \
        } else {                                                                                              \
            qk_block(q + (int64_t)r * d, d, k + (int64_t)j * k_stride, k_stride, s + (int64_t)r * s_stride + j, \
                     s_stride, PA_QK_BLOCK / (HB), HB, nt, bf16, r ? 0 : pf_at(pf, j));             \
        }                                                                                                     \
    }

/* Unused on a path whose own Q.K replaces it without falling back to it (mock_math_avx2.c). */
__attribute__((unused)) static void simd_qk(const float *q, int32_t rows, int32_t d, const uint16_t *k,
                                            int64_t k_stride, int32_t ntok, float *s, int32_t s_stride, int bf16,
                                            const uint16_t *const *pf) {
    if (d % PA_LANES != 0) {
        pa_math_portable.qk(q, rows, d, k, k_stride, ntok, s, s_stride, bf16, pf);
        return;
    }
    int32_t r = 0;
    for (; r + PA_QK_WIDE_ROWS <= rows; r += PA_QK_WIDE_ROWS) {
        PA_QK_CALL(PA_QK_WIDE_ROWS)
    }
    for (; r + PA_QK_PAIR_ROWS <= rows; r += PA_QK_PAIR_ROWS) {
        PA_QK_CALL(PA_QK_PAIR_ROWS)
    }
    for (; r < rows; ++r) {
        PA_QK_CALL(1)
    }
}

static void simd_softmax_row(const float *s, int32_t n, int32_t n_round, float tor, int first, float gm_old,
                             uint16_t *p, float *m_out, float *ll_out, int bf16) {
    V16 vt = v_set1(tor);
    V16 vmax = v_set1(-INFINITY);
    int32_t j = 0;
    for (; j + PA_LANES <= n; j += PA_LANES) {
        vmax = v_max(v_mul(v_loadu(s + j), vt), vmax);
    }
    float m = v_reduce_max(vmax);
    for (; j < n; ++j) {
        float x = s[j] * tor;
        m = (x > m) ? x : m;
    }
    if (!first) {
        m = (m > gm_old) ? m : gm_old;
    }
    V16 vm = v_set1(m);
    V16 sum = v_zero();
    for (j = 0; j + PA_LANES <= n; j += PA_LANES) {
        V16 e = v_exp(v_sub(v_mul(v_loadu(s + j), vt), vm));
        sum = v_add(sum, e);
        v_narrow_store(p + j, e, bf16);
    }
    if (j < n) {
        float tail[PA_LANES] = {0};
        int32_t rem = n - j;
        for (int32_t i = 0; i < rem; ++i) {
            tail[i] = s[j + i];
        }
        v_storeu(tail, v_exp(v_sub(v_mul(v_loadu(tail), vt), vm)));
        for (int32_t i = rem; i < PA_LANES; ++i) {
            tail[i] = 0.0f;
        }
        sum = v_add(sum, v_loadu(tail));
        for (int32_t i = 0; i < rem; ++i) {
            p[j + i] = pa_narrow(tail[i], bf16);
        }
        j = n;
    }
    for (; j < n_round; ++j) {
        p[j] = 0;
    }
    *m_out = m;
    *ll_out = v_reduce_add(sum);
}

/* NR rows x NC 16-lane chunks of O accumulated over the tile's tokens, token by token. */
PA_INLINE void pv_block(const float *pf, int32_t p_stride, const int nr, const uint16_t *v, int64_t v_stride,
                        int32_t ntok, const int nc, float *o, int32_t o_stride, int accumulate, int bf16,
                        const uint16_t *const *vpf, int32_t d) {
    V16 acc[PA_PV_ROWS][PA_PV_CHUNKS];
    for (int r = 0; r < nr; ++r) {
        for (int c = 0; c < nc; ++c) {
            acc[r][c] = accumulate ? v_loadu(o + (int64_t)r * o_stride + c * PA_LANES) : v_zero();
        }
    }
    for (int32_t j = 0; j < ntok; ++j) {
        if (vpf) {
            pa_prefetch_row(vpf[j], d);
        }
        V16 vc[PA_PV_CHUNKS];
        for (int c = 0; c < nc; ++c) {
            vc[c] = v_widen(v + (int64_t)j * v_stride + c * PA_LANES, bf16);
        }
        for (int r = 0; r < nr; ++r) {
            V16 pb = v_set1(pf[(int64_t)r * p_stride + j]);
            for (int c = 0; c < nc; ++c) {
                acc[r][c] = v_fma(pb, vc[c], acc[r][c]);
            }
        }
    }
    for (int r = 0; r < nr; ++r) {
        for (int c = 0; c < nc; ++c) {
            v_storeu(o + (int64_t)r * o_stride + c * PA_LANES, acc[r][c]);
        }
    }
}

#define PA_PV_CALL(NR, NC)                                                                                    \
    pv_block(pf + (int64_t)r * p_stride, p_stride, NR, v + c * PA_LANES, v_stride, ntok, NC,                  \
             o + (int64_t)r * o_stride + c * PA_LANES, o_stride, accumulate, bf16, (r || c) ? 0 : vpf, d)

/* P.V of a head dimension that is a multiple of PA_LANES.  Inline, so that a path can call it with a constant
 * `bf16` and the widening's dtype test leaves the token loop (mock_math_avx2.c). */
PA_INLINE void simd_pv_tile(const float *pf, int32_t p_stride, int32_t rows, const uint16_t *v, int64_t v_stride,
                            int32_t ntok, int32_t d, float *o, int32_t o_stride, int accumulate, int bf16,
                            const uint16_t *const *vpf) {
    const int32_t chunks = d / PA_LANES;
    for (int32_t r = 0; r < rows;) {
        int full_rows = r + PA_PV_ROWS <= rows;
        for (int32_t c = 0; c < chunks;) {
            int full_chunks = c + PA_PV_CHUNKS <= chunks;
            if (full_rows && full_chunks) {
                PA_PV_CALL(PA_PV_ROWS, PA_PV_CHUNKS);
            } else if (full_rows) {
                PA_PV_CALL(PA_PV_ROWS, 1);
            } else if (full_chunks) {
                PA_PV_CALL(1, PA_PV_CHUNKS);
            } else {
                PA_PV_CALL(1, 1);
            }
            c += full_chunks ? PA_PV_CHUNKS : 1;
        }
        r += full_rows ? PA_PV_ROWS : 1;
    }
}

/* Unused on a path whose own P.V replaces it without falling back to it (mock_math_avx2.c). */
__attribute__((unused)) static void simd_pv(const float *pf, int32_t p_stride, int32_t rows, const uint16_t *v,
                                            int64_t v_stride, int32_t ntok, int32_t d, float *o, int32_t o_stride,
                                            int accumulate, int bf16, const uint16_t *const *vpf) {
    if (d % PA_LANES != 0) {
        pa_math_portable.pv(pf, p_stride, rows, v, v_stride, ntok, d, o, o_stride, accumulate, bf16, vpf);
        return;
    }
    simd_pv_tile(pf, p_stride, rows, v, v_stride, ntok, d, o, o_stride, accumulate, bf16, vpf);
}

static void simd_rescale(float *go, const float *o_tile, float e, int32_t d, int first) {
    int32_t c = 0;
    V16 ve = v_set1(e);
    for (; c + PA_LANES <= d; c += PA_LANES) {
        V16 t = v_loadu(o_tile + c);
        v_storeu(go + c, first ? t : v_add(v_mul(ve, v_loadu(go + c)), t));
    }
    for (; c < d; ++c) {
        go[c] = first ? o_tile[c] : e * go[c] + o_tile[c];
    }
}

static void simd_store_row(const float *go, float gl, int32_t d, uint16_t *out, int bf16) {
    int32_t c = 0;
    V16 vl = v_set1(gl);
    for (; c + PA_LANES <= d; c += PA_LANES) {
        v_narrow_store(out + c, v_div(v_loadu(go + c), vl), bf16);
    }
    for (; c < d; ++c) {
        out[c] = pa_narrow(go[c] / gl, bf16);
    }
}

/* A path may replace Q.K and P.V with its own (mock_math_avx512bf16.c, mock_math_amx.c), keeping these as its
 * fallbacks. */
#ifndef PA_SIMD_QK_ENTRY
#define PA_SIMD_QK_ENTRY simd_qk
#endif
#ifndef PA_SIMD_PV_ENTRY
#define PA_SIMD_PV_ENTRY simd_pv
#endif
#ifndef PA_SIMD_PACK_Q /* a path with its own packed-q Q.K (mock_math_amx.c) */
#define PA_SIMD_PACK_Q 0
#define PA_SIMD_QK_PACKED 0
#endif

const pa_math_ops PA_SIMD_TABLE = {
    .name = PA_SIMD_NAME,
    .widen = simd_widen,
    .qk = PA_SIMD_QK_ENTRY,
    .softmax_row = simd_softmax_row,
    .pv = PA_SIMD_PV_ENTRY,
    .pack_q = PA_SIMD_PACK_Q,
    .qk_packed = PA_SIMD_QK_PACKED,
    .rescale = simd_rescale,
    .store_row = simd_store_row,
};
