"""The benchmark's own logic: bytes model, shapes, JSON schema, regression gate, IFA/FIA arguments, timers.

No test asserts a measured time: timing numbers belong in the benchmark's output, not in tests.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import types
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from fake_torch_npu import fake_torch_npu

import bench_pa_performance
from benchmark import compare, report, timing
from benchmark.baselines import (
    golden,
    max_abs_error,
    prepare_baseline,
    within_tolerance,
)
from benchmark.device import DeviceInfo
from benchmark.npu_peers import available_npu_peers, prepare_ifa
from tiling import abi
from workloads import bytes_model, shapes
from workloads.cases import BenchCase, build_case

REPO = Path(__file__).resolve().parent.parent


# ---- bytes model ----------------------------------------------------------------------------------------


def test_bytes_model_published_shape_by_hand() -> None:
    shape = shapes.uniform_shape(1, 2048)  # 32 q / 8 kv heads, D 128, pages of 128, fp16
    t = bytes_model.traffic(shape)
    assert t.q_bytes == 1 * 32 * 128 * 2 == 8192
    assert t.kv_bytes == 2 * 2048 * 8 * 128 * 2 == 8_388_608
    assert t.o_bytes == 8192
    assert t.block_table_bytes == 16 * 4
    assert t.total_bytes == 8_388_608 + 8192 + 8192 + 64
    assert t.flops == 4 * 1 * 32 * 2048 * 128


def test_bytes_model_ragged_counts_valid_tokens_and_used_pages_only() -> None:
    shape = shapes.BenchShape("x", num_heads=4, num_kv_heads=2, head_dim=16, block_size=128, dtype="bf16",
                              context_lens=(1, 128, 129))
    t = bytes_model.traffic(shape)
    assert t.q_bytes == t.o_bytes == 3 * 4 * 16 * 2
    assert t.kv_bytes == 2 * (1 + 128 + 129) * 2 * 16 * 2
    assert t.block_table_bytes == (1 + 1 + 2) * 4
    assert t.total_bytes == 384 + 33024 + 384 + 16
    assert t.flops == 4 * 4 * 16 * 258


def test_bandwidth_units_are_decimal() -> None:
    assert bytes_model.tb_per_s(10**12, 1000.0) == pytest.approx(1.0)
    assert bytes_model.gb_per_s(10**9, 1.0) == pytest.approx(1000.0)
    assert bytes_model.tflop_per_s(10**12, 1000.0) == pytest.approx(1.0)
    # The published b64 row: 536.9 MB of K+V in 0.4770 ms is 1125.5 GB/s (the "1050 GiB/s" of its README).
    kv = bytes_model.traffic(shapes.uniform_shape(64, 2048)).kv_bytes
    assert kv == 536_870_912
    assert bytes_model.gb_per_s(kv, 0.4770) == pytest.approx(1125.5, abs=0.1)
    assert bytes_model.percent_of_peak(800.0, 1600.0) == pytest.approx(50.0)
    assert bytes_model.percent_of_peak(800.0, None) is None


# ---- shapes ---------------------------------------------------------------------------------------------


def test_published_set_matches_the_table() -> None:
    pr = shapes.shape_set("pr")
    assert [s.shape_id for s in pr] == [
        "b1_h16kv8_d128_ctx2k_bs128_fp16", "b1_h16kv8_d128_ctx4k_bs128_fp16",
        "b1_h32kv8_d128_ctx2k_bs128_fp16", "b1_h32kv8_d128_ctx4k_bs128_fp16", "b1_h32kv8_d128_ctx8k_bs128_fp16",
        "b1_h40kv8_d128_ctx2k_bs128_fp16", "b1_h64kv8_d128_ctx2k_bs128_fp16", "b1_h32kv32_d128_ctx2k_bs128_fp16",
        "b4_h32kv8_d128_ctx2k_bs128_fp16", "b8_h32kv8_d128_ctx2k_bs128_fp16", "b16_h32kv8_d128_ctx2k_bs128_fp16",
        "b32_h32kv8_d128_ctx2k_bs128_fp16", "b64_h32kv8_d128_ctx2k_bs128_fp16", "b16_h40kv8_d128_ctx4k_bs128_bf16",
    ]


@pytest.mark.parametrize("name", shapes.SHAPE_SETS)
def test_shape_sets_have_unique_ids(name: str) -> None:
    ids = [s.shape_id for s in shapes.shape_set(name)]
    assert len(ids) == len(set(ids))


def test_ragged_lengths_are_seeded_and_in_range() -> None:
    a, b = shapes.ragged_shape(seed=5), shapes.ragged_shape(seed=5)
    assert a == b and a.batch == shapes.RAGGED_BATCH
    assert all(shapes.RAGGED_MIN_TOKENS <= n <= shapes.RAGGED_MAX_TOKENS for n in a.context_lens)
    assert shapes.ragged_shape(seed=6).shape_id != a.shape_id


def test_single_shape_flags_are_checked() -> None:
    with pytest.raises(ValueError, match="--heads must be a multiple of --kv-heads"):
        shapes.uniform_shape(1, 128, num_heads=6, num_kv_heads=4)
    with pytest.raises(ValueError, match="--ctx must be >= 1"):
        shapes.uniform_shape(1, 0)


# ---- JSON schema ----------------------------------------------------------------------------------------

DEVICE = DeviceInfo("mock:test-cpu:2cpu", "mock", "mock NPU on test-cpu", 40.0, "given", 32 << 20, 2)


def _record(shape_id: str, impl: str, ms: float | None, status: str = report.STATUS_OK) -> report.BenchRecord:
    return report.BenchRecord(
        shape_id=shape_id, implementation=impl, batch=1, num_heads=32, num_kv_heads=8, head_dim=128,
        block_size=128, dtype="fp16", context_tokens_max=2048, context_tokens_total=2048, total_bytes=8_405_056,
        kv_bytes=8_388_608, flops=33_554_432, status=status, statistic="median" if ms else None, time_ms=ms,
        p20_ms=ms, p80_ms=ms, samples=3 if ms else 0, tb_per_s=0.01 if ms else None,
    )


def _report(records: list[report.BenchRecord], device: DeviceInfo = DEVICE, stat: str = "median",
            flush: bool = True) -> report.BenchReport:
    return report.BenchReport(
        schema_version=report.SCHEMA_VERSION, created_utc="2026-01-01T00:00:00+00:00",
        command="python bench_pa_performance.py", device=device, versions={"pa_kit": "0.1.0", "abi_python": 1},
        timing={"statistic": stat, "l2_flush": flush, "description": "d"}, bytes_model=bytes_model.DESCRIPTION,
        launch_overhead=report.LaunchOverhead(2.5, 1.4, "probe", note="n"), records=tuple(records),
        extras={"k": "v"}, engine={"update_mean_us": 200.0, "update_p99_us": 400.0, "run_mean_us": 3.0,
                                   "run_p99_us": 5.0, "steps": 8, "layers": 2, "shape": "b64", "batch_min": 60,
                                   "batch_max": 66, "checks": "compiled"},
    )


def test_json_round_trip(tmp_path: Path) -> None:
    rec = replace(_record("s1", report.PA_KIT, 1.25), device_figures={"gm_bytes": 123}, plan="bn bd24")
    original = _report([rec, _record("s1", "torch-dense", None, status="inaccurate")])
    path = tmp_path / "run.json"
    report.write_json(original, path)
    data = json.loads(path.read_text())
    assert data["schema_version"] == report.SCHEMA_VERSION
    assert {"device", "versions", "command", "bytes_model", "timing", "launch_overhead", "records",
            "engine"} <= set(data)
    assert "update 200 µs mean / 400 µs p99 per step" in report.render_header(original)
    assert data["device"]["kind"] == DEVICE.kind
    assert data["records"][0]["time_ms"] == 1.25 and data["records"][0]["implementation"] == "pa-kit"
    assert report.read_json(path) == original


def test_json_reader_rejects_other_schema_and_ignores_unknown_keys(tmp_path: Path) -> None:
    data = _report([_record("s1", report.PA_KIT, 1.0)]).to_dict()
    data["records"][0]["added_by_a_newer_writer"] = 1
    path = tmp_path / "new.json"
    path.write_text(json.dumps(data))
    assert report.read_json(path).records[0].time_ms == 1.0
    data["schema_version"] = 99
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="schema_version must be 1, got 99"):
        report.read_json(path)
    path.write_text("[]")
    with pytest.raises(ValueError, match="must hold an object"):
        report.read_json(path)


def test_table_has_the_columns_and_marks_untimed_rows() -> None:
    text = report.render(_report([_record("s1", report.PA_KIT, 1.0), _record("s1", "sdpa", None, "inaccurate")]))
    for column in ("shape", "ms", "p20 ms", "p80 ms", "TB/s", "KV GB/s", "% peak", "pa-kit x", "max err"):
        assert column in text
    assert "inaccurate" in text and "mock:test-cpu:2cpu" in text and "python bench_pa_performance.py" in text


# ---- regression gate ------------------------------------------------------------------------------------


def _gate(base: dict[str, float], cur: dict[str, float | None], tol: float = 5.0, **kw: Any) -> compare.Comparison:
    before = _report([_record(s, report.PA_KIT, ms) for s, ms in base.items()]
                     + [_record(s, "torch-dense", 1e-3) for s in base])  # peers never gate
    after = _report([_record(s, report.PA_KIT, ms, report.STATUS_OK if ms else "inaccurate")
                     for s, ms in cur.items()] + [_record(s, "torch-dense", 1e3) for s in cur], **kw)
    return compare.compare(before, after, tol)


def test_gate_passes_identical_and_within_tolerance() -> None:
    assert _gate({"a": 1.0, "b": 2.0}, {"a": 1.0, "b": 2.0}).passed
    result = _gate({"a": 1.0, "b": 2.0}, {"a": 1.049, "b": 1.5, "new": 3.0})
    assert result.passed and result.exit_code == compare.EXIT_PASS
    assert result.new == ("new",)


def test_gate_names_regressed_and_missing_shapes() -> None:
    result = _gate({"a": 1.0, "b": 2.0, "c": 3.0, "d": 1.0}, {"a": 1.051, "b": 2.0, "d": None})
    assert not result.passed and result.exit_code == compare.EXIT_REGRESSED
    assert [d.shape_id for d in result.regressed] == ["a"]
    assert result.missing == ("c", "d")  # c not run, d inaccurate: neither has a pa-kit time
    text = result.summary()
    assert "REGRESSED a" in text and "MISSING c" in text and "MISSING d" in text and "FAIL" in text


def test_gate_tolerance_is_a_percentage() -> None:
    assert _gate({"a": 1.0}, {"a": 1.3}, tol=31.0).passed
    assert not _gate({"a": 1.0}, {"a": 1.3}, tol=29.0).passed
    with pytest.raises(ValueError, match="--tolerance"):
        _gate({"a": 1.0}, {"a": 1.0}, tol=-1.0)


def test_gate_refuses_other_device_kind_and_other_method() -> None:
    other = replace(DEVICE, kind="npu:Ascend910B2")
    with pytest.raises(compare.IncomparableResultsError, match=r"device kind 'mock:test-cpu:2cpu'.*'npu:Ascend910B2'"):
        _gate({"a": 1.0}, {"a": 1.0}, device=other)
    with pytest.raises(compare.IncomparableResultsError, match="statistic"):
        _gate({"a": 1.0}, {"a": 1.0}, stat="mean")
    with pytest.raises(compare.IncomparableResultsError, match="l2_flush"):
        _gate({"a": 1.0}, {"a": 1.0}, flush=False)


def test_script_refuses_other_device_kind_before_measuring(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    baseline = tmp_path / "npu.json"
    report.write_json(_report([_record("a", report.PA_KIT, 1.0)], device=replace(DEVICE, kind="npu:Ascend910B2")),
                      baseline)
    code = bench_pa_performance.main(["--backend", "mock", "--batch", "1", "--ctx", "128", "--peak-gbs", "10",
                                      "--compare", str(baseline)])
    assert code == compare.EXIT_REFUSED
    assert "refusing to compare" in capsys.readouterr().out


# ---- IFA / FIA arguments against their documented signatures -------------------------------------------


@pytest.fixture(scope="module")
def small_case() -> BenchCase:
    shape = shapes.BenchShape("t", num_heads=8, num_kv_heads=2, head_dim=32, block_size=16, dtype="fp16",
                              context_lens=(5, 40, 17))
    return build_case(shape)


def test_ifa_call_is_keyword_only_and_matches_the_documented_signature(small_case: BenchCase) -> None:
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
    out = prepare_ifa(small_case, fake_torch_npu(calls))()
    (name, args, kw), = calls
    s = small_case.shape
    assert name == "ifa" and args == ()
    assert kw["input_layout"] == "BSH"
    assert kw["num_heads"] == 8 and kw["num_key_value_heads"] == 2 and kw["block_size"] == 16
    assert kw["scale_value"] == pytest.approx(1 / math.sqrt(32))
    assert kw["actual_seq_lengths"] == [5, 40, 17] and all(type(n) is int for n in kw["actual_seq_lengths"])
    assert kw["block_table"] is small_case.block_table and kw["block_table"].dtype == torch.int32
    assert kw["block_table"].dim() == 2 and kw["block_table"].shape[1] >= math.ceil(40 / 16)
    assert tuple(kw["query"].shape) == (3, 1, 8 * 32)
    num_blocks = small_case.key_cache.shape[0]
    assert tuple(kw["key"].shape) == tuple(kw["value"].shape) == (num_blocks, 16, 2 * 32)
    assert kw["key"].data_ptr() == small_case.key_cache.data_ptr()  # a view of the paged cache, not a copy
    assert kw["value"].data_ptr() == small_case.value_cache.data_ptr()
    assert tuple(out.shape) == (s.batch, s.num_heads, s.head_dim)
    # Every used block-table entry lies in [0, num_blocks), unused ones too (IFA's rule).
    assert int(small_case.block_table.min()) >= 0 and int(small_case.block_table.max()) < num_blocks


def test_npu_peers_are_those_the_module_has() -> None:
    assert available_npu_peers(types.SimpleNamespace(npu_incre_flash_attention=None)) == ("ifa",)
    assert available_npu_peers(fake_torch_npu([])) == ("ifa", "fia", "fia-v2")


# ---- torch peers against the golden, with a negative control --------------------------------------------


@pytest.mark.parametrize("uniform", [True, False])
@pytest.mark.parametrize("name", ["torch-paged", "torch-dense", "sdpa"])
def test_torch_peers_pass_the_golden_check(name: str, uniform: bool) -> None:
    lens = (70, 70, 70) if uniform else (1, 70, 33)
    shape = shapes.BenchShape("t", 8, 2, 32, 16, "bf16", lens, seed=3)
    case = build_case(shape)
    reference = golden(case)
    err = max_abs_error(prepare_baseline(name, case)(), reference)
    assert within_tolerance(err, reference)


def test_golden_check_catches_a_wrong_block_table() -> None:
    shape = shapes.BenchShape("t", 8, 2, 32, 16, "fp16", (64, 64), seed=4)
    case = build_case(shape)
    reference = golden(case)
    swapped = replace(case, block_table=case.block_table.flip(0).contiguous())  # each sequence reads the other's
    err = max_abs_error(prepare_baseline("torch-dense", swapped)(), reference)
    assert not within_tolerance(err, reference)


# ---- timers (call order and counts only) -----------------------------------------------------------------


def test_summarize_statistics() -> None:
    stats = timing.summarize([5.0, 1.0, 3.0, 2.0, 4.0], "median")
    assert (stats.center_ms, stats.p20_ms, stats.p80_ms, stats.samples) == (3.0, 1.8, 4.2, 5)
    assert timing.summarize([1.0, 2.0, 6.0], "mean").center_ms == pytest.approx(3.0)


class FakeNpu:
    """Records the order of flushes, event records and launches."""

    def __init__(self) -> None:
        self.log: list[str] = []

    def Event(self, enable_timing: bool) -> Any:  # noqa: N802 - torch.npu.Event's name
        assert enable_timing
        log = self.log

        class Event:
            def record(self) -> None:
                log.append("record")

            def elapsed_time(self, other: Any) -> float:
                return 1.0

        return Event()

    def synchronize(self) -> None:
        self.log.append("sync")


def test_npu_timer_flushes_outside_each_event_pair() -> None:
    npu = FakeNpu()
    policy = timing.TimingPolicy(warmup=2, min_iters=4, max_iters=4, budget_ms=1e9)
    stats = timing.NpuEventTimer(policy, npu, flush=lambda: npu.log.append("flush")).measure(
        lambda: npu.log.append("launch"))
    timed = npu.log[npu.log.index("sync") + 1:]
    assert timed == ["flush", "record", "launch", "record"] * 4 + ["sync"]
    assert stats.samples == 4 and stats.statistic == "median"


def test_published_method_is_one_window_without_flush() -> None:
    npu = FakeNpu()
    policy = timing.TimingPolicy(statistic="mean", l2_flush=False, warmup=5, min_iters=20, max_iters=20)
    stats = timing.NpuEventTimer(policy, npu, flush=lambda: npu.log.append("flush")).measure(
        lambda: npu.log.append("launch"))
    timed = npu.log[npu.log.index("sync") + 1:]
    assert timed == ["record"] + ["launch"] * 20 + ["record", "sync"]
    assert "flush" not in npu.log and stats.samples == 20 and stats.p20_ms is None


def test_host_timer_respects_launch_bounds() -> None:
    calls: list[int] = []
    flushes: list[int] = []
    policy = timing.TimingPolicy(warmup=1, min_iters=3, max_iters=7, budget_ms=1e9)
    stats = timing.HostTimer(policy, flush=lambda: flushes.append(1)).measure(lambda: calls.append(1))
    assert stats.samples == 7 and len(calls) == 8 and len(flushes) == 8
    policy = replace(policy, budget_ms=0.0)
    assert timing.HostTimer(policy).measure(lambda: None).samples == 3


def test_other_processes_share_of_the_host() -> None:
    from benchmark.device import CpuSnapshot, busy_host_warning, other_processes_share

    start, end = CpuSnapshot(10.0, 100.0, 1.0), CpuSnapshot(30.0, 120.0, 6.0)
    assert other_processes_share(start, end) == pytest.approx((20.0 - 5.0) / 20.0)
    assert other_processes_share(start, None) is None
    assert busy_host_warning(0.05) is None
    assert "75 %" in (busy_host_warning(0.75) or "")


def test_sim_figures_of_a_launch() -> None:
    if not (REPO / "build" / "lib" / "libpa_sim.so").is_file():
        pytest.skip("build/lib/libpa_sim.so not built (bash compile.sh builds it where clang-19 is present)")
    from benchmark.sim_figures import read_sim_figures
    from benchmark.suite import SuiteOptions, make_runner

    shape = shapes.BenchShape("t", 8, 2, 64, 16, "fp16", (40, 17), seed=1)
    case = build_case(shape)
    runner = make_runner(case, SuiteOptions("sim", (), timing.TimingPolicy()), checked=True, backend="sim")
    runner()
    figures = read_sim_figures(runner.library.handle, bytes_model.traffic(shape).kv_bytes)
    assert figures is not None and figures["kv_read_mb"] > 0 and figures["tasks"] >= 1
    assert set(figures) >= {"gm_read_mb", "handoffs", "peak_ub_kib", "kv_read_per_model_kv"}


# ---- end to end on the mock -----------------------------------------------------------------------------


def test_script_end_to_end_on_the_mock(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    tiny = ["--backend", "mock", "--batch", "2", "--ctx", "300", "--heads", "8", "--kv-heads", "2",
            "--warmup", "1", "--iters", "3", "--min-iters", "1", "--budget-ms", "20", "--bandwidth-mib", "16",
            "--flush-mib", "8"]
    command = [sys.executable, str(REPO / "bench_pa_performance.py"), *tiny, "--checked", "--json", str(out)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    for text in ("pa-kit", "pa-kit checked", "torch-paged", "torch-dense", "sdpa", "b2_h8kv2_d128_ctx300",
                 "µs per runner launch", f"kernel ABI {abi.ABI_VERSION}"):
        assert text in done.stdout
    saved = report.read_json(out)
    assert saved.device.backend == "mock" and saved.device.peak_gb_per_s
    assert {r.implementation for r in saved.records} >= {"pa-kit", "pa-kit checked", "torch-dense"}
    assert all(r.ok for r in saved.records), [r.status for r in saved.records]
    assert all(r.host_launch_us is not None and r.host_update_us is not None
               for r in saved.records if r.implementation == "pa-kit")
    gate = subprocess.run([*command[:-3], "--baselines", "none", "--compare", str(out), "--tolerance", "100000"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert "regression gate (tolerance 100000 %): PASS" in gate.stdout


# ---- plot -----------------------------------------------------------------------------------------------


def test_plot_groups_bars_per_shape_in_a_readable_unit(tmp_path: Path) -> None:
    from benchmark import plot

    records = [replace(_record(f"b{b}", impl, 1.0), batch=b, context_tokens_total=2048 * b, tb_per_s=0.01 * b)
               for b in (1, 8) for impl in ("torch-dense", report.PA_KIT, "fia")]
    records.append(_record("b64", report.PA_KIT, None, status="inaccurate"))
    data = plot.bars(_report(records))
    assert data.unit == "GB/s" and data.implementations[0] == report.PA_KIT  # CPU: GB/s, pa-kit first
    assert data.shapes == ("b1", "b8", "b64") and data.labels[0] == "b1\nb1 32/8 2K fp16"  # id over description
    assert data.values[report.PA_KIT] == [pytest.approx(10.0), pytest.approx(80.0), None]  # untimed: no bar
    assert data.peak == pytest.approx(DEVICE.peak_gb_per_s)
    npu = plot.bars(_report(records, device=replace(DEVICE, backend="npu", peak_gb_per_s=1600.0)))
    assert npu.unit == "TB/s" and npu.values["fia"][1] == pytest.approx(0.08) and npu.peak == pytest.approx(1.6)
    pytest.importorskip("matplotlib")
    path = tmp_path / "bars.png"
    plot.plot_report(_report(records), path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_engine_cost_reports_update_and_run_per_step() -> None:
    """The engine loop's host cost: the batch really changes step to step, and every figure is positive."""
    from benchmark.engine_cost import engine_cost

    cost = engine_cost("mock", steps=12, layers=2)
    assert cost.batch_min < cost.batch_max, "the batch size must change"
    assert 0 < cost.update_mean_us <= cost.update_p99_us * 1.0001
    assert 0 < cost.run_mean_us <= cost.run_p99_us * 1.0001
    data = cost.as_dict()  # the benchmark's JSON carries this as "engine" (test_json_round_trip)
    assert set(data) >= {"update_mean_us", "update_p99_us", "run_mean_us", "run_p99_us"}
