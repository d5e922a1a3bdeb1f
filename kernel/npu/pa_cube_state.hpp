/*
 * What both cube data paths share: the core's GM handles, the global hand-off counter, the buffer toggles,
 * and the two walks every unit makes: page-contiguous pieces of its tokens, and runs of task rows that share
 * one KV head.
 */
#ifndef PA_CUBE_STATE_HPP
#define PA_CUBE_STATE_HPP

#include "pa_tiling.hpp"

namespace pa {

/* The tiles of a cube data path: `Rows` q heads per matmul, `Tok` tokens per K/V operand, head dim up to
 * DCap, and P windows of kPieceTokens columns.  In L1, K^T is ZN (16-row blocks contiguous), V and P are NZ
 * (16-column blocks contiguous), Q is NZ; P is Tok columns wider than a window because A2/A3's TEXTRACT wants
 * the whole static sub-tile inside the source at its column offset (pto-isa a2a3 TExtract's assert), and the
 * last sub-tile of a window starts up to kPieceTokens - 16 columns in. */
template <typename T, int DCap, int Rows, int Tok>
struct CubeTiles {
    using QMat = Tile<TileType::Mat, T, Rows, DCap, BLayout::ColMajor, DYNAMIC, DYNAMIC, SLayout::RowMajor, kFractalBytes>;
    using PMat = Tile<TileType::Mat, T, Rows, kPieceTokens + Tok, BLayout::ColMajor, DYNAMIC, DYNAMIC,
                      SLayout::RowMajor, kFractalBytes>;
    using KMat = Tile<TileType::Mat, T, DCap, Tok, BLayout::RowMajor, DYNAMIC, DYNAMIC, SLayout::ColMajor, kFractalBytes>;
    using VMat = Tile<TileType::Mat, T, Tok, DCap, BLayout::ColMajor, DYNAMIC, DYNAMIC, SLayout::RowMajor, kFractalBytes>;
    using QLeft = TileLeft<T, Rows, DCap, DYNAMIC, DYNAMIC>;
    using PLeft = TileLeft<T, Rows, Tok, DYNAMIC, DYNAMIC>;
    using KRight = TileRight<T, DCap, Tok, DYNAMIC, DYNAMIC>;
    using VRight = TileRight<T, Tok, DCap, DYNAMIC, DYNAMIC>;
    using SAcc = TileAcc<float, Rows, Tok, DYNAMIC, DYNAMIC>;
    using OAcc = TileAcc<float, Rows, DCap, DYNAMIC, DYNAMIC>;

    /* The cube moves and multiplies whole static widths.  On A2/A3 TMOV lays a right operand out in L0B for its
     * static columns while TMATMUL hands mad the valid n, and mad steps over ceil(n / 16) fractals per 16-row
     * block of B: a right operand narrower than its tile multiplies the wrong elements (kernel/npu/emu/
     * SEMANTICS.md, defect 2; the CPU implementation does not show it).  So the right operand and the
     * accumulator of every matmul are valid over all their static columns, and only the valid ones are stored.
     * mad reads every element it multiplies, and a NaN or inf among them may raise an AI Core error (Mmad.md;
     * the emulator faults), so the columns past the valid ones hold zeros, never stale or hostile data: a K/V
     * buffer is zeroed before a load whenever the piece's matmuls could read bytes of it that the load does not
     * overwrite and that may be non-zero (L1Box; on MTE2, in order with the load, as ZeroL1 does for ragged
     * tails).  pto-isa's TMATMUL passes m = 16 for m = 1 (avoiding the GEMV form), so a left operand of one
     * row has rows 1-15 multiplied too, which the same rule keeps zero in its Q or P L1 tile (RowsMultiplied).
     * The inner length stays the valid one (k: the padding rules of ZeroL1). */
    struct QkOperands {
        KMat kMat;     /* K^T of the piece in L1, moved whole (d x Tok) */
        KRight kRight; /* d x Tok */
        SAcc acc;      /* m x Tok: what the matmul writes */
        SAcc s;        /* m x len: the same L0C bytes, what is stored as S */
    };
    static AICORE inline QkOperands Qk(uint32_t m, uint32_t d, uint32_t len)
    {
        return {KMat(d, Tok), KRight(d, Tok), SAcc(m, Tok), SAcc(m, len)};
    }
    struct PvOperands {
        VMat vMat;     /* V of the piece in L1, moved whole (len x DCap) */
        VRight vRight; /* len x DCap */
        OAcc acc;      /* m x DCap: what the matmuls accumulate */
        OAcc o;        /* m x d: the same L0C bytes, what is stored as O_tmp */
    };
    static AICORE inline PvOperands Pv(uint32_t m, uint32_t d, uint32_t len)
    {
        return {VMat(len, DCap), VRight(len, DCap), OAcc(m, DCap), OAcc(m, d)};
    }
};

/* Rows of a left operand of m rows (in blocks of 16) that the cube multiplies: pto-isa's A2/A3 TMATMUL passes
 * m = 16 for a block of one row (avoiding mad's GEMV form), so such a block's rows 1-15 are read too. */
AICORE inline uint32_t RowsMultiplied(uint32_t m) { return m % 16 == 1 ? m + 15 : m; }

/* What of one L1 operand buffer may hold non-zero data: the box rows [0, rows) x columns [0, cols) in the
 * buffer's own terms (CubeState says which), since every load writes such a box from the origin.  BeforeLoad
 * is the one rule of when a load must zero the buffer first (CubeTiles: every element a matmul reads is zero
 * or loaded): the load writes rows [0, wr) x columns [0, wc), the matmuls after it read rows [0, rr) x columns
 * [0, rc).  Read but not written are A = rows [wr, rr) x columns [0, rc) (V's columns past D, a one-row
 * block's rows 1-15) and B = rows [0, wr) x columns [wc, rc) (K^T's columns past the piece; the padding of
 * P.V's inner length in V or P); each must be zero wherever the old box reaches it, else the whole buffer is
 * zeroed and the box starts empty.  The box then grows by what the load wrote.  So a buffer is zeroed once per
 * core for pages shorter than the K tile, D below DCap or one-row operands, and once per ragged tail (the K
 * fill's zeros then cover V's padding).  The result names the reasons for the negative controls (ZeroFill):
 * B is padding when `bIsPadding`, the rest is operand. */
struct L1Box {
    uint32_t rows = ~0u, cols = ~0u;

