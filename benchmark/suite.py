"""The measurement loop: per shape, build the inputs, check every implementation against the golden, time it.

Also the launch-overhead probe: host µs per ``runner()`` whose kernel entry is ``call_kernel_noop`` (the
runner's whole launch path, kernel excluded), per ``runner.run(q, k, v, out)`` on other tensors (the per-layer
path of a decode step: argument checks + launch), per ``runner.noop()``, and per bare cached ctypes call.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

from accuracy.reference import Reference
from benchmark.applicability import NotApplicableError
from benchmark.baselines import (
    golden,
    lse_error,
    max_abs_error,
    prepare_baseline,
    prepare_external,
    split_result,
    within_tolerance,
)
from benchmark.device import DeviceInfo
from benchmark.mla_runner import make_mla_runner
from benchmark.predict import Predicted, predict
from benchmark.report import (
    PA_KIT,
    STATUS_INACCURATE,
    STATUS_NOT_APPLICABLE,
    STATUS_OK,
    BenchRecord,
    LaunchOverhead,
)
from benchmark.roofline import Roofline, roofline
from benchmark.sim_figures import read_sim_figures
from benchmark.timing import HostTimer, NpuEventTimer, TimingPolicy, host_us_per_call, make_flush
from launcher import run_check
from workloads import bytes_model
from workloads.cases import BenchCase, build_case
from workloads.shapes import BenchShape, uniform_shape

PA_KIT_CHECKED = "pa-kit checked"
PA_KIT_INVARIANT = "pa-kit invariant"
#: Shape of the launch-overhead probe: small, so that nothing but the launch path is measured.
PROBE_CONTEXT = 512
#: Calls and repeats of the per-shape launch-path probe (fewer than the header's: it runs once per shape).
SHAPE_PROBE_CALLS = 200
SHAPE_PROBE_REPEATS = 3
#: runner.update() calls per repeat (a re-plan costs about a millisecond for a ragged batch of 64)
UPDATE_PROBE_CALLS = 20
Launch = Callable[[], Any]


@dataclass(frozen=True)
class SuiteOptions:
    backend: str
    baselines: tuple[str, ...]
    policy: TimingPolicy
    time_checked: bool = False
    core_count: int | None = None
    strategy: str = "auto"
    #: MLA shapes: the NPU kernel's rescale of the output accumulator ('plain' or 'pow2', docs/API.md)
    mla_rescale: str = "plain"
    #: Also time pa-kit with ``batch_invariant=True`` (rows ``pa-kit invariant``).
    batch_invariant: bool = False
    #: (row name, library path) of external ATB-ABI kernels timed beside pa-kit.
    externals: tuple[tuple[str, str], ...] = ()
    #: ``--predict``: record the pa-kit accuracy launch's trace in the simulation and replay it (timing/).
    predict: bool = False
    #: keep the replays' spans for ``--trace``
    keep_spans: bool = False


def device_for(backend: str) -> str:
    return "npu" if backend == "npu" else "cpu"


def plan_summary(plan: Any) -> str:
    """e.g. ``bn bd24 kvCN1 key0``: strategy, launched cores, KV splits per sequence, tiling key."""
    return f"{plan.strategy} bd{plan.block_dim} kvCN{plan.kv_core_num} key{int(plan.key)}"


def feature_options(case: BenchCase) -> dict[str, Any]:
    """The runner's decode-feature keywords for ``case`` (none for plain decode; a 4-D query carries q_len)."""
    s = case.shape
    options: dict[str, Any] = {}
    if s.window_left >= 0:
        options["window_left"] = s.window_left
    if case.sinks is not None:
        options["sinks"] = case.sinks
    if s.lse:
        options["return_lse"] = True
    return options


def make_runner(case: BenchCase, options: SuiteOptions, *, checked: bool, backend: Any = None,
                batch_invariant: bool = False) -> Any:
    """pa-kit's runner on ``case`` with its decode features; its call launches and returns ``out`` or
    ``(out, lse)``.  An MLA case gets pa-kit's MLA runner (:mod:`benchmark.mla_runner`)."""
    from launcher import PagedAttentionRunner

    if case.shape.is_mla:
        if batch_invariant:
            raise NotApplicableError("batch_invariant=True is not planned for MLA (its pinned tile does not fit "
                                     "the 512-wide latent)")
        return make_mla_runner(case, backend=backend if backend is not None else options.backend, checked=checked,
                               core_count=options.core_count, strategy=options.strategy,
                               mla_rescale=options.mla_rescale)

    if backend is None and options.predict:  # the timing model replays the device's instruction stream (sim)
        from launcher.backends import SimBackend

        backend = SimBackend()
    return PagedAttentionRunner(
        case.query, case.key_cache, case.value_cache, case.block_table, case.context_lens, scale=case.scale,
        backend=backend if backend is not None else options.backend, out=torch.empty_like(case.query),
        checked=checked, core_count=options.core_count,
        strategy="auto" if batch_invariant else options.strategy, batch_invariant=batch_invariant,
        **feature_options(case),
    )


