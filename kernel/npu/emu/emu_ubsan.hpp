/*
 * Implicit integer conversions in the kernel's code and pto-isa's that changed a value (emu_ubsan.cpp): the
 * handler records one per core thread; these raise it as a Fault, or forget it when a core starts.
 */
#ifndef PA_EMU_UBSAN_HPP
#define PA_EMU_UBSAN_HPP

namespace pa::emu {
/* Throw the Fault naming the recorded conversion (file:line:column, values, types, core), if there is one. */
void RaisePendingConversion();
void ClearPendingConversion();
}  // namespace pa::emu

#endif /* PA_EMU_UBSAN_HPP */
