/*
 * Run-time choice of the SIMD path: the fastest one this CPU supports (AMX; AVX512-BF16 on AMD; AVX-512, AVX2,
 * portable; NEON on aarch64, where AdvSIMD is part of the architecture), or the one a binding asks for (a native path, or a fallback; a path the CPU lacks is refused).
 * The library is built with portable flags; the SIMD files carry their own target pragmas.
 */
#include "mock_internal.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define PA_ARCH_REQ_XCOMP_PERM 0x1023 /* <asm/prctl.h> */
#define PA_XFEATURE_XTILEDATA 18
#endif

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

#if defined(__x86_64__)
/* *answer (-1: not asked yet), else ask() stored there: a question asked once per process, since AUTO is
 * resolved at every launch and CPUID exits to the hypervisor in a virtual machine (microseconds). */
static int asked_once(int *answer, int (*ask)(void)) {
    int known = __atomic_load_n(answer, __ATOMIC_ACQUIRE);
    if (known < 0) {
        known = ask();
        __atomic_store_n(answer, known, __ATOMIC_RELEASE);
    }
    return known;
}

static int ask_amx(void) {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return cpu_has_avx512() && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 24 & 1u) && (d >> 22 & 1u) &&
           syscall(SYS_arch_prctl, PA_ARCH_REQ_XCOMP_PERM, PA_XFEATURE_XTILEDATA) == 0;
}

/* vendor "AuthenticAMD" in EBX, EDX, ECX of CPUID leaf 0 */
static int ask_amd(void) {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(0, &a, &b, &c, &d) && b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;
}
#endif

/* AMX-TILE and AMX-BF16 (CPUID leaf 7: EDX bits 24 and 22), and the kernel's leave to use the tile data
 * (Linux asks each process to request it: arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA, once). */
static int cpu_has_amx(void) {
#if defined(__x86_64__)
    static int answer = -1;
    return asked_once(&answer, ask_amx);
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

/* 1 on AMD CPUs, whose VDPBF16PS runs at the fp32 FMA's instruction rate (0.128 against 0.117 ns per zmm
 * instruction on an EPYC Zen 5 host: twice the multiply-adds per cycle), else 0. */
static int cpu_is_amd(void) {
#if defined(__x86_64__)
    static int answer = -1;
    return asked_once(&answer, ask_amd);
#else
    return 0;
#endif
}

/* AUTO: AMX where the CPU has it (bf16 Q.K and P.V as tile products: MLA at 128 heads 3x faster than AVX-512,
 * GQA decode a few per cent, since it is bound by the KV read; fp16 launches run the AVX-512 code on it); then
 * AVX512-BF16 on AMD CPUs (bf16 Q.K and P.V ~1.5x faster than AVX-512 on an EPYC Zen 5 host, GQA decode from DRAM
 * ~10 % faster); else the widest exact path.  On the Xeon hosts measured, VDPBF16PS took ~1.9 cycles per
 * instruction (an fp32 FMA: 0.5), half the widen-and-FMA path's multiply-adds per cycle, so AVX512-BF16 is not
 * chosen there (kernel/mock/PERFORMANCE.md, steps 22, 23 and 27). */
int32_t pa_math_best_isa(void) {
    if (cpu_has_amx()) {
        return PA_MOCK_ISA_AMX;
    }
    if (cpu_has_avx512bf16() && cpu_is_amd()) {
        return PA_MOCK_ISA_AVX512BF16;
    }
    if (cpu_has_avx512()) {
        return PA_MOCK_ISA_AVX512;
    }
    if (cpu_has_avx2()) {
        return PA_MOCK_ISA_AVX2;
    }
#if defined(__aarch64__)
    return PA_MOCK_ISA_NEON;
#else
    return PA_MOCK_ISA_PORTABLE;
#endif
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
    case PA_MOCK_ISA_AMX:
        return cpu_has_amx() ? &pa_math_amx : 0;
#endif
#if defined(__aarch64__)
    case PA_MOCK_ISA_NEON:
        return &pa_math_neon;
#endif
    default:
        return 0;
    }
}

PA_EXPORT int32_t pa_mock_isa_available(int32_t isa) { return pa_math_select(isa) != 0; }

PA_EXPORT int32_t pa_mock_best_isa(void) { return pa_math_best_isa(); }
