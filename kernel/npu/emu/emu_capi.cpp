/*
 * The emulator's C entry points (libpa_emu.so): make cores, read and write their buffers, and call any
 * emulated intrinsic by name with integer arguments - what the known-answer tests drive from Python.
 *
 * Arguments: on-chip operands are byte offsets (the entry point adds kOnChipTag), GM operands host addresses,
 * float scalars their IEEE bits (fp32, or fp16/bf16 in the low 16 bits).  Every call returns 0, or -1 with the
 * fault's text in pa_emu_last_error(); no C++ exception crosses this boundary.
 */
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "emu_core.hpp"
#include "emu_initcheck.hpp"
#include "emu_intrinsics.hpp"

using namespace pa::emu;

namespace {

thread_local std::string g_error;
std::vector<std::unique_ptr<Core>> g_cores;
std::vector<Access> g_lastAccesses; /* what the last reported instruction touched (pa_emu_record_accesses) */

void RememberAccesses(const Issue &issue) { g_lastAccesses = issue.accesses; }

using A = const int64_t *;
void *On(int64_t offset) { return reinterpret_cast<void *>(uint64_t(offset) | kOnChipTag); }
void *Host(int64_t address) { return reinterpret_cast<void *>(uint64_t(address)); }
template <typename T>
T *OnT(int64_t offset) { return static_cast<T *>(On(offset)); }
float F32(int64_t bits)
{
    float x;
    const uint32_t u = uint32_t(bits);
    std::memcpy(&x, &u, 4);
    return x;
}
template <typename T>
T Bits16(int64_t bits)
{
    T x;
    const uint16_t u = uint16_t(bits);
    std::memcpy(&x, &u, 2);
    return x;
}

struct Entry {
    int args;
    std::function<void(A)> call;
};

/* Field arguments are passed as int64_t, so a negative or oversized value reaches the field check. */
const std::map<std::string, Entry> &Table()
{
    static const std::map<std::string, Entry> table = {
        {"copy_gm_to_cbuf_multi_nd2nz_b16", {11, [](A a) {
             copy_gm_to_cbuf_multi_nd2nz_b16(On(a[0]), Host(a[1]), a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10]);
         }}},
        {"create_cbuf_matrix", {3, [](A a) { create_cbuf_matrix(On(a[0]), a[1], Bits16<_Float16>(a[2])); }}},
        {"create_cbuf_matrix_bf16", {3, [](A a) { create_cbuf_matrix_bf16(On(a[0]), a[1], Bits16<bf16_t>(a[2])); }}},
        {"copy_gm_to_ubuf_align_b16", {9, [](A a) {
             copy_gm_to_ubuf_align_b16(On(a[0]), Host(a[1]), a[2], a[3], a[4], a[5], a[6], a[7], a[8]);
         }}},
        {"copy_gm_to_ubuf_align_b32", {9, [](A a) {
             copy_gm_to_ubuf_align_b32(On(a[0]), Host(a[1]), a[2], a[3], a[4], a[5], a[6], a[7], a[8]);
         }}},
        {"copy_ubuf_to_gm_align_b16", {9, [](A a) {
             copy_ubuf_to_gm_align_b16(Host(a[0]), On(a[1]), a[2], a[3], a[4], a[5], a[6], a[7], a[8]);
         }}},
        {"copy_ubuf_to_gm_align_b32", {9, [](A a) {
             copy_ubuf_to_gm_align_b32(Host(a[0]), On(a[1]), a[2], a[3], a[4], a[5], a[6], a[7], a[8]);
         }}},
        {"copy_ubuf_to_ubuf", {7, [](A a) { copy_ubuf_to_ubuf(On(a[0]), On(a[1]), a[2], a[3], a[4], a[5], a[6]); }}},
        {"set_fmatrix", {1, [](A a) { set_fmatrix(uint64_t(a[0])); }}},
        {"set_fmatrix_b", {1, [](A a) { set_fmatrix_b(uint64_t(a[0])); }}},
        {"img2colv2_cbuf_to_ca", {17, [](A a) {
             img2colv2_cbuf_to_ca(On(a[0]), On(a[1]), a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11],
                                  a[12] != 0, a[13] != 0, a[14] != 0, a[15] != 0, a[16]);
         }}},
        {"img2colv2_cbuf_to_cb", {17, [](A a) {
             img2colv2_cbuf_to_cb(On(a[0]), On(a[1]), a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11],
                                  a[12] != 0, a[13] != 0, a[14] != 0, a[15] != 0, a[16]);
         }}},
        {"load_cbuf_to_cb", {9, [](A a) {
             load_cbuf_to_cb(On(a[0]), On(a[1]), a[2], a[3], a[4], a[5], a[6], a[7] != 0, int(a[8]));
         }}},
        {"mad_f16", {10, [](A a) {
             mad(OnT<float>(a[0]), OnT<_Float16>(a[1]), OnT<_Float16>(a[2]), a[3], a[4], a[5], a[6], a[7] != 0,
                 a[8] != 0, a[9] != 0);
         }}},
        {"mad_bf16", {10, [](A a) {
             mad(OnT<float>(a[0]), OnT<bf16_t>(a[1]), OnT<bf16_t>(a[2]), a[3], a[4], a[5], a[6], a[7] != 0,
                 a[8] != 0, a[9] != 0);
         }}},
        {"set_nd_para", {1, [](A a) { set_nd_para(uint64_t(a[0])); }}},
        {"copy_matrix_cc_to_gm", {4, [](A a) { copy_matrix_cc_to_gm(Host(a[0]), On(a[1]), uint64_t(a[2]), uint64_t(a[3])); }}},
