/*
 * Vector side (AIV, two sub-cores per cluster): online softmax over hand-off units and the output.
 *
 * Sub-core i owns the rows of heads [i*floor(n/2), ...) of a task's n heads, for every query token: one set of
 * rows per token ("a token's rows": its heads, consecutive rows of q, o and the lse).  Per unit u (stage =
 * global unit % 2), for each token's rows:
 *   softmax(u): S rows from GM s -> * scale -> keys the token does not see masked -> row max -> running max m,
 *               dm = exp(m_old - m_new); P = exp(S - m) rounded to the input dtype -> GM p; l_u = row sum of the
 *               rounded P
 *   update(u):  O_tmp rows from GM o_tmp -> O = dm * O + O_tmp, l = dm * l + l_u
 * in the order softmax(0), softmax(1), update(0), softmax(2), update(1), ... over all units of all the core's
 * tasks (the mirror of the cube's preload pipeline, across task boundaries), so dm and l_u are kept per stage
 * and m per task parity, each per token.  After the last unit O /= l and either the output rows (cast once) or,
 * for split-KV, the normalised fp32 partials and lse = ln(l) + m are written.
 * The cube orders a task's scratch rows by KV head (TaskRun); a token's rows are gathered from them and P is
 * scattered back by one DMA per KV head they cross (one in all with one query token).
 * Decode features: the keys a token does not see (before its window, after its own position) get a large finite
 * penalty in S, only in the pieces that hold such keys (the pages before the first token's window are not in
 * the task at all); a sink joins l once, when the output row is written (l += exp(sink - m)), or in the combine
 * for a split sequence; the lse row (sink included) is written beside the output, -inf for an empty sequence.
 */
#ifndef PA_VECTOR_HPP
#define PA_VECTOR_HPP

#include "pa_amla.hpp"
#include "pa_combine.hpp"

namespace pa {

/* What a masked key's score gets subtracted: finite, so a token whose keys in a unit are all masked (its window
 * starts in a later unit, or a split holds only keys after it) keeps a finite running max; the next unit's rescale
 * exp(m_old - m_new) is then exactly 0 and removes them, and a split of such rows gets an lse whose combine weight
 * is exactly 0.  -inf would give exp(-inf + inf) = NaN there. */
constexpr float kMaskPenalty = 1e30f;

/* Rows of one sub-core per task, at most: ceil(heads / 2) x q_len for the largest head count the contract allows
 * a task at each q_len (PA_MAX_TASK_ROWS / q_len, at most kMaxTaskHeads); 70 (9 heads x 14 tokens). */
constexpr uint32_t VecMaxRows()
{
    uint32_t most = 0;
    for (uint32_t q = 1; q <= PA_MAX_Q_LEN; ++q) {
        const uint32_t heads = PA_MAX_TASK_ROWS / q < uint32_t(kMaxTaskHeads) ? PA_MAX_TASK_ROWS / q : kMaxTaskHeads;
        const uint32_t rows = (heads + 1) / 2 * q;
        most = rows > most ? rows : most;
    }
    return most;
}
constexpr uint32_t kVecMaxRows = VecMaxRows();
/* A group of rows of one query token on a sub-core: token `token`, q heads [head, head + r) (absolute), at most
 * kVecRows of them.  `group` numbers the sub-core's groups of a task (< PA_MAX_Q_LEN): it picks the group's per-row
 * vectors.  A GQA task has one group per token (a sub-core holds at most kVecRows heads); an MLA task, whose
 * sub-core may hold 64 heads, splits a token's heads into groups of kVecRows. */
struct TokenRows {
    uint32_t token, head, r, group;
};

template <typename T, int DCap>
struct VectorCore {
    /* A piece's columns in UB: kPieceTokens, or an MLA unit's (its hand-off), so that a whole MLA piece's rows are
     * contiguous too (CvtPiece). */
    static constexpr int kPiece = DCap == kMlaD ? PA_MLA_HANDOFF_TOKENS : kPieceTokens;
    static_assert(kPiece <= kPieceTokens, "a unit of at most kPiece columns is one piece (SoftmaxRows)");
    using SF = Tile<TileType::Vec, float, kVecRows, kPiece, BLayout::RowMajor, DYNAMIC, DYNAMIC>;
    using PT = Tile<TileType::Vec, T, kVecRows, kPiece, BLayout::RowMajor, DYNAMIC, DYNAMIC>;
    using OF = Tile<TileType::Vec, float, kVecRows, DCap, BLayout::RowMajor, DYNAMIC, DYNAMIC>;
    using OT = Tile<TileType::Vec, T, kVecRows, DCap, BLayout::RowMajor, DYNAMIC, DYNAMIC>;
    /* A per-row vector (one float per head row) as a column: row reductions write it, row-expand ops read it. */
    using Col = Tile<TileType::Vec, float, kVecRows, 1, BLayout::ColMajor, DYNAMIC, 1>;
    /* The same vector as one row: A2/A3's element-wise instructions take row-major tiles only. */
    using Row = Tile<TileType::Vec, float, 1, kVecRows, BLayout::RowMajor, 1, DYNAMIC>;
    /* The mask's penalty per column of a piece, subtracted from every row of S (a column-expand op). */
    using PenRow = Tile<TileType::Vec, float, 1, kPiece, BLayout::RowMajor, 1, DYNAMIC>;
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

