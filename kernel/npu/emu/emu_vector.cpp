/*
 * The V-pipe intrinsics (SEMANTICS.md "Vector").  One iteration ("repeat") touches 8 blocks of 32 bytes of
 * its widest operand: 64 lanes of 32-bit data, 128 of 16-bit; a conversion follows the wider type (64 lanes,
 * 8 blocks of fp32 and 4 of fp16).  Block j of iteration r of an operand starts at
 * base + (r x repeatStride + j x blockStride) x 32 bytes.
 *
 * Normal mask mode: repeat = 0 is a no-op; lane i is computed and written only when bit i of the 128-bit mask
 * (low word: lanes 0-63) is set.  Counter mode: the low mask word is an element count for the whole
 * instruction, the repeat argument is ignored, iterations are ceil(count / lanes) and the last is partial.
 * Arithmetic: fp32 in fp32 (IEEE, round to nearest even); fp16 computed in fp32 and rounded once to fp16 -
 * exact for add, sub, mul, div and max because fp32 carries more than 2 x 11 + 2 bits, so the double rounding
 * is innocuous - and saturated while CTRL[48] = 0 (inf -> +-65504, NaN -> 0).
 * (Over 400 lines: the intrinsics are thin forms over the walkers Binary, Unary, Convert, Reduce and Dup, which
 * apply the repeat, stride and mask rules once; split, those walkers would move into a header.)
 */
#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "emu_core.hpp"
#include "emu_initcheck.hpp"
#include "emu_intrinsics.hpp"
#include "emu_numeric.hpp"

namespace pa::emu {
namespace {

constexpr unsigned kBlock = 32;
constexpr int kV = int(Pipe::V);

/* The lanes an instruction executes: per iteration, a lane count and whether each lane is enabled. */
struct LanePlan {
    uint32_t iterations = 0;
    uint32_t lanes = 0;
    uint64_t count = 0;  /* counter mode: elements in total */
    bool counter = false;
    uint64_t hi = 0, lo = 0;

    bool On(uint32_t r, uint32_t i) const
    {
        if (counter) return uint64_t(r) * lanes + i < count;
        return i < 64 ? ((lo >> i) & 1) : ((hi >> (i - 64)) & 1);
    }
};

LanePlan Lanes(uint32_t lanes, uint8_t repeat)
{
    const Core &core = Current();
    LanePlan plan;
    plan.lanes = lanes;
    plan.counter = core.mask_counter;
    if (plan.counter) {
        plan.count = core.mask_lo;
        plan.iterations = uint32_t((plan.count + lanes - 1) / lanes);
    } else {
        plan.iterations = repeat;
        plan.hi = lanes > 64 ? core.mask_hi : 0;
        plan.lo = core.mask_lo;
    }
    return plan;
}

/* An operand: its UB bytes (bounds-checked once for everything the instruction can touch) and strides. */
struct Operand {
    uint8_t *base = nullptr;
    Taint *shadow = nullptr; /* initcheck's shadow of base (null while off) */
    uint64_t start = 0, span = 0;
    uint32_t blockStride = 0, repeatStride = 0, elemBytes = 0;

