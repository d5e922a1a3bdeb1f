/*
 * Vector side (AIV, two sub-cores per cluster): online softmax over hand-off units and the output.
 *
 * Sub-core i owns rows [i*floor(n/2), ...) of a task's n heads.  Per unit u (stage = global unit % 2):
 *   softmax(u): S rows from GM s -> * scale -> row max -> running max m, dm = exp(m_old - m_new)
 *               P = exp(S - m) rounded to the input dtype -> GM p; l_u = row sum of the rounded P
 *   update(u):  O_tmp rows from GM o_tmp -> O = dm * O + O_tmp, l = dm * l + l_u
 * in the order softmax(0), softmax(1), update(0), softmax(2), update(1), ... over all units of all the core's
 * tasks (the mirror of the cube's preload pipeline, across task boundaries), so dm and l_u are kept per stage
 * and m per task parity.  After the last unit O /= l and either the output
 * row (cast once) or, for split-KV, the normalised fp32 partial and lse = ln(l) + m are written.
 * Decode features (one query token): a window's columns before its first key are set to -inf in the first
 * unit's S (the pages before the window are not in the task at all); a sink joins l once, when the output
 * row is written (l += exp(sink - m)), or in the combine for a split sequence; the lse row (sink included) is
 * written beside the output, -inf for an empty sequence.
 */
#ifndef PA_VECTOR_HPP
#define PA_VECTOR_HPP

#include "pa_combine.hpp"

namespace pa {

template <typename T, int DCap>
struct VectorCore {
    using SF = Tile<TileType::Vec, float, kVecRows, kPieceTokens, BLayout::RowMajor, DYNAMIC, DYNAMIC>;
    using PT = Tile<TileType::Vec, T, kVecRows, kPieceTokens, BLayout::RowMajor, DYNAMIC, DYNAMIC>;
    using OF = Tile<TileType::Vec, float, kVecRows, DCap, BLayout::RowMajor, DYNAMIC, DYNAMIC>;
    using OT = Tile<TileType::Vec, T, kVecRows, DCap, BLayout::RowMajor, DYNAMIC, DYNAMIC>;
    /* A per-row vector (one float per head row) as a column: row reductions write it, row-expand ops read it. */
    using Col = Tile<TileType::Vec, float, kVecRows, 1, BLayout::ColMajor, DYNAMIC, 1>;
    /* The same vector as one row: A2/A3's element-wise instructions take row-major tiles only. */
    using Row = Tile<TileType::Vec, float, 1, kVecRows, BLayout::RowMajor, 1, DYNAMIC>;
    /* The lse column as rows of one 32-byte block each (element (i, 0) = lse of row i), for its strided store:
     * A2/A3's UB -> GM copy reads one block per burst, so a column stored row by row must be spread out this
     * way first (stored straight from the column, every burst after the first read the wrong element).  Static
     * shapes: pto-isa's A2/A3 TROWEXPAND broadcasts with vbrcb only between static tiles. */
    using ColFull = Tile<TileType::Vec, float, kVecRows, 1, BLayout::ColMajor>;
    using LseBlocks = Tile<TileType::Vec, float, kVecRows, kFloatsPerBlock, BLayout::RowMajor>;
    using LseOut = Tile<TileType::Vec, float, kVecRows, kFloatsPerBlock, BLayout::RowMajor, DYNAMIC, DYNAMIC>;
    /* The sinks of a task's rows as they arrive in their own 16-bit type (one staging buffer, two views). */
    using SinkRowH = Tile<TileType::Vec, half, 1, kVecRows, BLayout::RowMajor, 1, DYNAMIC>;
    using SinkRowB = Tile<TileType::Vec, bfloat16_t, 1, kVecRows, BLayout::RowMajor, 1, DYNAMIC>;

