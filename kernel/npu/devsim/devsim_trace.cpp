/* The device's instruction stream as trace events (devsim_trace.hpp). */
#include "devsim_trace.hpp"

#include <mutex>
#include <stdexcept>
#include <string>

namespace pa::devsim {
namespace {

std::mutex g_opsMutex;
std::vector<std::string> g_ops; /* op-code -> intrinsic name, shared by every launch of the process */

/* The trace's pipe numbers (pa_sim_api.h, timing/trace.py): S, MTE2, MTE1, M, FIX, V, MTE3, all. */
uint8_t TracePipe(emu::Pipe pipe)
{
    switch (pipe) {
        case emu::Pipe::S: return 0;
        case emu::Pipe::MTE2: return 1;
        case emu::Pipe::MTE1: return 2;
        case emu::Pipe::M: return 3;
        case emu::Pipe::FIX: return 4;
        case emu::Pipe::V: return 5;
        case emu::Pipe::MTE3: return 6;
        case emu::Pipe::ALL: return 7;
    }
    return 7;
}

constexpr uint8_t kNoSlot = 255;
constexpr uint8_t kToVectors = 0, kToCube = 1;

}  // namespace

uint8_t TraceOp(const char *name)
{
    std::lock_guard<std::mutex> lock(g_opsMutex);
    for (size_t i = 0; i < g_ops.size(); ++i) {
        if (g_ops[i] == name) return uint8_t(i);
    }
    if (g_ops.size() >= 255) throw std::runtime_error("trace: more than 255 distinct intrinsics");
    g_ops.emplace_back(name);
    return uint8_t(g_ops.size() - 1);
}

const char *TraceOpName(int32_t op)
{
    std::lock_guard<std::mutex> lock(g_opsMutex);
    return op >= 0 && size_t(op) < g_ops.size() ? g_ops[size_t(op)].c_str() : nullptr;
}

pa_sim_trace_event TraceStream::Event(uint8_t kind, emu::Pipe pipe) const
{
    pa_sim_trace_event ev{};
    ev.core = uint16_t(block_);
    ev.role = uint8_t(role_);
    ev.kind = kind;
    ev.pipe = TracePipe(pipe);
    ev.slot = kNoSlot;
    return ev;
}

void TraceStream::RecordScalarGmRead()
{
    pa_sim_trace_event ev = Event(PA_SIM_EV_INSTR, emu::Pipe::S);
    ev.op = TraceOp("scalar GM read");
    ev.bytes = 4;
    events_.push_back(ev);
}

void TraceStream::Record(const emu::Issue &issue, const std::vector<GmClass> &gm)
{
    using emu::Kind;
    switch (issue.kind) {
        case Kind::SetFlag:
        case Kind::WaitFlag: {
            pa_sim_trace_event ev = Event(issue.kind == Kind::SetFlag ? PA_SIM_EV_SET : PA_SIM_EV_WAIT, issue.pipe);
            ev.src = TracePipe(issue.src);
            ev.dst = TracePipe(issue.dst);
            ev.id = uint16_t(issue.event);
            events_.push_back(ev);
            return;
        }
        case Kind::Barrier:
            events_.push_back(Event(PA_SIM_EV_BARRIER, issue.pipe));
            return;
        case Kind::CrossSet: {
            const int mode = int((issue.config >> 4) & 0xf), flag = int((issue.config >> 8) & 0xf);
            pa_sim_trace_event ev = Event(mode == 0 ? PA_SIM_EV_ALLVEC : PA_SIM_EV_SIGNAL, issue.pipe);
            ev.id = uint16_t(flag);
            ev.dst = role_ == 0 ? kToVectors : kToCube;
            if (mode == 0) allVecArmed_ |= 1u << flag;
            events_.push_back(ev);
            return;
        }
        case Kind::CrossWait: {
            const uint32_t bit = 1u << issue.event;
            if (allVecArmed_ & bit) { /* the all-vector barrier's wait: inside its EV_ALLVEC */
                allVecArmed_ &= ~bit;
                return;
            }
            pa_sim_trace_event ev = Event(PA_SIM_EV_XWAIT, emu::Pipe::S);
            ev.id = uint16_t(issue.event);
            ev.dst = role_ == 0 ? kToCube : kToVectors;
            events_.push_back(ev);
            return;
        }
        case Kind::ScalarRead: {
            pa_sim_trace_event ev = Event(PA_SIM_EV_INSTR, emu::Pipe::S);
            ev.op = TraceOp("GetValue");
            events_.push_back(ev);
            return;
        }
        case Kind::Work:
            break;
    }
    pa_sim_trace_event ev = Event(PA_SIM_EV_INSTR, issue.pipe);
    ev.op = TraceOp(issue.intrinsic);
    uint64_t written = 0, gmBytes = 0;
    bool gmSeen = false;
    for (const emu::Access &acc : issue.accesses) {
        if (acc.write) written += acc.bytes;
        if (acc.space != emu::Space::GM) continue;
        /* a transfer's GM side: a load reads it, a store writes it (an atomic store also reads it first) */
        const bool counts = issue.pipe == emu::Pipe::MTE2 ? !acc.write : acc.write;
        if (!counts) continue;
        gmBytes += acc.bytes;
        if (gmSeen) continue;
        gmSeen = true;
        for (const GmClass &g : gm) {
            if (acc.start >= g.start && acc.start < g.end) {
                ev.slot = uint8_t(g.slot);
                ev.gm_offset = acc.start - g.start;
            }
        }
    }
    const bool mad = issue.pipe == emu::Pipe::M;
    if (gmSeen) {
        ev.bytes = gmBytes;
        ev.bursts = issue.shape[0];
        ev.burst_bytes = issue.shape[1];
    } else if (mad) {
        ev.rows = issue.shape[0];
        ev.k = issue.shape[1];
        ev.cols = issue.shape[2];
        ev.elem_bytes = 2;
        ev.bytes = written;
    } else {
        ev.bytes = written;
        ev.rows = issue.shape[0]; /* vector: repeats; UB -> UB and L1 fills: bursts */
        ev.burst_bytes = issue.shape[1];
    }
    events_.push_back(ev);
}

}  // namespace pa::devsim
