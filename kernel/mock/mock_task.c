/*
 * The partial phase of the mock device: one logical core's (block_idx) tasks, enumerated as the kernel's
 * former and tail passes do (docs/CONTRACT.md, "Task loop"), each run tile by tile through the per-core
 * scratch buffers at the kernel's strides ("Per-core scratch"): S (fp32) -> P (IN dtype) -> O_tile (fp32) ->
 * online rescale.  An MLA launch (ABI v4) adds each rope dot to its latent dot in S and reads the latent as V.
 * Over 400 lines: the task enumeration, the tile pipeline and the result write are one core's partial phase
 * and share its static helpers and prefetch schedule; apart, they would share them through mock_internal.h.
 */
#include <math.h>
#include <string.h>
#include <stdlib.h>

#include "mock_internal.h"

typedef struct pa_task {
    uint32_t slot, head0, heads, split;
    uint32_t rows;        /* heads x q_len: row i * q_len + t is head head0 + i, query token t            */
    uint32_t kv_len;      /* the sequence's context length (its query tokens are its last q_len)         */
    uint32_t tok0, len;   /* token range of this task                                                  */
    pa_where where;
} pa_task;

typedef struct pa_tile {
    uint32_t tok, len, cols;   /* first token, tokens, round16(tokens)                                   */
    float *s, *o_tmp;
    uint16_t *p;
} pa_tile;


static uint32_t round16(uint32_t x) {
    return (x + PA_TILE_ALIGN_TOKENS - 1) / PA_TILE_ALIGN_TOKENS * PA_TILE_ALIGN_TOKENS;
}

/* The block id of token `tok` of the task's sequence: block-table row from word 8, stride word 5. */
static int32_t block_id(const pa_launch *L, const pa_task *T, uint32_t tok, int64_t *id, pa_mock_error *e) {
    int64_t row = pa_slot_word(L, T->slot, PA_BF_BATCH_IDX);
    int64_t index = row * L->c.max_blocks + tok / L->c.block_size;
    int32_t rc = pa_check_range_always(L, e, PA_ARG_BLOCK_TABLES, index, 1, T->where);
    if (rc) {
        return rc;
    }
    *id = L->block_tables[index];
    if (*id < 0 || *id >= L->cfg.num_blocks) {
        return pa_fail(e, PA_ERR_BAD_BLOCK_ID, PA_ARG_BLOCK_TABLES, index, L->c.extent[PA_ARG_BLOCK_TABLES],
                       T->where, "block id %lld at block_tables[%lld] (seq %u, token %u) is outside [0, %lld)",
                       (long long)*id, (long long)index, T->slot, tok, (long long)L->cfg.num_blocks);
    }
    return PA_OK;
}

/* Rows of a block: a page segment is computed block by block, every kv head of a block before the next block.
 * A gang reads a block's rows before computing it (segment_pass): the block is sized to sit in a 512 KiB L2
 * with room, and depends on the launch only, so that a core makes the same calls in a gang as alone. */
static uint32_t block_rows(const pa_launch *L) {
    const uint64_t rows = PA_READ_BLOCK_BYTES / ((uint64_t)L->c.kv_heads * L->c.head_dim * PA_IN_ELEM_BYTES);
    return rows < 1 ? 1 : rows > L->c.block_size ? L->c.block_size : (uint32_t)rows;
}

/* Appends to `out` the K or V rows of tile `index` in the order the passes read them (page segment, block, kv
 * head, token); NULL for a row whose block id is invalid (reported when it is computed).  Returns the count. */
