/*
 * Cube data path for absorbed MLA (ABI v5): one latent head shared by every q head of the task, so a task's rows
 * (its heads x query tokens, up to kMlaRows) are one matmul's M.
 *
 * A unit is kMlaTok tokens.  Its latent (512 columns) and rope (64) come into one L1 tile laid out as K^T (ZN: 16
 * latent columns x the unit's tokens per fractal row block), once: Q.K^T moves 64-row chunks of it to L0B, and P.V,
 * a unit later, moves 128-column slices of the same bytes as V (the NZ layout of V holds exactly the bytes of ZN
 * K^T: a token's 16 elements of a 16-column group are one 32-byte line in both).  Two such tiles alternate by the
 * unit's stage, so the latent of unit u is in L1 from its Q.K^T (while the vectors still work on unit u - 1) to its
 * P.V: each latent byte is read from GM once per split, whatever the head count.
 *
 * Q (latent 512 + rope 64 columns, NZ) is loaded once per task and stays in L1; each Q.K^T extracts its 64-column
 * chunks to L0A.  S (rows x unit) accumulates in L0C over the 9 chunks and goes to GM scratch.  P.V writes 4 slices of
 * 128 output columns into the task's fp32 accumulator in GM (the core's o_tmp): stored for the first unit, added
 * (FIX's atomic add) for the next ones, after the vectors have rescaled it (pa_vector_mla.hpp).
 *
 * Every matmul multiplies whole static widths: k = 64 of Q.K^T, k = kMlaTok of P.V (P's columns and the latent's
 * tokens past a ragged unit are zero), n = kMlaTok or kMlaVCols (CubeTiles' rule; defects 2 and 3 of SEMANTICS.md
 * need no row-block split then).
 */
#ifndef PA_CUBE_MLA_HPP
#define PA_CUBE_MLA_HPP

#include "pa_cube_state.hpp"

namespace pa {

template <typename T>
struct MlaPath {
    /* L1: Q (NZ, all rows x 576), its rope view, the unit's K^T (ZN, 576 x unit) and its views, P (NZ). */
    using QMat = Tile<TileType::Mat, T, kMlaRows, kMlaK, BLayout::ColMajor, DYNAMIC, DYNAMIC, SLayout::RowMajor, kFractalBytes>;
    using QPart = Tile<TileType::Mat, T, kMlaRows, kMlaD, BLayout::ColMajor, DYNAMIC, DYNAMIC, SLayout::RowMajor, kFractalBytes>;
    using QRope = Tile<TileType::Mat, T, kMlaRows, kMlaRope, BLayout::ColMajor, DYNAMIC, DYNAMIC, SLayout::RowMajor, kFractalBytes>;
    using KAll = Tile<TileType::Mat, T, kMlaK, kMlaTok, BLayout::RowMajor, DYNAMIC, DYNAMIC, SLayout::ColMajor, kFractalBytes>;
    using KLat = Tile<TileType::Mat, T, kMlaD, kMlaTok, BLayout::RowMajor, DYNAMIC, DYNAMIC, SLayout::ColMajor, kFractalBytes>;
    using KRopeT = Tile<TileType::Mat, T, kMlaRope, kMlaTok, BLayout::RowMajor, DYNAMIC, DYNAMIC, SLayout::ColMajor, kFractalBytes>;
    using KChunk = Tile<TileType::Mat, T, kMlaKChunk, kMlaTok, BLayout::RowMajor, DYNAMIC, DYNAMIC, SLayout::ColMajor, kFractalBytes>;
    using VSlice = Tile<TileType::Mat, T, kMlaTok, kMlaVCols, BLayout::ColMajor, DYNAMIC, DYNAMIC, SLayout::RowMajor, kFractalBytes>;
    using PMat = Tile<TileType::Mat, T, kMlaRows, kMlaTok, BLayout::ColMajor, DYNAMIC, DYNAMIC, SLayout::RowMajor, kFractalBytes>;
    /* L0 operands and accumulators. */
    using QLeft = TileLeft<T, kMlaRows, kMlaKChunk, DYNAMIC, DYNAMIC>;
    using KRight = TileRight<T, kMlaKChunk, kMlaTok, DYNAMIC, DYNAMIC>;
    using PLeft = TileLeft<T, kMlaRows, kMlaTok, DYNAMIC, DYNAMIC>;
    using VRight = TileRight<T, kMlaTok, kMlaVCols, DYNAMIC, DYNAMIC>;
    /* Compact accumulators: mad lays C out with ceil(m / 16) fractal rows per column block (the valid m, not the
     * tile's static rows), and only a compact tile makes FIX's store read it at that stride. */
    using SAcc = TileAccCompact<float, kMlaRows, kMlaTok, DYNAMIC, DYNAMIC>;
    using OAcc = TileAccCompact<float, kMlaRows, kMlaVCols, DYNAMIC, DYNAMIC>;