    AICORE inline ZeroFill BeforeLoad(uint32_t wr, uint32_t wc, uint32_t rr, uint32_t rc, bool bIsPadding)
    {
        const uint32_t r = rows < rr ? rows : rr, c = cols < rc ? cols : rc;
        const bool a = r > wr && c > 0;
        const bool b = (r < wr ? r : wr) > 0 && c > wc;
        const ZeroFill why = FillKind(b && bIsPadding, a || (b && !bIsPadding));
        if (why != 0) rows = cols = 0;
        if (wr > rows) rows = wr;
        if (wc > cols) cols = wc;
        return why;
    }
};

/* P slots of the chunk path (ChunkSlots at most); the head path uses one. */
constexpr int kMaxPSlots = 8;

template <typename T>
struct CubeState {
    const Tiling &t;
    uint32_t core;
    Gm<T> q, k, v, p;
    Gm<int32_t> bt;
    Gm<T> qRope, kRope; /* MLA's rope parts (PA_ARG_Q_ROPE, PA_ARG_K_ROPE); NULL otherwise */
    Gm<float> s, otmp;
    uint32_t unitCounter = 0; /* global hand-off counter: stage = counter % kStages, same on the vectors */
    uint32_t taskCounter = 0; /* the core's tasks with work so far: a task's parity, same on the vectors        */
    uint32_t pvParity = 0;    /* MLA: the parity of the task whose P.V is issued next (its output accumulator) */
    uint32_t l1Toggle = 0;    /* alternates the two K/V L1 buffers (per piece)                            */
    uint32_t l0Toggle = 0;    /* alternates the two L0 operand / S accumulator buffers (per matmul)       */

    /* Which L1 operand bytes may hold non-zero data, per buffer, kept across the core's tasks so that a load
     * zeroes its buffer only when a matmul could read stale or hostile bytes (L1Box).  The K/V buffers in
     * group x token terms: both paths lay K^T out ZN and V NZ over the same static token count, a group being
     * 16 rows of K^T or 16 columns of V with one fractal per 16 tokens, and a token's 16 elements in a group
     * one 32-byte line of its fractal in both layouts, so a K load and a V load of g groups and len tokens
     * write exactly the same bytes (tokens [0, len) of groups [0, g)).  Q and the P slots in row x column
     * terms.  Each starts as everything (power-on data or another kernel's; hostile in the emulator). */
    L1Box kvBox[3]; /* two on the GQA paths, up to three latent tiles on MLA's (the first halves on its two-tile path) */
    L1Box kvHiBox[2]; /* MLA's two-tile path: the second halves of its latent tiles */
    L1Box ropeBox[2];
    L1Box qBox;
    L1Box pBox[kMaxPSlots];

