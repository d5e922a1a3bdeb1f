/*
 * Thread-local state of the mock device: the binding (pa_mock_bind) and the last error record, and pa_fail,
 * which fills a record at a core's coordinates through the contract's one filler.
 */
#include <stdarg.h>

#include "mock_internal.h"

static _Thread_local pa_mock_config tls_binding;
static _Thread_local int tls_bound;
static _Thread_local pa_mock_error tls_error;

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

int32_t pa_fail(pa_mock_error *e, int32_t code, int32_t slot, int64_t offset, int64_t extent, pa_where w,
                const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    pa_contract_vfail(e, code, slot, offset, extent, w.core, w.seq, w.head, w.split, fmt, args);
    va_end(args);
    return code;
}
