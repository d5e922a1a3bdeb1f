/*
 * NPU build of the pa-kit kernel (build_npu.sh, CANN bisheng -xcce, dav-c220): the device code of
 * pa_kernel.cpp plus the ABI v1 host exports.  call_kernel fetches the cross-core flag (FFTS) control
 * address from the runtime and launches the mixed kernel with the compiler's <<<>>> host stub.
 *
 * Not compiled or run on our CPU machines (no CANN there): verified only through the CPU simulation of the
 * same kernel source.  Expect to fix intrinsic spellings on first contact with a real toolkit.
 */
#include "pa_kernel.cpp"

#include "runtime/rt.h"

#define PA_HOST_PARAMS                                                                                         \
    uint8_t *q, uint8_t *k, uint8_t *v, uint8_t *block_tables, uint8_t *mask, uint8_t *deq_scale1,             \
        uint8_t *deq_offset1, uint8_t *deq_scale2, uint8_t *deq_offset2, uint8_t *razor_offset, uint8_t *scale, \
        uint8_t *logn, uint8_t *eye, uint8_t *o, uint8_t *s, uint8_t *p, uint8_t *o_tmp, uint8_t *go,           \
        uint8_t *o_core, uint8_t *l, uint8_t *k16, uint8_t *v16, uint8_t *tiling

extern "C" {

int32_t pa_abi_version(void) { return PA_ABI_VERSION; }

uint32_t pa_supported_keys(void) { return PA_SUPPORTED_KEYS_ALL; }

int32_t call_kernel(uint32_t block_dim, void *stream, PA_HOST_PARAMS)
{
    if (block_dim == 0) return PA_ERR_BAD_LAUNCH;
    uint64_t ffts = 0;
    uint32_t fftsLen = 0;
    if (rtGetC2cCtrlAddr(&ffts, &fftsLen) != RT_ERROR_NONE) return PA_ERR_INTERNAL;
    pa_decode_kernel<<<block_dim, nullptr, stream>>>(q, k, v, block_tables, mask, deq_scale1, deq_offset1, deq_scale2,
                                                      deq_offset2, razor_offset, scale, logn, eye, o, s, p, o_tmp,
                                                      go, o_core, l, k16, v16, tiling, block_dim, ffts);
    return PA_OK;
}

int32_t call_kernel_noop(uint32_t block_dim, void *stream, PA_HOST_PARAMS)
{
    (void)block_dim;
    (void)stream;
    (void)q, (void)k, (void)v, (void)block_tables, (void)mask, (void)deq_scale1, (void)deq_offset1;
    (void)deq_scale2, (void)deq_offset2, (void)razor_offset, (void)scale, (void)logn, (void)eye, (void)o;
    (void)s, (void)p, (void)o_tmp, (void)go, (void)o_core, (void)l, (void)k16, (void)v16, (void)tiling;
    return PA_OK;
}

}  // extern "C"
