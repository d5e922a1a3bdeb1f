/*
 * pa_mock_read_bandwidth_gbs: how fast this host reads memory with `threads` threads, the physical limit
 * of the mock device.  Each thread sums its slice of one buffer; the best of `reps` timed passes counts.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mock_internal.h"

#define PA_NS_PER_S 1e9
#define PA_BYTES_PER_GB 1e9
#define PA_SUM_WAYS 8
#define PA_FILL_BYTE 1

typedef struct bw_shared {
    const uint64_t *data;
    uint64_t words;
    int32_t threads, reps;
    pthread_barrier_t barrier;
    double best_s;
    volatile uint64_t sink;
} bw_shared;

typedef struct bw_arg {
    bw_shared *sh;
    int32_t index;
} bw_arg;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / PA_NS_PER_S;
}

#if defined(__x86_64__)
#define PA_SUM_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define PA_SUM_CLONES
#endif

PA_SUM_CLONES static uint64_t sum_words(const uint64_t *p, uint64_t n) {
    uint64_t acc[PA_SUM_WAYS] = {0};
    uint64_t i = 0;
    for (; i + PA_SUM_WAYS <= n; i += PA_SUM_WAYS) {
        for (int w = 0; w < PA_SUM_WAYS; ++w) {
            acc[w] += p[i + w];
        }
    }
    for (; i < n; ++i) {
        acc[0] += p[i];
    }
    uint64_t total = 0;
    for (int w = 0; w < PA_SUM_WAYS; ++w) {
        total += acc[w];
    }
    return total;
}

static void *bw_worker(void *arg) {
    bw_arg *a = arg;
    bw_shared *sh = a->sh;
    uint64_t per = sh->words / (uint64_t)sh->threads;
    const uint64_t *mine = sh->data + per * (uint64_t)a->index;
    for (int32_t rep = 0; rep <= sh->reps; ++rep) { /* rep 0 is the warm pass */
        pthread_barrier_wait(&sh->barrier);
        double t0 = now_s();
        uint64_t s = sum_words(mine, per);
        pthread_barrier_wait(&sh->barrier);
        double dt = now_s() - t0;
        if (a->index == 0) {
            sh->sink += s;
            if (rep > 0 && (sh->best_s == 0.0 || dt < sh->best_s)) {
                sh->best_s = dt;
            }
        }
    }
    return 0;
}

PA_EXPORT double pa_mock_read_bandwidth_gbs(uint64_t bytes, int32_t threads, int32_t reps) {
    threads = pa_host_threads(threads);
    reps = reps > 0 ? reps : 1;
    bw_shared sh;
    memset(&sh, 0, sizeof sh);
    sh.words = bytes / sizeof(uint64_t);
    sh.threads = threads;
    sh.reps = reps;
    if (sh.words < (uint64_t)threads) {
        return 0.0;
    }
    void *data = 0;
    if (posix_memalign(&data, PA_CACHE_LINE, sh.words * sizeof(uint64_t)) != 0) {
        return 0.0;
    }
    memset(data, PA_FILL_BYTE, sh.words * sizeof(uint64_t));
    sh.data = data;
    pthread_barrier_init(&sh.barrier, 0, (unsigned)threads);
    pthread_t *ids = calloc((size_t)threads, sizeof *ids);
    bw_arg *args = calloc((size_t)threads, sizeof *args);
    for (int32_t i = 0; i < threads; ++i) {
        args[i] = (bw_arg){&sh, i};
    }
    for (int32_t i = 1; i < threads; ++i) {
        pthread_create(&ids[i], 0, bw_worker, &args[i]);
    }
    bw_worker(&args[0]);
    for (int32_t i = 1; i < threads; ++i) {
        pthread_join(ids[i], 0);
    }
    pthread_barrier_destroy(&sh.barrier);
    free(ids);
    free(args);
    free(data);
    uint64_t counted = sh.words / (uint64_t)threads * (uint64_t)threads * sizeof(uint64_t);
    return sh.best_s > 0.0 ? (double)counted / sh.best_s / PA_BYTES_PER_GB : 0.0;
}