    uint8_t *At(uint32_t r, uint32_t lane) const
    {
        const uint32_t perBlock = kBlock / elemBytes;
        return base + (uint64_t(r) * repeatStride + uint64_t(lane / perBlock) * blockStride) * kBlock +
               (lane % perBlock) * elemBytes;
    }
    Taint *Shadow(uint32_t r, uint32_t lane) const { return shadow + (At(r, lane) - base); }
};

Operand Bind(const char *intrinsic, const char *name, void *ptr, uint32_t elemBytes, uint32_t lanes,
             const LanePlan &plan, uint32_t blockStride, uint32_t repeatStride, unsigned align, bool write,
             std::vector<Access> &accesses)
{
    Operand op;
    op.blockStride = blockStride;
    op.repeatStride = repeatStride;
    op.elemBytes = elemBytes;
    const uint32_t iterations = plan.iterations;
    const uint32_t blocks = (lanes * elemBytes + kBlock - 1) / kBlock;
    op.start = OnChipOffset(ptr, intrinsic, Pipe::V, name);
    if (iterations == 0) return op;
    op.span = (uint64_t(iterations - 1) * repeatStride + uint64_t(blocks - 1) * blockStride + 1) * kBlock;
    op.base = OnChip(Space::UB, ptr, op.span, align, intrinsic, Pipe::V, name);
    op.shadow = ShadowAt(Space::UB, op.base);
    /* Report the 32-byte blocks the enabled lanes touch (what the hazard checker must see), merged when
     * adjacent: a masked or counted instruction touches less than its whole span. */
    const uint32_t perBlock = kBlock / elemBytes;
    const size_t first = accesses.size();
    for (uint32_t r = 0; r < iterations; ++r) {
        for (uint32_t blk = 0; blk < blocks; ++blk) {
            bool on = false;
            for (uint32_t i = blk * perBlock; i < std::min(lanes, (blk + 1) * perBlock) && !on; ++i) on = plan.On(r, i);
            if (!on) continue;
            const uint64_t at = op.start + (uint64_t(r) * repeatStride + uint64_t(blk) * blockStride) * kBlock;
            Access &last = accesses.back();
            if (accesses.size() > first && last.start + last.bytes == at) {
                last.bytes += kBlock;
            } else {
                accesses.push_back({Space::UB, at, kBlock, write});
            }
        }
    }
    return op;
}

bool Saturating() { return ((Current().ctrl >> 48) & 1) == 0; }

float LoadF(const uint8_t *p, uint32_t bytes)
{
    if (bytes == 4) {
        float x;
        std::memcpy(&x, p, 4);
        return x;
    }
    uint16_t h;
    std::memcpy(&h, p, 2);
    return F32FromF16(h);
}

void StoreF(uint8_t *p, uint32_t bytes, float x, bool saturate)
{
    if (bytes == 4) {
        std::memcpy(p, &x, 4);
        return;
    }
    const uint16_t h = F16FromF32(x, Round::Rint, saturate);
    std::memcpy(p, &h, 2);
}

template <typename Op>
void Binary(const char *name, void *dst, void *s0, void *s1, uint32_t bytes, const u8f &repeat, const u8f &db,
            const u8f &b0, const u8f &b1, const u8f &dr, const u8f &r0, const u8f &r1, Op op)
{
    const uint32_t lanes = 8 * kBlock / bytes;
    const LanePlan plan = Lanes(lanes, repeat.Get(name, kV, "repeat"));
    std::vector<Access> acc;
    const Operand a = Bind(name, "src0", s0, bytes, lanes, plan, b0.Get(name, kV, "src0BlockStride"),
                           r0.Get(name, kV, "src0RepeatStride"), kBlock, false, acc);
    const Operand b = Bind(name, "src1", s1, bytes, lanes, plan, b1.Get(name, kV, "src1BlockStride"),
                           r1.Get(name, kV, "src1RepeatStride"), kBlock, false, acc);
    const uint32_t dstBlock = db.Get(name, kV, "dstBlockStride");
    if (dstBlock == 0 && plan.iterations) Raise(name, Pipe::V, "dstBlockStride", 0, "0 is undefined for a destination");
    const Operand d = Bind(name, "dst", dst, bytes, lanes, plan, dstBlock,
                           dr.Get(name, kV, "dstRepeatStride"), kBlock, true, acc);
    Execute(Work(name, Pipe::V, acc, plan.iterations), [=, saturate = Saturating()] {
        Reads reads(name);
        for (uint32_t r = 0; r < plan.iterations; ++r) {
            for (uint32_t i = 0; i < lanes; ++i) {
                if (plan.On(r, i)) {
                    if (d.shadow) {
                        Taint t = reads.Of(Space::UB, a.Shadow(r, i), bytes);
                        if (t == kClean) t = reads.Of(Space::UB, b.Shadow(r, i), bytes);
                        Mark(d.Shadow(r, i), bytes, t);
                    }
                    StoreF(d.At(r, i), bytes, op(LoadF(a.At(r, i), bytes), LoadF(b.At(r, i), bytes)), saturate);
                }
            }
        }
    });
}

template <typename Op>
void Unary(const char *name, void *dst, void *src, uint32_t bytes, const u8f &repeat, const u16f &db,
           const u16f &sb, const u8f &dr, const u8f &sr, Op op)
{
    const uint32_t lanes = 8 * kBlock / bytes;
    const LanePlan plan = Lanes(lanes, repeat.Get(name, kV, "repeat"));
    std::vector<Access> acc;
    const Operand s = Bind(name, "src", src, bytes, lanes, plan, sb.Get(name, kV, "srcBlockStride"),
                           sr.Get(name, kV, "srcRepeatStride"), kBlock, false, acc);
    const Operand d = Bind(name, "dst", dst, bytes, lanes, plan, db.Get(name, kV, "dstBlockStride"),
                           dr.Get(name, kV, "dstRepeatStride"), kBlock, true, acc);
    Execute(Work(name, Pipe::V, acc, plan.iterations), [=, saturate = Saturating()] {
        Reads reads(name);
        for (uint32_t r = 0; r < plan.iterations; ++r) {
            for (uint32_t i = 0; i < lanes; ++i) {
                if (!plan.On(r, i)) continue;
                if (d.shadow) Mark(d.Shadow(r, i), bytes, reads.Of(Space::UB, s.Shadow(r, i), bytes));
                StoreF(d.At(r, i), bytes, op(LoadF(s.At(r, i), bytes)), saturate);
            }
        }
    });
}

float Max(float a, float b)
{
    if (std::isnan(a) || std::isnan(b)) return NAN;
    return a > b ? a : b;
}

/* A conversion: 64 lanes, the wide (fp32) and narrow (16-bit) operands each with their own strides. */
void Convert(const char *name, void *dst, void *src, bool narrowing, bool bf16, const u8f &repeat, const u16f &db,
             const u16f &sb, const u8f &dr, const u8f &sr)
{
    constexpr uint32_t lanes = 64;
    const LanePlan plan = Lanes(lanes, repeat.Get(name, kV, "repeat"));
    std::vector<Access> acc;
    const uint32_t srcBytes = narrowing ? 4 : 2, dstBytes = narrowing ? 2 : 4;
    const Operand s = Bind(name, "src", src, srcBytes, lanes, plan, sb.Get(name, kV, "srcBlockStride"),
                           sr.Get(name, kV, "srcRepeatStride"), kBlock, false, acc);
    const Operand d = Bind(name, "dst", dst, dstBytes, lanes, plan, db.Get(name, kV, "dstBlockStride"),
                           dr.Get(name, kV, "dstRepeatStride"), kBlock, true, acc);
    Execute(Work(name, Pipe::V, acc, plan.iterations), [=, saturate = Saturating()] {
        Reads reads(name);
        for (uint32_t r = 0; r < plan.iterations; ++r) {
            for (uint32_t i = 0; i < lanes; ++i) {
                if (!plan.On(r, i)) continue;
                if (d.shadow) Mark(d.Shadow(r, i), dstBytes, reads.Of(Space::UB, s.Shadow(r, i), srcBytes));
                if (narrowing) {
                    float x;
                    std::memcpy(&x, s.At(r, i), 4);
                    const uint16_t h =
                        bf16 ? Bf16FromF32(x, Round::Rint, saturate) : F16FromF32(x, Round::Rint, saturate);
                    std::memcpy(d.At(r, i), &h, 2);
                } else {
                    uint16_t h;
                    std::memcpy(&h, s.At(r, i), 2);
                    const float x = bf16 ? F32FromBf16(h) : F32FromF16(h);
                    std::memcpy(d.At(r, i), &x, 4);
                }
            }
        }
    });
}

/* vconv_f322s32r: fp32 -> int32, round half to even, 64 lanes of 32-bit data per iteration like any fp32 op.  A value
 * the int32 range does not hold (NaN, inf, beyond +-2^31) faults: the device's saturation rule for it is not
 * published (SEMANTICS.md). */
void ConvertF32ToS32(const char *name, int32_t *dst, float *src, const u8f &repeat, const u16f &db, const u16f &sb,
                     const u8f &dr, const u8f &sr)
{
    constexpr uint32_t lanes = 64;
    const LanePlan plan = Lanes(lanes, repeat.Get(name, kV, "repeat"));
    std::vector<Access> acc;
    const Operand s = Bind(name, "src", src, 4, lanes, plan, sb.Get(name, kV, "srcBlockStride"),
                           sr.Get(name, kV, "srcRepeatStride"), kBlock, false, acc);
    const Operand d = Bind(name, "dst", dst, 4, lanes, plan, db.Get(name, kV, "dstBlockStride"),
                           dr.Get(name, kV, "dstRepeatStride"), kBlock, true, acc);
    Execute(Work(name, Pipe::V, acc, plan.iterations), [=] {
        Reads reads(name);
        for (uint32_t r = 0; r < plan.iterations; ++r) {
            for (uint32_t i = 0; i < lanes; ++i) {
                if (!plan.On(r, i)) continue;
                if (d.shadow) Mark(d.Shadow(r, i), 4, reads.Of(Space::UB, s.Shadow(r, i), 4));
                float x;
                std::memcpy(&x, s.At(r, i), 4);
                const double rounded = std::nearbyint(double(x)); /* the host's default mode: to nearest even */
                if (!(rounded >= -2147483648.0 && rounded <= 2147483647.0)) {
                    Raise(name, Pipe::V, "src", std::bit_cast<uint32_t>(x), "a value int32 does not hold (not emulated)");
                }
                const int32_t v = int32_t(rounded);
                std::memcpy(d.At(r, i), &v, 4);
            }
        }
    });
}

/* vcmax / vcadd: per iteration, one value from the enabled lanes, written at dst + r x dstRepeatStride
 * elements (ONLY_VALUE).  vcadd sums by a binary tree of pairwise adds, disabled lanes counting as 0. */
void Reduce(const char *name, float *dst, float *src, const u8f &repeat, const u16f &drs, const u16f &sb,
            const u16f &sr, bool sum)
{
    constexpr uint32_t lanes = 64;
    const LanePlan plan = Lanes(lanes, repeat.Get(name, kV, "repeat"));
    std::vector<Access> acc;
    const Operand s = Bind(name, "src", src, 4, lanes, plan, sb.Get(name, kV, "srcBlockStride"),
                           sr.Get(name, kV, "srcRepeatStride"), kBlock, false, acc);
    const uint32_t dstStride = drs.Get(name, kV, "dstRepeatStride");
    const uint64_t dstStart = OnChipOffset(dst, name, Pipe::V, "dst");
    uint8_t *out = nullptr;
    if (plan.iterations) {
        const uint64_t bytes = (uint64_t(plan.iterations - 1) * dstStride + 1) * 4;
        out = OnChip(Space::UB, dst, bytes, 4, name, Pipe::V, "dst");
        acc.push_back({Space::UB, dstStart, bytes, true});
    }
    Taint *outShadow = out != nullptr ? ShadowAt(Space::UB, out) : nullptr;
    Execute(Work(name, Pipe::V, acc, plan.iterations), [=] {
        Reads reads(name);
        for (uint32_t r = 0; r < plan.iterations; ++r) {
            float vals[lanes];
            bool any = false;
            Taint taint = kClean; /* the output derives from every enabled lane */
            for (uint32_t i = 0; i < lanes; ++i) {
                const bool on = plan.On(r, i);
                any |= on;
                if (on && outShadow && taint == kClean) taint = reads.Of(Space::UB, s.Shadow(r, i), 4);
                vals[i] = on ? LoadF(s.At(r, i), 4) : (sum ? 0.0f : -INFINITY);
            }
            float result;
            if (sum) {
                for (uint32_t width = lanes / 2; width >= 1; width /= 2) {
                    for (uint32_t i = 0; i < width; ++i) vals[i] = vals[2 * i] + vals[2 * i + 1];
                }
                result = vals[0];
            } else {
                result = -INFINITY;
                for (uint32_t i = 0; i < lanes; ++i) {
                    if (plan.On(r, i)) result = Max(result, vals[i]);
                }
            }
            if (any) std::memcpy(out + uint64_t(r) * dstStride * 4, &result, 4);
            if (any && outShadow) Mark(outShadow + uint64_t(r) * dstStride * 4, 4, taint);
        }
    });
}

void Brcb(const char *name, void *dst, void *src, const u16f &db, const u16f &dr, const u8f &repeat)
{
    const uint32_t iterations = repeat.Get(name, kV, "repeat");
    const uint32_t blk = db.Get(name, kV, "dstBlockStride"), rep = dr.Get(name, kV, "dstRepeatStride");
    if (blk == 0 && iterations) Raise(name, Pipe::V, "dstBlockStride", 0, "0 is undefined for vbrcb");
    std::vector<Access> acc;
    if (iterations == 0) return Report({name, Pipe::V, acc});
    const uint64_t srcBytes = uint64_t(iterations) * 8 * 4;
    const uint64_t dstBytes = (uint64_t(iterations - 1) * rep + 7ull * blk + 1) * kBlock;
    const uint8_t *in = OnChip(Space::UB, src, srcBytes, kBlock, name, Pipe::V, "src");
    uint8_t *out = OnChip(Space::UB, dst, dstBytes, kBlock, name, Pipe::V, "dst");
    const uint64_t s0 = OnChipOffset(src, name, Pipe::V, "src"), d0 = OnChipOffset(dst, name, Pipe::V, "dst");
    if (s0 < d0 + dstBytes && d0 < s0 + srcBytes) Raise(name, Pipe::V, "src", s0, "vbrcb source overlaps its destination");
    acc.push_back({Space::UB, s0, srcBytes, false});
    acc.push_back({Space::UB, d0, dstBytes, true});
    const Taint *shadowIn = ShadowAt(Space::UB, in);
    Taint *shadowOut = ShadowAt(Space::UB, out);
    Execute(Work(name, Pipe::V, acc, iterations), [=] {
        Reads reads(name);
        for (uint32_t r = 0; r < iterations; ++r) {
            for (uint32_t j = 0; j < 8; ++j) {
                uint8_t *block = out + (uint64_t(r) * rep + uint64_t(j) * blk) * kBlock;
                for (uint32_t k = 0; k < 8; ++k) std::memcpy(block + 4 * k, in + (uint64_t(r) * 8 + j) * 4, 4);
                if (!shadowIn) continue;
                Taint *to = shadowOut + (block - out);
                reads.Copy(Space::UB, shadowIn + (uint64_t(r) * 8 + j) * 4, to, 4);
                for (uint32_t k = 1; k < 8; ++k) std::copy(to, to + 4, to + 4 * k);
            }
        }
    });
}

template <typename Bits>
void Dup(const char *name, void *dst, Bits value, const u8f &repeat, const u16f &db, const u8f &dr)
{
    const uint32_t bytes = sizeof(Bits), lanes = 8 * kBlock / bytes;
    const LanePlan plan = Lanes(lanes, repeat.Get(name, kV, "repeat"));
    std::vector<Access> acc;
    const Operand d = Bind(name, "dst", dst, bytes, lanes, plan, db.Get(name, kV, "dstBlockStride"),
                           dr.Get(name, kV, "dstRepeatStride"), kBlock, true, acc);
    Execute(Work(name, Pipe::V, acc, plan.iterations), [=] {
        for (uint32_t r = 0; r < plan.iterations; ++r) {
            for (uint32_t i = 0; i < lanes; ++i) {
                if (!plan.On(r, i)) continue;
                std::memcpy(d.At(r, i), &value, bytes);
                if (d.shadow) Mark(d.Shadow(r, i), bytes, kClean);
            }
        }
    });
}

}  // namespace
}  // namespace pa::emu

