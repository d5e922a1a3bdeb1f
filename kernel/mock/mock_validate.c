/*
 * Launch-level validation of the mock device: binding, key, pointers, every header word the kernel relies on,
 * the gather map, per-sequence words and the workspace extents (research note §9.1-§9.3, §9.5-§9.8, §9.11).
 * Runs once per launch on the calling thread, in both checked and unchecked mode, so its errors are
 * deterministic.  The first failing check is reported.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mock_internal.h"

#define PA_COMBINE_ROW_ALIGN 8
#define PA_L_OFFSET_LIMIT ((uint64_t)1 << PA_WORD_BITS) /* the kernel's l offset is a uint32              */
#define PA_HEADNUM_MOVE_MAX 2

static const uint32_t valid_keys[PA_NUM_KEYS] = {
    PA_KEY_FP16, PA_KEY_BF16, PA_KEY_FP16_SPLIT_KV, PA_KEY_BF16_SPLIT_KV, PA_KEY_FP16_SPLIT_BLOCK,
    PA_KEY_BF16_SPLIT_BLOCK, PA_KEY_FP16_SPLIT_KV_SPLIT_BLOCK, PA_KEY_BF16_SPLIT_KV_SPLIT_BLOCK,
};

/* Header words a decode kernel requires to be 0 (prefill, mask, quantisation, logN, MTP). */
static const uint32_t zero_words[] = {
    PA_TW_MASK_MAX_LEN, PA_TW_TOTAL_BLOCK_NUM, PA_TW_PREFILL_BS, PA_TW_COMPRESSHEAD, PA_TW_QUANTYPE,
    PA_TW_DATA_SHAPE_TYPE, PA_TW_SCALETYPE, PA_TW_MTP_HEAD_SPLIT_SIZE, PA_TW_MTP_HEAD_SPLIT_NUM,
};

static uint64_t elem_bytes(int32_t slot) {
    switch (slot) {
    case PA_ARG_Q: case PA_ARG_K: case PA_ARG_V: case PA_ARG_O: case PA_ARG_P:
        return PA_HALF_BYTES;
    case PA_ARG_BLOCK_TABLES:
        return PA_INT32_BYTES;
    default:
        return PA_FP32_BYTES;
    }
}

static uint64_t round_up(uint64_t x, uint64_t to) { return (x + to - 1) / to * to; }

static int32_t bad_word(const pa_launch *L, pa_mock_error *e, uint32_t word, const char *what) {
    return pa_fail(e, PA_ERR_BAD_TILING, PA_ARG_TILING, word, L->extent[PA_ARG_TILING], pa_nowhere(),
                   "tiling word %u = %u: %s", word, L->tiling[word], what);
}

#define REQUIRE_WORD(cond, word, what)                                                                      \
    do {                                                                                                    \
        if (!(cond)) {                                                                                      \
            return bad_word(L, e, (word), (what));                                                          \
        }                                                                                                   \
    } while (0)

/* The cube loads one K/V tile for `move` q heads: they must share a kv head (ATB's CalcuHeadNd values). */
static int group_move_ok(uint32_t move, uint32_t head_split, uint32_t group, uint32_t kv_heads) {
    return move >= 1 && head_split % move == 0 && (kv_heads == 1 || group % move == 0);
}

static int32_t check_pointers(const pa_launch *L, void *const ptrs[PA_NUM_PTR_ARGS], pa_mock_error *e) {
    static const int32_t needed[] = {PA_ARG_Q, PA_ARG_K, PA_ARG_V, PA_ARG_BLOCK_TABLES, PA_ARG_O,
                                     PA_ARG_S, PA_ARG_P, PA_ARG_O_TMP, PA_ARG_O_CORE, PA_ARG_L};
    for (size_t i = 0; i < sizeof needed / sizeof needed[0]; ++i) {
        int32_t slot = needed[i];
        int split_only = slot == PA_ARG_O_CORE || slot == PA_ARG_L;
        if (!ptrs[slot] && (!split_only || L->split_kv)) {
            return pa_fail(e, PA_ERR_NULL_POINTER, slot, PA_NONE, L->extent[slot], pa_nowhere(),
                           "%s is NULL but key %u needs it", pa_slot_name(slot), L->key);
        }
    }
    if (ptrs[PA_ARG_MASK]) {
        return pa_fail(e, PA_ERR_NULL_POINTER, PA_ARG_MASK, PA_NONE, L->extent[PA_ARG_MASK], pa_nowhere(),
                       "mask pointer must be NULL in decode (a kernel gating the mask on the pointer would "
                       "read it out of bounds)");
    }
    return PA_OK;
}

