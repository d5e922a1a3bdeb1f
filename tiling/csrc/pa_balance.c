/*
 * The planner's ragged-batch balancer in C (tiling/balance.py), for the planner's host time: an engine pays it
 * every decode step in which sequences join or leave, and in numpy it is some forty array calls per grid plus a
 * few per sequence placed (about 265 us at b64).  Two entry points: pa_balanced_gather, the greedy placement
 * (balance._balanced_gather_numpy), and pa_balance_decide, the whole decision (balance._decide_numpy).  Same
 * inputs, same arithmetic, same ties: the results are the same bits (tests/test_tiling_balance.py compares both
 * on random batches and grids).  Built by compile.sh into build/lib/libpa_plan.so; the planner falls back to
 * the numpy forms when it is absent.
 *
 * Positions p (schedule order) belong to a pass (tail or former) and start at core base[p]; rank r places the
 * r-th longest sequence (slot order[r]) whose per-core work, started on core 0, is work[r * cores + i].
 * A sequence of one task goes to the least loaded start with a free position (ties: lowest free position,
 * then lowest start); one of several tasks to the start whose most loaded touched core ends lowest, plus
 * TIE_SCALE x its lowest free position.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

int32_t pa_balanced_gather(int32_t cores, int32_t n, int32_t tail_batch, const uint8_t *is_tail, const int64_t *base,
                           const int64_t *order, const double *work, const uint8_t *single, double tie_scale,
                           int64_t *gather, double *load)
{
    if (cores < 1 || n < 0) return -1;
    /* free[pass][start]: the positions of that pass starting at that core, ascending; head[] walks them */
    int64_t *count = calloc((size_t)2 * cores, sizeof(int64_t));
    int64_t *offset = calloc((size_t)2 * cores + 1, sizeof(int64_t));
    int64_t *head = calloc((size_t)2 * cores, sizeof(int64_t));
    int64_t *queue = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
    int64_t *offsets = malloc(sizeof(int64_t) * (size_t)cores);
    if (!count || !offset || !head || !queue || !offsets) {
        free(count), free(offset), free(head), free(queue), free(offsets);
        return -2;
    }
    for (int64_t p = 0; p < n; ++p) ++count[(int64_t)is_tail[p] * cores + base[p]];
    for (int64_t q = 0; q < 2 * (int64_t)cores; ++q) offset[q + 1] = offset[q] + count[q];
    for (int64_t q = 0; q < 2 * (int64_t)cores; ++q) head[q] = offset[q];
    for (int64_t p = 0; p < n; ++p) {
        const int64_t q = (int64_t)is_tail[p] * cores + base[p];
        queue[head[q]++] = p;
    }
    for (int64_t q = 0; q < 2 * (int64_t)cores; ++q) head[q] = offset[q];
    for (int32_t i = 0; i < cores; ++i) load[i] = 0.0;
    for (int64_t rank = 0; rank < n; ++rank) {
        const int64_t pass = rank < tail_batch ? 1 : 0;
        const int64_t *qhead = head + pass * cores;
        const int64_t *qend = offset + pass * cores + 1;
        const double *w = work + rank * cores;
        int64_t best = -1;
        if (single[rank]) {
            for (int64_t b = 0; b < cores; ++b) {
                if (qhead[b] == qend[b]) continue;
                if (best < 0 || load[b] < load[best] ||
                    (load[b] == load[best] && queue[qhead[b]] < queue[qhead[best]])) {
                    best = b;
                }
            }
            if (best < 0) break;
            load[best] += w[0];
        } else {
            /* only the cores it lands on count: its nonzero offsets from the start (a few per sequence) */
            int64_t touched = 0;
            for (int64_t i = 0; i < cores; ++i) {
                if (w[i] > 0) offsets[touched++] = i;
            }
            double bestKey = INFINITY;
            for (int64_t b = 0; b < cores; ++b) {
                double end = -INFINITY;
                for (int64_t t = 0; t < touched; ++t) {
                    const int64_t i = b + offsets[t] < cores ? b + offsets[t] : b + offsets[t] - cores;
                    const double ended = load[i] + w[offsets[t]];
                    if (ended > end) end = ended;
                }
                const double first = qhead[b] == qend[b] ? INFINITY : (double)queue[qhead[b]];
                const double key = end + first * tie_scale;
                if (best < 0 || key < bestKey) {
                    best = b;
                    bestKey = key;
                }
            }
            for (int64_t i = 0; i < cores; ++i) load[i] += w[(i - best + cores) % cores];
        }
        gather[queue[head[pass * cores + best]++]] = order[rank];
    }
    free(count), free(offset), free(head), free(queue), free(offsets);
    return 0;
}