    /* Bytes of one 16-row block of the ZN K^T tile (a fractal row block: 16 columns of the latent x kMlaTok tokens),
     * which is also one 16-column block of V read NZ. */
    static constexpr uint32_t kKBlockBytes = 16 * kMlaTok * sizeof(T);
    /* One 16-column block of Q in L1 (NZ): kMlaRows rows x 16. */
    static constexpr uint32_t kQBlockBytes = kMlaRows * 16 * sizeof(T);

    /* On-chip layout (bytes).  L1: Q | two K^T tiles | P.  L0A: two Q chunks | P.  L0B: two operands.  L0C: S | two
     * P.V slice accumulators (FIX stores one while M fills the other). */
    static constexpr uint32_t kL1Q = 0;
    static constexpr uint32_t kL1Kv0 = AlignUp(QMat::Numel * sizeof(T), kOnChipAlign);
    static constexpr uint32_t kL1KvBytes = AlignUp(KAll::Numel * sizeof(T), kOnChipAlign);
    static constexpr uint32_t kL1P = kL1Kv0 + 2 * kL1KvBytes;
    static constexpr uint32_t kL0aQBytes = AlignUp(QLeft::Numel * sizeof(T), kOnChipAlign);
    static constexpr uint32_t kL0aP = 2 * kL0aQBytes;
    static constexpr uint32_t kL0bBytes = AlignUp(KRight::Numel > VRight::Numel ? KRight::Numel * sizeof(T)
                                                                                 : VRight::Numel * sizeof(T),
                                                  kOnChipAlign);
    static constexpr uint32_t kL0cS = 0;
    static constexpr uint32_t kL0cO = AlignUp(SAcc::Numel * sizeof(float), kOnChipAlign);
    static constexpr uint32_t kL0cOBytes = AlignUp(OAcc::Numel * sizeof(float), kOnChipAlign);
    static_assert(kL1P + PMat::Numel * sizeof(T) <= kL1Bytes, "MLA L1 plan overflows");
    static_assert(kL0aP + PLeft::Numel * sizeof(T) <= kL0aBytes, "MLA L0A plan overflows");
    static_assert(2 * kL0bBytes <= pa::kL0bBytes, "MLA L0B plan overflows");
    static_assert(kL0cO + 2 * kL0cOBytes <= kL0cBytes, "MLA L0C plan overflows");

    using Piece = typename CubeState<T>::Piece;

    static AICORE inline uint32_t KvTile(uint32_t b) { return kL1Kv0 + b * kL1KvBytes; }

    /* FIX: columns [0, cols) of the compact accumulator of m rows at L0C byte l0c into GM at `off` (row pitch
     * `pitch`), added into GM when `add`: one store, rows of cols x 4 bytes (the bursts stay long). */
    static AICORE inline void StoreAcc(Gm<float> gm, uint64_t off, uint32_t m, uint32_t cols, uint32_t pitch,
                                       uint32_t l0c, bool add)
    {
        SAcc tile(m, cols);
        Assign(tile, l0c);
        if (add) {
            StoreNdAdd(gm, off, m, cols, pitch, tile, kTrafficScratch);
        } else {
            StoreNd(gm, off, m, cols, pitch, tile, kTrafficScratch);
        }
    }

