/*
 * The kernel contract checker (see pa_contract.h): every host obligation of the kernel ABI, checked once per launch
 * on the calling thread, in the mock device and in the simulation alike.  Its checks cost O(batch) and run
 * in checked and unchecked mode, so a contract error never depends on the mode, the thread count or the
 * kernel behind the library.
 * Over 400 lines: one checker is the single statement of the host's obligations (tiling words, ranges, tables,
 * workspace); split, the rules would drift between files.
 */
#include "pa_contract.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PA_WORD_BITS 32
#define PA_FLOAT_EXP_MASK 0x7F800000u

static const uint32_t valid_keys[PA_NUM_KEYS] = {
    PA_KEY_FP16, PA_KEY_BF16, PA_KEY_FP16_SPLIT_KV, PA_KEY_BF16_SPLIT_KV, PA_KEY_FP16_SPLIT_BLOCK,
    PA_KEY_BF16_SPLIT_BLOCK, PA_KEY_FP16_SPLIT_KV_SPLIT_BLOCK, PA_KEY_BF16_SPLIT_KV_SPLIT_BLOCK,
};

/* Header words a decode launch requires to be 0 (prefill, mask, quantisation, logN). */
static const uint32_t zero_words[] = {
    PA_TW_MASK_MAX_LEN, PA_TW_TOTAL_BLOCK_NUM, PA_TW_PREFILL_BS, PA_TW_COMPRESSHEAD, PA_TW_QUANTYPE,
    PA_TW_DATA_SHAPE_TYPE, PA_TW_SCALETYPE,
};

#define PA_SLOT_NAME(name) #name,
static const char *const slot_names[PA_NUM_PTR_ARGS] = {PA_PTR_ARGS(PA_SLOT_NAME)};
#undef PA_SLOT_NAME

const char *pa_contract_slot_name(int32_t slot) {
    return (slot >= 0 && slot < PA_NUM_PTR_ARGS) ? slot_names[slot] : "none";
}

uint64_t pa_contract_elem_bytes(int32_t slot) {
    switch (slot) {
    case PA_ARG_Q: case PA_ARG_K: case PA_ARG_V: case PA_ARG_O: case PA_ARG_P: case PA_ARG_Q_ROPE:
    case PA_ARG_K_ROPE:
        return 2;
    case PA_ARG_SINKS:
        return 1;
    default:
        return 4;
    }
}

void pa_contract_clear(pa_mock_error *e) {
    memset(e, 0, sizeof *e);
    e->code = PA_OK;
    e->arg_slot = PA_CONTRACT_NONE;
    e->element_offset = PA_CONTRACT_NONE;
    e->extent_elems = PA_CONTRACT_NONE;
    e->core = e->seq = e->head = e->split = PA_CONTRACT_NONE;
}

int32_t pa_contract_vfail(pa_mock_error *e, int32_t code, int32_t slot, int64_t offset, int64_t extent,
                          int32_t core, int32_t seq, int32_t head, int32_t split, const char *fmt, va_list args) {
    e->code = code;
    e->arg_slot = slot;
    e->element_offset = offset;
    e->extent_elems = extent;
    e->core = core;
    e->seq = seq;
    e->head = head;
    e->split = split;
    vsnprintf(e->message, sizeof e->message, fmt, args);
    return code;
}

int32_t pa_contract_fail(pa_mock_error *e, int32_t code, int32_t slot, int64_t offset, int64_t extent,
                         int32_t core, int32_t seq, int32_t head, int32_t split, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    pa_contract_vfail(e, code, slot, offset, extent, core, seq, head, split, fmt, args);
    va_end(args);
    return code;
}

uint32_t pa_contract_slot_word(const uint32_t *tiling, uint32_t slot, uint32_t field) {
    return tiling[PA_TILING_HEADER_WORDS + (uint64_t)PA_TILING_BATCH_WORDS * slot + field];
}

uint64_t pa_contract_slot_pair(const uint32_t *tiling, uint32_t slot, uint32_t hi_field, uint32_t lo_field) {
    return ((uint64_t)pa_contract_slot_word(tiling, slot, hi_field) << PA_WORD_BITS) |
           pa_contract_slot_word(tiling, slot, lo_field);
}

static uint64_t round_up(uint64_t x, uint64_t to) { return (x + to - 1) / to * to; }

/* A launch-level failure: no core, no head, no split. */
#define FAIL(code, slot, offset, extent, seq, ...)                                                            \
    pa_contract_fail(e, (code), (slot), (offset), (extent), PA_CONTRACT_NONE, (seq), PA_CONTRACT_NONE,       \
                     PA_CONTRACT_NONE, __VA_ARGS__)

/* A tiling word (header word or per-sequence word) that breaks the contract. */
static int32_t bad_word(const pa_contract *c, const uint32_t *t, pa_mock_error *e, uint64_t word, int32_t seq,
                        const char *what) {
    return FAIL(PA_ERR_BAD_TILING, PA_ARG_TILING, (int64_t)word, c->extent[PA_ARG_TILING], seq,
                "tiling word %llu = %u: %s", (unsigned long long)word, t[word], what);
}

