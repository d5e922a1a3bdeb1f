/*
 * The cube core's intrinsics (SEMANTICS.md "Cube"): L1 -> L0A/L0B (MTE1), the matrix multiply (M) and
 * L0C -> global memory (FIX).
 *
 * Layouts (16 x 16 fractals of 512 bytes for 16-bit data; L0C fractals are 16 x 16 fp32):
 *   L1 Nz (M x N, C0 = 16): element (m, n) at (n / 16) x Mp x 16 + m x 16 + n % 16
 *   L0A Zz (M x K):          (m / 16) x Kp x 16 + (k / 16) x 256 + (m % 16) x 16 + k % 16
 *   L0B Zn (K x N):          (k / 16) x Np x 16 + (n / 16) x 256 + (n % 16) x 16 + k % 16
 *   L0C Nz (M x N, fp32):    (n / 16) x Mp x 16 + m x 16 + n % 16
 * where Mp, Kp, Np are the extents rounded up to 16.
 */
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "emu_core.hpp"
#include "emu_initcheck.hpp"
#include "emu_intrinsics.hpp"
#include "emu_numeric.hpp"

namespace pa::emu {
namespace {

constexpr uint64_t kFractal = 512;
constexpr int kMte1 = int(Pipe::MTE1), kM = int(Pipe::M);

uint64_t Up16(uint64_t x) { return (x + 15) / 16 * 16; }

/* load3d v2 with a 1 x 1 filter, stride 1, dilation 1: the L1 feature map (C1 x (H x W) x C0, i.e. an Nz
 * matrix of H x W rows and channelSize columns) is cut to the mExt x kExt window at (mStart, kStart) and
 * written whole-fractal to L0A in Zz, or to L0B in Zn (the L1 -> L0B path transposes each fractal). */
void Img2col(const char *name, Space target, void *dst, void *src, const u16f &kExtF, const u16f &mExtF,
             const u16f &kStartF, const u16f &mStartF, const u8f &strideW, const u8f &strideH, const u8f &filterW,
             const u8f &filterH, const u8f &dilW, const u8f &dilH, bool sizeW, bool sizeH, bool transpose,
             bool fmatrixCtrl, const u16f &channelF)
{
    const uint64_t kExt = kExtF.Get(name, kMte1, "kExtension"), mExt = mExtF.Get(name, kMte1, "mExtension");
    const uint64_t kStart = kStartF.Get(name, kMte1, "kStartPt"), mStart = mStartF.Get(name, kMte1, "mStartPt");
    const uint64_t channels = channelF.Get(name, kMte1, "channelSize");
    const uint64_t geometry[] = {strideW.Get(name, kMte1, "strideW"), strideH.Get(name, kMte1, "strideH"),
                                 filterW.Get(name, kMte1, "filterW"), filterH.Get(name, kMte1, "filterH"),
                                 dilW.Get(name, kMte1, "dilationFilterW"), dilH.Get(name, kMte1, "dilationFilterH")};
    for (uint64_t g : geometry) {
        if (g != 1) Raise(name, Pipe::MTE1, "stride/filter/dilation", g, "only the 1 x 1, stride 1 form is emulated");
    }
    if (sizeW || sizeH) Raise(name, Pipe::MTE1, "filterSize", 1, "filter sizes above 255 are not emulated");
    if (transpose) Raise(name, Pipe::MTE1, "transpose", 1, "the transposing form is not emulated");
    Core &core = Current();
    const bool useB = target == Space::L0B;
    if (useB != fmatrixCtrl) {
        Raise(name, Pipe::MTE1, "fmatrixCtrl", fmatrixCtrl, "the L0A load reads FMATRIX, the L0B load FMATRIX_B");
    }
    if (!(useB ? core.fmatrix_b_set : core.fmatrix_set)) {
        Raise(name, Pipe::MTE1, useB ? "FMATRIX_B" : "FMATRIX", 0, "read before any set_fmatrix wrote it");
    }
    const uint64_t fm = useB ? core.fmatrix_b : core.fmatrix;
    const uint64_t height = fm & 0xffff, width = (fm >> 16) & 0xffff;
    if (fm >> 32) Raise(name, Pipe::MTE1, "FMATRIX padding", fm >> 32, "padded feature maps are not emulated");
    std::vector<Access> acc;
    if (height == 0 || width == 0 || channels == 0 || kExt == 0 || mExt == 0) return Report({name, Pipe::MTE1, acc});
    const bool channelOk = channels == 4 || channels == 8 || channels % 16 == 0 || channels % 16 == 4 ||
                           channels % 16 == 8;
    if (!channelOk) Raise(name, Pipe::MTE1, "channelSize", channels, "b16 takes 4, 8, 16N, 16N+4 or 16N+8");
    if (channels % 16) Raise(name, Pipe::MTE1, "channelSize", channels, "only whole 16-channel groups are emulated");
    if (kExt % 16 || mExt % 16) Raise(name, Pipe::MTE1, "extension", kExt % 16 ? kExt : mExt, "not whole fractals");
    const uint64_t pixels = height * width;
    if (mStart + mExt > pixels) Raise(name, Pipe::MTE1, "mStartPt", mStart, "window runs past the feature map rows");
    if (kStart + kExt > channels) Raise(name, Pipe::MTE1, "kStartPt", kStart, "window runs past the channels");
    const uint64_t srcBytes = (channels / 16) * pixels * 32;
    const uint64_t dstBytes = mExt * kExt * 2;
    const uint8_t *in = OnChip(Space::L1, src, srcBytes, 32, name, Pipe::MTE1, "src");
    uint8_t *out = OnChip(target, dst, dstBytes, kFractal, name, Pipe::MTE1, "dst");
    acc.push_back({Space::L1, OnChipOffset(src, name, Pipe::MTE1, "src"), srcBytes, false});
    acc.push_back({target, OnChipOffset(dst, name, Pipe::MTE1, "dst"), dstBytes, true});
    const Taint *shadowIn = ShadowAt(Space::L1, in);
    Taint *shadowOut = ShadowAt(target, out);
    Execute({name, Pipe::MTE1, acc}, [=] {
        Reads reads(name);
        for (uint64_t m = 0; m < mExt; ++m) {
            for (uint64_t k = 0; k < kExt; ++k) {
                const uint64_t p = mStart + m, c = kStart + k;
                const uint64_t from = ((c / 16) * pixels + p) * 16 + c % 16;
                const uint64_t inner = useB ? (k % 16) * 16 + m % 16 : (m % 16) * 16 + k % 16;
                const uint64_t to = (m / 16) * kExt * 16 + (k / 16) * 256 + inner;
                std::memcpy(out + to * 2, in + from * 2, 2);
                if (shadowIn) reads.Copy(Space::L1, shadowIn + from * 2, shadowOut + to * 2, 2);
            }
        }
    });
}

template <typename In>
float Element(const In *p, uint64_t i)
{
    uint16_t bits;
    std::memcpy(&bits, p + i, 2);
    if constexpr (std::is_same_v<In, bf16_t>) {
        return F32FromBf16(bits);
    } else {
        return F32FromF16(bits);
    }
}

/* Mmad.md: "avoid NaN inputs to Mmad, otherwise an execution error may occur".  A device may raise an AI Core
 * error, or compute on; either way a result built on such an element is not one the kernel can stand behind, so
 * every element the multiply reads - the valid m x k of A and k x n of B, including columns of B whose results
 * are never stored - must be finite (inf is checked too: inf x 0 is NaN).  The fault names the operand, its
 * region and byte offset, and the element's (row, column).  Core::check_mad_inputs turns it off. */
template <typename In>
void CheckFinite(const In *p, uint64_t base, uint64_t index, const char *operand, Space space, uint64_t row,
                 uint64_t col)
{
    const float x = Element(p, index);
    if (std::isfinite(x)) return;
    uint16_t bits;
    std::memcpy(&bits, p + index, 2);
    char why[200];
    std::snprintf(why, sizeof why,
                  "non-finite element %s[%llu][%llu] (bits 0x%04x) at %s byte offset %llu: Mmad.md, a NaN input may "
                  "raise an execution error (PA_SIM_MAD_INPUT_CHECK=0 turns this check off)",
                  operand, static_cast<unsigned long long>(row), static_cast<unsigned long long>(col), bits,
                  SpaceName(space), static_cast<unsigned long long>(base + index * 2));
    Raise("mad", Pipe::M, operand, base + index * 2, why);
}

/* Mmad.md: while CTRL[48] = 0 an inf output saturates to the largest finite value of its sign, a NaN to 0. */
float SaturateOutput(float x, bool saturate)
{
    if (!saturate || std::isfinite(x)) return x;
    if (std::isnan(x)) return 0.0f;
    return x > 0 ? std::numeric_limits<float>::max() : -std::numeric_limits<float>::max();
}

/* initcheck of mad (emu_initcheck.hpp): C[i][j] derives from unwritten bytes iff some A[i][l] or B[l][j], l < k,
 * does (or, accumulating, C[i][j] did): per row of A and column of B once, then per element of C. */
void MadTaint(const char *name, const Taint *a, const Taint *b, Taint *c, uint64_t m, uint64_t k, uint64_t n, bool init)
{
    const uint64_t mp = Up16(m), kp = Up16(k), np = Up16(n);
    Reads reads(name);
    std::vector<Taint> rowA(m, kClean), colB(n, kClean);
    for (uint64_t i = 0; i < m; ++i) {
        for (uint64_t l = 0; l < k && rowA[i] == kClean; ++l) {
            rowA[i] = reads.Of(Space::L0A, a + ((i / 16) * kp * 16 + (l / 16) * 256 + (i % 16) * 16 + l % 16) * 2, 2);
        }
    }
    for (uint64_t j = 0; j < n; ++j) {
        for (uint64_t l = 0; l < k && colB[j] == kClean; ++l) {
            colB[j] = reads.Of(Space::L0B, b + ((l / 16) * np * 16 + (j / 16) * 256 + (j % 16) * 16 + l % 16) * 2, 2);
        }
    }
    for (uint64_t i = 0; i < m; ++i) {
        for (uint64_t j = 0; j < n; ++j) {
            Taint *out = c + ((j / 16) * mp * 16 + i * 16 + j % 16) * 4;
            Taint t = rowA[i] != kClean ? rowA[i] : colB[j];
            if (t == kClean && !init) t = reads.Of(Space::L0C, out, 4);
            Mark(out, 4, t);
        }
    }
}

template <typename In>
void Mad(float *c, In *a, In *b, const u16f &mF, const u16f &kF, const u16f &nF, const u8f &unitFlag,
         bool kAlign, bool source, bool init)
{
    const char *name = "mad";
    const uint64_t m = mF.Get(name, kM, "m"), k = kF.Get(name, kM, "k"), n = nF.Get(name, kM, "n");
    const uint64_t unit = unitFlag.Get(name, kM, "unitFlag");
    if (unit != 0) Raise(name, Pipe::M, "unitFlag", unit, "the unit-flag handshake is not emulated");
    (void)kAlign; /* applies to fp32 inputs only */
    if (source) Raise(name, Pipe::M, "cmatrixSource", 1, "the bias-table source is not emulated");
    std::vector<Access> acc;
    if (m == 0 || k == 0 || n == 0) return Report({name, Pipe::M, acc});
    CheckRange(name, Pipe::M, "m", m, 1, 4095);
    CheckRange(name, Pipe::M, "k", k, 1, 4095);
    CheckRange(name, Pipe::M, "n", n, 1, 4095);
    if (m == 1) Raise(name, Pipe::M, "m", 1, "m = 1 is the GEMV form (A read as an ND row), not emulated");
    const uint64_t mp = Up16(m), kp = Up16(k), np = Up16(n);
    const In *A = reinterpret_cast<const In *>(OnChip(Space::L0A, a, mp * kp * 2, kFractal, name, Pipe::M, "a"));
    const In *B = reinterpret_cast<const In *>(OnChip(Space::L0B, b, kp * np * 2, kFractal, name, Pipe::M, "b"));
    float *C = reinterpret_cast<float *>(OnChip(Space::L0C, c, mp * np * 4, 64, name, Pipe::M, "c"));
    const uint64_t aBase = OnChipOffset(a, name, Pipe::M, "a"), bBase = OnChipOffset(b, name, Pipe::M, "b");
    const Core &core = Current();
    const bool saturate = ((core.ctrl >> 48) & 1) == 0, check = core.check_mad_inputs;
    auto aAt = [=](uint64_t i, uint64_t l) { return (i / 16) * kp * 16 + (l / 16) * 256 + (i % 16) * 16 + l % 16; };
    auto bAt = [=](uint64_t l, uint64_t j) { return (l / 16) * np * 16 + (j / 16) * 256 + (j % 16) * 16 + l % 16; };
    const Taint *shadowA = ShadowAt(Space::L0A, reinterpret_cast<const uint8_t *>(A));
    const Taint *shadowB = ShadowAt(Space::L0B, reinterpret_cast<const uint8_t *>(B));
    Taint *shadowC = ShadowAt(Space::L0C, reinterpret_cast<const uint8_t *>(C));
    auto multiply = [=] {
        if (check) { /* at retire: the operands as the M pipe reads them */
            for (uint64_t i = 0; i < m; ++i) {
                for (uint64_t l = 0; l < k; ++l) CheckFinite(A, aBase, aAt(i, l), "a", Space::L0A, i, l);
            }
            for (uint64_t l = 0; l < k; ++l) {
                for (uint64_t j = 0; j < n; ++j) CheckFinite(B, bBase, bAt(l, j), "b", Space::L0B, l, j);
            }
        }
        if (shadowA) MadTaint(name, shadowA, shadowB, shadowC, m, k, n, init);
        for (uint64_t i = 0; i < m; ++i) {
            for (uint64_t j = 0; j < n; ++j) {
                float sum = 0.0f;
                for (uint64_t l = 0; l < k; ++l) {  /* valid k only: the padding of a fractal is ignored */
                    sum += Element(A, aAt(i, l)) * Element(B, bAt(l, j));
                }
                float &out = C[(j / 16) * mp * 16 + i * 16 + j % 16];
                out = SaturateOutput(init ? sum : out + sum, saturate);
            }
        }
    };
    acc.push_back({Space::L0A, aBase, mp * kp * 2, false});
    acc.push_back({Space::L0B, bBase, kp * np * 2, false});
    if (!init) acc.push_back({Space::L0C, OnChipOffset(c, name, Pipe::M, "c"), mp * np * 4, false});
    acc.push_back({Space::L0C, OnChipOffset(c, name, Pipe::M, "c"), mp * np * 4, true});
    Execute(Work(name, Pipe::M, acc, m, k, n), multiply);
}

}  // namespace
}  // namespace pa::emu

