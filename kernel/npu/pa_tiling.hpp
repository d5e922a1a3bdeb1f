/*
 * Reading the tiling words (ABI v2) and walking the task list exactly as docs/CONTRACT.md ("Task loop") defines it:
 * process = block_idx, block_idx + block_num, ... over the former pass (former_batch x head chunks x kvCN),
 * then the tail pass (tail_batch x tail head chunks, whole sequences, also under a split-KV key: ABI v6).
 * Schedule position p runs the slot named by per-sequence word 13 of slot p (a gather map).  Cube and vector
 * cores walk the same list.
 */
#ifndef PA_TILING_HPP
#define PA_TILING_HPP

#include "pa_platform.hpp"

namespace pa {

AICORE inline uint64_t HiLo(uint32_t hi, uint32_t lo) { return (uint64_t(hi) << 32) | lo; }
AICORE inline uint32_t CeilDiv(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

struct Tiling {
    Gm<uint32_t> words;
    uint32_t batch, numHeads, headDim, blockSize, maxBlocks, kvHeads, group;
    uint32_t formerBatch, formerHead, tailBatch, tailHead, kvSplit, kvCoreNum, tileTokens, key;
    uint32_t handoff;     /* tokens per hand-off: the row pitch of S and P in scratch                         */
    uint64_t sHalf, pHalf; /* elements of one S / P stage of a core (ABI v2 word 43, or the v1 halves)      */
    float scale;
    /* ABI v3 decode features this kernel executes (one query token): a sliding window, sinks, the lse. */
    uint32_t qLen, windowLeft, sinksDtype, ropeDim;
    uint32_t mlaRescale; /* ABI v5: PA_MLA_RESCALE_*, how an MLA task's output accumulator is rescaled */
    bool lse;

    AICORE inline uint32_t Word(uint32_t i) const { return ReadScalar(words, i); }
    AICORE inline uint32_t SlotWord(uint32_t slot, uint32_t field) const
    {
        return Word(PA_TILING_HEADER_WORDS + PA_TILING_BATCH_WORDS * slot + field);
    }
    AICORE inline bool SplitKv() const { return kvCoreNum > 1; }
};

AICORE inline Tiling ReadTiling(__gm__ uint8_t *raw)
{
    Tiling t;
    t.words = BindGm<uint32_t>(raw, PA_ARG_TILING);
    t.batch = t.Word(PA_TW_DECODER_BS);
    t.numHeads = t.Word(PA_TW_NUMHEADS);
    t.headDim = t.Word(PA_TW_HEADDIM);
    t.blockSize = t.Word(PA_TW_BLOCKSIZE);
    t.maxBlocks = t.Word(PA_TW_MAXBLOCKS);
    t.kvHeads = t.Word(PA_TW_KVHEADS);
    if (t.kvHeads == 0) t.kvHeads = t.numHeads; /* ATB: 0 means MHA */
    t.group = t.numHeads / t.kvHeads;
    t.formerBatch = t.Word(PA_TW_FORMER_BATCH);
    t.formerHead = t.Word(PA_TW_FORMER_HEAD);
    t.tailBatch = t.Word(PA_TW_TAIL_BATCH);
    t.tailHead = t.Word(PA_TW_TAIL_HEAD);
    t.kvSplit = t.Word(PA_TW_KVSPLIT);
    t.kvCoreNum = t.Word(PA_TW_KVCORENUM);
    t.tileTokens = t.Word(PA_TW_BLOCKSIZE_CALC);
    t.key = t.Word(PA_TW_KEY);
    const uint32_t handoff = t.Word(PA_TW_HANDOFF_TOKENS), stage = t.Word(PA_TW_SCORE_STAGE_ELEMS);
    t.handoff = handoff != 0 ? handoff : PA_DEFAULT_HANDOFF_TOKENS;
    t.sHalf = stage != 0 ? stage : PA_S_HALF_ELEMS;
    t.pHalf = stage != 0 ? stage : PA_P_HALF_ELEMS;
    union {
        uint32_t u;
        float f;
    } bits;
    bits.u = t.Word(PA_TW_TOR);
    t.scale = bits.f;
    t.qLen = t.Word(PA_TW_Q_LEN);
    t.windowLeft = t.Word(PA_TW_WINDOW_LEFT);
    t.sinksDtype = t.Word(PA_TW_SINKS_DTYPE);
    t.lse = t.Word(PA_TW_LSE) != 0;
    t.ropeDim = t.Word(PA_TW_ROPE_DIM);
    t.mlaRescale = t.Word(PA_TW_MLA_RESCALE);
    return t;
}

/* The most rows (heads x query tokens) a task of the launch holds, over both passes: what an MLA task's matmul M
 * must fit (the supported-launch check) and what picks its cube path (CubeCore::Run). */
AICORE inline uint32_t MaxTaskRows(const Tiling &t)
{
    return (t.formerHead > t.tailHead ? t.formerHead : t.tailHead) * t.qLen;
}

/* The first token a sequence's tiles cover: the start of the page holding its window's first key, or 0
 * (the ABI's pa_kv_first_token, restated as device code for the reason SplitsOf gives).  Pages before it
 * are never read. */
AICORE inline uint32_t FirstToken(const Tiling &t, uint32_t kvLen)
{
    if (t.windowLeft == PA_WINDOW_NONE || uint64_t(kvLen) <= uint64_t(t.qLen) + t.windowLeft) return 0;
    return (kvLen - t.qLen - t.windowLeft) / t.blockSize * t.blockSize;
}

/* One (sequence, head range, KV range) unit of work.  empty: a zero-length sequence's head range (split 0).
 * Its rows are its heads x the launch's query tokens (TaskRun says how the cube orders them). */
struct Task {
    uint32_t slot, batchIdx, kvLen, headStart, headCount, split, tokStart, tokCount;
    uint64_t addrQ, addrO, addrL, addrOfd;
    bool empty;
    bool whole; /* the task covers its sequence's whole range (no split-KV key, one split, or the tail pass of a
                   split-KV launch, ABI v6): its rows go straight to o, with no partial for the combine */
};

/* The work item and unit a fault or a hazard names (the simulation's diagnostics; nothing on the device): unit u of
 * task tk, whose instructions are issued next. */
AICORE inline void NameUnit(const Task &tk, uint32_t u)
{
    SetWorkItem(int32_t(tk.slot), int32_t(tk.headStart), int32_t(tk.split));
    SetUnit(u);
}

/* Splits a sequence of kvLen tokens actually has: ceil(round_up(kvLen - first, bs) / KVSPLIT), first the
 * window's first page (FirstToken).  The ABI's pa_kv_splits(), restated as device code (a plain host inline
 * function cannot be called from an AICORE function); tests/test_sim_kernel.py's split-KV cases hold the two to
 * the same answer. */
AICORE inline uint32_t SplitsOf(const Tiling &t, uint32_t kvLen)
{
    return CeilDiv(CeilDiv(kvLen - FirstToken(t, kvLen), t.blockSize) * t.blockSize, t.kvSplit);
}

/* kvLen: the slot's PA_BF_KV_SEQLEN, which the task walk has read already (each read is a scalar GM load);
 * tailPass: the task is the tail pass's, its sequence's whole range whatever KVSPLIT says. */
AICORE inline Task MakeTask(const Tiling &t, uint32_t slot, uint32_t kvLen, uint32_t headStart, uint32_t headSplit,
                            uint32_t split, bool tailPass)
{
    Task k;
    k.slot = slot;
    k.kvLen = kvLen;
    k.batchIdx = t.SlotWord(slot, PA_BF_BATCH_IDX);
    k.headStart = headStart;
    k.headCount = t.numHeads - headStart < headSplit ? t.numHeads - headStart : headSplit;
    k.split = split;
    k.addrQ = HiLo(t.SlotWord(slot, PA_BF_ADDR_Q_HI), t.SlotWord(slot, PA_BF_ADDR_Q_LO));
    k.addrO = HiLo(t.SlotWord(slot, PA_BF_ADDR_O_HI), t.SlotWord(slot, PA_BF_ADDR_O_LO));
    k.addrL = HiLo(t.SlotWord(slot, PA_BF_ADDR_L_HI), t.SlotWord(slot, PA_BF_ADDR_L_LO));
    k.addrOfd = HiLo(t.SlotWord(slot, PA_BF_ADDR_OFD_HI), t.SlotWord(slot, PA_BF_ADDR_OFD_LO));
    k.empty = k.kvLen == 0;
    k.tokStart = FirstToken(t, k.kvLen) + split * t.kvSplit;
    k.tokCount = 0;
    k.whole = tailPass || !t.SplitKv();
    if (!k.empty) {
        const uint32_t splits = tailPass ? 1 : SplitsOf(t, k.kvLen);
        k.whole = k.whole || splits == 1;
        k.tokCount = split + 1 == splits ? k.kvLen - k.tokStart : t.kvSplit;
    }
    return k;
}

/* Calls fn(task) for every task of core `core` in launch order.  Splits beyond a sequence's length are
 * skipped; an empty sequence yields one `empty` task per head chunk (split 0) so its rows get zeros. */
template <typename Fn>
AICORE inline void ForEachTask(const Tiling &t, uint32_t core, uint32_t blockNum, Fn &&fn)
{
    for (int pass = 0; pass < 2; ++pass) {
        const uint32_t positions = pass == 0 ? t.formerBatch : t.tailBatch;
        const uint32_t first = pass == 0 ? 0 : t.formerBatch;
        const uint32_t headSplit = pass == 0 ? t.formerHead : t.tailHead;
        const uint32_t kvcn = pass == 0 ? t.kvCoreNum : 1;
        if (positions == 0 || headSplit == 0) continue;
        const uint32_t chunks = CeilDiv(t.numHeads, headSplit);
        const uint32_t total = positions * chunks * kvcn;
        for (uint32_t process = core; process < total; process += blockNum) {
            const uint32_t position = first + process / (chunks * kvcn);
            const uint32_t slot = t.SlotWord(position, PA_BF_GATHER);
            const uint32_t chunk = (process / kvcn) % chunks;
            const uint32_t split = process % kvcn;
            const uint32_t kvLen = t.SlotWord(slot, PA_BF_KV_SEQLEN);
            if (kvLen == 0 ? split != 0 : split >= (pass == 0 ? SplitsOf(t, kvLen) : 1)) continue;
            SetWorkItem(int32_t(slot), int32_t(chunk * headSplit), int32_t(split));
            fn(MakeTask(t, slot, kvLen, chunk * headSplit, headSplit, split, pass == 1));
        }
    }
}

/* ---- a task's rows ---------------------------------------------------------------------------------------
 * A task computes its heads x q_len query rows.  Query token t of head h is row t * Hq + h of q, o and the lse
 * (the ABI's layout).  The cube multiplies every row that shares a KV head in one matmul, so the scratch rows
 * (S, P, O_tmp) of a task are ordered by KV head: the run of the task's q heads [head0, head0 + heads) on KV head
 * kvh takes scratch rows [row0, row0 + heads * q_len), token-major (row0 + t * heads + h - head0 is token t of
 * head h), so each query token's heads are contiguous rows in GM and in the scratch.  With one query token the
 * scratch row of a head is its offset in the task, as before. */
struct TaskRun {
    uint32_t kvh;          /* the KV head                                                     */
    uint32_t head0, heads; /* the run's q heads (absolute)                                   */
    uint32_t row0, rows;   /* its scratch rows: row0 = (head0 - headStart) * q_len, heads * q_len */
};

/* The run of the task's q heads on KV head kvh (a KV head the task holds). */
AICORE inline TaskRun RunOf(const Tiling &t, const Task &tk, uint32_t kvh)
{
    uint32_t first = kvh * t.group, end = first + t.group;
    if (first < tk.headStart) first = tk.headStart;
    if (end > tk.headStart + tk.headCount) end = tk.headStart + tk.headCount;
    return TaskRun{kvh, first, end - first, (first - tk.headStart) * t.qLen, (end - first) * t.qLen};
}

/* Calls fn(ubRow, scratchRow, rows) for the scratch rows of query token `token` of heads [head, head + n): one call
 * per run they cross, merged where the scratch rows continue (always with one query token).  ubRow counts from
 * `head`: the vectors hold a token's heads as consecutive rows. */
template <typename Fn>
AICORE inline void ForEachScratchRows(const Tiling &t, const Task &tk, uint32_t token, uint32_t head, uint32_t n,
                                      Fn &&fn)
{
    uint32_t pendUb = 0, pendRow = 0, pendRows = 0;
    for (uint32_t h = head; h < head + n;) {
        const TaskRun run = RunOf(t, tk, h / t.group);
        const uint32_t end = run.head0 + run.heads < head + n ? run.head0 + run.heads : head + n;
        const uint32_t row = run.row0 + token * run.heads + (h - run.head0);
        if (pendRows != 0 && pendRow + pendRows == row) {
            pendRows += end - h;
        } else {
            if (pendRows != 0) fn(pendUb, pendRow, pendRows);
            pendUb = h - head;
            pendRow = row;
            pendRows = end - h;
        }
        h = end;
    }
    if (pendRows != 0) fn(pendUb, pendRow, pendRows);
}

/* The key window of query token `token` of a sequence of kvLen keys, as task columns [0, tokCount): keys before
 * column lo and from column hi on are masked (the window's left edge; the causal edge of the later query tokens,
 * whose keys are in the sequence before it).  Token t sits at position kvLen - q_len + t and sees keys
 * max(0, p - W) .. p.  Signed: either edge may lie outside the task. */
struct KeySpan {
    int64_t lo, hi;
};
AICORE inline KeySpan VisibleKeys(const Tiling &t, const Task &tk, uint32_t token)
{
    const int64_t pos = int64_t(tk.kvLen) - int64_t(t.qLen) + int64_t(token);
    const int64_t first = t.windowLeft == PA_WINDOW_NONE ? 0 : pos - int64_t(t.windowLeft);
    return KeySpan{first - int64_t(tk.tokStart), pos + 1 - int64_t(tk.tokStart)};
}

/* Hand-off units of a task: ceil(tokCount / handoff). */
AICORE inline uint32_t UnitsOf(const Tiling &t, const Task &k) { return CeilDiv(k.tokCount, t.handoff); }
AICORE inline uint32_t UnitTokens(const Tiling &t, const Task &k, uint32_t u)
{
    const uint32_t rest = k.tokCount - u * t.handoff;
    return rest < t.handoff ? rest : t.handoff;
}

/* Columns of the piece of a unit that starts at column w0: kPieceTokens, or what is left of the unit. */
AICORE inline uint32_t PieceTokens(uint32_t unitLen, uint32_t w0)
{
    return unitLen - w0 < uint32_t(kPieceTokens) ? unitLen - w0 : uint32_t(kPieceTokens);
}

/* Per-core scratch bases (elements): two stages per core, S and P of the plan's stage size (ABI v2) or the v1
 * halves; o_tmp at the ABI strides. */
AICORE inline uint64_t ScratchS(const Tiling &t, uint32_t core, uint32_t stage)
{
    return (2 * uint64_t(core) + stage) * t.sHalf;
}
AICORE inline uint64_t ScratchP(const Tiling &t, uint32_t core, uint32_t stage)
{
    return (2 * uint64_t(core) + stage) * t.pHalf;
}
AICORE inline uint64_t ScratchO(uint32_t core, uint32_t stage)
{
    return uint64_t(core) * PA_O_TMP_CORE_STRIDE_ELEMS + uint64_t(stage) * PA_O_TMP_HALF_ELEMS;
}
/* An MLA task's fp32 output accumulator: the first or second of its core's two (PA_MLA_O_TMP_CORE_STRIDE_ELEMS), by
 * the task's parity among the core's tasks with work (the same count on the cube and the vectors). */
AICORE inline uint64_t MlaAcc(uint32_t core, uint32_t parity)
{
    return uint64_t(core) * PA_MLA_O_TMP_CORE_STRIDE_ELEMS + uint64_t(parity) * PA_O_TMP_CORE_STRIDE_ELEMS;
}

}  // namespace pa

#endif /* PA_TILING_HPP */
