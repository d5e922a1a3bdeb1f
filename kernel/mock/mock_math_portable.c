/*
 * The portable path of the mock's arithmetic: plain C in the canonical operation order of mock_math.h.
 * It runs on any host (aarch64 Ascend servers too) and is the reference the SIMD paths must match bit for bit.
 */
#include <math.h>

#include "mock_math.h"
#include "pa_kernel_abi.h"

static void widen(const uint16_t *src, int64_t n, float *dst, int bf16) {
    for (int64_t i = 0; i < n; ++i) {
        dst[i] = pa_widen(src[i], bf16);
    }
}

static void qk(const float *q, int32_t rows, int32_t d, const uint16_t *k, int64_t k_stride, int32_t ntok,
               float *s, int32_t s_stride, int bf16, const uint16_t *const *pf) {
    float kf[PA_MLA_LATENT_DIM]; /* the widest K row: MLA's latent (GQA heads are at most PA_MAX_HEAD_DIM) */
    for (int32_t j = 0; j < ntok; ++j) {
        pa_prefetch_row(pf ? pf[j] : 0, d);
        widen(k + (int64_t)j * k_stride, d, kf, bf16);
        for (int32_t r = 0; r < rows; ++r) {
            const float *qr = q + (int64_t)r * d;
            float lane[PA_LANES] = {0};
            int32_t c = 0;
            for (; c + PA_LANES <= d; c += PA_LANES) { /* vectorisable: one 16-lane step */
                for (int32_t l = 0; l < PA_LANES; ++l) {
                    lane[l] = lane[l] + qr[c + l] * kf[c + l];
                }
            }
            for (; c < d; ++c) {
                lane[c % PA_LANES] = lane[c % PA_LANES] + qr[c] * kf[c];
            }
            s[(int64_t)r * s_stride + j] = pa_reduce_lanes(lane);
        }
    }
}

static void softmax_row(const float *s, int32_t n, int32_t n_round, float tor, int first, float gm_old,
                        uint16_t *p, float *m_out, float *ll_out, int bf16) {
    float m = first ? -INFINITY : gm_old;
    for (int32_t j = 0; j < n; ++j) {
        float x = s[j] * tor;
        m = (x > m) ? x : m;
    }
    float lane[PA_LANES] = {0};
    for (int32_t j = 0; j < n; ++j) {
        float e = pa_expf(s[j] * tor - m);
        lane[j % PA_LANES] = lane[j % PA_LANES] + e;
        p[j] = pa_narrow(e, bf16);
    }
    for (int32_t j = n; j < n_round; ++j) {
        p[j] = 0;
    }
    *m_out = m;
    *ll_out = pa_reduce_lanes(lane);
}

static void pv(const float *pf, int32_t p_stride, int32_t rows, const uint16_t *v, int64_t v_stride,
               int32_t ntok, int32_t d, float *o, int32_t o_stride, int accumulate, int bf16,
               const uint16_t *const *vpf) {
    float vf[PA_MLA_LATENT_DIM];
    if (!accumulate) {
        for (int32_t r = 0; r < rows; ++r) {
            for (int32_t c = 0; c < d; ++c) {
                o[(int64_t)r * o_stride + c] = 0.0f;
            }
        }
    }
    for (int32_t j = 0; j < ntok; ++j) {
        pa_prefetch_row(vpf ? vpf[j] : 0, d);
        widen(v + (int64_t)j * v_stride, d, vf, bf16);
        for (int32_t r = 0; r < rows; ++r) {
            float pj = pf[(int64_t)r * p_stride + j];
            float *orow = o + (int64_t)r * o_stride;
            for (int32_t c = 0; c < d; ++c) {
                orow[c] = orow[c] + pj * vf[c];
            }
        }
    }
}

static void rescale(float *go, const float *o_tile, float e, int32_t d, int first) {
    for (int32_t c = 0; c < d; ++c) {
        go[c] = first ? o_tile[c] : e * go[c] + o_tile[c];
    }
}

static void store_row(const float *go, float gl, int32_t d, uint16_t *out, int bf16) {
    for (int32_t c = 0; c < d; ++c) {
        out[c] = pa_narrow(go[c] / gl, bf16);
    }
}

const pa_math_ops pa_math_portable = {
    .name = "portable",
    .widen = widen,
    .qk = qk,
    .softmax_row = softmax_row,
    .pv = pv,
    .rescale = rescale,
    .store_row = store_row,
};