    /* UB layout (bytes): S | P fp32 | P in dtype | O_tmp | O | O cast | per-row vectors. */
    static constexpr uint32_t kUbS = 0;
    static constexpr uint32_t kUbPf = kUbS + SF::Numel * sizeof(float);
    static constexpr uint32_t kUbPt = kUbPf + SF::Numel * sizeof(float);
    static constexpr uint32_t kUbOtmp = AlignUp(kUbPt + PT::Numel * sizeof(T), kOnChipAlign);
    static constexpr uint32_t kUbOacc = kUbOtmp + OF::Numel * sizeof(float);
    static constexpr uint32_t kUbOout = kUbOacc + OF::Numel * sizeof(float);
    static constexpr uint32_t kUbCols = AlignUp(kUbOout + OT::Numel * sizeof(T), kOnChipAlign);
    static constexpr uint32_t kColBytes = AlignUp(Col::Numel * sizeof(float), kRowVecAlign);
    /* kColM0/kColM1: the running max of the task in flight and of the next one (the next task's first
     * softmax runs before the current task's last update and output, which reads m for the lse). */
    enum ColSlot : uint32_t {
        kColM0,
        kColL = kColM0 + 2,
        kColLm,
        kColHm,
        kColPiece, /* a later piece's row max or row sum, folded into the unit's */
        kColLse,
        kColSink,    /* the rows' sinks in fp32, then exp(sink - m) */
        kColSinkRaw, /* the rows' sinks as loaded, when they are 16-bit */
        kColDm0,
        kColLl0 = kColDm0 + kStages,
        kColEnd = kColLl0 + kStages
    };
    static constexpr uint32_t kUbLseBlocks = kUbCols + kColEnd * kColBytes;
    static_assert(kUbLseBlocks + LseBlocks::Numel * sizeof(float) <= kUbBytes, "UB plan overflows");

    const Tiling &t;
    uint32_t core, sub;
    Gm<T> p, o;
    Gm<float> s, otmp, ocore, l, lseGm; /* lseGm: PA_ARG_LSE, NULL without the lse */
    __gm__ uint8_t *sinks; /* PA_ARG_SINKS in its PA_TW_SINKS_DTYPE, NULL without sinks */
    uint32_t unitCounter = 0;

    AICORE inline Col ColAt(ColSlot slot, uint32_t rows)
    {
        Col c(rows);
        Assign(c, kUbCols + slot * kColBytes);
        return c;
    }

    /* The same per-row vector as one row: A2/A3's element-wise instructions take row-major tiles only. */
    AICORE inline Row RowAt(ColSlot slot, uint32_t rows)
    {
        Row c(rows);
        Assign(c, kUbCols + slot * kColBytes);
        return c;
    }

    /* r x wl scores from GM offset `off` (row pitch: the hand-off) into S's UB buffer, times the scale, the
     * first `masked` columns (keys before the window) then set to -inf; the caller puts the V barrier that
     * orders the scaled S before its next use. */
    AICORE inline void LoadScaled(SF &sT, uint64_t off, uint32_t r, uint32_t wl, uint32_t masked)
    {
        WaitFlag(kSUbFree);
        LoadNd(sT, s, off, r, wl, t.handoff, kTrafficScratch);
        Handoff(kSLoaded);
        MulS(sT, sT, t.scale);
        if (masked != 0) {
            SF before(r, masked); /* the same rows at S's pitch, its first columns only */
            Assign(before, kUbS);
            VecBarrier(kEdgeBarMask);
            Fill(before, -__builtin_inff());
        }
    }

    /* Masked columns of the piece at column w0 of the unit starting at task column unitStart: the task's columns
     * before the window that fall in it. */
    AICORE static inline uint32_t MaskedIn(const Task &tk, uint32_t unitStart, uint32_t w0, uint32_t wl)
    {
        const uint32_t first = unitStart + w0;
        if (tk.maskCols <= first) return 0;
        return tk.maskCols - first < wl ? tk.maskCols - first : wl;
    }