    /* The task's rows: one run (the one latent head), token-major (TaskRun). */
    static AICORE inline TaskRun Rows(const CubeState<T> &st, const Task &tk) { return RunOf(st.t, tk, 0); }

    /* Q (latent and rope columns) of every row of the task into L1, at the task's first unit. */
    static AICORE inline void LoadQ(CubeState<T> &st, const Task &tk, const TaskRun &run)
    {
        const uint32_t m = run.rows;
        WaitFlag(kQL1Free);
        st.template ZeroBuffer<QMat>(kL1Q, st.BeforeQLoad(m, kMlaK)); /* rows past m are multiplied: CubeTiles */
        st.template LoadRowsOf<QPart>(run, 0, m, kL1Q, st.q, kMlaD, tk.addrQ);
        st.template LoadRowsOf<QRope>(run, 0, m, kL1Q + (kMlaD / 16) * kQBlockBytes, st.qRope, kMlaRope,
                                      tk.addrQ / kMlaD * kMlaRope);
        Handoff(kQLoaded);
    }

    /* The unit's latent and rope, page piece by page piece, into K^T tile b: column c of the tile is token c. */
    static AICORE inline void LoadLatent(CubeState<T> &st, const Task &tk, uint32_t u, uint32_t b, uint32_t len)
    {
        WaitFlag(KvL1Free(b)); /* the P.V of the unit two before moved its last slice out */
        /* the tokens past a ragged unit are multiplied by Q.K^T and, as V's rows, by P.V: zero unless they are */
        st.template ZeroBuffer<KAll>(KvTile(b), st.kvBox[b].BeforeLoad(kMlaK / 16, len, kMlaK / 16, kMlaTok, false));
        st.ForEachPiece(tk, u, 0, len, kMlaTok, [&](const Piece &pc) {
            KLat lat(kMlaD, pc.len);
            KRopeT rope(kMlaRope, pc.len);
            Assign(lat, KvTile(b) + pc.col * kNzRowBytes);
            Assign(rope, KvTile(b) + (kMlaD / 16) * kKBlockBytes + pc.col * kNzRowBytes);
            LoadDn(lat, st.k, pc.kvOff, kMlaD, pc.len, kMlaD, kTrafficKv);
            LoadDn(rope, st.kRope, pc.kvOff / kMlaD * kMlaRope, kMlaRope, pc.len, kMlaRope, kTrafficKv);
        });
        Handoff(KvLoaded(b));
    }

    /* Unit u: S = Q.K^T over the 576 columns, into GM scratch stage `stage`; the latent stays in tile `stage`. */
    static AICORE inline void Qk(CubeState<T> &st, const Task &tk, uint32_t u, uint32_t stage)
    {
        const TaskRun run = Rows(st, tk);
        const uint32_t m = run.rows, len = UnitTokens(st.t, tk, u);
        if (u == 0) LoadQ(st, tk, run);
        LoadLatent(st, tk, u, stage, len);
        QMat qMat(m, kMlaK);
        SAcc acc(m, kMlaTok);
        Assign(qMat, kL1Q);
        Assign(acc, kL0cS);
        for (uint32_t c = 0; c < uint32_t(kMlaK / kMlaKChunk); ++c) {
            const uint32_t b = st.l0Toggle++ & 1u;
            QLeft qLeft(m, kMlaKChunk);
            KChunk kChunk(kMlaKChunk, kMlaTok);
            KRight kRight(kMlaKChunk, kMlaTok);
            Assign(qLeft, b * kL0aQBytes);
            Assign(kChunk, KvTile(stage) + c * (kMlaKChunk / 16) * kKBlockBytes);
            Assign(kRight, b * kL0bBytes);
            WaitFlag(L0Free(b));
            Extract(qLeft, qMat, 0, c * kMlaKChunk);
            Mov(kRight, kChunk);
            if (c + 1 == uint32_t(kMlaK / kMlaKChunk) && u + 1 == UnitsOf(st.t, tk)) SetFlag(kQL1Free);
            Handoff(L0Ready(b));
            if (c == 0) WaitFlag(SAccFree(0));
            if (c == 0) {
                Matmul(acc, qLeft, kRight);
            } else {
                MatmulAcc(acc, qLeft, kRight);
            }
            Count(kCountMatmul);
            SetFlag(L0Free(b));
        }
        Handoff(SAccReady(0));
        StoreAcc(st.s, ScratchS(st.t, st.core, stage) + uint64_t(run.row0) * st.t.handoff, m, len, st.t.handoff, kL0cS,
                 false);
        SetFlag(SAccFree(0));
    }