/*
 * The balancer's whole decision (tiling/balance.py: _decide_numpy) in one call: the work tables of a grid, the
 * ascending order's loads, the bound one sequence sets, the split-KV candidate grid, the greedy placements and
 * the choice among them.  Work is counted in query-head tokens, integers held in doubles, so every sum is exact
 * whatever its order and the choices are the numpy reference's bit for bit (tests/test_tiling_balance.py).
 */
typedef struct {
    int32_t num_heads, num_kv_heads, block_size, head_dim, core_count, grid_fixed;
    int32_t combine_split_limit; /* largest kvCN the combine holds (tiling.splits.combine_split_limit) */
    int32_t whole_group_heads;   /* query heads of the widest whole-group task (balance.widest_whole_groups) */
    double task_overhead, partial_overhead, min_gain, tie_scale;
} PaBalanceShape;

typedef struct {
    int32_t block_dim, former_batch, former_head, tail_batch, tail_head, kv_split_tokens, kv_core_num;
} PaBalanceGrid;

enum { PA_KEEP_ASCENDING = 0, PA_BALANCED_ORDER = 1, PA_CANDIDATE_GRID = 2 };

static int64_t ceil_div64(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Work per core of each sequence's processes when its position's first process lands on core 0: out[n * cores]. */
static void pass_work(const PaBalanceShape *s, int64_t n, const int64_t *lens, int64_t head_split,
                      int64_t kv_split, int64_t kvcn, int64_t cores, double *out)
{
    const int64_t chunks = ceil_div64(s->num_heads, head_split);
    for (int64_t q = 0; q < n; ++q) {
        double *row = out + q * cores;
        for (int64_t i = 0; i < cores; ++i) row[i] = 0.0;
        const int64_t aligned = ceil_div64(lens[q], s->block_size) * s->block_size;
        const int64_t splits = ceil_div64(aligned, kv_split);
        const double overhead = s->task_overhead + (splits >= 2 ? s->partial_overhead : 0.0);
        for (int64_t c = 0; c < chunks; ++c) {
            const int64_t left = s->num_heads - c * head_split;
            const double heads = (double)(left < head_split ? left : head_split);
            for (int64_t j = 0; j < kvcn; ++j) {
                const int64_t tokens = j < splits - 1 ? kv_split : (j == splits - 1 ? lens[q] - j * kv_split : 0);
                if (tokens > 0) row[(c * kvcn + j) % cores] += heads * ((double)tokens + overhead);
            }
        }
    }
}

typedef struct {
    int64_t cores, tail_batch;
    uint8_t *is_tail;
    int64_t *base;
    double *former, *tail; /* tail == former when the grid has no tail pass */
} Passes;

static int passes_init(Passes *p, const PaBalanceShape *s, const PaBalanceGrid *g, int64_t n, const int64_t *lens)
{
    p->cores = g->block_dim;
    p->tail_batch = g->tail_batch;
    p->is_tail = malloc((size_t)(n > 0 ? n : 1));
    p->base = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
    p->former = malloc(sizeof(double) * (size_t)((n > 0 ? n : 1) * p->cores));
    p->tail = g->tail_batch ? malloc(sizeof(double) * (size_t)((n > 0 ? n : 1) * p->cores)) : p->former;
    if (!p->is_tail || !p->base || !p->former || !p->tail) return -2;
    const int64_t former_p = ceil_div64(s->num_heads, g->former_head) * g->kv_core_num;
    const int64_t tail_p = g->tail_batch ? ceil_div64(s->num_heads, g->tail_head) : 0;
    for (int64_t q = 0; q < n; ++q) {
        p->is_tail[q] = q >= g->former_batch;
        p->base[q] = (p->is_tail[q] ? (q - g->former_batch) * tail_p : q * former_p) % p->cores;
    }
    pass_work(s, n, lens, g->former_head, g->kv_split_tokens, g->kv_core_num, p->cores, p->former);
    if (g->tail_batch) pass_work(s, n, lens, g->tail_head, g->kv_split_tokens, 1, p->cores, p->tail);
    return 0;
}

static void passes_free(Passes *p)
{
    if (p->tail != p->former) free(p->tail);
    free(p->former), free(p->is_tail), free(p->base);
}

/* Stable argsort of the lengths, ascending (sign 1) or descending (sign -1), ties by index; no shared state,
 * since ctypes releases the GIL and two threads may plan at once. */
typedef struct {
    int64_t key, index;
} Keyed;

static int by_key(const void *a, const void *b)
{
    const Keyed *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->index < y->index ? -1 : (x->index > y->index);
}

static int argsort(int64_t n, const int64_t *lens, int64_t sign, int64_t *order)
{
    Keyed *keyed = malloc(sizeof(Keyed) * (size_t)n);
    if (!keyed) return -2;
    for (int64_t q = 0; q < n; ++q) keyed[q].key = lens[q] * sign, keyed[q].index = q;
    qsort(keyed, (size_t)n, sizeof(Keyed), by_key);
    for (int64_t q = 0; q < n; ++q) order[q] = keyed[q].index;
    free(keyed);
    return 0;
}

static void core_work(const Passes *p, int64_t n, const int64_t *gather, double *load)
{
    for (int64_t i = 0; i < p->cores; ++i) load[i] = 0.0;
    for (int64_t q = 0; q < n; ++q) {
        const double *w = (p->is_tail[q] ? p->tail : p->former) + gather[q] * p->cores;
        for (int64_t i = 0; i < p->cores; ++i) load[(p->base[q] + i) % p->cores] += w[i];
    }
}

static double max_of(const double *v, int64_t n, double floor_value)
{
    double m = floor_value;
    for (int64_t i = 0; i < n; ++i) m = v[i] > m ? v[i] : m;
    return m;
}

/* The greedy placement of a grid's passes (pa_balanced_gather's inputs built as balance._balanced_gather
 * builds them); the most loaded core's work, or a negative code. */
static double place(const Passes *p, const PaBalanceShape *s, int64_t n, const int64_t *longest, int64_t *gather,
                    double *load)
{
    double *work = malloc(sizeof(double) * (size_t)((n > 0 ? n : 1) * p->cores));
    uint8_t *single = malloc((size_t)(n > 0 ? n : 1));
    if (!work || !single) {
        free(work), free(single);
        return -2.0;
    }
    for (int64_t r = 0; r < n; ++r) {
        const double *src = (r < p->tail_batch ? p->tail : p->former) + longest[r] * p->cores;
        single[r] = 1;
        for (int64_t i = 0; i < p->cores; ++i) {
            work[r * p->cores + i] = src[i];
            if (i > 0 && src[i] != 0.0) single[r] = 0;
        }
    }
    const int32_t rc = pa_balanced_gather((int32_t)p->cores, (int32_t)n, (int32_t)p->tail_batch, p->is_tail, p->base,
                                          longest, work, single, s->tie_scale, gather, load);
    free(work), free(single);
    return rc != 0 ? -2.0 : max_of(load, p->cores, 0.0);
}

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        const int64_t t = a % b;
        a = b, b = t;
    }
    return a;
}