static int32_t check_header(pa_launch *L, pa_mock_error *e) {
    const uint32_t *t = L->tiling;
    for (size_t i = 0; i < sizeof zero_words / sizeof zero_words[0]; ++i) {
        REQUIRE_WORD(t[zero_words[i]] == 0, zero_words[i], "must be 0 for decode");
    }
    REQUIRE_WORD(t[PA_TW_BATCH] == L->batch, PA_TW_BATCH, "must equal DECODER_BS");
    REQUIRE_WORD(t[PA_TW_NUMHEADS] >= 1, PA_TW_NUMHEADS, "num_heads must be >= 1");
    REQUIRE_WORD(t[PA_TW_HEADDIM] >= 1 && t[PA_TW_HEADDIM] <= PA_MAX_HEAD_DIM, PA_TW_HEADDIM,
                 "head_dim must be in [1, PA_MAX_HEAD_DIM]");
    REQUIRE_WORD(t[PA_TW_NUMBLOCKS] == (uint64_t)L->cfg.num_blocks, PA_TW_NUMBLOCKS,
                 "must equal the bound num_blocks");
    REQUIRE_WORD(t[PA_TW_BLOCKSIZE] >= 1, PA_TW_BLOCKSIZE, "block_size must be >= 1");
    REQUIRE_WORD(t[PA_TW_MAXBLOCKS] >= 1, PA_TW_MAXBLOCKS, "block-table row stride must be >= 1");
    REQUIRE_WORD(isfinite(L->tor), PA_TW_TOR, "scale must be a finite float");
    REQUIRE_WORD(t[PA_TW_KVHEADS] >= 1 && t[PA_TW_NUMHEADS] % t[PA_TW_KVHEADS] == 0, PA_TW_KVHEADS,
                 "kv_heads must be >= 1 and divide num_heads");
    L->num_heads = t[PA_TW_NUMHEADS];
    L->head_dim = t[PA_TW_HEADDIM];
    L->block_size = t[PA_TW_BLOCKSIZE];
    L->max_blocks = t[PA_TW_MAXBLOCKS];
    L->kv_heads = t[PA_TW_KVHEADS];
    L->group = L->num_heads / L->kv_heads;
    REQUIRE_WORD(t[PA_TW_GROUPNUM] == L->group, PA_TW_GROUPNUM, "must equal num_heads / kv_heads");
    REQUIRE_WORD(t[PA_TW_HEADDIM_V] == L->head_dim, PA_TW_HEADDIM_V, "Dv must equal D");
    REQUIRE_WORD(t[PA_TW_HEADNUM_MOVE] >= 1 && t[PA_TW_HEADNUM_MOVE] <= PA_HEADNUM_MOVE_MAX, PA_TW_HEADNUM_MOVE,
                 "must be 1 or 2");
    L->former_batch = t[PA_TW_FORMER_BATCH];
    L->tail_batch = t[PA_TW_TAIL_BATCH];
    L->former_head = t[PA_TW_FORMER_HEAD];
    L->tail_head = t[PA_TW_TAIL_HEAD];
    uint32_t head_limit = L->num_heads < PA_HEAD_SPLIT_LIMIT ? L->num_heads : PA_HEAD_SPLIT_LIMIT;
    REQUIRE_WORD((uint64_t)L->former_batch + L->tail_batch == L->batch, PA_TW_FORMER_BATCH,
                 "former + tail batches must equal DECODER_BS");
    if (L->former_batch) {
        REQUIRE_WORD(L->former_head >= 1 && L->former_head <= head_limit, PA_TW_FORMER_HEAD,
                     "heads per task must be in [1, min(num_heads, PA_HEAD_SPLIT_LIMIT)]");
        REQUIRE_WORD(group_move_ok(t[PA_TW_FORMER_GROUP_MOVE], L->former_head, L->group, L->kv_heads),
                     PA_TW_FORMER_GROUP_MOVE, "must divide the head split and keep one kv head per move");
    }
    if (L->tail_batch) {
        REQUIRE_WORD(!L->split_kv, PA_TW_TAIL_BATCH, "split-KV keys have no tail pass");
        REQUIRE_WORD(L->tail_head >= 1 && L->tail_head <= head_limit, PA_TW_TAIL_HEAD,
                     "heads per task must be in [1, min(num_heads, PA_HEAD_SPLIT_LIMIT)]");
        REQUIRE_WORD(group_move_ok(t[PA_TW_TAIL_GROUP_MOVE], L->tail_head, L->group, L->kv_heads),
                     PA_TW_TAIL_GROUP_MOVE, "must divide the head split and keep one kv head per move");
    }
    L->kv_split = t[PA_TW_KVSPLIT];
    L->kv_core_num = t[PA_TW_KVCORENUM];
    L->tile_tokens = t[PA_TW_BLOCKSIZE_CALC];
    REQUIRE_WORD(L->kv_split >= L->block_size && L->kv_split % L->block_size == 0, PA_TW_KVSPLIT,
                 "KVSPLIT must be a positive multiple of block_size");
    uint32_t combine_limit = PA_COMBINE_UB_FLOATS / (uint32_t)round_up(L->head_dim, PA_COMBINE_ROW_ALIGN);
    REQUIRE_WORD(L->kv_core_num >= 1 && L->kv_core_num <= combine_limit, PA_TW_KVCORENUM,
                 "kvCN must be in [1, combine limit PA_COMBINE_UB_FLOATS / round8(D)]");
    REQUIRE_WORD((L->kv_core_num > 1) == (L->split_kv != 0), PA_TW_KVCORENUM,
                 "kvCN > 1 exactly when the key has the split-KV bit");
    uint32_t tile = L->tile_tokens, bs = L->block_size;
    if (L->split_block) {
        REQUIRE_WORD(tile >= PA_TILE_ALIGN_TOKENS && tile <= bs && bs % tile == 0 && tile % PA_TILE_ALIGN_TOKENS == 0,
                     PA_TW_BLOCKSIZE_CALC, "split-block tile must divide the page and be a multiple of 16");
    } else {
        REQUIRE_WORD(tile >= bs && tile % bs == 0 && (uint64_t)tile * L->head_dim <= PA_TILE_ELEMS_LIMIT,
                     PA_TW_BLOCKSIZE_CALC, "tile must be a positive multiple of block_size within PA_TILE_ELEMS_LIMIT");
    }
    uint64_t heads = L->former_batch ? L->former_head : 0;
    if (L->tail_batch && L->tail_head > heads) {
        heads = L->tail_head;
    }
    uint64_t tile_cols = round_up(tile < L->kv_split ? tile : L->kv_split, PA_TILE_ALIGN_TOKENS);
    REQUIRE_WORD(heads * tile_cols <= PA_S_HALF_ELEMS && heads * tile_cols <= PA_P_HALF_ELEMS, PA_TW_BLOCKSIZE_CALC,
                 "heads x round16(tile) exceeds the S/P scratch half");
    REQUIRE_WORD(heads * round_up(L->head_dim, PA_TILE_ALIGN_TOKENS) <= PA_O_TMP_HALF_ELEMS, PA_TW_HEADDIM,
                 "heads x round16(D) exceeds the o_tmp scratch half");
    return PA_OK;
}

