/*
 * The simulation side of the platform layer's records: GM checks and figures, flags and barriers with their
 * edge ids, cross-core signals, on-chip high-water marks.  See pa_record.hpp.
 */
#include "pa_record.hpp"

#include <algorithm>

namespace pa::rec {

void GmTraffic(int32_t slot, uint64_t off, uint64_t rows, uint64_t cols, uint64_t rowStride, uint64_t colStride,
               uint32_t elemBytes, bool write, int traffic)
{
    sim::CheckAccess(slot, off, rows, cols, rowStride, colStride, elemBytes, write);
    sim::Counters &c = *sim::tctx.ctr;
    const uint64_t bytes = rows * cols * elemBytes;
    (write ? c.gmWriteBytes : c.gmReadBytes) += bytes;
    if (traffic == 1) c.kvReadBytes += bytes;      /* kTrafficKv      */
    if (traffic == 2) c.scratchBytes += bytes;     /* kTrafficScratch */
    if (traffic == 3) c.partialBytes += bytes;     /* kTrafficPartial */
}

void Count(int counter)
{
    sim::Counters &c = *sim::tctx.ctr;
    switch (counter) {
        case kCountHandoff: ++c.handoffs; break;
        case kCountUnit: ++c.units; break;
        case kCountTask: ++c.tasks; break;
        case kCountMatmul: ++c.matmuls; break;
        default: break;
    }
}

void SetFlag(int src, int dst, int event, int edge)
{
    if (sim::EdgeDropped(edge)) return;
    if (sim::tctx.hz) sim::tctx.hz->SetFlag(src, dst, event);
}

void WaitFlag(int src, int dst, int event, int edge)
{
    if (sim::EdgeDropped(edge)) return;
    if (sim::tctx.hz) sim::tctx.hz->WaitFlag(src, dst, event);
}

void Barrier(int pipe, int edge)
{
    if (sim::EdgeDropped(edge)) return;
    if (sim::tctx.hz) sim::tctx.hz->Barrier(pipe);
}

void Signal(uint16_t id, int edge, int pipe, Direction dir)
{
    if (sim::EdgeDropped(edge)) return;
    if (dir == kToVectors) sim::SignalVectors(id, pipe);
    else sim::SignalCube(id, pipe);
}

void Wait(uint16_t id, int edge, Direction dir)
{
    if (sim::EdgeDropped(edge)) return;
    if (dir == kToVectors) sim::WaitFromCube(id);
    else sim::WaitFromVectors(id);
}

void AllVectorBarrier(int edge, int pipe)
{
    if (sim::EdgeDropped(edge)) return;
    sim::VectorBarrier(pipe);
}

void NoteAssign(int space, uint64_t begin, uint64_t end)
{
    static const int kRegion[sim::hz::kSpaceGm] = {PA_SIM_REGION_UB, PA_SIM_REGION_L1, PA_SIM_REGION_L0A,
                                                   PA_SIM_REGION_L0B, PA_SIM_REGION_L0C};
    sim::RecordAssign(kRegion[space], end);
    if (space == sim::hz::kSpaceUb && sim::tctx.launch->checked && begin < pto::TMP_UB_OFFSET + kFixedTempBytes &&
        end > pto::TMP_UB_OFFSET) {
        sim::Fail(PA_ERR_HAZARD, -1, int64_t(begin), int64_t(pto::TMP_UB_OFFSET),
                  "UB buffer [%llu, %llu) on core %d overlaps A2/A3's fixed temporary [%u, %llu) that row-expand "
                  "and some conversion instructions write",
                  static_cast<unsigned long long>(begin), static_cast<unsigned long long>(end), sim::tctx.core,
                  pto::TMP_UB_OFFSET, static_cast<unsigned long long>(pto::TMP_UB_OFFSET + kFixedTempBytes));
    }
}

}  // namespace pa::rec
