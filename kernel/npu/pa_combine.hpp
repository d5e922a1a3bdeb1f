/*
 * Split-KV combine (vector cores, after the all-vector barrier): for each (schedule position, query row t * Hq + h) the
 * m_split normalised partials O_i and their lse_i = ln(l_i) + m_i become
 *     O = sum_i w_i O_i,   w_i = exp(lse_i - M) / sum_j exp(lse_j - M),   M = max_i lse_i,
 * cast once to the output dtype.  Work items are spread over all 2 * block_num vector sub-cores (the
 * upstream kernel had both sub-cores of a cluster write the same rows).  Partials are folded in chunks of
 * kChunkRows rows so UB use does not grow with kvCN.  A sequence of one split has no partial: its task
 * wrote the output row (pa_vector.hpp, Finish), exactly what the combine of one partial would write.
 * A sink joins as one more term of the weights' sum, exp(sink - M), whose partial is zero; the row's lse is
 * M + ln(sum), sink included.
 *
 * A work item is a run of consecutive query rows of one sequence (CombineRunsPerSlot), so the sequence's words
 * (slot, length, three addresses: eight scalar GM reads) are read once per run, not once per row.
 */
#ifndef PA_COMBINE_HPP
#define PA_COMBINE_HPP

#include "pa_features.hpp"

namespace pa {

/* Runs of each sequence's rowsPerSlot query rows the combine's items cut it into.  The cost of r runs is
 * ceil(batch x r / workers) x (ceil(rowsPerSlot / r) + 1): the busiest sub-core's rows, plus one per run for the
 * run's reads of the sequence's words.  With k items on the busiest sub-core the most runs are floor(k x workers /
 * batch), so only those r are tried, for the first kCombineRoundsTried values of k from the least that gives every
 * sequence a run (a short scalar loop, once per sub-core).  One row per item when the sub-cores outnumber the rows;
 * b8 x 128 rows on 48 sub-cores: 6 runs of 22 rows, one item per sub-core. */
AICORE inline uint32_t CombineRunsPerSlot(uint32_t batch, uint32_t rowsPerSlot, uint32_t workers)
{
    if (batch == 0 || rowsPerSlot == 0 || workers == 0) return 1;
    const uint32_t most = rowsPerSlot < uint32_t(kCombineMaxRunsPerSlot) ? rowsPerSlot
                                                                          : uint32_t(kCombineMaxRunsPerSlot);
    const uint32_t k0 = CeilDiv(batch, workers);
    uint32_t best = 1;
    uint64_t bestCost = ~uint64_t(0);
    for (uint32_t k = k0; k < k0 + uint32_t(kCombineRoundsTried); ++k) {
        uint64_t r = uint64_t(k) * workers / batch; /* >= 1: k x workers >= batch */
        if (r > most) r = most;
        const uint64_t rounds = (uint64_t(batch) * r + workers - 1) / workers;
        const uint64_t cost = rounds * ((rowsPerSlot + r - 1) / r + 1);
        if (cost < bestCost) {
            bestCost = cost;
            best = uint32_t(r);
        }
        if (r == most) break;
    }
    return best;
}

template <typename T, int DCap>
struct CombineCore {
    /* Partial rows folded per chunk on the per-row path: kCombineChunkRows, fewer where kvCN is bounded lower (at most
     * PA_COMBINE_UB_FLOATS / D splits: 16 at D 512), so that the steps' buffers fit beside the chunk. */
    static constexpr int kChunkRows =
        kCombineChunkRows < PA_COMBINE_UB_FLOATS / DCap ? kCombineChunkRows : PA_COMBINE_UB_FLOATS / DCap;
    /* lse / weights of all splits as one row (tile-scalar instructions take row-major operands) */
    using LseRow = Tile<TileType::Vec, float, 1, kCombineMaxSplits, BLayout::RowMajor, 1, DYNAMIC>;
    /* a chunk of the same weights seen as a column, one per partial row */
    using WCol = Tile<TileType::Vec, float, kChunkRows, 1, BLayout::ColMajor, DYNAMIC, 1>;
    /* 8 floats = one 32-byte UB block, the smallest vector operand; only element 0 is valid. */
    using Scalar = Tile<TileType::Vec, float, 1, 8, BLayout::RowMajor, 1, 1>;
    using Chunk = Tile<TileType::Vec, float, kChunkRows, DCap, BLayout::RowMajor, DYNAMIC, DYNAMIC>;
    using RowF = Tile<TileType::Vec, float, 1, DCap, BLayout::RowMajor, 1, DYNAMIC>;
    using RowT = Tile<TileType::Vec, T, 1, DCap, BLayout::RowMajor, 1, DYNAMIC>;
    /* one 16-bit sink as loaded: one 32-byte UB block, element 0 valid */
    using ScalarH = Tile<TileType::Vec, half, 1, 16, BLayout::RowMajor, 1, 1>;
    using ScalarB = Tile<TileType::Vec, bfloat16_t, 1, 16, BLayout::RowMajor, 1, 1>;

