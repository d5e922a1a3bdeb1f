"""The regression gate: ``--compare BASELINE.json --tolerance PCT``.

pa-kit's time per shape id in this run is compared with the baseline file's.  A shape regressed when its time
exceeds the baseline's by more than ``PCT`` percent; a shape is missing when the baseline has a pa-kit time for
it and this run has none (not run, failed, or inaccurate).  Shapes only this run has are reported, not failed.
Results from a different device kind, or taken with a different timing method, are refused: they measure
something else.
"""

from __future__ import annotations

from dataclasses import dataclass

from benchmark.report import BenchReport

#: Exit codes of the script.
EXIT_PASS = 0
EXIT_REGRESSED = 1
EXIT_REFUSED = 2
#: Timing fields that must agree for two runs to be comparable.
METHOD_FIELDS = ("statistic", "l2_flush")


class IncomparableResultsError(ValueError):
    """The baseline was measured on another device kind or with another timing method."""


@dataclass(frozen=True)
class ShapeDelta:
    shape_id: str
    baseline_ms: float
    current_ms: float

    @property
    def change_percent(self) -> float:
        return 100.0 * (self.current_ms / self.baseline_ms - 1.0)


@dataclass(frozen=True)
class Comparison:
    tolerance_percent: float
    regressed: tuple[ShapeDelta, ...]
    missing: tuple[str, ...]
    within: tuple[ShapeDelta, ...]
    new: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.regressed and not self.missing

    @property
    def exit_code(self) -> int:
        return EXIT_PASS if self.passed else EXIT_REGRESSED

    def summary(self) -> str:
        lines = [f"regression gate (tolerance {self.tolerance_percent:g} %): "
                 f"{'PASS' if self.passed else 'FAIL'}; {len(self.within)} shape(s) within tolerance"]
        lines += [f"  REGRESSED {d.shape_id}: {d.baseline_ms:.4g} ms -> {d.current_ms:.4g} ms "
                  f"({d.change_percent:+.1f} %)" for d in self.regressed]
        lines += [f"  MISSING {sid}: in the baseline, no pa-kit time in this run" for sid in self.missing]
        lines += [f"  new {sid}: not in the baseline" for sid in self.new]
        return "\n".join(lines)


def check_comparable(baseline: BenchReport, device_kind: str, timing: dict[str, object]) -> None:
    """Raise :class:`IncomparableResultsError` naming what differs between the baseline and this run."""
    if baseline.device.kind != device_kind:
        raise IncomparableResultsError(
            f"refusing to compare: baseline device kind {baseline.device.kind!r}, this run {device_kind!r}")
    for name in METHOD_FIELDS:
        if baseline.timing.get(name) != timing.get(name):
            raise IncomparableResultsError(
                f"refusing to compare: timing {name} is {baseline.timing.get(name)!r} in the baseline and "
                f"{timing.get(name)!r} in this run")


def compare(baseline: BenchReport, current: BenchReport, tolerance_percent: float) -> Comparison:
    """Gate ``current`` against ``baseline``; raises :class:`IncomparableResultsError` first if they differ in kind."""
    if tolerance_percent < 0:
        raise ValueError(f"--tolerance must be >= 0, got {tolerance_percent}")
    check_comparable(baseline, current.device.kind, current.timing)
    before = _pa_kit_times(baseline)
    after = _pa_kit_times(current)
    regressed, within, missing = [], [], []
    for sid, old_ms in before.items():
        if sid not in after:
            missing.append(sid)
            continue
        delta = ShapeDelta(sid, old_ms, after[sid])
        (regressed if after[sid] > old_ms * (1.0 + tolerance_percent / 100.0) else within).append(delta)
    new_ids = tuple(sid for sid in after if sid not in before)
    return Comparison(tolerance_percent, tuple(regressed), tuple(missing), tuple(within), new_ids)


def _pa_kit_times(report: BenchReport) -> dict[str, float]:
    """pa-kit's time per shape id, for the shapes it ran accurately."""
    return {sid: r.time_ms for sid, r in report.pa_kit_records().items() if r.ok and r.time_ms is not None}
