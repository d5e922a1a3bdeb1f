/*
 * The partial phase of the mock device, the cores' share: a host thread runs a gang of logical cores
 * (pa_gang_cores), each core's tasks in the kernel's order (former tasks, then tail tasks), and the cores whose
 * tasks cover the same tokens of one sequence together, tile by tile, page segment by block, each block read
 * once in address order for all of them (segment_pass).  Each core computes what it computes alone: its own
 * buffer, scratch and calls (mock_task.c).
 */
#include "mock_task.h"

/* A logical core's progress through its task list (former tasks, then tail tasks), one tile at a time. */
typedef struct pa_core_run {
    uint32_t core;
    int phase;           /* 0: former tasks, 1: tail tasks, 2: done                                     */
    uint64_t process;    /* the next process index of the phase                                         */
    pa_task T;           /* the task in progress (tiles > index)                                        */
    uint32_t index, tiles;
    pa_worker_buf *buf;
    pa_mock_error *e;
    pa_tile t;           /* the tile in progress, between tile_begin and tile_end                        */
    uint32_t n_k;        /* scheduled: its K rows in the prefetch schedule (P.V starts there)            */
    unsigned char active[PA_TASK_ROWS];
} pa_core_run;

/* The tile's scratch and, for a core run alone on slices of rows (`scheduled`), its prefetch schedule (the task's
 * first rows prefetched: nothing did yet). */
static int32_t tile_begin(const pa_launch *L, pa_core_run *c, int scheduled) {
    if (scheduled) {
        c->n_k = pa_plan_prefetch(L, &c->T, c->index, c->buf);
        if (c->index == 0) {
            for (uint32_t i = 0; i < PA_PREFETCH_AHEAD_ROWS; ++i) {
                pa_prefetch_row(c->buf->rows[i], (int32_t)L->c.head_dim);
            }
        }
    }
    return pa_map_tile(L, &c->T, c->core, c->index, &c->t, c->e);
}

/* Between the cube's passes: softmax of S into P, and P read back for P.V. */
static void tile_vector_stage1(const pa_launch *L, pa_core_run *c) {
    pa_vector_softmax(L, &c->T, &c->t, c->buf, c->active);
    L->ops->widen(c->t.p, (int64_t)c->T.rows * c->t.cols, c->buf->p_f32, L->c.bf16);
}

/* After P.V: the online rescale; the last tile writes the task's result. */
static int32_t tile_end(const pa_launch *L, pa_core_run *c) {
    pa_vector_update(L, &c->T, &c->t, c->buf, c->active);
    return c->index + 1 == c->tiles ? pa_write_result(L, &c->T, c->buf, c->e) : PA_OK;
}

/* Starts the core's next task when its current one is done, until it has a tile to run (c->index < c->tiles)
 * or no task is left (phase 2). */
static int32_t core_advance(const pa_launch *L, pa_core_run *c) {
    const uint64_t hq = L->c.num_heads, cn = L->c.kv_core_num;
    while (c->phase != 2 && c->index >= c->tiles) {
        pa_task T = {0};
        int whole;
        if (c->phase == 0) {
            uint64_t per_batch = (hq + L->c.former_head - 1) / L->c.former_head;
            uint64_t total = L->c.former_batch ? (uint64_t)L->c.former_batch * per_batch * cn : 0;
            if (c->process >= total) {
                c->phase = 1;
                c->process = c->core;
                continue;
            }
            uint64_t process = c->process;
            T.slot = pa_gather(L, (uint32_t)(process / (per_batch * cn)));
            T.head0 = (uint32_t)((process / cn) % per_batch * L->c.former_head);
            T.heads = hq - T.head0 < L->c.former_head ? (uint32_t)(hq - T.head0) : L->c.former_head;
            T.split = (uint32_t)(process % cn);
            whole = 0;
        } else {
            uint64_t per_batch = (hq + L->c.tail_head - 1) / L->c.tail_head;
            uint64_t total = L->c.tail_batch ? (uint64_t)L->c.tail_batch * per_batch : 0;
            if (c->process >= total) {
                c->phase = 2;
                return PA_OK;
            }
            uint64_t process = c->process;
            T.slot = pa_gather(L, (uint32_t)(L->c.former_batch + process / per_batch));
            T.head0 = (uint32_t)(process % per_batch * L->c.tail_head);
            T.heads = hq - T.head0 < L->c.tail_head ? (uint32_t)(hq - T.head0) : L->c.tail_head;
            whole = 1;
        }
        c->process += L->c.block_dim;
        c->T = T;
        c->index = 0;
        int32_t rc = pa_start_task(L, &c->T, c->core, whole, c->buf, &c->tiles, c->e);
        if (rc) {
            return rc;
        }
    }
    return PA_OK;
}

