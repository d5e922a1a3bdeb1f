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

    /* Unit u of a task: S = Q.K^T per KV-group run, sub-tile by sub-tile, into GM scratch stage `stage`. */
    static AICORE inline void Qk(CubeState<T> &st, const Task &tk, uint32_t u, uint32_t stage)
    {
        const uint32_t d = st.t.headDim;
        for (uint32_t kvh = st.FirstKvHead(tk); kvh <= st.LastKvHead(tk); ++kvh) {
            uint32_t r0, m;
            st.RunRows(tk, kvh, r0, m);
            QMat qMat(m, d);
            QLeft qLeft(m, d);
            Assign(qMat, kL1Q);
            Assign(qLeft, kL0aQ);
            WaitFlag(kQL1Free);
            LoadNd(qMat, st.q, tk.addrQ + uint64_t(tk.headStart + r0) * d, m, d, d, kTrafficOther);
            Handoff(kQLoaded);
            WaitFlag(kQLeftFree);
            Mov(qLeft, qMat);
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
                Assign(op.acc, kL0cS + b * kL0cSBytes);
                Assign(op.s, kL0cS + b * kL0cSBytes);
                WaitFlag(KvL1Free(b));
                LoadDn(kMat, st.k, pc.kvOff + uint64_t(kvh) * d, d, pc.len, uint64_t(st.t.kvHeads) * d, kTrafficKv);
                Handoff(KvLoaded(b));
                WaitFlag(L0Free(b));
                Mov(op.kRight, op.kMat);
                SetFlag(KvL1Free(b));
                Handoff(L0Ready(b));
                WaitFlag(SAccFree(b));
                Matmul(op.acc, qLeft, op.kRight);
                Count(kCountMatmul);
                SetFlag(L0Free(b));
                Handoff(SAccReady(b));
                StoreNd(st.s, ScratchS(st.t, st.core, stage) + uint64_t(r0) * st.t.handoff + pc.col, m, pc.len, st.t.handoff,
                        op.s, kTrafficScratch);
                SetFlag(SAccFree(b));
            });
            SetFlag(kQLeftFree);
        }
    }

    /* Unit u: O_tmp = P.V per KV-group run, accumulated over the unit's sub-tiles in L0C.  P comes into L1 in
     * windows of kPieceTokens columns (a hand-off may be longer).  The device multiplies the inner (token)
     * length rounded up to 16, so a window whose length is not a multiple of 16 zeroes P's L1 buffer and a
     * ragged sub-tile V's first: padding times padding must be 0, not stale data (NaN x 0 = NaN). */
    static AICORE inline void Pv(CubeState<T> &st, const Task &tk, uint32_t u, uint32_t stage)
    {
        const uint32_t d = st.t.headDim;
        const uint32_t unitLen = UnitTokens(st.t, tk, u);
        for (uint32_t kvh = st.FirstKvHead(tk); kvh <= st.LastKvHead(tk); ++kvh) {
            uint32_t r0, m;
            st.RunRows(tk, kvh, r0, m);
            auto out = Tiles::Pv(m, d, 0); /* out.acc accumulates (whole static width), out.o is stored */
            Assign(out.acc, kL0cO);
            Assign(out.o, kL0cO);
            bool first = true;
            for (uint32_t w0 = 0; w0 < unitLen; w0 += kPieceTokens) {
                const uint32_t wl = PieceTokens(unitLen, w0);
                PMat pMat(m, wl);
                Assign(pMat, kL1P);
                WaitFlag(kPL1Free);
                if (wl % 16 != 0) { /* MTE2, before the load on the same in-order pipe */
                    PMat whole(kCubeRows, PMat::Cols);
                    Assign(whole, kL1P);
                    ZeroL1(whole);
                }
                LoadNd(pMat, st.p, ScratchP(st.t, st.core, stage) + uint64_t(r0) * st.t.handoff + w0, m, wl,
                       st.t.handoff, kTrafficScratch);
                /* No P -> MTE1 flag: every sub-tile's KvLoaded(b) is set on MTE2 after this load (one in-order
                 * queue), and TEXTRACT waits for it before it reads P. */
                if (first) WaitFlag(kOAccFree);
                st.ForEachPiece(tk, u, w0, w0 + wl, kSub, [&](const Piece &pc) {
                    const uint32_t b = st.l1Toggle++ & 1u;
                    VMat vMat(pc.len, d);
                    auto op = Tiles::Pv(m, d, pc.len); /* whole static widths: CubeTiles::PvOperands */
                    PLeft pLeft(m, pc.len);
                    Assign(vMat, kL1Kv0 + b * kL1KvBytes);
                    Assign(op.vMat, kL1Kv0 + b * kL1KvBytes);
                    Assign(op.vRight, b * kL0bBytes);
                    Assign(pLeft, kL0aP + b * kL0aPBytes);
                    WaitFlag(KvL1Free(b));
                    if (pc.len % 16 != 0) {
                        VMat whole(VMat::Rows, VMat::Cols);
                        Assign(whole, kL1Kv0 + b * kL1KvBytes);
                        ZeroL1(whole);
                    }
                    LoadNd(vMat, st.v, pc.kvOff + uint64_t(kvh) * d, pc.len, d, uint64_t(st.t.kvHeads) * d,
                           kTrafficKv);
                    Handoff(KvLoaded(b));
                    WaitFlag(L0Free(b));
                    Extract(pLeft, pMat, 0, pc.col - w0);
                    Mov(op.vRight, op.vMat);
                    SetFlag(KvL1Free(b));
                    Handoff(L0Ready(b));
                    if (first) {
                        Matmul(out.acc, pLeft, op.vRight);
                    } else {
                        MatmulAcc(out.acc, pLeft, op.vRight);
                    }
                    first = false;
                    Count(kCountMatmul);
                    SetFlag(L0Free(b));
                });
                SetFlag(kPL1Free);
            }
            Handoff(kOAccReady);
            StoreNd(st.otmp, ScratchO(st.core, stage) + uint64_t(r0) * d, m, d, d, out.o, kTrafficScratch);
            SetFlag(kOAccFree);
        }
    }
};

}  // namespace pa

#endif /* PA_CUBE_HEAD_HPP */
