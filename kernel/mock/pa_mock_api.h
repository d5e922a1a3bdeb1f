/*
 * Mock-device exports beyond kernel ABI v1 (kernel/pa_kernel_abi.h).  The launcher mirrors these structs in
 * launcher/mock_api.py (ctypes); tests/test_abi_mirror.py checks sizes and field offsets.
 *
 * Protocol per launch (both calls on the same host thread):
 *   pa_mock_bind(&config);      extents of the buffers about to be passed, num_blocks, checked mode
 *   call_kernel(block_dim, stream, ...);   returns PA_OK or PA_ERR_*; on error pa_mock_last_error()
 * The binding and the last error are thread-local, so runners on different host threads do not interfere.
 */
#ifndef PA_MOCK_API_H
#define PA_MOCK_API_H

#include <stdint.h>
#include "../pa_kernel_abi.h"

typedef struct pa_mock_config {
    uint64_t extent_bytes[PA_NUM_PTR_ARGS]; /* bytes behind each pointer slot; 0 for a NULL slot         */
    int64_t num_blocks;                     /* pages in the K/V cache: block ids are checked in any mode */
    int32_t checked;                        /* 1: every buffer access is bounds-checked (default)        */
    int32_t num_threads;                    /* host worker threads; 0 = as many as CPUs                  */
} pa_mock_config;

#define PA_MOCK_MESSAGE_BYTES 256

typedef struct pa_mock_error {
    int32_t code;            /* PA_ERR_*                                                                  */
    int32_t arg_slot;        /* PA_ARG_* of the buffer, -1 if none                                        */
    int64_t element_offset;  /* offending element offset in the slot's element type                      */
    int64_t extent_elems;    /* the buffer's extent in the same unit                                      */
    int32_t core;            /* block_idx of the logical core, -1 if none                                 */
    int32_t seq;             /* sequence (slot) index, -1 if none                                         */
    int32_t head;            /* q head, -1 if none                                                        */
    int32_t split;           /* KV split index, -1 if none                                                */
    char message[PA_MOCK_MESSAGE_BYTES]; /* NUL-terminated human-readable description                     */
} pa_mock_error;

#ifdef __cplusplus
extern "C" {
#endif
int32_t pa_mock_bind(const pa_mock_config *config);   /* PA_OK; the struct must outlive the next call     */
int32_t pa_mock_last_error(pa_mock_error *out);        /* copies the calling thread's last error record    */
/* Read bandwidth of this host in GB/s (1e9 bytes/s): `threads` threads (0 = CPUs) sum a `bytes` buffer,
 * best of `reps` passes after one warm pass.  The benchmark's physical limit on the mock. */
double pa_mock_read_bandwidth_gbs(uint64_t bytes, int32_t threads, int32_t reps);
#ifdef __cplusplus
}
#endif

#endif /* PA_MOCK_API_H */
