/*
 * Cube data path for KV groups of at most 16 q heads (GQA and MHA): long K/V bursts.
 *
 * A task's KV heads are taken in chunks of up to ChunkSlots(DCap) consecutive heads.  Per page piece (at most
 * ChunkTokens(DCap) tokens, never crossing a page) one load brings the chunk's K (or V) rows of every head at
 * once: a token's rows of consecutive KV heads are contiguous in GM, so the load is one burst of
 * nkv * D * 2 bytes per token, and one run over the whole piece when the task holds every KV head (the default
 * plan at h32/kv8: 64 tokens x 2 KiB = 128 KiB), where the head path moves 256-byte rows at a 2 KiB pitch.
 * The block-table entry of a piece is read once per chunk, not once per KV head.
 *
 * Each KV head of the chunk then is a view into that L1 tile at a fractal-aligned offset, with no TEXTRACT:
 * K^T is a ZN tile (16-row blocks contiguous), so head j's rows [j*D, (j+1)*D) start at j*D*ChunkTokens
 * elements; V is an NZ tile (16-column blocks contiguous), so head j's columns start at the same offset.  Every
 * head's q rows sit in their own 16-row L0A slot for the whole chunk, P in its own L1 slot, and the P.V of every
 * head accumulates in its own L0C slot across the pieces.  The L1 buffers toggle per piece (KvLoaded/KvL1Free),
 * the L0 operands and S accumulators per matmul (L0Ready/L0Free, SAccReady/SAccFree).
 */
#ifndef PA_CUBE_CHUNK_HPP
#define PA_CUBE_CHUNK_HPP

#include "pa_cube_state.hpp"

namespace pa {

/* Rows of one head slot: one fractal.  Groups of more q heads per KV head take the head path. */
constexpr int kSlotRows = 16;
/* KV heads per chunk: bounded by L0A (q slots) and L0C (P.V slots) at D 256, by L1 (P slots) below. */
constexpr int ChunkSlots(int dcap) { return dcap > kDCapMedium ? 4 : 8; }
/* Elements of one K/V L1 buffer: 128 KiB of fp16/bf16; two of them, alternating, plus the slots fit L1. */
constexpr int kChunkTileElems = 64 * 1024;
/* Tokens per piece: the buffer holds ChunkSlots heads of DCap rows (D 64: 128, D 128: 64, D 256: 64). */
constexpr int ChunkTokens(int dcap) { return kChunkTileElems / (ChunkSlots(dcap) * dcap); }

template <typename T, int DCap>
struct ChunkPath {
    static constexpr int kSlots = ChunkSlots(DCap);
    static constexpr int kTok = ChunkTokens(DCap);
    /* The chunk's K^T (ZN) and V (NZ) in L1, and one head's tiles (CubeTiles): a head's K/V tile is a view
     * of the chunk tile with the same static token count. */
    using KAll = Tile<TileType::Mat, T, kSlots * DCap, kTok, BLayout::RowMajor, DYNAMIC, DYNAMIC, SLayout::ColMajor, kFractalBytes>;
    using VAll = Tile<TileType::Mat, T, kTok, kSlots * DCap, BLayout::ColMajor, DYNAMIC, DYNAMIC, SLayout::RowMajor, kFractalBytes>;
    using Tiles = CubeTiles<T, DCap, kSlotRows, kTok>;
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

