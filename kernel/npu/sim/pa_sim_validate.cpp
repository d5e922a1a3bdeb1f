/*
 * Contract checks the simulation makes before any core starts (the NPU kernel trusts the host): key, header
 * words, tile rule, split limits, the gather permutation, required pointers and the launch size.  Each
 * failure fills a pa_mock_error like the mock device does.
 */
#include "pa_sim_validate.hpp"

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <vector>

namespace pa::sim {

namespace {

int32_t Report(pa_mock_error *e, int32_t code, int32_t slot, int32_t seq, const char *fmt, ...)
{
    std::memset(e, 0, sizeof(*e));
    e->code = code;
    e->arg_slot = slot;
    e->element_offset = -1;
    e->extent_elems = -1;
    e->core = -1;
    e->seq = seq;
    e->head = -1;
    e->split = -1;
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
    return code;
}

bool KeyListed(uint32_t key)
{
    static const uint32_t kKeys[PA_NUM_KEYS] = {PA_KEY_FP16, PA_KEY_BF16, PA_KEY_FP16_SPLIT_KV, PA_KEY_BF16_SPLIT_KV,
                                                PA_KEY_FP16_SPLIT_BLOCK, PA_KEY_BF16_SPLIT_BLOCK,
                                                PA_KEY_FP16_SPLIT_KV_SPLIT_BLOCK, PA_KEY_BF16_SPLIT_KV_SPLIT_BLOCK};
    for (uint32_t k : kKeys) {
        if (k == key) return true;
    }
    return false;
}

uint32_t RoundUp(uint32_t a, uint32_t b) { return (a + b - 1) / b * b; }

}  // namespace

int32_t ValidateLaunch(uint32_t blockDim, void *const *ptr, const Launch &L, pa_mock_error *e)
{
    if (ptr[PA_ARG_TILING] == nullptr) return Report(e, PA_ERR_NULL_POINTER, PA_ARG_TILING, -1, "tiling is NULL");
    const uint32_t *w = static_cast<const uint32_t *>(ptr[PA_ARG_TILING]);
    const uint64_t words = L.extentBytes[PA_ARG_TILING] / sizeof(uint32_t);
    if (L.checked && words < PA_TILING_HEADER_WORDS)
        return Report(e, PA_ERR_BAD_TILING, PA_ARG_TILING, -1, "tiling holds %llu words, the header needs %d",
                      static_cast<unsigned long long>(words), PA_TILING_HEADER_WORDS);
    const uint32_t key = w[PA_TW_KEY];
    if (!KeyListed(key)) return Report(e, PA_ERR_BAD_KEY, PA_ARG_TILING, -1, "tiling key %u is not an ABI v1 key", key);
    if (w[PA_TW_HEADSIZE] != PA_TILING_HEADER_WORDS || w[PA_TW_PARASIZE] != PA_TILING_BATCH_WORDS)
        return Report(e, PA_ERR_BAD_TILING, PA_ARG_TILING, -1, "header/slot sizes %u/%u, expected %d/%d",
                      w[PA_TW_HEADSIZE], w[PA_TW_PARASIZE], PA_TILING_HEADER_WORDS, PA_TILING_BATCH_WORDS);
    const uint32_t batch = w[PA_TW_DECODER_BS];
    if (batch == 0 || batch > PA_MAX_BATCH || w[PA_TW_PREFILL_BS] != 0)
        return Report(e, PA_ERR_BAD_TILING, PA_ARG_TILING, -1, "decoder batch %u / prefill batch %u not supported",
                      batch, w[PA_TW_PREFILL_BS]);
    if (L.checked && words < uint64_t(PA_TILING_HEADER_WORDS) + uint64_t(PA_TILING_BATCH_WORDS) * batch)
        return Report(e, PA_ERR_BAD_TILING, PA_ARG_TILING, -1, "tiling holds %llu words, %u sequences need %llu",
                      static_cast<unsigned long long>(words), batch,
                      static_cast<unsigned long long>(PA_TILING_HEADER_WORDS + PA_TILING_BATCH_WORDS * batch));
    const uint32_t hq = w[PA_TW_NUMHEADS], d = w[PA_TW_HEADDIM], bs = w[PA_TW_BLOCKSIZE];
    const uint32_t hkv = w[PA_TW_KVHEADS] == 0 ? hq : w[PA_TW_KVHEADS];
    if (hq == 0 || hq % hkv != 0 || d == 0 || d % PA_TILE_ALIGN_TOKENS != 0 || d > PA_MAX_HEAD_DIM ||
        w[PA_TW_HEADDIM_V] != d || bs == 0 || bs % PA_TILE_ALIGN_TOKENS != 0 || w[PA_TW_MAXBLOCKS] == 0)
        return Report(e, PA_ERR_BAD_TILING, PA_ARG_TILING, -1,
                      "shape words not supported: Hq %u, Hkv %u, D %u, Dv %u, block_size %u, max_blocks %u", hq, hkv,
                      d, w[PA_TW_HEADDIM_V], bs, w[PA_TW_MAXBLOCKS]);
    if (w[PA_TW_MASK_MAX_LEN] != 0 || w[PA_TW_SCALETYPE] != 0)
        return Report(e, PA_ERR_BAD_TILING, PA_ARG_TILING, -1, "masks and logN scaling are not part of decode");
    const uint32_t tile = w[PA_TW_BLOCKSIZE_CALC];
    const bool splitBlock = (key & PA_KEY_SPLIT_BLOCK_BIT) != 0;
    const bool tileOk = splitBlock ? tile != 0 && tile <= bs && bs % tile == 0 && tile % PA_TILE_ALIGN_TOKENS == 0
                                   : tile != 0 && tile % bs == 0 && tile * d <= PA_TILE_ELEMS_LIMIT;
    if (!tileOk)
        return Report(e, PA_ERR_BAD_TILING, PA_ARG_TILING, -1, "tile of %u tokens breaks the %s tile rule (bs %u, D %u)",
                      tile, splitBlock ? "split-block" : "whole-page", bs, d);
    const uint32_t kvSplit = w[PA_TW_KVSPLIT], kvcn = w[PA_TW_KVCORENUM];
    const bool splitKv = (key & PA_KEY_SPLIT_KV_BIT) != 0;
    if (kvSplit == 0 || kvSplit % bs != 0 || kvcn == 0 || splitKv != (kvcn > 1) ||
        kvcn * RoundUp(d, 8) > PA_COMBINE_UB_FLOATS)
        return Report(e, PA_ERR_BAD_TILING, PA_ARG_TILING, -1, "KV split %u tokens x %u splits invalid for key %u",
                      kvSplit, kvcn, key);
    const uint32_t fb = w[PA_TW_FORMER_BATCH], fh = w[PA_TW_FORMER_HEAD];
    const uint32_t tb = w[PA_TW_TAIL_BATCH], th = w[PA_TW_TAIL_HEAD];
    if (fb + tb != batch || (fb && (fh == 0 || fh > PA_HEAD_SPLIT_LIMIT)) ||
        (tb && (th == 0 || th > PA_HEAD_SPLIT_LIMIT || splitKv)))
        return Report(e, PA_ERR_BAD_TILING, PA_ARG_TILING, -1, "passes %u x %u heads + %u x %u heads for %u sequences",
                      fb, fh, tb, th, batch);
    std::vector<uint8_t> seen(batch, 0);
    for (uint32_t p = 0; p < batch; ++p) {
        const uint32_t *slot = w + PA_TILING_HEADER_WORDS + PA_TILING_BATCH_WORDS * p;
        const uint32_t g = slot[PA_BF_GATHER];
        if (g >= batch || seen[g])
            return Report(e, PA_ERR_BAD_GATHER, PA_ARG_TILING, int32_t(p),
                          "gather word of position %u is %u: not a permutation of 0..%u", p, g, batch - 1);
        seen[g] = 1;
        const uint32_t len = slot[PA_BF_KV_SEQLEN];
        const uint32_t splits = (RoundUp(len, bs) + kvSplit - 1) / kvSplit;
        if (splits > kvcn || uint64_t(len) > uint64_t(w[PA_TW_MAXBLOCKS]) * bs)
            return Report(e, PA_ERR_BAD_TILING, PA_ARG_TILING, int32_t(p),
                          "sequence %u of %u tokens needs %u splits of %u (kvCN %u) or more than %u pages", p, len,
                          splits, kvSplit, kvcn, w[PA_TW_MAXBLOCKS]);
    }
    static const int kNeeded[] = {PA_ARG_Q, PA_ARG_K, PA_ARG_V, PA_ARG_BLOCK_TABLES, PA_ARG_O, PA_ARG_S, PA_ARG_P,
                                  PA_ARG_O_TMP};
    for (int slot : kNeeded) {
        if (ptr[slot] == nullptr) return Report(e, PA_ERR_NULL_POINTER, slot, -1, "pointer slot %d is NULL", slot);
    }
    if (splitKv && (ptr[PA_ARG_O_CORE] == nullptr || ptr[PA_ARG_L] == nullptr))
        return Report(e, PA_ERR_NULL_POINTER, ptr[PA_ARG_O_CORE] ? PA_ARG_L : PA_ARG_O_CORE, -1,
                      "split-KV key %u needs o_core and l", key);
    if (blockDim == 0) return Report(e, PA_ERR_BAD_LAUNCH, -1, -1, "block_dim is 0");
    if (L.checked) {
        const uint64_t elem = 2;
        const uint64_t need[3] = {uint64_t(blockDim) * PA_S_CORE_STRIDE_ELEMS * 4,
                                  uint64_t(blockDim) * PA_P_CORE_STRIDE_ELEMS * elem,
                                  uint64_t(blockDim) * PA_O_TMP_CORE_STRIDE_ELEMS * 4};
        const int slots[3] = {PA_ARG_S, PA_ARG_P, PA_ARG_O_TMP};
        for (int i = 0; i < 3; ++i) {
            if (L.extentBytes[slots[i]] < need[i])
                return Report(e, PA_ERR_BAD_LAUNCH, slots[i], -1,
                              "block_dim %u needs %llu bytes of scratch slot %d, %llu registered", blockDim,
                              static_cast<unsigned long long>(need[i]), slots[i],
                              static_cast<unsigned long long>(L.extentBytes[slots[i]]));
        }
    }
    return PA_OK;
}

}  // namespace pa::sim