static int32_t check_gather(const pa_launch *L, pa_mock_error *e) {
    unsigned char *seen = calloc(L->batch, 1);
    if (!seen) {
        return pa_fail(e, PA_ERR_INTERNAL, PA_NONE, PA_NONE, PA_NONE, pa_nowhere(), "out of host memory");
    }
    int32_t rc = PA_OK;
    for (uint32_t pos = 0; pos < L->batch && rc == PA_OK; ++pos) {
        uint32_t slot = pa_gather(L, pos);
        int64_t word = PA_TILING_HEADER_WORDS + (int64_t)PA_TILING_BATCH_WORDS * pos + PA_BF_GATHER;
        pa_where w = {PA_NONE, (int32_t)pos, PA_NONE, PA_NONE};
        if (slot >= L->batch) {
            rc = pa_fail(e, PA_ERR_BAD_GATHER, PA_ARG_TILING, word, L->extent[PA_ARG_TILING], w,
                         "gather map: position %u names slot %u, outside [0, %u)", pos, slot, L->batch);
        } else if (seen[slot]) {
            rc = pa_fail(e, PA_ERR_BAD_GATHER, PA_ARG_TILING, word, L->extent[PA_ARG_TILING], w,
                         "gather map: position %u names slot %u a second time", pos, slot);
        } else {
            seen[slot] = 1;
        }
    }
    free(seen);
    return rc;
}

