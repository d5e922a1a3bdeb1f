/*
 * The host compiler's float -> bf16 conversion helper, which this libgcc lacks: scalar code of the kernel and
 * of pto-isa (e.g. a bfloat16_t(0.0f) fill value) calls it.  On the device the scalar unit converts with
 * round-to-nearest-even and no saturation; so does this.  Weak: the simulation library defines it too.
 */
#include <cstring>
#include <stdfloat>

#include "emu_numeric.hpp"

extern "C" __attribute__((weak)) std::bfloat16_t __truncsfbf2(float x)
{
    const uint16_t bits = pa::emu::Bf16FromF32(x, pa::emu::Round::Rint, false);
    std::bfloat16_t out;
    std::memcpy(&out, &bits, 2);
    return out;
}
