/*
 * Exports of the mock NPU device: call_kernel (kernel ABI v2), call_kernel_noop, pa_abi_version and
 * pa_supported_keys (pa_mock_struct_layout is kernel/contract's).  A launch is: the contract check and the
 * mock's own preparation (calling thread), the partial phase on the host thread pool, then, for split-KV keys
 * only, the combine phase after every partial is done.  Parameter lists come from the ABI's PA_PTR_ARGS.
 */
#include "mock_internal.h"

#define PA_PARAM(name) , void *name
#define PA_SLOT_VALUE(name) name,
#define PA_UNUSED(name) (void)name;

PA_EXPORT int32_t call_kernel(uint32_t block_dim, void *stream PA_PTR_ARGS(PA_PARAM)) {
    (void)stream;
    void *const ptrs[PA_NUM_PTR_ARGS] = {PA_PTR_ARGS(PA_SLOT_VALUE)};
    pa_mock_error *e = pa_state_error();
    pa_launch L;
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
