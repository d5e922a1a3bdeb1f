/*
 * Exports of the mock NPU device: call_kernel (the kernel ABI, kernel/pa_kernel_abi.h), call_kernel_noop, pa_abi_version and
 * pa_supported_keys (pa_mock_struct_layout is kernel/contract's).  A launch is: the contract check and the
 * mock's own preparation (calling thread), the partial phase on the host thread pool, then, for split-KV keys
 * only, the combine phase after every partial is done.  Parameter lists come from the ABI's PA_PTR_ARGS.
 */
#include "mock_internal.h"

static uint64_t pages_read; /* K pages the last launch's Q.K passes read (one per task and page)          */

void pa_count_pages(uint64_t pages) { __atomic_fetch_add(&pages_read, pages, __ATOMIC_RELAXED); }

#define PA_PARAM(name) , void *name
#define PA_SLOT_VALUE(name) name,
#define PA_UNUSED(name) (void)name;

PA_EXPORT int32_t call_kernel(uint32_t block_dim, void *stream PA_PTR_ARGS(PA_PARAM)) {
    (void)stream;
    void *const ptrs[PA_NUM_PTR_ARGS] = {PA_PTR_ARGS(PA_SLOT_VALUE)};
    pa_mock_error *e = pa_state_error();
    pa_launch L;
    __atomic_store_n(&pages_read, 0, __ATOMIC_RELAXED);
    int32_t rc = pa_prepare_launch(&L, block_dim, ptrs, e);
    if (rc == PA_OK) {
        rc = pa_run_phase(&L, 0, e);
    }
    if (rc == PA_OK && L.c.split_kv) {
        rc = pa_run_phase(&L, 1, e);
    }
    return rc;
}

PA_EXPORT int32_t call_kernel_noop(uint32_t block_dim, void *stream PA_PTR_ARGS(PA_PARAM)) {
    (void)block_dim, (void)stream;
    PA_PTR_ARGS(PA_UNUSED)
    return PA_OK;
}

PA_EXPORT int32_t pa_abi_version(void) { return PA_ABI_VERSION; }

PA_EXPORT uint32_t pa_supported_keys(void) { return PA_SUPPORTED_KEYS_ALL; }

/* The v3 decode features this device executes: all of them (PA_FEATURE_*). */
PA_EXPORT uint32_t pa_supported_features(void) { return PA_FEATURES_ALL; }

/* K pages the last launch read, one per task and page: a window's launch reads only the pages in its window. */
PA_EXPORT uint64_t pa_mock_kv_pages_read(void) { return __atomic_load_n(&pages_read, __ATOMIC_RELAXED); }
