/*
 * The data movers (SEMANTICS.md "DMA"): global memory <-> UB (MTE2 in, MTE3 out), UB -> UB (V), global memory
 * -> L1 with the ND -> Nz format change and the L1 fill (MTE2).
 *
 * GM -> UB: burst i reads lenBurst bytes at src + i x (lenBurst + srcGap) bytes and lands at the next 32-byte
 * block boundary of UB after the previous burst plus dstGap blocks; a burst occupies
 * ceil((left + len + right) / 32) blocks.  The bytes of those blocks that no source byte fills are dummy data:
 * without padding, copies of the burst's first element (CCE copy_gm_to_ubuf_align); with padding, repeats of
 * set_mov_pad_val's value, which is not emulated, so padding and its dummy bytes get kDummy, a NaN pattern that
 * makes reliance on them visible.
 *
 * UB -> GM stores apply the store-atomic mode they latch at issue (emu_atomic.cpp).
 */
#include <cstring>
#include <vector>

#include "emu_core.hpp"
#include "emu_initcheck.hpp"
#include "emu_intrinsics.hpp"

namespace pa::emu {
namespace {

constexpr uint64_t kBlock = 32;
constexpr uint8_t kDummy[4] = {0xff, 0xff, 0xbf, 0x7f}; /* fp32 0x7fbfffff (a NaN); fp16 halves 0xffff (NaN) */
constexpr int kMte2 = int(Pipe::MTE2), kMte3 = int(Pipe::MTE3), kV = int(Pipe::V);

uint64_t Blocks(uint64_t bytes) { return (bytes + kBlock - 1) / kBlock; }

void GmToUb(const char *name, void *dst, void *src, uint32_t elem, const u8f &sid, const u16f &nBurstF,
            const u32f &lenF, const u8f &leftF, const u8f &rightF, const u32f &srcGapF, const u32f &dstGapF)
{
    (void)sid.Get(name, kMte2, "sid");
    const uint64_t nBurst = nBurstF.Get(name, kMte2, "nBurst"), len = lenF.Get(name, kMte2, "lenBurst");
    const uint64_t left = uint64_t(leftF.Get(name, kMte2, "leftPaddingNum")) * elem;
    const uint64_t right = uint64_t(rightF.Get(name, kMte2, "rightPaddingNum")) * elem;
    const uint64_t srcGap = srcGapF.Get(name, kMte2, "srcGap"), dstGap = dstGapF.Get(name, kMte2, "dstGap");
    CheckRange(name, Pipe::MTE2, "nBurst", nBurst, 0, 4095);
    CheckRange(name, Pipe::MTE2, "lenBurst", len, 0, 2097151);
    if (len % elem) Raise(name, Pipe::MTE2, "lenBurst", len, "not a multiple of the element size");
    if (left > kBlock || right > kBlock) Raise(name, Pipe::MTE2, "padding", left + right, "more than 32 bytes");
    std::vector<Access> acc;
    if (nBurst == 0 || len == 0) return Report({name, Pipe::MTE2, acc});
    const uint64_t burstBlocks = Blocks(left + len + right);
    const uint64_t ubBytes = ((nBurst - 1) * (burstBlocks + dstGap) + burstBlocks) * kBlock;
    const uint64_t gmBytes = (nBurst - 1) * (len + srcGap) + len;
    uint8_t *out = OnChip(Space::UB, dst, ubBytes, kBlock, name, Pipe::MTE2, "dst");
    const uint8_t *in = Gm(src, gmBytes, name, Pipe::MTE2, "src");
    AddStrided(acc, Space::GM, uint64_t(reinterpret_cast<uintptr_t>(src)), nBurst, len, len + srcGap, false);
    AddStrided(acc, Space::UB, OnChipOffset(dst, name, Pipe::MTE2, "dst"), nBurst, burstBlocks * kBlock,
               (burstBlocks + dstGap) * kBlock, true);
    const bool padded = left != 0 || right != 0;
    Taint *shadow = ShadowAt(Space::UB, out); /* the padding and dummy bytes are written too */
    Execute({name, Pipe::MTE2, acc}, [=] {
        for (uint64_t i = 0; i < nBurst; ++i) {
            uint8_t *burst = out + i * (burstBlocks + dstGap) * kBlock;
            const uint8_t *from = in + i * (len + srcGap);
            for (uint64_t b = 0; b < burstBlocks * kBlock; ++b) burst[b] = padded ? kDummy[b % 4] : from[b % elem];
            std::memcpy(burst + left, from, len);
            if (shadow) Mark(shadow + (burst - out), burstBlocks * kBlock, kClean);
        }
    });
}

void UbToGm(const char *name, void *dst, void *src, uint32_t elem, const u8f &sid, const u16f &nBurstF,
            const u32f &lenF, const u8f &leftF, const u8f &rightF, const u32f &srcGapF, const u32f &dstGapF)
{
    (void)sid.Get(name, kMte3, "sid");
    const uint64_t nBurst = nBurstF.Get(name, kMte3, "nBurst"), len = lenF.Get(name, kMte3, "lenBurst");
    const uint64_t srcGap = srcGapF.Get(name, kMte3, "srcGap"), dstGap = dstGapF.Get(name, kMte3, "dstGap");
    if (leftF.Get(name, kMte3, "leftPaddingNum") || rightF.Get(name, kMte3, "rightPaddingNum")) {
        Raise(name, Pipe::MTE3, "padding", 1, "padding on a UB -> GM copy is not emulated");
    }
    CheckRange(name, Pipe::MTE3, "nBurst", nBurst, 0, 4095);
    CheckRange(name, Pipe::MTE3, "lenBurst", len, 0, 2097151);
    if (len % elem) Raise(name, Pipe::MTE3, "lenBurst", len, "not a multiple of the element size");
    std::vector<Access> acc;
    if (nBurst == 0 || len == 0) return Report({name, Pipe::MTE3, acc});
    const uint64_t burstBlocks = Blocks(len);
    const uint64_t ubBytes = ((nBurst - 1) * (burstBlocks + srcGap) + burstBlocks) * kBlock;
    const uint64_t gmBytes = (nBurst - 1) * (len + dstGap) + len;
    const uint8_t *in = OnChip(Space::UB, src, ubBytes, kBlock, name, Pipe::MTE3, "src");
    uint8_t *out = Gm(dst, gmBytes, name, Pipe::MTE3, "dst");
    const StoreAtomic atomic = LatchStoreAtomic(name, Pipe::MTE3, elem, false);
    AddStrided(acc, Space::UB, OnChipOffset(src, name, Pipe::MTE3, "src"), nBurst, burstBlocks * kBlock,
               (burstBlocks + srcGap) * kBlock, false);
    const uint64_t gmAt = uint64_t(reinterpret_cast<uintptr_t>(dst));
    if (atomic.op != StoreAtomicOp::None) AddStrided(acc, Space::GM, gmAt, nBurst, len, len + dstGap, false);
    AddStrided(acc, Space::GM, gmAt, nBurst, len, len + dstGap, true); /* an atomic store reads, then writes */
    const Taint *shadow = ShadowAt(Space::UB, in);
    Execute({name, Pipe::MTE3, acc}, [=] {
        for (uint64_t i = 0; i < nBurst; ++i) {
            if (shadow) Reads(name).Check(Pipe::MTE3, "src", Space::UB, shadow + i * (burstBlocks + srcGap) * kBlock, len, kToGm);
            StoreWithAtomic(atomic, out + i * (len + dstGap), in + i * (burstBlocks + srcGap) * kBlock, len, name,
                            Pipe::MTE3);
        }
    });
}

template <typename Value>
void Fill(const char *name, void *dst, int64_t config, Value value)
{
    const uint64_t cfg = uint64_t(config);
    const uint64_t repeat = cfg & 0x7fff, blocks = (cfg >> 16) & 0x7fff, gap = (cfg >> 32) & 0x7fff;
    if (cfg >> 47) Raise(name, Pipe::MTE2, "config", cfg, "bits above 46 are reserved");
    CheckRange(name, Pipe::MTE2, "config.repeat", repeat, 1, 32767);
    std::vector<Access> acc;
    const uint64_t bytes = ((repeat - 1) * (blocks + gap) + blocks) * kBlock;
    uint8_t *out = OnChip(Space::L1, dst, bytes, kBlock, name, Pipe::MTE2, "dst");
    acc.push_back({Space::L1, OnChipOffset(dst, name, Pipe::MTE2, "dst"), bytes, true});
    Taint *shadow = ShadowAt(Space::L1, out);
    Execute({name, Pipe::MTE2, acc}, [=] {
        for (uint64_t r = 0; r < repeat; ++r) {
            uint8_t *run = out + r * (blocks + gap) * kBlock;
            for (uint64_t b = 0; b < blocks * kBlock; b += sizeof(Value)) std::memcpy(run + b, &value, sizeof(Value));
            if (shadow) Mark(shadow + (run - out), blocks * kBlock, kClean);
        }
    });
}

}  // namespace
}  // namespace pa::emu

