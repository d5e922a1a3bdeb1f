/*
 * Cube data path for absorbed MLA (ABI v5): one latent head shared by every q head of the task, so a task's rows
 * (its heads x query tokens, up to kMlaRows) are one matmul's M.
 *
 * A unit is kMlaTok tokens.  Its latent (512 columns) comes into one L1 tile laid out as K^T (ZN: 16 latent columns
 * x the unit's tokens per fractal row block), once, and its rope (64) into a rope tile beside it: Q.K^T moves 64-row
 * chunks of both to L0B; P.V, a unit later, moves 64-column slices of the latent tile as V (the NZ layout of V holds
 * exactly the bytes of ZN K^T: a token's 16 elements of a 16-column group are one 32-byte line in both).  The latent
 * of unit u stays in L1 from its Q.K^T (while the vectors still work on unit u - 1) to its P.V: each latent byte is
 * read from GM once per split, whatever the head count.
 *
 * Two instantiations, picked per launch by a task's rows (CubeCore::Run): up to kMlaPrefetchRows rows, Q and P are
 * small enough for three latent tiles, and a unit's Q.K^T issues the load of the task's next unit into the third
 * (prefetch: the load runs under this unit's Q.K^T and the previous P.V, not after them); above that, two tiles,
 * and each unit loads its own latent when its Q.K^T starts, in two halves of 256 columns: the first half as soon as
 * the P.V two units back moved its first four V slices out, so only the second half waits for that P.V's end.
 * Rope tiles alternate by the unit counter in both; with three tiles each has its own free flag (Q.K^T's last chunk is
 * the rope tile's last reader), with two a rope loads with its latent tile's second half, after the same P.V.
 *
 * Q (latent 512 + rope 64 columns, NZ) is loaded once per task and stays in L1; each Q.K^T extracts its 64-column
 * chunks to L0A.  S (rows x unit) accumulates in L0C over the 9 chunks and goes to GM scratch.  P.V writes 8 slices of
 * 64 output columns into the task's fp32 accumulator in GM (the core's o_tmp): stored for the first unit, added
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

/* kRows: a task's rows at most (matmul M); kTiles: latent tiles in L1 (3: prefetch the task's next unit). */
template <typename T, int kRows, int kTiles>
struct MlaPath {
    static_assert(kTiles == 2 || kTiles == 3, "two latent tiles, or three with the next unit's prefetch");
    static constexpr bool kPrefetch = kTiles == 3;
    /* Two tiles: each is loaded and freed in halves of kMlaD / 2 latent columns, so that the next unit's first
     * half loads while this unit's P.V still reads the second half of the tile (V slices in column order). */
    static constexpr bool kHalves = !kPrefetch;
    /* L1: Q (NZ, all rows x 576), its rope view, the unit's latent K^T (ZN, 512 x unit) and rope K^T (ZN, 64 x
     * unit), their chunks and V slices, P (NZ). */
    using QMat = Tile<TileType::Mat, T, kRows, kMlaK, BLayout::ColMajor, DYNAMIC, DYNAMIC, SLayout::RowMajor, kFractalBytes>;
    using QPart = Tile<TileType::Mat, T, kRows, kMlaD, BLayout::ColMajor, DYNAMIC, DYNAMIC, SLayout::RowMajor, kFractalBytes>;
    using QRope = Tile<TileType::Mat, T, kRows, kMlaRope, BLayout::ColMajor, DYNAMIC, DYNAMIC, SLayout::RowMajor, kFractalBytes>;
    using KLat = Tile<TileType::Mat, T, kMlaD, kMlaTok, BLayout::RowMajor, DYNAMIC, DYNAMIC, SLayout::ColMajor, kFractalBytes>;
    using KHalf = Tile<TileType::Mat, T, kMlaD / 2, kMlaTok, BLayout::RowMajor, DYNAMIC, DYNAMIC, SLayout::ColMajor, kFractalBytes>;
    using KRopeT = Tile<TileType::Mat, T, kMlaRope, kMlaTok, BLayout::RowMajor, DYNAMIC, DYNAMIC, SLayout::ColMajor, kFractalBytes>;
    using KChunk = Tile<TileType::Mat, T, kMlaKChunk, kMlaTok, BLayout::RowMajor, DYNAMIC, DYNAMIC, SLayout::ColMajor, kFractalBytes>;
    using VSlice = Tile<TileType::Mat, T, kMlaTok, kMlaVCols, BLayout::ColMajor, DYNAMIC, DYNAMIC, SLayout::RowMajor, kFractalBytes>;
    using PMat = Tile<TileType::Mat, T, kRows, kMlaTok, BLayout::ColMajor, DYNAMIC, DYNAMIC, SLayout::RowMajor, kFractalBytes>;
    /* L0 operands and accumulators. */
    using QLeft = TileLeft<T, kRows, kMlaKChunk, DYNAMIC, DYNAMIC>;
    using KRight = TileRight<T, kMlaKChunk, kMlaTok, DYNAMIC, DYNAMIC>;
    using PLeft = TileLeft<T, kRows, kMlaTok, DYNAMIC, DYNAMIC>;
    using VRight = TileRight<T, kMlaTok, kMlaVCols, DYNAMIC, DYNAMIC>;
    /* Compact accumulators: mad lays C out with ceil(m / 16) fractal rows per column block (the valid m, not the
     * tile's static rows), and only a compact tile makes FIX's store read it at that stride. */
    using SAcc = TileAccCompact<float, kRows, kMlaTok, DYNAMIC, DYNAMIC>;
    using OAcc = TileAccCompact<float, kRows, kMlaVCols, DYNAMIC, DYNAMIC>;

