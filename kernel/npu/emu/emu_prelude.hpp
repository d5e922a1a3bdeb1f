/*
 * Force-included first wherever the kernel is compiled against pto-isa's A2/A3 implementations on a host (the
 * emulator build, the differential harnesses, and through a2a3/pa_costmodel_shim.hpp the A2/A3 compile check):
 * what pto-isa's A2/A3 code expects from the device toolchain besides the intrinsics.
 */
#ifndef PA_EMU_PRELUDE_HPP
#define PA_EMU_PRELUDE_HPP

#include <cstdio>

/* pto-isa's run-time asserts print through the device's cce::printf. */
namespace cce {
template <typename... Args>
inline void printf(const char *fmt, Args... args)
{
    std::fprintf(stderr, fmt, args...);
}
}  // namespace cce

#include <pto/pto-inst.hpp>

/* The cost-model include list of the pinned pto-isa lacks these A2/A3 implementations (the device build's
 * list has them): TEXPANDS, the row-expand binary ops and TCOLEXPANDSUB. */
#include <pto/npu/a2a3/TExpandS.hpp>
#include <pto/npu/a2a3/TRowExpandDiv.hpp>
#include <pto/npu/a2a3/TRowExpandMul.hpp>
#include <pto/npu/a2a3/TRowExpandSub.hpp>
#include <pto/npu/a2a3/TColExpandSub.hpp>

#endif /* PA_EMU_PRELUDE_HPP */