static uint32_t schedule_rows(const pa_launch *L, const pa_task *T, uint32_t index, const uint16_t *cache,
                              const uint16_t **out, uint32_t limit) {
    const uint64_t first = (uint64_t)T->tok0 + (uint64_t)index * L->c.tile_tokens, end_task = T->tok0 + T->len;
    if (first >= end_task) {
        return 0;
    }
    const uint64_t end = first + L->c.tile_tokens < end_task ? first + L->c.tile_tokens : end_task;
    const int64_t row_stride = (int64_t)L->c.kv_heads * L->c.head_dim;
    const uint32_t kvh0 = T->head0 / L->c.group, kvh1 = (T->head0 + T->heads - 1) / L->c.group, blk = block_rows(L);
    const int64_t table_row = (int64_t)pa_slot_word(L, T->slot, PA_BF_BATCH_IDX) * L->c.max_blocks;
    uint32_t n = 0;
    for (uint64_t tok = first; tok < end && n < limit;) {
        const uint64_t off = tok % L->c.block_size;
        const uint64_t count = L->c.block_size - off < end - tok ? L->c.block_size - off : end - tok;
        const int64_t index_bt = table_row + (int64_t)(tok / L->c.block_size);
        const int64_t id = index_bt >= 0 && index_bt < L->c.extent[PA_ARG_BLOCK_TABLES] ? L->block_tables[index_bt] : -1;
        const int valid = id >= 0 && id < L->cfg.num_blocks;
        for (uint64_t b = 0; b < count && n < limit; b += blk) {
            const uint64_t m = count - b < blk ? count - b : blk;
            for (uint32_t kvh = kvh0; kvh <= kvh1; ++kvh) {
                const uint16_t *row = valid ? cache + (id * L->c.block_size + (int64_t)(off + b)) * row_stride +
                                                  (int64_t)kvh * L->c.head_dim
                                            : 0;
                for (uint64_t j = 0; j < m && n < limit; ++j) {
                    out[n++] = row ? row + (int64_t)j * row_stride : 0;
                }
            }
        }
        tok += count;
    }
    return n;
}

/* The prefetch schedule of tile `index` (see pa_worker_buf.rows); returns the number of its K rows. */
static uint32_t plan_prefetch(const pa_launch *L, const pa_task *T, uint32_t index, pa_worker_buf *buf) {
    const uint32_t cap = sizeof buf->rows / sizeof buf->rows[0];
    uint32_t n_k = schedule_rows(L, T, index, L->k, buf->rows, cap);
    uint32_t n = n_k + schedule_rows(L, T, index, L->v, buf->rows + n_k, cap - n_k);
    uint32_t limit = n + PA_PREFETCH_AHEAD_ROWS;
    n += schedule_rows(L, T, index + 1, L->k, buf->rows + n, limit - n);
    while (n < limit) {
        buf->rows[n++] = 0;
    }
    return n_k;
}

/* MLA: adds q_rope . rope_j to the S columns of `count` tokens from row `base_row` of the rope cache (one latent
 * head: every task row reads the same rope rows). */
static int32_t add_rope_scores(const pa_launch *L, const pa_task *T, const pa_tile *t, pa_worker_buf *buf,
                               int64_t base_row, uint32_t count, uint32_t col, pa_mock_error *e) {
    const int64_t r_dim = L->c.rope_dim;
    int32_t rc = pa_check_range(L, e, PA_ARG_K_ROPE, (__int128)base_row * r_dim,
                                (__int128)count * r_dim, T->where);
    if (rc) {
        return rc;
    }
    if (buf->q_rope_is_packed) {
        L->ops->qk_packed(buf->q_rope_packed, 0, (int32_t)T->rows, (int32_t)r_dim, L->k_rope + base_row * r_dim,
                          r_dim, (int32_t)count, buf->s_rope, (int32_t)count, 0);
    } else {
        L->ops->qk(buf->q_rope, (int32_t)T->rows, (int32_t)r_dim, L->k_rope + base_row * r_dim, r_dim,
                   (int32_t)count, buf->s_rope, (int32_t)count, L->c.bf16, 0);
    }
    for (uint32_t r = 0; r < T->rows; ++r) {
        float *srow = t->s + (int64_t)r * t->cols + col;
        const float *rope = buf->s_rope + (int64_t)r * count;
        for (uint32_t j = 0; j < count; ++j) {
            srow[j] = srow[j] + rope[j];
        }
    }
    return PA_OK;
}

/* Q.K^T into S (qk = 1) or P.V into o_tmp (qk = 0) of tokens [tok, tok + count) of one page (block id `id`)
 * for every kv head of task T, in kv-head order.  With a schedule place (pos, advanced), row i of the block
 * prefetches schedule entry pos + i + PA_PREFETCH_AHEAD_ROWS (pages are scattered: the hardware prefetchers
 * cannot find them); without one (a gang has read the block already), nothing. */