/* balance.split_kv_candidate: 0 and the grid, or 1 when no candidate applies. */
static int candidate_grid(const PaBalanceShape *s, const PaBalanceGrid *g, int64_t n, const int64_t *lens,
                          PaBalanceGrid *out)
{
    int64_t max_len = 0, sum_len = 0;
    for (int64_t q = 0; q < n; ++q) max_len = lens[q] > max_len ? lens[q] : max_len, sum_len += lens[q];
    const int64_t pages = ceil_div64(max_len, s->block_size);
    const int64_t head_split = s->whole_group_heads;
    const int64_t chunks = ceil_div64(s->num_heads, head_split);
    int found = 0;
    int64_t best_reach = 0, best_kvcn = 0, best_pages = 0;
    double best_estimate = 0.0;
    for (int64_t kvcn = 2; kvcn <= s->combine_split_limit; ++kvcn) {
        const int64_t split_pages = ceil_div64(pages, kvcn);
        if (ceil_div64(pages, split_pages) != kvcn) continue;
        if (split_pages * s->block_size == g->kv_split_tokens && head_split == g->former_head) continue;
        const int64_t tasks = chunks * n * kvcn;
        const int64_t block_dim = tasks < s->core_count ? tasks : s->core_count;
        int64_t ranges = 0, partials = 0;
        for (int64_t q = 0; q < n; ++q) {
            const int64_t r = ceil_div64(ceil_div64(lens[q], s->block_size), split_pages);
            ranges += r;
            partials += r >= 2 ? r : 0;
        }
        const double total = ((double)sum_len + (double)ranges * s->task_overhead +
                              (double)partials * s->partial_overhead) * (double)s->num_heads;
        const double one_range = ((double)(split_pages * s->block_size) + s->task_overhead + s->partial_overhead) *
                                 (double)head_split;
        double estimate = total / (double)block_dim + one_range / 2.0;
        estimate = estimate > one_range ? estimate : one_range;
        const int64_t reach = gcd64(chunks * kvcn, block_dim);
        if (!found || reach < best_reach || (reach == best_reach && estimate < best_estimate)) {
            found = 1, best_reach = reach, best_estimate = estimate, best_kvcn = kvcn, best_pages = split_pages;
        }
    }
    if (!found) return 1;
    const int64_t tasks = chunks * n * best_kvcn;
    out->block_dim = (int32_t)(tasks < s->core_count ? tasks : s->core_count);
    if (out->block_dim < 1) out->block_dim = 1;
    out->former_batch = (int32_t)n, out->former_head = (int32_t)head_split;
    out->tail_batch = 0, out->tail_head = 0;
    out->kv_split_tokens = (int32_t)(best_pages * s->block_size), out->kv_core_num = (int32_t)best_kvcn;
    return 0;
}

