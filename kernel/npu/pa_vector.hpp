/*
 * Vector side (AIV, two sub-cores per cluster): online softmax over hand-off units and the output.
 *
 * Sub-core i owns rows [i*floor(n/2), ...) of a task's n heads.  Per unit u (stage = global unit % 2):
 *   softmax(u): S rows from GM s -> * scale -> row max -> running max m, dm = exp(m_old - m_new)
 *               P = exp(S - m) rounded to the input dtype -> GM p; l_u = row sum of the rounded P
 *   update(u):  O_tmp rows from GM o_tmp -> O = dm * O + O_tmp, l = dm * l + l_u
 * in the order softmax(0), softmax(1), update(0), softmax(2), update(1), ... (the mirror of the cube's
 * preload pipeline), so dm and l_u are kept per stage.  After the last unit O /= l and either the output
 * row (cast once) or, for split-KV, the normalised fp32 partial and lse = ln(l) + m are written.
 */
#ifndef PA_VECTOR_HPP
#define PA_VECTOR_HPP

#include "pa_combine.hpp"

namespace pa {

template <typename T, int DCap>
struct VectorCore {
    using SF = Tile<TileType::Vec, float, kVecRows, kHandoffTokens, BLayout::RowMajor, DYNAMIC, DYNAMIC>;
    using PT = Tile<TileType::Vec, T, kVecRows, kHandoffTokens, BLayout::RowMajor, DYNAMIC, DYNAMIC>;
    using OF = Tile<TileType::Vec, float, kVecRows, DCap, BLayout::RowMajor, DYNAMIC, DYNAMIC>;
    using OT = Tile<TileType::Vec, T, kVecRows, DCap, BLayout::RowMajor, DYNAMIC, DYNAMIC>;
    using Col = Tile<TileType::Vec, float, kVecRows, 1, BLayout::ColMajor, DYNAMIC, 1>;
    /* The same per-row vector seen as one row: tile-scalar instructions take row-major operands only. */
    using Row = Tile<TileType::Vec, float, 1, kVecRows, BLayout::RowMajor, 1, DYNAMIC>;

    /* UB layout (bytes): S | P fp32 | P in dtype | O_tmp | O | O cast | per-row vectors. */
    static constexpr uint32_t kUbS = 0;
    static constexpr uint32_t kUbPf = kUbS + SF::Numel * sizeof(float);
    static constexpr uint32_t kUbPt = kUbPf + SF::Numel * sizeof(float);
    static constexpr uint32_t kUbOtmp = AlignUp(kUbPt + PT::Numel * sizeof(T), kOnChipAlign);
    static constexpr uint32_t kUbOacc = kUbOtmp + OF::Numel * sizeof(float);
    static constexpr uint32_t kUbOout = kUbOacc + OF::Numel * sizeof(float);
    static constexpr uint32_t kUbCols = AlignUp(kUbOout + OT::Numel * sizeof(T), kOnChipAlign);
    static constexpr uint32_t kColBytes = AlignUp(Col::Numel * sizeof(float), kRowVecAlign);
    enum ColSlot : uint32_t { kColM, kColL, kColLm, kColHm, kColLse, kColDm0, kColLl0 = kColDm0 + kStages, kColEnd = kColLl0 + kStages };
    static_assert(kUbCols + kColEnd * kColBytes <= kUbBytes, "UB plan overflows");

    const Tiling &t;
    uint32_t core, sub;
    Gm<T> p, o;
    Gm<float> s, otmp, ocore, l;
    uint32_t unitCounter = 0;

    AICORE inline Col ColAt(ColSlot slot, uint32_t rows)
    {
        Col c(rows);
        Assign(c, kUbCols + slot * kColBytes);
        return c;
    }

    AICORE inline Row RowAt(ColSlot slot, uint32_t rows)
    {
        Row c(rows);
        Assign(c, kUbCols + slot * kColBytes);
        return c;
    }

    AICORE inline void Softmax(const Task &tk, uint32_t u, uint32_t stage, uint32_t row0, uint32_t r)
    {
        WaitFromCube(kFlagQkReady[stage]);
        if (r != 0) {
            const uint32_t len = UnitTokens(tk, u);
            SF sT(r, len), pF(r, len);
            PT pT(r, len);
            Assign(sT, kUbS);
            Assign(pF, kUbPf);
            Assign(pT, kUbPt);
            Col gm = ColAt(kColM, r), lm = ColAt(kColLm, r), hm = ColAt(kColHm, r);
            Col dm = ColAt(ColSlot(kColDm0 + stage), r), ll = ColAt(ColSlot(kColLl0 + stage), r);
            LoadNd(sT, s, ScratchS(core, stage) + uint64_t(row0) * kScorePitch, r, len, kScorePitch,
                   kTrafficScratch);
            TMULS(sT, sT, t.scale);
            TROWMAX(lm, sT, pF);
            Row gmRow = RowAt(kColM, r);
            if (u == 0) {
                Row lmRow = RowAt(kColLm, r);
                TADDS(gmRow, lmRow, 0.0f);
            } else {
                Row hmRow = RowAt(kColHm, r);
                TMAX(hm, gm, lm);
                TSUB(dm, gm, hm);
                TEXP(dm, dm);
                TADDS(gmRow, hmRow, 0.0f);
            }
            TROWEXPANDSUB(pF, sT, gm);
            TEXP(pF, pF);
            TCVT(pT, pF, RoundMode::CAST_RINT);
            StoreNd(p, ScratchP(core, stage) + uint64_t(row0) * kScorePitch, r, len, kScorePitch, pT,
                    kTrafficScratch);
            TCVT(pF, pT, RoundMode::CAST_NONE); /* l sums exactly the P the cube multiplies */
            TROWSUM(ll, pF, sT);
        }
        SignalCube(kFlagSoftmaxReady[stage]);
    }