    /* Bytes of one row of O (fp32): each token's rows of the O accumulator start that many bytes in per row. */
    static constexpr uint32_t kORowBytes = OF::Cols * sizeof(float);

    /* Rows of the O accumulator in UB: every row of a task (kVecMaxRows), except under MLA, whose output accumulates
     * in GM (pa_vector_mla.hpp). */
    static constexpr uint32_t kAccRows = DCap == kMlaD ? 0 : kVecMaxRows;

    /* UB layout (bytes): S | P fp32 | P in dtype | O_tmp | O of every token's rows | O cast | penalty row |
     * per-row vectors of each token's rows | per-row temporaries | lse blocks. */
    static constexpr uint32_t kUbS = 0;
    static constexpr uint32_t kUbPf = kUbS + SF::Numel * sizeof(float);
    static constexpr uint32_t kUbPt = kUbPf + SF::Numel * sizeof(float);
    static constexpr uint32_t kUbOtmp = AlignUp(kUbPt + PT::Numel * sizeof(T), kOnChipAlign);
    static constexpr uint32_t kUbOacc = kUbOtmp + OF::Numel * sizeof(float);
    static constexpr uint32_t kUbOout = kUbOacc + kAccRows * kORowBytes;
    static constexpr uint32_t kUbPen = AlignUp(kUbOout + OT::Numel * sizeof(T), kOnChipAlign);
    static constexpr uint32_t kUbTokenCols = AlignUp(kUbPen + PenRow::Numel * sizeof(float), kRowVecAlign);
    static constexpr uint32_t kColBytes = AlignUp(Col::Numel * sizeof(float), kRowVecAlign);
    /* Per-row vectors each token's rows keep: kColM0/kColM1, the running max of the task in flight and of the
     * next one (the next task's first softmax runs before the current task's last update and output, which reads
     * m for the lse); l, one per task parity under MLA (whose softmax updates it, the next task's before the current
     * task's output), else one (updated after the task's softmaxes); dm and l_u per stage. */
    enum TokenSlot : uint32_t {
        kColM0,
        kColL0 = kColM0 + 2,
        kColDm0 = kColL0 + (DCap == kMlaD ? 2 : 1),
        kColLl0 = kColDm0 + kStages,
        /* MLA under PA_MLA_RESCALE_POW2 (pa_amla.hpp): the grid index of the running max per task parity, and the
         * exponent shift of the accumulator between a unit's softmax and its rescale. */
        kColK0 = kColLl0 + kStages,
        kColShift = kColK0 + (DCap == kMlaD ? 2 : 0),
        kTokenSlots = kColShift + (DCap == kMlaD ? 1 : 0)
    };
    /* Per-row temporaries, used by one token's rows at a time. */
    enum TempSlot : uint32_t {
        kColLm,
        kColHm,
        kColPiece, /* a later piece's row max or row sum, folded into the unit's */
        kColLse,
        kColSink,    /* the rows' sinks in fp32, then exp(sink - m) */
        kColSinkRaw, /* the rows' sinks as loaded, when they are 16-bit */
        kColRise,     /* MLA: how far a unit moved each row's max (pa_amla.hpp) */
        kColDecision, /* MLA: the largest rise over the sub-core's groups, for the scalar unit */
        kTempSlots
    };
    static constexpr uint32_t kUbTemps = kUbTokenCols + kTokenSlots * PA_MAX_Q_LEN * kColBytes;
    static constexpr uint32_t kUbLseBlocks = kUbTemps + kTempSlots * kColBytes;
    /* MLA's exponent shifts of a group (int32, kVecRows x D) for AMLA's atomic add: a buffer of their own, so the
     * gathers into O_tmp's never wait for those stores. */
    static constexpr uint32_t kUbShift = AlignUp(kUbLseBlocks + LseBlocks::Numel * sizeof(float), kOnChipAlign);
    static constexpr uint32_t kShiftBytes = DCap == kMlaD ? OF::Numel * sizeof(int32_t) : 0;
    /* MLA: a unit's P of every row of the sub-core, held in UB from its cast until its row sum, which is left until
     * after the hand-over to the cube (SoftmaxRows' deferSum, SumHeldP), and the row sum's temporary. */
    static constexpr uint32_t kUbPHeld = AlignUp(kUbShift + kShiftBytes, kOnChipAlign);
    static constexpr uint32_t kPHeldBytes = DCap == kMlaD ? kVecMaxRows * kPiece * sizeof(T) : 0;
    static constexpr uint32_t kUbSumTmp = AlignUp(kUbPHeld + kPHeldBytes, kOnChipAlign);
    static constexpr uint32_t kSumTmpBytes = DCap == kMlaD ? SF::Numel * sizeof(float) : 0;
    /* A2/A3's row-expand ops use a fixed UB temporary from TMP_UB_OFFSET on (pa_platform.hpp, Assign): the plan
     * ends before it. */
    static_assert(kUbSumTmp + kSumTmpBytes <= TMP_UB_OFFSET, "UB plan overflows");

