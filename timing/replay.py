"""Replays a launch's instruction trace on a model of an A2 and predicts its device time.

The model, in the order it is applied:

* each core role (cube, vector 0, vector 1 of every cluster) issues its events in program order from a scalar
  unit into in-order pipe queues (MTE2, MTE1, M, FIX, V, MTE3, S); an instruction starts when its queue is free
  and every wait before it on that queue is satisfied, and lasts what ``Pricer`` charges;
* ``set_flag`` happens on the source queue once its earlier work is done; ``wait_flag`` holds the destination
  queue until the matching set (first in, first out per flag); a cross-core signal happens on its pipe's queue
  plus the hand-off latency; a cross-core wait (and the all-vector barrier) holds every later instruction of
  the role; scalar reads stall the issue;
* global memory is shared: K/V, Q, O and block-table bytes come from HBM; scratch and split partials from L2.
  Under warm-L2 conditions (``inputs_in_l2``: a harness repeating the launch on tensors that fit the L2, without
  flushing it) every GM transfer is served by L2 at its per-core rate and none occupies HBM.
  A transfer occupies HBM for its bytes over its DMA efficiency.  When the cores' combined HBM occupancy over the
  launch exceeds nominal bandwidth x efficiency, every HBM transfer is stretched by that ratio and the trace
  replayed again, until the two agree;
* a launch floor is added once.

Nothing here is measured on a device: every output is a prediction.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field

import numpy as np

from timing.costs import CostTables
from timing.model import DEFAULT, ModelConstants, band_ends
from timing.trace import (
    EV_ALLVEC,
    EV_BARRIER,
    EV_INSTR,
    EV_SET,
    EV_SIGNAL,
    EV_WAIT,
    EV_XWAIT,
    PIPE_ALL,
    PIPE_FIX,
    PIPE_MTE1,
    PIPE_MTE2,
    PIPE_MTE3,
    PIPE_S,
    PIPE_V,
    PIPES,
    TO_VECTORS,
    Trace,
)

#: GM slots whose traffic is scratch or split partials (kernel ABI: s, p, o_tmp, o_core, l), served from L2
SCRATCH_SLOTS = frozenset({14, 15, 16, 18, 19})
#: pto-isa's pipe keys for each transfer, by (op, pipe)
TRANSFER_KEYS = {("TLOAD", PIPE_MTE2): "GM_TO_L1", ("TSTORE", PIPE_FIX): "L0C_TO_GM", ("TSTORE", PIPE_MTE3): "UB_TO_GM",
                 ("TMOV", PIPE_MTE1): "L1_TO_L0B", ("TEXTRACT", PIPE_MTE1): "L1_TO_L0A"}
DTYPES = {2: "fp16", 4: "fp32"}
#: The device stream's transfers (the emulator's intrinsics, ``kernel/npu/devsim/devsim_trace.hpp``): pto-isa's
#: pipe key of each.  GM ones are priced like TLOAD/TSTORE (bytes, burst efficiency, L2 for scratch slots).
DEVICE_GM_TRANSFERS = {
    "copy_gm_to_cbuf_multi_nd2nz_b16": "GM_TO_L1", "copy_gm_to_ubuf_align_b16": "GM_TO_UB",
    "copy_gm_to_ubuf_align_b32": "GM_TO_UB", "copy_ubuf_to_gm_align_b16": "UB_TO_GM",
    "copy_ubuf_to_gm_align_b32": "UB_TO_GM", "copy_matrix_cc_to_gm": "L0C_TO_GM",
}
DEVICE_ON_CHIP_MOVES = {
    "img2colv2_cbuf_to_ca": "L1_TO_L0A", "img2colv2_cbuf_to_cb": "L1_TO_L0B", "load_cbuf_to_cb": "L1_TO_L0B",
    "create_cbuf_matrix": "L1_FILL", "create_cbuf_matrix_bf16": "L1_FILL",
}
#: A scalar load of a GM word (tiling words, block-table entries), in both traces.
SCALAR_GM_READ = "scalar GM read"
#: The device's control instructions (set_vector_mask, set_ctrl, get_block_idx, sbitset0, ...): no pipe time.
DEVICE_CONTROL_PREFIXES = ("set_", "get_", "sbitset")
#: Vector intrinsics priced as another of pto-isa's per-intrinsic entries (the conversions share one model; a
#: UB -> UB copy on the V pipe is a vcopy of its 256-byte repeats).
DEVICE_VECTOR_PROXIES = {"vconv_f162f32": "vconv", "vconv_bf162f32": "vconv", "vconv_f322f16r": "vconv",
                         "vconv_f322bf16r": "vconv", "copy_ubuf_to_ubuf": "vcopy"}


@dataclass(frozen=True)
class Priced:
    seconds: float
    hbm_bytes: int = 0
    #: what the transfer occupies of HBM: its bytes over its DMA efficiency (short bursts waste DRAM time too)
    hbm_load_bytes: float = 0.0


class Pricer:
    """What each instruction costs on an A2: pto-isa's cycle tables plus the model's DMA and memory terms."""

    def __init__(self, costs: CostTables, constants: ModelConstants, op_names: tuple[str, ...], *,
                 inputs_in_l2: bool = False) -> None:
        self.costs, self.k, self.op_names = costs, constants, op_names
        self.inputs_in_l2 = inputs_in_l2
        self.cycle_s = 1.0 / costs.frequency_hz

    def dma_efficiency(self, burst_bytes: int, offset: int) -> float:
        """Efficiency of a burst: 1 from the full-efficiency length on, falling linearly in log2 length to
        ``dma_efficiency_32b`` at 32 bytes, below that in proportion.  A burst counts as no longer than the
        alignment of its start (a 256-byte row at a 32-byte boundary is priced as a 32-byte burst)."""
        k = self.k
        full = k.dma_full_efficiency_burst_bytes
        align = offset & -offset if offset else full
        b = max(1, min(burst_bytes, align))
        if b >= full:
            return 1.0
        if b < 32:
            return k.dma_efficiency_32b * b / 32
        span = np.log2(full) - np.log2(32)
        return k.dma_efficiency_32b + (1 - k.dma_efficiency_32b) * (np.log2(b) - np.log2(32)) / span

    def price(self, ev: np.void | dict) -> Priced:
        op = self.op_names[ev["op"]] if ev["op"] < len(self.op_names) else "?"
        pipe, rows, cols = int(ev["pipe"]), int(ev["rows"]), int(ev["cols"])
        dtype = DTYPES.get(int(ev["elem_bytes"]), "fp32")
        if op in DEVICE_GM_TRANSFERS:
            return self._gm_transfer(DEVICE_GM_TRANSFERS[op], pipe, ev)
        if op in ("TLOAD", "TSTORE"):
            key = "GM_TO_UB" if op == "TLOAD" and ev["slot"] in SCRATCH_SLOTS and pipe == PIPE_MTE2 else None
            return self._gm_transfer(key or TRANSFER_KEYS.get((op, pipe), "GM_TO_L1"), pipe, ev)
        if op in DEVICE_ON_CHIP_MOVES:
            return Priced(self.costs.transfer_cycles(DEVICE_ON_CHIP_MOVES[op], int(ev["bytes"])) * self.cycle_s)
        if op == "mad":
            cycles = self.costs.matmul_cycles(rows, int(ev["k"]), cols, "fp16")
            return Priced(cycles * self.k.cube_cost_factor * self.cycle_s)
        intrinsic = DEVICE_VECTOR_PROXIES.get(op, op)
        if intrinsic in self.costs.intrinsics and pipe == PIPE_V:
            repeats = rows if op != "copy_ubuf_to_ubuf" else -(-int(ev["bytes"]) // 256)
            cycles = self.costs.intrinsics[intrinsic].cycles(repeats) if repeats else 0.0
            return Priced(cycles * self.k.vector_cost_factor * self.cycle_s)
        if op.startswith(DEVICE_CONTROL_PREFIXES):
            return Priced(0.0)  # a device control instruction (masks, CTRL, matrix and ND parameters): no pipe time
        if op[:1].islower() and op != SCALAR_GM_READ:  # the device stream's names are lower case, tile ops not
            raise KeyError(f"no price for the device intrinsic {op!r} on pipe {PIPES[pipe]}: add it to "
                           "timing.replay's device tables")
        return self._price_tile_op(op, pipe, rows, cols, dtype, ev)

    def _gm_transfer(self, key: str, pipe: int, ev: np.void | dict) -> Priced:
        """A GM load or store: pto-isa's pipe rate over the burst's DMA efficiency; scratch and split partials
        come from L2, everything else occupies HBM (or, under warm-L2 conditions, comes from L2 too)."""
        nbytes = int(ev["bytes"])
        seconds = self.costs.transfer_cycles(key, nbytes) * self.cycle_s
        if pipe == PIPE_MTE2:
            seconds /= self.k.mte2_rate_factor
        eff = self.dma_efficiency(int(ev["burst_bytes"]), int(ev["gm_offset"]))
        seconds /= eff
        if self.inputs_in_l2 or int(ev["slot"]) in SCRATCH_SLOTS:
            return Priced(max(seconds, nbytes / self.k.l2_bytes_per_s_per_core))
        return Priced(seconds, hbm_bytes=nbytes, hbm_load_bytes=nbytes / eff)

    def _price_tile_op(self, op: str, pipe: int, rows: int, cols: int, dtype: str, ev: np.void | dict) -> Priced:
        """Tile-level instructions: the removed CPU build's record, kept for the synthetic traces of
        tests/test_timing_replay.py."""
        if op in ("TMOV", "TEXTRACT"):
            return Priced(self.costs.transfer_cycles(TRANSFER_KEYS[(op, PIPE_MTE1)], int(ev["bytes"])) * self.cycle_s)
        if op == "TEXPANDS_L1":
            return Priced(self.costs.transfer_cycles("L1_FILL", int(ev["bytes"])) * self.cycle_s)
        if op in ("TMATMUL", "TMATMUL_ACC"):
            cycles = self.costs.matmul_cycles(rows, int(ev["k"]), cols, dtype)
            return Priced(cycles * self.k.cube_cost_factor * self.cycle_s)
        if op == SCALAR_GM_READ:
            return Priced(self.k.scalar_gm_read_s)
        if op == "GetValue":
            return Priced(self.k.scalar_ub_read_s)
        return Priced(self.costs.vector_cycles(op, dtype, rows, cols) * self.k.vector_cost_factor * self.cycle_s)


@dataclass
class Prediction:
    """A predicted launch: device µs, the bound, and where the time went."""

    predicted_us: float
    bound: str
    hbm_bytes: int
    hbm_stretch: float
    #: the time HBM needs for the launch's transfers at the model's sustained rate (its floor for this trace)
    hbm_time_s: float
    busy_s: dict[tuple[int, int, int], float] = field(repr=False)       # (core, role, pipe) -> busy seconds
    end_s: dict[tuple[int, int], float] = field(repr=False)              # (core, role) -> last event end
    spans: list[tuple[int, int, int, str, float, float]] = field(repr=False, default_factory=list)

    def tb_per_s(self, model_bytes: int) -> float:
        return model_bytes / (self.predicted_us * 1e-6) / 1e12


#: per event, the fields the replay reads, as a tuple: kind, pipe, src, dst, id, op, then what prices it
_FIELDS = ("kind", "pipe", "src", "dst", "id", "op")
_PRICE_FIELDS = ("op", "pipe", "rows", "cols", "k", "elem_bytes", "bytes", "slot", "burst_bytes", "gm_offset")


def _rows(evs: np.ndarray) -> list[tuple]:
    cols = [evs[f].tolist() for f in _FIELDS + _PRICE_FIELDS]
    return list(zip(*cols, strict=True))


class _Role:
    """Replay state of one core role."""

    def __init__(self, key: tuple[int, int], events: list[tuple], prices: list[Priced]) -> None:
        self.key, self.events, self.prices = key, events, prices
        self.pos = 0
        self.issue = 0.0
        self.free = [0.0] * len(PIPES)   # queue free from
        self.ready = [0.0] * len(PIPES)  # queue held by waits until
        self.busy = [0.0] * len(PIPES)
        self.arrived: set[int] = set()  # all-vector barrier generations this role has signalled


def replay(trace: Trace, costs: CostTables, constants: ModelConstants = DEFAULT, *, keep_spans: bool = False,
           max_rounds: int = 6, inputs_in_l2: bool = False) -> Prediction:
    """Predicts the launch of ``trace`` (see the module docstring for the model).  ``inputs_in_l2``: the warm-L2
    conditions of a harness that repeats the launch without flushing L2 (the caller checks that the launch's
    tensors fit the L2, ``constants.fits_l2``)."""
    pricer = Pricer(costs, constants, trace.op_names, inputs_in_l2=inputs_in_l2)
    streams = {key: _rows(evs) for key, evs in trace.streams().items()}
    cache: dict[tuple, Priced] = {}
    prices = {}
    for key, evs in streams.items():
        out = []
        for ev in evs:
            if ev[0] != EV_INSTR:
                out.append(Priced(0.0))
                continue
            sig = ev[6:]
            if sig not in cache:
                cache[sig] = pricer.price(dict(zip(_PRICE_FIELDS, sig, strict=True)))
            out.append(cache[sig])
        prices[key] = out
    hbm_bytes = sum(p.hbm_bytes for ps in prices.values() for p in ps)
    hbm_load = sum(p.hbm_load_bytes for ps in prices.values() for p in ps)
    hbm_rate = constants.hbm_peak_bytes_per_s * constants.hbm_efficiency
    stretch = 1.0
    result = _run(streams, prices, constants, stretch, keep_spans)
    for _ in range(max_rounds):
        makespan = max(result[1].values(), default=0.0)
        need = hbm_load / hbm_rate if hbm_rate > 0 else 0.0
        if makespan <= 0 or need <= makespan * 1.001:
            break
        stretch *= need / makespan
        result = _run(streams, prices, constants, stretch, keep_spans)
    busy, end, spans = result
    makespan = max(end.values(), default=0.0)
    makespan = max(makespan, hbm_load / hbm_rate if hbm_rate > 0 else 0.0)
    total = makespan + constants.launch_floor_s
    hbm_time = hbm_load / hbm_rate if hbm_rate > 0 else 0.0
    return Prediction(total * 1e6, _bound(busy, end, makespan, stretch), hbm_bytes, stretch, hbm_time, busy, end,
                      spans)


def replay_band(trace: Trace, costs: CostTables, constants: ModelConstants = DEFAULT, *,
                inputs_in_l2: bool = False) -> tuple[Prediction, Prediction, Prediction]:
    """``trace`` replayed at ``constants`` and at both ends of their bands (``band_ends``): nominal, optimistic,
    pessimistic, the triple every printed prediction carries (docs/TIMING_MODEL.md, rule 5)."""
    nominal, fast, slow = (replay(trace, costs, c, inputs_in_l2=inputs_in_l2) for c in band_ends(constants))
    return nominal, fast, slow


def _run(streams: dict[tuple[int, int], list[tuple]], prices: dict[tuple[int, int], list[Priced]],
         k: ModelConstants, stretch: float, keep_spans: bool):
    roles = {key: _Role(key, evs, prices[key]) for key, evs in streams.items()}
    flags: dict[tuple, deque[float]] = defaultdict(deque)     # intra-core (core, role, src, dst, id)
    cross: dict[tuple, deque[float]] = defaultdict(deque)     # (core, id, direction, sub-core)
    barrier: dict[int, list[float]] = defaultdict(list)       # all-vector barrier generation -> arrival times
    barrier_gen: dict[tuple[int, int], int] = defaultdict(int)
    vectors = sum(1 for (_, role) in roles if role != 0)
    spans: list = []
    pending = list(roles.values())
    while pending:
        progressed = False
        for r in pending:
            progressed |= _advance(r, roles, flags, cross, barrier, barrier_gen, vectors, k, stretch, spans,
                                   keep_spans)
        pending = [r for r in pending if r.pos < len(r.events)]
        if pending and not progressed:
            raise RuntimeError("trace replay is stuck: a wait has no matching signal in the trace")
    busy = {(c, ro, p): r.busy[p] for (c, ro), r in roles.items() for p in range(len(PIPES))}
    end = {key: max(max(r.free), r.issue) for key, r in roles.items()}
    return busy, end, spans


def _advance(r: _Role, roles, flags, cross, barrier, barrier_gen, vectors: int, k: ModelConstants, stretch: float,
             spans: list, keep_spans: bool) -> bool:
    core, role = r.key
    moved = False
    while r.pos < len(r.events):
        kind, pipe, src, dst, fid, op = r.events[r.pos][:6]
        if kind == EV_INSTR:
            price = r.prices[r.pos]
            seconds = price.seconds * (stretch if price.hbm_bytes else 1.0)
            start = max(r.issue, r.free[pipe], r.ready[pipe])
            r.free[pipe] = start + seconds
            r.busy[pipe] += seconds
            if pipe == PIPE_S:
                r.issue = r.free[pipe]  # the scalar unit waits for its own reads
            if keep_spans:
                spans.append((core, role, pipe, op, start, start + seconds))
        elif kind == EV_SET:
            t = max(r.issue, r.free[src], r.ready[src])
            r.free[src] = t
            flags[(core, role, src, dst, fid)].append(t)
        elif kind == EV_WAIT:
            q = flags[(core, role, src, dst, fid)]
            if not q:
                return moved  # its set is later in program order than this wait: not in our kernels
            r.ready[dst] = max(r.ready[dst], q.popleft())
        elif kind == EV_BARRIER and pipe == PIPE_ALL:
            t = max(max(r.free), r.issue)
            r.ready = [max(x, t) for x in r.ready]
        elif kind == EV_SIGNAL:
            t = max(r.issue, r.free[pipe], r.ready[pipe])
            r.free[pipe] = t
            direction = dst
            subs = (0, 1) if direction == TO_VECTORS else (role - 1,)
            for sub in subs:
                cross[(core, fid, direction, sub)].append(t + k.handoff_latency_s)
        elif kind == EV_XWAIT:
            direction = dst
            subs = (role - 1,) if direction == TO_VECTORS else (0, 1)
            queues = [cross[(core, fid, direction, sub)] for sub in subs]
            if not all(queues):
                return moved
            t = max(q.popleft() for q in queues)
            _hold(r, t)
        elif kind == EV_ALLVEC:
            gen = barrier_gen[r.key]
            if gen not in r.arrived:
                t = max(r.issue, r.free[pipe], r.ready[pipe])
                barrier[gen].append(t + k.handoff_latency_s)
                r.free[pipe] = t
                r.arrived.add(gen)
                moved = True
            if len(barrier[gen]) < vectors:
                return moved  # arrived; the others have not
            _hold(r, max(barrier[gen]))
            barrier_gen[r.key] = gen + 1
        r.pos += 1
        moved = True
    return moved


def _hold(r: _Role, t: float) -> None:
    r.issue = max(r.issue, t)
    r.ready = [max(x, t) for x in r.ready]


def _bound(busy: dict, end: dict, makespan: float, stretch: float) -> str:
    """What limits the launch, in the order the model can tell them apart."""
    if stretch > 1.001:
        return "HBM"
    if makespan <= 0:
        return "launch floor"
    ends = np.array(list(end.values()))
    imbalanced = ends.max() > 1.15 * ends.mean()
    slowest = max(end, key=end.get)
    per_pipe = {p: busy[(slowest[0], slowest[1], p)] for p in range(len(PIPES))}
    pipe = max(per_pipe, key=per_pipe.get)
    if per_pipe[pipe] < 0.6 * end[slowest]:
        return "load imbalance" if imbalanced else "hand-off latency"
    name = PIPES[pipe]
    if name in ("MTE2", "MTE3", "FIX"):
        return "DMA (MTE)" if name == "MTE2" else f"MTE ({name})"
    return {"M": "cube", "V": "vector", "MTE1": "MTE (MTE1)", "S": "scalar"}.get(name, name)