using namespace pa::emu;

void copy_gm_to_ubuf_align_b16(void *dst, void *src, u8f sid, u16f n, u32f len, u8f l, u8f r, u32f sg, u32f dg)
{
    GmToUb("copy_gm_to_ubuf_align_b16", dst, src, 2, sid, n, len, l, r, sg, dg);
}
void copy_gm_to_ubuf_align_b32(void *dst, void *src, u8f sid, u16f n, u32f len, u8f l, u8f r, u32f sg, u32f dg)
{
    GmToUb("copy_gm_to_ubuf_align_b32", dst, src, 4, sid, n, len, l, r, sg, dg);
}
void copy_ubuf_to_gm_align_b16(void *dst, void *src, u8f sid, u16f n, u32f len, u8f l, u8f r, u32f sg, u32f dg)
{
    UbToGm("copy_ubuf_to_gm_align_b16", dst, src, 2, sid, n, len, l, r, sg, dg);
}
void copy_ubuf_to_gm_align_b32(void *dst, void *src, u8f sid, u16f n, u32f len, u8f l, u8f r, u32f sg, u32f dg)
{
    UbToGm("copy_ubuf_to_gm_align_b32", dst, src, 4, sid, n, len, l, r, sg, dg);
}

void copy_ubuf_to_ubuf(void *dst, void *src, u8f sid, u16f nBurstF, u16f lenF, u16f srcGapF, u16f dstGapF)
{
    const char *name = "copy_ubuf_to_ubuf";
    (void)sid.Get(name, kV, "sid");
    const uint64_t n = nBurstF.Get(name, kV, "nBurst"), len = lenF.Get(name, kV, "lenBurst");
    const uint64_t sg = srcGapF.Get(name, kV, "srcGap"), dg = dstGapF.Get(name, kV, "dstGap");
    CheckRange(name, Pipe::V, "nBurst", n, 1, 4095);
    CheckRange(name, Pipe::V, "lenBurst", len, 1, 65535);
    const uint64_t srcBytes = ((n - 1) * (len + sg) + len) * kBlock, dstBytes = ((n - 1) * (len + dg) + len) * kBlock;
    const uint8_t *in = OnChip(Space::UB, src, srcBytes, kBlock, name, Pipe::V, "src");
    uint8_t *out = OnChip(Space::UB, dst, dstBytes, kBlock, name, Pipe::V, "dst");
    std::vector<Access> acc;
    AddStrided(acc, Space::UB, OnChipOffset(src, name, Pipe::V, "src"), n, len * kBlock, (len + sg) * kBlock, false);
    AddStrided(acc, Space::UB, OnChipOffset(dst, name, Pipe::V, "dst"), n, len * kBlock, (len + dg) * kBlock, true);
    const Taint *shadowIn = ShadowAt(Space::UB, in);
    Taint *shadowOut = ShadowAt(Space::UB, out);
    Execute({name, Pipe::V, acc}, [=] {
        std::vector<Taint> burst(shadowIn ? len * kBlock : 0);
        for (uint64_t i = 0; i < n; ++i) {
            std::memmove(out + i * (len + dg) * kBlock, in + i * (len + sg) * kBlock, len * kBlock);
            if (!shadowIn) continue;
            Reads(name).Copy(Space::UB, shadowIn + i * (len + sg) * kBlock, burst.data(), len * kBlock);
            std::copy(burst.begin(), burst.end(), shadowOut + i * (len + dg) * kBlock);
        }
    });
}