    /* Bytes of one 16-row block of the ZN K^T tile (a fractal row block: 16 columns of the latent x kMlaTok tokens),
     * which is also one 16-column block of V read NZ. */
    static constexpr uint32_t kKBlockBytes = 16 * kMlaTok * sizeof(T);
    /* A half tile: the first or last kMlaD / 2 latent columns (16-column blocks are contiguous in ZN). */
    static constexpr uint32_t kHalfBytes = (kMlaD / 2 / 16) * kKBlockBytes;
    static constexpr uint32_t kHalfChunks = kMlaD / 2 / kMlaKChunk; /* Q.K^T chunks in the first half */
    static constexpr uint32_t kHalfSlices = kMlaD / 2 / kMlaVCols;  /* P.V slices in the first half   */
    /* One 16-column block of Q in L1 (NZ): kRows rows x 16. */
    static constexpr uint32_t kQBlockBytes = kRows * 16 * sizeof(T);

    /* On-chip layout (bytes).  L1: Q | kTiles latent K^T tiles | two rope K^T tiles | P.  L0A: two Q chunks | P.
     * L0B: two operands.  L0C: S | two P.V slice accumulators (FIX stores one while M fills the other). */
    static constexpr uint32_t kL1Q = 0;
    static constexpr uint32_t kL1Kv0 = AlignUp(QMat::Numel * sizeof(T), kOnChipAlign);
    static constexpr uint32_t kL1KvBytes = AlignUp(KLat::Numel * sizeof(T), kOnChipAlign);
    static constexpr uint32_t kL1Rope0 = kL1Kv0 + kTiles * kL1KvBytes;
    static constexpr uint32_t kL1RopeBytes = AlignUp(KRopeT::Numel * sizeof(T), kOnChipAlign);
    static constexpr uint32_t kL1P = kL1Rope0 + 2 * kL1RopeBytes;
    static constexpr uint32_t kL0aQBytes = AlignUp(QLeft::Numel * sizeof(T), kOnChipAlign);
    static constexpr uint32_t kL0aP = 2 * kL0aQBytes;
    static constexpr uint32_t kL0bBytes = AlignUp(KRight::Numel > VRight::Numel ? KRight::Numel * sizeof(T)
                                                                                 : VRight::Numel * sizeof(T),
                                                  kOnChipAlign);
    static constexpr uint32_t kL0cS = 0;
    static constexpr uint32_t kL0cO = AlignUp(SAcc::Numel * sizeof(float), kOnChipAlign);
    static constexpr uint32_t kL0cOBytes = AlignUp(OAcc::Numel * sizeof(float), kOnChipAlign);
    static_assert(kL1P + PMat::Numel * sizeof(T) <= kL1Bytes, "MLA L1 plan overflows");
    static_assert(kRows % 16 == 0 && kRows <= kMlaRows, "a task's rows in whole fractal row blocks");
    static_assert(kL0aP + PLeft::Numel * sizeof(T) <= kL0aBytes, "MLA L0A plan overflows");
    static_assert(2 * kL0bBytes <= pa::kL0bBytes, "MLA L0B plan overflows");
    static_assert(kL0cO + 2 * kL0cOBytes <= kL0cBytes, "MLA L0C plan overflows");

