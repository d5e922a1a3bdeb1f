"""Measured against predicted, per published shape: the table ``tools/first_contact.py`` prints at the end.

Kept apart from the device steps so that the table can be tested (and re-printed from saved files) on any
machine: it needs only the benchmark's ``--json`` output, the newest frozen predictions
(``timing/predictions-2026-11-28-l2.json``, from the device's instruction stream; ``timing.predictions.OUT``) and
``timing/published.json``.

The predictions are written when the timing model is frozen (docs/TIMING_MODEL.md, rule 6). This
reader accepts its records as a list under ``"shapes"`` (what ``python -m timing.predictions`` writes),
``"predictions"`` or ``"records"`` of objects with ``shape_id`` and ``predicted_us`` (the band as ``band_us``
[low, high] or ``low_us`` / ``high_us``), or as a mapping from shape id to a number or to such an object.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tabulate import tabulate

REPO_ROOT = Path(__file__).resolve().parent.parent
#: timing.predictions.OUT (a test keeps them equal).  Its ``predicted_us`` reads K/V from HBM, as the benchmark's
#: default method (an L2 flush before each launch) measures; the warm-L2 figure beside it is for the published
#: method (``--no-flush --stat mean``, docs/NPU.md), not read here.
PREDICTIONS = REPO_ROOT / "timing" / "predictions-2026-11-28-l2.json"
PUBLISHED = REPO_ROOT / "timing" / "published.json"
PA_KIT = "pa-kit"
IFA_KERNEL_PREFIX = "CANN IFA"
#: What a rehearsal's "measured" time is, on each backend that is not a device: the error figure then sets that
#: wall time against an A2's predicted device time, which says nothing about the timing model.
REHEARSAL_TIMES = {
    "mock": "the wall time of the mock, a CPU model of the device",
    "sim": "the wall time of the simulation, a CPU emulating the device core by core",
}


@dataclass(frozen=True)
class Prediction:
    """The frozen prediction of one shape, in µs, with its band where the file gives one."""

    predicted_us: float
    low_us: float | None = None
    high_us: float | None = None


@dataclass(frozen=True)
class ComparisonRow:
    """One shape: what the device measured next to what was predicted and published."""

    shape_id: str
    measured_us: float | None
    predicted: Prediction | None
    ifa_measured_us: float | None
    fia_measured_us: float | None
    ifa_published_us: float | None

    @property
    def error_percent(self) -> float | None:
        """(measured - predicted) / predicted: positive when the device was slower than predicted."""
        if self.measured_us is None or self.predicted is None or self.predicted.predicted_us <= 0:
            return None
        return 100.0 * (self.measured_us - self.predicted.predicted_us) / self.predicted.predicted_us

    @property
    def within_band(self) -> bool | None:
        if self.measured_us is None or self.predicted is None:
            return None
        if self.predicted.low_us is None or self.predicted.high_us is None:
            return None
        return self.predicted.low_us <= self.measured_us <= self.predicted.high_us

    @property
    def speedup_vs_ifa(self) -> float | None:
        """IFA's measured time over ours on the same device and run (> 1: pa-kit faster)."""
        if self.measured_us is None or self.ifa_measured_us is None or self.measured_us <= 0:
            return None
        return self.ifa_measured_us / self.measured_us


def _prediction(value: Any) -> Prediction | None:
    if isinstance(value, int | float):
        return Prediction(float(value))
    if isinstance(value, dict) and isinstance(value.get("predicted_us"), int | float):
        low, high = value.get("low_us"), value.get("high_us")
        band = value.get("band_us")
        if isinstance(band, list) and len(band) == 2:
            low, high = band
        return Prediction(float(value["predicted_us"]), None if low is None else float(low),
                          None if high is None else float(high))
    return None