    const Tiling &t;
    uint32_t core, sub;
    Gm<T> p, o;
    Gm<float> s, otmp, ocore, l, lseGm; /* lseGm: PA_ARG_LSE, NULL without the lse */
    __gm__ uint8_t *sinks; /* PA_ARG_SINKS in its PA_TW_SINKS_DTYPE, NULL without sinks */
    uint32_t unitCounter = 0;

    /* The l of the task of parity `parity`. */
    AICORE static inline TokenSlot LSlot(uint32_t parity) { return TokenSlot(kColL0 + (DCap == kMlaD ? parity : 0)); }

    AICORE static inline uint32_t SlotAddr(TokenSlot slot, const TokenRows &g)
    {
        return kUbTokenCols + (slot * PA_MAX_Q_LEN + g.group) * kColBytes;
    }
    AICORE static inline uint32_t SlotAddr(TempSlot slot, const TokenRows &) { return kUbTemps + slot * kColBytes; }

    template <typename Slot>
    AICORE inline Col ColAt(Slot slot, const TokenRows &g)
    {
        Col c(g.r);
        Assign(c, SlotAddr(slot, g));
        return c;
    }

    /* The same per-row vector as one row: A2/A3's element-wise instructions take row-major tiles only. */
    template <typename Slot>
    AICORE inline Row RowAt(Slot slot, const TokenRows &g)
    {
        Row c(g.r);
        Assign(c, SlotAddr(slot, g));
        return c;
    }

    /* The O accumulator of a token's rows (the rows of every token of the task stay in UB across its units). */
    AICORE inline OF AccOf(const TokenRows &g)
    {
        OF oA(g.r, t.headDim);
        Assign(oA, kUbOacc + g.group * g.r * kORowBytes);
        return oA;
    }

