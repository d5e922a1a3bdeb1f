/* The emulated core's state, the fault path and the operand decoders (see emu_core.hpp). */
#include "emu_core.hpp"
#include "emu_initcheck.hpp"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <utility>

namespace pa::emu {

namespace {

/* Per-core buffer sizes: the A2/A3 (dav-c220) AI core.  UB 192 KiB per vector core, L1 512 KiB, L0A/L0B
 * 64 KiB, L0C 128 KiB per cube core (asc-devkit memory-structure pages; pto-isa's kUbBytes).  Clusters: AI
 * cores per die that can hold a block (24 on 910B1/B2 and an A3 die, 20 on 910B3/B4). */
constexpr uint32_t kKiB = 1024;
const SocSpec kSocs[] = {
    {"910B1", 192 * kKiB, 512 * kKiB, 64 * kKiB, 64 * kKiB, 128 * kKiB, 24},
    {"910B2", 192 * kKiB, 512 * kKiB, 64 * kKiB, 64 * kKiB, 128 * kKiB, 24},
    {"910B3", 192 * kKiB, 512 * kKiB, 64 * kKiB, 64 * kKiB, 128 * kKiB, 20},
    {"910B4", 192 * kKiB, 512 * kKiB, 64 * kKiB, 64 * kKiB, 128 * kKiB, 20},
    {"A3", 192 * kKiB, 512 * kKiB, 64 * kKiB, 64 * kKiB, 128 * kKiB, 24},
};

thread_local Core *g_current = nullptr;
IssueHook g_hook = nullptr;
std::mutex g_gm_mutex;
std::vector<std::pair<uint64_t, uint64_t>> g_gm;  /* registered [start, end) ranges; empty = unchecked */

std::string CoreLabel()
{
    if (g_current == nullptr) return "no core";
    char text[64];
    std::snprintf(text, sizeof text, "%s core %d.%d", g_current->kind == CoreKind::Cube ? "cube" : "vec",
                  g_current->block, g_current->sub);
    return text;
}

/* splitmix64: the hostile fill's generator. */
uint64_t Mix(uint64_t &state)
{
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void Hostile(std::vector<uint8_t> &buffer, uint64_t seed)
{
    uint64_t state = seed;
    for (size_t i = 0; i + 8 <= buffer.size(); i += 8) {
        uint64_t word = Mix(state);
        /* every fourth 8-byte word is a quiet-NaN pattern for fp32 (0x7fc0xxxx) and fp16 (0x7e..) readers */
        if ((i / 8) % 4 == 0) word = 0x7fc17e017fc27e02ull;
        std::memcpy(buffer.data() + i, &word, 8);
    }
}

}  // namespace

std::vector<uint8_t> *Buffer(Core &core, Space space)
{
    switch (space) {
        case Space::UB: return &core.ub;
        case Space::L1: return &core.l1;
        case Space::L0A: return &core.l0a;
        case Space::L0B: return &core.l0b;
        case Space::L0C: return &core.l0c;
        default: return nullptr;
    }
}

const char *SpaceName(Space space)
{
    static const char *const names[] = {"GM", "UB", "L1", "L0A", "L0B", "L0C"};
    return names[static_cast<int>(space)];
}

const char *PipeName(Pipe pipe)
{
    static const char *const names[] = {"S", "V", "M", "MTE1", "MTE2", "MTE3", "FIX", "ALL"};
    return names[static_cast<int>(pipe)];
}

const SocSpec &Soc(const char *name)
{
    for (const SocSpec &soc : kSocs) {
        if (std::strcmp(soc.name, name) == 0) return soc;
    }
    throw Fault(std::string("emu fault: unknown SoC '") + (name ? name : "(null)") +
                "': expected one of 910B1, 910B2, 910B3, 910B4, A3");
}

Core MakeCore(const SocSpec &soc, CoreKind kind, int block, int sub, uint64_t seed)
{
    Core core;
    core.kind = kind;
    core.block = block;
    core.sub = sub;
    if (kind == CoreKind::Vector) {
        core.ub.resize(soc.ub_bytes);
    } else {
        core.l1.resize(soc.l1_bytes);
        core.l0a.resize(soc.l0a_bytes);
        core.l0b.resize(soc.l0b_bytes);
        core.l0c.resize(soc.l0c_bytes);
    }
    uint64_t s = seed * 0x100000001b3ull + uint64_t(block) * 7 + uint64_t(sub) * 131 + 1;
    for (Space space : {Space::UB, Space::L1, Space::L0A, Space::L0B, Space::L0C}) {
        Hostile(*Buffer(core, space), Mix(s));
    }
    return core;
}

Core &Current()
{
    if (g_current == nullptr) throw Fault("emu fault: an intrinsic ran on a thread with no current core");
    return *g_current;
}

void SetCurrent(Core *core) { g_current = core; }

void Raise(const char *intrinsic, Pipe pipe, const char *operand, uint64_t value, const std::string &why)
{
    char head[256];
    std::snprintf(head, sizeof head, "emu fault: %s on %s, pipe %s: %s = %" PRIu64 " (0x%" PRIx64 "): ", intrinsic,
                  CoreLabel().c_str(), PipeName(pipe), operand, value, value);
    throw Fault(head + why);
}

void CheckField(const char *intrinsic, Pipe pipe, const char *field, uint64_t value, unsigned bits)
{
    if (bits < 64 && (value >> bits) != 0) {
        Raise(intrinsic, pipe, field, value,
              "does not fit the " + std::to_string(bits) + "-bit field (the device would keep the low bits)");
    }
}

void CheckRange(const char *intrinsic, Pipe pipe, const char *field, uint64_t value, uint64_t lo, uint64_t hi)
{
    if (value < lo || value > hi) {
        Raise(intrinsic, pipe, field, value,
              "outside the documented range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
}

uint64_t OnChipOffset(const void *ptr, const char *intrinsic, Pipe pipe, const char *operand)
{
    const uint64_t value = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ptr));
    if (value & kOnChipTag) return value & ~kOnChipTag;
    if (value < kHostPointerFloor) return value;
    Raise(intrinsic, pipe, operand, value, "a host pointer where an on-chip address was expected");
}

uint8_t *OnChip(Space space, const void *ptr, uint64_t bytes, unsigned align, const char *intrinsic, Pipe pipe,
                const char *operand)
{
    const uint64_t offset = OnChipOffset(ptr, intrinsic, pipe, operand);
    std::vector<uint8_t> *buffer = Buffer(Current(), space);
    if (buffer == nullptr || buffer->empty()) {
        Raise(intrinsic, pipe, operand, offset, std::string("this core has no ") + SpaceName(space));
    }
    if (align > 1 && offset % align != 0) {
        Raise(intrinsic, pipe, operand, offset,
              std::string(SpaceName(space)) + " address not aligned to " + std::to_string(align) + " bytes");
    }
    if (offset > buffer->size() || bytes > buffer->size() - offset) {
        Raise(intrinsic, pipe, operand, offset,
              "access of " + std::to_string(bytes) + " bytes runs past " + SpaceName(space) + " (" +
                  std::to_string(buffer->size()) + " bytes)");
    }
    return buffer->data() + offset;
}

uint8_t *Gm(const void *ptr, uint64_t bytes, const char *intrinsic, Pipe pipe, const char *operand)
{
    const uint64_t value = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ptr));
    if ((value & kOnChipTag) || value < kHostPointerFloor) {
        Raise(intrinsic, pipe, operand, value, "an on-chip address where a global-memory pointer was expected");
    }
    std::lock_guard<std::mutex> lock(g_gm_mutex);
    if (!g_gm.empty()) {
        bool inside = false;
        for (const auto &[start, end] : g_gm) {
            if (value >= start && value <= end && bytes <= end - value) inside = true;
        }
        if (!inside) {
            Raise(intrinsic, pipe, operand, value,
                  "global-memory access of " + std::to_string(bytes) + " bytes outside every registered buffer");
        }
    }
    return reinterpret_cast<uint8_t *>(value);
}