#define REQUIRE_WORD(cond, word, what)                                                                       \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            return bad_word(c, t, e, (word), PA_CONTRACT_NONE, (what));                                       \
        }                                                                                                    \
    } while (0)

static int key_valid(uint32_t key) {
    for (int i = 0; i < PA_NUM_KEYS; ++i) {
        if (valid_keys[i] == key) {
            return 1;
        }
    }
    return 0;
}

/* The cube loads one K/V tile for `move` q heads: they must share a kv head. */
static int group_move_ok(uint32_t move, uint32_t head_split, uint32_t group, uint32_t kv_heads) {
    return move >= 1 && head_split % move == 0 && (kv_heads == 1 || group % move == 0);
}

static int power_of_two(uint32_t x) { return x && (x & (x - 1)) == 0; }

static int32_t check_pointers(const pa_contract *c, void *const ptrs[PA_NUM_PTR_ARGS], pa_mock_error *e) {
    static const int32_t needed[] = {PA_ARG_Q, PA_ARG_K, PA_ARG_V, PA_ARG_BLOCK_TABLES, PA_ARG_O,
                                     PA_ARG_S, PA_ARG_P, PA_ARG_O_TMP, PA_ARG_O_CORE, PA_ARG_L};
    for (size_t i = 0; i < sizeof needed / sizeof needed[0]; ++i) {
        int32_t slot = needed[i];
        int split_only = slot == PA_ARG_O_CORE || slot == PA_ARG_L;
        if (!ptrs[slot] && (!split_only || c->split_kv)) {
            return FAIL(PA_ERR_NULL_POINTER, slot, PA_CONTRACT_NONE, c->extent[slot], PA_CONTRACT_NONE,
                        "%s is NULL but key %u needs it", pa_contract_slot_name(slot), c->key);
        }
    }
    static const int32_t features[] = {PA_ARG_SINKS, PA_ARG_LSE};
    for (size_t i = 0; i < sizeof features / sizeof features[0]; ++i) {
        int32_t slot = features[i];
        int on = slot == PA_ARG_SINKS ? c->sinks_dtype != PA_SINKS_NONE : c->lse;
        if (on && !ptrs[slot]) {
            return FAIL(PA_ERR_NULL_POINTER, slot, PA_CONTRACT_NONE, c->extent[slot], PA_CONTRACT_NONE,
                        "%s is NULL but the tiling asks for it (word %d)", pa_contract_slot_name(slot),
                        slot == PA_ARG_SINKS ? PA_TW_SINKS_DTYPE : PA_TW_LSE);
        }
    }
    if (c->rope_dim) { /* MLA: the rope parts, and the latent is both K and V */
        static const int32_t rope[] = {PA_ARG_Q_ROPE, PA_ARG_K_ROPE};
        for (size_t i = 0; i < sizeof rope / sizeof rope[0]; ++i) {
            if (!ptrs[rope[i]]) {
                return FAIL(PA_ERR_NULL_POINTER, rope[i], PA_CONTRACT_NONE, c->extent[rope[i]], PA_CONTRACT_NONE,
                            "%s is NULL but the tiling asks for MLA (word %d)", pa_contract_slot_name(rope[i]),
                            PA_TW_ROPE_DIM);
            }
        }
        if (ptrs[PA_ARG_V] != ptrs[PA_ARG_K]) {
            return FAIL(PA_ERR_BAD_LAUNCH, PA_ARG_V, PA_CONTRACT_NONE, c->extent[PA_ARG_V], PA_CONTRACT_NONE,
                        "MLA reads the latent cache as V: v must be the k pointer");
        }
    }
    if (ptrs[PA_ARG_MASK]) {
        return FAIL(PA_ERR_NULL_POINTER, PA_ARG_MASK, PA_CONTRACT_NONE, c->extent[PA_ARG_MASK], PA_CONTRACT_NONE,
                    "mask pointer must be NULL in decode (a kernel gating the mask on the pointer would read it)");
    }
    return PA_OK;
}