    /* UB layout (bytes): lse/weights | max | sum | chunk of partials | column sum | accumulator | output. */
    static constexpr uint32_t kUbLse = 0;
    static constexpr uint32_t kUbMax = AlignUp(LseRow::Numel * sizeof(float), kOnChipAlign);
    static constexpr uint32_t kUbSum = kUbMax + kOnChipAlign;
    static constexpr uint32_t kUbTmp = kUbSum + kOnChipAlign;
    static constexpr uint32_t kUbChunk = AlignUp(kUbTmp + LseRow::Numel * sizeof(float), kOnChipAlign);
    static constexpr uint32_t kUbPart = AlignUp(kUbChunk + Chunk::Numel * sizeof(float), kOnChipAlign);
    static constexpr uint32_t kUbAcc = AlignUp(kUbPart + RowF::Numel * sizeof(float), kOnChipAlign);
    static constexpr uint32_t kUbOut = AlignUp(kUbAcc + RowF::Numel * sizeof(float), kOnChipAlign);
    static constexpr uint32_t kUbSink = AlignUp(kUbOut + RowT::Numel * sizeof(T), kOnChipAlign); /* fp32 sink */
    static constexpr uint32_t kUbSinkRaw = kUbSink + kOnChipAlign; /* the sink as loaded, 16-bit */
    static constexpr uint32_t kUbLseOut = kUbSinkRaw + kOnChipAlign; /* the row's lse */
    static_assert(kUbLseOut + kOnChipAlign <= kUbBytes, "combine UB plan overflows");

