/*
 * Run-time choice of the SIMD path: the widest one this CPU supports, or the one a binding asks for.
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

static int cpu_has_avx2(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
    return 0;
#endif
}

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
#endif
    default:
        return 0;
    }
}

PA_EXPORT int32_t pa_mock_isa_available(int32_t isa) { return pa_math_select(isa) != 0; }

PA_EXPORT int32_t pa_mock_best_isa(void) { return pa_math_best_isa(); }
