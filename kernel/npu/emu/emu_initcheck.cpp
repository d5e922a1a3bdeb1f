/* initcheck's shadow and its origins (see emu_initcheck.hpp). */
#include "emu_initcheck.hpp"

#include <string>

namespace pa::emu {
namespace {

std::vector<Taint> *ShadowOf(InitShadow &init, Space space)
{
    switch (space) {
        case Space::UB: return &init.ub;
        case Space::L1: return &init.l1;
        case Space::L0A: return &init.l0a;
        case Space::L0B: return &init.l0b;
        case Space::L0C: return &init.l0c;
        default: return nullptr;
    }
}

uint64_t OffsetOf(Core &core, Space space, const Taint *at) { return uint64_t(at - ShadowOf(core.init, space)->data()); }

}  // namespace

void SetInitCheck(Core &core, bool on)
{
    core.init = InitShadow{};
    core.init.on = on;
    if (!on) return;
    for (Space space : {Space::UB, Space::L1, Space::L0A, Space::L0B, Space::L0C}) {
        ShadowOf(core.init, space)->assign(Buffer(core, space)->size(), kUnwritten);
    }
}

void MarkWritten(Space space, uint64_t offset, uint64_t bytes)
{
    Core &core = Current();
    std::vector<Taint> *shadow = ShadowOf(core.init, space);
    if (!core.init.on || shadow == nullptr) return;
    if (offset > shadow->size() || bytes > shadow->size() - offset) {
        Raise("mark written", Pipe::S, "offset", offset, std::string("runs past ") + SpaceName(space));
    }
    Mark(shadow->data() + offset, bytes, kClean);
}

Taint *ShadowAt(Space space, const uint8_t *at)
{
    Core &core = Current();
    if (!core.init.on) return nullptr;
    return ShadowOf(core.init, space)->data() + (at - Buffer(core, space)->data());
}

Reads::Reads(const char *intrinsic) : core_(Current()), intrinsic_(intrinsic) {}

Taint Reads::Origin(Space space, const Taint *at)
{
    if (mine_ != kClean) return mine_;
    InitShadow &init = core_.init;
    const auto key = std::make_tuple(intrinsic_, space, OffsetOf(core_, space, at));
    if (const auto it = init.known.find(key); it != init.known.end()) return mine_ = it->second;
    if (init.origins.size() + 1 >= kOriginsFull) return mine_ = kOriginsFull;
    init.origins.push_back({intrinsic_, space, std::get<2>(key)});
    mine_ = Taint(init.origins.size());
    init.known.emplace(key, mine_);
    return mine_;
}

void Reads::Copy(Space space, const Taint *from, Taint *to, uint64_t bytes)
{
    for (uint64_t b = 0; b < bytes; ++b) to[b] = from[b] == kUnwritten ? Origin(space, from + b) : from[b];
}

void Reads::Check(Pipe pipe, const char *operand, Space space, const Taint *shadow, uint64_t bytes, const char *what)
{
    for (uint64_t b = 0; b < bytes; ++b) {
        if (shadow[b] == kClean) continue;
        const Taint taint = shadow[b] == kUnwritten ? Origin(space, shadow + b) : shadow[b];
        const uint64_t offset = OffsetOf(core_, space, shadow + b);
        std::string why = std::string("UNINIT: ") + SpaceName(space) + " byte " + std::to_string(offset) + " is " +
                          what + " but derives from on-chip bytes never written in this launch: ";
        if (taint == kOriginsFull) {
            why += "(origin not kept: more than 65533 origins on this core)";
        } else {
            const InitOrigin &o = core_.init.origins[taint - 1];
            why += std::string(o.intrinsic) + " read unwritten " + SpaceName(o.space) + " byte " +
                   std::to_string(o.offset) + " on this core";
        }
        Raise(intrinsic_, pipe, operand, offset, why);
    }
}

}  // namespace pa::emu