/* Reads one byte of every cache line of `rows` rows from `first` (each `bytes` long, `stride_bytes` apart), in
 * address order. */
static void touch_rows(const uint16_t *first, int64_t stride_bytes, uint32_t rows, int64_t bytes) {
    const unsigned char *row = (const unsigned char *)first;
    unsigned char x = 0;
    for (uint32_t r = 0; r < rows; ++r, row += stride_bytes) {
        for (int64_t b = 0; b < bytes; b += PA_LINE_BYTES) {
            x ^= *(const volatile unsigned char *)(row + b);
        }
    }
    __asm__ volatile("" : : "r"(x));
}

/* Touches rows [tok, tok + count) of block `id` of the K or V cache (qk) and, for Q.K of MLA, of the rope cache:
 * kv heads [kvh0, kvh1] of each row.  A region the launch's extents do not hold is left alone (the passes report
 * it). */
static void touch_block(const pa_launch *L, int qk, int64_t id, uint32_t tok, uint32_t count, uint32_t kvh0,
                        uint32_t kvh1) {
    const int64_t d = L->c.head_dim, row_stride = (int64_t)L->c.kv_heads * d;
    const int64_t first_row = id * L->c.block_size + tok % L->c.block_size;
    const __int128 start = (__int128)first_row * row_stride + (__int128)kvh0 * d;
    const __int128 len = (__int128)(count - 1) * row_stride + (__int128)(kvh1 - kvh0 + 1) * d;
    const int32_t slot = qk ? PA_ARG_K : PA_ARG_V;
    if (start < 0 || start + len > L->c.extent[slot]) {
        return;
    }
    touch_rows((qk ? L->k : L->v) + (int64_t)start, row_stride * PA_IN_ELEM_BYTES, count,
               (int64_t)(kvh1 - kvh0 + 1) * d * PA_IN_ELEM_BYTES);
    const int64_t r_dim = L->c.rope_dim;
    if (qk && r_dim && first_row >= 0 && (first_row + count) * r_dim <= L->c.extent[PA_ARG_K_ROPE]) {
        touch_rows(L->k_rope + first_row * r_dim, r_dim * PA_IN_ELEM_BYTES, 1, count * r_dim * PA_IN_ELEM_BYTES);
    }
}

/* Q.K (qk = 1) or P.V of the page segment [tok, tok + count) (block ids id[]) for the cores `member` that have
 * not failed, block by block (pa_block_rows).  With `touch` (a gang, or a core alone that reads whole rows), each
 * block is first read, the cores' kv heads [kvh0, kvh1], line by line in address order (touch_block), then each core
 * computes its kv heads of it from the cache; without, the core prefetches its rows from its schedule (pos).
 * Why: the cores together read a block kv head by kv head (a slice of each row, rows apart), an order the
 * hardware prefetchers do not stream, and software prefetches do not train them; demand loads in address order
 * do, so a gang's pages arrive at the rate of a sequential read (kernel/mock/PERFORMANCE.md, steps 24-25).  A
 * core alone that reads a slice of each row keeps the schedule: touching its slices was slower.  Each core's
 * failure lands in fail[i]. */
