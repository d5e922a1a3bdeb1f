/*
 * initcheck: which on-chip bytes were written in this launch, and whether a value that reaches global memory
 * derives from bytes that were not (the defect class CANN's msSanitizer initcheck reports on a device).
 *
 * Every core carries a shadow beside its buffers (Core::init): per byte, kClean when an instruction of this
 * launch wrote it from written data, kUnwritten when nothing did, else the id of the origin its value derives
 * from.  Each intrinsic propagates the shadow at the granularity it computes: a move per byte, a vector op per
 * lane, a reduction per output, mad per element of C (tainted iff a row of A or a column of B it read over the
 * valid k is).  The first unwritten byte one execution of an instruction reads becomes that execution's origin
 * (instruction, region, offset); everything it derives from unwritten bytes carries that origin on.  Reading
 * unwritten bytes is no fault by itself (the kernel computes columns it never stores); a GM store of a value
 * derived from them is: UNINIT, naming the store, its region and offset, and the origin.  A scalar load of such
 * bytes is UNINIT at once: its value leaves the data paths the emulator follows (control flow, addresses).
 *
 * Off (no shadow, no cost) unless SetInitCheck turned it on: the device-path simulation does in checked mode.
 */
#ifndef PA_EMU_INITCHECK_HPP
#define PA_EMU_INITCHECK_HPP

#include <algorithm>
#include <cstdint>

#include "emu_core.hpp"

namespace pa::emu {

inline constexpr Taint kClean = 0, kUnwritten = 0xffff, kOriginsFull = 0xfffe;

/* On: every byte of `core`'s buffers unwritten (a launch's start).  Off: the shadow is released. */
void SetInitCheck(Core &core, bool on);
/* Marks bytes [offset, offset + bytes) of `space` of the current core written (a host that fills a buffer). */
void MarkWritten(Space space, uint64_t offset, uint64_t bytes);
/* The shadow of the byte at `at` (a pointer OnChip returned for `space`) of the current core; null while off. */
Taint *ShadowAt(Space space, const uint8_t *at);

inline void Mark(Taint *shadow, uint64_t bytes, Taint taint)
{
    if (shadow != nullptr) std::fill(shadow, shadow + bytes, taint);
}

/* What one execution of an instruction reads (made in the instruction's body, when its pipe retires it). */
class Reads {
public:
    explicit Reads(const char *intrinsic);
    /* kClean when the `bytes` shadow bytes at `shadow` are all written from written data; else the first
     * byte's origin that is not (an unwritten byte: this execution's origin). */
    Taint Of(Space space, const Taint *shadow, uint64_t bytes)
    {
        for (uint64_t b = 0; b < bytes; ++b) {
            if (shadow[b] != kClean) return shadow[b] == kUnwritten ? Origin(space, shadow + b) : shadow[b];
        }
        return kClean;
    }
    /* A move: each byte keeps its taint, an unwritten byte becomes this execution's origin. */
    void Copy(Space space, const Taint *from, Taint *to, uint64_t bytes);
    /* UNINIT when any of the bytes is unwritten or derives from unwritten bytes; `what` says where they go. */
    void Check(Pipe pipe, const char *operand, Space space, const Taint *shadow, uint64_t bytes, const char *what);

private:
    Taint Origin(Space space, const Taint *at);
    Core &core_;
    const char *intrinsic_;
    Taint mine_ = kClean;
};

inline constexpr const char *kToGm = "stored to global memory";
inline constexpr const char *kToScalar =
    "loaded by the scalar unit (its value can steer control flow, addresses and GM writes the emulator does not follow)";

}  // namespace pa::emu

#endif /* PA_EMU_INITCHECK_HPP */
