/*
 * The split-KV combine of the mock device (docs/CONTRACT.md, "Split-KV combine"), run only after every
 * partial of every core (the kernel's global vector barrier): per (schedule position -> slot, head), the m_split normalised partial
 * rows of o_core are weighted by exp(lse_i - LSE) and written once, in OUT dtype, to o.  A sequence with no
 * split (length 0) gets a zero row.
 */
#include <math.h>
#include <string.h>

#include "mock_internal.h"

int32_t pa_run_core_combine(const pa_launch *L, uint32_t core, pa_mock_error *e) {
    const uint64_t hq = L->c.num_heads, cn = L->c.kv_core_num, total = (uint64_t)L->c.batch * hq;
    const int64_t d = L->c.head_dim;
    float lse[PA_COMBINE_UB_FLOATS];
    float acc[PA_MAX_HEAD_DIM];
    for (uint64_t process = core; process < total; process += L->c.block_dim) {
        uint32_t slot = pa_gather(L, (uint32_t)(process / hq));
        uint32_t head = (uint32_t)(process % hq);
        pa_where w = {(int32_t)core, (int32_t)slot, (int32_t)head, PA_NONE};
        uint32_t kv_len = pa_slot_word(L, slot, PA_BF_KV_SEQLEN);
        uint32_t m_split = kv_len ? pa_splits_of(L, kv_len) : 0;
        int64_t o_off = (int64_t)pa_slot_pair(L, slot, PA_BF_ADDR_O_HI, PA_BF_ADDR_O_LO) + (int64_t)head * d;
        int32_t rc = pa_check_range(L, e, PA_ARG_O, o_off, d, w);
        if (rc) {
            return rc;
        }
        if (m_split == 0) {
            memset(L->o + o_off, 0, (size_t)d * PA_HALF_BYTES);
            continue;
        }
        uint32_t l_off = (uint32_t)(pa_slot_pair(L, slot, PA_BF_ADDR_L_HI, PA_BF_ADDR_L_LO) + (uint64_t)head * cn);
        __int128 oc_off = (__int128)pa_slot_pair(L, slot, PA_BF_ADDR_OFD_HI, PA_BF_ADDR_OFD_LO) * cn +
                          (__int128)head * cn * d;
        if ((rc = pa_check_range(L, e, PA_ARG_L, l_off, m_split, w)) ||
            (rc = pa_check_range(L, e, PA_ARG_O_CORE, oc_off, (__int128)m_split * d, w))) {
            return rc;
        }
        float m = -INFINITY;
        for (uint32_t i = 0; i < m_split; ++i) {
            lse[i] = L->l[l_off + i];
            m = lse[i] > m ? lse[i] : m;
        }
        float sum = 0.0f;
        for (uint32_t i = 0; i < m_split; ++i) {
            sum = sum + pa_expf(lse[i] - m);
        }
        float lse_all = logf(sum) + m;
        for (int64_t c = 0; c < d; ++c) {
            acc[c] = 0.0f;
        }
        const float *rows = L->o_core + (int64_t)oc_off;
        for (uint32_t i = 0; i < m_split; ++i) {
            float weight = pa_expf(lse[i] - lse_all);
            for (int64_t c = 0; c < d; ++c) {
                acc[c] = acc[c] + weight * rows[(int64_t)i * d + c];
            }
        }
        L->ops->store_row(acc, 1.0f, (int32_t)d, L->o + o_off, L->c.bf16);
    }
    return PA_OK;
}
