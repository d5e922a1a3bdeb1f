/*
 * Host threads of the mock device: the logical cores (block_idx 0 .. block_dim-1) of one phase are handed
 * out to a pool of host threads, each logical core running all of its tasks in order.  Results do not depend
 * on the pool: every output element is written by one task with fixed arithmetic.  An error is reported for
 * the lowest failing logical core; cores above a known failure are skipped.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mock_internal.h"

typedef struct pa_phase {
    const pa_launch *L;
    int combine;
    uint32_t next_core;      /* atomic: the next logical core to hand out                               */
    uint32_t first_failed;   /* atomic: lowest failing core so far (block_dim if none)                 */
    pa_mock_error *errors;   /* one record per logical core, written only on failure                    */
} pa_phase;

int32_t pa_host_threads(int32_t requested) {
    if (requested > 0) {
        return requested;
    }
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) {
        return CPU_COUNT(&set);
    }
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? (int32_t)online : 1;
}

static void *phase_worker(void *arg) {
    pa_phase *ph = arg;
    pa_worker_buf *buf = 0;
    if (!ph->combine && posix_memalign((void **)&buf, PA_CACHE_LINE, sizeof *buf) != 0) {
        buf = 0;
    }
    for (;;) {
        uint32_t core = __atomic_fetch_add(&ph->next_core, 1, __ATOMIC_RELAXED);
        if (core >= ph->L->block_dim) {
            break;
        }
        if (core > __atomic_load_n(&ph->first_failed, __ATOMIC_RELAXED)) {
            continue;
        }
        pa_mock_error *e = &ph->errors[core];
        int32_t rc;
        if (ph->combine) {
            rc = pa_run_core_combine(ph->L, core, e);
        } else if (!buf) {
            rc = pa_fail(e, PA_ERR_INTERNAL, PA_NONE, PA_NONE, PA_NONE, pa_nowhere(), "out of host memory");
        } else {
            rc = pa_run_core_partials(ph->L, core, buf, e);
        }
        if (rc) {
            uint32_t seen = __atomic_load_n(&ph->first_failed, __ATOMIC_RELAXED);
            while (core < seen && !__atomic_compare_exchange_n(&ph->first_failed, &seen, core, 0, __ATOMIC_RELAXED,
                                                               __ATOMIC_RELAXED)) {
            }
        }
    }
    free(buf);
    return 0;
}

int32_t pa_run_phase(const pa_launch *L, int combine, pa_mock_error *e) {
    pa_phase ph = {L, combine, 0, L->block_dim, 0};
    ph.errors = calloc(L->block_dim, sizeof *ph.errors);
    if (!ph.errors) {
        return pa_fail(e, PA_ERR_INTERNAL, PA_NONE, PA_NONE, PA_NONE, pa_nowhere(), "out of host memory");
    }
    int32_t threads = pa_host_threads(L->cfg.num_threads);
    if ((uint32_t)threads > L->block_dim) {
        threads = (int32_t)L->block_dim;
    }
    pthread_t *ids = calloc((size_t)threads, sizeof *ids);
    int32_t started = 0;
    for (int32_t i = 1; ids && i < threads; ++i) {
        if (pthread_create(&ids[started], 0, phase_worker, &ph) == 0) {
            ++started;
        }
    }
    phase_worker(&ph);
    for (int32_t i = 0; i < started; ++i) {
        pthread_join(ids[i], 0);
    }
    free(ids);
    int32_t rc = PA_OK;
    if (ph.first_failed < L->block_dim) {
        *e = ph.errors[ph.first_failed];
        rc = e->code;
    }
    free(ph.errors);
    return rc;
}
