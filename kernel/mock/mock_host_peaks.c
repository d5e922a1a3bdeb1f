/*
 * The mock device's physical limits on this host, measured:
 *  - pa_mock_read_bandwidth_gbs: how fast `threads` threads read memory (each sums its slice of one buffer; the
 *    best of `reps` timed passes counts): the roof of a memory-bound launch;
 *  - pa_mock_fma_peak_gflops: fp32 multiply-add throughput of `threads` threads with the widest vector unit the
 *    mock's arithmetic uses (AVX-512, else AVX2+FMA, else scalar): the roof of a compute-bound launch (MLA at many
 *    heads, several query tokens).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mock_internal.h"

#define PA_NS_PER_S 1e9
#define PA_BYTES_PER_GB 1e9
#define PA_SUM_WAYS 8    /* words of a cache line, summed in separate lanes                        */
#define PA_SUM_STREAMS 4 /* slices of a thread's share read side by side (one stream leaves DRAM idle) */
#define PA_FILL_BYTE 1

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / PA_NS_PER_S;
}

/* ---- the timing harness both probes share ---------------------------------------------------------------- */

/* Pass `rep` of thread `index` of `threads` over the probe's state `ctx` (rep 0 is the warm pass: caches, clocks);
 * returns a value that keeps the work alive. */
typedef double (*pa_peak_pass)(void *ctx, int32_t index, int32_t threads, int32_t rep);

typedef struct peak_shared {
    pa_peak_pass pass;
    void *ctx;
    int32_t threads, reps;
    pthread_barrier_t barrier;
    double best_s;
    volatile double sink;
} peak_shared;

typedef struct peak_arg {
    peak_shared *sh;
    int32_t index;
} peak_arg;

static void *peak_worker(void *arg) {
    peak_arg *a = arg;
    peak_shared *sh = a->sh;
    for (int32_t rep = 0; rep <= sh->reps; ++rep) {
        pthread_barrier_wait(&sh->barrier);
        double t0 = now_s();
        double kept = sh->pass(sh->ctx, a->index, sh->threads, rep);
        pthread_barrier_wait(&sh->barrier);
        double dt = now_s() - t0;
        if (a->index == 0) {
            sh->sink += kept;
            if (rep > 0 && (sh->best_s == 0.0 || dt < sh->best_s)) {
                sh->best_s = dt;
            }
        }
    }
    return 0;
}

/* Seconds of the fastest of `reps` passes (after one warm pass) that `threads` threads run side by side, each
 * pass started and ended by a barrier; 0 when it cannot run. */
static double best_pass_s(pa_peak_pass pass, void *ctx, int32_t threads, int32_t reps) {
    peak_shared sh;
    memset(&sh, 0, sizeof sh);
    sh.pass = pass;
    sh.ctx = ctx;
    sh.threads = threads;
    sh.reps = reps > 0 ? reps : 1;
    pthread_t *ids = calloc((size_t)threads, sizeof *ids);
    peak_arg *args = calloc((size_t)threads, sizeof *args);
    if (!ids || !args) {
        free(ids);
        free(args);
        return 0.0;
    }
    pthread_barrier_init(&sh.barrier, 0, (unsigned)threads);
    for (int32_t i = 0; i < threads; ++i) {
        args[i] = (peak_arg){&sh, i};
    }
    for (int32_t i = 1; i < threads; ++i) {
        pthread_create(&ids[i], 0, peak_worker, &args[i]);
    }
    peak_worker(&args[0]);
    for (int32_t i = 1; i < threads; ++i) {
        pthread_join(ids[i], 0);
    }
    pthread_barrier_destroy(&sh.barrier);
    free(ids);
    free(args);
    return sh.best_s;
}

/* ---- read bandwidth ---------------------------------------------------------------------------------------- */

#if defined(__x86_64__)
#include <immintrin.h>
#define PA_SUM_CLONES __attribute__((target_clones("avx2", "default")))
#define PA_ZMM_WORDS 8

/* The AVX-512 reader: one 64-byte load per line and stream, integer adds (the compiler's code for the portable
 * loop varies by 10 % with the optimisation level; this one does not). */
