/*
 * pa-kit kernel ABI, version 6: the single source of truth for how the host talks to a paged-attention
 * decode kernel (mock, simulation or NPU).  `tiling/abi.py` mirrors every PA_* number below by name and
 * `tests/test_abi_mirror.py` parses this file to prove the two agree.  Every other file uses the names.
 *
 * ABI v1 is the ATB paged-attention ND decode contract (fp16/bf16, one query token per sequence).  ABI v2 gives
 * two header words ATB's decode kernel never reads (42-43, MTP head split, 0 in v1) to the cube->vector hand-off
 * size and the per-core S/P scratch stage; both 0 is exactly v1, so an external ATB-ABI kernel keeps working:
 *
 *   int32_t call_kernel(uint32_t block_dim, void *stream, <PA_NUM_PTR_ARGS pointers in PA_ARG_* order>);
 *
 * ABI v3 adds the decode features (several query tokens, a sliding window, attention sinks, the lse output) in
 * four header words after ATB's (44-47, so PA_TW_HEADSIZE is 48; an ATB-ABI kernel reads the per-sequence words
 * at the offset word 17 gives) and two pointer slots a decode kernel never reads in ATB's contract (12, ATB's
 * eye: the sinks; 17, ATB's go: the lse).  With the four words at their defaults (q_len 1, no window, no sinks,
 * no lse) a launch is exactly v2's.  A library says which features it executes through pa_supported_features().
 *
 * ABI v4 adds absorbed MLA decode (DeepSeek-V3 class models) in one header word after v3's (48, PA_TW_ROPE_DIM,
 * so PA_TW_HEADSIZE is 49) and two pointer slots a decode kernel never reads in ATB's contract (20, ATB's k16:
 * the query's rope part; 21, ATB's v16: the rope cache).  With word 48 at 0 a launch is exactly v3's.  Under
 * MLA, D is the latent width (the K and V caches are the one latent cache: PA_ARG_V must equal PA_ARG_K),
 * Hkv is 1, and a score is tor * (q . latent_j + q_rope . rope_j); see "MLA" below.
 *
 * ABI v5 gives MLA the device's task shape: one header word after v4's (49, PA_TW_MLA_RESCALE, so
 * PA_TILING_HEADER_WORDS is 50) chooses how the output accumulator is rescaled, and an MLA task holds every q head
 * of its token range (up to PA_MLA_MAX_TASK_ROWS rows) with a hand-off of PA_MLA_HANDOFF_TOKENS, so a sequence's
 * latent is read once per split.  Launches without MLA are exactly v4's (word 49 is 0).
 *
 * ABI v6 lets a split-KV launch have a tail pass (PA_TW_TAIL_BATCH > 0 with the split-KV key bit): its sequences
 * are whole tasks, each written straight to o (and the lse) with no partial and no combine, so a planner splits
 * only the sequences the last round of tasks needs (tiling/splits.py, split_mla).  The partial offsets count only
 * the former pass's slots and are 0 for a tail slot (see "the layout" below).  Launches without a tail pass are
 * exactly v5's.
 *
 * Every pointer is a byte address of global memory; the kernel casts it to the element type named below
 * before adding any tiling offset, so all tiling offsets are ELEMENT offsets of that type.  Pointer slots
 * a decode kernel does not use (mask, dequant, razor, scale, logN; sinks, lse, q_rope, k_rope unless their
 * feature is on) are passed as NULL by the launcher and are never dereferenced when PA_TW_MASK_MAX_LEN == 0
 * and PA_TW_SCALETYPE == 0.
 *
 * Our kernels also export
 *   int32_t pa_abi_version(void);        returns PA_ABI_VERSION
 *   uint32_t pa_supported_keys(void);    bit i set <=> tiling key PA_KEY_LIST[i] is executed
 *   int32_t call_kernel_noop(...);       same signature as call_kernel, does nothing (launch-overhead probe)
 * A library without pa_abi_version is an external ATB-ABI kernel: void return, keys 0/1/16/17 only, and it
 * does not write the rows of empty sequences (the launcher zeroes them).
 *
 * Return codes (our kernels): PA_OK, or one of PA_ERR_*; the mock and the simulation also fill a pa_mock_error
 * record (kernel/pa_mock_api.h) through the one contract checker, kernel/contract/pa_contract.c.
 */