static int32_t cube_block(const pa_launch *L, const pa_task *T, const pa_tile *t, pa_worker_buf *buf, int qk,
                          int64_t id, uint32_t tok, uint32_t count, uint32_t *pos, pa_mock_error *e) {
    const int64_t row_stride = (int64_t)L->c.kv_heads * L->c.head_dim;
    const uint32_t d = L->c.head_dim, kvh0 = T->head0 / L->c.group, kvh1 = (T->head0 + T->heads - 1) / L->c.group;
    const uint32_t o_cols = round16(d), off = tok % L->c.block_size, col = tok - t->tok;
    const int64_t base = (id * L->c.block_size + off) * row_stride;
    const uint16_t *cache = qk ? L->k : L->v;
    int32_t rc = pa_check_range(L, e, qk ? PA_ARG_K : PA_ARG_V, (__int128)base + (__int128)kvh0 * d,
                                (__int128)(count - 1) * row_stride + (__int128)(kvh1 - kvh0 + 1) * d, T->where);
    if (rc) {
        return rc;
    }
    for (uint32_t kvh = kvh0; kvh <= kvh1; ++kvh) {
        uint32_t h_lo = kvh * L->c.group > T->head0 ? kvh * L->c.group : T->head0;
        uint32_t h_hi = (kvh + 1) * L->c.group < T->head0 + T->heads ? (kvh + 1) * L->c.group : T->head0 + T->heads;
        uint32_t r0 = (h_lo - T->head0) * L->c.q_len, rows = (h_hi - h_lo) * L->c.q_len;
        const uint16_t *kv = cache + base + (int64_t)kvh * d;
        const uint16_t *const *ahead = pos ? buf->rows + *pos + PA_PREFETCH_AHEAD_ROWS : 0;
        if (qk && buf->q_is_packed) {
            L->ops->qk_packed(buf->q_packed, (int32_t)r0, rows, d, kv, row_stride, count,
                              t->s + (int64_t)r0 * t->cols + col, t->cols, ahead);
        } else if (qk) {
            L->ops->qk(buf->q + (int64_t)r0 * d, rows, d, kv, row_stride, count, t->s + (int64_t)r0 * t->cols + col,
                       t->cols, L->c.bf16, ahead);
        } else {
            L->ops->pv(buf->p_f32 + (int64_t)r0 * t->cols + col, t->cols, rows, kv, row_stride, count, d,
                       t->o_tmp + (int64_t)r0 * o_cols, o_cols, col != 0, L->c.bf16, ahead);
        }
        if (pos) {
            *pos += count;
        }
    }
    if (qk && L->c.rope_dim) {
        return add_rope_scores(L, T, t, buf, id * L->c.block_size + off, count, col, e);
    }
    return PA_OK;
}

/* The page segment of the tile that starts at token `tok`: its token count and block id (checked). */
static int32_t page_segment(const pa_launch *L, const pa_task *T, const pa_tile *t, uint32_t tok, int qk,
                            uint32_t *count, int64_t *id, pa_mock_error *e) {
    const uint32_t off = tok % L->c.block_size, left = t->tok + t->len - tok;
    *count = L->c.block_size - off < left ? L->c.block_size - off : left;
    if (qk) {
        pa_count_pages(1);
    }
    return block_id(L, T, tok, id, e);
}

static int32_t map_tile(const pa_launch *L, const pa_task *T, uint32_t core, uint32_t index, pa_tile *t,
                        pa_mock_error *e) {
    const uint32_t half = index & 1u;
    t->tok = T->tok0 + index * L->c.tile_tokens;
    t->len = T->tok0 + T->len - t->tok < L->c.tile_tokens ? T->tok0 + T->len - t->tok : L->c.tile_tokens;
    t->cols = round16(t->len);
    int64_t s_off = (int64_t)(2 * core + half) * (int64_t)L->c.s_half;
    int64_t p_off = (int64_t)(2 * core + half) * (int64_t)L->c.p_half;
    int64_t o_off = (int64_t)core * PA_O_TMP_CORE_STRIDE_ELEMS + half * PA_O_TMP_HALF_ELEMS;
    int64_t rows = T->rows;
    int32_t rc;
    if ((rc = pa_check_range(L, e, PA_ARG_S, s_off, rows * t->cols, T->where)) ||
        (rc = pa_check_range(L, e, PA_ARG_P, p_off, rows * t->cols, T->where)) ||
        (rc = pa_check_range(L, e, PA_ARG_O_TMP, o_off, rows * round16(L->c.head_dim), T->where))) {
        return rc;
    }
    t->s = L->s + s_off;
    t->p = L->p + p_off;
    t->o_tmp = L->o_tmp + o_off;
    return PA_OK;
}

