/*
 * Gaps of the pinned pto-isa cost-model headers (tilelang-ascend 0.1.4), filled for the A2/A3 compile check
 * (-D__COSTMODEL, kernel/npu/check_a2a3.sh).  Force-included before the kernel; nothing here is used by the
 * NPU build or the simulation.  Each entry says which gap it fills.  One more lives in pa_platform.hpp's
 * ScalarRead: the cost model's GetValue dereferences a raw on-chip offset, so that build reads no UB.
 */
#ifndef PA_COSTMODEL_SHIM_HPP
#define PA_COSTMODEL_SHIM_HPP

/* cce::printf for pto-isa's run-time asserts, pto-inst.hpp, and the A2/A3 implementations the cost-model include
 * list lacks (TEXPANDS, the row-expand binary ops): shared with the emulator build. */
#include "emu/emu_prelude.hpp"

/* The cost model stubs get_subblockid but not the device's get_block_idx builtin: a compile check needs only
 * its type. */
inline int64_t get_block_idx() { return 0; }

#endif /* PA_COSTMODEL_SHIM_HPP */