    /* ---- Steps of several rows (Rows): sequences of at most kFloatsPerBlock splits ---------------------------
     * A step's rows are combined by instructions over all of them: the lse of a row's m splits is one row of a
     * rows x 8 tile (one 32-byte block per row), so the max, the weights and their sum are row operations with no
     * scalar read; the weights spread into one block each (vbrcb), and the blocks of split i, one every 8, picked
     * into consecutive blocks are the row-expand operand that weights split i's partial rows. */
    /* fp32 of every partial of a step's rows; a step's rows: as many as fit with two splits, at most 64 */
    static constexpr uint32_t kStepPartFloats = 16384;
    static constexpr int kStepRows = int(kStepPartFloats / 2 / DCap) < 64 ? int(kStepPartFloats / 2 / DCap) : 64;
    using LseStep = Tile<TileType::Vec, float, kStepRows, kFloatsPerBlock, BLayout::RowMajor, DYNAMIC, DYNAMIC>;
    using ColStep = Tile<TileType::Vec, float, kStepRows, 1, BLayout::ColMajor, DYNAMIC, 1>;
    using RowStep = Tile<TileType::Vec, float, 1, kStepRows, BLayout::RowMajor, 1, DYNAMIC>;
    /* one block per (row, split): block r x 8 + i holds split i's weight of row r */
    using Spread = Tile<TileType::Vec, float, kStepRows * kFloatsPerBlock, kFloatsPerBlock, BLayout::RowMajor,
                        DYNAMIC, DYNAMIC>;
    using PartStep = Tile<TileType::Vec, float, kStepRows, DCap, BLayout::RowMajor, DYNAMIC, DYNAMIC>;
    using OutStep = Tile<TileType::Vec, T, kStepRows, DCap, BLayout::RowMajor, DYNAMIC, DYNAMIC>;
    /* a step's whole rows (D = DCap) as one row: the conversion is one instruction, not one per row */
    using PartFlat = Tile<TileType::Vec, float, 1, kStepRows * DCap, BLayout::RowMajor, 1, DYNAMIC>;
    using OutFlat = Tile<TileType::Vec, T, 1, kStepRows * DCap, BLayout::RowMajor, 1, DYNAMIC>;
    /* the 16-bit sinks as loaded: rows of at least one 32-byte block */
    static constexpr int kStepSinkCols = kStepRows < 16 ? 16 : kStepRows;
    using SinkStepH = Tile<TileType::Vec, half, 1, kStepSinkCols, BLayout::RowMajor, 1, DYNAMIC>;
    using SinkStepB = Tile<TileType::Vec, bfloat16_t, 1, kStepSinkCols, BLayout::RowMajor, 1, DYNAMIC>;
    static constexpr uint32_t kBlockBytes = kFloatsPerBlock * sizeof(float);
    static constexpr uint32_t kStepColBytes = AlignUp(kStepRows * sizeof(float), kOnChipAlign);
    /* UB layout (bytes), after the per-row path's: lse | temporary | max | sum | sink | sink as loaded | lse out |
     * spread weights | picked weights of each split | output | partials (last: a split's rows start R x D in). */
    static constexpr uint32_t kUbStepLse = AlignUp(kUbLseOut + kOnChipAlign, kOnChipAlign);
    static constexpr uint32_t kUbStepTmp = kUbStepLse + AlignUp(LseStep::Numel * sizeof(float), kOnChipAlign);
    static constexpr uint32_t kUbStepMax = kUbStepTmp + AlignUp(LseStep::Numel * sizeof(float), kOnChipAlign);
    static constexpr uint32_t kUbStepSum = kUbStepMax + kStepColBytes;
    static constexpr uint32_t kUbStepSink = kUbStepSum + kStepColBytes;
    static constexpr uint32_t kUbStepSinkRaw = kUbStepSink + kStepColBytes;
    static constexpr uint32_t kUbStepLseOut = kUbStepSinkRaw + kStepColBytes;
    static constexpr uint32_t kUbStepSpread = kUbStepLseOut + kStepColBytes;
    static constexpr uint32_t kUbStepPick = kUbStepSpread + AlignUp(Spread::Numel * sizeof(float), kOnChipAlign);
    static constexpr uint32_t kUbStepOut = kUbStepPick + AlignUp(Spread::Numel * sizeof(float), kOnChipAlign);
    static constexpr uint32_t kUbStepPart = kUbStepOut + AlignUp(OutStep::Numel * sizeof(T), kOnChipAlign);
    /* the last split's tile starts at most kStepPartFloats - R x D in and spans kStepRows x DCap */
    static_assert(kUbStepPart + (kStepPartFloats + kStepRows * DCap) * sizeof(float) <= TMP_UB_OFFSET,
                  "combine step UB plan overflows");

    const Tiling &t;
    uint32_t core, sub;
    Gm<T> o;
    Gm<float> ocore, l, lseGm; /* PA_ARG_LSE, NULL without the lse */
    __gm__ uint8_t *sinks; /* PA_ARG_SINKS in its PA_TW_SINKS_DTYPE, NULL without sinks */

    /* V, both paths: the centred lse (and sink) -> exp, then each row's sum of the weights with exp(sink - max)
     * joined; `sum` is the row sum's destination, `sumRow` the same values as element-wise ops take them. */
    template <typename L, typename Sink, typename Sum, typename SumRow, typename Tmp>
    AICORE inline void ExpAndSum(L &lse, Sink &sink, Sum &sum, SumRow &sumRow, Tmp &tmp, bool withSink)
    {
        Exp(lse, lse);
        if (withSink) Exp(sink, sink);
        VecBarrier(kEdgeBarCombExp);
        RowSum(sum, lse, tmp);
        if (withSink) {
            VecBarrier(kEdgeBarCombSink);
            Add(sumRow, sumRow, sink);
        }
    }