    AICORE inline void Update(uint32_t u, uint32_t stage, uint32_t row0, uint32_t r)
    {
        WaitFromCube(kFlagUpdateReady[stage]);
        if (r == 0) return;
        const uint32_t d = t.headDim;
        OF oT(r, d), oA(r, d);
        Assign(oT, kUbOtmp);
        Assign(oA, kUbOacc);
        Col gl = ColAt(kColL, r), dm = ColAt(ColSlot(kColDm0 + stage), r), ll = ColAt(ColSlot(kColLl0 + stage), r);
        LoadNd(oT, otmp, ScratchO(core, stage) + uint64_t(row0) * d, r, d, d, kTrafficScratch);
        if (u == 0) {
            Row glRow = RowAt(kColL, r), llRow = RowAt(ColSlot(kColLl0 + stage), r);
            TADDS(oA, oT, 0.0f);
            TADDS(glRow, llRow, 0.0f);
        } else {
            TROWEXPANDMUL(oA, oA, dm);
            TADD(oA, oA, oT);
            TMUL(gl, gl, dm);
            TADD(gl, gl, ll);
        }
    }

    AICORE inline void Finish(const Task &tk, uint32_t row0, uint32_t r)
    {
        if (r == 0) return;
        const uint32_t d = t.headDim;
        const uint32_t head = tk.headStart + row0;
        OF oA(r, d);
        Assign(oA, kUbOacc);
        Col gl = ColAt(kColL, r), gm = ColAt(kColM, r), lse = ColAt(kColLse, r);
        TROWEXPANDDIV(oA, oA, gl);
        if (!t.SplitKv()) {
            OT oO(r, d);
            Assign(oO, kUbOout);
            TCVT(oO, oA, RoundMode::CAST_RINT);
            StoreNd(o, tk.addrO + uint64_t(head) * d, r, d, d, oO, kTrafficOther);
            return;
        }
        const uint64_t kvcn = t.kvCoreNum;
        StoreNd(ocore, tk.addrOfd * kvcn + uint64_t(head) * kvcn * d + uint64_t(tk.split) * d, r, d, kvcn * d, oA,
                kTrafficPartial);
        TLOG(lse, gl);
        TADD(lse, lse, gm);
        StoreNd(l, tk.addrL + uint64_t(head) * kvcn + tk.split, r, 1, kvcn, lse, kTrafficPartial);
    }

    /* Our ABI extension: an empty sequence's rows are zero. */
    AICORE inline void WriteZeros(const Task &tk, uint32_t row0, uint32_t r)
    {
        const uint32_t d = t.headDim;
        OT oO(r, d);
        Assign(oO, kUbOout);
        TEXPANDS(oO, T(0.0f));
        StoreNd(o, tk.addrO + uint64_t(tk.headStart + row0) * d, r, d, d, oO, kTrafficOther);
    }

    AICORE inline void Run(uint32_t blockNum)
    {
        ForEachTask(t, core, blockNum, [&](const Task &tk) {
            const uint32_t half = tk.headCount / kVecSubCores;
            const uint32_t row0 = sub == 0 ? 0 : half;
            const uint32_t r = sub == 0 ? half : tk.headCount - half;
            if (tk.empty) {
                if (r != 0) WriteZeros(tk, row0, r);
                return;
            }
            const uint32_t units = UnitsOf(tk);
            const uint32_t base = unitCounter;
            for (uint32_t u = 0; u < units; ++u) {
                Softmax(tk, u, (base + u) % kStages, row0, r);
                if (u >= 1) Update(u - 1, (base + u - 1) % kStages, row0, r);
            }
            Update(units - 1, (base + units - 1) % kStages, row0, r);
            Finish(tk, row0, r);
            unitCounter = base + units;
        });
        if (t.SplitKv()) {
            VectorBarrier();
            CombineCore<T, DCap> combine{t, core, sub, o, ocore, l};
            combine.Run(blockNum);
        }
    }
};

}  // namespace pa

#endif /* PA_VECTOR_HPP */
