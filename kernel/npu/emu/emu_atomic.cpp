/*
 * Store atomics (SEMANTICS.md "Store atomics"): set_atomic_add / max / min / none choose what a later store to
 * global memory does with the value already there, set_atomic_f32 / f16 / bf16 / s32 / s16 / s8 the element type it
 * is read as (CCE "Atomic原子操作", cceapi_0065; both scalar-unit instructions).  The stores that honour the mode here
 * are the two the kernels use: MTE3's copy_ubuf_to_gm_align_b16/_b32 and FIX's copy_matrix_cc_to_gm.
 *
 * The mode is per core and survives the kernel (asc-devkit's own dav-c220 kernel entry clears it with
 * set_atomic_none), so a core the device-path simulation starts holds a random mode marked inherited, and a GM
 * store before the kernel's own set_atomic_* faults: on a device it would add into, or keep the max of, the old
 * contents.  A store latches the mode at issue, as it latches CTRL (pto-isa clears the mode right after issuing).
 *
 * What the pages leave open faults instead of guessing: a non-finite float operand or result (the atomic unit's
 * inf/NaN handling is not published for A2/A3; a poisoned, never-zeroed destination shows this way), an integer
 * sum that overflows, max/min on the L0C -> GM path (documented for UB -> GM only), a type that does not match
 * the stored element.  Sums of fp16/bf16 are computed in fp32 and rounded once, half to even (exact: fp32 carries
 * more than 2p + 2 bits of either); the device's rounding is *inferred*.
 */
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "emu_core.hpp"
#include "emu_intrinsics.hpp"
#include "emu_numeric.hpp"