    /* A sequence's words the combine uses, read once per run of its rows. */
    struct Seq {
        uint32_t slot, splits;
        uint64_t addrL, addrOfd, addrO;
    };
    AICORE inline Seq SeqOf(uint32_t slot, uint32_t splits) const
    {
        return Seq{slot, splits, HiLo(t.SlotWord(slot, PA_BF_ADDR_L_HI), t.SlotWord(slot, PA_BF_ADDR_L_LO)),
                   HiLo(t.SlotWord(slot, PA_BF_ADDR_OFD_HI), t.SlotWord(slot, PA_BF_ADDR_OFD_LO)),
                   HiLo(t.SlotWord(slot, PA_BF_ADDR_O_HI), t.SlotWord(slot, PA_BF_ADDR_O_LO))};
    }

    /* Query row `row` (token t, head h: t * Hq + h) of sequence `seq`. */
    AICORE inline void One(const Seq &seq, uint32_t row)
    {
        const uint32_t head = row % t.numHeads;
        const uint32_t d = t.headDim;
        const uint64_t kvcn = t.kvCoreNum;
        const uint32_t slot = seq.slot, m = seq.splits;
        const uint64_t addrL = seq.addrL, addrOfd = seq.addrOfd, addrO = seq.addrO;
        LseRow lse(m), tmp(m);
        Scalar mx, sm;
        Assign(lse, kUbLse);
        Assign(tmp, kUbTmp);
        Assign(mx, kUbMax);
        Assign(sm, kUbSum);
        Scalar sink, lseOut;
        ScalarH h16;
        ScalarB b16;
        Assign(sink, kUbSink);
        Assign(h16, kUbSinkRaw);
        Assign(b16, kUbSinkRaw);
        Assign(lseOut, kUbLseOut);
        const bool withSink = t.sinksDtype != PA_SINKS_NONE;
        WaitFlag(kLseUbFree);
        LoadNd(lse, l, addrL + uint64_t(row) * kvcn, 1, m, m, kTrafficPartial);
        if (withSink) LoadSinks(t, sinks, head, 1, sink, h16, b16);
        Handoff(kLseLoaded);
        /* the widened sink is next read after the V -> S wait below, which waits for every earlier V instruction */
        if (withSink) WidenSinks(t, sink, h16, b16);
        RowMax(mx, lse, tmp);
        Handoff(kMaxToScalar); /* the scalar unit reads UB next */
        const float maxLse = ScalarRead(mx, 0);
        /* No V barrier before overwriting lse: the scalar unit issues AddS only after GetValue returned, and
         * GetValue waited (kMaxToScalar) for every earlier V instruction, TROWMAX's read of lse included. */
        AddS(lse, lse, -maxLse);
        if (withSink) AddS(sink, sink, -maxLse);
        VecBarrier(kEdgeBarCombShift);
        ExpAndSum(lse, sink, sm, sm, tmp, withSink);
        Handoff(kSumToScalar);
        const float sum = ScalarRead(sm, 0);
        /* as above: TROWSUM's read of lse completed before GetValue, GetValue before MulS issues */
        MulS(lse, lse, 1.0f / sum);
        VecBarrier(kEdgeBarCombWeights);
        RowF part(d), acc(d);
        RowT out(d);
        Assign(part, kUbPart);
        Assign(acc, kUbAcc);
        Assign(out, kUbOut);
        for (uint32_t c0 = 0; c0 < m; c0 += kChunkRows) {
            const uint32_t rows = m - c0 < uint32_t(kChunkRows) ? m - c0 : uint32_t(kChunkRows);
            Chunk chunk(rows, d);
            WCol w(rows);
            Assign(chunk, kUbChunk);
            Assign(w, kUbLse + c0 * sizeof(float));
            WaitFlag(kChunkUbFree);
            LoadNd(chunk, ocore, addrOfd * kvcn + uint64_t(row) * kvcn * d + uint64_t(c0) * d, rows, d, d,
                   kTrafficPartial);
            Handoff(kChunkLoaded);
            RowExpandMul(chunk, chunk, w);
            VecBarrier(kEdgeBarCombScaled);
            if (c0 == 0) {
                ColSum(acc, chunk);
            } else {
                ColSum(part, chunk);
                VecBarrier(kEdgeBarCombColSum);
                Add(acc, acc, part);
            }
            SetFlag(kChunkUbFree);
        }
        SetFlag(kLseUbFree);
        VecBarrier(kEdgeBarCombAcc);
        WaitFlag(kCombOutFree);
        Cvt(out, acc, RoundMode::CAST_RINT);
        if (t.lse) {
            Log(lseOut, sm);
            VecBarrier(kEdgeBarCombLse);
            AddS(lseOut, lseOut, maxLse);
        }
        Handoff(kCombOutReady);
        StoreNd(o, addrO + uint64_t(row) * d, 1, d, d, out, kTrafficOther);
        if (t.lse) StoreNd(lseGm, LseIndex(t, slot, row), 1, 1, 1, lseOut, kTrafficOther);
        SetFlag(kCombOutFree);
    }