static int32_t check_sequences(const pa_launch *L, pa_mock_error *e) {
    uint64_t max_kv = 0;
    for (uint32_t s = 0; s < L->batch; ++s) {
        uint32_t kv_len = pa_slot_word(L, s, PA_BF_KV_SEQLEN);
        int64_t word = PA_TILING_HEADER_WORDS + (int64_t)PA_TILING_BATCH_WORDS * s;
        pa_where w = {PA_NONE, (int32_t)s, PA_NONE, PA_NONE};
        if (((uint64_t)kv_len + L->block_size - 1) / L->block_size > L->max_blocks) {
            return pa_fail(e, PA_ERR_BAD_TILING, PA_ARG_TILING, word + PA_BF_KV_SEQLEN, L->extent[PA_ARG_TILING], w,
                           "seq %u: %u tokens need more pages than the block-table row holds (%u)", s, kv_len,
                           L->max_blocks);
        }
        max_kv = kv_len > max_kv ? kv_len : max_kv;
        uint64_t l_end = pa_slot_pair(L, s, PA_BF_ADDR_L_HI, PA_BF_ADDR_L_LO) +
                         (uint64_t)L->num_heads * L->kv_core_num;
        if (L->split_kv && kv_len && l_end > PA_L_OFFSET_LIMIT) {
            return pa_fail(e, PA_ERR_BAD_TILING, PA_ARG_TILING, word + PA_BF_ADDR_L_HI, L->extent[PA_ARG_TILING], w,
                           "seq %u: l offsets reach %llu, beyond the kernel's 32-bit l offset", s,
                           (unsigned long long)l_end);
        }
    }
    uint64_t splits = (round_up(max_kv, L->block_size) + L->kv_split - 1) / L->kv_split;
    splits = splits ? splits : 1;
    if (splits != L->kv_core_num) {
        return pa_fail(e, PA_ERR_BAD_TILING, PA_ARG_TILING, PA_TW_KVCORENUM, L->extent[PA_ARG_TILING], pa_nowhere(),
                       "kvCN %u but the longest sequence (%llu tokens) needs %llu splits of %u tokens",
                       L->kv_core_num, (unsigned long long)max_kv, (unsigned long long)splits, L->kv_split);
    }
    return PA_OK;
}

static int32_t check_extent(const pa_launch *L, pa_mock_error *e, int32_t slot, uint64_t need, int32_t code) {
    if ((uint64_t)L->extent[slot] >= need) {
        return PA_OK;
    }
    return pa_fail(e, code, slot, L->extent[slot], L->extent[slot], pa_nowhere(),
                   "%s holds %lld elements, the launch needs %llu", pa_slot_name(slot),
                   (long long)L->extent[slot], (unsigned long long)need);
}

static int32_t check_extents(const pa_launch *L, pa_mock_error *e) {
    int32_t rc = PA_OK;
    uint64_t cores = L->block_dim;
    if ((rc = check_extent(L, e, PA_ARG_S, cores * PA_S_CORE_STRIDE_ELEMS, PA_ERR_BAD_LAUNCH)) ||
        (rc = check_extent(L, e, PA_ARG_P, cores * PA_P_CORE_STRIDE_ELEMS, PA_ERR_BAD_LAUNCH)) ||
        (rc = check_extent(L, e, PA_ARG_O_TMP, cores * PA_O_TMP_CORE_STRIDE_ELEMS, PA_ERR_BAD_LAUNCH))) {
        return rc;
    }
    if (!L->checked) { /* valid block ids then keep every K/V access inside the cache */
        uint64_t cache = (uint64_t)L->cfg.num_blocks * L->block_size * L->kv_heads * L->head_dim;
        if ((rc = check_extent(L, e, PA_ARG_K, cache, PA_ERR_OUT_OF_BOUNDS)) ||
            (rc = check_extent(L, e, PA_ARG_V, cache, PA_ERR_OUT_OF_BOUNDS))) {
            return rc;
        }
    }
    return PA_OK;
}

static int key_valid(uint32_t key) {
    for (int i = 0; i < PA_NUM_KEYS; ++i) {
        if (valid_keys[i] == key) {
            return 1;
        }
    }
    return 0;
}

