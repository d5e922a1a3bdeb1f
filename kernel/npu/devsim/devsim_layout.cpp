/*
 * The layout of pa_sim_stats (kernel/npu/pa_sim_api.h) as this library's compiler laid it out, so that the
 * host's ctypes mirror (launcher/sim_api.py) is checked against the library, not against a copy.
 */
#include <cstddef>
#include <cstdint>

#include "pa_sim_api.h"

/* sizeof(pa_sim_stats), then the offset of each field in declaration order. */
#define PA_SIM_STATS_LAYOUT_WORDS 17

extern "C" __attribute__((visibility("default"))) int32_t pa_sim_stats_layout(int64_t *out, int32_t n)
{
    const int64_t layout[PA_SIM_STATS_LAYOUT_WORDS] = {
        int64_t(sizeof(pa_sim_stats)),
        int64_t(offsetof(pa_sim_stats, gm_read_bytes)),
        int64_t(offsetof(pa_sim_stats, gm_write_bytes)),
        int64_t(offsetof(pa_sim_stats, kv_read_bytes)),
        int64_t(offsetof(pa_sim_stats, scratch_bytes)),
        int64_t(offsetof(pa_sim_stats, partial_bytes)),
        int64_t(offsetof(pa_sim_stats, handoffs)),
        int64_t(offsetof(pa_sim_stats, units)),
        int64_t(offsetof(pa_sim_stats, tasks)),
        int64_t(offsetof(pa_sim_stats, matmuls)),
        int64_t(offsetof(pa_sim_stats, score_tiles)),
        int64_t(offsetof(pa_sim_stats, masked_score_tiles)),
        int64_t(offsetof(pa_sim_stats, peak_bytes)),
        int64_t(offsetof(pa_sim_stats, capacity_bytes)),
        int64_t(offsetof(pa_sim_stats, block_dim)),
        int64_t(offsetof(pa_sim_stats, threads)),
        int64_t(offsetof(pa_sim_stats, wall_seconds)),
    };
    for (int32_t i = 0; out != nullptr && i < n && i < PA_SIM_STATS_LAYOUT_WORDS; ++i) out[i] = layout[i];
    return PA_SIM_STATS_LAYOUT_WORDS;
}