    using Piece = typename CubeState<T>::Piece;

    /* The latent tile and the rope tile of the unit with global counter c (the counter orders all of a core's
     * units; the vectors' scratch stage is c % kStages). */
    static AICORE inline uint32_t TileOf(uint32_t c) { return c % kTiles; }
    static AICORE inline uint32_t RopeOf(uint32_t c) { return c % 2; }
    static AICORE inline uint32_t KvTile(uint32_t b) { return kL1Kv0 + b * kL1KvBytes; }
    static AICORE inline uint32_t RopeTile(uint32_t r) { return kL1Rope0 + r * kL1RopeBytes; }

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

    /* The free flags only this path arms: the third tile's and the rope tiles' (three tiles), or the first halves'
     * (two tiles, the same event ids). */
    template <typename Fn>
    static AICORE inline void ForEachOwnFreeFlag(Fn &&fn)
    {
        if constexpr (kPrefetch) {
            fn(KvL1Free(2));
            fn(RopeL1Free(0));
            fn(RopeL1Free(1));
        } else {
            fn(KvL1FreeLo(0));
            fn(KvL1FreeLo(1));
        }
    }

    /* Rope tile r zeroed past a ragged unit's len tokens, then one page piece's rope columns loaded into it. */
    static AICORE inline void ZeroRope(CubeState<T> &st, uint32_t r, uint32_t len)
    {
        st.template ZeroBuffer<KRopeT>(RopeTile(r),
                                       st.ropeBox[r].BeforeLoad(kMlaRope / 16, len, kMlaRope / 16, kMlaTok, false));
    }
    static AICORE inline void LoadRope(CubeState<T> &st, uint32_t r, const Piece &pc)
    {
        KRopeT rope(kMlaRope, pc.len);
        Assign(rope, RopeTile(r) + pc.col * kNzRowBytes);
        LoadDn(rope, st.kRope, pc.kvOff / kMlaD * kMlaRope, kMlaRope, pc.len, kMlaRope, kTrafficKv);
    }

    /* A unit's page pieces, read once for both halves of its latent (two tiles): a unit starts on a page boundary
     * (the planner's MLA units are whole pages from a split's start), so it spans at most kMlaTok /
     * PA_MIN_BLOCK_SIZE pieces. */
    struct UnitPieces {
        static_assert(kMlaTok % PA_MIN_BLOCK_SIZE == 0, "a page-aligned unit spans whole pages of the smallest size");
        Piece piece[kMlaTok / PA_MIN_BLOCK_SIZE];
        uint32_t count;
    };

    /* Unit u (global counter c): its latent and rope, page piece by page piece, into latent tile TileOf(c) and
     * rope tile RopeOf(c): column j of both is token j.  MTE1 waits for KvLoaded(TileOf(c)) before its Q.K^T.
     * Two tiles load in halves instead (LoadHalf). */
    static AICORE inline void LoadLatent(CubeState<T> &st, const Task &tk, uint32_t u, uint32_t c)
    {
        const uint32_t b = TileOf(c), r = RopeOf(c), len = UnitTokens(st.t, tk, u);
        WaitFlag(KvL1Free(b));   /* the P.V of unit c - kTiles moved its last slice out */
        WaitFlag(RopeL1Free(r)); /* the Q.K^T of unit c - 2 moved its rope chunk out */
        /* the tokens past a ragged unit are multiplied by Q.K^T and, as V's rows, by P.V: zero unless they are */
        st.template ZeroBuffer<KLat>(KvTile(b), st.kvBox[b].BeforeLoad(kMlaD / 16, len, kMlaD / 16, kMlaTok, false));
        ZeroRope(st, r, len);
        st.ForEachPiece(tk, u, 0, len, kMlaTok, [&](const Piece &pc) {
            KLat lat(kMlaD, pc.len);
            Assign(lat, KvTile(b) + pc.col * kNzRowBytes);
            LoadDn(lat, st.k, pc.kvOff, kMlaD, pc.len, kMlaD, kTrafficKv);
            LoadRope(st, r, pc);
        });
        SetFlag(KvLoaded(b));
    }

