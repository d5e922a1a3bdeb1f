/*
 * The simulation side of the platform layer's records: GM checks and figures, flags and barriers with their
 * edge ids, cross-core signals, on-chip high-water marks.  See pa_record.hpp.
 */
#include "pa_record.hpp"

#include <algorithm>
#include <atomic>
#include <memory>

namespace pa::rec {

void GmTraffic(int32_t slot, uint64_t off, uint64_t rows, uint64_t cols, uint64_t rowStride, uint64_t colStride,
               uint32_t elemBytes, bool write, int traffic)
{
    sim::CheckAccess(slot, off, rows, cols, rowStride, colStride, elemBytes, write);
    sim::Counters &c = *sim::tctx.ctr;
    const uint64_t bytes = rows * cols * elemBytes;
    (write ? c.gmWriteBytes : c.gmReadBytes) += bytes;
    if (traffic == kTrafficKv) c.kvReadBytes += bytes;
    if (traffic == kTrafficScratch) c.scratchBytes += bytes;
    if (traffic == kTrafficPartial) c.partialBytes += bytes;
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

namespace {

/* A mutation of edge `edge` (pa_sim_mutate_sync): what a plausible wrong kernel would issue instead. */
int Mutated(int edge, int kind) { return sim::MutatedEdge(kind) == edge; }

}  // namespace

namespace {

/* Instruction names of the trace, in op-code order (pa_sim_trace_op_name). */
const char *const kOpNames[] = {"TLOAD", "TSTORE", "TMOV", "TEXTRACT", "TEXPANDS_L1", "TMATMUL", "TMATMUL_ACC",
                                "TEXP", "TLOG", "TCOLSUM", "TMULS", "TADDS", "TADD", "TSUB", "TMUL", "TMAX",
                                "TROWMAX", "TROWSUM", "TROWEXPANDSUB", "TROWEXPANDMUL", "TROWEXPANDDIV", "TCVT",
                                "TEXPANDS", "GetValue", "scalar GM read", "TROWEXPAND"};
constexpr int kOpCount = int(sizeof(kOpNames) / sizeof(kOpNames[0]));

uint8_t OpCode(const char *op)
{
    for (int i = 0; i < kOpCount; ++i) {
        if (std::strcmp(kOpNames[i], op) == 0) return uint8_t(i);
    }
    return uint8_t(kOpCount); /* unknown: past the table */
}

pa_sim_trace_event Event(int kind, int pipe)
{
    pa_sim_trace_event e{};
    e.core = uint16_t(sim::tctx.core);
    e.role = uint8_t(sim::tctx.role);
    e.kind = uint8_t(kind);
    e.pipe = uint8_t(pipe);
    e.slot = 255;
    return e;
}

void TraceSync(int kind, int pipe, int src, int dst, int id)
{
    if (sim::tctx.trace == nullptr) return;
    pa_sim_trace_event e = Event(kind, pipe);
    e.src = uint8_t(src);
    e.dst = uint8_t(dst);
    e.id = uint16_t(id);
    sim::tctx.trace->push_back(e);
}

}  // namespace

const char *OpName(int32_t op) { return op >= 0 && op < kOpCount ? kOpNames[op] : nullptr; }

void TraceInstr(int pipe, const char *op, const Shape &shape, const Access *acc, int n)
{
    pa_sim_trace_event e = Event(PA_SIM_EV_INSTR, pipe);
    e.op = OpCode(op);
    e.rows = shape.rows;
    e.cols = shape.cols;
    e.k = shape.k;
    e.elem_bytes = uint8_t(shape.elemBytes);
    e.bytes = uint64_t(shape.rows) * shape.cols * shape.elemBytes;
    for (int i = 0; i < n; ++i) {
        if (acc[i].space != sim::hz::kSpaceGm || acc[i].rows == 0) continue;
        e.slot = uint8_t(acc[i].slot);
        e.gm_offset = acc[i].base;
        e.bursts = uint32_t(acc[i].rows);
        e.burst_bytes = uint32_t(acc[i].rowBytes);
        /* a burst as long as its pitch is one contiguous run */
        if (acc[i].rows > 1 && acc[i].pitchBytes == acc[i].rowBytes) {
            e.burst_bytes = uint32_t(acc[i].rows * acc[i].rowBytes);
            e.bursts = 1;
        }
        e.bytes = acc[i].rows * acc[i].rowBytes;
    }
    sim::tctx.trace->push_back(e);
}

void SetFlag(int src, int dst, int event, int edge)
{
    if (sim::EdgeDropped(edge)) return;
    if (Mutated(edge, PA_SIM_MUTATE_WRONG_SOURCE)) src = kPipeS;   /* set (and waited) from the scalar pipe */
    if (Mutated(edge, PA_SIM_MUTATE_SHARED_EVENT)) event = 0;      /* both ping-pong halves on event 0 */
    if (sim::tctx.hz) sim::tctx.hz->SetFlag(src, dst, event);
    TraceSync(PA_SIM_EV_SET, src, src, dst, event);
}

void WaitFlag(int src, int dst, int event, int edge)
{
    if (sim::EdgeDropped(edge)) return;
    if (Mutated(edge, PA_SIM_MUTATE_WRONG_SOURCE)) src = kPipeS;
    if (Mutated(edge, PA_SIM_MUTATE_SHARED_EVENT)) event = 0;
    if (sim::tctx.hz) sim::tctx.hz->WaitFlag(src, dst, event);
    TraceSync(PA_SIM_EV_WAIT, dst, src, dst, event);
}

void Barrier(int pipe, int edge)
{
    if (sim::EdgeDropped(edge)) return;
    if (sim::tctx.hz) sim::tctx.hz->Barrier(pipe);
    TraceSync(PA_SIM_EV_BARRIER, pipe, pipe, pipe, 0);
}

void Signal(uint16_t id, int edge, int pipe, Direction dir)
{
    if (sim::EdgeDropped(edge)) return;
    if (Mutated(edge, PA_SIM_MUTATE_SIGNAL_PIPE)) pipe = kPipeS; /* covers only scalar work */
    TraceSync(PA_SIM_EV_SIGNAL, pipe, pipe, dir, id);
    if (dir == kToVectors) sim::SignalVectors(id, pipe);
    else sim::SignalCube(id, pipe);
}

void Wait(uint16_t id, int edge, Direction dir)
{
    if (sim::EdgeDropped(edge)) return;
    if (dir == kToVectors) sim::WaitFromCube(id);
    else sim::WaitFromVectors(id);
    TraceSync(PA_SIM_EV_XWAIT, kPipeAll, kPipeAll, dir, id);
}

void AllVectorBarrier(int edge, int pipe)
{
    if (sim::EdgeDropped(edge)) return;
    if (Mutated(edge, PA_SIM_MUTATE_SIGNAL_PIPE)) pipe = kPipeS;
    TraceSync(PA_SIM_EV_ALLVEC, pipe, pipe, 0, kFlagReduceBarrier);
    sim::VectorBarrier(pipe);
}

namespace {

/* Checked mode: a core's on-chip memory starts as NaN (all-ones bytes are NaN in fp16, bf16 and fp32), as
 * stale as the device leaves it, so a read of memory the kernel never wrote shows in the output. */
void PoisonOnChip(int32_t role)
{
    auto &m = pto::NPUMemoryModel::Instance();
    if (role == sim::kRoleCube) {
        std::memset(m.GetL1Base(), 0xff, kL1Bytes);
        std::memset(m.GetL0ABase(), 0xff, kL0aBytes);
        std::memset(m.GetL0BBase(), 0xff, kL0bBytes);
        std::memset(m.GetL0CBase(), 0xff, kL0cBytes);
    } else {
        std::memset(m.GetUBBase(), 0xff, kUbBytes);
    }
}

}  // namespace

void RunCoreRole(sim::Launch &L, uint32_t core, int32_t role, const std::function<void()> &body)
{
    using namespace sim;
    pto::cpu_sim::ScopedExecutionContext ctx(core, role == kRoleCube ? 0 : uint32_t(role - kRoleVec0), kVecSubCores);
    tctx = ThreadCtx{};
    tctx.launch = &L;
    tctx.core = int32_t(core);
    tctx.role = role;
    tctx.ctr = &L.counters[core * kRolesPerCluster + uint32_t(role)];
    if (L.tracing) tctx.trace = &L.trace[core * kRolesPerCluster + uint32_t(role)];
    std::unique_ptr<hz::Role> checker;
    if (L.hazards) {
        checker = std::make_unique<hz::Role>(L, core, role);
        tctx.hz = checker.get();
        PoisonOnChip(role);
    }
    try {
        body();
        if (checker) checker->Finish();
    } catch (const Abort &) {
        /* the launch failed; the first error is in L.error */
    }
    tctx.hz = nullptr;
    tctx.trace = nullptr;
}

namespace {
std::atomic<int32_t> g_skipZeroPadding{0}; /* a mask of pa::ZeroFill kinds */
}  // namespace

bool SkipZeroFill(int kind) { return (g_skipZeroPadding.load(std::memory_order_relaxed) & kind) == kind; }

void InvalidateCache()
{
    if (sim::tctx.hz) sim::tctx.hz->InvalidateCache();
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

extern "C" void pa_sim_skip_zero_padding(int32_t on) { pa::rec::g_skipZeroPadding.store(on); }
