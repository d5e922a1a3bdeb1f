/*
 * Exports of the simulation build (build/lib/libpa_sim.so) beyond the kernel ABI and the mock API.
 *
 * Per-launch figures that predict NPU behaviour from the device-path simulation of the same kernel source:
 * traffic between global memory and the on-chip buffers, cube<->vector hand-offs, and the peak on-chip
 * buffer use of any one core.  pa_sim_stats() copies the figures of the calling thread's last call_kernel.
 */
#ifndef PA_SIM_API_H
#define PA_SIM_API_H

#include <stdint.h>

/* on-chip regions, in this order */
#define PA_SIM_REGION_UB 0   /* vector core unified buffer, 192 KB on A2/A3 */
#define PA_SIM_REGION_L1 1   /* cube L1, 512 KB */
#define PA_SIM_REGION_L0A 2  /* cube left-operand buffer, 64 KB */
#define PA_SIM_REGION_L0B 3  /* cube right-operand buffer, 64 KB */
#define PA_SIM_REGION_L0C 4  /* cube accumulator, 128 KB */
#define PA_SIM_REGIONS 5

typedef struct pa_sim_stats {
    uint64_t gm_read_bytes;        /* every GM -> on-chip transfer (loads and scalar reads), all cores          */
    uint64_t gm_write_bytes;       /* every on-chip -> GM transfer                                              */
    uint64_t kv_read_bytes;        /* the K/V cache share of gm_read_bytes (MLA: the latent and rope caches)    */
    uint64_t scratch_bytes;        /* s/p/o_tmp traffic (both directions): the price of the cube<->vector split */
    uint64_t partial_bytes;        /* o_core/l traffic (both directions): the price of split-KV                 */
    uint64_t handoffs;             /* cube<->vector flag signals (one per direction and hand-off unit)          */
    uint64_t units;                /* level-1 hand-off units processed (per cube core, summed)                  */
    uint64_t tasks;                /* (sequence, head range, KV range) tasks run by the cube cores              */
    uint64_t matmuls;              /* cube TMATMUL instructions (level-2 sub-tiles)                             */
    uint64_t score_tiles;          /* S pieces the vector sub-cores softmax (first pass; device path only)      */
    uint64_t masked_score_tiles;   /* of them, those with masked columns (device path only)                     */
    uint32_t peak_bytes[PA_SIM_REGIONS]; /* highest end offset of any buffer assigned on any core, per region   */
    uint32_t capacity_bytes[PA_SIM_REGIONS]; /* the region sizes the peaks must stay below                     */
    uint32_t block_dim;            /* clusters launched                                                         */
    uint32_t threads;              /* host threads used (3 per cluster)                                         */
    double wall_seconds;           /* host time of the simulated launch                                         */
} pa_sim_stats;

/* One event of a launch's instruction trace (pa_sim_trace_*): what the timing model replays.  Per core role,
 * in program order: instructions with their pipe, shape and bytes, intra-core flags and barriers, cross-core
 * signals and waits.  tests/test_timing_replay.py keeps the numpy mirror (timing/trace.py) equal to it. */
#define PA_SIM_EV_INSTR 0    /* an instruction on `pipe`                                                   */
#define PA_SIM_EV_SET 1      /* set_flag(src, dst, id)                                                    */
#define PA_SIM_EV_WAIT 2     /* wait_flag(src, dst, id)                                                   */
#define PA_SIM_EV_BARRIER 3  /* pipe_barrier(pipe)                                                        */
#define PA_SIM_EV_SIGNAL 4   /* cross-core set of flag `id` from `pipe`; dst 0: cube -> vectors, 1: -> cube */
#define PA_SIM_EV_XWAIT 5    /* cross-core wait for flag `id`; dst as for SIGNAL                           */
#define PA_SIM_EV_ALLVEC 6   /* all-vector barrier, signalled from `pipe`                                  */
typedef struct pa_sim_trace_event {
    uint64_t bytes;       /* bytes the instruction moves (transfers) or touches (compute)                    */
    uint64_t gm_offset;   /* GM transfers: byte offset of the first burst inside its buffer (alignment)        */
    uint32_t rows, cols;  /* shape: valid rows x columns (matmul: m x n; transfers: rows x elements per row) */
    uint32_t k;           /* matmul inner length (the device rounds it up to 16)                             */
    uint32_t burst_bytes; /* GM transfers: contiguous bytes per burst                                        */
    uint32_t bursts;      /* GM transfers: bursts                                                            */
    uint16_t core;        /* cluster                                                                         */
    uint16_t id;          /* flag event id or cross-core flag id                                             */
    uint8_t role;         /* 0 cube, 1 vector 0, 2 vector 1                                                  */
    uint8_t kind;         /* PA_SIM_EV_*                                                                     */
    uint8_t pipe;         /* 0 S, 1 MTE2, 2 MTE1, 3 M, 4 FIX, 5 V, 6 MTE3, 7 all                             */
    uint8_t op;           /* instruction: index into pa_sim_trace_op_name                                   */
    uint8_t src, dst;     /* flag pipes; cross-core direction                                                */
    uint8_t elem_bytes;   /* element size of the shape                                                       */
    uint8_t slot;         /* GM argument slot of a transfer, 255 for none                                    */
} pa_sim_trace_event;

