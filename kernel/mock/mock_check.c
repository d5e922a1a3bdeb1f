/*
 * Bounds checks of the mock device's accesses and its typed reads of the tiling words (docs/CONTRACT.md).
 * A range is checked once per task or tile, never per element.
 */
#include "mock_internal.h"

#define PA_INT64_MAX_I128 ((__int128)INT64_MAX)

static int64_t clamp64(__int128 x) {
    if (x > PA_INT64_MAX_I128) {
        return INT64_MAX;
    }
    if (x < -PA_INT64_MAX_I128) {
        return -INT64_MAX;
    }
    return (int64_t)x;
}

int32_t pa_check_range_always(const pa_launch *L, pa_mock_error *e, int32_t slot, __int128 start,
                              __int128 count, pa_where w) {
    __int128 extent = L->c.extent[slot];
    if (start >= 0 && count >= 0 && start + count <= extent) {
        return PA_OK;
    }
    __int128 first_bad = start < 0 ? start : (start > extent ? start : extent);
    return pa_fail(e, PA_ERR_OUT_OF_BOUNDS, slot, clamp64(first_bad), clamp64(extent), w,
                   "%s access [%lld, %lld) outside its extent of %lld elements (core %d, seq %d, head %d, split %d)",
                   pa_contract_slot_name(slot), (long long)clamp64(start), (long long)clamp64(start + count),
                   (long long)clamp64(extent), w.core, w.seq, w.head, w.split);
}

int32_t pa_check_range(const pa_launch *L, pa_mock_error *e, int32_t slot, __int128 start, __int128 count,
                       pa_where w) {
    if (!L->checked) {
        return PA_OK;
    }
    return pa_check_range_always(L, e, slot, start, count, w);
}

/* A NaN or inf in the valid Q, K or V is unsupported input (docs/CONTRACT.md): on a device the cube's mad may
 * raise an AI Core error on one (Mmad.md), so checked mode refuses it where the mock reads it.  One pass over data
 * the task reads anyway; unchecked mode skips it (the result is then undefined, as on the device). */
int64_t pa_first_non_finite(const pa_launch *L, const uint16_t *x, uint32_t rows, int64_t pitch, uint32_t cols) {
    if (!L->checked) {
        return -1;
    }
    const uint16_t exponent = L->c.bf16 ? 0x7f80u : 0x7c00u; /* all exponent bits set: inf or NaN */
    for (uint32_t r = 0; r < rows; ++r) {
        const uint16_t *row = x + (int64_t)r * pitch;
        for (uint32_t c = 0; c < cols; ++c) {
            if ((row[c] & exponent) == exponent) {
                return (int64_t)r * cols + c;
            }
        }
    }
    return -1;
}

uint32_t pa_slot_word(const pa_launch *L, uint32_t slot, uint32_t field) {
    return pa_contract_slot_word(L->tiling, slot, field);
}

uint64_t pa_slot_pair(const pa_launch *L, uint32_t slot, uint32_t hi_field, uint32_t lo_field) {
    return pa_contract_slot_pair(L->tiling, slot, hi_field, lo_field);
}

uint32_t pa_gather(const pa_launch *L, uint32_t position) { return pa_slot_word(L, position, PA_BF_GATHER); }

uint32_t pa_splits_of(const pa_launch *L, uint32_t kv_len) {
    return pa_contract_splits(&L->c, kv_len);
}