#define PA_BIN(n)                                                                                                \
    {#n "_f32", {10, [](A a) { n(OnT<float>(a[0]), OnT<float>(a[1]), OnT<float>(a[2]), a[3], a[4], a[5], a[6],   \
                                 a[7], a[8], a[9]); }}},                                                         \
    {#n "_f16", {10, [](A a) { n(OnT<_Float16>(a[0]), OnT<_Float16>(a[1]), OnT<_Float16>(a[2]), a[3], a[4], a[5], \
                                 a[6], a[7], a[8], a[9]); }}},
        PA_BIN(vadd) PA_BIN(vsub) PA_BIN(vmul) PA_BIN(vdiv) PA_BIN(vmax)
#undef PA_BIN
#define PA_SCALAR(n)                                                                                             \
    {#n "_f32", {8, [](A a) { n(OnT<float>(a[0]), OnT<float>(a[1]), F32(a[2]), a[3], a[4], a[5], a[6], a[7]); }}}, \
    {#n "_f16", {8, [](A a) { n(OnT<_Float16>(a[0]), OnT<_Float16>(a[1]), Bits16<_Float16>(a[2]), a[3], a[4],     \
                                a[5], a[6], a[7]); }}},
        PA_SCALAR(vadds) PA_SCALAR(vmuls)