#ifdef __cplusplus
extern "C" {
#endif
/* Trace recording: on != 0 records every later launch of the calling thread (checked or not). */
void pa_sim_trace_enable(int32_t on);
int64_t pa_sim_trace_count(void);                                    /* events of the last launch            */
int64_t pa_sim_trace_copy(pa_sim_trace_event *out, int64_t capacity); /* copies; returns the number copied   */
const char *pa_sim_trace_op_name(int32_t op);                        /* NULL past the last op               */
int32_t pa_sim_trace_event_bytes(void);                              /* sizeof(pa_sim_trace_event)          */
int32_t pa_sim_stats_get(pa_sim_stats *out); /* PA_OK, or PA_ERR_BAD_LAUNCH when no launch ran on this thread */
/* A wait nothing can satisfy ends the launch at once with a DEADLOCK (PA_ERR_INTERNAL): the simulation never hangs
 * and has no timeout.  Env PA_SIM_DROP_SIGNAL=n loses the n-th cross-core message of each launch (the deadlock's
 * negative control). */
/* Synchronisation edges of the kernel (kernel/npu/pa_sync.hpp: a set_flag with its wait_flag, a barrier, or a
 * cross-core signal with its wait).  pa_sim_drop_sync(id) removes both ends of edge `id` from every later
 * launch of the process (-1 restores all): in checked mode the hazard checker must then fail the launch with
 * PA_ERR_HAZARD.  Checked mode (pa_mock_config.checked) turns the hazard checker on. */
int32_t pa_sim_sync_point_count(void);
void pa_sim_drop_sync(int32_t id);
/* Mutations of one edge's meaning, for the checker's negative controls (kind -1 or edge -1: none):
 * the flag set and waited from the wrong source pipe (the scalar pipe), the flag on event 0 (with a ping-pong
 * half's "1" edge: both halves on one event), a cross-core signal issued from another pipe (the scalar pipe),
 * a cross-core edge's waits skipped while its sets stay (counters left raised: TRAILING_FLAG,
 * or past 15 on a long launch), a write-after-read flag not drained at core exit (TRAILING_FLAG). */
#define PA_SIM_MUTATE_WRONG_SOURCE 1
#define PA_SIM_MUTATE_SHARED_EVENT 2
#define PA_SIM_MUTATE_SIGNAL_PIPE 3
#define PA_SIM_MUTATE_SKIP_CROSS_WAIT 4
#define PA_SIM_MUTATE_NO_DRAIN 5
#define PA_SIM_MUTATIONS 6
void pa_sim_mutate_sync(int32_t kind, int32_t edge);
/* Negative controls of the kernel's L1 zero fills, a mask: bit 0 (1) skips the fills of the padding a P.V over a
 * ragged tail multiplies (mad ignores k padding, as ASC documents it, so the output stays right); bit 1 (2) the
 * fills of the operand columns and rows a matmul multiplies but never stores (past a piece's end, past D, rows
 * 1-15 of a one-row operand: CubeTiles), which mad's operand check then faults on (NON_FINITE). */
void pa_sim_skip_zero_padding(int32_t on);
/* Negative control of the store-atomic reset: on != 0 skips the kernel's
 * set_atomic_none at entry, so its first GM store meets the mode a previous kernel left and the launch fails. */
void pa_sim_keep_inherited_atomics(int32_t on);
/* Negative control of initcheck: every row-major load from GM argument `slot` loads one
 * row fewer than its tile holds (-1: none); in checked mode the launch then fails with an UNINIT fault. */
void pa_sim_shorten_load(int32_t slot);
/* The race library (pa_sim_races.cpp): small kernels with one synchronisation defect each and a fixed twin, each
 * run as a checked one-cluster launch.  pa_sim_race_run returns PA_OK (fixed), PA_ERR_HAZARD (a race) or
 * PA_ERR_INTERNAL (a DEADLOCK: the wait no set satisfies), PA_ERR_BAD_LAUNCH for an index out of range, and fills
 * *err when err is not NULL. */
struct pa_mock_error;
int32_t pa_sim_race_count(void);
const char *pa_sim_race_name(int32_t index);
int32_t pa_sim_race_run(int32_t index, int32_t fixed, struct pa_mock_error *err);
#ifdef __cplusplus
}
#endif

#endif /* PA_SIM_API_H */
