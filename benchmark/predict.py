"""``bench_pa_performance.py --predict``: the timing model's predicted NPU time of each pa-kit launch.

The simulation records the accuracy launch's instruction trace, ``timing.replay`` prices it on an A2 model, and
the record gets ``predicted_us`` with its band (``band_us``: the same trace replayed with every constant at the
optimistic and at the pessimistic end of its range, as ``timing/predictions.json`` states it), the bound and, for
a published shape, IFA's published time and the predicted speed-up over it (nominal and pessimistic).  A launch
whose tensors fit the L2 also gets ``predicted_warm_l2_us`` (K/V read from L2, as a harness that repeats the
launch without a flush sees), and IFA is compared on its own basis (``ifa_basis``; docs/TIMING_MODEL.md, rule 7).  Every
printed prediction carries its band (``448.7 µs [band 448.1-601.5]``).  ``--trace FILE.json`` writes the replay
as a Chrome/Perfetto trace: a process per core, a track per role and pipe.  Every figure here is a prediction of
the model in ``timing/``, not a measurement.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.roofline import COMPUTE_BOUND
from timing import trace as tr
from timing.model import DEFAULT, band_ends, prediction_text
from timing.published import versus_ifa
from timing.replay import Prediction, replay, replay_band

HBM_NOMINAL_BYTES_PER_S = DEFAULT.hbm_peak_bytes_per_s


@dataclass
class Predicted:
    """What a record carries: the prediction and, when asked for, the replay's spans for the trace file."""

    figures: dict[str, Any]
    spans: list[tuple[int, int, int, int, float, float]]
    op_names: tuple[str, ...]


def roofline_share(percent_of_hbm: float, predicted_us: float, roof: Any) -> dict[str, Any]:
    """The roofline's bound of the plan (``cube`` or ``HBM``) and the predicted % of that bound's A2 peak.

    Compute-bound: the shape's FLOPs over the predicted time, as a % of the cube's fp16/bf16 peak
    (``Machine.cube_flops_per_s``); memory-bound: the % of HBM.  The plan's bound is used when the plan is known
    (it counts the K/V re-reads of a head split), else the shape's."""
    if roof is None:
        return {}
    verdict = roof.plan_bound or roof.bound
    if verdict == COMPUTE_BOUND:
        percent = 100 * roof.flops / (predicted_us * 1e-6 * roof.machine.cube_flops_per_s)
        return {"roofline_bound": "cube", "predicted_percent_of_bound": round(percent, 1)}
    return {"roofline_bound": "HBM", "predicted_percent_of_bound": percent_of_hbm}


def predict(handle: Any, launch: Callable[[], Any], block_dim: int, shape_id: str, total_bytes: int,
            keep_spans: bool, roof: Any = None) -> tuple[Any, Predicted]:
    """Runs ``launch`` once with the trace on; returns its output and the prediction of its device time.

    ``roof`` (``benchmark.roofline.Roofline``) adds the roofline's bound and the predicted % of its peak."""
    from timing.costs import load_cost_tables

    out: list[Any] = []
    trace = tr.capture(handle, lambda: out.append(launch()), block_dim)
    costs = load_cost_tables()
    pred: Prediction = replay(trace, costs, keep_spans=keep_spans)
    band = [round(replay(trace, costs, c).predicted_us, 2) for c in band_ends()[1:]]
    tb_s = pred.tb_per_s(total_bytes)
    figures: dict[str, Any] = {
        "predicted_us": round(pred.predicted_us, 2), "band_us": band, "predicted_tb_per_s": round(tb_s, 4),
        "predicted_percent_of_hbm": round(100 * tb_s * 1e12 / HBM_NOMINAL_BYTES_PER_S, 1),
        "bound": pred.bound, "hbm_stretch": round(pred.hbm_stretch, 3), "events": len(trace.events),
        "busy_percent": busy_percent(pred),
    }
    figures.update(roofline_share(figures["predicted_percent_of_hbm"], pred.predicted_us, roof))
    warm: tuple[float, float] | None = None
    if DEFAULT.fits_l2(total_bytes):  # what a harness repeating the launch without an L2 flush sees
        w_nominal, w_fast, w_slow = (p.predicted_us for p in replay_band(trace, costs, inputs_in_l2=True))
        figures["predicted_warm_l2_us"] = round(w_nominal, 2)
        figures["band_warm_l2_us"] = [round(w_fast, 2), round(w_slow, 2)]
        warm = (w_nominal, w_slow)
    versus = versus_ifa(shape_id, (pred.predicted_us, band[1]), warm)
    figures.update({("predicted_" + k if k.startswith("speedup") else k): v for k, v in versus.items()})
    return out[0], Predicted(figures, pred.spans, trace.op_names)