    /* On-chip layout (bytes).  L1: q staging | P slots | two K/V buffers.  L0A: q slots | two P operands.
     * L0B: two operands.  L0C: two S accumulators | P.V slots. */
    static constexpr uint32_t kL1Q = 0;
    static constexpr uint32_t kL1P = AlignUp(QMat::Numel * sizeof(T), kOnChipAlign);
    static constexpr uint32_t kL1PBytes = AlignUp(PMat::Numel * sizeof(T), kOnChipAlign);
    static constexpr uint32_t kL1Kv0 = kL1P + kSlots * kL1PBytes;
    static constexpr uint32_t kL1KvBytes = AlignUp(KAll::Numel * sizeof(T), kOnChipAlign);
    static constexpr uint32_t kL0aQBytes = AlignUp(QLeft::Numel * sizeof(T), kOnChipAlign);
    static constexpr uint32_t kL0aP = kSlots * kL0aQBytes;
    static constexpr uint32_t kL0aPBytes = AlignUp(PLeft::Numel * sizeof(T), kOnChipAlign);
    static constexpr uint32_t kL0bOpBytes = AlignUp(KRight::Numel * sizeof(T), kOnChipAlign);
    static constexpr uint32_t kL0cSBytes = AlignUp(SAcc::Numel * sizeof(float), kOnChipAlign);
    static constexpr uint32_t kL0cO = 2 * kL0cSBytes;
    static constexpr uint32_t kL0cOBytes = AlignUp(OAcc::Numel * sizeof(float), kOnChipAlign);
    static_assert(KAll::Numel == VAll::Numel && KAll::Numel <= kChunkTileElems, "K and V share the L1 buffers");
    static_assert(KRight::Numel == VRight::Numel, "K and V share the L0B buffers");
    static_assert(kL1Kv0 + 2 * kL1KvBytes <= kL1Bytes, "L1 plan overflows");
    static_assert(kL0aP + 2 * kL0aPBytes <= kL0aBytes, "L0A plan overflows");
    static_assert(2 * kL0bOpBytes <= pa::kL0bBytes, "L0B plan overflows");
    static_assert(kL0cO + kSlots * kL0cOBytes <= kL0cBytes, "L0C plan overflows");
    static_assert(kTok % 16 == 0 && kPieceTokens % 16 == 0, "pieces and units start on whole fractals");
    static_assert(kSlots <= kMaxPSlots && PMat::Rows == kSlotRows, "CubeState keeps a box per P slot");

    using Piece = typename CubeState<T>::Piece;

    /* Byte offset of KV head j's rows (K^T) or columns (V) inside a K/V buffer: j*D rows of a ZN tile with
     * kTok static columns, or j*D columns of an NZ tile with kTok static rows (D is a multiple of 16). */
    static AICORE inline uint32_t HeadView(uint32_t bl, uint32_t j, uint32_t d)
    {
        return kL1Kv0 + bl * kL1KvBytes + j * d * uint32_t(kTok) * uint32_t(sizeof(T));
    }

    /* Calls fn(kvh0, nkv) for each chunk of the task's KV heads. */
    template <typename Fn>
    static AICORE inline void ForEachChunk(const CubeState<T> &st, const Task &tk, Fn &&fn)
    {
        const uint32_t last = st.LastKvHead(tk);
        for (uint32_t kvh0 = st.FirstKvHead(tk); kvh0 <= last; kvh0 += kSlots) {
            const uint32_t nkv = last - kvh0 + 1 < uint32_t(kSlots) ? last - kvh0 + 1 : uint32_t(kSlots);
            fn(kvh0, nkv);
        }
    }