#undef PA_SCALAR
#define PA_UNARY(n)                                                                                              \
    {#n "_f32", {7, [](A a) { n(OnT<float>(a[0]), OnT<float>(a[1]), a[2], a[3], a[4], a[5], a[6]); }}},          \
    {#n "_f16", {7, [](A a) { n(OnT<_Float16>(a[0]), OnT<_Float16>(a[1]), a[2], a[3], a[4], a[5], a[6]); }}},
        PA_UNARY(vexp) PA_UNARY(vln)
#undef PA_UNARY
        {"vcmax", {7, [](A a) { vcmax(OnT<float>(a[0]), OnT<float>(a[1]), a[2], a[3], a[4], a[5], int(a[6])); }}},
        {"vcadd", {7, [](A a) { vcadd(OnT<float>(a[0]), OnT<float>(a[1]), a[2], a[3], a[4], a[5], a[6] != 0); }}},
        {"vbrcb", {5, [](A a) { vbrcb(OnT<float>(a[0]), OnT<float>(a[1]), a[2], a[3], a[4]); }}},
        {"vector_dup_f32", {7, [](A a) { vector_dup(OnT<float>(a[0]), F32(a[1]), a[2], a[3], a[4], a[5], a[6]); }}},
        {"vector_dup_f16", {7, [](A a) {
             vector_dup(OnT<_Float16>(a[0]), Bits16<_Float16>(a[1]), a[2], a[3], a[4], a[5], a[6]);
         }}},
        {"vconv_f322f16r", {7, [](A a) { vconv_f322f16r(OnT<_Float16>(a[0]), OnT<float>(a[1]), a[2], a[3], a[4], a[5], a[6]); }}},
        {"vconv_f322bf16r", {7, [](A a) { vconv_f322bf16r(OnT<bf16_t>(a[0]), OnT<float>(a[1]), a[2], a[3], a[4], a[5], a[6]); }}},
        {"vconv_f162f32", {7, [](A a) { vconv_f162f32(OnT<float>(a[0]), OnT<_Float16>(a[1]), a[2], a[3], a[4], a[5], a[6]); }}},
        {"vconv_bf162f32", {7, [](A a) { vconv_bf162f32(OnT<float>(a[0]), OnT<bf16_t>(a[1]), a[2], a[3], a[4], a[5], a[6]); }}},
        {"set_mask_count", {0, [](A) { set_mask_count(); }}},
        {"set_mask_norm", {0, [](A) { set_mask_norm(); }}},
        {"set_vector_mask", {2, [](A a) { set_vector_mask(uint64_t(a[0]), uint64_t(a[1])); }}},
        {"set_ctrl", {1, [](A a) { set_ctrl(uint64_t(a[0])); }}},
        {"set_flag", {3, [](A a) { set_flag(int(a[0]), int(a[1]), int(a[2])); }}},
        {"wait_flag", {3, [](A a) { wait_flag(int(a[0]), int(a[1]), int(a[2])); }}},
        {"pipe_barrier", {1, [](A a) { pipe_barrier(int(a[0])); }}},
        {"ffts_cross_core_sync", {2, [](A a) { ffts_cross_core_sync(int(a[0]), uint64_t(a[1])); }}},
        {"wait_flag_dev", {1, [](A a) { wait_flag_dev(a[0]); }}},
        {"set_atomic_none", {0, [](A) { set_atomic_none(); }}},
        {"set_atomic_add", {0, [](A) { set_atomic_add(); }}},
        {"set_atomic_max", {0, [](A) { set_atomic_max(); }}},
        {"set_atomic_min", {0, [](A) { set_atomic_min(); }}},
        {"set_atomic_f32", {0, [](A) { set_atomic_f32(); }}},
        {"set_atomic_f16", {0, [](A) { set_atomic_f16(); }}},
        {"set_atomic_bf16", {0, [](A) { set_atomic_bf16(); }}},
        {"set_atomic_s32", {0, [](A) { set_atomic_s32(); }}},
        {"set_atomic_s16", {0, [](A) { set_atomic_s16(); }}},
        {"set_atomic_s8", {0, [](A) { set_atomic_s8(); }}},
    };
    return table;
}

template <typename F>
int32_t Guard(F body)
{
    try {
        body();
        return 0;
    } catch (const std::exception &err) {
        g_error = err.what();
        return -1;
    }
}

}  // namespace