static void segment_pass(const pa_launch *L, pa_core_run *runs, const uint32_t *member, uint32_t n, int32_t *fail,
                         const int64_t *id, int qk, int touch, uint32_t kvh0, uint32_t kvh1, uint32_t tok,
                         uint32_t count, uint32_t *pos) {
    const uint32_t blk = pa_block_rows(L);
    for (uint32_t b = 0; b < count; b += blk) {
        const uint32_t m = count - b < blk ? count - b : blk;
        for (uint32_t i = 0; touch && i < n; ++i) { /* the rows through a core still running (ids agree) */
            if (!fail[i]) {
                touch_block(L, qk, id[i], tok + b, m, kvh0, kvh1);
                break;
            }
        }
        for (uint32_t i = 0; i < n; ++i) {
            pa_core_run *c = &runs[member[i]];
            if (!fail[i]) {
                fail[i] = pa_cube_block(L, &c->T, &c->t, c->buf, qk, id[i], tok + b, m, touch ? 0 : pos, c->e);
            }
        }
    }
}

/* The cores of `runs` listed in `member` (n of them, one or more) run their current tiles, which cover the same
 * tokens of the same sequence, together: each cube pass goes page segment by segment (segment_pass), so the
 * gang reads its kv heads of each page row once, while its lines stream in.  Each core computes exactly what it
 * computes alone (its own scratch and values; only the order of the work between cores changes).  A core that
 * fails stops (its code in fail[i]); the others go on. */
static void run_tiles(const pa_launch *L, pa_core_run *runs, const uint32_t *member, uint32_t n, int32_t *fail) {
    const pa_task *first = &runs[member[0]].T, *last = &runs[member[n - 1]].T; /* members in head order */
    const uint32_t kvh0 = first->head0 / L->c.group, kvh1 = (last->head0 + last->heads - 1) / L->c.group;
    const int touch = n > 1 || (kvh0 == 0 && kvh1 + 1 == L->c.kv_heads); /* a gang, or whole rows */
    for (uint32_t i = 0; i < n; ++i) {
        fail[i] = tile_begin(L, &runs[member[i]], !touch);
    }
    for (int qk = 1; qk >= 0; --qk) {
        const pa_tile *t0 = &runs[member[0]].t;
        uint32_t pos = qk ? 0 : runs[member[0]].n_k;
        for (uint32_t tok = t0->tok; tok < t0->tok + t0->len;) {
            uint32_t count = 0;
            int64_t id[PA_GANG_MAX];
            for (uint32_t i = 0; i < n; ++i) {
                pa_core_run *c = &runs[member[i]];
                if (!fail[i]) {
                    fail[i] = pa_page_segment(L, &c->T, &c->t, tok, qk, &count, &id[i], c->e);
                }
            }
            if (count == 0) { /* every core has failed */
                return;
            }
            segment_pass(L, runs, member, n, fail, id, qk, touch, kvh0, kvh1, tok, count, &pos);
            tok += count;
        }
        for (uint32_t i = 0; qk && i < n; ++i) {
            if (!fail[i]) {
                tile_vector_stage1(L, &runs[member[i]]);
            }
        }
    }
    for (uint32_t i = 0; i < n; ++i) {
        if (!fail[i]) {
            fail[i] = tile_end(L, &runs[member[i]]);
        }
    }
}

/* Two cores' current tasks cover the same tokens of the same sequence (so the same tiles: pa_tile_span). */
static int same_tokens(const pa_core_run *a, const pa_core_run *b) {
    return a->T.slot == b->T.slot && a->T.tok0 == b->T.tok0 && a->T.len == b->T.len;
}

/* Runs the logical cores cores[0 .. n) on this thread, task by task (each core's tasks in its own order, with its
 * own buffer and scratch, so its results are those of running it alone).  The cores of a gang usually hold the
 * head groups of one sequence, or of one KV split of it (pa_gang_cores): the ones whose next tasks cover the same
 * tokens of the same sequence run those tasks together, tile by tile (run_tiles), the others one after the
 * other; then every core takes its next task, so the cores meet again at each task.  A failing core stops; the
 * others go on.  Returns the lowest failing core's code (its record in errors[core]) or PA_OK; *failed = that
 * core. */