/* Shape words against the header's supported shapes. */
static int32_t check_shape(pa_contract *c, const uint32_t *t, pa_mock_error *e) {
    uint32_t hq = t[PA_TW_NUMHEADS], d = t[PA_TW_HEADDIM], bs = t[PA_TW_BLOCKSIZE], hkv = t[PA_TW_KVHEADS];
    REQUIRE_WORD(t[PA_TW_BATCH] == c->batch, PA_TW_BATCH, "must equal DECODER_BS");
    REQUIRE_WORD(hq >= 1 && hq <= PA_MAX_NUM_HEADS, PA_TW_NUMHEADS, "num_heads must be in [1, PA_MAX_NUM_HEADS]");
    if (c->rope_dim) { /* MLA: one latent head of PA_MLA_LATENT_DIM, up to PA_MLA_MAX_HEADS query heads */
        REQUIRE_WORD(d == PA_MLA_LATENT_DIM, PA_TW_HEADDIM, "MLA's latent width must be PA_MLA_LATENT_DIM");
        REQUIRE_WORD(hkv == 1, PA_TW_KVHEADS, "MLA has one latent head (kv_heads 1)");
        REQUIRE_WORD(hq <= PA_MLA_MAX_HEADS, PA_TW_NUMHEADS, "MLA takes at most PA_MLA_MAX_HEADS query heads");
    } else {
        REQUIRE_WORD(d >= PA_HEAD_DIM_ALIGN && d <= PA_MAX_HEAD_DIM && d % PA_HEAD_DIM_ALIGN == 0, PA_TW_HEADDIM,
                     "head_dim must be a multiple of PA_HEAD_DIM_ALIGN in [PA_HEAD_DIM_ALIGN, PA_MAX_HEAD_DIM]");
    }
    REQUIRE_WORD(t[PA_TW_NUMBLOCKS] == (uint64_t)c->num_blocks, PA_TW_NUMBLOCKS, "must equal the bound num_blocks");
    REQUIRE_WORD(power_of_two(bs) && bs >= PA_MIN_BLOCK_SIZE && bs <= PA_MAX_BLOCK_SIZE, PA_TW_BLOCKSIZE,
                 "block_size must be a power of two in [PA_MIN_BLOCK_SIZE, PA_MAX_BLOCK_SIZE]");
    REQUIRE_WORD(t[PA_TW_MAXBLOCKS] >= 1, PA_TW_MAXBLOCKS, "block-table row stride must be >= 1");
    REQUIRE_WORD((t[PA_TW_TOR] & PA_FLOAT_EXP_MASK) != PA_FLOAT_EXP_MASK, PA_TW_TOR, "scale must be a finite float");
    REQUIRE_WORD(hkv >= 1 && hq % hkv == 0 && (hq / hkv <= PA_MAX_GROUP || c->rope_dim), PA_TW_KVHEADS,
                 "kv_heads must divide num_heads with a group of at most PA_MAX_GROUP");
    REQUIRE_WORD(t[PA_TW_GROUPNUM] == hq / hkv, PA_TW_GROUPNUM, "must equal num_heads / kv_heads");
    REQUIRE_WORD(t[PA_TW_HEADDIM_V] == d, PA_TW_HEADDIM_V, "Dv must equal D");
    REQUIRE_WORD(t[PA_TW_HEADNUM_MOVE] >= 1 && t[PA_TW_HEADNUM_MOVE] <= PA_HEADNUM_MOVE_MAX, PA_TW_HEADNUM_MOVE,
                 "must be in [1, PA_HEADNUM_MOVE_MAX]");
    c->num_heads = hq;
    c->head_dim = d;
    c->block_size = bs;
    c->max_blocks = t[PA_TW_MAXBLOCKS];
    c->kv_heads = hkv;
    c->group = hq / hkv;
    memcpy(&c->tor, &t[PA_TW_TOR], sizeof c->tor);
    return PA_OK;
}