    /* A token's rows of a scratch stage (element base `base`, rows `pitch` apart, `cols` from each) into the UB
     * tile of type TileT at ub, its rows in the token's head order: one load per KV-head run they cross
     * (ForEachScratchRows).  A row of TileT starts TileT::Cols elements after the previous one. */
    template <typename TileT, typename E>
    AICORE inline void GatherRows(const Task &tk, const TokenRows &g, Gm<E> gm, uint64_t base, uint32_t pitch,
                                  uint32_t cols, uint32_t ub)
    {
        ForEachScratchRows(t, tk, g.token, g.head, g.r, [&](uint32_t ubRow, uint32_t row, uint32_t rows) {
            TileT part(rows, cols);
            Assign(part, ub + ubRow * uint32_t(TileT::Cols * sizeof(E)));
            LoadNd(part, gm, base + uint64_t(row) * pitch, rows, cols, pitch, kTrafficScratch);
        });
    }

    /* MTE3: a token's output rows (oO, in the input dtype) and, with the lse, its lse row. */
    AICORE inline void StoreOutput(const Task &tk, const TokenRows &g, OT &oO, Row &lseRow)
    {
        const uint32_t d = t.headDim;
        StoreNd(o, tk.addrO + QueryRow(g) * d, g.r, d, d, oO, kTrafficOther);
        if (t.lse) StoreNd(lseGm, LseIndex(t, tk.slot, QueryRow(g)), 1, g.r, g.r, lseRow, kTrafficOther);
    }

    /* Row index of query token `token`, head `head` in q, o, o_core and the lse: t * Hq + h. */
    AICORE inline uint64_t QueryRow(const TokenRows &g) const { return uint64_t(g.token) * t.numHeads + g.head; }

    /* The token's S rows of the piece at column w0 (wl wide) of scratch stage base sBase into S's UB buffer, times
     * the scale, then masked (Mask); the caller puts the V barrier that orders the scaled S before its next use.
     * Returns whether the piece was masked. */
    AICORE inline bool LoadScaled(const Task &tk, const TokenRows &g, uint64_t sBase, uint32_t unitCol, uint32_t w0,
                                  uint32_t wl)
    {
        SF sT(g.r, wl);
        Assign(sT, kUbS);
        WaitFlag(kSUbFree);
        GatherRows<SF>(tk, g, s, sBase + w0, t.handoff, wl, kUbS);
        Handoff(kSLoaded);
        MulS(sT, sT, t.scale);
        return Mask(tk, g, sT, unitCol + w0, wl);
    }

    /* The keys of the piece at task column c0 (wl wide) that the token does not see (VisibleKeys) lose
     * kMaskPenalty in every row of S.  Nothing is issued for a piece the token sees whole: only the pieces holding
     * a window's left edge or the causal edge of the later query tokens are masked.  The penalty row is built by
     * fills of its first columns (a partial fill covers the first columns of its row): 0 then [0, lo) for a
     * window's left edge alone; else the whole piece, then the seen columns [0, hi) back to 0, then [0, lo). */
    AICORE inline bool Mask(const Task &tk, const TokenRows &g, SF &sT, uint32_t c0, uint32_t wl)
    {
        const KeySpan keys = VisibleKeys(t, tk, g.token);
        const int64_t lo = keys.lo - int64_t(c0), hi = keys.hi - int64_t(c0);
        if (lo <= 0 && hi >= int64_t(wl)) return false;
        const uint32_t loCols = lo <= 0 ? 0 : lo >= int64_t(wl) ? wl : uint32_t(lo);
        const uint32_t hiCols = hi <= 0 ? 0 : hi >= int64_t(wl) ? wl : uint32_t(hi);
        PenRow pen(wl);
        Assign(pen, kUbPen);
        const auto fillFirst = [&](uint32_t cols, float value) { /* columns [0, cols), cols >= 1 */
            PenRow first(cols);
            Assign(first, kUbPen);
            VecBarrier(kEdgeBarMaskFill);
            Fill(first, value);
        };
        if (hiCols <= loCols) { /* no key of the piece is seen */
            Fill(pen, kMaskPenalty);
        } else if (hiCols == wl) { /* a window's left edge only: [0, lo), lo >= 1 */
            Fill(pen, 0.0f);
            fillFirst(loCols, kMaskPenalty);
        } else { /* the causal edge [hi, wl), and a window's left edge [0, lo) if lo > 0 */
            Fill(pen, kMaskPenalty);
            fillFirst(hiCols, 0.0f);
            if (loCols != 0) fillFirst(loCols, kMaskPenalty);
        }
        VecBarrier(kEdgeBarMask);
        ColExpandSub(sT, sT, pen);
        return true;
    }

