/*
 * Internal declarations of the mock NPU device: the decoded launch, per-thread state, error helpers.
 * The device model follows kernel/pa_kernel_abi.h and docs/CONTRACT.md.
 */
#ifndef PA_MOCK_INTERNAL_H
#define PA_MOCK_INTERNAL_H

#include <stdint.h>

#include "pa_mock_api.h"
#include "contract/pa_contract.h"
#include "mock_math.h"

#define PA_EXPORT __attribute__((visibility("default")))
#define PA_NONE (-1)
#define PA_HALF_BYTES 2
#define PA_CACHE_LINE 64
/* Word-pair helpers: 64-bit tiling offsets are stored (hi, lo). */
#define PA_WORD_BITS 32

/* One launch: the contract checker's decoding of the tiling words (kernel/contract), the binding, the typed
 * buffer pointers and the arithmetic path. */
typedef struct pa_launch {
    pa_contract c;
    pa_mock_config cfg;
    const uint32_t *tiling;
    const uint16_t *q, *k, *v;
    const uint16_t *q_rope, *k_rope; /* v4 MLA: the rope parts (c.rope_dim > 0), else NULL                  */
    const int32_t *block_tables;
    uint16_t *o, *p;
    float *s, *o_tmp, *o_core, *l, *lse;
    float sinks[PA_MAX_NUM_HEADS];   /* v3: each head's sink logit in fp32; used when c.sinks_dtype is set  */
    int checked;
    const pa_math_ops *ops;
} pa_launch;

/* Where an access happens, for the error record. */
typedef struct pa_where {
    int32_t core, seq, head, split;
} pa_where;

#define PA_PREFETCH_AHEAD_ROWS 32 /* rows between a prefetch and the use of its data                     */
/* Bytes of KV rows (whole rows) in a block of a page segment (mock_task.c, pa_block_rows): a gang reads a block in
 * address order before its cores compute on it, so a block stays in a 512 KiB L2 with room for the scratch. */
#define PA_READ_BLOCK_BYTES (256 * 1024)

/* The widest q/o row of any launch: MLA's latent (GQA heads are at most PA_MAX_HEAD_DIM). */
#define PA_MOCK_MAX_ROW_DIM PA_MLA_LATENT_DIM
/* Elements of a task's q rows (and of its running output): rows x D is at most o_tmp's half (the contract), or an
 * MLA task's PA_MLA_MAX_TASK_ROWS x 512 (ABI v5: o_tmp's whole core stride). */
#define PA_TASK_ELEMS                                                                                              \
    (PA_MLA_MAX_TASK_ROWS * PA_MLA_LATENT_DIM > PA_O_TMP_HALF_ELEMS ? PA_MLA_MAX_TASK_ROWS * PA_MLA_LATENT_DIM      \
                                                                     : PA_O_TMP_HALF_ELEMS)

/* Rows of one task: q heads x query tokens, row i * q_len + t is head head0 + i, token t (the rows that
 * share a kv head are adjacent). */
#define PA_TASK_ROWS (PA_MAX_TASK_ROWS > PA_HEAD_SPLIT_LIMIT ? PA_MAX_TASK_ROWS : PA_HEAD_SPLIT_LIMIT)

/* Scratch of one host worker thread (the vector core's unified buffer and the cube's Q staging). */
typedef struct pa_worker_buf {
    float q[PA_TASK_ELEMS];                    /* task q rows in fp32                                    */
    float go[PA_TASK_ELEMS];                   /* running output                                         */
    float q_rope[PA_TASK_ROWS * PA_MLA_ROPE_DIM]; /* MLA: the task's q rope rows in fp32                */
    /* q and q rope rows as the path's pack_q packed them (rows rounded up to a tile), when it did */
    uint16_t q_packed[PA_TASK_ELEMS + PA_AMX_TILE_ROWS * PA_MOCK_MAX_ROW_DIM];
    uint16_t q_rope_packed[(PA_TASK_ROWS + PA_AMX_TILE_ROWS) * PA_MLA_ROPE_DIM];
    int q_is_packed, q_rope_is_packed;
    float s_rope[PA_S_HALF_ELEMS];             /* MLA: a page segment's rope scores, added into S        */
    float gm[PA_TASK_ROWS], gl[PA_TASK_ROWS], dm[PA_TASK_ROWS], ll[PA_TASK_ROWS];
    unsigned char started[PA_TASK_ROWS];       /* the row has met a key it may see (window, causality)   */
    float p_f32[PA_S_HALF_ELEMS];                    /* P of one tile, read back and widened for P.V    */
    /* Rows in the order the cube reads them, for a core run alone on slices of rows: this tile's K (Q.K), its V
     * (P.V), then the next tile's first K rows; entry i + PA_PREFETCH_AHEAD_ROWS is prefetched while row i is
     * used.  (kv heads x tokens of a tile <= heads x round16(tokens) <= PA_S_HALF_ELEMS.) */
    const uint16_t *rows[2 * PA_S_HALF_ELEMS + 2 * PA_PREFETCH_AHEAD_ROWS];
} pa_worker_buf;

