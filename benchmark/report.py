"""Results: frozen records, the JSON schema (``--json``), and the printed header and table.

JSON schema (``schema_version`` 1), one object:

* ``schema_version``, ``created_utc``, ``command`` (the command line that reproduces the run);
* ``device``: ``kind`` (what ``--compare`` matches), ``backend``, ``name``, ``peak_gb_per_s``, ``peak_source``,
  ``cache_bytes``, ``cpu_count``;
* ``versions``: ``pa_kit``, ``abi_python``, ``abi_library``, ``python``, ``numpy``, ``torch`` (+ ``torch_npu``,
  ``cann`` on an NPU);
* ``timing``: the :class:`~benchmark.timing.TimingPolicy` fields and ``description``;
* ``bytes_model``: the model's one-line description (``workloads/bytes_model.py``);
* ``launch_overhead``: host microseconds per launch of the runner's path into the no-op entry (also with a
  split-KV plan, and ``run_noop_us``: ``runner.run`` on other tensors), and of a bare cached ctypes call of
  that entry;
* ``records``: one :class:`BenchRecord` per (shape id, implementation); ``roofline`` holds the shape's roofline
  on an A2 (``benchmark/roofline.py``: FLOPs, bytes, FLOP/byte against the ridge, ``bound``, the floor time, the
  same for the K/V traffic pa-kit's plan reads) and ``bound`` its label, ``memory-bound`` or ``compute-bound``;
  on ``sim`` ``percent_of_peak``, ``pa_kit_speedup`` and ``best_peer_speedup`` are None (simulated wall time is
  not device time); with ``--predict`` pa-kit's ``prediction`` holds ``predicted_us``, ``band_us`` [optimistic,
  pessimistic] and, for a published shape, the speed-up over IFA's published time at both;
* ``extras``: free-form per-backend figures (the simulation's per-launch counters).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from tabulate import tabulate

from benchmark.device import DeviceInfo

SCHEMA_VERSION = 1
PA_KIT = "pa-kit"
STATUS_OK = "ok"
STATUS_INACCURATE = "inaccurate"
#: Prefix of the status of an implementation that does not compute the shape's decode features ("n/a: why").
STATUS_NOT_APPLICABLE = "n/a"


@dataclass(frozen=True)
class BenchRecord:
    """One (shape, implementation) result.  Times in ms; bandwidth decimal; None where not measured."""

    shape_id: str
    implementation: str
    batch: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    block_size: int
    dtype: str
    context_tokens_max: int
    context_tokens_total: int
    total_bytes: int
    kv_bytes: int
    flops: int
    status: str
    statistic: str | None = None
    time_ms: float | None = None
    p20_ms: float | None = None
    p80_ms: float | None = None
    samples: int = 0
    tb_per_s: float | None = None
    kv_gb_per_s: float | None = None
    tflop_per_s: float | None = None
    percent_of_peak: float | None = None
    pa_kit_speedup: float | None = None
    max_abs_error: float | None = None
    plan: str | None = None
    #: Host µs per launch of this shape's runner path into ``call_kernel_noop`` (pa-kit rows only).
    host_launch_us: float | None = None
    #: Host µs per ``runner.update(lens)`` with this shape's lengths, repeated: the per-decode-step re-plan when
    #: no sequence crosses a page (pa-kit rows).
    host_update_us: float | None = None
    #: Per-launch counters a backend reports (the simulation: bytes moved, hand-offs, on-chip use).
    device_figures: dict[str, Any] | None = None
    #: ``--predict``: the timing model's predicted NPU µs of this launch (a prediction, not a measurement).
    predicted_us: float | None = None
    #: ``--predict``: the prediction's details (TB/s, % of HBM, bound, IFA's published time, speed-up over it).
    prediction: dict[str, Any] | None = None
    #: The shape's decode features (``q2 w127 sinks lse``; empty for plain decode).
    features: str = ""
    #: Shapes returning lse: max |lse - float64 golden's lse| (natural log).
    max_lse_error: float | None = None
    #: The shape's roofline on an A2 (``Roofline.as_dict``); the same on every row of a shape.
    roofline: dict[str, Any] | None = None
    #: ``memory-bound`` or ``compute-bound``: the shape's ideal FLOP/byte against A2's ridge point.
    bound: str = ""
    #: What ``percent_of_peak`` is against: ``read`` (bytes/s over the read peak) or, on the mock for a shape
    #: compute-bound on the host (FLOP/byte above the host's ridge), ``FMA`` (FLOP/s over the fp32 FMA peak).
    peak_kind: str = "read"
    #: pa-kit's row: the fastest other timed implementation of the shape, and its time / pa-kit's.
    best_peer: str = ""
    best_peer_speedup: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == STATUS_OK and self.time_ms is not None

    @property
    def not_applicable(self) -> bool:
        return self.status.startswith(STATUS_NOT_APPLICABLE)


@dataclass(frozen=True)
class LaunchOverhead:
    """Host µs per launch: the runner's path into ``call_kernel_noop``, and a bare cached ctypes call of it."""

    runner_noop_us: float | None
    bare_noop_us: float | None
    probe_shape_id: str
    note: str = ""
    #: The same runner path with a split-KV plan: it also zeroes the split partials on every launch.
    split_kv_runner_noop_us: float | None = None
    #: ``runner.run(q, k, v, out)`` on other tensors with a BN plan: argument checks + the launch path.
    run_noop_us: float | None = None
    #: which of run()'s checks ran: "compiled" (launcher/run_check) or "Python"
    run_checks: str = ""