    /* Before K^T of `groups` 16-row groups (the chunk's KV heads x D / 16) and len tokens goes into K/V buffer
     * bl: Q.K^T reads every one of the tile's `tok` static columns of those groups (the columns past len are
     * multiplied, never stored). */
    AICORE inline ZeroFill BeforeKLoad(uint32_t bl, uint32_t groups, uint32_t len, uint32_t tok)
    {
        return kvBox[bl].BeforeLoad(groups, len, groups, tok, false);
    }
    /* Before V of nkv KV heads of d columns and len tokens goes into K/V buffer bl: the last head's P.V reads
     * its view's DCap columns from column (nkv - 1) * d, and len rounded up to 16 rows (the inner length's
     * padding, which the device multiplies). */
    AICORE inline ZeroFill BeforeVLoad(uint32_t bl, uint32_t nkv, uint32_t d, uint32_t dcap, uint32_t len)
    {
        return kvBox[bl].BeforeLoad(nkv * d / 16, len, ((nkv - 1) * d + dcap) / 16, AlignUp(len, 16), true);
    }
    /* Before m rows of Q (d columns) go into the Q staging tile: its row blocks are multiplied (RowsMultiplied). */
    AICORE inline ZeroFill BeforeQLoad(uint32_t m, uint32_t d)
    {
        return qBox.BeforeLoad(m, d, RowsMultiplied(m), d, false);
    }
    /* Before an m x wl window of P goes into P slot j: its row blocks are multiplied, over wl rounded up to 16
     * columns (P.V's inner length with its padding). */
    AICORE inline ZeroFill BeforePLoad(uint32_t j, uint32_t m, uint32_t wl)
    {
        return pBox[j].BeforeLoad(m, wl, RowsMultiplied(m), AlignUp(wl, 16), true);
    }
    /* The fill itself: the whole buffer (tile type Whole at l1Addr) when `why` says so (MTE2, in order with
     * the load after it). */
    template <typename Whole>
    static AICORE inline void ZeroBuffer(uint32_t l1Addr, ZeroFill why)
    {
        if (why == 0) return;
        Whole whole(Whole::Rows, Whole::Cols);
        Assign(whole, l1Addr);
        ZeroL1(whole, why);
    }

    /* A page-contiguous run of tokens inside a unit: GM element offset of its first token for kv head 0. */
    struct Piece {
        uint64_t kvOff;
        uint32_t col, len;
    };

    /* Walks columns [c0, c1) of unit u of a task in pieces that never cross a page and hold at most
     * maxTokens tokens; one block-table read per piece.  pc.col counts from the unit's start. */
    template <typename Fn>
    AICORE inline void ForEachPiece(const Task &tk, uint32_t u, uint32_t c0, uint32_t c1, uint32_t maxTokens, Fn &&fn)
    {
        const uint32_t unitStart = tk.tokStart + u * t.handoff;
        const uint32_t unitLen = c1;
        const uint64_t rowElems = uint64_t(t.kvHeads) * t.headDim;
        for (uint32_t col = c0; col < unitLen;) {
            const uint32_t tok = unitStart + col;
            const uint32_t page = tok / t.blockSize, inPage = tok % t.blockSize;
            uint32_t len = t.blockSize - inPage;
            if (len > maxTokens) len = maxTokens;
            if (len > unitLen - col) len = unitLen - col;
            const uint64_t entry = uint64_t(tk.batchIdx) * t.maxBlocks + page;
            const int32_t id = ReadScalar(bt, entry);
            CheckBlockId(id, entry);
            fn(Piece{(uint64_t(id) * t.blockSize + inPage) * rowElems, col, len});
            col += len;
        }
    }

    /* Rows [s0, s0 + n) of a run's matmul rows (TaskRun: row i * 1 + token * heads is token `token` of head
     * head0 + i) from q into the L1 tile of type QMat at l1Q, row s0 at its row 0: one load per query token, each
     * the token's consecutive heads in GM.  In the NZ layout a view n rows down starts n fractal rows (32 bytes
     * each) in and keeps the tile's column-block stride.  `src` holds rows of `cols` elements whose slot starts at
     * element `slotBase`: q (t.headDim wide, tk.addrQ) or MLA's q_rope. */
    template <typename QMat>
    AICORE inline void LoadQRows(const Task &tk, const TaskRun &run, uint32_t s0, uint32_t n, uint32_t l1Q)
    {
        LoadRowsOf<QMat>(run, s0, n, l1Q, q, t.headDim, tk.addrQ);
    }
    template <typename QMat>
    AICORE inline void LoadRowsOf(const TaskRun &run, uint32_t s0, uint32_t n, uint32_t l1Q, Gm<T> src, uint32_t cols,
                                  uint64_t slotBase)
    {
        for (uint32_t r = s0; r < s0 + n;) {
            const uint32_t token = r / run.heads, i = r % run.heads;
            const uint32_t rows = run.heads - i < s0 + n - r ? run.heads - i : s0 + n - r;
            QMat view(rows, cols);
            Assign(view, l1Q + (r - s0) * kNzRowBytes);
            LoadNd(view, src, slotBase + (uint64_t(token) * t.numHeads + run.head0 + i) * cols, rows, cols, cols,
                   kTrafficOther);
            r += rows;
        }
    }

    /* The task's KV heads: [first, last]. */
    AICORE inline uint32_t FirstKvHead(const Task &tk) const { return tk.headStart / t.group; }
    AICORE inline uint32_t LastKvHead(const Task &tk) const { return (tk.headStart + tk.headCount - 1) / t.group; }
};

}  // namespace pa

#endif /* PA_CUBE_STATE_HPP */