/* ND -> Nz: for matrix i, row j, 32-byte block k of the row, 32 bytes at src + i x srcNdMatrixStride +
 * j x srcDValue + 16k elements go to dst + i x dstNzMatrixStride elements + (j x dstNzNStride +
 * k x dstNzC0Stride) x 32 bytes; the last block of a row is zero-padded; rows >= nValue are not written. */
void copy_gm_to_cbuf_multi_nd2nz_b16(void *dst, void *src, u8f sid, u16f ndNumF, u16f nValueF, u16f dValueF,
                                     u16f srcNdStrideF, u16f srcDValueF, u16f c0StrideF, u16f nStrideF,
                                     u16f dstMatrixStrideF)
{
    const char *name = "copy_gm_to_cbuf_multi_nd2nz_b16";
    (void)sid.Get(name, kMte2, "sid");
    const uint64_t ndNum = ndNumF.Get(name, kMte2, "ndNum"), nValue = nValueF.Get(name, kMte2, "nValue");
    const uint64_t dValue = dValueF.Get(name, kMte2, "dValue"), srcNd = srcNdStrideF.Get(name, kMte2, "srcNdMatrixStride");
    const uint64_t srcD = srcDValueF.Get(name, kMte2, "srcDValue"), c0 = c0StrideF.Get(name, kMte2, "dstNzC0Stride");
    const uint64_t nStride = nStrideF.Get(name, kMte2, "dstNzNStride");
    const uint64_t dstNd = dstMatrixStrideF.Get(name, kMte2, "dstNzMatrixStride");
    CheckRange(name, Pipe::MTE2, "ndNum", ndNum, 0, 4095);
    CheckRange(name, Pipe::MTE2, "nValue", nValue, 0, 16384);
    std::vector<Access> acc;
    if (ndNum == 0 || nValue == 0 || dValue == 0) return Report({name, Pipe::MTE2, acc});
    CheckRange(name, Pipe::MTE2, "srcDValue", srcD, 1, 65535);
    CheckRange(name, Pipe::MTE2, "dstNzC0Stride", c0, 1, 16384);
    CheckRange(name, Pipe::MTE2, "dstNzNStride", nStride, 1, 16384);
    if (dValue > srcD) Raise(name, Pipe::MTE2, "dValue", dValue, "wider than the source row pitch srcDValue");
    constexpr uint64_t e = 2, perBlock = kBlock / e;
    const uint64_t rowBlocks = (dValue + perBlock - 1) / perBlock;
    const uint64_t gmBytes = ((ndNum - 1) * srcNd + (nValue - 1) * srcD + dValue) * e;
    const uint64_t l1Bytes = (ndNum - 1) * dstNd * e + ((nValue - 1) * nStride + (rowBlocks - 1) * c0 + 1) * kBlock;
    const uint8_t *in = Gm(src, gmBytes, name, Pipe::MTE2, "src");
    uint8_t *out = OnChip(Space::L1, dst, l1Bytes, kBlock, name, Pipe::MTE2, "dst");
    Taint *shadow = ShadowAt(Space::L1, out); /* the zero padding of a row's last block is written too */
    auto move = [=] {
        for (uint64_t i = 0; i < ndNum; ++i) {
            for (uint64_t j = 0; j < nValue; ++j) {
                for (uint64_t k = 0; k < rowBlocks; ++k) {
                    uint8_t *block = out + i * dstNd * e + (j * nStride + k * c0) * kBlock;
                    const uint64_t cols = (k + 1) * perBlock <= dValue ? perBlock : dValue - k * perBlock;
                    std::memset(block, 0, kBlock);
                    std::memcpy(block, in + (i * srcNd + j * srcD + k * perBlock) * e, cols * e);
                    if (shadow) Mark(shadow + (block - out), kBlock, kClean);
                }
            }
        }
    };
    const uint64_t gmAt = uint64_t(reinterpret_cast<uintptr_t>(src)), l1At = OnChipOffset(dst, name, Pipe::MTE2, "dst");
    for (uint64_t i = 0; i < ndNum; ++i) {
        AddStrided(acc, Space::GM, gmAt + i * srcNd * e, nValue, dValue * e, srcD * e, false);
        for (uint64_t k = 0; k < rowBlocks; ++k) {
            AddStrided(acc, Space::L1, l1At + i * dstNd * e + k * c0 * kBlock, nValue, kBlock, nStride * kBlock, true);
        }
    }
    Execute({name, Pipe::MTE2, acc}, move);
}

void create_cbuf_matrix(void *dst, int64_t config, _Float16 value) { Fill("create_cbuf_matrix", dst, config, value); }
void create_cbuf_matrix(void *dst, int64_t config, uint32_t value) { Fill("create_cbuf_matrix", dst, config, value); }
void create_cbuf_matrix_bf16(void *dst, int64_t config, bf16_t value)
{
    Fill("create_cbuf_matrix_bf16", dst, config, value);
}
