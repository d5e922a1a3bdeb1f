/*
 * The balancer's greedy placement in C (tiling/balance.py: _balanced_gather), for the planner's host time: the
 * Python form costs a few numpy calls per sequence, about 200 us per grid at b64, which an engine pays every
 * decode step in which sequences join or leave.  Same inputs, same arithmetic, same ties: the results are the
 * same bits (tests/test_tiling_balance.py compares both on random grids).  Built by compile.sh into
 * build/lib/libpa_plan.so; the planner falls back to the Python form when it is absent.
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
    double *ends = malloc(sizeof(double) * (size_t)cores);
    if (!count || !offset || !head || !queue || !ends) {
        free(count), free(offset), free(head), free(queue), free(ends);
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
            double bestKey = INFINITY;
            for (int64_t b = 0; b < cores; ++b) {
                double end = -INFINITY;
                for (int64_t i = 0; i < cores; ++i) {
                    const double placed = w[(i - b + cores) % cores];
                    if (placed > 0 && load[i] + placed > end) end = load[i] + placed;
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
    free(count), free(offset), free(head), free(queue), free(ends);
    return 0;
}