    /* Two tiles: half h of unit c's latent columns into tile b = TileOf(c).  The first half and the rope as soon as
     * the P.V of unit c - 2 moved its first half's V slices out (KvL1FreeLo, which MTE1 sets after the Q.K^T of
     * unit c - 2 moved its rope chunk: the rope tile is the latent tile's, RopeOf(c) = TileOf(c); MTE1 then waits for
     * KvLoadedLo), the second half once it moved the rest (KvL1Free; MTE1 then waits for KvLoaded).  Each wait
     * follows its set in program order, so a fused step issues the second half after the P.V's last slice, and
     * the rope chunk runs while it loads (ChunkAt). */
    static AICORE inline void LoadHalf(CubeState<T> &st, const UnitPieces &pcs, uint32_t b, uint32_t len, uint32_t h)
    {
        const uint32_t base = KvTile(b) + h * kHalfBytes;
        L1Box &box = h == 0 ? st.kvBox[b] : st.kvHiBox[b];
        WaitFlag(h == 0 ? KvL1FreeLo(b) : KvL1Free(b));
        st.template ZeroBuffer<KHalf>(base, box.BeforeLoad(kMlaD / 32, len, kMlaD / 32, kMlaTok, false));
        if (h == 0) ZeroRope(st, b, len);
        for (uint32_t i = 0; i < pcs.count; ++i) {
            const Piece &pc = pcs.piece[i];
            KHalf half(kMlaD / 2, pc.len);
            Assign(half, base + pc.col * kNzRowBytes);
            LoadDn(half, st.k, pc.kvOff + h * (kMlaD / 2), kMlaD / 2, pc.len, kMlaD, kTrafficKv);
            if (h == 0) LoadRope(st, b, pc);
        }
        SetFlag(h == 0 ? KvLoadedLo(b) : KvLoaded(b));
    }

    static constexpr uint32_t kChunks = kMlaK / kMlaKChunk;  /* Q.K^T's matmuls: latent chunks, then the rope */
    static constexpr uint32_t kSlices = kMlaD / kMlaVCols;   /* P.V's matmuls, one per output slice          */
    /* Two tiles fuse a P.V with the Q.K^T two units later (CubeCore::FusedStep): that Q.K^T reads the tile the P.V
     * frees in halves, so its chunks can go between the P.V's last slices. */
    static constexpr bool kFusedStep = kHalves;