    /* Calls fn(group) for the groups of this sub-core's heads [row0, row0 + r) of the task: per query token, its
     * heads in runs of at most kVecRows. */
    template <typename Fn>
    AICORE inline void ForEachGroup(const Task &tk, uint32_t row0, uint32_t r, Fn &&fn) const
    {
        uint32_t group = 0;
        for (uint32_t token = 0; token < t.qLen; ++token) {
            for (uint32_t h = 0; h < r; h += kVecRows) {
                const uint32_t n = r - h < uint32_t(kVecRows) ? r - h : uint32_t(kVecRows);
                fn(TokenRows{token, tk.headStart + row0 + h, n, group++});
            }
        }
    }

    /* P's conversion between fp32 and T for a piece of r rows x wl tokens at UB offsets dOff / sOff.  pto-isa's
     * TCVT issues one vconv per row; when the piece's rows are whole (wl == kPiece) they are contiguous in both
     * tiles, so one flat row of r x kPiece elements converts the same elements, in the same order, with one
     * instruction of r times the repeats (kernel/npu/PERFORMANCE.md, change 13). */
    template <typename D, typename S>
    AICORE inline void CvtPiece(D &d, uint32_t dOff, S &s, uint32_t sOff, uint32_t wl, RoundMode mode)
    {
        static_assert(D::Cols == kPiece && S::Cols == kPiece, "CvtPiece converts piece tiles (SF, PT) only");
        if (wl != uint32_t(kPiece)) {
            Cvt(d, s, mode);
            return;
        }
        using DFlat = Tile<TileType::Vec, typename D::DType, 1, kVecRows * kPiece, BLayout::RowMajor, 1, DYNAMIC>;
        using SFlat = Tile<TileType::Vec, typename S::DType, 1, kVecRows * kPiece, BLayout::RowMajor, 1, DYNAMIC>;
        DFlat df(d.GetValidRow() * wl);
        SFlat sf(s.GetValidRow() * wl);
        Assign(df, dOff);
        Assign(sf, sOff);
        Cvt(df, sf, mode);
    }

    /* Whether the running max stays on the grid of multiples of ln 2 (MLA's AMLA rescale, pa_amla.hpp). */
    AICORE inline bool PowerOfTwoMax() const { return DCap == kMlaD && t.mlaRescale == PA_MLA_RESCALE_POW2; }

    /* softmax(u) of every query token's rows. */
    AICORE inline void Softmax(const Task &tk, uint32_t u, uint32_t stage, uint32_t parity, uint32_t row0, uint32_t r)
    {
        WaitFromCube(QkReady(stage));
        ForEachGroup(tk, row0, r, [&](const TokenRows &g) { SoftmaxRows(tk, u, stage, parity, g); });
        SignalCube(SoftmaxReady(stage));
    }