    /* softmax(u).  A unit of at most kPieceTokens columns stays in UB: load, max, exp, store.  A larger unit
     * goes in pieces of kPieceTokens columns, twice: the row max over every piece first, then per piece
     * exp(S - m), the cast P to GM and the row sum, each piece of S loaded again. */
    AICORE inline void Softmax(const Task &tk, uint32_t u, uint32_t stage, ColSlot mSlot, uint32_t row0, uint32_t r)
    {
        WaitFromCube(QkReady(stage));
        if (r != 0) {
            const uint32_t len = UnitTokens(t, tk, u);
            const bool onePiece = len <= uint32_t(kPieceTokens);
            const uint64_t sRow = ScratchS(t, core, stage) + uint64_t(row0) * t.handoff;
            const uint64_t pRow = ScratchP(t, core, stage) + uint64_t(row0) * t.handoff;
            const uint32_t unitStart = u * t.handoff;
            Col gm = ColAt(mSlot, r), lm = ColAt(kColLm, r), pm = ColAt(kColPiece, r);
            Row gmRow = RowAt(mSlot, r), lmRow = RowAt(kColLm, r), hmRow = RowAt(kColHm, r);
            Row pieceRow = RowAt(kColPiece, r), dmRow = RowAt(ColSlot(kColDm0 + stage), r);
            Col ll = ColAt(ColSlot(kColLl0 + stage), r);
            Row llRow = RowAt(ColSlot(kColLl0 + stage), r);
            for (uint32_t w0 = 0; w0 < len; w0 += kPieceTokens) { /* pass 1: the unit's row max */
                const uint32_t wl = PieceTokens(len, w0);
                SF sT(r, wl), pF(r, wl);
                Assign(sT, kUbS);
                Assign(pF, kUbPf);
                const uint32_t masked = MaskedIn(tk, unitStart, w0, wl);
                LoadScaled(sT, sRow + w0, r, wl, masked);
                Count(kCountScoreTile);
                if (masked != 0) Count(kCountMaskedScoreTile);
                VecBarrier(kEdgeBarScaled);
                if (w0 == 0) {
                    RowMax(lm, sT, pF);
                } else {
                    RowMax(pm, sT, pF);
                    VecBarrier(kEdgeBarPieceMax);
                    Max(lmRow, lmRow, pieceRow);
                }
                if (!onePiece) SetFlag(kSUbFree);
            }
            VecBarrier(kEdgeBarRowMax);
            if (u == 0) {
                AddS(gmRow, lmRow, 0.0f);
            } else {
                Max(hmRow, gmRow, lmRow);
                VecBarrier(kEdgeBarNewMax);
                Sub(dmRow, gmRow, hmRow);
                VecBarrier(kEdgeBarExpDiff);
                Exp(dmRow, dmRow);
                AddS(gmRow, hmRow, 0.0f);
            }
            VecBarrier(kEdgeBarCentered);
            for (uint32_t w0 = 0; w0 < len; w0 += kPieceTokens) { /* pass 2: P and its row sum */
                const uint32_t wl = PieceTokens(len, w0);
                SF sT(r, wl), pF(r, wl);
                PT pT(r, wl);
                Assign(sT, kUbS);
                Assign(pF, kUbPf);
                Assign(pT, kUbPt);
                if (!onePiece) {
                    LoadScaled(sT, sRow + w0, r, wl, MaskedIn(tk, unitStart, w0, wl));
                    VecBarrier(kEdgeBarPieceScaled);
                }
                RowExpandSub(pF, sT, gm);
                VecBarrier(kEdgeBarExp);
                Exp(pF, pF);
                VecBarrier(kEdgeBarCast);
                WaitFlag(kPUbFree);
                Cvt(pT, pF, RoundMode::CAST_RINT);
                Handoff(kPCast);
                StoreNd(p, pRow + w0, r, wl, t.handoff, pT, kTrafficScratch);
                SetFlag(kPUbFree);
                VecBarrier(kEdgeBarWiden);
                Cvt(pF, pT, RoundMode::CAST_NONE); /* l sums exactly the P the cube multiplies */
                VecBarrier(kEdgeBarRowSum);
                if (w0 == 0) {
                    RowSum(ll, pF, sT);
                } else {
                    RowSum(pm, pF, sT);
                    VecBarrier(kEdgeBarPieceSum);
                    Add(llRow, llRow, pieceRow);
                }
                SetFlag(kSUbFree);
            }
        }
        SignalCube(SoftmaxReady(stage));
    }