    /* A unit's Q.K^T in steps (QkBegin, QkRest, QkChunk per chunk, QkEnd), so that a fused step can issue its
     * chunks between a P.V's slices. */
    struct QkStep {
        TaskRun run;
        uint32_t u, units, len, ctr, stage;
        UnitPieces pieces; /* two tiles: the unit's pages, for both halves */
    };
    /* Unit u (the core's unit ctr): Q at a task's first unit, then the unit's latent (three tiles: the task's next
     * unit's; this one's came with the previous Q.K^T), or, two tiles, its first half. */
    static AICORE inline QkStep QkBegin(CubeState<T> &st, const Task &tk, uint32_t u, uint32_t ctr)
    {
        QkStep q{Rows(st, tk), u, UnitsOf(st.t, tk), UnitTokens(st.t, tk, u), ctr, ctr % kStages, {}};
        if (u == 0) LoadQ(st, tk, q.run);
        if constexpr (kHalves) {
            q.pieces.count = 0;
            st.ForEachPiece(tk, u, 0, q.len, kMlaTok, [&](const Piece &pc) { q.pieces.piece[q.pieces.count++] = pc; });
            LoadHalf(st, q.pieces, TileOf(ctr), q.len, 0);
        } else {
            if (u == 0) LoadLatent(st, tk, u, ctr);
            if (u + 1 < q.units) LoadLatent(st, tk, u + 1, ctr + 1);
        }
        return q;
    }
    /* Two tiles: the second half of the latent and the rope (after the P.V two units back issued its last slice). */
    static AICORE inline void QkRest(CubeState<T> &st, const QkStep &q)
    {
        if constexpr (kHalves) LoadHalf(st, q.pieces, TileOf(q.ctr), q.len, 1);
    }
    static constexpr uint32_t kRopeChunk = kMlaD / kMlaKChunk;
    /* The chunk Q.K^T issues i-th: in order, except that two tiles take the rope right after the first half's
     * chunks (it lands with the first half, LoadHalf), so that once the second half lands only its chunks are left
     * before S's store (kernel/npu/PERFORMANCE.md, change 23). */
    static AICORE inline uint32_t ChunkAt(uint32_t i)
    {
        if (!kHalves || i < kHalfChunks) return i;
        return i == kHalfChunks ? kRopeChunk : i - 1;
    }
    /* The i-th chunk of S = Q.K^T over the 576 columns (ChunkAt): a latent chunk (k < kMlaD / kMlaKChunk) or the
     * rope, accumulated in L0C; the latent stays in its tile until the unit's P.V. */
    static AICORE inline void QkChunk(CubeState<T> &st, const QkStep &q, uint32_t i)
    {
        const uint32_t k = ChunkAt(i);
        const uint32_t m = q.run.rows, tile = TileOf(q.ctr), b = st.l0Toggle++ & 1u;
        if (i == 0) WaitFlag(kHalves ? KvLoadedLo(tile) : KvLoaded(tile));
        if (kHalves && k == kHalfChunks) WaitFlag(KvLoaded(tile)); /* the second half and the rope */
        QMat qMat(m, kMlaK);
        SAcc acc(m, kMlaTok);
        QLeft qLeft(m, kMlaKChunk);
        KChunk kChunk(kMlaKChunk, kMlaTok);
        KRight kRight(kMlaKChunk, kMlaTok);
        Assign(qMat, kL1Q);
        Assign(acc, kL0cS);
        Assign(qLeft, b * kL0aQBytes);
        Assign(kChunk, k < kRopeChunk ? KvTile(tile) + k * (kMlaKChunk / 16) * kKBlockBytes : RopeTile(RopeOf(q.ctr)));
        Assign(kRight, b * kL0bBytes);
        WaitFlag(L0Free(b));
        Extract(qLeft, qMat, 0, k * kMlaKChunk);
        Mov(kRight, kChunk);
        if (kPrefetch && k == kRopeChunk) SetFlag(RopeL1Free(RopeOf(q.ctr)));
        if (i + 1 == kChunks && q.u + 1 == q.units) SetFlag(kQL1Free);
        Handoff(L0Ready(b));
        if (i == 0) WaitFlag(SAccFree(0));
        if (i == 0) {
            Matmul(acc, qLeft, kRight);
        } else {
            MatmulAcc(acc, qLeft, kRight);
        }
        Count(kCountMatmul);
        SetFlag(L0Free(b));
    }
    /* S (rows x unit) into GM scratch stage q.stage. */
    static AICORE inline void QkEnd(CubeState<T> &st, const QkStep &q)
    {
        Handoff(SAccReady(0));
        StoreAcc(st.s, ScratchS(st.t, st.core, q.stage) + uint64_t(q.run.row0) * st.t.handoff, q.run.rows, q.len,
                 st.t.handoff, kL0cS, false);
        SetFlag(SAccFree(0));
    }
    /* Unit u (the core's unit st.unitCounter, whose scratch stage is `stage`): S = Q.K^T, all of it. */
    static AICORE inline void Qk(CubeState<T> &st, const Task &tk, uint32_t u, uint32_t /* stage */)
    {
        const QkStep q = QkBegin(st, tk, u, st.unitCounter);
        QkRest(st, q);
        for (uint32_t k = 0; k < kChunks; ++k) QkChunk(st, q, k);
        QkEnd(st, q);
    }

