/*
 * Host threads of the mock device: the logical cores (block_idx 0 .. block_dim-1) of one phase are handed
 * out to host threads, each logical core running all of its tasks in order (in the partial phase, in gangs of
 * cores holding the head groups of one sequence or KV split, which one thread runs together, see pa_gang_cores).
 * Results do not depend on the threads: every output element is written by one task with fixed arithmetic.  An
 * error is reported for the lowest failing logical core; cores above a known failure are skipped.
 *
 * Helper threads live in one persistent pool (created on first use, re-created in a forked child), so a
 * launch costs a wake-up rather than thread creation.  Launches that use helpers take the pool in turn; a
 * single-threaded launch runs on its calling thread alone.
 */
#define _GNU_SOURCE
#include <fenv.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mock_internal.h"

#define PA_POOL_MAX_HELPERS 255

typedef struct pa_phase {
    const pa_launch *L;
    int combine;
    uint32_t next_unit;      /* atomic: the next gang (partials) or core (combine) to hand out          */
    uint32_t first_failed;   /* atomic: lowest failing core so far (block_dim if none)                 */
    pa_mock_error *errors;   /* one record per logical core, written only on failure                    */
} pa_phase;

static struct {
    pthread_mutex_t launch;  /* one pooled launch at a time                                             */
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    int helpers;             /* threads created                                                         */
    int wanted;              /* helpers that may join the current job                                   */
    int active;              /* helpers inside the current job                                          */
    uint64_t generation;     /* bumped per job                                                          */
    pa_phase *job;
    uint64_t born[PA_POOL_MAX_HELPERS]; /* generation current when each helper was created              */
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
          PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, 0, {0}};

static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_key_t buf_key;

static void reset_after_fork(void) {
    /* The child has none of the parent's helpers; start over with fresh locks. */
    pthread_mutex_init(&pool.launch, 0);
    pthread_mutex_init(&pool.mu, 0);
    pthread_cond_init(&pool.work, 0);
    pthread_cond_init(&pool.done, 0);
    pool.helpers = pool.wanted = pool.active = 0;
    pool.job = 0;
}

static void init_once(void) {
    pthread_key_create(&buf_key, free);
    pthread_atfork(0, 0, reset_after_fork);
}

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

/* The calling thread's vector-core buffers (one per logical core of a gang), kept for its next launches
 * (freed when the thread exits). */
static pa_worker_buf *thread_buffer(void) {
    pa_worker_buf *buf = pthread_getspecific(buf_key);
    if (!buf && posix_memalign((void **)&buf, PA_CACHE_LINE, PA_GANG_MAX * sizeof *buf) == 0) {
        pthread_setspecific(buf_key, buf);
    }
    return buf;
}

static void note_failure(pa_phase *ph, uint32_t core) {
    uint32_t seen = __atomic_load_n(&ph->first_failed, __ATOMIC_RELAXED);
    while (core < seen && !__atomic_compare_exchange_n(&ph->first_failed, &seen, core, 0, __ATOMIC_RELAXED,
                                                       __ATOMIC_RELAXED)) {
    }
}

/* Partials: the thread claims gangs (pa_gang_cores) and runs each gang's cores together; the combine: one core at
 * a time. */
static void run_cores_default_env(pa_phase *ph) {
    pa_worker_buf *buf = ph->combine ? 0 : thread_buffer();
    const uint32_t units = ph->combine ? ph->L->c.block_dim : pa_gang_count(ph->L);
    for (;;) {
        uint32_t unit = __atomic_fetch_add(&ph->next_unit, 1, __ATOMIC_RELAXED), cores[PA_GANG_MAX];
        if (unit >= units) {
            break;
        }
        const uint32_t n = ph->combine ? (cores[0] = unit, 1) : pa_gang_cores(ph->L, unit, cores);
        if (n == 0 || cores[0] > __atomic_load_n(&ph->first_failed, __ATOMIC_RELAXED)) {
            continue;
        }
        uint32_t failed = cores[0];
        int32_t rc;
        if (ph->combine) {
            rc = pa_run_core_combine(ph->L, cores[0], &ph->errors[cores[0]]);
        } else if (!buf) {
            rc = pa_fail(&ph->errors[cores[0]], PA_ERR_INTERNAL, PA_NONE, PA_NONE, PA_NONE, pa_nowhere(),
                         "out of host memory");
        } else {
            rc = pa_run_gang_partials(ph->L, cores, n, buf, ph->errors, &failed);
        }
        if (rc) {
            note_failure(ph, failed);
        }
    }
}