__attribute__((target("avx512f"))) static uint64_t sum_words_avx512(const uint64_t *p, uint64_t n) {
    const uint64_t slice = n / PA_SUM_STREAMS / PA_ZMM_WORDS * PA_ZMM_WORDS;
    __m512i acc[PA_SUM_STREAMS];
    for (int s = 0; s < PA_SUM_STREAMS; ++s) {
        acc[s] = _mm512_setzero_si512();
    }
    for (uint64_t i = 0; i < slice; i += PA_ZMM_WORDS) {
        for (int s = 0; s < PA_SUM_STREAMS; ++s) {
            acc[s] = _mm512_add_epi64(acc[s], _mm512_loadu_si512((const void *)(p + (uint64_t)s * slice + i)));
        }
    }
    uint64_t total = 0;
    for (uint64_t i = slice * PA_SUM_STREAMS; i < n; ++i) {
        total += p[i];
    }
    for (int s = 0; s < PA_SUM_STREAMS; ++s) {
        total += (uint64_t)_mm512_reduce_add_epi64(acc[s]);
    }
    return total;
}
#else
#define PA_SUM_CLONES
#endif

/* Sums n words as PA_SUM_STREAMS equal slices read in lockstep: a single sequential stream per core keeps too
 * few lines in flight to reach the memory's rate (on a 2-core host: ~25 GB/s with one stream per core, ~33 with
 * four), and the probe is meant to show what the memory can deliver, not what one loop shape gets. */
PA_SUM_CLONES static uint64_t sum_words_portable(const uint64_t *p, uint64_t n) {
    const uint64_t slice = n / PA_SUM_STREAMS / PA_SUM_WAYS * PA_SUM_WAYS;
    uint64_t acc[PA_SUM_STREAMS][PA_SUM_WAYS] = {{0}};
    for (uint64_t i = 0; i < slice; i += PA_SUM_WAYS) {
        for (int s = 0; s < PA_SUM_STREAMS; ++s) {
            for (int w = 0; w < PA_SUM_WAYS; ++w) {
                acc[s][w] += p[(uint64_t)s * slice + i + w];
            }
        }
    }
    uint64_t total = 0;
    for (uint64_t i = slice * PA_SUM_STREAMS; i < n; ++i) {
        total += p[i];
    }
    for (int s = 0; s < PA_SUM_STREAMS; ++s) {
        for (int w = 0; w < PA_SUM_WAYS; ++w) {
            total += acc[s][w];
        }
    }
    return total;
}

static uint64_t sum_words(const uint64_t *p, uint64_t n) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) {
        return sum_words_avx512(p, n);
    }
#endif
    return sum_words_portable(p, n);
}

typedef struct bw_ctx {
    const uint64_t *data;
    uint64_t words;
} bw_ctx;

static double bw_pass(void *ctx, int32_t index, int32_t threads, int32_t rep) {
    (void)rep;
    const bw_ctx *b = ctx;
    uint64_t per = b->words / (uint64_t)threads;
    return (double)sum_words(b->data + per * (uint64_t)index, per);
}

PA_EXPORT double pa_mock_read_bandwidth_gbs(uint64_t bytes, int32_t threads, int32_t reps) {
    threads = pa_host_threads(threads);
    bw_ctx b = {0, bytes / sizeof(uint64_t)};
    if (b.words < (uint64_t)threads) {
        return 0.0;
    }
    void *data = 0;
    if (posix_memalign(&data, PA_CACHE_LINE, b.words * sizeof(uint64_t)) != 0) {
        return 0.0;
    }
    memset(data, PA_FILL_BYTE, b.words * sizeof(uint64_t));
    b.data = data;
    double best_s = best_pass_s(bw_pass, &b, threads, reps);
    free(data);
    uint64_t counted = b.words / (uint64_t)threads * (uint64_t)threads * sizeof(uint64_t);
    return best_s > 0.0 ? (double)counted / best_s / PA_BYTES_PER_GB : 0.0;
}

/* ---- fp32 FMA peak ------------------------------------------------------------------------------------------ */