/* Passes, head splits, split length, tile rule and the per-core scratch halves. */
static int32_t check_schedule(pa_contract *c, const uint32_t *t, pa_mock_error *e) {
    c->former_batch = t[PA_TW_FORMER_BATCH];
    c->tail_batch = t[PA_TW_TAIL_BATCH];
    c->former_head = t[PA_TW_FORMER_HEAD];
    c->tail_head = t[PA_TW_TAIL_HEAD];
    uint32_t head_limit = c->num_heads < PA_HEAD_SPLIT_LIMIT ? c->num_heads : PA_HEAD_SPLIT_LIMIT;
    { /* a task's rows are its heads x q_len, at most PA_MAX_TASK_ROWS and what o_tmp's half holds at D; an MLA
       * task (v5) holds up to PA_MLA_MAX_TASK_ROWS of every head, PA_HEAD_SPLIT_LIMIT aside */
        uint64_t rows = PA_O_TMP_HALF_ELEMS / round_up(c->head_dim, PA_TILE_ALIGN_TOKENS);
        rows = rows < PA_MAX_TASK_ROWS ? rows : PA_MAX_TASK_ROWS;
        if (c->rope_dim) {
            rows = PA_MLA_MAX_TASK_ROWS;
            head_limit = c->num_heads;
        }
        uint32_t rows_limit = rows / c->q_len ? (uint32_t)(rows / c->q_len) : 1;
        head_limit = head_limit < rows_limit ? head_limit : rows_limit;
    }
    REQUIRE_WORD((uint64_t)c->former_batch + c->tail_batch == c->batch, PA_TW_FORMER_BATCH,
                 "former + tail batches must equal DECODER_BS");
    if (c->former_batch) {
        REQUIRE_WORD(c->former_head >= 1 && c->former_head <= head_limit, PA_TW_FORMER_HEAD,
                     "heads per task must be in [1, min(num_heads, PA_HEAD_SPLIT_LIMIT, task rows / q_len)] (MLA: "
                     "[1, min(num_heads, PA_MLA_MAX_TASK_ROWS / q_len)])");
        REQUIRE_WORD(group_move_ok(t[PA_TW_FORMER_GROUP_MOVE], c->former_head, c->group, c->kv_heads),
                     PA_TW_FORMER_GROUP_MOVE, "must divide the head split and keep one kv head per move");
    }
    if (c->tail_batch) {
        REQUIRE_WORD(c->tail_head >= 1 && c->tail_head <= head_limit, PA_TW_TAIL_HEAD,
                     "heads per task must be in [1, min(num_heads, PA_HEAD_SPLIT_LIMIT, task rows / q_len)] (MLA: "
                     "[1, min(num_heads, PA_MLA_MAX_TASK_ROWS / q_len)])");
        REQUIRE_WORD(group_move_ok(t[PA_TW_TAIL_GROUP_MOVE], c->tail_head, c->group, c->kv_heads),
                     PA_TW_TAIL_GROUP_MOVE, "must divide the head split and keep one kv head per move");
    }
    c->kv_split = t[PA_TW_KVSPLIT];
    c->kv_core_num = t[PA_TW_KVCORENUM];
    c->tile_tokens = t[PA_TW_BLOCKSIZE_CALC];
    uint32_t bs = c->block_size, tile = c->tile_tokens;
    REQUIRE_WORD(c->kv_split >= bs && c->kv_split % bs == 0, PA_TW_KVSPLIT,
                 "KVSPLIT must be a positive multiple of block_size");
    uint32_t combine_limit = PA_COMBINE_UB_FLOATS / (uint32_t)round_up(c->head_dim, PA_COMBINE_ROW_ALIGN);
    REQUIRE_WORD(c->kv_core_num >= 1 && c->kv_core_num <= combine_limit, PA_TW_KVCORENUM,
                 "kvCN must be in [1, PA_COMBINE_UB_FLOATS / round8(D)]");
    REQUIRE_WORD((c->kv_core_num > 1) == (c->split_kv != 0), PA_TW_KVCORENUM,
                 "kvCN > 1 exactly when the key has the split-KV bit");
    if (c->split_block) {
        REQUIRE_WORD(tile >= PA_TILE_ALIGN_TOKENS && tile <= bs && bs % tile == 0 && tile % PA_TILE_ALIGN_TOKENS == 0,
                     PA_TW_BLOCKSIZE_CALC, "split-block tile must divide the page and be a multiple of 16");
    } else {
        REQUIRE_WORD(tile >= bs && tile % bs == 0 && (uint64_t)tile * c->head_dim <= PA_TILE_ELEMS_LIMIT,
                     PA_TW_BLOCKSIZE_CALC, "tile must be a positive multiple of block_size within PA_TILE_ELEMS_LIMIT");
    }
    uint64_t heads = c->former_batch ? c->former_head : 0;
    if (c->tail_batch && c->tail_head > heads) {
        heads = c->tail_head;
    }
    heads *= c->q_len; /* scratch rows: heads x query tokens */
    uint64_t tile_cols = round_up(tile < c->kv_split ? tile : c->kv_split, PA_TILE_ALIGN_TOKENS);
    uint32_t handoff = t[PA_TW_HANDOFF_TOKENS], stage = t[PA_TW_SCORE_STAGE_ELEMS];
    REQUIRE_WORD((handoff == 0) == (stage == 0), PA_TW_SCORE_STAGE_ELEMS,
                 "hand-off size and S/P stage are both 0 (v1 scratch) or both set (v2)");
    if (c->rope_dim) {
        REQUIRE_WORD(handoff == PA_MLA_HANDOFF_TOKENS, PA_TW_HANDOFF_TOKENS,
                     "an MLA launch's hand-off must be PA_MLA_HANDOFF_TOKENS");
    } else {
        REQUIRE_WORD(handoff % PA_HANDOFF_ALIGN_TOKENS == 0, PA_TW_HANDOFF_TOKENS,
                     "hand-off size must be a multiple of PA_HANDOFF_ALIGN_TOKENS");
    }
    c->handoff_tokens = handoff ? handoff : PA_DEFAULT_HANDOFF_TOKENS;
    c->s_half = stage ? stage : PA_S_HALF_ELEMS;
    c->p_half = stage ? stage : PA_P_HALF_ELEMS;
    REQUIRE_WORD(heads * c->handoff_tokens <= c->s_half && heads * c->handoff_tokens <= c->p_half,
                 PA_TW_SCORE_STAGE_ELEMS, "the S/P stage must hold heads per task x q_len x hand-off tokens");
    REQUIRE_WORD(heads * tile_cols <= PA_S_HALF_ELEMS && heads * tile_cols <= c->s_half &&
                     heads * tile_cols <= c->p_half, PA_TW_BLOCKSIZE_CALC,
                 "heads x q_len x round16(tile) exceeds the S/P scratch half");
    REQUIRE_WORD(c->rope_dim || heads * round_up(c->head_dim, PA_TILE_ALIGN_TOKENS) <= PA_O_TMP_HALF_ELEMS,
                 PA_TW_HEADDIM, "heads x q_len x round16(D) exceeds the o_tmp scratch half");
    return PA_OK;
}