/* ---- mock_state.c ---- */
const pa_mock_config *pa_state_binding(void);
pa_where pa_nowhere(void);
pa_mock_error *pa_state_error(void);
/* An error found while executing a launch, at coordinates w (the record is filled by the contract's filler). */
int32_t pa_fail(pa_mock_error *e, int32_t code, int32_t slot, int64_t offset, int64_t extent, pa_where w,
                const char *fmt, ...) __attribute__((format(printf, 7, 8)));

/* ---- mock_launch.c ---- */
/* The contract check (kernel/contract), then what only the mock needs: its SIMD path and typed pointers. */
int32_t pa_prepare_launch(pa_launch *L, uint32_t block_dim, void *const ptrs[PA_NUM_PTR_ARGS], pa_mock_error *e);

/* ---- mock_check.c ---- */
uint32_t pa_slot_word(const pa_launch *L, uint32_t slot, uint32_t field);
uint64_t pa_slot_pair(const pa_launch *L, uint32_t slot, uint32_t hi_field, uint32_t lo_field);
uint32_t pa_gather(const pa_launch *L, uint32_t position);
uint32_t pa_splits_of(const pa_launch *L, uint32_t kv_len);

/* 1 if [start, start + count) lies inside slot's extent (or the launch is unchecked), else fills e. */
int32_t pa_check_range(const pa_launch *L, pa_mock_error *e, int32_t slot, __int128 start, __int128 count,
                       pa_where w);
int32_t pa_check_range_always(const pa_launch *L, pa_mock_error *e, int32_t slot, __int128 start,
                              __int128 count, pa_where w);
/* Checked mode: the first non-finite element of rows x cols 16-bit floats (fp16 or bf16 bits, row pitch `pitch`
 * elements) as row * cols + col, or -1; unchecked mode: -1 without reading. */
int64_t pa_first_non_finite(const pa_launch *L, const uint16_t *x, uint32_t rows, int64_t pitch, uint32_t cols);

/* ---- mock_gang.c / mock_combine.c: the logical cores' share of each phase ---- */
#define PA_GANG_MAX 4 /* logical cores one host thread runs together (mock_gang.c)                       */
/* Runs the n logical cores cores[] (a gang) on this thread; errors is indexed by core. */
int32_t pa_run_gang_partials(const pa_launch *L, const uint32_t *cores, uint32_t n, pa_worker_buf *bufs,
                             pa_mock_error *errors, uint32_t *failed);
/* The gangs of the partial phase: how many, and gang g's logical cores (ascending; returns how many, 0 to
 * PA_GANG_MAX).  Every core is in exactly one gang. */
uint32_t pa_gang_count(const pa_launch *L);
uint32_t pa_gang_cores(const pa_launch *L, uint32_t gang, uint32_t *cores);
int32_t pa_run_core_combine(const pa_launch *L, uint32_t core, pa_mock_error *e);
/* Row r of slot `slot` (r = token x num_heads + head): its final output from the running (go, gl, gm) or, with
 * go NULL, a zero row; writes the lse when the launch asks for it.  The sink joins the denominator here. */
int32_t pa_write_row(const pa_launch *L, uint32_t slot, uint64_t r, const float *go, float gl, float gm,
                     pa_where w, pa_mock_error *e);
/* Pages of K the launch's Q.K passes read (one per task and page), for pa_mock_kv_pages_read. */
void pa_count_pages(uint64_t pages);

/* ---- mock_pool.c ---- */
int32_t pa_host_threads(int32_t requested);
/* Runs phase(L, core, ...) for core in [0, block_dim) on host threads; the lowest failing core's record. */
int32_t pa_run_phase(const pa_launch *L, int combine, pa_mock_error *e);

#endif /* PA_MOCK_INTERNAL_H */