/* The columns of tile t row r may see: keys max(0, p - W) .. p of its query token at position p, clipped to
 * the tile; [*c0, *c1) is empty when none. */
static void visible_columns(const pa_launch *L, const pa_task *T, const pa_tile *t, uint32_t r, uint32_t *c0,
                            uint32_t *c1) {
    const uint32_t p = T->kv_len - L->c.q_len + r % L->c.q_len;
    uint32_t lo = 0;
    if (L->c.window_left != PA_WINDOW_NONE && p > L->c.window_left) {
        lo = p - L->c.window_left;
    }
    *c0 = lo > t->tok ? lo - t->tok : 0;
    *c1 = p + 1 > t->tok ? p + 1 - t->tok : 0;
    *c1 = *c1 < t->len ? *c1 : t->len;
    *c0 = *c0 < *c1 ? *c0 : *c1;
}

/* Vector stage 1 (softmax of S into P) and stage 2 (online rescale with o_tmp) of one tile.  A row's running
 * max and sum start at its first visible key (buf->started), not at the task's first tile: with a window or
 * several query tokens a row may see nothing of a tile; its P row is then 0 and its state is left alone. */
static void vector_softmax(const pa_launch *L, const pa_task *T, const pa_tile *t, pa_worker_buf *buf,
                           unsigned char *active) {
    for (uint32_t r = 0; r < T->rows; ++r) {
        float *srow = t->s + (int64_t)r * t->cols;
        uint16_t *prow = t->p + (int64_t)r * t->cols;
        uint32_t c0, c1;
        visible_columns(L, T, t, r, &c0, &c1);
        active[r] = c1 > c0;
        if (!active[r]) {
            memset(prow, 0, (size_t)t->cols * PA_HALF_BYTES);
            continue;
        }
        float m_new, ll;
        const int first = !buf->started[r];
        if (c0 == 0 && c1 == t->len) {
            for (uint32_t j = t->len; j < t->cols; ++j) {
                srow[j] = 0.0f; /* padding columns: the vector masks them out of max and sum */
            }
            L->ops->softmax_row(srow, (int32_t)t->len, (int32_t)t->cols, L->c.tor, first, buf->gm[r], prow,
                                &m_new, &ll, L->c.bf16);
        } else { /* masked keys: P is 0 outside [c0, c1) */
            L->ops->softmax_row(srow + c0, (int32_t)(c1 - c0), (int32_t)(c1 - c0), L->c.tor, first, buf->gm[r],
                                prow + c0, &m_new, &ll, L->c.bf16);
            memset(prow, 0, (size_t)c0 * PA_HALF_BYTES);
            memset(prow + c1, 0, (size_t)(t->cols - c1) * PA_HALF_BYTES);
        }
        buf->dm[r] = first ? 0.0f : buf->gm[r] - m_new;
        buf->gm[r] = m_new;
        buf->ll[r] = ll;
    }
}

static void vector_update(const pa_launch *L, const pa_task *T, const pa_tile *t, pa_worker_buf *buf,
                          const unsigned char *active) {
    const uint32_t d = L->c.head_dim, o_cols = round16(d);
    for (uint32_t r = 0; r < T->rows; ++r) {
        if (!active[r]) {
            continue;
        }
        const int first = !buf->started[r];
        float scale = first ? 0.0f : pa_expf(buf->dm[r]);
        L->ops->rescale(buf->go + (int64_t)r * d, t->o_tmp + (int64_t)r * o_cols, scale, (int32_t)d, first);
        buf->gl[r] = first ? buf->ll[r] : scale * buf->gl[r] + buf->ll[r];
        buf->started[r] = 1;
    }
}