/* The v3 decode-feature words hold valid values (before the pointers they ask for are checked). */
static int32_t check_feature_words(pa_contract *c, const uint32_t *t, pa_mock_error *e) {
    REQUIRE_WORD(c->q_len >= 1 && c->q_len <= PA_MAX_Q_LEN, PA_TW_Q_LEN, "q_len must be in [1, PA_MAX_Q_LEN]");
    REQUIRE_WORD(c->window_left == PA_WINDOW_NONE || c->window_left < 0x80000000u, PA_TW_WINDOW_LEFT,
                 "window_left must be -1 (0xFFFFFFFF) or a non-negative int32");
    REQUIRE_WORD(c->sinks_dtype <= PA_SINKS_BF16, PA_TW_SINKS_DTYPE, "sinks dtype must be one of PA_SINKS_*");
    REQUIRE_WORD(t[PA_TW_LSE] <= 1, PA_TW_LSE, "must be 0 or 1");
    REQUIRE_WORD(c->rope_dim == 0 || c->rope_dim == PA_MLA_ROPE_DIM, PA_TW_ROPE_DIM,
                 "rope width must be 0 (not MLA) or PA_MLA_ROPE_DIM");
    REQUIRE_WORD(t[PA_TW_MLA_RESCALE] == 0 || (c->rope_dim && t[PA_TW_MLA_RESCALE] == PA_MLA_RESCALE_PLAIN),
                 PA_TW_MLA_RESCALE, "the MLA rescale must be one of PA_MLA_RESCALE_* under MLA, 0 otherwise");
    return PA_OK;
}

/* Only the v3/v4 features the calling library executes. */
static int32_t check_features(pa_contract *c, const uint32_t *t, uint32_t features, pa_mock_error *e) {
    REQUIRE_WORD(c->q_len == 1 || (features & PA_FEATURE_MULTI_TOKEN), PA_TW_Q_LEN,
                 "this library does not execute several query tokens per sequence");
    REQUIRE_WORD(c->window_left == PA_WINDOW_NONE || (features & PA_FEATURE_WINDOW), PA_TW_WINDOW_LEFT,
                 "this library does not execute a sliding window");
    REQUIRE_WORD(c->sinks_dtype == PA_SINKS_NONE || (features & PA_FEATURE_SINKS), PA_TW_SINKS_DTYPE,
                 "this library does not execute attention sinks");
    REQUIRE_WORD(!c->lse || (features & PA_FEATURE_LSE), PA_TW_LSE, "this library does not write the lse");
    REQUIRE_WORD(!c->rope_dim || (features & PA_FEATURE_MLA), PA_TW_ROPE_DIM, "this library does not execute MLA");
    return PA_OK;
}

static int32_t check_header(pa_contract *c, const uint32_t *t, pa_mock_error *e) {
    for (size_t i = 0; i < sizeof zero_words / sizeof zero_words[0]; ++i) {
        REQUIRE_WORD(t[zero_words[i]] == 0, zero_words[i], "must be 0 for decode");
    }
    int32_t rc = check_shape(c, t, e);
    return rc != PA_OK ? rc : check_schedule(c, t, e);
}

static int32_t check_gather(const pa_contract *c, const uint32_t *t, pa_mock_error *e) {
    unsigned char *seen = (unsigned char *)calloc(c->batch, 1);
    if (!seen) {
        return FAIL(PA_ERR_INTERNAL, PA_CONTRACT_NONE, PA_CONTRACT_NONE, PA_CONTRACT_NONE, PA_CONTRACT_NONE,
                    "out of host memory");
    }
    int32_t rc = PA_OK;
    for (uint32_t pos = 0; pos < c->batch && rc == PA_OK; ++pos) {
        uint32_t slot = pa_contract_slot_word(t, pos, PA_BF_GATHER);
        int64_t word = PA_TILING_HEADER_WORDS + (int64_t)PA_TILING_BATCH_WORDS * pos + PA_BF_GATHER;
        if (slot >= c->batch) {
            rc = FAIL(PA_ERR_BAD_GATHER, PA_ARG_TILING, word, c->extent[PA_ARG_TILING], (int32_t)pos,
                      "gather map: position %u names slot %u, outside [0, %u)", pos, slot, c->batch);
        } else if (seen[slot]) {
            rc = FAIL(PA_ERR_BAD_GATHER, PA_ARG_TILING, word, c->extent[PA_ARG_TILING], (int32_t)pos,
                      "gather map: position %u names slot %u a second time", pos, slot);
        } else {
            seen[slot] = 1;
        }
    }
    free(seen);
    return rc;
}

