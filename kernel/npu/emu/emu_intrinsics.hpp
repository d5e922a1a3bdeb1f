/*
 * The A2/A3 (dav-c220) CCE intrinsics the emulator executes, declared with the device builtins' parameter
 * order and C types (SEMANTICS.md gives each row and its sources).  Every one is an out-of-line function
 * defined in the emulator's .cpp files, so `nm -u` of code compiled against this header lists exactly the
 * intrinsics that code reaches (COVERAGE.txt).
 *
 * Integer fields are declared as Field<T> of the device type T: the value converts implicitly, as it would
 * to the builtin's parameter, but the emulator sees the value before the conversion and faults when it does
 * not fit T, where the device would silently keep the low bits.
 *
 * Every other intrinsic pto-isa's A2/A3 headers name is declared by the generated emu_unemulated.hpp (build
 * directory) as a stub that faults when executed; the coverage test fails when the kernel instantiates one.
 * The __ubuf__/__cbuf__/... qualifiers are empty in this build (pto-isa's cost-model qualifiers.hpp).
 */
#ifndef PA_EMU_INTRINSICS_HPP
#define PA_EMU_INTRINSICS_HPP

#include <concepts>
#include <cstdint>
#include <type_traits>

namespace pa::emu {

/* An integer argument bound for a device field of type T, with the caller's value kept for the check. */
template <typename T>
struct Field {
    uint64_t raw;
    bool negative;
    template <typename U>
        requires(std::is_integral_v<U> || std::is_enum_v<U>)
    Field(U value) : raw(static_cast<uint64_t>(value)), negative(false)  // NOLINT: implicit, like the builtin
    {
        if constexpr (std::is_signed_v<U>) negative = value < 0;
    }
    /* The value as the field holds it; fault if the caller's value does not fit T. */
    T Get(const char *intrinsic, int pipe, const char *name) const;
};

}  // namespace pa::emu

using pa::emu::Field;
/* The device's bf16: the C++23 std::bfloat16_t, as pto-isa's bfloat16_t is in this build (-D__STDCPP_BFLOAT16_T__
 * with <stdfloat>); the emulator only moves its bits and converts them itself (emu_numeric.hpp). */
#include <stdfloat>
using bf16_t = std::bfloat16_t;
using u8f = Field<uint8_t>;
using u16f = Field<uint16_t>;
using u32f = Field<uint32_t>;

/* Constants and enums pto-isa's A2/A3 code names (the device compiler's builtin values where they matter). */
namespace pto {
enum QuantMode_t {
    NoQuant = 0, F322F16 = 1, VREQ8 = 2, REQ8 = 3, VDEQF16 = 4, DEQF16 = 5, VSHIFTS322S16 = 12, SHIFTS322S16 = 13,
    F322BF16 = 16, VQF322B8_PRE = 23, QF322B8_PRE = 24, QF322HIF8_PRE = 25, QF322FP8_PRE = 26, QF322F32_PRE = 27,
    VQF322HIF8_PRE = 28, QF322F16_PRE = 32, VQF322F16_PRE = 33, QF322BF16_PRE = 34, QS322BF16_PRE = 35,
    VQF322BF16_PRE = 36, VQF322FP8_PRE = 37, VQF322F32_PRE = 38, VQS322BF16_PRE = 39,
};
}  // namespace pto
constexpr int DSB_UB = 0;
constexpr int ONLY_VALUE = 0;
constexpr int VALUE_INDEX_ORDER = 1;
constexpr int PIPE_FIX = 7; /* its own pipe (pto-isa's cost model aliases it to PIPE_S) */
constexpr int VA0 = 0, VA1 = 1, VA2 = 2, VA3 = 3, VA4 = 4, VA5 = 5, VA6 = 6, VA7 = 7;
enum addr_cal_mode_emu { inc = 0, dec = 1 };

/* ---- MTE2: global memory -> L1, L1 fill, global memory -> UB (SEMANTICS.md "DMA") -------------------------- */
void copy_gm_to_cbuf_multi_nd2nz_b16(void *dst, void *src, u8f sid, u16f ndNum, u16f nValue, u16f dValue,
                                     u16f srcNdMatrixStride, u16f srcDValue, u16f dstNzC0Stride, u16f dstNzNStride,
                                     u16f dstNzMatrixStride);