    /* softmax(u) of one token's rows.  A unit of at most kPieceTokens columns stays in UB: load, max, exp, store.
     * A larger unit goes in pieces of kPieceTokens columns, twice: the row max over every piece first, then per
     * piece exp(S - m), the cast P to GM and the row sum, each piece of S loaded again.  With deferSum (MLA, one
     * piece) P is cast at pAt and stays there: its row sum is SumHeldP's, after the hand-over, and S's buffer is
     * free once exp(S - m) has read it, so the next group's S loads under this group's exp and cast (the softmax
     * chain between the cube's S and its P.V, kernel/npu/PERFORMANCE.md, change 22). */
    AICORE inline void SoftmaxRows(const Task &tk, uint32_t u, uint32_t stage, uint32_t parity, const TokenRows &g,
                                   uint32_t pAt = kUbPt, bool deferSum = false)
    {
        const uint32_t r = g.r;
        const uint32_t len = UnitTokens(t, tk, u);
        const bool onePiece = len <= uint32_t(kPieceTokens);
        const uint64_t sBase = ScratchS(t, core, stage), pBase = ScratchP(t, core, stage);
        const uint32_t unitCol = u * t.handoff;
        const TokenSlot mSlot = TokenSlot(kColM0 + parity);
        Col gm = ColAt(mSlot, g), lm = ColAt(kColLm, g), pm = ColAt(kColPiece, g);
        Row gmRow = RowAt(mSlot, g), lmRow = RowAt(kColLm, g), hmRow = RowAt(kColHm, g);
        Row pieceRow = RowAt(kColPiece, g), dmRow = RowAt(TokenSlot(kColDm0 + stage), g);
        Col ll = ColAt(TokenSlot(kColLl0 + stage), g);
        Row llRow = RowAt(TokenSlot(kColLl0 + stage), g);
        for (uint32_t w0 = 0; w0 < len; w0 += kPieceTokens) { /* pass 1: the unit's row max */
            const uint32_t wl = PieceTokens(len, w0);
            SF sT(r, wl), pF(r, wl);
            Assign(sT, kUbS);
            Assign(pF, kUbPf);
            const bool masked = LoadScaled(tk, g, sBase, unitCol, w0, wl);
            Count(kCountScoreTile);
            if (masked) Count(kCountMaskedScoreTile);
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
        if constexpr (DCap == kMlaD) { /* the lazy max of pa_amla.hpp */
            Row riseRow = RowAt(kColRise, g);
            if (PowerOfTwoMax()) {
                Row kRow = RowAt(TokenSlot(kColK0 + parity), g), shiftRow = RowAt(kColShift, g);
                LazyGridMax(u, gmRow, kRow, lmRow, dmRow, riseRow, shiftRow, hmRow);
            } else {
                LazyMax(u, gmRow, lmRow, dmRow, riseRow, hmRow);
            }
        } else if (u == 0) {
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
            Assign(pT, pAt);
            if (!onePiece) {
                LoadScaled(tk, g, sBase, unitCol, w0, wl);
                VecBarrier(kEdgeBarPieceScaled);
            }
            RowExpandSub(pF, sT, gm);
            if (deferSum) SetFlag(kSUbFree); /* S's last read */
            VecBarrier(kEdgeBarExp);
            Exp(pF, pF);
            VecBarrier(kEdgeBarCast);
            WaitFlag(kPUbFree);
            CvtPiece(pT, pAt, pF, kUbPf, wl, RoundMode::CAST_RINT);
            Handoff(kPCast);
            ForEachScratchRows(t, tk, g.token, g.head, r, [&](uint32_t ub, uint32_t row, uint32_t rows) {
                PT part(rows, wl);
                Assign(part, pAt + ub * uint32_t(PT::Cols * sizeof(T)));
                StoreNd(p, pBase + uint64_t(row) * t.handoff + w0, rows, wl, t.handoff, part, kTrafficScratch);
            });
            SetFlag(kPUbFree);
            if (deferSum) continue; /* an MLA unit is one piece (its hand-off is kPiece): the loop ends here */
            VecBarrier(kEdgeBarWiden);
            CvtPiece(pF, kUbPf, pT, pAt, wl, RoundMode::CAST_NONE); /* l sums exactly the P the cube multiplies */
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

    /* l_u of a group whose softmax(u) deferred its row sum: the P it left at pAt (what the cube multiplies),
     * widened and summed.  Nothing but V reads or writes pF, the held P (its stores only read it) or the
     * temporary, so the loads and stores around it need no flag. */
    AICORE inline void SumHeldP(const Task &tk, uint32_t u, uint32_t stage, const TokenRows &g, uint32_t pAt)
    {
        const uint32_t wl = UnitTokens(t, tk, u);
        SF pF(g.r, wl), tmp(g.r, wl);
        PT pT(g.r, wl);
        Assign(pF, kUbPf);
        Assign(tmp, kUbSumTmp);
        Assign(pT, pAt);
        Col ll = ColAt(TokenSlot(kColLl0 + stage), g);
        VecBarrier(kEdgeBarWiden);
        CvtPiece(pF, kUbPf, pT, pAt, wl, RoundMode::CAST_NONE); /* l sums exactly the P the cube multiplies */
        VecBarrier(kEdgeBarRowSum);
        RowSum(ll, pF, tmp);
    }

    /* update(u) of every query token's rows. */
    AICORE inline void Update(const Task &tk, uint32_t u, uint32_t stage, uint32_t parity, uint32_t row0, uint32_t r)
    {
        WaitFromCube(UpdateReady(stage));
        ForEachGroup(tk, row0, r, [&](const TokenRows &g) { UpdateRows(tk, u, stage, parity, g); });
    }

    AICORE inline void UpdateRows(const Task &tk, uint32_t u, uint32_t stage, uint32_t parity, const TokenRows &g)
    {
        const uint32_t d = t.headDim;
        OF oT(g.r, d);
        OF oA = AccOf(g);
        Assign(oT, kUbOtmp);
        Row glRow = RowAt(LSlot(parity), g), dmRow = RowAt(TokenSlot(kColDm0 + stage), g);
        Row llRow = RowAt(TokenSlot(kColLl0 + stage), g);
        Col dm = ColAt(TokenSlot(kColDm0 + stage), g);
        WaitFlag(kOtmpUbFree);
        GatherRows<OF>(tk, g, otmp, ScratchO(core, stage), d, d, kUbOtmp);
        Handoff(kOtmpLoaded);
        VecBarrier(kEdgeBarUpdate);
        if (u == 0) {
            if (g.group == 0) WaitFlag(kOutUbFree); /* the previous task's output left UB */
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

    /* The output of every query token's rows after the task's last update.  The output buffers (O cast, the lse
     * rows) are shared: each token's rows after the first wait for the previous one's stores. */
    AICORE inline void Finish(const Task &tk, uint32_t parity, uint32_t row0, uint32_t r)
    {
        ForEachGroup(tk, row0, r, [&](const TokenRows &g) {
            if (g.group != 0) WaitFlag(kOutUbFree);
            OF oA = AccOf(g);
            FinishRows(tk, parity, g, oA);
            SetFlag(kOutUbFree);
        });
    }

    /* A group's output from its O rows oA (fp32, not yet divided by l): O / l cast to the output dtype with its lse,
     * or the normalised partial with its lse for split-KV; MTE3 holds the stores when this returns (the caller sets
     * kOutUbFree). */
    AICORE inline void FinishRows(const Task &tk, uint32_t parity, const TokenRows &g, OF &oA)
    {
        const uint32_t d = t.headDim, r = g.r;
        Col gl = ColAt(LSlot(parity), g);
        Row glRow = RowAt(LSlot(parity), g), gmRow = RowAt(TokenSlot(kColM0 + parity), g), lseRow = RowAt(kColLse, g);
        VecBarrier(kEdgeBarFinal);
        const bool oneSplit = tk.whole;
        if (oneSplit && t.sinksDtype != PA_SINKS_NONE) JoinSinks(g, gmRow, glRow);
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
            StoreOutput(tk, g, oO, lseRow);
            return;
        }
        Log(lseRow, glRow);
        VecBarrier(kEdgeBarLog);
        Add(lseRow, lseRow, gmRow);
        VecBarrier(kEdgeBarLseSum);
        ColFull lseCol;
        Assign(lseCol, SlotAddr(kColLse, g));
        LseBlocks spread;
        Assign(spread, kUbLseBlocks);
        RowExpand(spread, lseCol);
        Handoff(kOutReady);
        const uint64_t kvcn = t.kvCoreNum;
        StoreNd(ocore, tk.addrOfd * kvcn + QueryRow(g) * kvcn * d + uint64_t(tk.split) * d, r, d, kvcn * d, oA,
                kTrafficPartial);
        LseOut lseOut = LseAsBlocks(r);
        StoreNd(l, tk.addrL + QueryRow(g) * kvcn + tk.split, r, 1, kvcn, lseOut, kTrafficPartial);
    }

    /* l += exp(sink - m) for a token's rows: the sink of each row's head joins the denominator once, as one more
     * logit whose value is never multiplied into O. */
    AICORE inline void JoinSinks(const TokenRows &g, Row &gmRow, Row &glRow)
    {
        const uint32_t head = g.head, r = g.r;
        Row sink = RowAt(kColSink, g);
        SinkRowH h16(r);
        SinkRowB b16(r);
        Assign(h16, SlotAddr(kColSinkRaw, g));
        Assign(b16, SlotAddr(kColSinkRaw, g));
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
        ForEachGroup(tk, row0, r, [&](const TokenRows &g) {
            OT oO(g.r, d);
            Assign(oO, kUbOout);
            Row lseRow = RowAt(kColLse, g);
            WaitFlag(kOutUbFree);
            Fill(oO, T(0.0f));
            if (t.lse) Fill(lseRow, -__builtin_inff()); /* no key: the lse of an empty row is -inf */
            Handoff(kOutReady);
            StoreOutput(tk, g, oO, lseRow);
            SetFlag(kOutUbFree);
        });
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
        fn(kAccUbFree);
    }

    /* A unit whose update is still to run: the task, its rows on this sub-core, the unit and its stage. */
    struct Pending {
        Task tk;
        uint32_t row0, r, u, units, stage;
        uint32_t parity; /* which of the two running-max slots the task uses */
    };

    /* This sub-core's heads of a task: [row0, row0 + r) of its heads (sub-core 0 the first floor(n / 2)). */
    struct SubRows {
        uint32_t row0, r;
    };
    AICORE inline SubRows RowsOfSub(const Task &tk) const
    {
        const uint32_t half = tk.headCount / kVecSubCores;
        return sub == 0 ? SubRows{0, half} : SubRows{half, tk.headCount - half};
    }

    /* Split-KV: after every vector core's partials are in GM, the combine. */
    AICORE inline void CombineSplits(uint32_t blockNum)
    {
        if (!t.SplitKv()) return;
        VectorBarrier();
        CombineCore<T, DCap> combine{t, core, sub, o, ocore, l, lseGm, sinks};
        combine.Run(blockNum);
    }

    /* The pending unit's update, and the task's output after its last unit. */
    AICORE inline void Retire(const Pending &pd)
    {
        NameUnit(pd.tk, pd.u);
        Update(pd.tk, pd.u, pd.stage, pd.parity, pd.row0, pd.r);
        if (pd.u + 1 == pd.units) Finish(pd.tk, pd.parity, pd.row0, pd.r);
    }

    /* The core's task walk, shared by the GQA and MLA runs: onUnit(pending) for each unit of this sub-core's rows
     * of each task, in order; an empty task (no cube work) first has retireAll() finish what is pending (the
     * output buffer is shared), then its zero rows written; retireAll() once more at the end.  The task parity
     * (which running-max slots it uses) and the stage (the unit counter, as on the cube) are the walk's. */
    template <typename RetireAll, typename OnUnit>
    AICORE inline void ForEachUnit(uint32_t blockNum, RetireAll &&retireAll, OnUnit &&onUnit)
    {
        uint32_t taskCounter = 0;
        ForEachTask(t, core, blockNum, [&](const Task &tk) {
            const SubRows rows = RowsOfSub(tk);
            if (tk.empty) {
                retireAll();
                SetWorkItem(int32_t(tk.slot), int32_t(tk.headStart), int32_t(tk.split));
                WriteZeros(tk, rows.row0, rows.r);
                return;
            }
            const uint32_t units = UnitsOf(t, tk);
            const uint32_t parity = taskCounter++ % 2;
            for (uint32_t u = 0; u < units; ++u) {
                const uint32_t stage = unitCounter++ % kStages;
                SetUnit(u);
                onUnit(Pending{tk, rows.row0, rows.r, u, units, stage, parity});
            }
        });
        retireAll();
    }

    /* The mirror of the cube's pipeline over all units of all tasks: softmax(x) then update(x - 1), across
     * task boundaries, so the next task's first softmax runs before the current task's last update. */
    AICORE inline void Run(uint32_t blockNum)
    {
        ForEachFreeFlag([](auto f) { SetFlag(f); });
        Pending pending{};
        bool havePending = false;
        ForEachUnit(
            blockNum,
            [&] {
                if (havePending) Retire(pending);
                havePending = false;
            },
            [&](const Pending &next) {
                Softmax(next.tk, next.u, next.stage, next.parity, next.row0, next.r);
                if (havePending) Retire(pending);
                SetWorkItem(int32_t(next.tk.slot), int32_t(next.tk.headStart), int32_t(next.tk.split));
                pending = next;
                havePending = true;
            });
        ForEachFreeFlag([](auto f) { DrainFlag(f); });
        CombineSplits(blockNum);
    }
};

}  // namespace pa

#endif /* PA_VECTOR_HPP */