    /* Rows row0 .. row0 + r - 1 of `seq` (r <= kStepRows, r x m x D <= kStepPartFloats, m <= 8 splits; with sinks,
     * rows of one query token: heads row0 % Hq on, consecutive). */
    AICORE inline void Step(const Seq &seq, uint32_t row0, uint32_t r)
    {
        const uint32_t d = t.headDim, m = seq.splits;
        const uint64_t kvcn = t.kvCoreNum;
        const bool withSink = t.sinksDtype != PA_SINKS_NONE;
        LseStep lse(r, m), tmp(r, m);
        ColStep mx(r), sm(r);
        RowStep mxRow(r), smRow(r), sink(r), lseOut(r);
        SinkStepH h16(r);
        SinkStepB b16(r);
        Assign(lse, kUbStepLse);
        Assign(tmp, kUbStepTmp);
        Assign(mx, kUbStepMax);
        Assign(mxRow, kUbStepMax);
        Assign(sm, kUbStepSum);
        Assign(smRow, kUbStepSum);
        Assign(sink, kUbStepSink);
        Assign(h16, kUbStepSinkRaw);
        Assign(b16, kUbStepSinkRaw);
        Assign(lseOut, kUbStepLseOut);
        WaitFlag(kLseUbFree);
        LoadNd(lse, l, seq.addrL + uint64_t(row0) * kvcn, r, m, kvcn, kTrafficPartial);
        if (withSink) LoadSinks(t, sinks, row0 % t.numHeads, r, sink, h16, b16);
        Handoff(kLseLoaded);
        /* every split's partial rows, loaded while the weights are computed */
        WaitFlag(kChunkUbFree);
        for (uint32_t i = 0; i < m; ++i) {
            PartStep part(r, d);
            Assign(part, kUbStepPart + i * r * DCap * uint32_t(sizeof(float)));
            LoadNd(part, ocore, seq.addrOfd * kvcn + uint64_t(row0) * kvcn * d + uint64_t(i) * d, r, d, kvcn * d,
                   kTrafficPartial);
        }
        VecBarrier(kEdgeBarCombStep); /* the last step's reads of its max and sum (the lse out) come first */
        if (withSink) WidenSinks(t, sink, h16, b16);
        RowMax(mx, lse, tmp);
        VecBarrier(kEdgeBarCombMax);
        RowExpandSub(lse, lse, mx);
        if (withSink) Sub(sink, sink, mxRow);
        VecBarrier(kEdgeBarCombShift);
        ExpAndSum(lse, sink, sm, smRow, tmp, withSink);
        VecBarrier(kEdgeBarCombSum);
        RowExpandDiv(lse, lse, sm);
        VecBarrier(kEdgeBarCombWeights);
        Spread spread(r * kFloatsPerBlock, kFloatsPerBlock);
        Assign(spread, kUbStepSpread);
        SpreadToBlocks(spread, lse, r);
        VecBarrier(kEdgeBarCombSpread);
        for (uint32_t i = 0; i < m; ++i) {
            LseStep w(r, kFloatsPerBlock), from(r, kFloatsPerBlock);
            Assign(w, kUbStepPick + i * r * kBlockBytes);
            Assign(from, kUbStepSpread + i * kBlockBytes);
            PickBlocks(w, from, r, kFloatsPerBlock);
        }
        SetFlag(kLseUbFree);
        VecBarrier(kEdgeBarCombPick);
        Handoff(kChunkLoaded);
        PartStep acc(r, d);
        Assign(acc, kUbStepPart);
        for (uint32_t i = 0; i < m; ++i) {
            PartStep part(r, d);
            LseStep w(r, kFloatsPerBlock);
            Assign(part, kUbStepPart + i * r * DCap * uint32_t(sizeof(float)));
            Assign(w, kUbStepPick + i * r * kBlockBytes);
            RowExpandMul(part, part, w);
        }
        VecBarrier(kEdgeBarCombScaled);
        for (uint32_t i = 1; i < m; ++i) {
            PartStep part(r, d);
            Assign(part, kUbStepPart + i * r * DCap * uint32_t(sizeof(float)));
            if (i > 1) VecBarrier(kEdgeBarCombColSum);
            Add(acc, acc, part);
        }
        VecBarrier(kEdgeBarCombAcc);
        OutStep out(r, d);
        Assign(out, kUbStepOut);
        WaitFlag(kCombOutFree);
        if (d == uint32_t(DCap)) {
            PartFlat accFlat(r * d);
            OutFlat outFlat(r * d);
            Assign(accFlat, kUbStepPart);
            Assign(outFlat, kUbStepOut);
            Cvt(outFlat, accFlat, RoundMode::CAST_RINT);
        } else {
            Cvt(out, acc, RoundMode::CAST_RINT);
        }
        SetFlag(kChunkUbFree);
        if (t.lse) {
            Log(lseOut, smRow);
            VecBarrier(kEdgeBarCombLse);
            Add(lseOut, lseOut, mxRow);
        }
        Handoff(kCombOutReady);
        StoreNd(o, seq.addrO + uint64_t(row0) * d, r, d, d, out, kTrafficOther);
        if (t.lse) StoreNd(lseGm, LseIndex(t, seq.slot, row0), 1, r, r, lseOut, kTrafficOther);
        SetFlag(kCombOutFree);
    }