extern "C" {

const char *pa_emu_last_error(void) { return g_error.c_str(); }

/* A new core of `kind` (0 cube, 1 vector) on `soc`; returns its handle (>= 0) or -1. */
int32_t pa_emu_core_new(const char *soc, int32_t kind, int32_t block, int32_t sub, uint64_t seed)
{
    int32_t handle = -1;
    const int32_t rc = Guard([&] {
        g_cores.push_back(std::make_unique<Core>(MakeCore(Soc(soc), kind == 0 ? CoreKind::Cube : CoreKind::Vector,
                                                          block, sub, seed)));
        handle = int32_t(g_cores.size() - 1);
    });
    return rc ? rc : handle;
}

int32_t pa_emu_core_select(int32_t handle)
{
    return Guard([&] {
        if (handle < 0 || size_t(handle) >= g_cores.size()) throw Fault("emu fault: no core " + std::to_string(handle));
        SetCurrent(g_cores[size_t(handle)].get());
    });
}

/* Host address and size of buffer `space` (1 UB, 2 L1, 3 L0A, 4 L0B, 5 L0C) of the selected core. */
uint8_t *pa_emu_buffer(int32_t space, uint64_t *bytes)
{
    uint8_t *data = nullptr;
    Guard([&] {
        Core &core = Current();
        std::vector<uint8_t> *b[] = {nullptr, &core.ub, &core.l1, &core.l0a, &core.l0b, &core.l0c};
        if (space < 1 || space > 5) throw Fault("emu fault: no buffer " + std::to_string(space));
        data = b[space]->data();
        *bytes = b[space]->size();
    });
    return data;
}

int32_t pa_emu_call(const char *name, const int64_t *args, int32_t nargs)
{
    return Guard([&] {
        const auto &table = Table();
        const auto it = table.find(name);
        if (it == table.end()) throw Fault(std::string("emu fault: no entry point for '") + name + "'");
        if (it->second.args != nargs) {
            throw Fault(std::string("emu fault: ") + name + " takes " + std::to_string(it->second.args) +
                        " arguments, got " + std::to_string(nargs));
        }
        it->second.call(args);
    });
}

int32_t pa_emu_register_gm(const void *ptr, uint64_t bytes)
{
    return Guard([&] { RegisterGm(ptr, bytes); });
}

int32_t pa_emu_clear_gm(void)
{
    return Guard([] { ClearGm(); });
}

/* on != 0: keep what each reported instruction touches, for pa_emu_last_accesses (the hazard checker's view). */
int32_t pa_emu_record_accesses(int32_t on)
{
    SetIssueHook(on ? RememberAccesses : nullptr);
    g_lastAccesses.clear();
    return 0;
}

/* The last reported instruction's accesses as (space, start, bytes, write) quadruples, at most `max`; their count. */
int32_t pa_emu_last_accesses(int64_t *out, int32_t max)
{
    int32_t n = 0;
    for (const Access &a : g_lastAccesses) {
        if (n == max) break;
        out[4 * n] = int64_t(a.space);
        out[4 * n + 1] = int64_t(a.start);
        out[4 * n + 2] = int64_t(a.bytes);
        out[4 * n + 3] = a.write ? 1 : 0;
        ++n;
    }
    return n;
}

/* The selected core's mode state as a previous kernel may leave it (RandomiseModeState), from `seed`. */
int32_t pa_emu_randomise_mode_state(uint64_t seed)
{
    return Guard([&] { RandomiseModeState(Current(), seed); });
}

/* initcheck on the selected core (emu_initcheck.hpp): on != 0 starts it with every byte unwritten, 0 turns it
 * off (a new core starts with it off: the known-answer tests fill buffers from the host). */
int32_t pa_emu_initcheck(int32_t on)
{
    return Guard([&] { SetInitCheck(Current(), on != 0); });
}

/* Declares bytes [offset, offset + bytes) of buffer `space` (1 UB .. 5 L0C) of the selected core written, as a
 * host fill through pa_emu_buffer is invisible to initcheck. */
int32_t pa_emu_mark_written(int32_t space, uint64_t offset, uint64_t bytes)
{
    return Guard([&] {
        if (space < 1 || space > 5) throw Fault("emu fault: no buffer " + std::to_string(space));
        MarkWritten(static_cast<Space>(space), offset, bytes);
    });
}

/* Read or write the selected core's CTRL register. */
uint64_t pa_emu_ctrl(void)
{
    uint64_t value = 0;
    Guard([&] { value = Current().ctrl; });
    return value;
}

}  // extern "C"
