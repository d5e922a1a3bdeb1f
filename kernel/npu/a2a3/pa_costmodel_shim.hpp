/*
 * Gaps of the pinned pto-isa cost-model headers (tilelang-ascend 0.1.4), filled for the A2/A3 compile check
 * (-D__COSTMODEL, kernel/npu/check_a2a3.sh).  Force-included before the kernel; nothing here is used by the
 * NPU build or the simulation.  Each entry says which gap it fills.  One more lives in pa_platform.hpp's
 * ScalarRead: the cost model's GetValue dereferences a raw on-chip offset, so that build reads no UB.
 */
#ifndef PA_COSTMODEL_SHIM_HPP
#define PA_COSTMODEL_SHIM_HPP

#include <cstdio>
#include <cstdlib>

/* With _DEBUG, pto-isa's run-time asserts (PTO_ASSERT) print through the device's cce::printf and stop the
 * core with trap(); the cost model has trap() but no cce::printf. */
namespace cce {
template <typename... Args>
inline void printf(const char *fmt, Args... args)
{
    std::fprintf(stderr, fmt, args...);
}
}  // namespace cce

#include <pto/pto-inst.hpp>

/* pto_instr_impl.hpp's __COSTMODEL include list lacks these A2/A3 implementations, so TEXPANDS and the
 * row-expand binary ops would not find their *_IMPL (the full list includes them for the device build). */
#include <pto/npu/a2a3/TExpandS.hpp>
#include <pto/npu/a2a3/TRowExpandDiv.hpp>
#include <pto/npu/a2a3/TRowExpandMul.hpp>
#include <pto/npu/a2a3/TRowExpandSub.hpp>

/* The cost model stubs get_subblockid but not the device's get_block_idx builtin: a compile check needs only
 * its type. */
inline int64_t get_block_idx() { return 0; }

#endif /* PA_COSTMODEL_SHIM_HPP */
