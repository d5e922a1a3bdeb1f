/*
 * Cube data path for large KV groups (more q heads per KV head than one 16-row fractal holds): one KV head at
 * a time.  Within a unit, the q heads of a task that share a KV head form one matmul (M = heads of the
 * group, up to kCubeRows), so each K/V element is read from GM once per task.  K/V move in level-2 sub-tiles
 * (page-contiguous, SubTokens(DCap) tokens of one KV head) through two L1/L0B buffers, alternating.  A task
 * of such groups holds one or two KV heads, so its K/V rows are short bursts whatever the path; the chunk
 * path (pa_cube_chunk.hpp) serves groups of at most 16 heads.
 */
#ifndef PA_CUBE_HEAD_HPP
#define PA_CUBE_HEAD_HPP

#include "pa_cube_state.hpp"

namespace pa {

template <typename T, int DCap>
struct HeadPath {
    static constexpr int kSub = SubTokens(DCap);
    using Tiles = CubeTiles<T, DCap, kCubeRows, kSub>;
    using QMat = typename Tiles::QMat;
    using PMat = typename Tiles::PMat;
    using KMat = typename Tiles::KMat;
    using VMat = typename Tiles::VMat;
    using QLeft = typename Tiles::QLeft;
    using PLeft = typename Tiles::PLeft;
    using KRight = typename Tiles::KRight;
    using VRight = typename Tiles::VRight;
    using SAcc = typename Tiles::SAcc;
    using OAcc = typename Tiles::OAcc;

    /* On-chip layout (bytes).  L1: Q | P | two K/V sub-tile buffers.  L0A: Q | two P sub-tiles.  L0B: two
     * sub-tiles.  L0C: two S accumulators (one drains to GM while the next fills) and the P.V accumulator.
     * In this path one toggle drives the L1 buffers and the L0 buffers together: sub-tile i uses b = i % 2. */
    static constexpr uint32_t kL1Q = 0;
    static constexpr uint32_t kL1P = AlignUp(kL1Q + QMat::Numel * sizeof(T), kOnChipAlign);
    static constexpr uint32_t kL1Kv0 = AlignUp(kL1P + PMat::Numel * sizeof(T), kOnChipAlign);
    static constexpr uint32_t kL1KvBytes = AlignUp(kSubTileElems * sizeof(T), kOnChipAlign);
    static constexpr uint32_t kL0aQ = 0;
    static constexpr uint32_t kL0aP = AlignUp(QLeft::Numel * sizeof(T), kOnChipAlign);
    static constexpr uint32_t kL0aPBytes = AlignUp(PLeft::Numel * sizeof(T), kOnChipAlign);
    static constexpr uint32_t kL0bBytes = AlignUp(kSubTileElems * sizeof(T), kOnChipAlign);
    static constexpr uint32_t kL0cS = 0;
    static constexpr uint32_t kL0cSBytes = AlignUp(SAcc::Numel * sizeof(float), kOnChipAlign);
    static constexpr uint32_t kL0cO = 2 * kL0cSBytes;
    static_assert(kL1Kv0 + 2 * kL1KvBytes <= kL1Bytes, "L1 plan overflows");
    static_assert(kL0aP + 2 * kL0aPBytes <= kL0aBytes, "L0A plan overflows");
    static_assert(2 * kL0bBytes <= pa::kL0bBytes, "L0B plan overflows");
    static_assert(kL0cO + OAcc::Numel * sizeof(float) <= kL0cBytes, "L0C plan overflows");
    static_assert(kSub % 16 == 0 && kPieceTokens % 16 == 0, "sub-tiles and units start on whole fractals");

    using Piece = typename CubeState<T>::Piece;

