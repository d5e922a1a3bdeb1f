/*
 * Exports of the mock NPU device: call_kernel (kernel ABI v1), call_kernel_noop, pa_abi_version,
 * pa_supported_keys and pa_mock_struct_layout.  A launch is: validate (calling thread), the partial phase
 * on the host thread pool, then, for split-KV keys only, the combine phase after every partial is done.
 */
#include <stddef.h>

#include "mock_internal.h"

#define PA_KERNEL_PARAMS                                                                                     \
    uint32_t block_dim, void *stream, void *q, void *k, void *v, void *block_tables, void *mask,               \
        void *deq_scale1, void *deq_offset1, void *deq_scale2, void *deq_offset2, void *razor_offset,          \
        void *scale, void *logn, void *eye, void *o, void *s, void *p, void *o_tmp, void *go, void *o_core,     \
        void *l, void *k16, void *v16, void *tiling

PA_EXPORT int32_t call_kernel(PA_KERNEL_PARAMS) {
    (void)stream;
    void *const ptrs[PA_NUM_PTR_ARGS] = {
        [PA_ARG_Q] = q, [PA_ARG_K] = k, [PA_ARG_V] = v, [PA_ARG_BLOCK_TABLES] = block_tables,
        [PA_ARG_MASK] = mask, [PA_ARG_DEQ_SCALE1] = deq_scale1, [PA_ARG_DEQ_OFFSET1] = deq_offset1,
        [PA_ARG_DEQ_SCALE2] = deq_scale2, [PA_ARG_DEQ_OFFSET2] = deq_offset2,
        [PA_ARG_RAZOR_OFFSET] = razor_offset, [PA_ARG_SCALE] = scale, [PA_ARG_LOGN] = logn, [PA_ARG_EYE] = eye,
        [PA_ARG_O] = o, [PA_ARG_S] = s, [PA_ARG_P] = p, [PA_ARG_O_TMP] = o_tmp, [PA_ARG_GO] = go,
        [PA_ARG_O_CORE] = o_core, [PA_ARG_L] = l, [PA_ARG_K16] = k16, [PA_ARG_V16] = v16,
        [PA_ARG_TILING] = tiling,
    };
    pa_mock_error *e = pa_state_error();
    pa_error_clear(e);
    pa_launch L;
    int32_t rc = pa_validate_launch(&L, block_dim, ptrs, e);
    if (rc == PA_OK) {
        rc = pa_run_phase(&L, 0, e);
    }
    if (rc == PA_OK && L.split_kv) {
        rc = pa_run_phase(&L, 1, e);
    }
    return rc;
}

PA_EXPORT int32_t call_kernel_noop(PA_KERNEL_PARAMS) {
    (void)block_dim, (void)stream, (void)q, (void)k, (void)v, (void)block_tables, (void)mask;
    (void)deq_scale1, (void)deq_offset1, (void)deq_scale2, (void)deq_offset2, (void)razor_offset;
    (void)scale, (void)logn, (void)eye, (void)o, (void)s, (void)p, (void)o_tmp, (void)go, (void)o_core;
    (void)l, (void)k16, (void)v16, (void)tiling;
    return PA_OK;
}

PA_EXPORT int32_t pa_abi_version(void) { return PA_ABI_VERSION; }

PA_EXPORT uint32_t pa_supported_keys(void) { return PA_SUPPORTED_KEYS_ALL; }

PA_EXPORT int32_t pa_mock_struct_layout(int64_t *out, int32_t n) {
    const int64_t layout[PA_MOCK_LAYOUT_WORDS] = {
        sizeof(pa_mock_config),
        offsetof(pa_mock_config, extent_bytes),
        offsetof(pa_mock_config, num_blocks),
        offsetof(pa_mock_config, checked),
        offsetof(pa_mock_config, num_threads),
        offsetof(pa_mock_config, isa),
        sizeof(pa_mock_error),
        offsetof(pa_mock_error, code),
        offsetof(pa_mock_error, arg_slot),
        offsetof(pa_mock_error, element_offset),
        offsetof(pa_mock_error, extent_elems),
        offsetof(pa_mock_error, core),
        offsetof(pa_mock_error, seq),
        offsetof(pa_mock_error, head),
        offsetof(pa_mock_error, split),
        offsetof(pa_mock_error, message),
    };
    for (int32_t i = 0; out && i < n && i < PA_MOCK_LAYOUT_WORDS; ++i) {
        out[i] = layout[i];
    }
    return PA_MOCK_LAYOUT_WORDS;
}