    /* Unit u: the task's output accumulator (+)= P.V, slice by slice of kMlaVCols columns, V read from tile `stage`,
     * the slices' L0C accumulators alternating so that FIX stores one while M computes the next. */
    static AICORE inline void Pv(CubeState<T> &st, const Task &tk, uint32_t u, uint32_t stage)
    {
        const TaskRun run = Rows(st, tk);
        const uint32_t m = run.rows, len = UnitTokens(st.t, tk, u);
        PMat pMat(m, len), pWhole(m, kMlaTok);
        PLeft pLeft(m, kMlaTok);
        Assign(pMat, kL1P);
        Assign(pWhole, kL1P);
        Assign(pLeft, kL0aP);
        WaitFlag(kPL1Free);
        /* P.V multiplies all kMlaTok columns and the rows of a one-row block: zero unless they already are */
        st.template ZeroBuffer<PMat>(kL1P, st.pBox[0].BeforeLoad(m, len, RowsMultiplied(m), kMlaTok, true));
        LoadNd(pMat, st.p, ScratchP(st.t, st.core, stage) + uint64_t(run.row0) * st.t.handoff, m, len, st.t.handoff,
               kTrafficScratch);
        Handoff(kPLoaded);
        WaitFlag(kPLeftFree);
        Extract(pLeft, pWhole, 0, 0);
        SetFlag(kPL1Free);
        const uint32_t slices = kMlaD / kMlaVCols;
        for (uint32_t sl = 0; sl < slices; ++sl) {
            const uint32_t b = st.l0Toggle++ & 1u;
            VSlice vSlice(kMlaTok, kMlaVCols);
            VRight vRight(kMlaTok, kMlaVCols);
            OAcc acc(m, kMlaVCols);
            const uint32_t ob = sl & 1u;
            Assign(vSlice, KvTile(stage) + sl * (kMlaVCols / 16) * kKBlockBytes);
            Assign(vRight, b * kL0bBytes);
            Assign(acc, kL0cO + ob * kL0cOBytes);
            WaitFlag(L0Free(b));
            Mov(vRight, vSlice);
            if (sl + 1 == slices) SetFlag(KvL1Free(stage)); /* the unit's latent is no longer needed */
            Handoff(L0Ready(b));
            WaitFlag(OAccFree(ob));
            Matmul(acc, pLeft, vRight);
            Count(kCountMatmul);
            SetFlag(L0Free(b));
            if (sl + 1 == slices) SetFlag(kPLeftFree);
            Handoff(OAccReady(ob));
            StoreAcc(st.otmp, ScratchO(st.core, 0) + uint64_t(run.row0) * kMlaD + sl * kMlaVCols, m, kMlaVCols, kMlaD,
                     kL0cO + ob * kL0cOBytes, u != 0);
            SetFlag(OAccFree(ob));
        }
    }
};

}  // namespace pa

#endif /* PA_CUBE_MLA_HPP */