    AICORE inline void Update(uint32_t u, uint32_t stage, uint32_t row0, uint32_t r)
    {
        WaitFromCube(UpdateReady(stage));
        if (r == 0) return;
        const uint32_t d = t.headDim;
        OF oT(r, d), oA(r, d);
        Assign(oT, kUbOtmp);
        Assign(oA, kUbOacc);
        Row glRow = RowAt(kColL, r), dmRow = RowAt(ColSlot(kColDm0 + stage), r);
        Row llRow = RowAt(ColSlot(kColLl0 + stage), r);
        Col dm = ColAt(ColSlot(kColDm0 + stage), r);
        WaitFlag(kOtmpUbFree);
        LoadNd(oT, otmp, ScratchO(core, stage) + uint64_t(row0) * d, r, d, d, kTrafficScratch);
        Handoff(kOtmpLoaded);
        VecBarrier(kEdgeBarUpdate);
        if (u == 0) {
            WaitFlag(kOutUbFree); /* the previous task's output left UB */
            AddS(oA, oT, 0.0f);
            AddS(glRow, llRow, 0.0f);
        } else {
            RowExpandMul(oA, oA, dm);
            Mul(glRow, glRow, dmRow);
            VecBarrier(kEdgeBarRescale);
            Add(oA, oA, oT);
            Add(glRow, glRow, llRow);
        }
        SetFlag(kOtmpUbFree);
    }

    AICORE inline void Finish(const Task &tk, ColSlot mSlot, uint32_t row0, uint32_t r)
    {
        if (r == 0) return;
        const uint32_t d = t.headDim;
        const uint32_t head = tk.headStart + row0;
        OF oA(r, d);
        Assign(oA, kUbOacc);
        Col gl = ColAt(kColL, r);
        Row glRow = RowAt(kColL, r), gmRow = RowAt(mSlot, r), lseRow = RowAt(kColLse, r);
        VecBarrier(kEdgeBarFinal);
        const bool oneSplit = !t.SplitKv() || SplitsOf(t, tk.kvLen) == 1;
        if (oneSplit && t.sinksDtype != PA_SINKS_NONE) JoinSinks(head, r, gmRow, glRow);
        RowExpandDiv(oA, oA, gl);
        VecBarrier(kEdgeBarNormed);
        if (oneSplit) { /* its output row (and lse), no partial to combine; a split row's sink joins in the combine */
            OT oO(r, d);
            Assign(oO, kUbOout);
            Cvt(oO, oA, RoundMode::CAST_RINT);
            if (t.lse) {
                Log(lseRow, glRow);
                VecBarrier(kEdgeBarLog);
                Add(lseRow, lseRow, gmRow);
            }
            Handoff(kOutReady);
            StoreNd(o, tk.addrO + uint64_t(head) * d, r, d, d, oO, kTrafficOther);
            if (t.lse) StoreNd(lseGm, LseIndex(t, tk.slot, head), 1, r, r, lseRow, kTrafficOther);
            SetFlag(kOutUbFree);
            return;
        }
        Log(lseRow, glRow);
        VecBarrier(kEdgeBarLog);
        Add(lseRow, lseRow, gmRow);
        VecBarrier(kEdgeBarLseSum);
        ColFull lseCol;
        Assign(lseCol, kUbCols + kColLse * kColBytes);
        LseBlocks spread;
        Assign(spread, kUbLseBlocks);
        RowExpand(spread, lseCol);
        Handoff(kOutReady);
        const uint64_t kvcn = t.kvCoreNum;
        StoreNd(ocore, tk.addrOfd * kvcn + uint64_t(head) * kvcn * d + uint64_t(tk.split) * d, r, d, kvcn * d, oA,
                kTrafficPartial);
        LseOut lseOut = LseAsBlocks(r);
        StoreNd(l, tk.addrL + uint64_t(head) * kvcn + tk.split, r, 1, kvcn, lseOut, kTrafficPartial);
        SetFlag(kOutUbFree);
    }

    /* l += exp(sink - m) for the r rows from head `head` on: the sink joins the denominator once, as one more
     * logit whose value is never multiplied into O. */
    AICORE inline void JoinSinks(uint32_t head, uint32_t r, Row &gmRow, Row &glRow)
    {
        Row sink = RowAt(kColSink, r);
        SinkRowH h16(r);
        SinkRowB b16(r);
        Assign(h16, kUbCols + kColSinkRaw * kColBytes);
        Assign(b16, kUbCols + kColSinkRaw * kColBytes);
        WaitFlag(kSinkUbFree);
        LoadSinks(t, sinks, head, r, sink, h16, b16);
        Handoff(kSinkLoaded);
        if (WidenSinks(t, sink, h16, b16)) VecBarrier(kEdgeBarSinkWiden);
        Sub(sink, sink, gmRow);
        VecBarrier(kEdgeBarSinkShift);
        Exp(sink, sink);
        VecBarrier(kEdgeBarSinkExp);
        Add(glRow, glRow, sink);
        SetFlag(kSinkUbFree);
        VecBarrier(kEdgeBarSinkJoined);
    }