void create_cbuf_matrix(void *dst, int64_t config, _Float16 value);
void create_cbuf_matrix(void *dst, int64_t config, uint32_t value);
void create_cbuf_matrix_bf16(void *dst, int64_t config, bf16_t value);
void copy_gm_to_ubuf_align_b16(void *dst, void *src, u8f sid, u16f nBurst, u32f lenBurst, u8f leftPaddingNum,
                               u8f rightPaddingNum, u32f srcGap, u32f dstGap);
void copy_gm_to_ubuf_align_b32(void *dst, void *src, u8f sid, u16f nBurst, u32f lenBurst, u8f leftPaddingNum,
                               u8f rightPaddingNum, u32f srcGap, u32f dstGap);

/* ---- MTE3: UB -> global memory; V: UB -> UB --------------------------------------------------------------- */
void copy_ubuf_to_gm_align_b16(void *dst, void *src, u8f sid, u16f nBurst, u32f lenBurst, u8f leftPaddingNum,
                               u8f rightPaddingNum, u32f srcGap, u32f dstGap);
void copy_ubuf_to_gm_align_b32(void *dst, void *src, u8f sid, u16f nBurst, u32f lenBurst, u8f leftPaddingNum,
                               u8f rightPaddingNum, u32f srcGap, u32f dstGap);
void copy_ubuf_to_ubuf(void *dst, void *src, u8f sid, u16f nBurst, u16f lenBurst, u16f srcGap, u16f dstGap);

/* ---- MTE1: L1 -> L0A / L0B -------------------------------------------------------------------------------- */
void set_fmatrix(uint64_t config);
void set_fmatrix_b(uint64_t config);
void img2colv2_cbuf_to_ca(void *dst, void *src, u16f kExtension, u16f mExtension, u16f kStartPt, u16f mStartPt,
                          u8f strideW, u8f strideH, u8f filterW, u8f filterH, u8f dilationFilterW,
                          u8f dilationFilterH, bool filterSizeW, bool filterSizeH, bool transpose, bool fmatrixCtrl,
                          u16f channelSize);
void img2colv2_cbuf_to_cb(void *dst, void *src, u16f kExtension, u16f mExtension, u16f kStartPt, u16f mStartPt,
                          u8f strideW, u8f strideH, u8f filterW, u8f filterH, u8f dilationFilterW,
                          u8f dilationFilterH, bool filterSizeW, bool filterSizeH, bool transpose, bool fmatrixCtrl,
                          u16f channelSize);
void load_cbuf_to_cb(void *dst, void *src, u16f baseIdx, u8f repeat, u16f srcStride, u16f dstGap, u8f sid,
                     bool transpose, int addrCalMode);

/* ---- M: the cube; FIX: L0C -> global memory --------------------------------------------------------------- */
void mad(float *c, _Float16 *a, _Float16 *b, u16f m, u16f k, u16f n, u8f unitFlag, bool kDirectionAlign,
         bool cmatrixSource, bool cmatrixInitVal);
void mad(float *c, bf16_t *a, bf16_t *b, u16f m, u16f k, u16f n, u8f unitFlag, bool kDirectionAlign,
         bool cmatrixSource, bool cmatrixInitVal);
void set_nd_para(uint64_t config);
void copy_matrix_cc_to_gm(void *dst, void *src, uint64_t xm, uint64_t xt);

/* ---- V: vector arithmetic, reductions, broadcast, conversions (SEMANTICS.md "Vector") --------------------- */
#define PA_EMU_BINARY(name)                                                                                      \
    void name(float *dst, float *src0, float *src1, u8f repeat, u8f dstBlockStride, u8f src0BlockStride,         \
              u8f src1BlockStride, u8f dstRepeatStride, u8f src0RepeatStride, u8f src1RepeatStride);             \
    void name(_Float16 *dst, _Float16 *src0, _Float16 *src1, u8f repeat, u8f dstBlockStride, u8f src0BlockStride, \
              u8f src1BlockStride, u8f dstRepeatStride, u8f src0RepeatStride, u8f src1RepeatStride);
PA_EMU_BINARY(vadd)
PA_EMU_BINARY(vsub)
PA_EMU_BINARY(vmul)
PA_EMU_BINARY(vmax)
PA_EMU_BINARY(vdiv)
#undef PA_EMU_BINARY
#define PA_EMU_SCALAR(name)                                                                                       \
    void name(float *dst, float *src, float scalar, u8f repeat, u16f dstBlockStride, u16f srcBlockStride,         \
              u8f dstRepeatStride, u8f srcRepeatStride);                                                          \
    void name(_Float16 *dst, _Float16 *src, _Float16 scalar, u8f repeat, u16f dstBlockStride, u16f srcBlockStride, \
              u8f dstRepeatStride, u8f srcRepeatStride);