/* The slot row (token x num_heads + head) of task row r. */
static uint64_t slot_row(const pa_launch *L, const pa_task *T, uint32_t r) {
    return (uint64_t)(r % L->c.q_len) * L->c.num_heads + T->head0 + r / L->c.q_len;
}

int32_t pa_write_row(const pa_launch *L, uint32_t slot, uint64_t row, const float *go, float gl, float gm,
                     pa_where w, pa_mock_error *e) {
    const int64_t d = L->c.head_dim;
    const int64_t o_off = (int64_t)pa_slot_pair(L, slot, PA_BF_ADDR_O_HI, PA_BF_ADDR_O_LO) + (int64_t)row * d;
    int32_t rc = pa_check_range(L, e, PA_ARG_O, o_off, d, w);
    if (rc) {
        return rc;
    }
    float lse = -INFINITY;
    if (!go) {
        memset(L->o + o_off, 0, (size_t)d * PA_HALF_BYTES);
    } else {
        float denom = gl;
        lse = logf(gl) + gm;
        if (L->c.sinks_dtype != PA_SINKS_NONE) { /* the sink joins the denominator only */
            const float sink = L->sinks[row % L->c.num_heads], m = sink > gm ? sink : gm;
            denom = gl + pa_expf(sink - gm);
            lse = logf(gl * pa_expf(gm - m) + pa_expf(sink - m)) + m;
        }
        L->ops->store_row(go, denom, (int32_t)d, L->o + o_off, L->c.bf16);
    }
    if (L->c.lse) {
        const int64_t at = (int64_t)slot * L->c.q_len * L->c.num_heads + (int64_t)row;
        if ((rc = pa_check_range(L, e, PA_ARG_LSE, at, 1, w))) {
            return rc;
        }
        L->lse[at] = lse;
    }
    return PA_OK;
}

/* Last tile: each row's output (and lse) into o, or the split's lse into l and fp32 go / gl into o_core (a row
 * this split has no key for: lse -inf and a zero row, which the combine weighs 0). */
static int32_t write_result(const pa_launch *L, const pa_task *T, pa_worker_buf *buf, pa_mock_error *e) {
    const int64_t d = L->c.head_dim, cn = L->c.kv_core_num;
    int32_t rc;
    if (!L->c.split_kv) {
        for (uint32_t r = 0; r < T->rows; ++r) {
            if ((rc = pa_write_row(L, T->slot, slot_row(L, T, r), buf->go + (int64_t)r * d, buf->gl[r], buf->gm[r],
                                   T->where, e))) {
                return rc;
            }
        }
        return PA_OK;
    }
    const uint64_t addr_l = pa_slot_pair(L, T->slot, PA_BF_ADDR_L_HI, PA_BF_ADDR_L_LO);
    const __int128 ofd = (__int128)pa_slot_pair(L, T->slot, PA_BF_ADDR_OFD_HI, PA_BF_ADDR_OFD_LO) * cn;
    for (uint32_t r = 0; r < T->rows; ++r) {
        const uint64_t row = slot_row(L, T, r);
        uint32_t l_off = (uint32_t)(addr_l + row * (uint64_t)cn + T->split); /* uint32 as in the kernel */
        __int128 oc_off = ofd + (__int128)row * cn * d + (__int128)T->split * d;
        if ((rc = pa_check_range(L, e, PA_ARG_L, l_off, 1, T->where)) ||
            (rc = pa_check_range(L, e, PA_ARG_O_CORE, oc_off, d, T->where))) {
            return rc;
        }
        float *dst = L->o_core + (int64_t)oc_off;
        if (!buf->started[r]) {
            L->l[l_off] = -INFINITY;
            memset(dst, 0, (size_t)d * sizeof *dst);
            continue;
        }
        L->l[l_off] = logf(buf->gl[r]) + buf->gm[r];
        for (int64_t c = 0; c < d; ++c) {
            dst[c] = buf->go[(int64_t)r * d + c] / buf->gl[r];
        }
    }
    return PA_OK;
}

