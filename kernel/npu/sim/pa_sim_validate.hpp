/* Host-side contract checks of the simulation before a launch (see pa_sim_validate.cpp). */
#ifndef PA_SIM_VALIDATE_HPP
#define PA_SIM_VALIDATE_HPP

#include "pa_sim_runtime.hpp"

namespace pa::sim {
/* PA_OK, or a PA_ERR_* code with *e filled. */
int32_t ValidateLaunch(uint32_t blockDim, void *const *ptr, const Launch &L, pa_mock_error *e);
}  // namespace pa::sim

#endif /* PA_SIM_VALIDATE_HPP */