/* Try the candidate grid: its placement's most loaded core in *end (gather into cand_gather); 1 if none. */
static int try_candidate(const PaBalanceShape *s, const PaBalanceGrid *g, int64_t n, const int64_t *lens,
                         const int64_t *longest, PaBalanceGrid *cand, int64_t *cand_gather, double *end)
{
    if (s->grid_fixed || candidate_grid(s, g, n, lens, cand) != 0) return 1;
    Passes p = {0};
    double *load = malloc(sizeof(double) * (size_t)cand->block_dim);
    if (!load || passes_init(&p, s, cand, n, lens) != 0) {
        free(load), passes_free(&p);
        return -2;
    }
    *end = place(&p, s, n, longest, cand_gather, load);
    free(load), passes_free(&p);
    return *end < 0 ? -2 : 0;
}

int32_t pa_balance_decide(const PaBalanceShape *s, const PaBalanceGrid *g, int32_t n32, const int64_t *lens,
                          int32_t *decision, PaBalanceGrid *cand, int64_t *gather)
{
    const int64_t n = n32;
    if (!s || !g || !lens || !decision || !cand || !gather || n < 1 || g->block_dim < 1) return -1;
    const int64_t cores = g->block_dim;
    Passes p = {0};
    int64_t *order = malloc(sizeof(int64_t) * (size_t)n), *longest = malloc(sizeof(int64_t) * (size_t)n);
    int64_t *mine = malloc(sizeof(int64_t) * (size_t)n);
    double *load = malloc(sizeof(double) * (size_t)cores);
    int32_t rc = 0;
    if (!order || !longest || !mine || !load || passes_init(&p, s, g, n, lens) != 0) {
        rc = -2;
        goto done;
    }
    if (argsort(n, lens, 1, order) != 0 || argsort(n, lens, -1, longest) != 0) {
        rc = -2;
        goto done;
    }
    core_work(&p, n, order, load);
    double total = 0.0;
    for (int64_t i = 0; i < cores; ++i) total += load[i];
    const double mean = total / (double)cores, ascending_end = max_of(load, cores, -INFINITY);
    *decision = PA_KEEP_ASCENDING;
    if (ascending_end <= (1.0 + s->min_gain) * mean) goto done;
    double bound = mean;
    for (int64_t r = 0; r < n; ++r) {
        const double m = max_of((r < g->tail_batch ? p.tail : p.former) + longest[r] * cores, cores, 0.0);
        bound = m > bound ? m : bound;
    }
    int have = 0;
    double cand_end = 0.0;
    if (bound > (1.0 + s->min_gain) * mean) {
        const int t = try_candidate(s, g, n, lens, longest, cand, gather, &cand_end);
        if (t < 0) { rc = -2; goto done; }
        have = t == 0;
        if (have && cand_end <= (1.0 - s->min_gain) * bound) {
            *decision = PA_CANDIDATE_GRID;
            goto done;
        }
    }
    double best_end = ascending_end;
    const double balanced_end = place(&p, s, n, longest, mine, load);
    if (balanced_end < 0) { rc = -2; goto done; }
    int balanced = 0;
    if (balanced_end < best_end) balanced = 1, best_end = balanced_end;
    if (best_end > (1.0 + s->min_gain) * mean) {
        if (!have && bound <= (1.0 + s->min_gain) * mean) {
            const int t = try_candidate(s, g, n, lens, longest, cand, gather, &cand_end);
            if (t < 0) { rc = -2; goto done; }
            have = t == 0;
        }
        if (have && cand_end <= (1.0 - s->min_gain) * best_end) {
            *decision = PA_CANDIDATE_GRID;
            goto done;
        }
    }
    if (balanced) {
        *decision = PA_BALANCED_ORDER;
        for (int64_t q = 0; q < n; ++q) gather[q] = mine[q];
    }
done:
    free(order), free(longest), free(mine), free(load), passes_free(&p);
    return rc;
}
