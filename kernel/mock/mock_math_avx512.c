/*
 * AVX-512 (F + BW + VL) path of the mock's arithmetic: one zmm register per 16-lane vector.  Compiled with a
 * target pragma, so the library itself stays portable; mock_dispatch.c calls it only when the CPU has it.
 */
#include "mock_math.h"

#if defined(__x86_64__)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")
#include "mock_avx512_prims.h"

#define PA_SIMD_TABLE pa_math_avx512
#define PA_SIMD_NAME "avx512"
#include "mock_simd_body.h"

#endif /* __x86_64__ */