def load_predictions(path: Path = PREDICTIONS) -> tuple[dict[str, Prediction], str]:
    """(predictions by shape id, a note on where they came from or why there are none)."""
    if not path.is_file():
        return {}, f"no committed predictions: {path} does not exist (the timing model is not frozen yet)"
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        return {}, f"{path} is unreadable: {error}"
    entries: Any = data
    if isinstance(data, dict):
        entries = next((data[key] for key in ("shapes", "predictions", "records") if key in data), data)
    found: dict[str, Prediction] = {}
    if isinstance(entries, list):
        for item in entries:
            if isinstance(item, dict) and isinstance(item.get("shape_id"), str):
                prediction = _prediction(item)
                if prediction is not None:
                    found[item["shape_id"]] = prediction
    elif isinstance(entries, dict):
        for shape_id, value in entries.items():
            prediction = _prediction(value)
            if prediction is not None:
                found[shape_id] = prediction
    note = f"predictions from {path} ({len(found)} shapes)"
    return found, note if found else f"{path} holds no predictions this reader understands"


def load_ifa_published(path: Path = PUBLISHED) -> dict[str, float]:
    """IFA's published µs by shape id (the ``pr`` set)."""
    if not path.is_file():
        return {}
    records = json.loads(path.read_text()).get("records", [])
    return {r["shape_id"]: float(r["time_us"]) for r in records
            if r.get("shape_id") and str(r.get("kernel", "")).startswith(IFA_KERNEL_PREFIX)}


def measured_us(bench: dict[str, Any]) -> dict[tuple[str, str], float]:
    """(shape id, implementation) → measured µs, from a benchmark ``--json`` report (ok records only)."""
    out: dict[tuple[str, str], float] = {}
    for record in bench.get("records", []):
        if record.get("status") == "ok" and record.get("time_ms") is not None:
            out[(record["shape_id"], record["implementation"])] = 1000.0 * float(record["time_ms"])
    return out


def compare(bench: dict[str, Any], predictions: dict[str, Prediction],
            ifa_published: dict[str, float]) -> list[ComparisonRow]:
    """A row per shape the benchmark ran, in its order."""
    times = measured_us(bench)
    order: list[str] = []
    for record in bench.get("records", []):
        if record["shape_id"] not in order:
            order.append(record["shape_id"])
    return [ComparisonRow(shape_id=sid, measured_us=times.get((sid, PA_KIT)), predicted=predictions.get(sid),
                          ifa_measured_us=times.get((sid, "ifa")), fia_measured_us=times.get((sid, "fia")),
                          ifa_published_us=ifa_published.get(sid)) for sid in order]


def _num(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def rehearsal_caveat(backend: str) -> str:
    """What the error figures mean when ``backend`` is not a device (empty on the NPU)."""
    if backend == "npu":
        return ""
    what = REHEARSAL_TIMES.get(backend, f"a wall time on the {backend} backend, not a device")
    return (f"rehearsal on {backend}: 'pa-kit us' is {what}, and each error sets it against an A2's predicted "
            "device time; the figure means nothing about the timing model's accuracy, it only shows that the "
            "comparison runs end to end (on an A2 it is the model's error)")


def render(rows: list[ComparisonRow], note: str, backend: str = "npu") -> str:
    """The table, then the mean absolute error over the shapes that have both numbers, then, off a device, what
    that figure does not mean (:func:`rehearsal_caveat`)."""
    body = []
    for row in rows:
        band = "-"
        if row.predicted is not None and row.predicted.low_us is not None and row.predicted.high_us is not None:
            band = f"{row.predicted.low_us:.1f}-{row.predicted.high_us:.1f}"
        inside = {True: "yes", False: "NO", None: "-"}[row.within_band]
        body.append([row.shape_id, _num(row.measured_us), _num(row.predicted and row.predicted.predicted_us),
                     band, _num(row.error_percent, "+.1f"), inside, _num(row.ifa_measured_us),
                     _num(row.fia_measured_us), _num(row.ifa_published_us), _num(row.speedup_vs_ifa, ".2f")])
    headers = ["shape", "pa-kit us", "predicted us", "band us", "error %", "in band", "IFA us", "FIA us",
               "IFA published us", "IFA/pa-kit"]
    errors = [abs(r.error_percent) for r in rows if r.error_percent is not None]
    summary = (f"mean |error| {sum(errors) / len(errors):.1f} % over {len(errors)} shapes" if errors
               else "no shape has both a measurement and a prediction")
    caveat = rehearsal_caveat(backend)
    if errors and caveat:
        summary += f" ({caveat})"
    return "\n".join([note, tabulate(body, headers=headers, tablefmt="github"), summary])