using namespace pa::emu;

void set_fmatrix(uint64_t config)
{
    Core &core = Current();
    core.fmatrix = config;
    core.fmatrix_set = true;
    Report({"set_fmatrix", Pipe::MTE1, {}});
}

void set_fmatrix_b(uint64_t config)
{
    Core &core = Current();
    core.fmatrix_b = config;
    core.fmatrix_b_set = true;
    Report({"set_fmatrix_b", Pipe::MTE1, {}});
}

void img2colv2_cbuf_to_ca(void *dst, void *src, u16f kExt, u16f mExt, u16f kStart, u16f mStart, u8f sW, u8f sH,
                          u8f fW, u8f fH, u8f dW, u8f dH, bool zW, bool zH, bool transpose, bool ctrl, u16f channels)
{
    Img2col("img2colv2_cbuf_to_ca", Space::L0A, dst, src, kExt, mExt, kStart, mStart, sW, sH, fW, fH, dW, dH, zW, zH,
            transpose, ctrl, channels);
}

void img2colv2_cbuf_to_cb(void *dst, void *src, u16f kExt, u16f mExt, u16f kStart, u16f mStart, u8f sW, u8f sH,
                          u8f fW, u8f fH, u8f dW, u8f dH, bool zW, bool zH, bool transpose, bool ctrl, u16f channels)
{
    Img2col("img2colv2_cbuf_to_cb", Space::L0B, dst, src, kExt, mExt, kStart, mStart, sW, sH, fW, fH, dW, dH, zW, zH,
            transpose, ctrl, channels);
}

