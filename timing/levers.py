"""Ranks the faster-kernel levers with the frozen model, before any of them is built.

    python -m timing.levers [--shapes b1_h32kv8_d128_ctx8k_bs128_fp16,...]
    python -m timing.levers --mla 16,128,8192,256 --core-count 3     # batch,heads,ctx,block_size of one MLA shape
    python -m timing.levers --mla 16,128,8192,256 --core-count 3 --fix-grid   # FIX rate x hand-off what-if

For each shape the simulation's trace of today's kernel is replayed as it is and with one lever's effect applied
to the trace or the constants, each an upper bound of what that lever can give:

* ``long bursts``: every K/V load one contiguous burst (a task that holds all KV heads of a page loads the page's
  rows across heads: 2 KiB per token for 8 x 128 fp16, pages back to back);
* ``no hand-off cost``: cube<->vector hand-offs free (what larger hand-offs, preloading the next task and no
  drain between tasks can at most recover);
* ``balanced cores``: every core ends when the average core ends, but not before HBM has moved the launch's
  bytes (what balanced tasks can at most recover);
* ``no launch floor``: the device-side fixed cost gone (what a batch-1 low-latency path fights);
* ``free rescale``: every ``TROWEXPANDMUL`` (on the device stream: every ``vmul``) costs nothing (the update's
  O rescale by exp(m_old - m_new), and the split-KV combine's weighting, so an over-estimate): the most AMLA's
  integer-add rescale (adding to the FP32 exponent bits instead of a float multiply) can give; in pto-isa's
  A2/A3 tables the row-expand add it would become costs 94 % of the multiply (16 x 128 fp32: 339 against 359 cycles);
* ``FIX x2``: the cube's L0C -> GM stores (S, and MLA's P.V atomic adds) at twice pto-isa's 70 GiB/s per core.  Not
  a kernel change but the rate nothing but a device can confirm: AMLA's published 86.8 % of peak, with the output
  accumulated in GM by atomic adds as in our MLA path, implies a FIX rate well above pto-isa's table if its bytes per
  token are ours (kernel/npu/PERFORMANCE.md, "Where #39's targets stand").

Every time is a prediction of the model in timing/, printed with its band (``timing.model.prediction_text``); the
gains are at the nominal constants and at the pessimistic end.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from types import MappingProxyType

import numpy as np

from timing import trace as tr
from timing.costs import load_cost_tables
from timing.model import DEFAULT, ModelConstants, band_ends, cube_peak_flops_per_s, prediction_text
from timing.predictions import trace_of
from timing.replay import replay
from workloads import bytes_model
from workloads.shapes import BenchShape, mla_shape, pr_shapes

DEFAULT_SHAPES = ("b1_h32kv8_d128_ctx8k_bs128_fp16", "b8_h32kv8_d128_ctx2k_bs128_fp16",
                  "b64_h32kv8_d128_ctx2k_bs128_fp16")


def long_bursts(trace: tr.Trace) -> tr.Trace:
    events = trace.events.copy()
    kv = tr.kv_loads(events)
    events["burst_bytes"][kv] = events["bytes"][kv].astype(np.uint32)
    events["bursts"][kv] = 1
    events["gm_offset"][kv] = 0
    return tr.Trace(events, trace.op_names, trace.block_dim)


#: What the rescale is in each record: the tile op (the CPU build's), or every vector multiply of the device
#: stream (the O rescale's broadcast multiply, the combine's weighting and a few row-vector multiplies).
RESCALE_OPS = ("TROWEXPANDMUL", "vmul")


def free_rescale(trace: tr.Trace) -> tr.Trace:
    """The trace without its rescale multiplies (the update's O rescale, the combine's weighting)."""
    rescale = [i for i, name in enumerate(trace.op_names) if name in RESCALE_OPS]
    keep = ~((trace.events["kind"] == tr.EV_INSTR) & np.isin(trace.events["op"], rescale))
    return tr.Trace(trace.events[keep], trace.op_names, trace.block_dim)


#: the pto-isa pipe key of the cube's L0C -> GM stores (FIX)
FIX_STORE_KEY = "L0C_TO_GM"


def predicted_us(trace: tr.Trace, constants: ModelConstants, *, fix_rate_factor: float = 1.0) -> float:
    costs = load_cost_tables()
    if fix_rate_factor != 1.0:
        rates = dict(costs.bandwidth_bytes_per_s)
        rates[FIX_STORE_KEY] *= fix_rate_factor
        costs = replace(costs, bandwidth_bytes_per_s=MappingProxyType(rates))
    return replay(trace, costs, constants).predicted_us


def predicted_and_balanced_us(trace: tr.Trace, constants: ModelConstants) -> tuple[float, float]:
    """The predicted µs and, from the same replay, the balanced-cores bound: every core ending at the mean end
    (never below the HBM time and the launch floor)."""
    pred = replay(trace, load_cost_tables(), constants)
    ends = np.array(list(pred.end_s.values()))
    floor_us = (pred.hbm_time_s + constants.launch_floor_s) * 1e6  # balance cannot beat HBM
    return pred.predicted_us, max(pred.predicted_us - (ends.max() - ends.mean()) * 1e6, floor_us)


#: ``--fix-grid``: factors on pto-isa's L0C -> GM rate x cube<->vector hand-off latencies (s), the two rates the
#: cube-bound MLA kernel depends on that nothing published constrains (kernel/npu/PERFORMANCE.md, #39's targets)
FIX_GRID_FACTORS = (1.0, 1.4, 2.0)
FIX_GRID_HANDOFFS_S = (1.0e-6, 0.5e-6, 0.25e-6, 0.0)


def fix_grid(shape: BenchShape, trace: tr.Trace, core_count: int) -> list[str]:
    """Markdown rows: the trace replayed at each FIX factor x hand-off latency, as µs and % of the cube peak of
    ``core_count`` cores (nominal constants otherwise; a what-if of the model, not a lever of the kernel)."""
    flops = bytes_model.traffic(shape).flops
    peak = cube_peak_flops_per_s(core_count)
    rows = ["| L0C -> GM rate | " + " | ".join(f"hand-off {h * 1e6:g} µs" for h in FIX_GRID_HANDOFFS_S) + " |",
            "|---" * (len(FIX_GRID_HANDOFFS_S) + 1) + "|"]
    for factor in FIX_GRID_FACTORS:
        cells = []
        for handoff_s in FIX_GRID_HANDOFFS_S:
            us = predicted_us(trace, replace(DEFAULT, handoff_latency_s=handoff_s), fix_rate_factor=factor)
            cells.append(f"{us:.1f} µs, {100 * flops / (us * 1e-6 * peak):.1f} %")
        rows.append(f"| x{factor:g} | " + " | ".join(cells) + " |")
    return rows


def levers(trace: tr.Trace, constants: ModelConstants) -> dict[str, float]:
    today, balanced = predicted_and_balanced_us(trace, constants)
    return {
        "today": today,
        "long bursts": predicted_us(long_bursts(trace), constants),
        "no hand-off cost": predicted_us(trace, replace(constants, handoff_latency_s=0.0)),
        "balanced cores": balanced,
        "no launch floor": predicted_us(trace, replace(constants, launch_floor_s=0.0)),
        "free rescale": predicted_us(free_rescale(trace), constants),
        "FIX x2": predicted_us(trace, constants, fix_rate_factor=2.0),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default=",".join(DEFAULT_SHAPES), help="shape ids of the pr set")
    p.add_argument("--mla", metavar="B,H,CTX,BS", help="one fp16 absorbed-MLA shape instead: batch, q heads, "
                   "context and block size (B128/H128/S8192's per-core schedule: 16,128,8192,256 on 3 cores)")
    p.add_argument("--core-count", type=int, default=DEFAULT.cube_cores)
    p.add_argument("--fix-grid", action="store_true", help="instead of the levers: the FIX rate x hand-off "
                   "what-if table (µs and % of the cube peak of the launched cores)")
    args = p.parse_args(argv)
    if args.mla:
        fields = [int(v) for v in args.mla.split(",")]
        if len(fields) != 4 or min(fields) < 1:
            p.error(f"--mla takes four positive integers B,H,CTX,BS, got {args.mla!r}")
        batch, heads, context, block_size = fields
        shapes = [mla_shape(batch, context, num_heads=heads, block_size=block_size, dtype="fp16")]
    else:
        wanted = args.shapes.split(",")
        shapes = [s for s in pr_shapes() if s.shape_id in wanted]
    if args.fix_grid:
        for shape in shapes:
            print(f"{shape.shape_id} on {args.core_count} cores (timing-model predictions):")
            print("\n".join(fix_grid(shape, trace_of(shape, args.core_count), args.core_count)), flush=True)
        return 0
    print("| shape | lever | prediction | gain (nominal) | gain (pessimistic end) |")
    print("|---|---|---|---|---|")
    for shape in shapes:
        trace = trace_of(shape, args.core_count)
        nominal, fast, slow = (levers(trace, c) for c in band_ends())
        for name in nominal:
            gain = nominal["today"] / nominal[name]
            gain_p = slow["today"] / slow[name]
            print(f"| {shape.shape_id} | {name} | {prediction_text(nominal[name], (fast[name], slow[name]))} | "
                  f"{gain:.3f}x | {gain_p:.3f}x |", flush=True)
        floor_us = bytes_model.traffic(shape).total_bytes / DEFAULT.hbm_peak_bytes_per_s * 1e6
        print(f"| {shape.shape_id} | (HBM floor) | {floor_us:.1f} µs | | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
