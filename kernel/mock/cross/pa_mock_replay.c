/*
 * Replays one launch of the mock from a file and writes every buffer back, so that a build of libpa_mock.so for
 * another CPU (aarch64, run under qemu-user on an x86 CI host) executes exactly the launches the Python tests
 * build on this one; the tests then judge the outputs with the project's float64 golden (tests/qemu_mock.py).
 *
 *   pa_mock_replay IN OUT     IN: the launch (format below); OUT: the result
 *   pa_mock_replay --isas     prints "best B" and one line "isa I available A" per PA_MOCK_ISA_* path
 *
 * IN  : "PAMOCKR1", u32 block_dim, u32 sizeof(pa_mock_config), the pa_mock_config's bytes, then per pointer slot
 *       (PA_NUM_PTR_ARGS of them) u32 kind, u64 bytes and, for kind 1, that many bytes.  Kind 0: NULL; 1: its own
 *       buffer; 2 + j: the same pointer as slot j < this one (MLA passes the latent cache as both K and V, and the
 *       mock requires the two pointers equal).
 * OUT : "PAMOCKW1", i32 return code, u32 sizeof(pa_mock_error), the pa_mock_error's bytes, then the bytes of every
 *       kind-1 slot after the launch, in slot order.
 * Both hosts are little-endian LP64, so the structs' bytes mean the same on either side; the sizes are checked.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pa_mock_api.h"

#define PA_REPLAY_MAGIC_IN "PAMOCKR1"
#define PA_REPLAY_MAGIC_OUT "PAMOCKW1"
#define PA_REPLAY_MAGIC_BYTES 8
#define PA_REPLAY_KIND_OWN 1
#define PA_REPLAY_KIND_ALIAS 2
#define PA_REPLAY_MAX_SLOT_BYTES (1ull << 32) /* far beyond a known-answer launch: a corrupt file, not a case */

#define PA_PARAM(name) , void *name
int32_t call_kernel(uint32_t block_dim, void *stream PA_PTR_ARGS(PA_PARAM));

static int fail(const char *what) {
    fprintf(stderr, "pa_mock_replay: %s\n", what);
    return 2;
}

static int read_exact(FILE *f, void *dst, size_t n) { return fread(dst, 1, n, f) == n; }

static int print_isas(void) {
    printf("best %d\n", (int)pa_mock_best_isa());
    for (int32_t isa = 0; isa < PA_MOCK_NUM_ISAS; ++isa) {
        printf("isa %d available %d\n", (int)isa, (int)pa_mock_isa_available(isa));
    }
    return 0;
}

static int replay(const char *in_path, const char *out_path) {
    FILE *in = fopen(in_path, "rb");
    if (!in) {
        return fail("cannot open the input file");
    }
    char magic[PA_REPLAY_MAGIC_BYTES];
    uint32_t block_dim = 0, config_bytes = 0;
    pa_mock_config config;
    if (!read_exact(in, magic, sizeof magic) || memcmp(magic, PA_REPLAY_MAGIC_IN, sizeof magic) != 0 ||
        !read_exact(in, &block_dim, sizeof block_dim) || !read_exact(in, &config_bytes, sizeof config_bytes) ||
        config_bytes != sizeof config || !read_exact(in, &config, sizeof config)) {
        fclose(in);
        return fail("bad header (magic or pa_mock_config size differs from this build's)");
    }
    void *ptr[PA_NUM_PTR_ARGS] = {0};
    void *owned[PA_NUM_PTR_ARGS] = {0}; /* kind-1 slots: their own buffers, written back */
    uint64_t bytes[PA_NUM_PTR_ARGS] = {0};
    int rc = 0;
    for (int slot = 0; slot < PA_NUM_PTR_ARGS && rc == 0; ++slot) {
        uint32_t kind = 0;
        if (!read_exact(in, &kind, sizeof kind) || !read_exact(in, &bytes[slot], sizeof bytes[slot]) ||
            bytes[slot] > PA_REPLAY_MAX_SLOT_BYTES || kind >= PA_REPLAY_KIND_ALIAS + (uint32_t)slot) {
            rc = fail("truncated or corrupt slot record");
        } else if (kind >= PA_REPLAY_KIND_ALIAS) {
            ptr[slot] = ptr[kind - PA_REPLAY_KIND_ALIAS];
        } else if (kind == PA_REPLAY_KIND_OWN) {
            owned[slot] = ptr[slot] = malloc(bytes[slot] ? bytes[slot] : 1); /* a present pointer stays non-NULL */
            if (!ptr[slot] || !read_exact(in, ptr[slot], bytes[slot])) {
                rc = fail("out of memory or truncated slot bytes");
            }
        }
    }
    fclose(in);
    FILE *out = rc ? 0 : fopen(out_path, "wb");
    if (rc == 0 && !out) {
        rc = fail("cannot open the output file");
    }
    if (rc == 0) {
        pa_mock_error err;
        memset(&err, 0, sizeof err);
        int32_t code = pa_mock_bind(&config);
        if (code == PA_OK) {
            void **a = ptr;
            code = call_kernel(block_dim, 0, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10],
                               a[11], a[12], a[13], a[14], a[15], a[16], a[17], a[18], a[19], a[20], a[21], a[22]);
        }
        pa_mock_last_error(&err);
        uint32_t err_bytes = sizeof err;
        int ok = fwrite(PA_REPLAY_MAGIC_OUT, 1, PA_REPLAY_MAGIC_BYTES, out) == PA_REPLAY_MAGIC_BYTES &&
                 fwrite(&code, sizeof code, 1, out) == 1 && fwrite(&err_bytes, sizeof err_bytes, 1, out) == 1 &&
                 fwrite(&err, sizeof err, 1, out) == 1;
        for (int slot = 0; slot < PA_NUM_PTR_ARGS && ok; ++slot) {
            ok = !owned[slot] || fwrite(owned[slot], 1, bytes[slot], out) == bytes[slot];
        }
        if (fclose(out) != 0 || !ok) {
            rc = fail("cannot write the output file");
        }
    }
    for (int slot = 0; slot < PA_NUM_PTR_ARGS; ++slot) {
        free(owned[slot]);
    }
    return rc;
}

int main(int argc, char **argv) {
    _Static_assert(PA_NUM_PTR_ARGS == 23, "call_kernel above passes 23 pointers");
    if (argc == 2 && strcmp(argv[1], "--isas") == 0) {
        return print_isas();
    }
    if (argc != 3) {
        return fail("usage: pa_mock_replay IN OUT | pa_mock_replay --isas");
    }
    return replay(argv[1], argv[2]);
}