int32_t pa_run_gang_partials(const pa_launch *L, const uint32_t *cores, uint32_t n, pa_worker_buf *bufs,
                             pa_mock_error *errors, uint32_t *failed) {
    pa_core_run runs[PA_GANG_MAX];
    int32_t first_rc = PA_OK;
    *failed = L->c.block_dim;
    for (uint32_t i = 0; i < n; ++i) {
        runs[i] = (pa_core_run){.core = cores[i], .process = cores[i], .buf = bufs + i, .e = errors + cores[i]};
    }
    for (;;) {
        int32_t rc[PA_GANG_MAX];
        unsigned char placed[PA_GANG_MAX];
        uint32_t live = 0;
        for (uint32_t i = 0; i < n; ++i) {
            rc[i] = runs[i].phase == 2 ? PA_OK : core_advance(L, &runs[i]);
            placed[i] = rc[i] != PA_OK || runs[i].phase == 2;
            live += !placed[i];
        }
        for (uint32_t i = 0; i < n; ++i) { /* groups of cores at the same tokens, in core order */
            uint32_t member[PA_GANG_MAX], m = 0;
            for (uint32_t j = i; !placed[i] && j < n; ++j) {
                if (!placed[j] && same_tokens(&runs[i], &runs[j])) {
                    member[m++] = j;
                }
            }
            for (uint32_t k = 0; k < m; ++k) {
                placed[member[k]] = 1;
            }
            while (m > 0 && runs[member[0]].index < runs[member[0]].tiles) { /* the group's task, to its end */
                int32_t fail[PA_GANG_MAX];
                run_tiles(L, runs, member, m, fail);
                uint32_t still = 0;
                for (uint32_t k = 0; k < m; ++k) {
                    ++runs[member[k]].index;
                    if (fail[k]) {
                        rc[member[k]] = fail[k];
                    } else {
                        member[still++] = member[k];
                    }
                }
                m = still;
            }
        }
        for (uint32_t i = 0; i < n; ++i) {
            if (rc[i] != PA_OK) {
                runs[i].phase = 2;
                if (runs[i].core < *failed) {
                    *failed = runs[i].core;
                    first_rc = rc[i];
                }
            }
        }
        if (live == 0) {
            return first_rc;
        }
    }
}

/* How the logical cores fall into gangs.  The first round of the former tasks (else of the tail tasks) lays a
 * sequence's head groups times its KV splits on consecutive cores, the split fastest: the cores of one split are
 * `stride` (the splits) apart.  Blocks of `groups * stride` cores; in each, the head groups of one split, up to
 * `members` at a time (the binding's gang_cores, else PA_GANG_MAX), make a gang. */
typedef struct pa_gang_layout {
    uint32_t groups, stride, members, per_block, gangs_per_block;
} pa_gang_layout;

static pa_gang_layout gang_layout(const pa_launch *L) {
    const uint64_t hq = L->c.num_heads;
    uint64_t groups = 1, stride = 1;
    if (L->c.former_batch) {
        groups = (hq + L->c.former_head - 1) / L->c.former_head;
        stride = L->c.kv_core_num ? L->c.kv_core_num : 1;
    } else if (L->c.tail_batch) {
        groups = (hq + L->c.tail_head - 1) / L->c.tail_head;
    }
    uint64_t members = L->cfg.gang_cores > 0 ? (uint64_t)L->cfg.gang_cores : PA_GANG_MAX;
    members = members < groups ? members : groups;
    return (pa_gang_layout){(uint32_t)groups, (uint32_t)stride, (uint32_t)members, (uint32_t)(groups * stride),
                            (uint32_t)(stride * ((groups + members - 1) / members))};
}

uint32_t pa_gang_count(const pa_launch *L) {
    const pa_gang_layout g = gang_layout(L);
    const uint32_t blocks = (L->c.block_dim + g.per_block - 1) / g.per_block;
    return blocks * g.gangs_per_block;
}

uint32_t pa_gang_cores(const pa_launch *L, uint32_t gang, uint32_t *cores) {
    const pa_gang_layout g = gang_layout(L);
    const uint32_t base = gang / g.gangs_per_block * g.per_block, split = gang % g.gangs_per_block % g.stride;
    const uint32_t first = gang % g.gangs_per_block / g.stride * g.members;
    uint32_t n = 0;
    for (uint32_t h = first; h < g.groups && h < first + g.members; ++h) {
        const uint64_t core = (uint64_t)base + split + (uint64_t)h * g.stride;
        if (core < L->c.block_dim) {
            cores[n++] = (uint32_t)core;
        }
    }
    return n;
}
