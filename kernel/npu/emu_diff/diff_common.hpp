/*
 * What both differential harnesses share: the on-chip address form of each build (the emulator's tagged
 * offsets, the CPU implementations' plain offsets), tile placement, the error text, and the CPU oracle's
 * float -> bf16 cast helper (independent of the emulator's conversion).
 */
#ifndef PA_EMU_DIFF_COMMON_HPP
#define PA_EMU_DIFF_COMMON_HPP

#include <cstdint>
#include <cstring>
#include <string>

#ifdef PA_EMU_DIFF_DEV
#include "emu/emu_core.hpp"
#endif
#include <pto/pto-inst.hpp>

#ifdef PA_EMU_DIFF_CPU
/* This libgcc has no float -> bf16 helper: round half to even on the bits, NaN kept. */
extern "C" __attribute__((weak)) std::bfloat16_t __truncsfbf2(float x)
{
    uint32_t u;
    std::memcpy(&u, &x, 4);
    const uint16_t bits = (u & 0x7fffffffu) > 0x7f800000u ? uint16_t((u >> 16) | 0x40)
                                                          : uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    std::bfloat16_t out;
    std::memcpy(&out, &bits, 2);
    return out;
}
#endif

namespace pa_diff {

#ifdef PA_EMU_DIFF_DEV
constexpr uint64_t kTag = pa::emu::kOnChipTag;
#else
constexpr uint64_t kTag = 0;
#endif

template <typename TileT>
inline void Place(TileT &tile, uint32_t offset)
{
    TASSIGN(tile, uint64_t(offset) | kTag);
}

template <typename E>
using GmNd = pto::GlobalTensor<E, pto::Shape<1, 1, 1, pto::DYNAMIC, pto::DYNAMIC>,
                               pto::Stride<1, 1, 1, pto::DYNAMIC, pto::DYNAMIC>, pto::Layout::ND>;

inline thread_local std::string g_error;

/* Run `body` on a fresh emulated core of `kind` (the dev build) or directly (the CPU build); 0 or -1. */
template <typename Body>
int32_t Guarded(bool cube, Body body)
{
    try {
#ifdef PA_EMU_DIFF_DEV
        pa::emu::Core core = pa::emu::MakeCore(pa::emu::Soc("910B2"),
                                               cube ? pa::emu::CoreKind::Cube : pa::emu::CoreKind::Vector, 0, 0, 7);
        pa::emu::SetCurrent(&core);
        struct Reset {
            ~Reset() { pa::emu::SetCurrent(nullptr); }
        } reset;
        if (!cube) {
            set_mask_norm();
            set_vector_mask(~0ull, ~0ull);
        }
#else
        (void)cube;
#endif
        body();
        return 0;
    } catch (const std::exception &err) {
        g_error = err.what();
        return -1;
    }
}

}  // namespace pa_diff

/* One harness per library, so one definition. */
extern "C" const char *pa_diff_last_error(void) { return pa_diff::g_error.c_str(); }

#endif /* PA_EMU_DIFF_COMMON_HPP */
