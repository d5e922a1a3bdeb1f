/*
 * pa-kit NPU decode kernel: every compile-time constant, with the reason for its value.
 *
 * Two-level tiling.  Level 1 is the cube<->vector hand-off unit: up to PA_TW_HANDOFF_TOKENS tokens of one
 * task's KV range (a plan parameter, a multiple of kPieceTokens; 512 by default) go through GM scratch (S, P,
 * O_tmp) per hand-off, so a 4096-token sequence costs 8 hand-offs at 512, 1 at 4096.  Level 2 is the sub-tile the cube moves into L0: a page-contiguous run of at most
 * SubTokens(DCap) tokens of one KV head, sized so one K^T or V sub-tile fills half of L0B (double buffering).
 */
#ifndef PA_CONFIG_HPP
#define PA_CONFIG_HPP

#include <stdint.h>
#include "pa_kernel_abi.h"

namespace pa {

/* ---- what the kernel executes ----------------------------------------------------------------------------
 * The decode features (PA_FEATURE_* bits, what every host of this kernel reports through pa_supported_features()):
 * several query tokens, a sliding window, sinks, the lse, and absorbed MLA (pa_cube_mla.hpp, pa_vector_mla.hpp). */
#define PA_NPU_KERNEL_FEATURES \
    (PA_FEATURE_MULTI_TOKEN | PA_FEATURE_WINDOW | PA_FEATURE_SINKS | PA_FEATURE_LSE | PA_FEATURE_MLA)

/* ---- task and hand-off geometry --------------------------------------------------------------------- */
/* q heads per task: the ABI's head-split cap; a task's heads of one KV group form the matmul M dimension. */
constexpr int kMaxTaskHeads = PA_HEAD_SPLIT_LIMIT;
/* M capacity of a cube matmul: a whole task may share one KV head (MQA / large groups). */
constexpr int kCubeRows = kMaxTaskHeads;
/* Vector sub-cores per cube core on A2/A3 (one AIC + two AIV per cluster). */
constexpr int kVecSubCores = 2;
/* Rows one vector sub-core owns: sub-core i takes rows [i*floor(n/2), ...) of a task's n heads. */
constexpr int kVecRows = kMaxTaskHeads / kVecSubCores;
/* Columns of a unit handled at once: the vectors' UB score tiles and the cube's L1 P window hold this many
 * tokens; a larger hand-off is walked in pieces of it.  The ABI's hand-off alignment, and v1's hand-off. */
constexpr int kPieceTokens = PA_HANDOFF_ALIGN_TOKENS;
static_assert(PA_DEFAULT_HANDOFF_TOKENS == PA_S_HALF_ELEMS / kMaxTaskHeads, "v1: 32 heads fill an S half");
/* Ping-pong stages of the scratch halves: the cube computes QK of unit u+1 while the vector works on unit u. */
constexpr int kStages = 2;

static_assert(kMaxTaskHeads * PA_MAX_HEAD_DIM <= PA_O_TMP_HALF_ELEMS, "O_tmp stage must fit its scratch half");

/* ---- level-2 sub-tile ----------------------------------------------------------------------------------
 * One K^T (D x tokens) or V (tokens x D) sub-tile holds PA_TILE_ELEMS_LIMIT elements = 32 KB of fp16/bf16:
 * two of them fill L0B (64 KB) exactly, so the next sub-tile loads while the current one multiplies.
 * DCap is the head-dim capacity class of an instantiation (64, 128 or 256); tokens per sub-tile follow.     */
constexpr int kSubTileElems = PA_TILE_ELEMS_LIMIT;
constexpr int SubTokens(int dcap) { return kSubTileElems / dcap; }
/* Head-dim capacity classes; the entry picks the smallest class >= D. */
constexpr int kDCapSmall = 64;
constexpr int kDCapMedium = 128;
constexpr int kDCapLarge = PA_MAX_HEAD_DIM;

/* ---- MLA (ABI v5): one latent head, every q head of a token range in one task ------------------------------
 * The latent tile of a hand-off (PA_MLA_HANDOFF_TOKENS tokens x 512 columns, 128 KiB, and its 64 rope columns beside
 * it) stays in L1 from its Q.K^T to its P.V, so each latent byte is loaded from GM once per split for every head;
 * two such tiles (the unit the vectors work on and the next) plus Q (128 rows x 576) and P fill L1, or three when a
 * task has at most kMlaPrefetchRows rows.  The output accumulates in fp32 in GM,
 * the core's whole o_tmp stride (PA_MLA_MAX_TASK_ROWS rows x 512). */
constexpr int kMlaD = PA_MLA_LATENT_DIM;
constexpr int kMlaRope = PA_MLA_ROPE_DIM;
constexpr int kMlaK = kMlaD + kMlaRope;      /* Q.K^T's inner length                                           */
constexpr int kMlaRows = PA_MLA_MAX_TASK_ROWS; /* matmul M: every row of a task                               */
constexpr int kMlaTok = PA_MLA_HANDOFF_TOKENS; /* tokens of a unit: the latent tile's columns                 */
constexpr int kMlaKChunk = 64;                 /* Q.K^T's inner length per matmul (L0A/L0B double buffers)     */
constexpr int kMlaVCols = 64;                  /* P.V's output columns per matmul (two L0C accumulators, alternating) */
/* Rows of a task up to which L1 holds three latent tiles beside Q and P (the next unit's latent loads while this one
 * multiplies): 3 x 128 KiB latent + 2 x 16 KiB rope + 64 rows of Q (72 KiB) and P (16 KiB) = 504 KiB of 512. */
constexpr int kMlaPrefetchRows = 64;
static_assert(kMlaRows * kMlaD <= PA_O_TMP_CORE_STRIDE_ELEMS &&
                  2 * PA_O_TMP_CORE_STRIDE_ELEMS <= PA_MLA_O_TMP_CORE_STRIDE_ELEMS,
              "an MLA task's output fits one of its core's two accumulators");
static_assert(kMlaD % kMlaKChunk == 0 && kMlaRope == kMlaKChunk && kMlaD % kMlaVCols == 0, "MLA matmul chunks");

/* ---- on-chip buffer sizes (A2/A3, bytes) ---------------------------------------------------------------- */
constexpr uint32_t kUbBytes = 192 * 1024;
constexpr uint32_t kL1Bytes = 512 * 1024;
constexpr uint32_t kL0aBytes = 64 * 1024;
constexpr uint32_t kL0bBytes = 64 * 1024;
constexpr uint32_t kL0cBytes = 128 * 1024;
/* Bytes of one L1/L0 fractal (16 x 16 fp16): the granule of the cube's NZ/ZN tile layouts. */
constexpr int kFractalBytes = 512;
/* Bytes of one fractal row (16 fp16/bf16 elements): an NZ tile's row r starts r of them into each column block. */
constexpr uint32_t kNzRowBytes = 32;
/* Alignment of every on-chip buffer start: one fractal, which is also a whole number of 32 B UB blocks. */
constexpr uint32_t kOnChipAlign = kFractalBytes;
/* Start alignment of the 16-float per-row vectors in UB: two 32 B vector blocks. */
constexpr uint32_t kRowVecAlign = 64;
/* fp32 elements in one 32 B UB block (the unit A2/A3's vector and DMA instructions address UB in). */
constexpr int kFloatsPerBlock = 8;
constexpr uint32_t AlignUp(uint32_t v, uint32_t a) { return (v + a - 1) / a * a; }

/* ---- combine ------------------------------------------------------------------------------------------- */
/* Split LSE values held at once: kvCN <= PA_COMBINE_UB_FLOATS / 16 (D >= 16) = 512. */
constexpr int kCombineMaxSplits = PA_COMBINE_UB_FLOATS / PA_TILE_ALIGN_TOKENS;
/* Partial-O rows folded per step: 32 rows x 256 fp32 = 32 KB of UB. */
constexpr int kCombineChunkRows = 32;
/* CombineRunsPerSlot: runs a sequence's rows are cut into at most, and the item counts per sub-core it tries. */
constexpr int kCombineMaxRunsPerSlot = 64;
constexpr int kCombineRoundsTried = 16;

/* Traffic class of a GM access, for the simulation figures. */
enum Traffic : int { kTrafficOther = 0, kTrafficKv = 1, kTrafficScratch = 2, kTrafficPartial = 3 };

/* Events the simulation counts for its figures (nothing on the NPU). */
/* kCountScoreTile: one query token's S piece on a vector sub-core through the softmax's first pass;
 * kCountMaskedScoreTile: one of them with keys masked (a window's left edge, the causal edge of the later query
 * tokens: the boundary pieces only). */
enum Counter : int { kCountHandoff, kCountUnit, kCountTask, kCountMatmul, kCountScoreTile, kCountMaskedScoreTile };

/* ---- cross-core flags (the ids each use takes are in pa_sync.hpp) ------------------------------------ */
constexpr uint16_t kFlagReduceBarrier = 13; /* all vectors: split partials done (not id 3!)            */
constexpr int kFlagCount = 16;              /* FFTS flag ids 0..15                                       */

}  // namespace pa

#endif /* PA_CONFIG_HPP */