def noop_backend(backend: str) -> Any:
    """A backend whose launches call ``call_kernel_noop`` instead of ``call_kernel``, path otherwise unchanged."""
    from launcher.backends import BACKENDS

    base = BACKENDS[backend]

    class NoopKernelBackend(base):  # type: ignore[misc, valid-type]
        def make_launch(self, function: Any, args: tuple[Any, ...], extents: Any, num_blocks: int,
                        checked: bool) -> Any:
            noop = self.library.call_kernel_noop
            if noop is None:
                raise RuntimeError(f"{self.library.path.name} exports no call_kernel_noop")
            return super().make_launch(noop, args, extents, num_blocks, checked)

    return NoopKernelBackend()


def measure_launch_overhead(options: SuiteOptions, dtype: str = "fp16") -> LaunchOverhead:
    """Host µs per launch into the no-op entry, three ways (see the module docstring), for the probe shape's
    own plan and for a forced split-KV plan (whose launches also zero the split partials)."""
    shape = uniform_shape(1, PROBE_CONTEXT, dtype=dtype)
    case = build_case(shape, device_for(options.backend))
    try:
        runner = make_runner(case, options, checked=False, backend=noop_backend(options.backend))
        split = make_runner(case, replace(options, strategy="split_kv"), checked=False,
                            backend=noop_backend(options.backend))
    except (RuntimeError, OSError, ValueError) as exc:
        return LaunchOverhead(None, None, shape.shape_id, note=f"not measured: {exc}")
    noop = runner.library.call_kernel_noop
    args = runner.launch_args
    runner_us = host_us_per_call(runner)
    split_us = host_us_per_call(split)
    method_us = host_us_per_call(runner.noop)
    bare_us = host_us_per_call(lambda: noop(*args))
    run_us = _run_overhead(case, options)
    checks = "compiled" if run_check.load() is not None else "Python"
    note = f"runner.noop() {method_us:.2f} µs; plans {plan_summary(runner.plan)} / {plan_summary(split.plan)}"
    return LaunchOverhead(runner_us, bare_us, shape.shape_id, note=note, split_kv_runner_noop_us=split_us,
                          run_noop_us=run_us, run_checks=checks)


def _run_overhead(case: BenchCase, options: SuiteOptions) -> float | None:
    """µs per ``runner.run(q, k, v, out)`` into the no-op entry with a BN plan (no split partials to zero),
    on tensors other than the bound ones, as a decode step's per-layer call is."""
    try:
        runner = make_runner(case, replace(options, strategy="bn"), checked=False,
                             backend=noop_backend(options.backend))
    except (RuntimeError, OSError, ValueError):
        return None
    query, key, value = case.query.clone(), case.key_cache.clone(), case.value_cache.clone()
    out = torch.empty_like(query)
    return host_us_per_call(lambda: runner.run(query, key, value, out))


def _base_record(shape: BenchShape, name: str, traffic: bytes_model.TrafficModel, status: str,
                 roof: Roofline | None = None) -> BenchRecord:
    return BenchRecord(
        shape_id=shape.shape_id, implementation=name, batch=shape.batch, num_heads=shape.num_heads,
        num_kv_heads=shape.num_kv_heads, head_dim=shape.head_dim, block_size=shape.block_size, dtype=shape.dtype,
        context_tokens_max=shape.max_context, context_tokens_total=shape.total_context_tokens,
        total_bytes=traffic.total_bytes, kv_bytes=traffic.kv_bytes, flops=traffic.flops, status=status,
        features=shape.features_label, roofline=None if roof is None else roof.as_dict(),
        bound="" if roof is None else roof.bound,
    )


