/*
 * NPU build of the pa-kit kernel (build_npu.sh, CANN bisheng -xcce, dav-c220): the device code of
 * pa_kernel.cpp plus the ABI host exports.  call_kernel fetches the cross-core flag (FFTS) control
 * address from the runtime and launches the mixed kernel with the compiler's <<<>>> host stub.
 *
 * Not compiled or run on our CPU machines (no CANN there): verified only through the CPU simulation of the
 * same kernel source.  Expect to fix intrinsic spellings on first contact with a real toolkit.
 */
#include "pa_kernel.cpp"

#include "runtime/rt.h"

/* Parameter lists from the ABI's one X-macro (kernel/pa_kernel_abi.h, PA_PTR_ARGS). */
#define PA_HOST_PARAM(name) , uint8_t *name
#define PA_HOST_ARG(name) name,
#define PA_HOST_UNUSED(name) (void)name;

extern "C" {

int32_t pa_abi_version(void) { return PA_ABI_VERSION; }

uint32_t pa_supported_keys(void) { return PA_SUPPORTED_KEYS_ALL; }

uint32_t pa_supported_features(void) { return PA_NPU_KERNEL_FEATURES; }

int32_t call_kernel(uint32_t block_dim, void *stream PA_PTR_ARGS(PA_HOST_PARAM))
{
    if (block_dim == 0) return PA_ERR_BAD_LAUNCH;
    uint64_t ffts = 0;
    uint32_t fftsLen = 0;
    if (rtGetC2cCtrlAddr(&ffts, &fftsLen) != RT_ERROR_NONE) return PA_ERR_INTERNAL;
    pa_decode_kernel<<<block_dim, nullptr, stream>>>(PA_PTR_ARGS(PA_HOST_ARG) block_dim, ffts);
    return PA_OK;
}

int32_t call_kernel_noop(uint32_t block_dim, void *stream PA_PTR_ARGS(PA_HOST_PARAM))
{
    (void)block_dim;
    (void)stream;
    PA_PTR_ARGS(PA_HOST_UNUSED)
    return PA_OK;
}

}  // extern "C"