/* A per-sequence (hi, lo) offset pair must hold `want`. */
static int32_t check_pair(const pa_contract *c, const uint32_t *t, pa_mock_error *e, uint32_t s, uint32_t hi,
                          uint32_t lo, uint64_t want, const char *name) {
    uint64_t got = pa_contract_slot_pair(t, s, hi, lo);
    if (got == want) {
        return PA_OK;
    }
    uint64_t word = PA_TILING_HEADER_WORDS + (uint64_t)PA_TILING_BATCH_WORDS * s + hi;
    return FAIL(PA_ERR_BAD_TILING, PA_ARG_TILING, (int64_t)word, c->extent[PA_ARG_TILING], (int32_t)s,
                "seq %u: %s offset %llu, the layout puts it at %llu", s, name, (unsigned long long)got,
                (unsigned long long)want);
}

/* Each slot's pages fit its table row, and kvCN is the split count of the longest sequence. */
static int32_t check_lengths(const pa_contract *c, const uint32_t *t, pa_mock_error *e) {
    uint32_t splits = 0, longest = 0;
    for (uint32_t s = 0; s < c->batch; ++s) {
        uint32_t kv_len = pa_contract_slot_word(t, s, PA_BF_KV_SEQLEN);
        uint64_t word = PA_TILING_HEADER_WORDS + (uint64_t)PA_TILING_BATCH_WORDS * s + PA_BF_KV_SEQLEN;
        if (((uint64_t)kv_len + c->block_size - 1) / c->block_size > c->max_blocks) {
            return FAIL(PA_ERR_BAD_TILING, PA_ARG_TILING, (int64_t)word, c->extent[PA_ARG_TILING], (int32_t)s,
                        "seq %u: %u tokens need more pages than the block-table row holds (%u)", s, kv_len,
                        c->max_blocks);
        }
        if (kv_len > 0 && kv_len < c->q_len) {
            return FAIL(PA_ERR_BAD_TILING, PA_ARG_TILING, (int64_t)word, c->extent[PA_ARG_TILING], (int32_t)s,
                        "seq %u: %u tokens cannot hold its %u query tokens", s, kv_len, c->q_len);
        }
        if (pa_contract_slot_word(t, s, PA_BF_Q_SEQLEN) != (kv_len ? c->q_len : 0)) {
            return bad_word(c, t, e, word - PA_BF_KV_SEQLEN + PA_BF_Q_SEQLEN, (int32_t)s,
                            "Q_SEQLEN must be q_len for a non-empty slot and 0 for an empty one");
        }
        uint32_t n = pa_contract_splits(c, kv_len);
        if (n > splits) {
            splits = n;
            longest = kv_len;
        }
    }
    splits = splits ? splits : 1;
    if (splits != c->kv_core_num) {
        return FAIL(PA_ERR_BAD_TILING, PA_ARG_TILING, PA_TW_KVCORENUM, c->extent[PA_ARG_TILING], PA_CONTRACT_NONE,
                    "kvCN %u but the sequence reading the most pages (%u tokens) needs %u splits of %u tokens",
                    c->kv_core_num, longest, splits, c->kv_split);
    }
    return PA_OK;
}

/* Slot s's words of the layout; *split counts the split slots before it. */
static int32_t check_slot_layout(const pa_contract *c, const uint32_t *t, pa_mock_error *e, uint32_t s, int in_tail,
                                 uint64_t *split) {
    uint64_t rows = (uint64_t)c->q_len * c->num_heads, row = rows * c->head_dim;
    uint32_t kv_len = pa_contract_slot_word(t, s, PA_BF_KV_SEQLEN);
    uint64_t word = PA_TILING_HEADER_WORDS + (uint64_t)PA_TILING_BATCH_WORDS * s;
    int32_t rc = PA_OK;
    if (pa_contract_slot_word(t, s, PA_BF_BATCH_IDX) != s) {
        return bad_word(c, t, e, word + PA_BF_BATCH_IDX, (int32_t)s, "block-table row must be the slot index");
    }
    if ((rc = check_pair(c, t, e, s, PA_BF_ADDR_Q_HI, PA_BF_ADDR_Q_LO, s * row, "q")) ||
        (rc = check_pair(c, t, e, s, PA_BF_ADDR_O_HI, PA_BF_ADDR_O_LO, s * row, "o"))) {
        return rc;
    }
    if (!c->split_kv || !kv_len) {
        return PA_OK;
    }
    const uint64_t n = in_tail ? 0 : *split; /* a tail slot is written whole: no partials, offsets 0 */
    if ((rc = check_pair(c, t, e, s, PA_BF_ADDR_L_HI, PA_BF_ADDR_L_LO, n * rows * c->kv_core_num, "l")) ||
        (rc = check_pair(c, t, e, s, PA_BF_ADDR_OFD_HI, PA_BF_ADDR_OFD_LO, n * row, "o_core"))) {
        return rc;
    }
    *split += !in_tail;
    return PA_OK;
}

/* Each slot's block-table row and q/o/l/o_core offsets are where the layout puts them (header, "layout"):
 * an offset inside its buffer but in another sequence's rows is as wrong as one outside it.  Under a split-KV
 * key the partial offsets count the split slots (the former pass's non-empty ones, v6) and are 0 for the tail's. */