    /* The spread lse (Finish) as the r x 1 tile its store reads. */
    AICORE inline LseOut LseAsBlocks(uint32_t r)
    {
        LseOut out(r, 1);
        Assign(out, kUbLseBlocks);
        return out;
    }

    /* Our ABI extension: an empty sequence's rows are zero. */
    AICORE inline void WriteZeros(const Task &tk, uint32_t row0, uint32_t r)
    {
        const uint32_t d = t.headDim;
        OT oO(r, d);
        Assign(oO, kUbOout);
        Row lseRow = RowAt(kColLse, r);
        WaitFlag(kOutUbFree);
        Fill(oO, T(0.0f));
        if (t.lse) Fill(lseRow, -__builtin_inff()); /* no key: the lse of an empty row is -inf */
        Handoff(kOutReady);
        StoreNd(o, tk.addrO + uint64_t(tk.headStart + row0) * d, r, d, d, oO, kTrafficOther);
        if (t.lse) StoreNd(lseGm, LseIndex(t, tk.slot, tk.headStart + row0), 1, r, r, lseRow, kTrafficOther);
        SetFlag(kOutUbFree);
    }

    /* The write-after-read flags: set once at core start ("buffer free"), drained before the core exits. */
    template <typename Fn>
    AICORE static inline void ForEachFreeFlag(Fn &&fn)
    {
        fn(kSUbFree);
        fn(kPUbFree);
        fn(kOtmpUbFree);
        fn(kOutUbFree);
        fn(kSinkUbFree);
    }

    /* A unit whose update is still to run: the task, its rows on this sub-core, the unit and its stage. */
    struct Pending {
        Task tk;
        uint32_t row0, r, u, units, stage;
        ColSlot mSlot;
    };

    /* The pending unit's update, and the task's output after its last unit. */
    AICORE inline void Retire(const Pending &pd)
    {
        SetWorkItem(int32_t(pd.tk.slot), int32_t(pd.tk.headStart), int32_t(pd.tk.split));
        SetUnit(pd.u);
        Update(pd.u, pd.stage, pd.row0, pd.r);
        if (pd.u + 1 == pd.units) Finish(pd.tk, pd.mSlot, pd.row0, pd.r);
    }

    /* The mirror of the cube's pipeline over all units of all tasks: softmax(x) then update(x - 1), across
     * task boundaries, so the next task's first softmax runs before the current task's last update. */
    AICORE inline void Run(uint32_t blockNum)
    {
        ForEachFreeFlag([](auto f) { SetFlag(f); });
        Pending pending{};
        bool havePending = false;
        uint32_t taskCounter = 0;
        ForEachTask(t, core, blockNum, [&](const Task &tk) {
            const uint32_t half = tk.headCount / kVecSubCores;
            const uint32_t row0 = sub == 0 ? 0 : half;
            const uint32_t r = sub == 0 ? half : tk.headCount - half;
            if (tk.empty) { /* no cube work: finish the pending task first (its output buffer is shared) */
                if (havePending) Retire(pending);
                havePending = false;
                SetWorkItem(int32_t(tk.slot), int32_t(tk.headStart), int32_t(tk.split));
                if (r != 0) WriteZeros(tk, row0, r);
                return;
            }
            const uint32_t units = UnitsOf(t, tk);
            const ColSlot mSlot = ColSlot(kColM0 + taskCounter++ % 2);
            for (uint32_t u = 0; u < units; ++u) {
                const uint32_t stage = unitCounter++ % kStages;
                SetUnit(u);
                Softmax(tk, u, stage, mSlot, row0, r);
                if (havePending) Retire(pending);
                SetWorkItem(int32_t(tk.slot), int32_t(tk.headStart), int32_t(tk.split));
                pending = Pending{tk, row0, r, u, units, stage, mSlot};
                havePending = true;
            }
        });
        if (havePending) Retire(pending);
        ForEachFreeFlag([](auto f) { WaitFlag(f); });
        if (t.SplitKv()) {
            VectorBarrier();
            CombineCore<T, DCap> combine{t, core, sub, o, ocore, l, lseGm, sinks};
            combine.Run(blockNum);
        }
    }
};

}  // namespace pa

#endif /* PA_VECTOR_HPP */