PA_EMU_SCALAR(vadds)
PA_EMU_SCALAR(vmuls)
#undef PA_EMU_SCALAR
#define PA_EMU_UNARY(name)                                                                                       \
    void name(float *dst, float *src, u8f repeat, u16f dstBlockStride, u16f srcBlockStride, u8f dstRepeatStride,  \
              u8f srcRepeatStride);                                                                              \
    void name(_Float16 *dst, _Float16 *src, u8f repeat, u16f dstBlockStride, u16f srcBlockStride,                \
              u8f dstRepeatStride, u8f srcRepeatStride);
PA_EMU_UNARY(vexp)
PA_EMU_UNARY(vln)
#undef PA_EMU_UNARY
void vcmax(float *dst, float *src, u8f repeat, u16f dstRepeatStride, u16f srcBlockStride, u16f srcRepeatStride,
           int order);
void vcadd(float *dst, float *src, u8f repeat, u16f dstRepeatStride, u16f srcBlockStride, u16f srcRepeatStride,
           bool mode);
void vbrcb(uint32_t *dst, uint32_t *src, u16f dstBlockStride, u16f dstRepeatStride, u8f repeat);
void vbrcb(float *dst, float *src, u16f dstBlockStride, u16f dstRepeatStride, u8f repeat);
void vector_dup(float *dst, float scalar, u8f repeat, u16f dstBlockStride, u16f srcBlockStride,
                u8f dstRepeatStride, u8f srcRepeatStride);
void vector_dup(_Float16 *dst, _Float16 scalar, u8f repeat, u16f dstBlockStride, u16f srcBlockStride,
                u8f dstRepeatStride, u8f srcRepeatStride);
void vector_dup(bf16_t *dst, bf16_t scalar, u8f repeat, u16f dstBlockStride, u16f srcBlockStride,
                u8f dstRepeatStride, u8f srcRepeatStride);
void vector_dup(uint16_t *dst, uint16_t scalar, u8f repeat, u16f dstBlockStride, u16f srcBlockStride,
                u8f dstRepeatStride, u8f srcRepeatStride);
void vconv_f322f16r(_Float16 *dst, float *src, u8f repeat, u16f dstBlockStride, u16f srcBlockStride,
                    u8f dstRepeatStride, u8f srcRepeatStride);
void vconv_f322bf16r(bf16_t *dst, float *src, u8f repeat, u16f dstBlockStride, u16f srcBlockStride,
                     u8f dstRepeatStride, u8f srcRepeatStride);
void vconv_f162f32(float *dst, _Float16 *src, u8f repeat, u16f dstBlockStride, u16f srcBlockStride,
                   u8f dstRepeatStride, u8f srcRepeatStride);
void vconv_bf162f32(float *dst, bf16_t *src, u8f repeat, u16f dstBlockStride, u16f srcBlockStride,
                    u8f dstRepeatStride, u8f srcRepeatStride);
void vconv_f322s32r(int32_t *dst, float *src, u8f repeat, u16f dstBlockStride, u16f srcBlockStride,
                    u8f dstRepeatStride, u8f srcRepeatStride);

/* ---- store atomics: what later GM stores (MTE3, FIX) do with GM's contents (SEMANTICS.md "Store atomics") -- */
void set_atomic_none();
void set_atomic_add();
void set_atomic_max();
void set_atomic_min();
void set_atomic_f32();
void set_atomic_f16();
void set_atomic_bf16();
void set_atomic_s32();
void set_atomic_s16();
void set_atomic_s8();

/* ---- control: vector mask, CTRL, flags, barriers, cross-core sync, core ids ------------------------------- */
void set_mask_count();
void set_mask_norm();
void set_vector_mask(uint64_t maskHigh, uint64_t maskLow);
int64_t get_ctrl();
void set_ctrl(uint64_t config);
int64_t sbitset0(int64_t value, int64_t bit);
int64_t sbitset1(int64_t value, int64_t bit);
void pipe_barrier(int pipe);
void set_flag(int srcPipe, int dstPipe, int event);
void wait_flag(int srcPipe, int dstPipe, int event);
void ffts_cross_core_sync(int pipe, uint64_t config);
void wait_flag_dev(int64_t flagId);
void set_ffts_base_addr(uint64_t address);
int64_t get_block_idx();
int64_t get_subblockid();

#endif /* PA_EMU_INTRINSICS_HPP */
