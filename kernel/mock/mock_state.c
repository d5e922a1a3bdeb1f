/*
 * Thread-local state of the mock device: the binding (pa_mock_bind) and the last error record, plus the
 * helpers that fill an error record.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "mock_internal.h"

static _Thread_local pa_mock_config tls_binding;
static _Thread_local int tls_bound;
static _Thread_local pa_mock_error tls_error;

static const char *const slot_names[PA_NUM_PTR_ARGS] = {
    [PA_ARG_Q] = "q", [PA_ARG_K] = "k", [PA_ARG_V] = "v", [PA_ARG_BLOCK_TABLES] = "block_tables",
    [PA_ARG_MASK] = "mask", [PA_ARG_DEQ_SCALE1] = "deq_scale1", [PA_ARG_DEQ_OFFSET1] = "deq_offset1",
    [PA_ARG_DEQ_SCALE2] = "deq_scale2", [PA_ARG_DEQ_OFFSET2] = "deq_offset2",
    [PA_ARG_RAZOR_OFFSET] = "razor_offset", [PA_ARG_SCALE] = "scale", [PA_ARG_LOGN] = "logn",
    [PA_ARG_EYE] = "eye", [PA_ARG_O] = "o", [PA_ARG_S] = "s", [PA_ARG_P] = "p", [PA_ARG_O_TMP] = "o_tmp",
    [PA_ARG_GO] = "go", [PA_ARG_O_CORE] = "o_core", [PA_ARG_L] = "l", [PA_ARG_K16] = "k16",
    [PA_ARG_V16] = "v16", [PA_ARG_TILING] = "tiling",
};

const char *pa_slot_name(int32_t slot) {
    return (slot >= 0 && slot < PA_NUM_PTR_ARGS) ? slot_names[slot] : "none";
}

PA_EXPORT int32_t pa_mock_bind(const pa_mock_config *config) {
    if (!config) {
        tls_bound = 0;
        return PA_ERR_BAD_LAUNCH;
    }
    tls_binding = *config;
    tls_bound = 1;
    return PA_OK;
}

const pa_mock_config *pa_state_binding(void) { return tls_bound ? &tls_binding : 0; }

pa_mock_error *pa_state_error(void) { return &tls_error; }

PA_EXPORT int32_t pa_mock_last_error(pa_mock_error *out) {
    if (out) {
        *out = tls_error;
    }
    return tls_error.code;
}

pa_where pa_nowhere(void) {
    pa_where w = {PA_NONE, PA_NONE, PA_NONE, PA_NONE};
    return w;
}

void pa_error_clear(pa_mock_error *e) {
    memset(e, 0, sizeof *e);
    e->code = PA_OK;
    e->arg_slot = PA_NONE;
    e->element_offset = PA_NONE;
    e->extent_elems = PA_NONE;
    e->core = e->seq = e->head = e->split = PA_NONE;
}

int32_t pa_fail(pa_mock_error *e, int32_t code, int32_t slot, int64_t offset, int64_t extent, pa_where w,
                const char *fmt, ...) {
    e->code = code;
    e->arg_slot = slot;
    e->element_offset = offset;
    e->extent_elems = extent;
    e->core = w.core;
    e->seq = w.seq;
    e->head = w.head;
    e->split = w.split;
    va_list args;
    va_start(args, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, args);
    va_end(args);
    return code;
}
