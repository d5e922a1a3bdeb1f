/*
 * Mock-device exports beyond the kernel ABI (kernel/pa_kernel_abi.h), exported by the simulation too.  The
 * launcher mirrors these structs once, in launcher/mock_api.py (ctypes), and compares sizes and field offsets
 * with pa_mock_struct_layout() (kernel/contract/pa_abi_exports.c) whenever it loads a library.
 *
 * Protocol per launch (both calls on the same host thread):
 *   pa_mock_bind(&config);      extents of the buffers about to be passed, num_blocks, checked mode
 *   call_kernel(block_dim, stream, ...);   returns PA_OK or PA_ERR_*; on error pa_mock_last_error()
 * The binding (a copy of the struct, kept until the next pa_mock_bind) and the last error are thread-local,
 * so runners on different host threads do not interfere.  A call_kernel without a binding on its thread
 * returns PA_ERR_BAD_LAUNCH.
 *
 * What is checked in which mode:
 *   always     the kernel contract, by the checker both libraries share (kernel/contract/pa_contract.c),
 *              before any core runs: the key, every header word against the ABI's limits, the gather map,
 *              NULL pointers and pointer hygiene (a non-NULL mask pointer is an error), every sequence's
 *              q/o/l/o_core offsets and block-table row against the ABI layout, and every buffer's extent
 *              against what the launch needs.  While cores run: every block id a sequence uses against
 *              num_blocks.
 *   checked    in addition, every access the kernel makes (q, o, k, v, s, p, o_tmp, o_core, l, block_tables)
 *              against the extent of its slot, in the slot's element type, one check per task or tile range:
 *              this checks the kernel's own address arithmetic, which the contract cannot.  And every element of
 *              the valid Q, K and V a task reads is finite (PA_ERR_NON_FINITE names buffer, sequence, head and
 *              token: a NaN or inf there is unsupported input, docs/CONTRACT.md).
 * Errors are deterministic: a launch reports the first failing check of the lowest logical core.
 */
#ifndef PA_MOCK_API_H
#define PA_MOCK_API_H

#include <stdint.h>
#include "pa_kernel_abi.h"

/* SIMD paths of the mock's arithmetic.  The exact paths (portable, AVX2, AVX-512, NEON) give bitwise-identical
 * results (same operation order, fused multiply-adds everywhere), so tests can compare them.  The native paths use the
 * CPU's own bf16 units (AVX512-BF16 dot products, AMX tile products) for bf16 launches and sum in the hardware's
 * order: as accurate, not the same bits.  AUTO picks AMX where present, then AVX512-BF16 on AMD CPUs (where its dot
 * products run at the FMA's instruction rate), else the widest exact path (NEON on aarch64; pa_math_best_isa in
 * mock/mock_dispatch.c; kernel/mock/PERFORMANCE.md steps 22, 23 and 27). */
#define PA_MOCK_ISA_AUTO 0
#define PA_MOCK_ISA_PORTABLE 1
#define PA_MOCK_ISA_AVX2 2       /* AVX2 + FMA + F16C                                                  */
#define PA_MOCK_ISA_AVX512 3     /* AVX-512 F + BW + VL                                                 */
#define PA_MOCK_ISA_AVX512BF16 4 /* native: AVX-512 + AVX512-BF16 dot products for bf16 Q.K and P.V     */
#define PA_MOCK_ISA_AMX 5        /* native: AVX-512 + AMX-BF16 tile products for bf16 Q.K and P.V          */
#define PA_MOCK_ISA_NEON 6       /* aarch64 AdvSIMD (exact; fp16 converted natively, bf16 widened)         */
#define PA_MOCK_NUM_ISAS 7

typedef struct pa_mock_config {
    uint64_t extent_bytes[PA_NUM_PTR_ARGS]; /* bytes behind each pointer slot; 0 for a NULL slot         */
    int64_t num_blocks;                     /* pages in the K/V cache: block ids are checked in any mode */
    int32_t checked;                        /* 1: every buffer access is bounds-checked (default)        */
    int32_t num_threads;                    /* host worker threads; 0 = as many as CPUs                  */
    int32_t isa;                            /* PA_MOCK_ISA_*; 0 = AUTO                                    */
    int32_t gang_cores;                     /* logical cores a host thread runs together (reading each KV
                                             * row once for all of them); 0 = the mock's choice (a
                                             * sequence's head groups, or a KV split's, at most 4), 1 = one
                                             * at a time; never more than those head groups.  The results
                                             * do not depend on it                                        */
} pa_mock_config;

#define PA_MOCK_MESSAGE_BYTES 256

typedef struct pa_mock_error {
    int32_t code;            /* PA_ERR_*                                                                  */
    int32_t arg_slot;        /* PA_ARG_* of the buffer, -1 if none                                        */
    int64_t element_offset;  /* first offending element offset in the slot's element type, -1 if none    */
    int64_t extent_elems;    /* the buffer's extent in the same unit, -1 if none                          */
    int32_t core;            /* block_idx of the logical core, -1 if none                                 */
    int32_t seq;             /* sequence (slot) index, -1 if none                                         */
    int32_t head;            /* q head, -1 if none                                                        */
    int32_t split;           /* KV split index, -1 if none                                                */
    char message[PA_MOCK_MESSAGE_BYTES]; /* NUL-terminated human-readable description                     */
} pa_mock_error;

/* pa_mock_struct_layout() writes, in this order: sizeof(pa_mock_config), offsetof extent_bytes, num_blocks,
 * checked, num_threads, isa, gang_cores; sizeof(pa_mock_error), offsetof code, arg_slot, element_offset,
 * extent_elems, core, seq, head, split, message. */
#define PA_MOCK_LAYOUT_WORDS 17

#ifdef __cplusplus
extern "C" {
#endif
int32_t pa_mock_bind(const pa_mock_config *config);   /* PA_OK; copies the struct                          */
int32_t pa_mock_last_error(pa_mock_error *out);        /* copies the calling thread's last error record    */
/* The host probes (the mock only; the benchmark reads them from the mock library whatever the backend): */
/* Read bandwidth of this host in GB/s (1e9 bytes/s): `threads` threads (0 = CPUs) sum a `bytes` buffer,
 * best of `reps` passes after one warm pass.  The benchmark's physical limit on the mock. */
double pa_mock_read_bandwidth_gbs(uint64_t bytes, int32_t threads, int32_t reps);
/* fp32 multiply-add GFLOP/s of `threads` threads (0 = every CPU) on the widest vector unit, best of `reps`. */
double pa_mock_fma_peak_gflops(int32_t threads, int32_t reps);
/* Writes min(n, PA_MOCK_LAYOUT_WORDS) words to out; returns PA_MOCK_LAYOUT_WORDS. */
int32_t pa_mock_struct_layout(int64_t *out, int32_t n);
/* 1 if the CPU (and this build) can run PA_MOCK_ISA_* `isa`, else 0; AUTO resolves to the best one. */
int32_t pa_mock_isa_available(int32_t isa);
/* The PA_MOCK_ISA_* AUTO resolves to on this CPU. */
int32_t pa_mock_best_isa(void);
#ifdef __cplusplus
}
#endif

#endif /* PA_MOCK_API_H */
