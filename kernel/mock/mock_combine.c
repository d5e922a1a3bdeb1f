/*
 * The split-KV combine of the mock device (docs/CONTRACT.md, "Split-KV combine"), run only after every
 * partial of every core (the kernel's global vector barrier): per (former schedule position -> slot, row = token x
 * heads + head), the m_split normalised partial rows of o_core are weighted by exp(lse_i - LSE) and written once,
 * in OUT dtype, to o.  A sequence with no split (length 0) gets a zero row; the tail pass's (ABI v6) are written
 * whole by their tasks.
 */
#include <math.h>
#include <string.h>

#include "mock_internal.h"

int32_t pa_run_core_combine(const pa_launch *L, uint32_t core, pa_mock_error *e) {
    const uint64_t rows = (uint64_t)L->c.q_len * L->c.num_heads, cn = L->c.kv_core_num;
    const uint64_t total = (uint64_t)L->c.former_batch * rows; /* the tail pass's sequences are written whole */
    const int64_t d = L->c.head_dim;
    float lse[PA_COMBINE_UB_FLOATS];
    float acc[PA_MOCK_MAX_ROW_DIM];
    for (uint64_t process = core; process < total; process += L->c.block_dim) {
        uint32_t slot = pa_gather(L, (uint32_t)(process / rows));
        uint64_t row = process % rows; /* token x num_heads + head */
        pa_where w = {(int32_t)core, (int32_t)slot, (int32_t)(row % L->c.num_heads), PA_NONE};
        uint32_t kv_len = pa_slot_word(L, slot, PA_BF_KV_SEQLEN);
        uint32_t m_split = kv_len ? pa_splits_of(L, kv_len) : 0;
        int32_t rc;
        if (m_split == 0) {
            if ((rc = pa_write_row(L, slot, row, 0, 0.0f, 0.0f, w, e))) {
                return rc;
            }
            continue;
        }
        uint32_t l_off = (uint32_t)(pa_slot_pair(L, slot, PA_BF_ADDR_L_HI, PA_BF_ADDR_L_LO) + row * cn);
        __int128 oc_off = (__int128)pa_slot_pair(L, slot, PA_BF_ADDR_OFD_HI, PA_BF_ADDR_OFD_LO) * cn +
                          (__int128)row * cn * d;
        if ((rc = pa_check_range(L, e, PA_ARG_L, l_off, m_split, w)) ||
            (rc = pa_check_range(L, e, PA_ARG_O_CORE, oc_off, (__int128)m_split * d, w))) {
            return rc;
        }
        float m = -INFINITY; /* a split holding none of the row's keys has lse -inf: weight 0 */
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
        const float *partials = L->o_core + (int64_t)oc_off;
        for (uint32_t i = 0; i < m_split; ++i) {
            float weight = pa_expf(lse[i] - lse_all);
            for (int64_t c = 0; c < d; ++c) {
                acc[c] = acc[c] + weight * partials[(int64_t)i * d + c];
            }
        }
        /* acc is normalised (gl 1 at lse_all): the sink, if any, joins as in an unsplit row */
        if ((rc = pa_write_row(L, slot, row, acc, 1.0f, lse_all, w, e))) {
            return rc;
        }
    }
    return PA_OK;
}