static int32_t write_zero_rows(const pa_launch *L, const pa_task *T, pa_mock_error *e) {
    for (uint32_t r = 0; r < T->rows; ++r) {
        int32_t rc = pa_write_row(L, T->slot, slot_row(L, T, r), 0, 0.0f, 0.0f, T->where, e);
        if (rc) {
            return rc;
        }
    }
    return PA_OK;
}

/* Starts task T of a logical core: sets its token range, widens its q rows and returns the number of its
 * tiles in *tiles (0: nothing to run, or done already, as for an empty sequence). */
static int32_t start_task(const pa_launch *L, pa_task *T, uint32_t core, int whole, pa_worker_buf *buf,
                          uint32_t *tiles, pa_mock_error *e) {
    uint32_t kv_len = pa_slot_word(L, T->slot, PA_BF_KV_SEQLEN);
    *tiles = 0;
    T->where = (pa_where){(int32_t)core, (int32_t)T->slot, (int32_t)T->head0, (int32_t)T->split};
    T->rows = T->heads * L->c.q_len;
    T->kv_len = kv_len;
    if (kv_len == 0) { /* split-KV: the combine writes the zero row */
        return L->c.split_kv ? PA_OK : write_zero_rows(L, T, e);
    }
    const uint32_t first = pa_contract_first_token(&L->c, kv_len); /* pages before the window are never read */
    uint32_t kv_loop = pa_splits_of(L, kv_len);
    if (whole) {
        T->tok0 = first;
        T->len = kv_len - first;
    } else {
        if (T->split >= kv_loop) {
            return PA_OK;
        }
        T->tok0 = first + T->split * L->c.kv_split;
        T->len = T->split == kv_loop - 1 ? kv_len - T->tok0 : L->c.kv_split;
    }
    const int64_t d = L->c.head_dim, hq = L->c.num_heads, q_len = L->c.q_len;
    const int64_t q_base = (int64_t)pa_slot_pair(L, T->slot, PA_BF_ADDR_Q_HI, PA_BF_ADDR_Q_LO) + T->head0 * d;
    int32_t rc = pa_check_range(L, e, PA_ARG_Q, q_base, ((q_len - 1) * hq + T->heads) * d, T->where);
    if (rc) {
        return rc;
    }
    if (q_len == 1) {
        L->ops->widen(L->q + q_base, (int64_t)T->heads * d, buf->q, L->c.bf16);
    } else { /* row i * q_len + t <- token t's row of head head0 + i */
        for (uint32_t r = 0; r < T->rows; ++r) {
            L->ops->widen(L->q + q_base + ((int64_t)(r % q_len) * hq + r / q_len) * d, d, buf->q + (int64_t)r * d,
                          L->c.bf16);
        }
    }
    if (L->c.rope_dim) { /* MLA: the rope part of each row, at q's row offset in R-wide rows */
        const int64_t r_dim = L->c.rope_dim, rope_base = q_base / d * r_dim;
        if ((rc = pa_check_range(L, e, PA_ARG_Q_ROPE, rope_base, ((q_len - 1) * hq + T->heads) * r_dim, T->where))) {
            return rc;
        }
        for (uint32_t r = 0; r < T->rows; ++r) {
            L->ops->widen(L->q_rope + rope_base + ((int64_t)(r % q_len) * hq + r / q_len) * r_dim, r_dim,
                          buf->q_rope + (int64_t)r * r_dim, L->c.bf16);
        }
    }
    buf->q_is_packed = L->ops->pack_q && L->ops->pack_q(buf->q, (int32_t)T->rows, (int32_t)d, L->c.bf16,
                                                         buf->q_packed);
    buf->q_rope_is_packed = L->c.rope_dim && L->ops->pack_q &&
                            L->ops->pack_q(buf->q_rope, (int32_t)T->rows, (int32_t)L->c.rope_dim, L->c.bf16,
                                           buf->q_rope_packed);
    memset(buf->started, 0, T->rows);
    *tiles = (T->len + L->c.tile_tokens - 1) / L->c.tile_tokens;
    return PA_OK;
}

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
    uint32_t n_k;        /* alone: its K rows in the prefetch schedule (P.V starts there)                */
    unsigned char active[PA_TASK_ROWS];
} pa_core_run;

