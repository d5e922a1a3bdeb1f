/*
 * Run-time choice of the SIMD path: the fastest one this CPU supports (AVX-512, AVX2, portable), or the one a
 * binding asks for (the native AVX512-BF16 path, or a fallback; a path the CPU lacks is refused).
 * The library is built with portable flags; the SIMD files carry their own target pragmas.
 */
#include "mock_internal.h"

static int cpu_has_avx512(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx2") &&
           __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
    return 0;
#endif
}

static int cpu_has_avx512bf16(void) {
#if defined(__x86_64__)
    return cpu_has_avx512() && __builtin_cpu_supports("avx512bf16");
#else
    return 0;
#endif
}

static int cpu_has_avx2(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
    return 0;
#endif
}

/* AUTO: the exact AVX-512 path before the native one.  VDPBF16PS was measured at ~1.9 cycles per instruction on
 * the Xeon hosts this runs on (an fp32 FMA: 0.5), so per multiply-add it costs twice the widen-and-FMA path
 * (kernel/mock/PERFORMANCE.md, step 22); the native path is there to be chosen where it is faster. */
int32_t pa_math_best_isa(void) {
    if (cpu_has_avx512()) {
        return PA_MOCK_ISA_AVX512;
    }
    if (cpu_has_avx2()) {
        return PA_MOCK_ISA_AVX2;
    }
    return PA_MOCK_ISA_PORTABLE;
}

const pa_math_ops *pa_math_select(int32_t isa) {
    if (isa == PA_MOCK_ISA_AUTO) {
        isa = pa_math_best_isa();
    }
    switch (isa) {
    case PA_MOCK_ISA_PORTABLE:
        return &pa_math_portable;
#if defined(__x86_64__)
    case PA_MOCK_ISA_AVX2:
        return cpu_has_avx2() ? &pa_math_avx2 : 0;
    case PA_MOCK_ISA_AVX512:
        return cpu_has_avx512() ? &pa_math_avx512 : 0;
    case PA_MOCK_ISA_AVX512BF16:
        return cpu_has_avx512bf16() ? &pa_math_avx512bf16 : 0;
#endif
    default:
        return 0;
    }
}

PA_EXPORT int32_t pa_mock_isa_available(int32_t isa) { return pa_math_select(isa) != 0; }

PA_EXPORT int32_t pa_mock_best_isa(void) { return pa_math_best_isa(); }