    /* Every matmul takes one 16-row block of A at most.  mad steps A's row blocks by the *valid* k rounded up to
     * 16, while TMOV / TEXTRACT lay L0A out for the tile's static columns, so a left operand of two row blocks
     * whose k is below its static width (Q.K^T with D below DCap, P.V of a sub-tile shorter than kSub) multiplies
     * the wrong elements from its second block on (defect 3; the CPU implementation does not show it).  Each
     * block is its own 16-row L0A tile, extracted from the L1 tile at its row, with its own L0C accumulator;
     * results are stored block by block. */
    static constexpr uint32_t kBlockRows = 16;
    using Block = CubeTiles<T, DCap, int(kBlockRows), kSub>;
    static constexpr uint32_t kQBlockBytes = kBlockRows * uint32_t(QLeft::Cols) * sizeof(T);
    static constexpr uint32_t kPBlockBytes = kBlockRows * uint32_t(PLeft::Cols) * sizeof(T);
    static constexpr uint32_t kSBlockBytes = kBlockRows * uint32_t(SAcc::Cols) * sizeof(float);
    static constexpr uint32_t kOBlockBytes = kBlockRows * uint32_t(OAcc::Cols) * sizeof(float);
    static_assert(kCubeRows % kBlockRows == 0, "the tiles hold whole row blocks");
    static AICORE inline uint32_t Blocks(uint32_t m) { return (m + kBlockRows - 1) / kBlockRows; }
    static AICORE inline uint32_t BlockRows(uint32_t m, uint32_t blk)
    {
        return m - blk * kBlockRows < kBlockRows ? m - blk * kBlockRows : kBlockRows;
    }

    /* Q's row blocks from its L1 tile (m x d) into their L0A tiles from l0aQ (MTE1). */
    static AICORE inline void MoveQBlocks(uint32_t m, uint32_t d, QMat &q, uint32_t l0aQ)
    {
        for (uint32_t blk = 0; blk < Blocks(m); ++blk) {
            typename Block::QLeft qBlock(BlockRows(m, blk), d);
            Assign(qBlock, l0aQ + blk * kQBlockBytes);
            Extract(qBlock, q, blk * kBlockRows, 0);
        }
    }

    /* S of m rows = Q.K^T, block by block: Q's blocks at l0aQ, the blocks' accumulators from l0cS. */
    static AICORE inline void QkBlocks(uint32_t m, uint32_t d, uint32_t len, uint32_t l0aQ, uint32_t l0cS,
                                       KRight &right)
    {
        for (uint32_t blk = 0; blk < Blocks(m); ++blk) {
            const uint32_t mb = BlockRows(m, blk);
            typename Block::QLeft qBlock(mb, d);
            auto ob = Block::Qk(mb, d, len);
            Assign(qBlock, l0aQ + blk * kQBlockBytes);
            Assign(ob.acc, l0cS + blk * kSBlockBytes);
            Matmul(ob.acc, qBlock, right);
            Count(kCountMatmul);
        }
    }

    /* O of m rows (+)= P.V, block by block: P's blocks extracted from its L1 window p (m x window, at column col)
     * into L0A from l0aP (MTE1), the blocks' accumulators from l0cO.  The caller orders the extracts (L0Free). */
    static AICORE inline void ExtractPBlocks(uint32_t m, uint32_t len, uint32_t col, PMat &p, uint32_t l0aP)
    {
        for (uint32_t blk = 0; blk < Blocks(m); ++blk) {
            typename Block::PLeft pBlock(BlockRows(m, blk), len);
            Assign(pBlock, l0aP + blk * kPBlockBytes);
            Extract(pBlock, p, blk * kBlockRows, col);
        }
    }
    static AICORE inline void PvBlocks(uint32_t m, uint32_t d, uint32_t len, uint32_t l0aP, uint32_t l0cO,
                                       VRight &right, bool first)
    {
        for (uint32_t blk = 0; blk < Blocks(m); ++blk) {
            const uint32_t mb = BlockRows(m, blk);
            typename Block::PLeft pBlock(mb, len);
            auto ob = Block::Pv(mb, d, len); /* ob.acc accumulates (whole static width) */
            Assign(pBlock, l0aP + blk * kPBlockBytes);
            Assign(ob.acc, l0cO + blk * kOBlockBytes);
            if (first) {
                Matmul(ob.acc, pBlock, right);
            } else {
                MatmulAcc(ob.acc, pBlock, right);
            }
            Count(kCountMatmul);
        }
    }

