/*
 * The mock's arithmetic, one table of functions per SIMD path (portable, AVX2+FMA+F16C, AVX-512, NEON on
 * aarch64, and the native AVX512-BF16 and AMX paths, whose own Q.K and P.V are described in
 * mock_math_avx512bf16.c and mock_math_amx.c).
 *
 * Every exact path computes the same values bit for bit:
 *  - dot products (Q.K) use 16 lanes: lane l accumulates elements d = l, l+16, ... in ascending order, then
 *    the lanes are reduced by the fixed tree (l + l+8), (l + l+4), (l + l+2), (l + l+1);
 *  - products of two fp16/bf16 values are exact in fp32, so a fused multiply-add equals multiply-then-add
 *    there (paths may use either); everywhere else multiply and add are separate roundings (no contraction:
 *    the build uses -ffp-contract=off);
 *  - row sums use the same 16-lane scheme over tokens; P.V accumulates token by token in ascending order;
 *  - exp is the polynomial of mock_scalar.h, evaluated with the same operations in every lane;
 *  - fp32 -> fp16 / bf16 rounding is round-to-nearest-even (as torch and the NPU's casts).
 */
#ifndef PA_MOCK_MATH_H
#define PA_MOCK_MATH_H

#include <stdint.h>

#include "mock_scalar.h"

#define PA_PREFETCH_LOCALITY 2 /* __builtin_prefetch: keep in the outer caches                            */
#define PA_LINE_BYTES 64
#define PA_IN_ELEM_BYTES 2 /* fp16 / bf16                                                                 */
#define PA_AMX_TILE_ROWS 16 /* rows of an AMX tile: q rows of a packed group (mock_math_amx.c)                */
#define PA_AMX_TILE_K 32    /* bf16 values of an AMX tile row: dims of a packed chunk                         */

/* Prefetch one K/V row of `d` IN-dtype values (no-op for NULL). */
static inline void pa_prefetch_row(const uint16_t *row, int32_t d) {
    if (row) {
        for (int32_t b = 0; b < d * PA_IN_ELEM_BYTES; b += PA_LINE_BYTES) {
            __builtin_prefetch((const char *)row + b, 0, PA_PREFETCH_LOCALITY);
        }
    }
}

typedef struct pa_math_ops {
    const char *name;
    /* fp32 copies of `n` IN-dtype values. */
    void (*widen)(const uint16_t *src, int64_t n, float *dst, int bf16);
    /* s[r * s_stride + j] = dot(q[r * d ..], k[j * k_stride ..]) for r < rows, j < ntok.  While at token j
     * it prefetches the row pf[j] (d values; NULL entries and a NULL pf are skipped). */
    void (*qk)(const float *q, int32_t rows, int32_t d, const uint16_t *k, int64_t k_stride, int32_t ntok,
               float *s, int32_t s_stride, int bf16, const uint16_t *const *pf);
    /* Vector stage 1 of one row of `n` scores: x = s * tor; m = max(x) (and gm_old unless first);
     * p[j] = IN(exp(x_j - m)) for j < n, p[j] = 0 for n <= j < n_round; *ll = lane sum of exp(x_j - m). */
    void (*softmax_row)(const float *s, int32_t n, int32_t n_round, float tor, int first, float gm_old,
                        uint16_t *p, float *m_out, float *ll_out, int bf16);
    /* o[r * o_stride + c] (accumulate ? += : =) sum_j pf[r * p_stride + j] * v[j * v_stride + c];
     * prefetches vpf[j] like qk. */
    void (*pv)(const float *pf, int32_t p_stride, int32_t rows, const uint16_t *v, int64_t v_stride,
               int32_t ntok, int32_t d, float *o, int32_t o_stride, int accumulate, int bf16,
               const uint16_t *const *vpf);
    /* Optional (NULL on the paths without it): a task's q rows packed for qk_packed.  Returns 0, packing
     * nothing, when the path would not use a packing for this launch (then qk serves it). */
    int (*pack_q)(const float *q, int32_t rows, int32_t d, int bf16, uint16_t *packed);
    /* Like qk, for rows [row0, row0 + rows) of a task whose q rows pack_q packed (bf16 launches only). */
    void (*qk_packed)(const uint16_t *packed, int32_t row0, int32_t rows, int32_t d, const uint16_t *k,
                      int64_t k_stride, int32_t ntok, float *s, int32_t s_stride, const uint16_t *const *pf);
    /* go = first ? o_tile : e * go + o_tile (separate multiply and add). */
    void (*rescale)(float *go, const float *o_tile, float e, int32_t d, int first);
    /* out[c] = IN(go[c] / gl). */
    void (*store_row)(const float *go, float gl, int32_t d, uint16_t *out, int bf16);
} pa_math_ops;

extern const pa_math_ops pa_math_portable;
#if defined(__x86_64__) || defined(__i386__)
extern const pa_math_ops pa_math_avx2;
extern const pa_math_ops pa_math_avx512;
extern const pa_math_ops pa_math_avx512bf16;
extern const pa_math_ops pa_math_amx;
#endif
#if defined(__aarch64__)
extern const pa_math_ops pa_math_neon;
#endif

/* The table for PA_MOCK_ISA_* `isa` (AUTO = best), or NULL if this CPU cannot run it. */
const pa_math_ops *pa_math_select(int32_t isa);
int32_t pa_math_best_isa(void);

#endif /* PA_MOCK_MATH_H */