    /* Unit u: S = Q.K^T of every head of every chunk into GM scratch stage `stage`. */
    static AICORE inline void Qk(CubeState<T> &st, const Task &tk, uint32_t u, uint32_t stage)
    {
        const uint32_t d = st.t.headDim;
        ForEachChunk(st, tk, [&](uint32_t kvh0, uint32_t nkv) {
            WaitFlag(kQLeftFree); /* the previous chunk's last Q.K^T read the q slots */
            for (uint32_t j = 0; j < nkv; ++j) {
                const TaskRun run = RunOf(st.t, tk, kvh0 + j);
                const uint32_t m = run.rows;
                QMat qMat(m, d);
                QLeft qLeft(m, d);
                Assign(qMat, kL1Q);
                Assign(qLeft, j * kL0aQBytes);
                WaitFlag(kQL1Free);
                st.template ZeroBuffer<QMat>(kL1Q, st.BeforeQLoad(m, d)); /* rows 1-15 of m = 1: CubeTiles */
                st.template LoadQRows<QMat>(tk, run, 0, m, kL1Q);
                Handoff(kQLoaded);
                Mov(qLeft, qMat);
                SetFlag(kQL1Free);
            }
            /* No Q -> M flag: every L0Ready(b) below is set on MTE1 after these moves. */
            st.ForEachPiece(tk, u, 0, UnitTokens(st.t, tk, u), kTok, [&](const Piece &pc) {
                const uint32_t bl = st.l1Toggle++ & 1u;
                KAll kAll(nkv * d, pc.len);
                Assign(kAll, kL1Kv0 + bl * kL1KvBytes);
                WaitFlag(KvL1Free(bl));
                /* K^T's columns past len are multiplied (CubeTiles): zero unless they already are */
                st.template ZeroBuffer<KAll>(kL1Kv0 + bl * kL1KvBytes,
                                             st.BeforeKLoad(bl, nkv * d / 16, pc.len, kTok));
                LoadDn(kAll, st.k, pc.kvOff + uint64_t(kvh0) * d, nkv * d, pc.len, uint64_t(st.t.kvHeads) * d,
                       kTrafficKv);
                Handoff(KvLoaded(bl));
                for (uint32_t j = 0; j < nkv; ++j) {
                    const TaskRun run = RunOf(st.t, tk, kvh0 + j);
                    const uint32_t r0 = run.row0, m = run.rows;
                    const uint32_t b = st.l0Toggle++ & 1u;
                    auto op = Tiles::Qk(m, d, pc.len); /* whole static widths: CubeTiles::QkOperands */
                    QLeft qLeft(m, d);
                    Assign(op.kMat, HeadView(bl, j, d));
                    Assign(op.kRight, b * kL0bOpBytes);
                    Assign(qLeft, j * kL0aQBytes);
                    Assign(op.acc, b * kL0cSBytes);
                    Assign(op.s, b * kL0cSBytes);
                    WaitFlag(L0Free(b));
                    Mov(op.kRight, op.kMat);
                    if (j + 1 == nkv) SetFlag(KvL1Free(bl));
                    Handoff(L0Ready(b));
                    WaitFlag(SAccFree(b));
                    Matmul(op.acc, qLeft, op.kRight);
                    Count(kCountMatmul);
                    SetFlag(L0Free(b));
                    Handoff(SAccReady(b));
                    StoreNd(st.s, ScratchS(st.t, st.core, stage) + uint64_t(r0) * st.t.handoff + pc.col, m, pc.len,
                            st.t.handoff, op.s, kTrafficScratch);
                    SetFlag(SAccFree(b));
                }
            });
            SetFlag(kQLeftFree);
        });
    }