void RegisterGm(const void *ptr, uint64_t bytes)
{
    std::lock_guard<std::mutex> lock(g_gm_mutex);
    const uint64_t start = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ptr));
    g_gm.emplace_back(start, start + bytes);
}

void ClearGm()
{
    std::lock_guard<std::mutex> lock(g_gm_mutex);
    g_gm.clear();
}

void SetIssueHook(IssueHook hook) { g_hook = hook; }

void AddStrided(std::vector<Access> &accesses, Space space, uint64_t start, uint64_t count, uint64_t bytes,
                uint64_t stride, bool write)
{
    if (count == 0 || bytes == 0) return;
    if (stride == bytes || count == 1) {
        accesses.push_back({space, start, (count - 1) * stride + bytes, write});
        return;
    }
    for (uint64_t i = 0; i < count; ++i) accesses.push_back({space, start + i * stride, bytes, write});
}

uint64_t ScalarLoad(Space space, const void *ptr, unsigned bytes)
{
    if (bytes != 1 && bytes != 2 && bytes != 4 && bytes != 8) {
        Raise("scalar load", Pipe::S, "bytes", bytes, "must be 1, 2, 4 or 8");
    }
    const uint8_t *at = OnChip(space, ptr, bytes, bytes, "scalar load", Pipe::S, "address");
    uint64_t value = 0;
    std::memcpy(&value, at, bytes);
    Issue issue{"scalar load", Pipe::S, {{space, OnChipOffset(ptr, "scalar load", Pipe::S, "address"), bytes, false}}};
    issue.kind = Kind::ScalarRead;
    Report(issue); /* the hazard checker first: an unordered read is a hazard before it is anything else */
    if (const Taint *shadow = ShadowAt(space, at)) Reads("scalar load").Check(Pipe::S, "address", space, shadow, bytes, kToScalar);
    return value;
}

void RandomiseModeState(Core &core, uint64_t seed)
{
    uint64_t s = seed ^ 0x5a5a5a5a12345678ull;
    core.mask_counter = (Mix(s) & 1) != 0;
    core.mask_hi = Mix(s);
    core.mask_lo = Mix(s);
    core.ctrl = Mix(s);
    core.fmatrix = Mix(s);
    core.fmatrix_b = Mix(s);
    core.nd_para = Mix(s);
    /* *_set stay false: an img2col or an ND store before the kernel's own set_fmatrix / set_nd_para faults */
    core.atomic_op = StoreAtomicOp(Mix(s) % 4);
    core.atomic_type = StoreAtomicType(Mix(s) % 6);
    core.atomic_op_set = core.atomic_type_set = false; /* a GM store before the kernel's set_atomic_* faults */
}

void Report(const Issue &issue)
{
    if (g_hook != nullptr) g_hook(issue);
}

}  // namespace pa::emu
