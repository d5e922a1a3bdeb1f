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
     * the emulator faults), so the columns past the valid ones hold zeros, never stale or hostile data: a piece
     * shorter than Tok zeroes its K^T buffer before the load, a head dim below DCap the V buffer (both on MTE2,
     * in order with the load, as ZeroL1 does for ragged tails).  pto-isa's TMATMUL passes m = 16 for m = 1
     * (avoiding the GEMV form), so a left operand of one row has rows 1-15 multiplied too: its Q or P L1 tile
     * is zeroed before the load (with groups of one q head, once at core start: ChunkPath::ZeroRowsPastOne).
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

template <typename T>
struct CubeState {
    const Tiling &t;
    uint32_t core;
    Gm<T> q, k, v, p;
    Gm<int32_t> bt;
    Gm<float> s, otmp;
    uint32_t unitCounter = 0; /* global hand-off counter: stage = counter % kStages, same on the vectors */
    uint32_t l1Toggle = 0;    /* alternates the two K/V L1 buffers (per piece)                            */
    uint32_t l0Toggle = 0;    /* alternates the two L0 operand / S accumulator buffers (per matmul)       */

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

    /* The task rows [r0, r0 + m) whose q heads use KV head kvh (kvh within the task's KV heads). */
    AICORE inline void RunRows(const Task &tk, uint32_t kvh, uint32_t &r0, uint32_t &m) const
    {
        uint32_t first = kvh * t.group, end = first + t.group;
        if (first < tk.headStart) first = tk.headStart;
        if (end > tk.headStart + tk.headCount) end = tk.headStart + tk.headCount;
        r0 = first - tk.headStart;
        m = end - first;
    }

    /* The task's KV heads: [first, last]. */
    AICORE inline uint32_t FirstKvHead(const Task &tk) const { return tk.headStart / t.group; }
    AICORE inline uint32_t LastKvHead(const Task &tk) const { return (tk.headStart + tk.headCount - 1) / t.group; }
};

}  // namespace pa

#endif /* PA_CUBE_STATE_HPP */