#define PA_FMA_CHAINS 12        /* independent accumulators: FMA latency x ports, with room                      */
#define PA_FMA_ITERS 2000000    /* iterations of one timed pass (~0.1 s at 2 ports x 16 lanes on 2.6 GHz)        */
#define PA_FMA_FLOPS_PER_LANE 2 /* a multiply and an add                                                         */

#if defined(__x86_64__)
#define PA_FMA_LANES_512 16
#define PA_FMA_LANES_256 8
__attribute__((target("avx512f"))) static float fma_pass_avx512(float seed) {
    __m512 acc[PA_FMA_CHAINS], a = _mm512_set1_ps(1.0f - seed), b = _mm512_set1_ps(seed);
    for (int c = 0; c < PA_FMA_CHAINS; ++c) {
        acc[c] = _mm512_set1_ps((float)c);
    }
    for (int64_t i = 0; i < PA_FMA_ITERS; ++i) {
        for (int c = 0; c < PA_FMA_CHAINS; ++c) {
            acc[c] = _mm512_fmadd_ps(acc[c], a, b);
        }
    }
    float total = 0.0f;
    for (int c = 0; c < PA_FMA_CHAINS; ++c) {
        total += _mm512_reduce_add_ps(acc[c]);
    }
    return total;
}

__attribute__((target("avx2,fma"))) static float fma_pass_avx2(float seed) {
    __m256 acc[PA_FMA_CHAINS], a = _mm256_set1_ps(1.0f - seed), b = _mm256_set1_ps(seed);
    for (int c = 0; c < PA_FMA_CHAINS; ++c) {
        acc[c] = _mm256_set1_ps((float)c);
    }
    for (int64_t i = 0; i < PA_FMA_ITERS; ++i) {
        for (int c = 0; c < PA_FMA_CHAINS; ++c) {
            acc[c] = _mm256_fmadd_ps(acc[c], a, b);
        }
    }
    float lanes[PA_FMA_LANES_256], total = 0.0f;
    for (int c = 0; c < PA_FMA_CHAINS; ++c) {
        _mm256_storeu_ps(lanes, acc[c]);
        for (int l = 0; l < PA_FMA_LANES_256; ++l) {
            total += lanes[l];
        }
    }
    return total;
}
#endif

static float fma_pass_scalar(float seed) {
    float acc[PA_FMA_CHAINS], a = 1.0f - seed, b = seed;
    for (int c = 0; c < PA_FMA_CHAINS; ++c) {
        acc[c] = (float)c;
    }
    for (int64_t i = 0; i < PA_FMA_ITERS; ++i) {
        for (int c = 0; c < PA_FMA_CHAINS; ++c) {
            acc[c] = acc[c] * a + b;
        }
    }
    float total = 0.0f;
    for (int c = 0; c < PA_FMA_CHAINS; ++c) {
        total += acc[c];
    }
    return total;
}

/* The lanes of the widest path and its pass. */
static int32_t fma_lanes(float (**pass)(float)) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) {
        *pass = fma_pass_avx512;
        return PA_FMA_LANES_512;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        *pass = fma_pass_avx2;
        return PA_FMA_LANES_256;
    }
#endif
    *pass = fma_pass_scalar;
    return 1;
}

static double fma_pass(void *ctx, int32_t index, int32_t threads, int32_t rep) {
    (void)index;
    (void)threads;
    float (*pass)(float) = *(float (**)(float))ctx;
    return (double)pass(0.5f / (float)(rep + 2));
}

PA_EXPORT double pa_mock_fma_peak_gflops(int32_t threads, int32_t reps) {
    threads = pa_host_threads(threads);
    float (*pass)(float);
    double flops_per_pass = (double)fma_lanes(&pass) * PA_FMA_CHAINS * PA_FMA_ITERS * PA_FMA_FLOPS_PER_LANE;
    double best_s = best_pass_s(fma_pass, &pass, threads, reps);
    return best_s > 0.0 ? flops_per_pass * threads / best_s / PA_BYTES_PER_GB : 0.0;
}
