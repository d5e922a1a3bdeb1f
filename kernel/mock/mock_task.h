/*
 * Between the two halves of the mock's partial phase: one task's tile pipeline (mock_task.c) and the cores that
 * run tasks on a host thread, alone or in gangs (mock_gang.c).
 */
#ifndef PA_MOCK_TASK_H
#define PA_MOCK_TASK_H

#include "mock_internal.h"

typedef struct pa_task {
    uint32_t slot, head0, heads, split;
    uint32_t rows;        /* heads x q_len: row i * q_len + t is head head0 + i, query token t            */
    uint32_t kv_len;      /* the sequence's context length (its query tokens are its last q_len)         */
    uint32_t tok0, len;   /* token range of this task                                                  */
    int whole;            /* the sequence's whole range (BN, or a split-KV launch's tail pass, ABI v6): its
                             rows go straight to o, no partial                                         */
    pa_where where;
} pa_task;

typedef struct pa_tile {
    uint32_t tok, len, cols;   /* first token, tokens, round16(tokens)                                   */
    float *s, *o_tmp;
    uint16_t *p;
} pa_tile;

/* Rows of a block: a page segment is computed block by block, every kv head of a block before the next block. */
uint32_t pa_block_rows(const pa_launch *L);
/* The prefetch schedule of tile `index` of task T (pa_worker_buf.rows); returns the number of its K rows. */
uint32_t pa_plan_prefetch(const pa_launch *L, const pa_task *T, uint32_t index, pa_worker_buf *buf);
/* Q.K (qk = 1) or P.V of tokens [tok, tok + count) of one page (block id `id`) for every kv head of task T;
 * with a schedule place pos, the rows ahead in the schedule are prefetched. */
int32_t pa_cube_block(const pa_launch *L, const pa_task *T, const pa_tile *t, pa_worker_buf *buf, int qk, int64_t id,
                      uint32_t tok, uint32_t count, uint32_t *pos, pa_mock_error *e);
/* The page segment of tile t that starts at token `tok`: its token count and block id (checked). */
int32_t pa_page_segment(const pa_launch *L, const pa_task *T, const pa_tile *t, uint32_t tok, int qk, uint32_t *count,
                        int64_t *id, pa_mock_error *e);
/* The tokens of tile `index` of task T (tok, len, cols). */
void pa_tile_span(const pa_launch *L, const pa_task *T, uint32_t index, pa_tile *t);
/* Tile `index` of task T on logical core `core`: its tokens (pa_tile_span) and its scratch (checked). */
int32_t pa_map_tile(const pa_launch *L, const pa_task *T, uint32_t core, uint32_t index, pa_tile *t,
                    pa_mock_error *e);
/* Vector stage 1: softmax of S into P (active[r]: row r sees a key of the tile). */
void pa_vector_softmax(const pa_launch *L, const pa_task *T, const pa_tile *t, pa_worker_buf *buf,
                       unsigned char *active);
/* Vector stage 2: the online rescale of the running output with o_tmp. */
void pa_vector_update(const pa_launch *L, const pa_task *T, const pa_tile *t, pa_worker_buf *buf,
                      const unsigned char *active);
/* The task's result after its last tile: outputs (and lse), or the split's partials. */
int32_t pa_write_result(const pa_launch *L, const pa_task *T, pa_worker_buf *buf, pa_mock_error *e);
/* Starts task T of logical core `core` (whole: the sequence's tokens, else its split's); *tiles = its tiles (0:
 * nothing to run). */
int32_t pa_start_task(const pa_launch *L, pa_task *T, uint32_t core, int whole, pa_worker_buf *buf, uint32_t *tiles,
                      pa_mock_error *e);

#endif /* PA_MOCK_TASK_H */