    /* store(tile, first row, rows) for each block's valid result: S (m x len) from l0cS or O (m x d) from l0cO. */
    template <typename Store>
    static AICORE inline void StoreSBlocks(uint32_t m, uint32_t d, uint32_t len, uint32_t l0cS, Store &&store)
    {
        for (uint32_t blk = 0; blk < Blocks(m); ++blk) {
            auto ob = Block::Qk(BlockRows(m, blk), d, len);
            Assign(ob.s, l0cS + blk * kSBlockBytes);
            store(ob.s, blk * kBlockRows, BlockRows(m, blk));
        }
    }
    template <typename Store>
    static AICORE inline void StoreOBlocks(uint32_t m, uint32_t d, uint32_t l0cO, Store &&store)
    {
        for (uint32_t blk = 0; blk < Blocks(m); ++blk) {
            auto ob = Block::Pv(BlockRows(m, blk), d, 0);
            Assign(ob.o, l0cO + blk * kOBlockBytes);
            store(ob.o, blk * kBlockRows, BlockRows(m, blk));
        }
    }

    /* Calls fn(run, s0, r0, m) for each slice of at most kCubeRows matmul rows of each KV-head run of the task:
     * rows [s0, s0 + m) of the run, scratch rows [r0, r0 + m).  A run holds its heads x q_len rows (up to the
     * ABI's PA_MAX_TASK_ROWS), more than the on-chip tiles of this path: each slice reads the unit's K/V again. */
    template <typename Fn>
    static AICORE inline void ForEachSlice(const CubeState<T> &st, const Task &tk, Fn &&fn)
    {
        for (uint32_t kvh = st.FirstKvHead(tk); kvh <= st.LastKvHead(tk); ++kvh) {
            const TaskRun run = RunOf(st.t, tk, kvh);
            for (uint32_t s0 = 0; s0 < run.rows; s0 += kCubeRows) {
                const uint32_t m = run.rows - s0 < uint32_t(kCubeRows) ? run.rows - s0 : uint32_t(kCubeRows);
                fn(run, s0, run.row0 + s0, m);
            }
        }
    }

    /* Unit u of a task: S = Q.K^T per KV-group run, sub-tile by sub-tile, into GM scratch stage `stage`. */
    static AICORE inline void Qk(CubeState<T> &st, const Task &tk, uint32_t u, uint32_t stage)
    {
        const uint32_t d = st.t.headDim;
        ForEachSlice(st, tk, [&](const TaskRun &run, uint32_t s0, uint32_t r0, uint32_t m) {
            QMat qMat(m, d);
            Assign(qMat, kL1Q);
            WaitFlag(kQL1Free);
            st.template ZeroBuffer<QMat>(kL1Q, st.BeforeQLoad(m, d)); /* a last block of one row: CubeTiles */
            st.template LoadQRows<QMat>(tk, run, s0, m, kL1Q);
            Handoff(kQLoaded);
            WaitFlag(kQLeftFree);
            MoveQBlocks(m, d, qMat, kL0aQ);
            SetFlag(kQL1Free);
            /* No Q -> M flag: the first sub-tile's L0Ready(b) below is set on MTE1 after this move, and a
             * set_flag waits for all earlier instructions of its pipe, so the matmul sees Q in L0A. */
            st.ForEachPiece(tk, u, 0, UnitTokens(st.t, tk, u), kSub, [&](const Piece &pc) {
                const uint32_t b = st.l1Toggle++ & 1u;
                KMat kMat(d, pc.len);
                auto op = Tiles::Qk(m, d, pc.len); /* whole static widths: CubeTiles::QkOperands */
                Assign(kMat, kL1Kv0 + b * kL1KvBytes);
                Assign(op.kMat, kL1Kv0 + b * kL1KvBytes);
                Assign(op.kRight, b * kL0bBytes);
                WaitFlag(KvL1Free(b));
                /* K^T's columns past len are multiplied (CubeTiles): zero unless they already are */
                st.template ZeroBuffer<KMat>(kL1Kv0 + b * kL1KvBytes, st.BeforeKLoad(b, d / 16, pc.len, kSub));
                LoadDn(kMat, st.k, pc.kvOff + uint64_t(run.kvh) * d, d, pc.len, uint64_t(st.t.kvHeads) * d, kTrafficKv);
                Handoff(KvLoaded(b));
                WaitFlag(L0Free(b));
                Mov(op.kRight, op.kMat);
                SetFlag(KvL1Free(b));
                Handoff(L0Ready(b));
                WaitFlag(SAccFree(b));
                QkBlocks(m, d, pc.len, kL0aQ, kL0cS + b * kL0cSBytes, op.kRight);
                SetFlag(L0Free(b));
                Handoff(SAccReady(b));
                StoreSBlocks(m, d, pc.len, kL0cS + b * kL0cSBytes, [&](auto &tile, uint32_t row, uint32_t rows) {
                    StoreNd(st.s, ScratchS(st.t, st.core, stage) + uint64_t(r0 + row) * st.t.handoff + pc.col, rows,
                            pc.len, st.t.handoff, tile, kTrafficScratch);
                });
                SetFlag(SAccFree(b));
            });
            SetFlag(kQLeftFree);
        });
    }

