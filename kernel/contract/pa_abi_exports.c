/*
 * What the mock device and the simulation export so that the host can check its mirrors against the
 * compiled library rather than against a copy: the layout of the mock-API records (pa_mock_config,
 * pa_mock_error) and the ABI's split-count formula.  launcher/mock_api.py compares its ctypes structures
 * with pa_mock_struct_layout() when it loads a library; tests/test_abi_mirror.py compares tiling/abi.py's
 * kv_splits with pa_abi_kv_splits() and kv_first_token with pa_abi_kv_first_token().  Compiles as C11 and as C++.
 */
#include <stddef.h>

#include "pa_contract.h"

#ifdef __cplusplus
extern "C" {
#endif

PA_CONTRACT_EXPORT int32_t pa_mock_struct_layout(int64_t *out, int32_t n) {
    const int64_t layout[PA_MOCK_LAYOUT_WORDS] = {
        (int64_t)sizeof(pa_mock_config),
        (int64_t)offsetof(pa_mock_config, extent_bytes),
        (int64_t)offsetof(pa_mock_config, num_blocks),
        (int64_t)offsetof(pa_mock_config, checked),
        (int64_t)offsetof(pa_mock_config, num_threads),
        (int64_t)offsetof(pa_mock_config, isa),
        (int64_t)offsetof(pa_mock_config, gang_cores),
        (int64_t)sizeof(pa_mock_error),
        (int64_t)offsetof(pa_mock_error, code),
        (int64_t)offsetof(pa_mock_error, arg_slot),
        (int64_t)offsetof(pa_mock_error, element_offset),
        (int64_t)offsetof(pa_mock_error, extent_elems),
        (int64_t)offsetof(pa_mock_error, core),
        (int64_t)offsetof(pa_mock_error, seq),
        (int64_t)offsetof(pa_mock_error, head),
        (int64_t)offsetof(pa_mock_error, split),
        (int64_t)offsetof(pa_mock_error, message),
    };
    for (int32_t i = 0; out && i < n && i < PA_MOCK_LAYOUT_WORDS; ++i) {
        out[i] = layout[i];
    }
    return PA_MOCK_LAYOUT_WORDS;
}

PA_CONTRACT_EXPORT uint32_t pa_abi_kv_splits(uint32_t kv_len, uint32_t block_size, uint32_t kv_split) {
    if (block_size == 0 || kv_split == 0) {
        return 0; /* not a valid launch; the formula is undefined there */
    }
    return pa_kv_splits(kv_len, block_size, kv_split);
}

PA_CONTRACT_EXPORT uint32_t pa_abi_kv_first_token(uint32_t kv_len, uint32_t q_len, uint32_t window_left,
                                                  uint32_t block_size) {
    return block_size ? pa_kv_first_token(kv_len, q_len, window_left, block_size) : 0;
}

#ifdef __cplusplus
}
#endif
