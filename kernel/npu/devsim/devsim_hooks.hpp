/*
 * What the kernel's platform layer (pa_platform.hpp) asks of the device-path simulation (-DPA_DEVICE_SIM): the
 * fault injection of the checker's negative controls (a dropped or mutated synchronisation edge) and the
 * bookkeeping of its reports and figures.  Everything the device itself does (intrinsics, flags, cross-core
 * sync) goes through the emulator's intrinsics, not through here.
 */
#ifndef PA_DEVSIM_HOOKS_HPP
#define PA_DEVSIM_HOOKS_HPP

#include <cstdint>

namespace pa::devsim {

/* Both ends of edge `edge` (pa_sync.hpp) do nothing in this launch (pa_sim_drop_sync). */
bool EdgeDropped(int edge);
/* Edge `edge` carries mutation `kind` (PA_SIM_MUTATE_*, pa_sim_mutate_sync). */
bool Mutated(int edge, int kind);
/* Negative control of the kernel's L1 zero fills: the fills of kind `kind` (pa::ZeroFill) are skipped. */
bool SkipZeroFill(int kind);
/* Negative control of the store-atomic reset: the kernel's set_atomic_none at entry is skipped. */
bool KeepInheritedAtomics();
/* Negative control of initcheck: every TLOAD (LoadNd) from GM argument `slot` loads one row fewer than the tile's
 * valid rows, leaving that row of on-chip memory unwritten (pa_sim_shorten_load). */
bool ShortenedLoad(int slot);
/* One event of the figures (pa::Counter). */
void Count(int counter);
/* The logical work item the calling core is on, for reports. */
void SetWorkItem(int32_t seq, int32_t head, int32_t split);
void SetUnit(int32_t unit);
/* A block id the kernel is about to use: outside [0, num_blocks) ends the launch with PA_ERR_BAD_BLOCK_ID, the
 * mock's record (the device would read another sequence's pages). */
void CheckBlockId(int64_t id, int64_t tableIndex);
/* The kernel's scalar unit read a GM word (the trace records it: the scalar unit stalls on it). */
void ScalarGmRead();
/* A UB tile assigned [begin, end): in checked mode, overlapping the fixed temporary [tempBegin, tempEnd) that
 * A2/A3's row-expand instructions write ends the launch with a HAZARD. */
void UbAssigned(uint64_t begin, uint64_t end, uint64_t tempBegin, uint64_t tempEnd);

}  // namespace pa::devsim

#endif /* PA_DEVSIM_HOOKS_HPP */
