/*
 * The partial phase of the mock device, one task's share: a task (heads x tokens of one sequence, docs/CONTRACT.md
 * "Task loop") started, then run tile by tile through the per-core scratch buffers at the kernel's strides
 * ("Per-core scratch"): S (fp32) -> P (IN dtype) -> O_tile (fp32) -> online rescale, and its result written.  An
 * MLA launch (ABI v4) adds each rope dot to its latent dot in S and reads the latent as V.  Which cores run when,
 * and in what order their tiles read the pages, is mock_gang.c's.
 */
#include <math.h>
#include <string.h>

#include "mock_task.h"

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
uint32_t pa_block_rows(const pa_launch *L) {
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
    const uint32_t kvh0 = T->head0 / L->c.group, kvh1 = (T->head0 + T->heads - 1) / L->c.group, blk = pa_block_rows(L);
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
uint32_t pa_plan_prefetch(const pa_launch *L, const pa_task *T, uint32_t index, pa_worker_buf *buf) {
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
 * cannot find them); without one (the block was read already: a gang's, or a whole-row core's), nothing. */
int32_t pa_cube_block(const pa_launch *L, const pa_task *T, const pa_tile *t, pa_worker_buf *buf, int qk,
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
        const int64_t bad = pa_first_non_finite(L, kv, count, row_stride, d);
        if (bad >= 0) {
            const int64_t at = base + (int64_t)kvh * d + bad / d * row_stride + bad % d;
            return pa_fail(e, PA_ERR_NON_FINITE, qk ? PA_ARG_K : PA_ARG_V, at, L->c.extent[qk ? PA_ARG_K : PA_ARG_V],
                           T->where, "%s element %lld (bits 0x%04x) is not finite: seq %d, kv head %u, token %lld, "
                           "column %lld; a NaN or inf in the valid K or V is unsupported input (docs/CONTRACT.md)",
                           qk ? "k" : "v", (long long)at, cache[at], T->where.seq, kvh, (long long)(tok + bad / d),
                           (long long)(bad % d));
        }
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
int32_t pa_page_segment(const pa_launch *L, const pa_task *T, const pa_tile *t, uint32_t tok, int qk,
                        uint32_t *count, int64_t *id, pa_mock_error *e) {
    const uint32_t off = tok % L->c.block_size, left = t->tok + t->len - tok;
    *count = L->c.block_size - off < left ? L->c.block_size - off : left;
    if (qk) {
        pa_count_pages(1);
    }
    return block_id(L, T, tok, id, e);
}

void pa_tile_span(const pa_launch *L, const pa_task *T, uint32_t index, pa_tile *t) {
    t->tok = T->tok0 + index * L->c.tile_tokens;
    t->len = T->tok0 + T->len - t->tok < L->c.tile_tokens ? T->tok0 + T->len - t->tok : L->c.tile_tokens;
    t->cols = round16(t->len);
}

int32_t pa_map_tile(const pa_launch *L, const pa_task *T, uint32_t core, uint32_t index, pa_tile *t,
                    pa_mock_error *e) {
    const uint32_t half = index & 1u;
    pa_tile_span(L, T, index, t);
    int64_t s_off = (int64_t)(2 * core + half) * (int64_t)L->c.s_half;
    int64_t p_off = (int64_t)(2 * core + half) * (int64_t)L->c.p_half;
    /* an MLA task (ABI v5) may hold rows x 512, a whole PA_O_TMP_CORE_STRIDE_ELEMS: its tiles use the first of its
     * core's two accumulators (PA_MLA_O_TMP_CORE_STRIDE_ELEMS) */
    int64_t o_off = L->c.rope_dim ? (int64_t)core * PA_MLA_O_TMP_CORE_STRIDE_ELEMS
                                  : (int64_t)core * PA_O_TMP_CORE_STRIDE_ELEMS + half * PA_O_TMP_HALF_ELEMS;
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
void pa_vector_softmax(const pa_launch *L, const pa_task *T, const pa_tile *t, pa_worker_buf *buf,
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

void pa_vector_update(const pa_launch *L, const pa_task *T, const pa_tile *t, pa_worker_buf *buf,
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

/* Last tile: each row's output (and lse) into o (without split-KV, or a whole task of the tail pass), or the
 * split's lse into l and fp32 go / gl into o_core (a row this split has no key for: lse -inf and a zero row, which
 * the combine weighs 0). */
int32_t pa_write_result(const pa_launch *L, const pa_task *T, pa_worker_buf *buf, pa_mock_error *e) {
    const int64_t d = L->c.head_dim, cn = L->c.kv_core_num;
    int32_t rc;
    if (!L->c.split_kv || T->whole) {
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
int32_t pa_start_task(const pa_launch *L, pa_task *T, uint32_t core, int whole, pa_worker_buf *buf,
                      uint32_t *tiles, pa_mock_error *e) {
    uint32_t kv_len = pa_slot_word(L, T->slot, PA_BF_KV_SEQLEN);
    *tiles = 0;
    T->where = (pa_where){(int32_t)core, (int32_t)T->slot, (int32_t)T->head0, (int32_t)T->split};
    T->rows = T->heads * L->c.q_len;
    T->kv_len = kv_len;
    T->whole = whole;
    if (kv_len == 0) { /* a split sequence's zero row is the combine's */
        return L->c.split_kv && !whole ? PA_OK : write_zero_rows(L, T, e);
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
    for (uint32_t tq = 0; tq < q_len; ++tq) { /* token tq's rows of heads head0.. are contiguous */
        const int64_t bad = pa_first_non_finite(L, L->q + q_base + (int64_t)tq * hq * d, T->heads, d, (uint32_t)d);
        if (bad >= 0) {
            const int64_t at = q_base + (int64_t)tq * hq * d + bad;
            return pa_fail(e, PA_ERR_NON_FINITE, PA_ARG_Q, at, L->c.extent[PA_ARG_Q], T->where,
                           "q element %lld (bits 0x%04x) is not finite: seq %d, q head %lld, query token %u, column "
                           "%lld; a NaN or inf in the valid Q is unsupported input (docs/CONTRACT.md)",
                           (long long)at, L->q[at], T->where.seq, (long long)(T->head0 + bad / d), tq,
                           (long long)(bad % d));
        }
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