@dataclass(frozen=True)
class BenchReport:
    schema_version: int
    created_utc: str
    command: str
    device: DeviceInfo
    versions: dict[str, Any]
    timing: dict[str, Any]
    bytes_model: str
    launch_overhead: LaunchOverhead
    records: tuple[BenchRecord, ...]
    extras: dict[str, Any] = field(default_factory=dict)
    #: The engine loop's host cost (``benchmark.engine_cost.EngineCost.as_dict``); empty when not measured.
    engine: dict[str, Any] = field(default_factory=dict)

    def pa_kit_records(self) -> dict[str, BenchRecord]:
        return {r.shape_id: r for r in self.records if r.implementation == PA_KIT}

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["records"] = [asdict(r) for r in self.records]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchReport:
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ValueError(f"benchmark JSON schema_version must be {SCHEMA_VERSION}, got {version!r}")
        return cls(
            schema_version=version,
            created_utc=data["created_utc"],
            command=data["command"],
            device=DeviceInfo(**_known(DeviceInfo, data["device"])),
            versions=dict(data["versions"]),
            timing=dict(data["timing"]),
            bytes_model=data["bytes_model"],
            launch_overhead=LaunchOverhead(**_known(LaunchOverhead, data["launch_overhead"])),
            records=tuple(BenchRecord(**_known(BenchRecord, r)) for r in data["records"]),
            extras=dict(data.get("extras", {})),
            engine=dict(data.get("engine", {})),
        )