namespace pa::emu {
namespace {

const char *OpName(StoreAtomicOp op)
{
    static const char *const names[] = {"none", "add", "max", "min"};
    return names[int(op)];
}

const char *TypeName(StoreAtomicType type)
{
    static const char *const names[] = {"f32", "f16", "bf16", "s32", "s16", "s8"};
    return names[int(type)];
}

uint32_t TypeBytes(StoreAtomicType type)
{
    switch (type) {
        case StoreAtomicType::F32: case StoreAtomicType::S32: return 4;
        case StoreAtomicType::F16: case StoreAtomicType::Bf16: case StoreAtomicType::S16: return 2;
        case StoreAtomicType::S8: return 1;
    }
    return 0;
}

float Combine(StoreAtomicOp op, float old, float value)
{
    switch (op) {
        case StoreAtomicOp::Add: return old + value;
        case StoreAtomicOp::Max: return std::max(old, value);
        default: return std::min(old, value);
    }
}

int64_t Combine(StoreAtomicOp op, int64_t old, int64_t value)
{
    switch (op) {
        case StoreAtomicOp::Add: return old + value;
        case StoreAtomicOp::Max: return std::max(old, value);
        default: return std::min(old, value);
    }
}

[[noreturn]] void NotFinite(const char *intrinsic, Pipe pipe, const StoreAtomic &mode, uint64_t index, float old,
                            float value)
{
    Raise(intrinsic, pipe, "element", index,
          std::string("atomic ") + OpName(mode.op) + " (" + TypeName(mode.type) + ") of " + std::to_string(value) +
              " into GM holding " + std::to_string(old) +
              ": a non-finite operand or result (the atomic unit's inf/NaN handling is not published for A2/A3; "
              "a destination never zeroed before accumulating shows this way)");
}

float Load16(StoreAtomicType type, const uint8_t *at)
{
    uint16_t h;
    std::memcpy(&h, at, 2);
    return type == StoreAtomicType::F16 ? F32FromF16(h) : F32FromBf16(h);
}

void Store16(StoreAtomicType type, uint8_t *at, float x)
{
    const uint16_t h = type == StoreAtomicType::F16 ? F16FromF32(x, Round::Rint, false) : Bf16FromF32(x, Round::Rint, false);
    std::memcpy(at, &h, 2);
}

void SetOp(const char *name, StoreAtomicOp op)
{
    Core &core = Current();
    core.atomic_op = op;
    core.atomic_op_set = true;
    Report({name, Pipe::S, {}});
}

void SetType(const char *name, StoreAtomicType type)
{
    Core &core = Current();
    core.atomic_type = type;
    core.atomic_type_set = true;
    Report({name, Pipe::S, {}});
}

}  // namespace

StoreAtomic LatchStoreAtomic(const char *intrinsic, Pipe pipe, uint32_t elemBytes, bool fixpipe)
{
    const Core &core = Current();
    if (!core.atomic_op_set) {
        Raise(intrinsic, pipe, "atomic mode", uint64_t(core.atomic_op),
              std::string("a GM store with the store-atomic mode the previous kernel left on this core (here ") +
                  OpName(core.atomic_op) + "): set_atomic_none (or set_atomic_add/max/min) before the first GM store");
    }
    const StoreAtomic mode{core.atomic_op, core.atomic_type};
    if (mode.op == StoreAtomicOp::None) return mode;
    if (!core.atomic_type_set) {
        Raise(intrinsic, pipe, "atomic type", uint64_t(core.atomic_type),
              std::string("atomic ") + OpName(mode.op) +
                  " with the element type the previous kernel left: set_atomic_f32/f16/bf16/s32/s16/s8 first");
    }
    if (fixpipe && mode.op != StoreAtomicOp::Add) {
        Raise(intrinsic, pipe, "atomic mode", uint64_t(mode.op),
              std::string("atomic ") + OpName(mode.op) + " on L0C -> GM: documented for UB -> GM only (ASC SetAtomicMax/Min)");
    }
    if (TypeBytes(mode.type) != elemBytes) {
        Raise(intrinsic, pipe, "atomic type", uint64_t(mode.type),
              std::string("atomic type ") + TypeName(mode.type) + " does not match the store's " +
                  std::to_string(elemBytes) + "-byte elements");
    }
    return mode;
}

void StoreWithAtomic(const StoreAtomic &mode, uint8_t *dst, const uint8_t *src, uint64_t bytes, const char *intrinsic,
                     Pipe pipe)
{
    if (mode.op == StoreAtomicOp::None) {
        std::memcpy(dst, src, bytes);
        return;
    }
    const uint32_t size = TypeBytes(mode.type);
    for (uint64_t at = 0, i = 0; at < bytes; at += size, ++i) {
        switch (mode.type) {
            case StoreAtomicType::F32: {
                float old, value;
                std::memcpy(&old, dst + at, 4);
                std::memcpy(&value, src + at, 4);
                const float out = Combine(mode.op, old, value);
                if (!std::isfinite(old) || !std::isfinite(value) || !std::isfinite(out)) {
                    NotFinite(intrinsic, pipe, mode, i, old, value);
                }
                std::memcpy(dst + at, &out, 4);
                break;
            }
            case StoreAtomicType::F16: case StoreAtomicType::Bf16: {
                const float old = Load16(mode.type, dst + at), value = Load16(mode.type, src + at);
                Store16(mode.type, dst + at, Combine(mode.op, old, value));
                if (!std::isfinite(old) || !std::isfinite(value) || !std::isfinite(Load16(mode.type, dst + at))) {
                    Store16(mode.type, dst + at, old);
                    NotFinite(intrinsic, pipe, mode, i, old, value);
                }
                break;
            }
            case StoreAtomicType::S32: case StoreAtomicType::S16: {
                int32_t old32 = 0, value32 = 0;
                int16_t old16 = 0, value16 = 0;
                const bool wide = mode.type == StoreAtomicType::S32;
                if (wide) {
                    std::memcpy(&old32, dst + at, 4);
                    std::memcpy(&value32, src + at, 4);
                } else {
                    std::memcpy(&old16, dst + at, 2);
                    std::memcpy(&value16, src + at, 2);
                }
                const int64_t old = wide ? old32 : old16, value = wide ? value32 : value16;
                const int64_t out = Combine(mode.op, old, value);
                const int64_t lo = wide ? INT32_MIN : INT16_MIN, hi = wide ? INT32_MAX : INT16_MAX;
                if (out < lo || out > hi) {
                    Raise(intrinsic, pipe, "element", i,
                          std::string("atomic add (") + TypeName(mode.type) + ") of " + std::to_string(value) +
                              " into " + std::to_string(old) + " overflows (wrap or saturation is not published)");
                }
                if (wide) {
                    const int32_t o = int32_t(out);
                    std::memcpy(dst + at, &o, 4);
                } else {
                    const int16_t o = int16_t(out);
                    std::memcpy(dst + at, &o, 2);
                }
                break;
            }
            case StoreAtomicType::S8: Raise(intrinsic, pipe, "atomic type", uint64_t(mode.type), "s8 stores are not emulated");
        }
    }
}

}  // namespace pa::emu

using namespace pa::emu;

void set_atomic_none() { SetOp("set_atomic_none", StoreAtomicOp::None); }
void set_atomic_add() { SetOp("set_atomic_add", StoreAtomicOp::Add); }
void set_atomic_max() { SetOp("set_atomic_max", StoreAtomicOp::Max); }
void set_atomic_min() { SetOp("set_atomic_min", StoreAtomicOp::Min); }
void set_atomic_f32() { SetType("set_atomic_f32", StoreAtomicType::F32); }
void set_atomic_f16() { SetType("set_atomic_f16", StoreAtomicType::F16); }
void set_atomic_bf16() { SetType("set_atomic_bf16", StoreAtomicType::Bf16); }
void set_atomic_s32() { SetType("set_atomic_s32", StoreAtomicType::S32); }
void set_atomic_s16() { SetType("set_atomic_s16", StoreAtomicType::S16); }
void set_atomic_s8() { SetType("set_atomic_s8", StoreAtomicType::S8); }