    AICORE inline void Run(uint32_t blockNum)
    {
        SetFlag(kLseUbFree);
        SetFlag(kChunkUbFree);
        SetFlag(kCombOutFree);
        const uint32_t rowsPerSlot = t.qLen * t.numHeads;
        const uint32_t workers = blockNum * kVecSubCores;
        /* the former pass's sequences: the tail pass's (ABI v6) are written whole by their tasks */
        const uint32_t runs = CombineRunsPerSlot(t.formerBatch, rowsPerSlot, workers);
        const uint32_t runRows = CeilDiv(rowsPerSlot, runs);
        const uint32_t items = t.formerBatch * runs;
        for (uint32_t i = core * kVecSubCores + sub; i < items; i += workers) {
            const uint32_t position = i / runs, row0 = i % runs * runRows;
            if (row0 >= rowsPerSlot) continue; /* ceil(rows / r) x r can pass the rows: an empty last run */
            const uint32_t rowEnd = row0 + runRows < rowsPerSlot ? row0 + runRows : rowsPerSlot;
            const uint32_t slot = t.SlotWord(position, PA_BF_GATHER);
            const uint32_t splits = SplitsOf(t, t.SlotWord(slot, PA_BF_KV_SEQLEN));
            /* an empty sequence's zero rows, and a one-split sequence's output rows, are already written */
            if (splits < 2) continue;
            const Seq seq = SeqOf(slot, splits);
            if (splits <= uint32_t(kFloatsPerBlock)) {
                const uint32_t fit = kStepPartFloats / (splits * DCap);
                const uint32_t most = fit < uint32_t(kStepRows) ? fit : uint32_t(kStepRows);
                for (uint32_t row = row0, r = 0; row < rowEnd; row += r) {
                    r = rowEnd - row < most ? rowEnd - row : most;
                    /* a sink load reads consecutive heads: a step with sinks ends at its query token's last row */
                    const uint32_t toTokenEnd = t.numHeads - row % t.numHeads;
                    if (t.sinksDtype != PA_SINKS_NONE && toTokenEnd < r) r = toTokenEnd;
                    SetWorkItem(int32_t(slot), int32_t(row), -1);
                    Step(seq, row, r);
                }
                continue;
            }
            for (uint32_t row = row0; row < rowEnd; ++row) {
                SetWorkItem(int32_t(slot), int32_t(row), -1);
                One(seq, row);
            }
        }
        DrainFlag(kLseUbFree);
        DrainFlag(kChunkUbFree);
        DrainFlag(kCombOutFree);
    }
};

}  // namespace pa

#endif /* PA_COMBINE_HPP */