class Suite:
    """Runs shapes one after another; ``log`` receives one progress line per measurement."""

    def __init__(self, options: SuiteOptions, device: DeviceInfo, log: Callable[[str], None] = print) -> None:
        self.options = options
        self.device = device
        self.log = log
        self.device_name = device_for(options.backend)
        flush = make_flush(device.flush_bytes, self.device_name) if options.policy.l2_flush else None
        if options.backend == "npu":
            self.timer: HostTimer | NpuEventTimer = NpuEventTimer(options.policy, torch.npu, flush)  # type: ignore[attr-defined]
        else:
            self.timer = HostTimer(options.policy, flush)
        self.torch_npu = None
        #: (shape id, prediction) of every pa-kit launch predicted with ``--predict``
        self.predictions: list[tuple[str, Predicted]] = []
        if options.backend == "npu":
            import torch_npu

            self.torch_npu = torch_npu

    def implementations(self, case: BenchCase) -> list[tuple[str, Callable[[], tuple[Launch, str | None, Any]]]]:
        """(name, prepare) pairs; prepare returns (launch, plan summary, runner or None)."""
        def pa_kit(checked: bool) -> Callable[[], tuple[Launch, str | None, Any]]:
            def prepare() -> tuple[Launch, str | None, Any]:
                runner = make_runner(case, self.options, checked=checked)
                return runner, plan_summary(runner.plan), runner
            return prepare

        def invariant() -> tuple[Launch, str | None, Any]:
            runner = make_runner(case, self.options, checked=False, batch_invariant=True)
            return runner, plan_summary(runner.plan), runner

        def external(name: str, path: str) -> Callable[[], tuple[Launch, str | None, Any]]:
            def prepare() -> tuple[Launch, str | None, Any]:
                runner = prepare_external(case, path, self.options.backend, name, checked=False,
                                          core_count=self.options.core_count, strategy=self.options.strategy)
                return runner, plan_summary(runner.plan), None
            return prepare

        impls = [(PA_KIT, pa_kit(False))]
        if self.options.time_checked and self.options.backend != "npu":
            impls.append((PA_KIT_CHECKED, pa_kit(True)))
        if self.options.batch_invariant:
            impls.append((PA_KIT_INVARIANT, invariant))
        impls += [(name, external(name, path)) for name, path in self.options.externals]
        for name in self.options.baselines:
            impls.append((name, lambda name=name: (prepare_baseline(name, case, self.torch_npu), None, None)))
        return impls

    def run_shape(self, shape: BenchShape) -> list[BenchRecord]:
        traffic = bytes_model.traffic(shape)
        roof = roofline(shape)
        self.log(f"  {shape.shape_id:<44} roofline: {roof.summary()}")
        case = build_case(shape, self.device_name)
        reference = golden(case)
        records = []
        for name, prepare in self.implementations(case):
            records.append(self._measure(case, name, prepare, reference, traffic, roof))
            gc.collect()
        del case
        gc.collect()
        # the simulation's wall time is not device time: no ratio of it to a peer's (report.DEVICE_COMPARISONS)
        return records if self.options.backend == "sim" else with_speedups(records)

    def _measure(self, case: BenchCase, name: str, prepare: Callable[[], tuple[Launch, str | None, Any]],
                 reference: Reference, traffic: bytes_model.TrafficModel, roof: Roofline | None = None) -> BenchRecord:
        shape = case.shape
        record = _base_record(shape, name, traffic, STATUS_OK, roof)
        predicted = None
        try:
            launch, plan, runner = prepare()
            if self.options.predict and name == PA_KIT:
                result, predicted = predict(runner.library.handle, launch, runner.plan.block_dim, shape.shape_id,
                                            traffic.total_bytes, self.options.keep_spans, roof)
                self.predictions.append((shape.shape_id, predicted))
            else:
                result = launch()
            out, lse = split_result(result)
            error = max_abs_error(out, reference)
            lse_ok = True
            if shape.lse:
                if lse is None:
                    raise ValueError("the shape asks for lse and the launch returned none")
                lse_err, lse_ok = lse_error(lse, reference)
                record = replace(record, max_lse_error=lse_err)
        except NotApplicableError as exc:
            self.log(f"  {shape.shape_id:<44} {name:<14} n/a: {exc}")
            return replace(record, status=f"{STATUS_NOT_APPLICABLE}: {exc}")
        except Exception as exc:  # any failure of one implementation is reported, not fatal
            self.log(f"  {shape.shape_id:<44} {name:<14} failed: {type(exc).__name__}: {exc}")
            return replace(record, status=f"error: {type(exc).__name__}: {exc}")
        record = replace(record, max_abs_error=error, plan=plan)
        if predicted is not None:
            record = replace(record, predicted_us=predicted.figures["predicted_us"], prediction=predicted.figures)
        if not within_tolerance(error, reference) or not lse_ok:
            lse_note = f", lse error {record.max_lse_error:.2e}" if shape.lse else ""
            self.log(f"  {shape.shape_id:<44} {name:<14} inaccurate: max error {error:.2e}{lse_note}, not timed")
            return replace(record, status=STATUS_INACCURATE)
        figures = self._device_figures(runner, traffic)  # of the accuracy launch: before any other launch
        if name == PA_KIT:
            launch_us, update_us = self._host_probes(case)
            record = replace(record, host_launch_us=launch_us, host_update_us=update_us)
        stats = self.timer.measure(launch)
        tb_s = bytes_model.tb_per_s(traffic.total_bytes, stats.center_ms)
        tflop_s = bytes_model.tflop_per_s(traffic.flops, stats.center_ms)
        if self.options.backend == "sim":  # no peak for a CPU emulating the NPU (report.DEVICE_COMPARISONS)
            percent, kind = None, "read"
        elif self.device.compute_bound(traffic.flops, traffic.total_bytes):
            percent, kind = bytes_model.percent_of_peak(tflop_s * 1e3, self.device.fma_peak_gflops), "FMA"
        else:
            percent, kind = bytes_model.percent_of_peak(tb_s * 1e3, self.device.peak_gb_per_s), "read"
        record = replace(
            record, statistic=stats.statistic, time_ms=stats.center_ms, p20_ms=stats.p20_ms, p80_ms=stats.p80_ms,
            samples=stats.samples, tb_per_s=tb_s, kv_gb_per_s=bytes_model.gb_per_s(traffic.kv_bytes, stats.center_ms),
            tflop_per_s=tflop_s, percent_of_peak=percent, peak_kind=kind, device_figures=figures,
        )
        self.log(f"  {shape.shape_id:<44} {name:<14} {stats.center_ms:9.4g} ms  {record.kv_gb_per_s:8.2f} KV GB/s"
                 f"  ({stats.samples} launches)")
        return record

    def _host_probes(self, case: BenchCase) -> tuple[float | None, float | None]:
        """Host µs of this shape's runner path into ``call_kernel_noop`` (split-KV plans also zero their
        partials), and of one decode step's ``runner.update`` with its lengths (plan, tiling upload, workspace
        reuse): both on a runner of their own."""
        try:
            runner = make_runner(case, self.options, checked=False, backend=noop_backend(self.options.backend))
        except (RuntimeError, OSError, ValueError):
            return None, None
        launch_us = host_us_per_call(runner, calls=SHAPE_PROBE_CALLS, repeats=SHAPE_PROBE_REPEATS)
        lens = case.context_lens
        update_us = host_us_per_call(lambda: runner.update(lens), calls=UPDATE_PROBE_CALLS,
                                     repeats=SHAPE_PROBE_REPEATS)
        return launch_us, update_us

    def _device_figures(self, runner: Any, traffic: bytes_model.TrafficModel) -> dict[str, Any] | None:
        """Per-launch counters of the last launch: the simulation's, or a runner's own ``launch_figures()``."""
        if runner is None:
            return None
        own = getattr(runner, "launch_figures", None)
        if callable(own):
            return dict(own())
        if self.options.backend == "sim":
            return read_sim_figures(runner.library.handle, traffic.kv_bytes)
        return None


def with_speedups(records: list[BenchRecord]) -> list[BenchRecord]:
    """Fill ``pa_kit_speedup`` = this implementation's time / pa-kit's, for every timed record but pa-kit's, and
    on pa-kit's record the fastest of them that is not pa-kit in another mode (``best_peer``,
    ``best_peer_speedup``)."""
    pa = next((r for r in records if r.implementation == PA_KIT and r.ok), None)
    if pa is None or pa.time_ms is None:
        return records
    peers = [r for r in records if r.ok and r.implementation != PA_KIT and r.time_ms is not None]
    others = [r for r in peers if not r.implementation.startswith(PA_KIT)]  # not pa-kit's own checked mode
    best = min(others, key=lambda r: r.time_ms or 0.0, default=None)
    return [replace(r, pa_kit_speedup=r.time_ms / pa.time_ms) if r in peers
            else replace(r, best_peer=best.implementation, best_peer_speedup=(best.time_ms or 0.0) / pa.time_ms)
            if r is pa and best is not None else r for r in records]