#ifndef PA_KERNEL_ABI_H
#define PA_KERNEL_ABI_H

#include <stdint.h>

#define PA_ABI_VERSION 6

/* ---- call_kernel pointer slots (after block_dim and stream), element type in brackets ---------------- */
#define PA_ARG_Q 0             /* [IN]  query  [B, q_len, Hq, D]                                      */
#define PA_ARG_K 1             /* [IN]  key cache   [num_blocks, block_size, Hkv, D]                  */
#define PA_ARG_V 2             /* [IN]  value cache [num_blocks, block_size, Hkv, D]                  */
#define PA_ARG_BLOCK_TABLES 3  /* [int32] [B, max_pages], row chosen by PA_BF_BATCH_IDX                */
#define PA_ARG_MASK 4          /* unused in decode: NULL                                               */
#define PA_ARG_DEQ_SCALE1 5    /* unused (int8 KV): NULL                                               */
#define PA_ARG_DEQ_OFFSET1 6   /* unused: NULL                                                         */
#define PA_ARG_DEQ_SCALE2 7    /* unused: NULL                                                         */
#define PA_ARG_DEQ_OFFSET2 8   /* unused: NULL                                                         */
#define PA_ARG_RAZOR_OFFSET 9  /* unused: NULL                                                         */
#define PA_ARG_SCALE 10        /* unused (quant scale): NULL                                           */
#define PA_ARG_LOGN 11         /* unused (PA_TW_SCALETYPE == 0): NULL                                  */
#define PA_ARG_SINKS 12        /* v3 [PA_TW_SINKS_DTYPE] sinks [Hq], NULL without (ATB's eye)          */
#define PA_ARG_O 13            /* [OUT = IN] output [B, q_len, Hq, D]                                  */
#define PA_ARG_S 14            /* [fp32] per-core QK scores, PA_S_CORE_STRIDE_ELEMS per block_idx      */
#define PA_ARG_P 15            /* [IN]  per-core probabilities, PA_P_CORE_STRIDE_ELEMS per block_idx   */
#define PA_ARG_O_TMP 16        /* [fp32] per-core tile P.V, PA_O_TMP_CORE_STRIDE_ELEMS per block_idx   */
#define PA_ARG_LSE 17          /* v3 [fp32] lse [B, q_len, Hq] when PA_TW_LSE, else NULL (ATB's go)    */
#define PA_ARG_O_CORE 18       /* [fp32] split-KV normalised partial O [B_split, q_len * Hq, kvCN, D]  */
#define PA_ARG_L 19            /* [fp32] split-KV partial log-sum-exp [B_split, q_len * Hq, kvCN]      */
#define PA_ARG_Q_ROPE 20       /* v4 [IN] MLA query rope part [B, q_len, Hq, R], NULL without (ATB's k16)*/
#define PA_ARG_K_ROPE 21       /* v4 [IN] MLA rope cache [num_blocks, block_size, 1, R] (ATB's v16)    */
#define PA_ARG_TILING 22       /* [uint32 words] PA_TILING_HEADER_WORDS + PA_TILING_BATCH_WORDS * B     */
#define PA_NUM_PTR_ARGS 23

/* The pointer arguments by name, in slot order: X(name) once per slot.  Every entry point (call_kernel,
 * call_kernel_noop, the device kernel) and every host wrapper spells its parameter list with this macro, so
 * no file lists the 23 names by hand; `tests/test_abi_mirror.py` checks the names against ArgSlot. */
#define PA_PTR_ARGS(X)                                                                                        \
    X(q) X(k) X(v) X(block_tables) X(mask) X(deq_scale1) X(deq_offset1) X(deq_scale2) X(deq_offset2)          \
    X(razor_offset) X(scale) X(logn) X(sinks) X(o) X(s) X(p) X(o_tmp) X(lse) X(o_core) X(l) X(q_rope) X(k_rope) X(tiling)