/* Logical cores run in the default floating-point environment (round to nearest, no flush-to-zero or
 * denormals-are-zero), whatever the host thread had set (torch.set_flush_denormal sets FTZ/DAZ on x86): the
 * device's arithmetic must not depend on it, nor on which host thread runs a core. */
static void run_cores(pa_phase *ph) {
    fenv_t host_env;
    int saved = fegetenv(&host_env) == 0;
    fesetenv(FE_DFL_ENV);
    run_cores_default_env(ph);
    if (saved) {
        fesetenv(&host_env);
    }
}

static void *helper_main(void *arg) {
    intptr_t index = (intptr_t)arg;
    pthread_mutex_lock(&pool.mu);
    uint64_t seen = pool.born[index]; /* a helper created for a job must still see that job */
    for (;;) {
        while (pool.generation == seen) {
            pthread_cond_wait(&pool.work, &pool.mu);
        }
        seen = pool.generation;
        pa_phase *job = pool.job;
        if (index >= pool.wanted || !job) { /* not needed, or woke after the launch was over */
            continue;
        }
        ++pool.active;
        pthread_mutex_unlock(&pool.mu);
        run_cores(job);
        pthread_mutex_lock(&pool.mu);
        if (--pool.active == 0) {
            pthread_cond_signal(&pool.done);
        }
    }
    return 0;
}

/* Runs ph on the calling thread plus up to `helpers` pool threads (fewer if they cannot be created).  Once
 * every logical core is claimed the caller closes the job: helpers still asleep skip it, so the launch waits
 * only for cores in progress, not for helpers to wake up. */
static void run_pooled(pa_phase *ph, int helpers) {
    pthread_mutex_lock(&pool.launch);
    pthread_mutex_lock(&pool.mu);
    while (pool.helpers < helpers) {
        pthread_t id;
        pool.born[pool.helpers] = pool.generation;
        if (pthread_create(&id, 0, helper_main, (void *)(intptr_t)pool.helpers) != 0) {
            break;
        }
        pthread_detach(id);
        ++pool.helpers;
    }
    pool.wanted = helpers < pool.helpers ? helpers : pool.helpers;
    pool.job = ph;
    ++pool.generation;
    pthread_cond_broadcast(&pool.work);
    pthread_mutex_unlock(&pool.mu);
    run_cores(ph);
    pthread_mutex_lock(&pool.mu);
    pool.job = 0;
    while (pool.active > 0) {
        pthread_cond_wait(&pool.done, &pool.mu);
    }
    pthread_mutex_unlock(&pool.mu);
    pthread_mutex_unlock(&pool.launch);
}

int32_t pa_run_phase(const pa_launch *L, int combine, pa_mock_error *e) {
    pthread_once(&once, init_once);
    pa_phase ph = {L, combine, 0, L->c.block_dim, 0};
    ph.errors = calloc(L->c.block_dim, sizeof *ph.errors);
    if (!ph.errors) {
        return pa_fail(e, PA_ERR_INTERNAL, PA_NONE, PA_NONE, PA_NONE, pa_nowhere(), "out of host memory");
    }
    int32_t threads = pa_host_threads(L->cfg.num_threads);
    if ((uint32_t)threads > L->c.block_dim) {
        threads = (int32_t)L->c.block_dim;
    }
    int helpers = threads - 1 < PA_POOL_MAX_HELPERS ? threads - 1 : PA_POOL_MAX_HELPERS;
    if (helpers > 0) {
        run_pooled(&ph, helpers);
    } else {
        run_cores(&ph);
    }
    int32_t rc = PA_OK;
    if (ph.first_failed < L->c.block_dim) {
        *e = ph.errors[ph.first_failed];
        rc = e->code;
    }
    free(ph.errors);
    return rc;
}
