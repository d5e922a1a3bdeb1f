/*
 * Narrowing in the kernel's own code and pto-isa's, made a fault.
 *
 * pto-isa's A2/A3 code narrows some values before it calls an intrinsic (TLOAD assigns a GM row pitch to a
 * 16-bit srcDValue), so a value that overflows reaches the intrinsic already wrapped to a legal one, which the
 * intrinsic's own field check (Field<T>) cannot see.  build_emu.sh therefore compiles the kernel's translation
 * units of libpa_sim.so with clang's -fsanitize=implicit-integer-truncation,implicit-integer-sign-change (the
 * emulator's own files are not: their conversions are deliberate) and no sanitizer runtime: the compiler calls
 * the handler below, defined here, wherever such a conversion changes a value.
 *
 * clang emits the call as one that cannot unwind (a throw from it would end in std::terminate), so the handler
 * only records the conversion, on the thread of the core that ran it, and returns; the fault is raised on that
 * core by the next emulator action: any fault (the record is reported first: a wrapped value often fails a
 * later check), the next instruction issued, or the core's end (Drain).  The wrapped value never reaches a
 * retired instruction, since instructions execute only after they are reported.
 *
 * PA_SIM_NARROWING=0 records nothing: the wrapped value then executes as it would on a device (the negative
 * control of tests/test_sim_narrowing.py).
 *
 * The data layout is the compiler's ABI with its runtime (compiler-rt, ubsan_handlers.h): a SourceLocation
 * {file, line, column}, the source and destination TypeDescriptors, the check kind; values of up to 64 bits are
 * passed in the handle itself.
 */
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "emu_core.hpp"
#include "emu_ubsan.hpp"

namespace {

struct SourceLocation {
    const char *file;
    uint32_t line;
    uint32_t column;
};

/* TypeKind 0 is an integer; TypeInfo is log2(bit width) << 1 | signed. */
struct TypeDescriptor {
    uint16_t kind;
    uint16_t info;
    char name[1];
};

struct ImplicitConversionData {
    SourceLocation loc;
    const TypeDescriptor *from;
    const TypeDescriptor *to;
    unsigned char check;
};

const char *CheckName(unsigned char check)
{
    switch (check) {
        case 0: case 1: case 2: return "truncation";
        case 3: return "sign change";
        case 4: return "truncation and sign change";
        default: return "conversion";
    }
}

std::string ValueText(const TypeDescriptor *type, uintptr_t handle)
{
    char text[32];
    const unsigned bits = type->kind == 0 ? 1u << (type->info >> 1) : 64;
    const bool isSigned = type->kind == 0 && (type->info & 1) != 0;
    if (bits > 64) return "(wider than 64 bits)";
    uint64_t raw = uint64_t(handle);
    if (bits < 64) raw &= (uint64_t(1) << bits) - 1;
    if (isSigned && bits < 64 && (raw >> (bits - 1)) != 0) raw |= ~((uint64_t(1) << bits) - 1);
    if (isSigned) {
        std::snprintf(text, sizeof text, "%" PRId64, int64_t(raw));
    } else {
        std::snprintf(text, sizeof text, "%" PRIu64, raw);
    }
    return text;
}

std::string Describe(const ImplicitConversionData *data, uintptr_t src, uintptr_t dst)
{
    const char *file = data->loc.file != nullptr ? data->loc.file : "(unknown file)";
    return std::string("emu fault: implicit integer ") + CheckName(data->check) + " at " + file + ":" +
           std::to_string(data->loc.line) + ":" + std::to_string(data->loc.column) + ": " +
           ValueText(data->from, src) + " of type " + data->from->name + " became " + ValueText(data->to, dst) +
           " of type " + data->to->name + " (a wrapped value the device would take as given)";
}

/* A pure sign change into a 64-bit type keeps every bit: pto-isa writes vector masks as -1 and CTRL through an
 * int64, register images, not quantities.  A sign change into a narrower type (a negative count or offset
 * into a 32-bit field) and every truncation are reported. */
bool BitPattern(const ImplicitConversionData *data)
{
    return data->check == 3 && data->to->kind == 0 && (data->to->info >> 1) == 6;
}

/* Narrowings of pinned pto-isa (kernel/npu/fetch_pto_isa.sh) whose result no executed instruction reads, each
 * with the reason; matched by the file's tail, line and column, so a new pto-isa with moved lines faults rather
 * than hides anything. */
struct Allowed {
    const char *fileTail;
    uint32_t line, column;
    const char *why;
};
constexpr Allowed kAllowed[] = {
    /* TStoreAccNz2nd: srcNdStride = Rows x 16 x cols wraps from 65536 (a 16-row tile of 256 columns), but it is
     * ND_PARA's source stride between ND matrices, read only when ndNum > 1; pto-isa's 2-D store sets ndNum = 1,
     * the only form the emulator executes (copy_matrix_cc_to_gm faults on any other). */
    {"pto/npu/a2a3/TStore.hpp", 310, 28, "ND_PARA source stride, unused with ndNum = 1"},
    /* TExpandS: validCol == TileData::ValidCol compares the run-time valid columns with the tile's static ones,
     * DYNAMIC (-1) for a run-time sized tile, converted to unsigned: never equal, so pto-isa fills row by row,
     * which is correct; the converted value reaches no field. */
    {"pto/npu/a2a3/TExpandS.hpp", 61, 84, "comparison with DYNAMIC (-1), no field"},
};

bool IsAllowed(const SourceLocation &loc)
{
    if (loc.file == nullptr) return false;
    const std::string_view file(loc.file);
    for (const Allowed &a : kAllowed) {
        if (loc.line == a.line && loc.column == a.column && file.ends_with(a.fileTail)) return true;
    }
    return false;
}

/* The first conversion recorded on this thread (the core running on it) and not yet raised. */
thread_local std::string t_pending;
thread_local bool t_hasPending = false;

}  // namespace

namespace pa::emu {

void RaisePendingConversion()
{
    if (!t_hasPending) return;
    t_hasPending = false;
    std::string what = std::move(t_pending);
    t_pending.clear();
    try {
        const Core &core = Current();
        what += " on " + std::string(core.kind == CoreKind::Cube ? "cube" : "vec") + " core " +
                std::to_string(core.block) + "." + std::to_string(core.sub);
    } catch (const Fault &) { /* no current core: the location alone */
    }
    throw Fault(what);
}

void ClearPendingConversion()
{
    t_hasPending = false;
    t_pending.clear();
}

}  // namespace pa::emu

extern "C" {

/* The recoverable form: record, return (see the top of this file). */
void __ubsan_handle_implicit_conversion(void *data, uintptr_t src, uintptr_t dst)
{
    const auto *conversion = static_cast<const ImplicitConversionData *>(data);
    if (BitPattern(conversion) || IsAllowed(conversion->loc)) return;
    if (const char *env = std::getenv("PA_SIM_NARROWING"); env != nullptr && env[0] == '0') return; /* negative control */
    if (t_hasPending) return; /* the first one is the cause */
    t_pending = Describe(static_cast<const ImplicitConversionData *>(data), src, dst);
    t_hasPending = true;
}

/* The form -fno-sanitize-recover emits, which may neither return nor unwind; build_emu.sh never asks for it.
 * Defined so that such a build names the conversion before it ends the process, rather than failing to load. */
[[noreturn]] void __ubsan_handle_implicit_conversion_abort(void *data, uintptr_t src, uintptr_t dst)
{
    std::fprintf(stderr, "%s\n", Describe(static_cast<const ImplicitConversionData *>(data), src, dst).c_str());
    std::abort();
}

}  // extern "C"