    /* Unit u: O_tmp = P.V of every head, accumulated over the unit's pieces in the heads' L0C slots.  P comes
     * into the heads' L1 slots in windows of kPieceTokens columns (a hand-off may be longer).  The device
     * multiplies the inner (token) length rounded up to 16, so a ragged window zeroes the P slots and a
     * ragged piece's V padding must be zero: padding times padding must be 0, not stale data (NaN x 0 = NaN).
     * The P slots are zeroed for m = 1 too (TMATMUL multiplies 16 rows), and V's columns past D of the last
     * head are multiplied: CubeTiles, L1Box. */
    static AICORE inline void Pv(CubeState<T> &st, const Task &tk, uint32_t u, uint32_t stage)
    {
        const uint32_t d = st.t.headDim;
        const uint32_t unitLen = UnitTokens(st.t, tk, u);
        ForEachChunk(st, tk, [&](uint32_t kvh0, uint32_t nkv) {
            bool first = true;
            for (uint32_t w0 = 0; w0 < unitLen; w0 += kPieceTokens) {
                const uint32_t wl = PieceTokens(unitLen, w0);
                WaitFlag(kPL1Free);
                for (uint32_t j = 0; j < nkv; ++j) {
                    const TaskRun run = RunOf(st.t, tk, kvh0 + j);
                    const uint32_t r0 = run.row0, m = run.rows;
                    st.template ZeroBuffer<PMat>(kL1P + j * kL1PBytes, st.BeforePLoad(j, m, wl)); /* MTE2 */
                    PMat pMat(m, wl);
                    Assign(pMat, kL1P + j * kL1PBytes);
                    LoadNd(pMat, st.p, ScratchP(st.t, st.core, stage) + uint64_t(r0) * st.t.handoff + w0, m, wl,
                           st.t.handoff, kTrafficScratch);
                }
                /* No P -> MTE1 flag: every piece's KvLoaded(bl) is set on MTE2 after these loads. */
                if (first) WaitFlag(kOAccFree);
                st.ForEachPiece(tk, u, w0, w0 + wl, kTok, [&](const Piece &pc) {
                    const uint32_t bl = st.l1Toggle++ & 1u;
                    VAll vAll(pc.len, nkv * d);
                    Assign(vAll, kL1Kv0 + bl * kL1KvBytes);
                    WaitFlag(KvL1Free(bl));
                    /* the padding past len, the last head's columns past d (CubeTiles): zero unless they are */
                    st.template ZeroBuffer<VAll>(kL1Kv0 + bl * kL1KvBytes,
                                                 st.BeforeVLoad(bl, nkv, d, DCap, pc.len));
                    LoadNd(vAll, st.v, pc.kvOff + uint64_t(kvh0) * d, pc.len, nkv * d, uint64_t(st.t.kvHeads) * d,
                           kTrafficKv);
                    Handoff(KvLoaded(bl));
                    for (uint32_t j = 0; j < nkv; ++j) {
                        const TaskRun run = RunOf(st.t, tk, kvh0 + j);
                        const uint32_t r0 = run.row0, m = run.rows;
                        const uint32_t b = st.l0Toggle++ & 1u;
                        auto op = Tiles::Pv(m, d, pc.len); /* whole static widths: CubeTiles::PvOperands */
                        PMat pMat(m, wl);
                        PLeft pLeft(m, pc.len);
                        Assign(op.vMat, HeadView(bl, j, d));
                        Assign(op.vRight, b * kL0bOpBytes);
                        Assign(pMat, kL1P + j * kL1PBytes);
                        Assign(pLeft, kL0aP + b * kL0aPBytes);
                        Assign(op.acc, kL0cO + j * kL0cOBytes);
                        WaitFlag(L0Free(b));
                        Extract(pLeft, pMat, 0, pc.col - w0);
                        Mov(op.vRight, op.vMat);
                        if (j + 1 == nkv) SetFlag(KvL1Free(bl));
                        Handoff(L0Ready(b));
                        if (first) {
                            Matmul(op.acc, pLeft, op.vRight);
                        } else {
                            MatmulAcc(op.acc, pLeft, op.vRight);
                        }
                        Count(kCountMatmul);
                        SetFlag(L0Free(b));
                    }
                    first = false;
                });
                SetFlag(kPL1Free);
            }
            Handoff(kOAccReady);
            for (uint32_t j = 0; j < nkv; ++j) {
                const TaskRun run = RunOf(st.t, tk, kvh0 + j);
                const uint32_t r0 = run.row0, m = run.rows;
                auto op = Tiles::Pv(m, d, 0);
                Assign(op.o, kL0cO + j * kL0cOBytes);
                StoreNd(st.otmp, ScratchO(st.core, stage) + uint64_t(r0) * d, m, d, d, op.o, kTrafficScratch);
            }
            SetFlag(kOAccFree);
        });
    }
};

}  // namespace pa

#endif /* PA_CUBE_CHUNK_HPP */