static int32_t check_layout(pa_contract *c, const uint32_t *t, pa_mock_error *e) {
    uint64_t before = 0;
    unsigned char *tail = (unsigned char *)calloc(c->batch, 1); /* slot -> runs in the tail pass */
    if (!tail) {
        return FAIL(PA_ERR_INTERNAL, PA_CONTRACT_NONE, PA_CONTRACT_NONE, PA_CONTRACT_NONE, PA_CONTRACT_NONE,
                    "out of host memory");
    }
    for (uint32_t pos = c->former_batch; pos < c->batch; ++pos) { /* the gather map is a permutation (checked) */
        tail[pa_contract_slot_word(t, pos, PA_BF_GATHER)] = 1;
    }
    int32_t rc = PA_OK;
    for (uint32_t s = 0; s < c->batch && rc == PA_OK; ++s) {
        rc = check_slot_layout(c, t, e, s, tail[s], &before);
    }
    free(tail);
    c->split_slots = (uint32_t)before;
    return rc;
}

/* A buffer shorter than the launch needs: element_offset is the first element it lacks. */
static int32_t check_extent(const pa_contract *c, pa_mock_error *e, int32_t slot, uint64_t need, int32_t code) {
    if ((uint64_t)c->extent[slot] >= need) {
        return PA_OK;
    }
    return FAIL(code, slot, c->extent[slot], c->extent[slot], PA_CONTRACT_NONE,
                "%s holds %lld elements, the launch needs %llu", pa_contract_slot_name(slot),
                (long long)c->extent[slot], (unsigned long long)need);
}

static int32_t check_extents(const pa_contract *c, pa_mock_error *e) {
    uint64_t cores = c->block_dim, rows = (uint64_t)c->batch * c->q_len * c->num_heads;
    uint64_t cache = (uint64_t)c->num_blocks * c->block_size * c->kv_heads * c->head_dim;
    uint64_t partials = c->split_kv ? (uint64_t)c->split_slots * c->q_len * c->num_heads * c->kv_core_num : 0;
    uint64_t sinks_bytes = c->sinks_dtype == PA_SINKS_NONE ? 0 : c->sinks_dtype == PA_SINKS_FP32 ? 4 : 2;
    int32_t rc = PA_OK;
    if ((rc = check_extent(c, e, PA_ARG_S, cores * 2 * c->s_half, PA_ERR_BAD_LAUNCH)) ||
        (rc = check_extent(c, e, PA_ARG_P, cores * 2 * c->p_half, PA_ERR_BAD_LAUNCH)) ||
        (rc = check_extent(c, e, PA_ARG_O_TMP,
                           cores * (c->rope_dim ? PA_MLA_O_TMP_CORE_STRIDE_ELEMS : PA_O_TMP_CORE_STRIDE_ELEMS),
                           PA_ERR_BAD_LAUNCH)) ||
        (rc = check_extent(c, e, PA_ARG_Q, rows * c->head_dim, PA_ERR_OUT_OF_BOUNDS)) ||
        (rc = check_extent(c, e, PA_ARG_K, cache, PA_ERR_OUT_OF_BOUNDS)) ||
        (rc = check_extent(c, e, PA_ARG_V, cache, PA_ERR_OUT_OF_BOUNDS)) ||
        (rc = check_extent(c, e, PA_ARG_BLOCK_TABLES, (uint64_t)c->batch * c->max_blocks, PA_ERR_OUT_OF_BOUNDS)) ||
        (rc = check_extent(c, e, PA_ARG_O, rows * c->head_dim, PA_ERR_OUT_OF_BOUNDS)) ||
        (rc = check_extent(c, e, PA_ARG_O_CORE, partials * c->head_dim, PA_ERR_OUT_OF_BOUNDS)) ||
        (rc = check_extent(c, e, PA_ARG_L, partials, PA_ERR_OUT_OF_BOUNDS)) ||
        (rc = check_extent(c, e, PA_ARG_LSE, c->lse ? rows : 0, PA_ERR_OUT_OF_BOUNDS)) ||
        (rc = check_extent(c, e, PA_ARG_SINKS, sinks_bytes * c->num_heads, PA_ERR_OUT_OF_BOUNDS)) ||
        (rc = check_extent(c, e, PA_ARG_Q_ROPE, rows * c->rope_dim, PA_ERR_OUT_OF_BOUNDS)) ||
        (rc = check_extent(c, e, PA_ARG_K_ROPE, (uint64_t)c->num_blocks * c->block_size * c->rope_dim,
                           PA_ERR_OUT_OF_BOUNDS))) {
        return rc;
    }
    return PA_OK;
}

