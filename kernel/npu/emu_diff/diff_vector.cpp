/*
 * Differential harness of the vector tile ops our kernel uses, in its tile shapes: compiled once against
 * pto-isa's A2/A3 implementations on the emulator (PA_EMU_DIFF_DEV) and once against pto-isa's CPU
 * implementations (PA_EMU_DIFF_CPU).  Each case loads global-memory inputs into UB tiles with TLOAD, runs the
 * op, and stores the result with TSTORE, so the two builds are compared on what reaches global memory.
 *
 *   int32_t pa_diff_vector(int32_t op, int32_t rows, int32_t cols, int32_t pitch, const void *a,
 *                          const void *b, void *out, float scalar)
 * a, b: [rows x pitch] fp32 (fp16/bf16 bits for the widening casts); out: as the op writes it.
 * Returns 0, or -1 with the message in pa_diff_last_error().
 */
#include <exception>
#include <string>

#include "diff_common.hpp"
#include "pa_vector.hpp"

using namespace pto;
using pa_diff::GmNd;
using pa_diff::Place;

namespace {

constexpr int kD = 128;
/* The kernel's own vector tiles (pa_vector.hpp, pa_combine.hpp) at D 128, so the harness runs its layouts. */
using Vec = pa::VectorCore<half, kD>;
using Comb = pa::CombineCore<half, kD>;
using SF = Vec::SF;
using OF = Vec::OF;
using Col = Vec::Col;
using Chunk = Comb::Chunk;
using RowF = Comb::RowF;
template <typename T>
using PT = typename pa::VectorCore<T, kD>::PT;

/* UB offsets (bytes) of the harness's tiles; TMP_UB_OFFSET (184 KiB) stays free for pto-isa. */
constexpr uint32_t kA = 0, kB = 32768, kD0 = 65536, kTmp = 98304, kCol = 131072, kCol2 = 131584;

template <typename TileT, typename E>
void Load(TileT &tile, const void *gm, uint32_t rows, uint32_t cols, uint32_t pitch)
{
    GmNd<E> view(reinterpret_cast<E *>(const_cast<void *>(gm)), typename GmNd<E>::Shape(rows, cols),
                 typename GmNd<E>::Stride(pitch, 1));
    TLOAD(tile, view);
}

template <typename TileT, typename E>
void Store(void *gm, uint32_t rows, uint32_t cols, uint32_t pitch, TileT &tile)
{
    GmNd<E> view(reinterpret_cast<E *>(gm), typename GmNd<E>::Shape(rows, cols), typename GmNd<E>::Stride(pitch, 1));
    TSTORE(view, tile);
}

enum Op : int32_t {
    kLoadStore, kMulS, kAddS, kAdd, kSub, kMul, kMax, kExp, kLog, kRowMax, kRowSum, kRowExpandSub, kRowExpandMul,
    kRowExpandDiv, kColSum, kCvtF16, kCvtBf16, kWidenF16, kWidenBf16, kFillF32, kFillF16, kColStorePitch,
    kAtomicAdd, /* TSTORE<AtomicAdd> of a into `out`, which holds finite values (SEMANTICS.md known difference 5) */
    kColExpandSub, /* a - b's first row, from every row (the mask's penalty row: vsub with a src1 repeat stride of 0) */
    kCvtS32,       /* fp32 -> int32, round half to even (AMLA's exponent shifts), stored as int32 */
};

template <typename T>
void Narrow(uint32_t r, uint32_t c, uint32_t pitch, const void *a, void *out)
{
    SF x(r, c);
    PT<T> y(r, c);
    Place(x, kA);
    Place(y, kD0);
    Load<SF, float>(x, a, r, c, pitch);
    TCVT(y, x, RoundMode::CAST_RINT);
    Store<PT<T>, T>(out, r, c, pitch, y);
}

template <typename T>
void Widen(uint32_t r, uint32_t c, uint32_t pitch, const void *a, void *out)
{
    PT<T> x(r, c);
    SF y(r, c);
    Place(x, kA);
    Place(y, kD0);
    Load<PT<T>, T>(x, a, r, c, pitch);
    TCVT(y, x, RoundMode::CAST_NONE);
    Store<SF, float>(out, r, c, pitch, y);
}

void Run(int32_t op, uint32_t r, uint32_t c, uint32_t pitch, const void *a, const void *b, void *out, float s)
{
    SF x(r, c), y(r, c), d(r, c), tmp(r, c);
    Place(x, kA);
    Place(y, kB);
    Place(d, kD0);
    Place(tmp, kTmp);
    Col col(r), col2(r);
    Place(col, kCol);
    Place(col2, kCol2);
    const bool wide = op <= kRowSum || op == kColStorePitch;
    if (wide) {
        Load<SF, float>(x, a, r, c, pitch);
        Load<SF, float>(y, b, r, c, pitch);
    }
    switch (op) {
        case kLoadStore: Store<SF, float>(out, r, c, pitch, x); return;
        case kMulS: TMULS(d, x, s); break;
        case kAddS: TADDS(d, x, s); break;
        case kAdd: TADD(d, x, y); break;
        case kSub: TSUB(d, x, y); break;
        case kMul: TMUL(d, x, y); break;
        case kMax: TMAX(d, x, y); break;
        case kExp: TEXP(d, x); break;
        case kLog: TLOG(d, x); break;
        case kRowMax: TROWMAX(col, x, tmp); Store<Col, float>(out, r, 1, 1, col); return;
        case kRowSum: TROWSUM(col, x, tmp); Store<Col, float>(out, r, 1, 1, col); return;
        case kColStorePitch: TROWMAX(col, x, tmp); Store<Col, float>(out, r, 1, pitch, col); return;
        case kRowExpandSub: case kRowExpandMul: case kRowExpandDiv: {
            OF o(r, c), v(r, c);
            Place(o, kA);
            Place(v, kD0);
            Load<OF, float>(o, a, r, c, pitch);
            Load<SF, float>(y, b, r, c, pitch);
            TROWMAX(col, y, tmp); /* an exact reduction: the row-expand op alone decides the bits */
            if (op == kRowExpandSub) TROWEXPANDSUB(v, o, col);
            if (op == kRowExpandMul) TROWEXPANDMUL(v, o, col);
            if (op == kRowExpandDiv) TROWEXPANDDIV(v, o, col);
            Store<OF, float>(out, r, c, pitch, v);
            return;
        }
        case kColSum: {
            Chunk ch(r, c);
            RowF sum(c);
            Place(ch, kA);
            Place(sum, kD0);
            Load<Chunk, float>(ch, a, r, c, pitch);
            TCOLSUM(sum, ch);
            Store<RowF, float>(out, 1, c, pitch, sum);
            return;
        }
        case kCvtF16: Narrow<half>(r, c, pitch, a, out); return;
        case kCvtBf16: Narrow<bfloat16_t>(r, c, pitch, a, out); return;
        case kWidenF16: Widen<half>(r, c, pitch, a, out); return;
        case kWidenBf16: Widen<bfloat16_t>(r, c, pitch, a, out); return;
        case kFillF32: TEXPANDS(d, s); break;
        case kColExpandSub: {
            Vec::PenRow pen(c);
            Place(pen, kB);
            Load<SF, float>(x, a, r, c, pitch);
            Load<Vec::PenRow, float>(pen, b, 1, c, pitch);
            TCOLEXPANDSUB(d, x, pen);
            break;
        }
        case kAtomicAdd: {
            Load<SF, float>(x, a, r, c, pitch);
            GmNd<float> view(reinterpret_cast<float *>(out), GmNd<float>::Shape(r, c), GmNd<float>::Stride(pitch, 1));
            TSTORE<SF, GmNd<float>, AtomicType::AtomicAdd>(view, x);
            return;
        }
        case kCvtS32: {
            using IT = Tile<TileType::Vec, int32_t, SF::Rows, SF::Cols, BLayout::RowMajor, DYNAMIC, DYNAMIC>;
            IT y(r, c);
            Place(y, kD0);
            Load<SF, float>(x, a, r, c, pitch);
            TCVT(y, x, RoundMode::CAST_RINT);
            Store<IT, int32_t>(out, r, c, pitch, y);
            return;
        }
        case kFillF16: {
            PT<half> h(r, c);
            Place(h, kD0);
            TEXPANDS(h, half(s));
            Store<PT<half>, half>(out, r, c, pitch, h);
            return;
        }
        default: throw std::runtime_error("unknown op " + std::to_string(op));
    }
    Store<SF, float>(out, r, c, pitch, d);
}

}  // namespace

extern "C" int32_t pa_diff_vector(int32_t op, int32_t rows, int32_t cols, int32_t pitch, const void *a,
                                  const void *b, void *out, float scalar)
{
    return pa_diff::Guarded(false, [&] {
        Run(op, uint32_t(rows), uint32_t(cols), uint32_t(pitch), a, b, out, scalar);
    });
}