    /* Unit u: O_tmp = P.V per KV-group run, accumulated over the unit's sub-tiles in L0C.  P comes into L1 in
     * windows of kPieceTokens columns (a hand-off may be longer).  The device multiplies the inner (token)
     * length rounded up to 16, so a window whose length is not a multiple of 16 zeroes P's L1 buffer and a
     * ragged sub-tile's V padding must be zero: padding times padding must be 0, not stale data (NaN x 0 =
     * NaN).  P is zeroed too when its last row block has one row; V's columns past D are multiplied
     * (CubeTiles, L1Box). */
    static AICORE inline void Pv(CubeState<T> &st, const Task &tk, uint32_t u, uint32_t stage)
    {
        const uint32_t d = st.t.headDim;
        const uint32_t unitLen = UnitTokens(st.t, tk, u);
        ForEachSlice(st, tk, [&](const TaskRun &run, uint32_t, uint32_t r0, uint32_t m) {
            bool first = true;
            for (uint32_t w0 = 0; w0 < unitLen; w0 += kPieceTokens) {
                const uint32_t wl = PieceTokens(unitLen, w0);
                PMat pMat(m, wl);
                Assign(pMat, kL1P);
                WaitFlag(kPL1Free);
                st.template ZeroBuffer<PMat>(kL1P, st.BeforePLoad(0, m, wl)); /* MTE2, in order with the load */
                LoadNd(pMat, st.p, ScratchP(st.t, st.core, stage) + uint64_t(r0) * st.t.handoff + w0, m, wl,
                       st.t.handoff, kTrafficScratch);
                /* No P -> MTE1 flag: every sub-tile's KvLoaded(b) is set on MTE2 after this load (one in-order
                 * queue), and TEXTRACT waits for it before it reads P. */
                if (first) WaitFlag(kOAccFree);
                st.ForEachPiece(tk, u, w0, w0 + wl, kSub, [&](const Piece &pc) {
                    const uint32_t b = st.l1Toggle++ & 1u;
                    VMat vMat(pc.len, d);
                    auto op = Tiles::Pv(m, d, pc.len); /* whole static widths: CubeTiles::PvOperands */
                    Assign(vMat, kL1Kv0 + b * kL1KvBytes);
                    Assign(op.vMat, kL1Kv0 + b * kL1KvBytes);
                    Assign(op.vRight, b * kL0bBytes);
                    WaitFlag(KvL1Free(b));
                    /* the padding past len, V's columns past d (CubeTiles): zero unless they already are */
                    st.template ZeroBuffer<VMat>(kL1Kv0 + b * kL1KvBytes, st.BeforeVLoad(b, 1, d, DCap, pc.len));
                    LoadNd(vMat, st.v, pc.kvOff + uint64_t(run.kvh) * d, pc.len, d, uint64_t(st.t.kvHeads) * d,
                           kTrafficKv);
                    Handoff(KvLoaded(b));
                    WaitFlag(L0Free(b));
                    ExtractPBlocks(m, pc.len, pc.col - w0, pMat, kL0aP + b * kL0aPBytes);
                    Mov(op.vRight, op.vMat);
                    SetFlag(KvL1Free(b));
                    Handoff(L0Ready(b));
                    PvBlocks(m, d, pc.len, kL0aP + b * kL0aPBytes, kL0cO, op.vRight, first);
                    first = false;
                    SetFlag(L0Free(b));
                });
                SetFlag(kPL1Free);
            }
            Handoff(kOAccReady);
            StoreOBlocks(m, d, kL0cO, [&](auto &tile, uint32_t row, uint32_t rows) {
                StoreNd(st.otmp, ScratchO(st.core, stage) + uint64_t(r0 + row) * d, rows, d, d, tile, kTrafficScratch);
            });
            SetFlag(kOAccFree);
        });
    }
};

}  // namespace pa

#endif /* PA_CUBE_HEAD_HPP */