/* 2D load: iteration r copies fractal baseIdx + r x srcStride of src to dst + r x (dstGap + 1) fractals. */
void load_cbuf_to_cb(void *dst, void *src, u16f baseIdxF, u8f repeatF, u16f srcStrideF, u16f dstGapF, u8f sid,
                     bool transpose, int addrCalMode)
{
    const char *name = "load_cbuf_to_cb";
    const uint64_t base = baseIdxF.Get(name, kMte1, "baseIdx"), repeat = repeatF.Get(name, kMte1, "repeat");
    const uint64_t stride = srcStrideF.Get(name, kMte1, "srcStride"), gap = dstGapF.Get(name, kMte1, "dstGap");
    (void)sid.Get(name, kMte1, "sid");
    if (transpose) Raise(name, Pipe::MTE1, "transpose", 1, "the transposing form is not emulated");
    if (addrCalMode != inc) Raise(name, Pipe::MTE1, "addr_cal_mode", uint64_t(addrCalMode), "only inc is emulated");
    std::vector<Access> acc;
    if (repeat == 0) return Report({name, Pipe::MTE1, acc});
    const uint64_t srcBytes = (base + (repeat - 1) * stride + 1) * kFractal;
    const uint64_t dstBytes = ((repeat - 1) * (gap + 1) + 1) * kFractal;
    const uint8_t *in = OnChip(Space::L1, src, srcBytes, 32, name, Pipe::MTE1, "src");
    uint8_t *out = OnChip(Space::L0B, dst, dstBytes, kFractal, name, Pipe::MTE1, "dst");
    acc.push_back({Space::L1, OnChipOffset(src, name, Pipe::MTE1, "src"), srcBytes, false});
    acc.push_back({Space::L0B, OnChipOffset(dst, name, Pipe::MTE1, "dst"), dstBytes, true});
    const Taint *shadowIn = ShadowAt(Space::L1, in);
    Taint *shadowOut = ShadowAt(Space::L0B, out);
    Execute({name, Pipe::MTE1, acc}, [=] {
        Reads reads(name);
        for (uint64_t r = 0; r < repeat; ++r) {
            std::memcpy(out + r * (gap + 1) * kFractal, in + (base + r * stride) * kFractal, kFractal);
            if (shadowIn) {
                reads.Copy(Space::L1, shadowIn + (base + r * stride) * kFractal, shadowOut + r * (gap + 1) * kFractal, kFractal);
            }
        }
    });
}