def _known(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """Only the fields ``cls`` declares: a newer writer may add keys without breaking older readers."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in values.items() if k in names}


def write_json(report: BenchReport, path: str | Path) -> None:
    Path(path).write_text(json.dumps(report.to_dict(), indent=2, sort_keys=False) + "\n")


def read_json(path: str | Path) -> BenchReport:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read benchmark JSON {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"benchmark JSON {path} must hold an object, got {type(data).__name__}")
    try:
        return BenchReport.from_dict(data)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"benchmark JSON {path} does not follow schema {SCHEMA_VERSION}: {exc}") from exc


# ---- text -----------------------------------------------------------------------------------------------

COLUMNS = ("shape", "impl", "ms", "p20 ms", "p80 ms", "TB/s", "KV GB/s", "% peak", "pa-kit x", "max err",
           "plan / note")
LEGEND = (
    "ms: the timing statistic above (median unless --stat mean); p20/p80: spread of per-launch times. "
    "TB/s: all bytes of the model / time, decimal. KV GB/s: K+V bytes only. % peak: TB/s against the peak "
    "above, or, marked FMA, FLOP/s against the host's FMA peak for a shape compute-bound on the host (mock: FLOP/"
    "byte above the host's ridge). pa-kit x: this implementation's time / pa-kit's (> 1: pa-kit is faster); on "
    "pa-kit's row, the fastest other implementation's time / pa-kit's, and its name. max err: max |out - "
    "float64 golden| (and lse err for shapes returning lse); an implementation outside the tolerance is reported, "
    "not timed; n/a: the implementation does not compute the shape's decode features (the note says which). "
    "Shape ids end in the features: qN query tokens per sequence, wW window_left, sinks, lse; d512r64 is absorbed "
    "MLA (latent 512 + rope 64, one KV head). roofline lines: the shape's FLOP/byte against A2's ridge point, "
    "memory- or compute-bound, ideal and as pa-kit's plan reads K/V. plan: strategy, launched "
    "cores (bd), KV splits per sequence (kvCN), tiling key, host µs per launch of the runner path without the "
    "kernel, host µs per runner.update() with the shape's lengths repeated (a decode step in which no sequence "
    "crosses a page: a ragged batch's balancing decision comes from the planner's cache)."
)
#: Columns that set a measured time against a device's (a peak, a peer's time).  The simulation's wall time is
#: a CPU emulating the NPU core by core, so beside a device's figure it means nothing: a sim report leaves them
#: out (its JSON carries None there, ``Suite``), and ``--predict`` gives the model's device time instead.
DEVICE_COMPARISONS = ("% peak", "pa-kit x")
SIM_LEGEND = ("sim: its ms are the wall time of a CPU emulating the NPU, not device time, so % peak and pa-kit x "
              "(which set a time against a device's) are not shown; --predict gives the timing model's device time.")


def columns_for(backend: str | None) -> tuple[str, ...]:
    """The table's columns on ``backend``: all but :data:`DEVICE_COMPARISONS` on the simulation."""
    return tuple(c for c in COLUMNS if backend != "sim" or c not in DEVICE_COMPARISONS)


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _percent(r: BenchRecord) -> str:
    cell = _fmt(r.percent_of_peak, ".1f")
    return f"{cell} FMA" if r.percent_of_peak is not None and r.peak_kind == "FMA" else cell


def _speedup(r: BenchRecord) -> str:
    if r.best_peer_speedup is not None:
        return f"{r.best_peer_speedup:.2f} vs {r.best_peer}"
    return _fmt(r.pa_kit_speedup, ".2f")


def table_rows(records: tuple[BenchRecord, ...] | list[BenchRecord]) -> list[list[str]]:
    rows = []
    for r in records:
        note = r.plan or ""
        if r.host_launch_us is not None:
            digits = 2 if r.host_launch_us < 10 else 0
            note += f", host {r.host_launch_us:.{digits}f} µs"
        if r.host_update_us is not None:
            note += f", update {r.host_update_us:.0f} µs"
        if r.max_lse_error is not None:
            note = f"lse err {r.max_lse_error:.1e}" + (f", {note}" if note else "")
        if r.status != STATUS_OK:
            note = f"{r.status}; {note}" if note else r.status
        rows.append([
            r.shape_id, r.implementation, _fmt(r.time_ms, ".4g"), _fmt(r.p20_ms, ".4g"), _fmt(r.p80_ms, ".4g"),
            _fmt(r.tb_per_s, ".4g"), _fmt(r.kv_gb_per_s, ".1f"), _percent(r), _speedup(r),
            _fmt(r.max_abs_error, ".1e"), note,
        ])
    return rows


def render_table(records: tuple[BenchRecord, ...] | list[BenchRecord], backend: str | None = None) -> str:
    keep = [i for i, column in enumerate(COLUMNS) if column in columns_for(backend)]
    rows = [[row[i] for i in keep] for row in table_rows(records)]
    return tabulate(rows, headers=[COLUMNS[i] for i in keep], tablefmt="github", disable_numparse=True)


def render_header(report: BenchReport) -> str:
    dev, ver, lo = report.device, report.versions, report.launch_overhead
    peak = f"{dev.peak_gb_per_s:.1f} GB/s" if dev.peak_gb_per_s is not None else "unknown"
    if dev.fma_peak_gflops:
        peak += (f" ({dev.peak_source}); fp32 FMA {dev.fma_peak_gflops:.0f} GFLOP/s ({dev.fma_peak_source}); host "
                 f"ridge {dev.ridge_flop_per_byte:.1f} FLOP/B")
    else:
        peak += f" ({dev.peak_source})"
    software = ", ".join(f"{k} {v}" for k, v in ver.items() if k not in {"pa_kit", "abi_python", "abi_library"}
                         and v is not None)
    runner_us = _fmt(lo.runner_noop_us, ".2f")
    split_us = _fmt(lo.split_kv_runner_noop_us, ".2f")
    bare_us = _fmt(lo.bare_noop_us, ".2f")
    run_us = _fmt(lo.run_noop_us, ".2f")
    run_over = ("-" if lo.run_noop_us is None or lo.bare_noop_us is None
                else f"{lo.run_noop_us - lo.bare_noop_us:+.2f}")
    lines = [
        "pa-kit paged-attention decode benchmark",
        f"device:   {dev.name} [kind {dev.kind}], backend {dev.backend}, {dev.cpu_count} host CPUs, "
        f"{dev.cache_bytes / (1 << 20):.0f} MiB {'L2' if dev.backend == 'npu' else 'largest host cache'}",
        f"peak:     {peak}",
        f"pa-kit:   {ver.get('pa_kit')}, kernel ABI {ver.get('abi_python')} (library reports "
        f"{ver.get('abi_library')})",
        f"software: {software}",
        f"launch:   {runner_us} µs per runner launch into call_kernel_noop ({split_us} µs with a split-KV plan); "
        f"bare cached ctypes call {bare_us} µs (host, shape {lo.probe_shape_id}){'; ' + lo.note if lo.note else ''}",
        f"run():    {run_us} µs per runner.run(q, k, v, out) into call_kernel_noop with a BN plan, {run_over} µs "
        f"over the bare call (per-layer path of a decode step: argument checks + launch; "
        f"{lo.run_checks or 'unknown'} checks)",
        f"engine:   {_engine_line(report.engine)}",
        f"timing:   {report.timing.get('description', '')}",
        f"bytes:    {report.bytes_model}",
        f"command:  {report.command}",
    ]
    for key, value in report.extras.items():
        lines.append(f"{key}: {value}")
    return "\n".join(lines)


def _engine_line(engine: dict[str, Any]) -> str:
    if not engine:
        return "not measured (--engine-steps 0)"
    return (f"update {engine['update_mean_us']:.0f} µs mean / {engine['update_p99_us']:.0f} µs p99 per step, "
            f"run {engine['run_mean_us']:.1f} µs mean / {engine['run_p99_us']:.1f} µs p99 per layer (host, "
            f"launches into call_kernel_noop): {engine['steps']} steps x {engine['layers']} layers of "
            f"{engine['shape']}, batch {engine['batch_min']}-{engine['batch_max']} changing each step, "
            f"{engine['checks']} run() checks")


def render_device_figures(records: tuple[BenchRecord, ...] | list[BenchRecord]) -> str:
    """Per-launch figures a backend reported (the simulation's), one line per record that has them."""
    lines = [f"{r.shape_id} {r.implementation}: " + ", ".join(f"{k} {v}" for k, v in r.device_figures.items())
             for r in records if r.device_figures]
    return "\n".join(["per-launch device figures:", *lines]) if lines else ""


def render_rooflines(records: tuple[BenchRecord, ...] | list[BenchRecord]) -> str:
    """One line per shape: its FLOP/byte against A2's ridge, the label, the floor time, the plan's own figures."""
    from benchmark.roofline import describe

    seen: dict[str, BenchRecord] = {}
    for r in records:
        if r.roofline and r.shape_id not in seen:
            seen[r.shape_id] = r
    if not seen:
        return ""
    first = next(iter(seen.values())).roofline or {}
    lines = [f"roofline on {first['machine']}: HBM {first['hbm_tb_per_s']:.2f} TB/s, cube "
             f"{first['cube_tflop_per_s']:.1f} TFLOP/s fp16/bf16, ridge {first['ridge_flop_per_byte']:.0f} FLOP/B "
             "(ideal: K/V read once; plan: as pa-kit's A2 plan reads it)"]
    lines += [f"  {sid}: {describe(r.roofline or {})}" for sid, r in seen.items()]
    return "\n".join(lines)


def render(report: BenchReport) -> str:
    from benchmark.predict import render_predictions

    backend = report.device.backend
    parts = [render_header(report), "", render_table(report.records, backend), "",
             LEGEND + (" " + SIM_LEGEND if backend == "sim" else "")]
    for extra in (render_rooflines(report.records), render_device_figures(report.records),
                  render_predictions(report.records)):
        if extra:
            parts += ["", extra]
    return "\n".join(parts)