/* Binding, launch size, tiling pointer and extent, key, pointers and the two size words. */
static int32_t check_launch(pa_contract *c, const pa_mock_config *binding, uint32_t block_dim,
                            void *const ptrs[PA_NUM_PTR_ARGS], pa_mock_error *e) {
    if (!binding) {
        return FAIL(PA_ERR_BAD_LAUNCH, PA_CONTRACT_NONE, PA_CONTRACT_NONE, PA_CONTRACT_NONE, PA_CONTRACT_NONE,
                    "no pa_mock_bind() on this thread before call_kernel");
    }
    for (int32_t slot = 0; slot < PA_NUM_PTR_ARGS; ++slot) {
        c->extent[slot] = (int64_t)(binding->extent_bytes[slot] / pa_contract_elem_bytes(slot));
    }
    c->num_blocks = binding->num_blocks;
    c->block_dim = block_dim;
    if (binding->num_blocks <= 0) {
        return FAIL(PA_ERR_BAD_LAUNCH, PA_ARG_K, PA_CONTRACT_NONE, c->extent[PA_ARG_K], PA_CONTRACT_NONE,
                    "num_blocks must be bound (> 0), got %lld", (long long)binding->num_blocks);
    }
    if (block_dim == 0) {
        return FAIL(PA_ERR_BAD_LAUNCH, PA_CONTRACT_NONE, PA_CONTRACT_NONE, PA_CONTRACT_NONE, PA_CONTRACT_NONE,
                    "block_dim is 0");
    }
    const uint32_t *t = (const uint32_t *)ptrs[PA_ARG_TILING];
    if (!t) {
        return FAIL(PA_ERR_NULL_POINTER, PA_ARG_TILING, PA_CONTRACT_NONE, c->extent[PA_ARG_TILING], PA_CONTRACT_NONE,
                    "tiling is NULL");
    }
    int32_t rc = check_extent(c, e, PA_ARG_TILING, PA_TILING_HEADER_WORDS, PA_ERR_OUT_OF_BOUNDS);
    if (rc != PA_OK) {
        return rc;
    }
    c->key = t[PA_TW_KEY];
    if (!key_valid(c->key)) {
        return FAIL(PA_ERR_BAD_KEY, PA_ARG_TILING, PA_TW_KEY, c->extent[PA_ARG_TILING], PA_CONTRACT_NONE,
                    "tiling key %u is not one of 0, 1, 16, 17, 128, 129, 144, 145", c->key);
    }
    REQUIRE_WORD(t[PA_TW_HEADSIZE] == PA_TILING_HEADER_WORDS, PA_TW_HEADSIZE, "must be PA_TILING_HEADER_WORDS");
    c->q_len = t[PA_TW_Q_LEN];
    c->window_left = t[PA_TW_WINDOW_LEFT];
    c->sinks_dtype = t[PA_TW_SINKS_DTYPE];
    c->lse = t[PA_TW_LSE] != 0;
    c->rope_dim = t[PA_TW_ROPE_DIM];
    if ((rc = check_feature_words(c, t, e)) != PA_OK) {
        return rc;
    }
    c->bf16 = (c->key & PA_KEY_BF16_BIT) != 0;
    c->split_kv = (c->key & PA_KEY_SPLIT_KV_BIT) != 0;
    c->split_block = (c->key & PA_KEY_SPLIT_BLOCK_BIT) != 0;
    if ((rc = check_pointers(c, ptrs, e)) != PA_OK) {
        return rc;
    }
    REQUIRE_WORD(t[PA_TW_PARASIZE] == PA_TILING_BATCH_WORDS, PA_TW_PARASIZE, "must be PA_TILING_BATCH_WORDS");
    c->batch = t[PA_TW_DECODER_BS];
    REQUIRE_WORD(c->batch >= 1 && c->batch <= PA_MAX_BATCH, PA_TW_DECODER_BS, "batch must be in [1, PA_MAX_BATCH]");
    return check_extent(c, e, PA_ARG_TILING, PA_TILING_HEADER_WORDS + (uint64_t)PA_TILING_BATCH_WORDS * c->batch,
                        PA_ERR_OUT_OF_BOUNDS);
}

uint32_t pa_contract_first_token(const pa_contract *c, uint32_t kv_len) {
    return pa_kv_first_token(kv_len, c->q_len, c->window_left, c->block_size);
}

uint32_t pa_contract_splits(const pa_contract *c, uint32_t kv_len) {
    return kv_len ? pa_kv_splits(kv_len - pa_contract_first_token(c, kv_len), c->block_size, c->kv_split) : 0;
}

int32_t pa_contract_check(pa_contract *c, const pa_mock_config *binding, uint32_t block_dim,
                          void *const ptrs[PA_NUM_PTR_ARGS], uint32_t features, pa_mock_error *e) {
    memset(c, 0, sizeof *c);
    pa_contract_clear(e);
    const uint32_t *t = (const uint32_t *)ptrs[PA_ARG_TILING];
    int32_t rc = PA_OK;
    if ((rc = check_launch(c, binding, block_dim, ptrs, e)) || (rc = check_features(c, t, features, e)) ||
        (rc = check_header(c, t, e)) ||
        (rc = check_gather(c, t, e)) || (rc = check_lengths(c, t, e)) || (rc = check_layout(c, t, e)) ||
        (rc = check_extents(c, e))) {
        return rc;
    }
    return PA_OK;
}