void mad(float *c, _Float16 *a, _Float16 *b, u16f m, u16f k, u16f n, u8f unitFlag, bool kAlign, bool source,
         bool init)
{
    Mad(c, a, b, m, k, n, unitFlag, kAlign, source, init);
}

void mad(float *c, bf16_t *a, bf16_t *b, u16f m, u16f k, u16f n, u8f unitFlag, bool kAlign, bool source, bool init)
{
    Mad(c, a, b, m, k, n, unitFlag, kAlign, source, init);
}

void set_nd_para(uint64_t config)
{
    Core &core = Current();
    core.nd_para = config;
    core.nd_para_set = true;
    Report({"set_nd_para", Pipe::FIX, {}});
}

/* Fixpipe, two-register form: Xm = NSize[15:4] | MSize[31:16] | dst stride[63:32]; Xt = src stride[15:0] |
 * unit flag[33:32] | quant[38:34] | relu[41:39] | channel split[42] | NZ2ND[43].  With NZ2ND, row j < MSize,
 * column c < NSize of the result goes to dst + j x dstStride + c elements, converted by the quant mode and
 * combined with GM's contents by the store-atomic mode latched at issue (add only, emu_atomic.cpp).  NSize need
 * not be a multiple of 16 with NZ2ND (ASC Fixpipe, FixpipeParamsV220: that rule is the NZ output's); MSize is
 * at most 8192 with NZ2ND. */
