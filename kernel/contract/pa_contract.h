/*
 * The kernel contract checker: one implementation of every obligation the host has towards a kernel under
 * the kernel ABI (kernel/pa_kernel_abi.h, docs/CONTRACT.md), linked into the mock device (gcc, as C) and into the
 * simulation of our NPU kernel (clang, as C++).  Both libraries call pa_contract_check() once per launch,
 * before any core runs, so a launch that breaks the contract gets the same error code, buffer and
 * coordinates from both, whatever the kernel behind it would have done.
 *
 * What it proves, in this order (the first failure is reported): a binding exists, num_blocks and block_dim
 * are usable, the tiling pointer and header are there, the key is valid, the pointers the key needs are
 * non-NULL and the mask pointer is NULL, the decode features are valid and executed by the calling library
 * (`features`, PA_FEATURE_* bits), every header word (sizes, shape limits, passes, tile rule, split
 * count, scratch halves), the gather map is a permutation, every sequence's words (its pages fit the table
 * row, its q/o/l/o_core offsets sit where the layout puts them), and every buffer is large enough for the
 * launch.  What it does not prove: the block ids inside the block table (the kernels check each id they
 * read) and the kernel's own address arithmetic (checked mode of each library checks every access).
 *
 * The file compiles as C11 and as C++ (no designated array initialisers, explicit casts from void *).
 */
#ifndef PA_CONTRACT_H
#define PA_CONTRACT_H

#include <stdarg.h>
#include <stdint.h>

#include "pa_kernel_abi.h"
#include "pa_mock_api.h"

#define PA_CONTRACT_EXPORT __attribute__((visibility("default")))
#define PA_CONTRACT_NONE (-1)

/* A launch as the contract checker decoded it; valid only when pa_contract_check returned PA_OK. */
typedef struct pa_contract {
    uint32_t block_dim;
    uint32_t key;
    int bf16, split_kv, split_block;
    uint32_t batch, num_heads, head_dim, kv_heads, group, block_size, max_blocks;
    uint32_t former_batch, former_head, tail_batch, tail_head;
    uint32_t kv_split, kv_core_num, tile_tokens;
    uint32_t handoff_tokens;         /* tokens per cube->vector hand-off (PA_TW_HANDOFF_TOKENS, or v1's 512)   */
    uint64_t s_half, p_half;         /* elements per S / P stage of a core (v2 word 43, or the v1 halves)      */
    uint32_t split_slots;            /* split-KV: the slots with partials (non-empty, former pass)          */
    uint32_t q_len;                  /* v3: query tokens per sequence; rows per slot = q_len x num_heads    */
    uint32_t window_left;            /* v3: PA_WINDOW_NONE or W                                             */
    uint32_t sinks_dtype;            /* v3: PA_SINKS_*                                                      */
    int lse;                         /* v3: write the lse                                                   */
    uint32_t rope_dim;               /* v4: MLA's rope width R (0: not MLA)                                 */
    float tor;
    int64_t num_blocks;              /* pages in the K/V cache, from the binding                           */
    int64_t extent[PA_NUM_PTR_ARGS]; /* bytes bound for each slot, in elements of that slot's type        */
} pa_contract;

#ifdef __cplusplus
extern "C" {
#endif

/* PA_OK with *c filled, or the first PA_ERR_* with *e filled.  binding is NULL when the calling thread has
 * not called pa_mock_bind(). */
int32_t pa_contract_check(pa_contract *c, const pa_mock_config *binding, uint32_t block_dim,
                          void *const ptrs[PA_NUM_PTR_ARGS], uint32_t features, pa_mock_error *e);
/* The first token sequence kv_len reads (pa_kv_first_token) and its split count, for this launch. */
uint32_t pa_contract_first_token(const pa_contract *c, uint32_t kv_len);
uint32_t pa_contract_splits(const pa_contract *c, uint32_t kv_len);

/* The one way an error record is filled (also used by the mock's access checks).  Returns code. */
int32_t pa_contract_vfail(pa_mock_error *e, int32_t code, int32_t slot, int64_t offset, int64_t extent,
                          int32_t core, int32_t seq, int32_t head, int32_t split, const char *fmt, va_list args);
int32_t pa_contract_fail(pa_mock_error *e, int32_t code, int32_t slot, int64_t offset, int64_t extent,
                         int32_t core, int32_t seq, int32_t head, int32_t split, const char *fmt, ...)
    __attribute__((format(printf, 10, 11)));
/* An empty record: PA_OK and every coordinate -1. */
void pa_contract_clear(pa_mock_error *e);

/* The slot's lower-case name (the X-macro spelling), "none" for anything else. */
const char *pa_contract_slot_name(int32_t slot);
/* Bytes of one element of the slot's type (2 for q/k/v/o/p/q_rope/k_rope, 1 for sinks (their type is a tiling word), 4 for
 * the rest). */
uint64_t pa_contract_elem_bytes(int32_t slot);

/* Word `field` of per-sequence record `slot`, and a (hi, lo) pair of them, as the kernel reads them. */
uint32_t pa_contract_slot_word(const uint32_t *tiling, uint32_t slot, uint32_t field);
uint64_t pa_contract_slot_pair(const uint32_t *tiling, uint32_t slot, uint32_t hi_field, uint32_t lo_field);

#ifdef __cplusplus
}
#endif

#endif /* PA_CONTRACT_H */