int32_t pa_validate_launch(pa_launch *L, uint32_t block_dim, void *const ptrs[PA_NUM_PTR_ARGS],
                           pa_mock_error *e) {
    memset(L, 0, sizeof *L);
    const pa_mock_config *cfg = pa_state_binding();
    if (!cfg) {
        return pa_fail(e, PA_ERR_BAD_LAUNCH, PA_NONE, PA_NONE, PA_NONE, pa_nowhere(),
                       "no pa_mock_bind() on this thread before call_kernel");
    }
    L->cfg = *cfg;
    L->checked = cfg->checked != 0;
    L->block_dim = block_dim;
    for (int32_t slot = 0; slot < PA_NUM_PTR_ARGS; ++slot) {
        L->extent[slot] = (int64_t)(cfg->extent_bytes[slot] / elem_bytes(slot));
    }
    L->ops = pa_math_select(cfg->isa);
    if (!L->ops) {
        return pa_fail(e, PA_ERR_BAD_LAUNCH, PA_NONE, PA_NONE, PA_NONE, pa_nowhere(),
                       "SIMD path %d is not available on this CPU", cfg->isa);
    }
    if (cfg->num_blocks <= 0) {
        return pa_fail(e, PA_ERR_BAD_LAUNCH, PA_ARG_K, PA_NONE, L->extent[PA_ARG_K], pa_nowhere(),
                       "num_blocks must be bound (> 0), got %lld", (long long)cfg->num_blocks);
    }
    if (block_dim == 0) {
        return pa_fail(e, PA_ERR_BAD_LAUNCH, PA_NONE, PA_NONE, PA_NONE, pa_nowhere(), "block_dim is 0");
    }
    L->tiling = ptrs[PA_ARG_TILING];
    if (!L->tiling) {
        return pa_fail(e, PA_ERR_NULL_POINTER, PA_ARG_TILING, PA_NONE, L->extent[PA_ARG_TILING], pa_nowhere(),
                       "tiling is NULL");
    }
    int32_t rc = PA_OK;
    if ((rc = check_extent(L, e, PA_ARG_TILING, PA_TILING_HEADER_WORDS, PA_ERR_OUT_OF_BOUNDS))) {
        return rc;
    }
    L->key = L->tiling[PA_TW_KEY];
    if (!key_valid(L->key)) {
        return pa_fail(e, PA_ERR_BAD_KEY, PA_ARG_TILING, PA_TW_KEY, L->extent[PA_ARG_TILING], pa_nowhere(),
                       "tiling key %u is not one of 0, 1, 16, 17, 128, 129, 144, 145", L->key);
    }
    L->bf16 = (L->key & PA_KEY_BF16_BIT) != 0;
    L->split_kv = (L->key & PA_KEY_SPLIT_KV_BIT) != 0;
    L->split_block = (L->key & PA_KEY_SPLIT_BLOCK_BIT) != 0;
    if ((rc = check_pointers(L, ptrs, e))) {
        return rc;
    }
    if (L->tiling[PA_TW_HEADSIZE] != PA_TILING_HEADER_WORDS) {
        return bad_word(L, e, PA_TW_HEADSIZE, "must be PA_TILING_HEADER_WORDS (44)");
    }
    if (L->tiling[PA_TW_PARASIZE] != PA_TILING_BATCH_WORDS) {
        return bad_word(L, e, PA_TW_PARASIZE, "must be PA_TILING_BATCH_WORDS (17)");
    }
    L->batch = L->tiling[PA_TW_DECODER_BS];
    if (L->batch == 0 || L->batch > PA_MAX_BATCH) {
        return bad_word(L, e, PA_TW_DECODER_BS, "batch must be in [1, PA_MAX_BATCH]");
    }
    uint64_t words = PA_TILING_HEADER_WORDS + (uint64_t)PA_TILING_BATCH_WORDS * L->batch;
    if ((rc = check_extent(L, e, PA_ARG_TILING, words, PA_ERR_OUT_OF_BOUNDS))) {
        return rc;
    }
    memcpy(&L->tor, &L->tiling[PA_TW_TOR], sizeof L->tor);
    L->q = ptrs[PA_ARG_Q];
    L->k = ptrs[PA_ARG_K];
    L->v = ptrs[PA_ARG_V];
    L->block_tables = ptrs[PA_ARG_BLOCK_TABLES];
    L->o = ptrs[PA_ARG_O];
    L->s = ptrs[PA_ARG_S];
    L->p = ptrs[PA_ARG_P];
    L->o_tmp = ptrs[PA_ARG_O_TMP];
    L->o_core = ptrs[PA_ARG_O_CORE];
    L->l = ptrs[PA_ARG_L];
    if ((rc = check_header(L, e)) || (rc = check_gather(L, e)) || (rc = check_sequences(L, e)) ||
        (rc = check_extents(L, e))) {
        return rc;
    }
    return PA_OK;
}