    /* A unit's P.V in steps (PvBegin, PvSlice per slice): the task's output accumulator (+)= P.V, slice by slice of
     * kMlaVCols columns, V read from the unit's latent tile, the slices' L0C accumulators alternating so that FIX
     * stores one while M computes the next. */
    struct PvStep {
        uint32_t m, row0, u, ctr, parity;
    };
    /* P of unit u (the core's unit ctr, whose softmax the vectors have handed over) into L1, then L0A. */
    static AICORE inline PvStep PvBegin(CubeState<T> &st, const Task &tk, uint32_t u, uint32_t ctr)
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
        LoadNd(pMat, st.p, ScratchP(st.t, st.core, ctr % kStages) + uint64_t(run.row0) * st.t.handoff, m, len,
               st.t.handoff, kTrafficScratch);
        Handoff(kPLoaded);
        WaitFlag(kPLeftFree);
        Extract(pLeft, pWhole, 0, 0);
        SetFlag(kPL1Free);
        return PvStep{m, run.row0, u, ctr, st.pvParity};
    }
    /* Slice sl: its V columns to L0B, the matmul, FIX's store (the task's first unit) or atomic add into GM. */
    static AICORE inline void PvSlice(CubeState<T> &st, const PvStep &p, uint32_t sl)
    {
        const uint32_t b = st.l0Toggle++ & 1u, tile = TileOf(p.ctr), ob = sl & 1u;
        PLeft pLeft(p.m, kMlaTok);
        VSlice vSlice(kMlaTok, kMlaVCols);
        VRight vRight(kMlaTok, kMlaVCols);
        OAcc acc(p.m, kMlaVCols);
        Assign(pLeft, kL0aP);
        Assign(vSlice, KvTile(tile) + sl * (kMlaVCols / 16) * kKBlockBytes);
        Assign(vRight, b * kL0bBytes);
        Assign(acc, kL0cO + ob * kL0cOBytes);
        WaitFlag(L0Free(b));
        Mov(vRight, vSlice);
        if (kHalves && sl + 1 == kHalfSlices) SetFlag(KvL1FreeLo(tile)); /* the first half is done with */
        if (sl + 1 == kSlices) SetFlag(KvL1Free(tile)); /* the unit's latent is no longer needed */
        Handoff(L0Ready(b));
        WaitFlag(OAccFree(ob));
        Matmul(acc, pLeft, vRight);
        Count(kCountMatmul);
        SetFlag(L0Free(b));
        if (sl + 1 == kSlices) SetFlag(kPLeftFree);
        Handoff(OAccReady(ob));
        StoreAcc(st.otmp, MlaAcc(st.core, p.parity) + uint64_t(p.row0) * kMlaD + sl * kMlaVCols, p.m, kMlaVCols,
                 kMlaD, kL0cO + ob * kL0cOBytes, p.u != 0);
        SetFlag(OAccFree(ob));
    }
    /* Unit u (the core's unit st.unitCounter - 1: the one before the Q.K^T just issued): P.V, all of it. */
    static AICORE inline void Pv(CubeState<T> &st, const Task &tk, uint32_t u, uint32_t /* stage */)
    {
        const PvStep p = PvBegin(st, tk, u, st.unitCounter - 1);
        for (uint32_t sl = 0; sl < kSlices; ++sl) PvSlice(st, p, sl);
    }
};

/* The two MLA paths: three latent tiles (the next unit prefetched) while Q and P of a task's rows leave L1 room for
 * them, two tiles for larger tasks (128 heads: Q alone is 144 KiB). */
template <typename T>
using MlaPrefetchPath = MlaPath<T, kMlaPrefetchRows, 3>;
template <typename T>
using MlaWidePath = MlaPath<T, kMlaRows, 2>;

}  // namespace pa

#endif /* PA_CUBE_MLA_HPP */