/* The tile's scratch and, for a core run alone, its prefetch schedule (the task's first rows prefetched: nothing
 * did yet). */
static int32_t tile_begin(const pa_launch *L, pa_core_run *c, int alone) {
    if (alone) {
        c->n_k = plan_prefetch(L, &c->T, c->index, c->buf);
        if (c->index == 0) {
            for (uint32_t i = 0; i < PA_PREFETCH_AHEAD_ROWS; ++i) {
                pa_prefetch_row(c->buf->rows[i], (int32_t)L->c.head_dim);
            }
        }
    }
    return map_tile(L, &c->T, c->core, c->index, &c->t, c->e);
}

/* Between the cube's passes: softmax of S into P, and P read back for P.V. */
static void tile_vector_stage1(const pa_launch *L, pa_core_run *c) {
    vector_softmax(L, &c->T, &c->t, c->buf, c->active);
    L->ops->widen(c->t.p, (int64_t)c->T.rows * c->t.cols, c->buf->p_f32, L->c.bf16);
}

/* After P.V: the online rescale; the last tile writes the task's result. */
static int32_t tile_end(const pa_launch *L, pa_core_run *c) {
    vector_update(L, &c->T, &c->t, c->buf, c->active);
    return c->index + 1 == c->tiles ? write_result(L, &c->T, c->buf, c->e) : PA_OK;
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
        int32_t rc = start_task(L, &c->T, c->core, whole, c->buf, &c->tiles, c->e);
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
 * not failed, block by block (block_rows).  A core alone prefetches its rows from its schedule (pos[0]).  A gang
 * first reads each block, the kv heads of all its cores, line by line in address order (touch_block), then each
 * core computes its kv heads of it from the cache.  Why: the cores together read a block kv head by kv head (a
 * slice of each row, rows apart), an order the hardware prefetchers do not stream, and software prefetches do
 * not train them; demand loads in address order do, so a gang's pages arrive at the rate of a sequential read
 * (kernel/mock/PERFORMANCE.md, step 24).  Each core's failure lands in fail[i]. */
static void segment_pass(const pa_launch *L, pa_core_run *runs, const uint32_t *member, uint32_t n, int32_t *fail,
                         const int64_t *id, int qk, uint32_t tok, uint32_t count, uint32_t *pos) {
    const pa_task *t_first = &runs[member[0]].T, *t_last = &runs[member[n - 1]].T;
    const uint32_t kvh0 = t_first->head0 / L->c.group, kvh1 = (t_last->head0 + t_last->heads - 1) / L->c.group;
    const uint32_t blk = block_rows(L);
    for (uint32_t b = 0; b < count; b += blk) {
        const uint32_t m = count - b < blk ? count - b : blk;
        if (n > 1) {
            touch_block(L, qk, id[0], tok + b, m, kvh0, kvh1);
        }
        for (uint32_t i = 0; i < n; ++i) {
            pa_core_run *c = &runs[member[i]];
            if (!fail[i]) {
                fail[i] = cube_block(L, &c->T, &c->t, c->buf, qk, id[i], tok + b, m, n > 1 ? 0 : pos, c->e);
            }
        }
    }
}

/* The cores of `runs` listed in `member` (n of them, one or more) run their current tiles, which cover the same
 * tokens of the same sequence, together: each cube pass goes page segment by segment (segment_pass), so the
 * gang reads each page row once, whole, while its lines stream in.  Each core computes exactly what it computes
 * alone (its own schedule, scratch and values; only the order of the work between cores changes).  A core that
 * fails stops (its code in fail[i]); the others go on. */
static void run_tiles(const pa_launch *L, pa_core_run *runs, const uint32_t *member, uint32_t n, int32_t *fail) {
    for (uint32_t i = 0; i < n; ++i) {
        fail[i] = tile_begin(L, &runs[member[i]], n == 1);
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
                    fail[i] = page_segment(L, &c->T, &c->t, tok, qk, &count, &id[i], c->e);
                }
            }
            if (count == 0) { /* every core has failed */
                return;
            }
            segment_pass(L, runs, member, n, fail, id, qk, tok, count, &pos);
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

/* Two cores' current tiles cover the same tokens of the same sequence. */
static int same_tokens(const pa_core_run *a, const pa_core_run *b) {
    return a->T.slot == b->T.slot && a->t.tok == b->t.tok && a->t.len == b->t.len;
}

/* The token range of a core's current tile, before tile_begin maps its scratch (for same_tokens). */
static void tile_tokens_of(const pa_launch *L, pa_core_run *c) {
    c->t.tok = c->T.tok0 + c->index * L->c.tile_tokens;
    c->t.len = c->T.tok0 + c->T.len - c->t.tok < L->c.tile_tokens ? c->T.tok0 + c->T.len - c->t.tok
                                                                   : L->c.tile_tokens;
}

/* Runs logical cores core0 .. core0 + n - 1 on this thread, tile by tile (each core's tasks in its own order,
 * with its own buffer and scratch, so its results are those of running it alone).  Cores next to each other
 * usually hold the head groups of one sequence: their tiles at the same tokens run together
 * (run_joint_tiles), the others one after the other.  A failing core stops; the others go on.  Returns the
 * lowest failing core's code (its record in errors[core - core0]) or PA_OK; *failed = that core. */
int32_t pa_run_gang_partials(const pa_launch *L, uint32_t core0, uint32_t n, pa_worker_buf *bufs,
                             pa_mock_error *errors, uint32_t *failed) {
    pa_core_run runs[PA_GANG_MAX];
    int32_t first_rc = PA_OK;
    *failed = L->c.block_dim;
    for (uint32_t i = 0; i < n; ++i) {
        runs[i] = (pa_core_run){.core = core0 + i, .process = core0 + i, .buf = bufs + i, .e = errors + i};
    }
    for (;;) {
        int32_t rc[PA_GANG_MAX];
        unsigned char placed[PA_GANG_MAX];
        uint32_t live = 0;
        for (uint32_t i = 0; i < n; ++i) {
            rc[i] = runs[i].phase == 2 ? PA_OK : core_advance(L, &runs[i]);
            placed[i] = rc[i] != PA_OK || runs[i].phase == 2;
            if (!placed[i]) {
                tile_tokens_of(L, &runs[i]);
                ++live;
            }
        }
        for (uint32_t i = 0; i < n; ++i) { /* groups of cores at the same tokens, in core order */
            uint32_t member[PA_GANG_MAX], m = 0;
            for (uint32_t j = i; !placed[i] && j < n; ++j) {
                if (!placed[j] && same_tokens(&runs[i], &runs[j])) {
                    member[m++] = j;
                }
            }
            if (m > 0) {
                int32_t fail[PA_GANG_MAX];
                run_tiles(L, runs, member, m, fail);
                for (uint32_t k = 0; k < m; ++k) {
                    rc[member[k]] = fail[k];
                }
            }
            for (uint32_t k = 0; k < m; ++k) {
                placed[member[k]] = 1;
                ++runs[member[k]].index;
            }
        }
        for (uint32_t i = 0; i < n; ++i) {
            if (rc[i] != PA_OK) {
                runs[i].phase = 2;
                if (core0 + i < *failed) {
                    *failed = core0 + i;
                    first_rc = rc[i];
                }
            }
        }
        if (live == 0) {
            return first_rc;
        }
    }
}

/* The number of consecutive logical cores one thread runs together: the binding's gang_cores, or by default
 * those of one sequence's head groups (and KV splits) in the first round of the former tasks, else of the tail
 * tasks, at most PA_GANG_MAX. */
uint32_t pa_gang_size(const pa_launch *L) {
    uint64_t hq = L->c.num_heads, g;
    if (L->cfg.gang_cores > 0) {
        g = (uint64_t)L->cfg.gang_cores;
    } else if (L->c.former_batch) {
        g = (hq + L->c.former_head - 1) / L->c.former_head * L->c.kv_core_num;
    } else if (L->c.tail_batch) {
        g = (hq + L->c.tail_head - 1) / L->c.tail_head;
    } else {
        g = 1;
    }
    return g < 1 ? 1 : g > PA_GANG_MAX ? PA_GANG_MAX : (uint32_t)g;
}