void copy_matrix_cc_to_gm(void *dst, void *src, uint64_t xm, uint64_t xt)
{
    const char *name = "copy_matrix_cc_to_gm";
    Core &core = Current();
    if (xm & 0xf) Raise(name, Pipe::FIX, "Xm[3:0]", xm & 0xf, "reserved bits set");
    const uint64_t nSize = (xm >> 4) & 0xfff, mSize = (xm >> 16) & 0xffff, dstStride = xm >> 32;
    const uint64_t srcStride = xt & 0xffff, unit = (xt >> 32) & 3, quant = (xt >> 34) & 0x1f;
    const uint64_t relu = (xt >> 39) & 7, split = (xt >> 42) & 1, nz2nd = (xt >> 43) & 1;
    if (xt >> 44 || ((xt >> 16) & 0xffff)) Raise(name, Pipe::FIX, "Xt", xt, "reserved bits set");
    if (!nz2nd) Raise(name, Pipe::FIX, "Xt.NZ2ND", 0, "only the NZ2ND form is emulated");
    if (unit || relu || split) Raise(name, Pipe::FIX, "Xt", xt, "unit flag, relu and channel split are not emulated");
    if (!core.nd_para_set) Raise(name, Pipe::FIX, "ND_PARA", 0, "NZ2ND reads ND_PARA before any set_nd_para wrote it");
    const uint64_t ndNum = core.nd_para & 0xffff;
    if (ndNum != 1) Raise(name, Pipe::FIX, "ND_PARA.ndNum", ndNum, "only ndNum = 1 is emulated");
    std::vector<Access> acc;
    if (nSize == 0 || mSize == 0) return Report({name, Pipe::FIX, acc});
    CheckRange(name, Pipe::FIX, "Xm.MSize", mSize, 1, 8192);
    if (dstStride < nSize) Raise(name, Pipe::FIX, "Xm.dstStride", dstStride, "rows of the result would overlap");
    if (srcStride < mSize || srcStride % 16) {
        Raise(name, Pipe::FIX, "Xt.srcStride", srcStride, "must be MSize rounded up to 16 (fractal column height)");
    }
    uint32_t outBytes;
    switch (quant) {
        case 0: outBytes = 4; break;
        case 1: case 16: outBytes = 2; break;
        default: Raise(name, Pipe::FIX, "Xt.quantPre", quant, "only none, F322F16 and F322BF16 are emulated");
    }
    const uint64_t srcBytes = ((Up16(nSize) / 16 - 1) * srcStride * 16 + srcStride * 16) * 4;
    const uint64_t dstBytes = ((mSize - 1) * dstStride + nSize) * outBytes;
    const float *in = reinterpret_cast<const float *>(OnChip(Space::L0C, src, srcBytes, 64, name, Pipe::FIX, "src"));
    uint8_t *out = Gm(dst, dstBytes, name, Pipe::FIX, "dst");
    const bool saturate = ((core.ctrl >> 48) & 1) == 0;
    const StoreAtomic atomic = LatchStoreAtomic(name, Pipe::FIX, outBytes, true);
    acc.push_back({Space::L0C, OnChipOffset(src, name, Pipe::FIX, "src"), srcBytes, false});
    const uint64_t gmAt = uint64_t(reinterpret_cast<uintptr_t>(dst));
    if (atomic.op != StoreAtomicOp::None) {
        AddStrided(acc, Space::GM, gmAt, mSize, nSize * outBytes, dstStride * outBytes, false); /* read-modify-write */
    }
    AddStrided(acc, Space::GM, gmAt, mSize, nSize * outBytes, dstStride * outBytes, true);
    const Taint *shadow = ShadowAt(Space::L0C, reinterpret_cast<const uint8_t *>(in));
    Execute(Work(name, Pipe::FIX, acc, mSize, nSize * outBytes), [=] {
        Reads reads(name);
        std::vector<uint8_t> row(nSize * outBytes);
        for (uint64_t j = 0; j < mSize; ++j) {
            for (uint64_t col = 0; col < nSize; ++col) {
                const uint64_t at = (col / 16) * srcStride * 16 + j * 16 + col % 16;
                if (shadow) reads.Check(Pipe::FIX, "src", Space::L0C, shadow + at * 4, 4, kToGm);
                const float x = in[at];
                uint8_t *to = row.data() + col * outBytes;
                if (quant == 0) {
                    std::memcpy(to, &x, 4);
                } else {
                    const uint16_t h =
                        quant == 1 ? F16FromF32(x, Round::Rint, saturate) : Bf16FromF32(x, Round::Rint, saturate);
                    std::memcpy(to, &h, 2);
                }
            }
            StoreWithAtomic(atomic, out + j * dstStride * outBytes, row.data(), row.size(), name, Pipe::FIX);
        }
    });
}
