/*
 * A mock launch before any core runs: the shared contract check (kernel/contract/pa_contract.c, the same
 * code the simulation runs, so both libraries judge a launch alike), then what only the mock needs: the
 * SIMD path of its arithmetic and the buffers as typed pointers.  Runs on the calling thread.
 */
#include <string.h>

#include "mock_internal.h"

int32_t pa_prepare_launch(pa_launch *L, uint32_t block_dim, void *const ptrs[PA_NUM_PTR_ARGS], pa_mock_error *e) {
    memset(L, 0, sizeof *L);
    const pa_mock_config *cfg = pa_state_binding();
    int32_t rc = pa_contract_check(&L->c, cfg, block_dim, ptrs, PA_FEATURES_ALL, e);
    if (rc != PA_OK) {
        return rc;
    }
    L->cfg = *cfg;
    L->checked = cfg->checked != 0;
    L->ops = pa_math_select(cfg->isa);
    if (!L->ops) {
        return pa_fail(e, PA_ERR_BAD_LAUNCH, PA_NONE, PA_NONE, PA_NONE, pa_nowhere(),
                       "SIMD path %d is not available on this CPU", cfg->isa);
    }
    if (cfg->gang_cores < 0 || cfg->gang_cores > PA_GANG_MAX) {
        return pa_fail(e, PA_ERR_BAD_LAUNCH, PA_NONE, PA_NONE, PA_NONE, pa_nowhere(),
                       "gang_cores %d is outside [0, %d] (0: the mock's choice)", cfg->gang_cores, PA_GANG_MAX);
    }
    L->tiling = (const uint32_t *)ptrs[PA_ARG_TILING];
    L->q = (const uint16_t *)ptrs[PA_ARG_Q];
    L->k = (const uint16_t *)ptrs[PA_ARG_K];
    L->v = (const uint16_t *)ptrs[PA_ARG_V];
    L->block_tables = (const int32_t *)ptrs[PA_ARG_BLOCK_TABLES];
    L->o = (uint16_t *)ptrs[PA_ARG_O];
    L->s = (float *)ptrs[PA_ARG_S];
    L->p = (uint16_t *)ptrs[PA_ARG_P];
    L->o_tmp = (float *)ptrs[PA_ARG_O_TMP];
    L->o_core = (float *)ptrs[PA_ARG_O_CORE];
    L->l = (float *)ptrs[PA_ARG_L];
    L->lse = (float *)ptrs[PA_ARG_LSE];
    L->q_rope = (const uint16_t *)ptrs[PA_ARG_Q_ROPE];
    L->k_rope = (const uint16_t *)ptrs[PA_ARG_K_ROPE];
    if (L->c.sinks_dtype != PA_SINKS_NONE) { /* read once per launch, as the kernel would stage them */
        const void *sinks = ptrs[PA_ARG_SINKS];
        for (uint32_t h = 0; h < L->c.num_heads; ++h) {
            if (L->c.sinks_dtype == PA_SINKS_FP32) {
                memcpy(&L->sinks[h], (const char *)sinks + 4 * h, 4);
            } else {
                uint16_t bits;
                memcpy(&bits, (const char *)sinks + 2 * h, 2);
                L->ops->widen(&bits, 1, &L->sinks[h], L->c.sinks_dtype == PA_SINKS_BF16);
            }
        }
    }
    return PA_OK;
}
