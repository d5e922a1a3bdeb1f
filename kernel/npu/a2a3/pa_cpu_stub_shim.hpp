/*
 * The CCE intrinsics the kernel's platform layer calls that pto-isa's CPU stub (pto/common/cpu_stub.hpp) does not
 * define, as no-ops, for the two builds of our sources against pto-isa's CPU implementations: check_a2a3.sh's
 * C++17 syntax check and the emulator's differential oracle (emu/build_emu.sh, emu_diff/), which runs one core's
 * tile operations in program order, so cross-core flags and mode state have nothing to do (the stub's own
 * set_flag/wait_flag do nothing either).
 */
#ifndef PA_CPU_STUB_SHIM_HPP
#define PA_CPU_STUB_SHIM_HPP

inline void set_ffts_base_addr(unsigned long) {}
inline unsigned long get_ctrl() { return 0; }
inline void set_ctrl(unsigned long) {}
inline unsigned long sbitset1(unsigned long x, long bit) { return x | (1UL << bit); }
inline void set_atomic_none() {}
inline void ffts_cross_core_sync(int, unsigned long) {}
inline void wait_flag_dev(long) {}
inline void set_mask_norm() {}
inline void set_vector_mask(unsigned long, unsigned long) {}

/* Data moves the platform layer calls itself (pa_platform.hpp SpreadToBlocks, PickBlocks), on host memory with the
 * device's semantics, so the differential oracle computes what the emulator does. */
template <typename E>
inline void vbrcb(E *dst, E *src, unsigned dstBlockStride, unsigned dstRepeatStride, unsigned repeat)
{
    static_assert(sizeof(E) == 4, "vbrcb of 32-bit elements");
    for (unsigned r = 0; r < repeat; ++r)
        for (unsigned j = 0; j < 8; ++j)
            for (unsigned lane = 0; lane < 8; ++lane)
                dst[(r * dstRepeatStride + j * dstBlockStride) * 8 + lane] = src[r * 8 + j];
}
inline void copy_ubuf_to_ubuf(void *dst, void *src, unsigned, unsigned nBurst, unsigned lenBurst, unsigned srcGap,
                              unsigned dstGap)
{
    auto *d = static_cast<unsigned char *>(dst);
    auto *s = static_cast<unsigned char *>(src);
    for (unsigned b = 0; b < nBurst; ++b)
        for (unsigned k = 0; k < lenBurst * 32; ++k) d[b * (lenBurst + dstGap) * 32 + k] = s[b * (lenBurst + srcGap) * 32 + k];
}

#endif /* PA_CPU_STUB_SHIM_HPP */