/* ---- tiling header words (read as uint32 unless noted) ------------------------------------------------ */
#define PA_TW_BATCH 0               /* B (informational)                                                 */
#define PA_TW_NUMHEADS 1            /* Hq                                                                */
#define PA_TW_HEADDIM 2             /* D, the row stride of q/o and the per-head stride of k/v           */
#define PA_TW_NUMBLOCKS 3           /* pages in the cache (the NPU kernel ignores it; the mock checks)   */
#define PA_TW_BLOCKSIZE 4           /* tokens per page                                                   */
#define PA_TW_MAXBLOCKS 5           /* row stride of the block table, in int32 elements                  */
#define PA_TW_TOR 6                 /* softmax scale, float32 bit pattern                                */
#define PA_TW_KVHEADS 7             /* Hkv                                                               */
#define PA_TW_FORMER_BATCH 8        /* schedule positions in the former pass                             */
#define PA_TW_FORMER_HEAD 9         /* q heads per task in the former pass                               */
#define PA_TW_TAIL_BATCH 10         /* schedule positions in the tail pass (whole sequences; v6: also   
                                       with the split-KV key, see the layout)                          */
#define PA_TW_TAIL_HEAD 11          /* q heads per task in the tail pass                                 */
#define PA_TW_HEADNUM_MOVE 12       /* kv heads per K load (2 for MHA with D <= 128, else 1)             */
#define PA_TW_MASK_MAX_LEN 13       /* 0: no mask, the mask pointer is never read                        */
#define PA_TW_BATCH_STRIDE 14       /* mask batch stride (0)                                             */
#define PA_TW_HEAD_STRIDE 15        /* mask head stride (0)                                              */
#define PA_TW_KEY 16                /* tiling key, see PA_KEY_*                                          */
#define PA_TW_HEADSIZE 17           /* must be PA_TILING_HEADER_WORDS                                    */
#define PA_TW_PARASIZE 18           /* must be PA_TILING_BATCH_WORDS                                     */
#define PA_TW_GROUPNUM 19           /* Hq / Hkv                                                          */
#define PA_TW_FORMER_GROUP_MOVE 20  /* q heads sharing one K/V tile load, former pass                    */
#define PA_TW_TAIL_GROUP_MOVE 21    /* same, tail pass (0 when there is no tail)                         */
#define PA_TW_MAX_KVSEQLEN 22       /* max context length (informational)                                */
#define PA_TW_KVSPLIT 23            /* tokens per split; a multiple of PA_TW_BLOCKSIZE                   */
#define PA_TW_KVCORENUM 24          /* kvCN, splits per sequence (1 = no split)                          */
#define PA_TW_BLOCKSIZE_CALC 25     /* tokens per inner tile, see the tile rule                          */
#define PA_TW_TOTAL_BLOCK_NUM 26    /* prefill q blocks: 0                                               */
#define PA_TW_PREFILL_BS 27         /* prefill batches: must be 0                                        */
#define PA_TW_DECODER_BS 28         /* B, number of per-sequence slots                                   */
#define PA_TW_HEADDIM_V 29          /* Dv, must equal D                                                  */
#define PA_TW_MODCOEF 30            /* mask modulus: 0xFFFFFFFF                                          */
#define PA_TW_DIVCOEF 31            /* mask divisor: 1                                                   */
#define PA_TW_QHEADORIGINAL 32      /* Hq                                                                */
#define PA_TW_COMPRESSHEAD 33       /* 0                                                                 */
#define PA_TW_QUANTYPE 34           /* 0                                                                 */
#define PA_TW_DATA_SHAPE_TYPE 35    /* 0 (BSND)                                                          */
#define PA_TW_SCALETYPE 36          /* 0 (plain scale; 2 would read PA_ARG_LOGN)                         */
#define PA_TW_MASK_TYPE_ND 37       /* 0                                                                 */
#define PA_TW_HEADDIM_K_SPLIT 38    /* min(D, 256), MLA only                                             */
#define PA_TW_HEADDIM_V_SPLIT 39    /* min(D, 256), MLA only                                             */
#define PA_TW_HEADDIM_V_SPLIT_VECTOR_FORMER 40
#define PA_TW_HEADDIM_V_SPLIT_VECTOR_TAIL 41
#define PA_TW_HANDOFF_TOKENS 42     /* v2: tokens per cube->vector hand-off, a positive multiple of
                                       PA_HANDOFF_ALIGN_TOKENS; 0: PA_DEFAULT_HANDOFF_TOKENS with the v1
                                       scratch strides (ATB's MTP head split size, 0 for decode)        */
#define PA_TW_SCORE_STAGE_ELEMS 43  /* v2: elements of one S (fp32) and one P (IN) stage per core, 0 with
                                       word 42 (ATB's MTP head split num, 0 for decode); see the scratch */
#define PA_TW_Q_LEN 44              /* v3: query tokens per sequence, 1..PA_MAX_Q_LEN; token t of slot s sits
                                       at position kv_len - q_len + t and attends causally to keys 0..it */
#define PA_TW_WINDOW_LEFT 45        /* v3: int32 bits; W >= 0 keeps keys max(0, p - W)..p of a token at p;
                                       -1 (0xFFFFFFFF) keeps all.  Pages wholly before every token's window
                                       are never read (their block-table entries may be anything)        */
#define PA_TW_SINKS_DTYPE 46        /* v3: PA_SINKS_*: the element type of PA_ARG_SINKS, or none          */
#define PA_TW_LSE 47                /* v3: 1 = write each row's natural-log lse (sink included) to PA_ARG_LSE */
#define PA_TW_ROPE_DIM 48           /* v4: R, the rope width of an MLA launch (PA_MLA_ROPE_DIM); 0 = not MLA */
#define PA_TW_MLA_RESCALE 49        /* v5: PA_MLA_RESCALE_*, how an MLA launch rescales its output accumulator;
                                       0 without MLA                                                    */
#define PA_TILING_HEADER_WORDS 50

#define PA_SINKS_NONE 0
#define PA_SINKS_FP32 1
#define PA_SINKS_FP16 2
#define PA_SINKS_BF16 3
#define PA_WINDOW_NONE 0xFFFFFFFF
#define PA_MAX_Q_LEN 16
/* rows of one task (q heads x query tokens) the scratch holds: o_tmp's half at D = 256 (PA_O_TMP_HALF_ELEMS
 * / 256; MLA has its own, PA_MLA_MAX_TASK_ROWS); the planner takes fewer heads per task when q_len > 1 (heads <= rows / q_len) */
#define PA_MAX_TASK_ROWS 128

/* pa_supported_features() bits: what a library executes beyond v2 */
#define PA_FEATURE_MULTI_TOKEN 1
#define PA_FEATURE_WINDOW 2
#define PA_FEATURE_SINKS 4
#define PA_FEATURE_LSE 8
#define PA_FEATURE_MLA 16
#define PA_FEATURES_ALL 31

/* ---- MLA (v4, PA_TW_ROPE_DIM = R > 0): absorbed latent attention as DeepSeek-V3 decodes it ---------------
 * q [B, q_len, Hq, D] is the no-position query already multiplied by W_UK, q_rope [B, q_len, Hq, R] its rope
 * part; the latent cache (PA_ARG_K, the same pointer as PA_ARG_V) holds [num_blocks, block_size, 1, D] and the
 * rope cache [num_blocks, block_size, 1, R].  score(h, j) = tor * (q[h] . latent[j] + q_rope[h] . rope[j]);
 * o[h] = softmax(score) . latent (D wide, the caller applies W_UV).  The shape rules: D = PA_MLA_LATENT_DIM,
 * R = PA_MLA_ROPE_DIM, Hkv = 1, 1 <= Hq <= PA_MLA_MAX_HEADS (PA_MAX_GROUP does not apply).  Every other rule
 * (q_len, causality, window, sinks, lse, splits, the layout) is the one of the other launches, with D = 512,
 * except the task's rows and hand-off (v5, below); the tile rule sizes tiles by D.  The rope part adds R columns to
 * the Q.K^T of a tile; P.V reads the latent as V. */
#define PA_MLA_LATENT_DIM 512
#define PA_MLA_ROPE_DIM 64
#define PA_MLA_MAX_HEADS 128
/* v5, the MLA task: every q head of a (sequence, split) in one task, so the latent is read once per split; a task
 * holds at most PA_MLA_MAX_TASK_ROWS rows (q heads x q_len: the NPU kernel accumulates a task's output in fp32 in
 * one of its core's two accumulators, PA_O_TMP_CORE_STRIDE_ELEMS / D rows), fewer heads per task when q_len is larger;
 * PA_HEAD_SPLIT_LIMIT does not apply.  The hand-off is PA_MLA_HANDOFF_TOKENS (word 42; S and P stages hold rows x
 * that many), the tokens of latent the NPU kernel keeps on chip for both products, two hand-offs at a time.
 * PA_TW_MLA_RESCALE: PA_MLA_RESCALE_POW2 keeps every running maximum on the grid of multiples of ln 2, so each
 * rescale factor is a power of two, applied as an integer add to the fp32 exponent of the accumulator (AMLA);
 * PA_MLA_RESCALE_PLAIN keeps the exact maximum and multiplies.  The mock computes both the same way (its result
 * does not depend on the rescale). */
#define PA_MLA_MAX_TASK_ROWS 128
#define PA_MLA_HANDOFF_TOKENS 128
#define PA_MLA_RESCALE_POW2 0
#define PA_MLA_RESCALE_PLAIN 1

/* ---- per-sequence slot s: words [PA_TILING_HEADER_WORDS + PA_TILING_BATCH_WORDS * s, +17) ------------- */
#define PA_BF_Q_SEQLEN 0        /* q_len (PA_TW_Q_LEN) for a non-empty slot, 0 for an empty one          */
#define PA_BF_KV_SEQLEN 1       /* context length in tokens; 0 = empty sequence (zero output row)        */
#define PA_BF_M_UBD 2           /* 16                                                                    */
#define PA_BF_BLOCK_SIZE 3      /* tokens per page (informational)                                       */
#define PA_BF_ADDR_Q_HI 4       /* q offset, IN elements: s * q_len * Hq * D, high 32 bits               */
#define PA_BF_ADDR_Q_LO 5       /*                                          low 32 bits                  */
#define PA_BF_ADDR_O_HI 6       /* o offset, OUT elements: s * q_len * Hq * D                            */
#define PA_BF_ADDR_O_LO 7
#define PA_BF_BATCH_IDX 8       /* block-table row of this slot (= s)                                    */
#define PA_BF_TOTAL_Q_BLK 9     /* 0                                                                     */
#define PA_BF_MASK_OFFSET_HI 10 /* 0                                                                     */
#define PA_BF_ADDR_L_HI 11      /* l offset, fp32 elements: advances kvCN * q_len * Hq per split slot    */
#define PA_BF_ADDR_L_LO 12
#define PA_BF_GATHER 13         /* gather map: schedule position p runs slot word(p, 13); a permutation  */
#define PA_BF_MASK_OFFSET_LO 14 /* 0                                                                     */
#define PA_BF_ADDR_OFD_HI 15    /* o_core offset in "one split" units (q_len*Hq*D fp32 per split slot)  */
#define PA_BF_ADDR_OFD_LO 16    /* the kernel multiplies it by kvCN                                      */
#define PA_TILING_BATCH_WORDS 17

/* ---- tiling keys ----------------------------------------------------------------------------------------
 * key = (split_block << 7) | (split_kv << 4) | bf16.  Valid: 0, 1, 16, 17 (whole-page tiles) and
 * 128, 129, 144, 145 (split-block extension: the tile is a divisor of the page).  Any other key makes our
 * kernels return PA_ERR_BAD_KEY; an ATB-ABI kernel would silently do nothing.
 */
#define PA_KEY_BF16_BIT 1
#define PA_KEY_SPLIT_KV_BIT 16
#define PA_KEY_SPLIT_BLOCK_BIT 128
#define PA_KEY_FP16 0
#define PA_KEY_BF16 1
#define PA_KEY_FP16_SPLIT_KV 16
#define PA_KEY_BF16_SPLIT_KV 17
#define PA_KEY_FP16_SPLIT_BLOCK 128
#define PA_KEY_BF16_SPLIT_BLOCK 129
#define PA_KEY_FP16_SPLIT_KV_SPLIT_BLOCK 144
#define PA_KEY_BF16_SPLIT_KV_SPLIT_BLOCK 145
#define PA_NUM_KEYS 8
/* pa_supported_keys() bit i refers to PA_KEY_LIST[i] in this order: 0, 1, 16, 17, 128, 129, 144, 145 */
#define PA_SUPPORTED_KEYS_ATB 15   /* bits 0-3: what an external ATB-ABI kernel runs                     */
#define PA_SUPPORTED_KEYS_ALL 255

/* ---- tile rule ------------------------------------------------------------------------------------------
 * T = PA_TW_BLOCKSIZE_CALC tokens per inner tile, bs = PA_TW_BLOCKSIZE.
 *  - whole-page keys:  T is a positive multiple of bs (pages per tile = T / bs >= 1), T * D <= PA_TILE_ELEMS_LIMIT.
 *  - split-block keys: T divides bs (T <= bs, bs % T == 0), T a multiple of 16.
 * The planner picks: T = 2*bs if bs <= 64 and 2*bs*D <= PA_TILE_ELEMS_LIMIT (ATB); T = bs if bs*D <=
 * PA_TILE_ELEMS_LIMIT and not (D == 256 and bs >= 128); otherwise split-block with
 * T = PA_SPLIT_BLOCK_TILE_TOKENS (ATB uses 128 for D == 256; we use it for every page too large for L1).
 * Per task and tile the scratch must fit:  heads * round16(tokens in tile) <= PA_S_HALF_ELEMS (S and P)
 * and heads * round16(D) <= PA_O_TMP_HALF_ELEMS.
 */
#define PA_TILE_ELEMS_LIMIT 16384
#define PA_SPLIT_BLOCK_TILE_TOKENS 128
#define PA_TILE_ALIGN_TOKENS 16

/* ---- per-core scratch strides (elements of the slot's type; two halves for the stage-1/stage-2 tiles) --
 * With PA_TW_SCORE_STAGE_ELEMS = E > 0 (ABI v2) s and p take E elements per stage instead: core stride 2 * E,
 * half E, each S/P row H = PA_TW_HANDOFF_TOKENS elements long; E >= heads per task * H and
 * E >= heads per task * round16(tile).  o_tmp keeps the strides below.  With both words 0, H is
 * PA_DEFAULT_HANDOFF_TOKENS and s/p use the strides below (v1).                                            */
#define PA_S_CORE_STRIDE_ELEMS 32768     /* fp32                                                          */
#define PA_S_HALF_ELEMS 16384
#define PA_P_CORE_STRIDE_ELEMS 65536     /* IN dtype                                                      */
#define PA_P_HALF_ELEMS 32768
#define PA_O_TMP_CORE_STRIDE_ELEMS 65536 /* fp32                                                          */
#define PA_O_TMP_HALF_ELEMS 32768
/* An MLA launch's o_tmp: two task output accumulators per core (a task's rows x 512 fp32 each, one per task parity),
 * so a task's output is read from one while the next task's P.V adds into the other. */
#define PA_MLA_O_TMP_CORE_STRIDE_ELEMS 131072 /* fp32, 2 x PA_O_TMP_CORE_STRIDE_ELEMS                     */
#define PA_DEFAULT_HANDOFF_TOKENS 512   /* = PA_S_HALF_ELEMS / PA_HEAD_SPLIT_LIMIT: 32 heads fill an S half */
#define PA_HANDOFF_ALIGN_TOKENS 512     /* v2 hand-offs are whole multiples of this (the vectors' UB piece)  */

/* ---- split limits ---------------------------------------------------------------------------------------
 * Combine: the vector core holds m_split rows of round8(D) floats: kvCN * round8(D) <= PA_COMBINE_UB_FLOATS
 * (kvCN <= 64 at D = 128, <= 32 at D = 256).  The planner caps kvCN there.
 * ATB caps q heads per task at PA_HEAD_SPLIT_LIMIT.
 */
#define PA_COMBINE_UB_FLOATS 8192
#define PA_COMBINE_ROW_ALIGN 8
#define PA_HEAD_SPLIT_LIMIT 32

/* ---- supported shapes: the planner refuses anything else before a launch, the contract checker refuses it
 * in a launch.  head_dim a multiple of PA_HEAD_DIM_ALIGN in [PA_HEAD_DIM_ALIGN, PA_MAX_HEAD_DIM]; block_size
 * a power of two in [PA_MIN_BLOCK_SIZE, PA_MAX_BLOCK_SIZE]; 1 <= num_heads <= PA_MAX_NUM_HEADS, a multiple of
 * kv_heads with num_heads / kv_heads <= PA_MAX_GROUP; 1 <= batch <= PA_MAX_BATCH. */
#define PA_HEAD_DIM_ALIGN 16
#define PA_MAX_HEAD_DIM 256
#define PA_MIN_BLOCK_SIZE 16
#define PA_MAX_BLOCK_SIZE 512
#define PA_MAX_NUM_HEADS 256
#define PA_MAX_GROUP 64
#define PA_MAX_BATCH 65535
#define PA_HEADNUM_MOVE_MAX 2

/* ---- the split count: how many KV splits a sequence of kv_len tokens runs, for a split length of kv_split
 * tokens (PA_TW_KVSPLIT) and pages of block_size tokens.  0 for an empty sequence.  PA_TW_KVCORENUM must be
 * the split count of the longest sequence (1 when every sequence is empty).  tiling/abi.py kv_splits mirrors
 * it and the mirror test compares the two through pa_abi_kv_splits(), exported by the mock and the sim. */
static inline uint32_t pa_kv_splits(uint32_t kv_len, uint32_t block_size, uint32_t kv_split)
{
    const uint64_t aligned = ((uint64_t)kv_len + block_size - 1) / block_size * block_size;
    return (uint32_t)((aligned + kv_split - 1) / kv_split);
}

/* ---- the KV range a sequence reads (v3): from the first token of the page holding its first query token's
 * window start, to kv_len.  Splits and tiles cover [first, kv_len); the split count is
 * pa_kv_splits(kv_len - first, block_size, kv_split).  0 without a window.  tiling/abi.py kv_first_token
 * mirrors it (compared through pa_abi_kv_first_token). */
static inline uint32_t pa_kv_first_token(uint32_t kv_len, uint32_t q_len, uint32_t window_left, uint32_t block_size)
{
    if (window_left == PA_WINDOW_NONE || (uint64_t)kv_len <= (uint64_t)q_len + window_left) {
        return 0;
    }
    return (kv_len - q_len - window_left) / block_size * block_size;
}

/* ---- the layout of q, o and the split-KV partials, which the contract checker enforces per slot s -----
 * With R = q_len * Hq rows per slot (row t * Hq + h is query token t, head h):
 *   PA_BF_ADDR_Q = PA_BF_ADDR_O = s * R * D           (every slot: dense [B, q_len, Hq, D] tensors)
 *   PA_BF_BATCH_IDX = s; the lse of slot s (PA_TW_LSE) starts at s * R
 *   for split-KV keys and a split slot (non-empty, run by the former pass: its schedule position is below
 *   PA_TW_FORMER_BATCH), with n = the number of split slots before s:
 *   PA_BF_ADDR_L = n * R * kvCN,  PA_BF_ADDR_OFD = n * R * D   (the kernel multiplies OFD by kvCN)
 *   and 0 for a slot of the tail pass (v6), which is written whole and has no partials;
 * and the buffers hold at least: q, o B*R*D; k, v num_blocks*bs*Hkv*D; block_tables B*max_blocks;
 * o_core B_split*R*kvCN*D; l B_split*R*kvCN (B_split: the split slots); lse B*R; sinks Hq; s, p, o_tmp
 * block_dim * their core stride; under MLA q_rope B*R*PA_TW_ROPE_DIM and k_rope num_blocks*bs*PA_TW_ROPE_DIM
 * (q_rope's rows follow q's, at PA_BF_ADDR_Q / D * PA_TW_ROPE_DIM).  Per task and tile the scratch rows are q heads x q_len. */

/* ---- where our planner departs from ATB, and why ------------------------------------------------------
 * 1. Long-sequence split-KV keeps ATB's batch guard (B <= 0.8 * block_dim), which the upstream port dropped
 *    and which bounds the o_core/l workspaces.  o_core/l are sized B_split * Hq * kvCN * (D | 1) * 4 bytes.
 * 2. kvCN is capped at the combine limit above (ATB does not check it; the kernel would overrun UB).
 * 3. A head split of at least one KV group is rounded to whole groups (up while that stays within
 *    PA_HEAD_SPLIT_LIMIT, else down), so no task straddles a group boundary, group_move = the group and each
 *    K/V tile is loaded once per task (ATB's split, e.g. 11 heads of groups of 4, falls back to
 *    group_move = 1).  Splits smaller than a group keep ATB's value.
 * 4. Pages with bs * D > PA_TILE_ELEMS_LIMIT use the split-block keys (ATB supports only D == 256 there).
 * 5. ATB's optional raise of T to 256 tokens is not applied (performance only).
 * 6. addr_q/addr_o advance for every slot (dense [B, Hq, D] tensors); ATB skips empty ones.  The kernel
 *    never reads them for an empty slot except to write its zero row.
 * 7. Our kernels write zero rows for empty sequences; ATB leaves them untouched.
 * 8. With strategy "auto", a grid whose tasks would hold part of a KV group (fewer heads than
 *    min(group, PA_HEAD_SPLIT_LIMIT)) is replaced by a split-KV grid of whole-group tasks whose KV ranges
 *    fill the cores: decode is memory-bound and every task on a group re-reads its K/V (ATB's BN split of
 *    b8 16q/1kv heads reads the cache 3 times).  Forced "bn"/"split_kv" keep ATB's rules.
 * 9. With strategy "auto", a split-KV grid gives way to the small-batch grid: each task takes the fewest
 *    whole KV groups whose K row per token is at least 512 bytes (full DMA efficiency), and each sequence is
 *    cut into as many page ranges as leave every core one task; taken when those ranges hold at least one
 *    hand-off (512 tokens) or the grid it replaces needs a second round of tasks (tiling/splits.py,
 *    split_small_batch; the evidence: python -m timing.plan_search, kernel/npu/PERFORMANCE.md).
 * 10. A ragged batch (lengths not all equal, at most 1024 sequences) whose ascending order leaves a core more
 *    than 10 % above the mean may get the gather order of tiling/balance.py instead: longest sequence first,
 *    each at the free schedule position whose cores end lowest under the task loop above, kept where its
 *    most loaded core does less work.  With strategy "auto", while a core stays 10 % above the mean, a
 *    split-KV grid of the widest whole-group tasks replaces the grid if its most loaded core does 10 % less
 *    work: a whole-sequence task cannot be balanced, a KV range can.  Forced strategies and batch-invariant
 *    mode keep their grid and get only the order.
 */

/* ---- error codes returned by call_kernel ------------------------------------------------------------- */
#define PA_OK 0
#define PA_ERR_BAD_KEY 1          /* tiling key not in PA_KEY_LIST or not supported by this library       */
#define PA_ERR_BAD_TILING 2       /* a header word breaks the contract (sizes, tile rule, limits)         */
#define PA_ERR_BAD_GATHER 3       /* PA_BF_GATHER is not a permutation of 0..B-1                          */
#define PA_ERR_OUT_OF_BOUNDS 4    /* an access lies outside its buffer's registered extent                */
#define PA_ERR_BAD_BLOCK_ID 5     /* a block-table entry a sequence uses is outside [0, num_blocks)       */
#define PA_ERR_NULL_POINTER 6     /* a pointer the key needs is NULL                                      */
#define PA_ERR_BAD_LAUNCH 7       /* block_dim of 0 or larger than the scratch holds, or no config        */
#define PA_ERR_INTERNAL 8         /* a simulated device fault (sim: deadlock timeout, on-chip overflow)   */
#define PA_ERR_HAZARD 9           /* sim checked mode: two accesses the device's pipes would not order    */
#define PA_ERR_NON_FINITE 10      /* checked mode: a NaN or inf in the valid Q, K or V (unsupported input) */
/* Pointer hygiene: PA_ERR_NULL_POINTER also reports a non-NULL mask pointer (a kernel that gates the mask on
 * the pointer instead of on PA_TW_MASK_MAX_LEN would read it out of bounds; docs/CONTRACT.md). */

#endif /* PA_KERNEL_ABI_H */