using namespace pa::emu;

#define PA_EMU_DEFINE_BINARY(name, expr)                                                                          \
    void name(float *d, float *a, float *b, u8f rep, u8f db, u8f b0, u8f b1, u8f dr, u8f r0, u8f r1)             \
    {                                                                                                             \
        Binary(#name, d, a, b, 4, rep, db, b0, b1, dr, r0, r1, [](float x, float y) { return expr; });            \
    }                                                                                                             \
    void name(_Float16 *d, _Float16 *a, _Float16 *b, u8f rep, u8f db, u8f b0, u8f b1, u8f dr, u8f r0, u8f r1)    \
    {                                                                                                             \
        Binary(#name, d, a, b, 2, rep, db, b0, b1, dr, r0, r1, [](float x, float y) { return expr; });            \
    }
PA_EMU_DEFINE_BINARY(vadd, x + y)
PA_EMU_DEFINE_BINARY(vsub, x - y)
PA_EMU_DEFINE_BINARY(vmul, x * y)
PA_EMU_DEFINE_BINARY(vdiv, x / y)
PA_EMU_DEFINE_BINARY(vmax, Max(x, y))

#define PA_EMU_DEFINE_SCALAR(name, expr)                                                                          \
    void name(float *d, float *s, float c, u8f rep, u16f db, u16f sb, u8f dr, u8f sr)                             \
    {                                                                                                             \
        Unary(#name, d, s, 4, rep, db, sb, dr, sr, [c](float x) { return expr; });                                \
    }                                                                                                             \
    void name(_Float16 *d, _Float16 *s, _Float16 c16, u8f rep, u16f db, u16f sb, u8f dr, u8f sr)                  \
    {                                                                                                             \
        uint16_t bits;                                                                                            \
        std::memcpy(&bits, &c16, 2);                                                                              \
        const float c = F32FromF16(bits);                                                                         \
        Unary(#name, d, s, 2, rep, db, sb, dr, sr, [c](float x) { return expr; });                                \
    }
PA_EMU_DEFINE_SCALAR(vadds, x + c)
PA_EMU_DEFINE_SCALAR(vmuls, x * c)

#define PA_EMU_DEFINE_UNARY(name, expr)                                                                           \
    void name(float *d, float *s, u8f rep, u16f db, u16f sb, u8f dr, u8f sr)                                      \
    {                                                                                                             \
        Unary(#name, d, s, 4, rep, db, sb, dr, sr, [](float x) { return expr; });                                 \
    }                                                                                                             \
    void name(_Float16 *d, _Float16 *s, u8f rep, u16f db, u16f sb, u8f dr, u8f sr)                                \
    {                                                                                                             \
        Unary(#name, d, s, 2, rep, db, sb, dr, sr, [](float x) { return expr; });                                 \
    }
PA_EMU_DEFINE_UNARY(vexp, std::exp(x))
PA_EMU_DEFINE_UNARY(vln, std::log(x))

void vcmax(float *dst, float *src, u8f repeat, u16f dstRepeatStride, u16f srcBlockStride, u16f srcRepeatStride,
           int order)
{
    if (order != ONLY_VALUE) Raise("vcmax", Pipe::V, "order", uint64_t(order), "only ONLY_VALUE is emulated");
    Reduce("vcmax", dst, src, repeat, dstRepeatStride, srcBlockStride, srcRepeatStride, false);
}

void vcadd(float *dst, float *src, u8f repeat, u16f dstRepeatStride, u16f srcBlockStride, u16f srcRepeatStride,
           bool mode)
{
    if (mode) Raise("vcadd", Pipe::V, "mode", 1, "only the value form (false) is emulated");
    Reduce("vcadd", dst, src, repeat, dstRepeatStride, srcBlockStride, srcRepeatStride, true);
}

void vbrcb(uint32_t *dst, uint32_t *src, u16f db, u16f dr, u8f repeat) { Brcb("vbrcb", dst, src, db, dr, repeat); }
void vbrcb(float *dst, float *src, u16f db, u16f dr, u8f repeat) { Brcb("vbrcb", dst, src, db, dr, repeat); }

/* Every form writes the scalar's bits; the lane width is the bits' width. */
template <typename Bits, typename T>
void DupForm(T *dst, T scalar, const u8f &repeat, const u16f &db, const u8f &dr)
{
    Dup("vector_dup", dst, std::bit_cast<Bits>(scalar), repeat, db, dr);
}

void vector_dup(float *dst, float scalar, u8f repeat, u16f db, u16f, u8f dr, u8f)
{
    DupForm<uint32_t>(dst, scalar, repeat, db, dr);
}
void vector_dup(_Float16 *dst, _Float16 scalar, u8f repeat, u16f db, u16f, u8f dr, u8f)
{
    DupForm<uint16_t>(dst, scalar, repeat, db, dr);
}
void vector_dup(bf16_t *dst, bf16_t scalar, u8f repeat, u16f db, u16f, u8f dr, u8f)
{
    DupForm<uint16_t>(dst, scalar, repeat, db, dr);
}
void vector_dup(uint16_t *dst, uint16_t scalar, u8f repeat, u16f db, u16f, u8f dr, u8f)
{
    DupForm<uint16_t>(dst, scalar, repeat, db, dr);
}

void vconv_f322f16r(_Float16 *d, float *s, u8f rep, u16f db, u16f sb, u8f dr, u8f sr)
{
    Convert("vconv_f322f16r", d, s, true, false, rep, db, sb, dr, sr);
}
void vconv_f322bf16r(bf16_t *d, float *s, u8f rep, u16f db, u16f sb, u8f dr, u8f sr)
{
    Convert("vconv_f322bf16r", d, s, true, true, rep, db, sb, dr, sr);
}
void vconv_f162f32(float *d, _Float16 *s, u8f rep, u16f db, u16f sb, u8f dr, u8f sr)
{
    Convert("vconv_f162f32", d, s, false, false, rep, db, sb, dr, sr);
}
void vconv_bf162f32(float *d, bf16_t *s, u8f rep, u16f db, u16f sb, u8f dr, u8f sr)
{
    Convert("vconv_bf162f32", d, s, false, true, rep, db, sb, dr, sr);
}
void vconv_f322s32r(int32_t *d, float *s, u8f rep, u16f db, u16f sb, u8f dr, u8f sr)
{
    ConvertF32ToS32("vconv_f322s32r", d, s, rep, db, sb, dr, sr);
}