def busy_percent(pred: Prediction) -> dict[str, float]:
    """Per role and pipe, the busiest core's busy time as a share of the predicted device time."""
    total = pred.predicted_us * 1e-6
    out: dict[str, float] = {}
    for (_, role, pipe), seconds in pred.busy_s.items():
        key = f"{tr.ROLES[role].split()[0]} {tr.PIPES[pipe]}"
        out[key] = max(out.get(key, 0.0), round(100 * seconds / total, 1))
    return {k: v for k, v in sorted(out.items()) if v > 0}


def write_chrome_trace(path: str, predictions: list[tuple[str, Predicted]]) -> None:
    """The replays as Chrome trace events (open in Perfetto or chrome://tracing): µs, one track per pipe."""
    events: list[dict[str, Any]] = []
    for index, (shape_id, p) in enumerate(predictions):
        seen: set[tuple[int, int, int]] = set()
        for core, role, pipe, op, start, end in p.spans:
            pid, tid = index * 1000 + core, role * 8 + pipe
            if (core, role, pipe) not in seen:
                seen.add((core, role, pipe))
                events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                               "args": {"name": f"{tr.ROLES[role]} {tr.PIPES[pipe]}"}})
                events.append({"ph": "M", "name": "process_name", "pid": pid,
                               "args": {"name": f"{shape_id} core {core}"}})
            name = p.op_names[op] if op < len(p.op_names) else "?"
            events.append({"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": start * 1e6,
                           "dur": (end - start) * 1e6})
    Path(path).write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ns",
                                      "otherData": {"note": "timing-model prediction, not a measurement"}}))


def predicted_text(prediction: dict[str, Any]) -> str:
    """The record's prediction with its band; a record written before bands were kept says it has none."""
    band = prediction.get("band_us")
    if isinstance(band, list | tuple) and len(band) == 2:
        return prediction_text(prediction["predicted_us"], band)
    return f"{prediction['predicted_us']:.1f} µs [band not recorded]"


def render_predictions(records: Any) -> str:
    """The table of predicted device times, below the measured one."""
    rows = [r for r in records if getattr(r, "prediction", None)]
    if not rows:
        return ""
    lines = ["predicted NPU time (timing model of an A2, a prediction, not a measurement; band: every constant at "
             "the optimistic .. pessimistic end of its range; docs/TIMING_MODEL.md):",
             "| shape | predicted | TB/s | % of HBM | roofline bound | % of bound | model's limit | warm L2 | "
             "IFA published µs | predicted speed-up (nominal / pessimistic; basis) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p = r.prediction
        ifa = p.get("ifa_published_us")
        speed, slow = p.get("predicted_speedup_vs_ifa"), p.get("predicted_speedup_vs_ifa_pessimistic")
        speed_text = "-" if speed is None else f"{speed:.2f}x" + ("" if slow is None else f" / {slow:.2f}x")
        if speed is not None and p.get("ifa_basis"):
            speed_text += f"; {p['ifa_basis']}"
        warm = p.get("predicted_warm_l2_us")
        warm_text = "-" if warm is None else prediction_text(warm, p["band_warm_l2_us"])
        share = p.get("predicted_percent_of_bound")
        lines.append(f"| {r.shape_id} | {predicted_text(p)} | {p['predicted_tb_per_s']:.3f} | "
                     f"{p['predicted_percent_of_hbm']:.0f} | {p.get('roofline_bound', '-')} | "
                     f"{'-' if share is None else f'{share:.0f}'} | {p['bound']} | {warm_text} | "
                     f"{'-' if ifa is None else ifa} | "
                     f"{speed_text} |")
    return "\n".join(lines)
