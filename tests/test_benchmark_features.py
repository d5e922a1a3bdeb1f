"""The benchmark's decode-feature shapes: ids, inputs, the bytes model, the torch peers, and the rows a run reports
(pa-kit and FIA v2 timed on the same inputs, IFA and the other peers that lack a feature reported ``n/a``).

Which FIA arguments mean which features is ``test_fia_features.py``'s subject; here FIA runs through the fake
``torch_npu`` inside the benchmark's own suite.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from fake_torch_npu import fake_torch_npu

from benchmark import report
from benchmark.applicability import NotApplicableError
from benchmark.baselines import golden, lse_error, max_abs_error, prepare_baseline, split_result, within_tolerance
from benchmark.device import DeviceInfo
from benchmark.npu_peers import prepare_ifa
from benchmark.suite import Suite, SuiteOptions, make_runner
from benchmark.timing import TimingPolicy
from tiling import abi
from workloads import bytes_model, shapes
from workloads.cases import build_case

REPO = Path(__file__).resolve().parent.parent
DEVICE = DeviceInfo("mock:test-cpu:2cpu", "mock", "mock NPU on test-cpu", 40.0, "given", 32 << 20, 2)
QUICK = TimingPolicy(warmup=0, min_iters=1, max_iters=2, budget_ms=20.0, l2_flush=False)


def _shape(lens: tuple[int, ...] = (300, 300), **features: Any) -> shapes.BenchShape:
    """gpt-oss's layout scaled down: 8 query / 2 KV heads of 64, bf16, pages of 16."""
    base = shapes.BenchShape("t", 8, 2, 64, 16, "bf16", lens, seed=7)
    return replace(base, **features)


# ---- shapes, inputs, bytes ------------------------------------------------------------------------------


def test_feature_set_and_ids() -> None:
    ids = [s.shape_id for s in shapes.shape_set("features")]
    assert ids == ["b64_h32kv8_d128_ctx2k_bs128_fp16_q2", "b64_h32kv8_d128_ctx2k_bs128_fp16_q4",
                   "b64_h32kv8_d128_ctx2k_bs128_fp16_q8", "b64_h64kv8_d64_ctx8k_bs128_bf16_w127_sinks",
                   "b64_h64kv8_d64_ctx32k_bs128_bf16_w127_sinks", "b64_h64kv8_d64_ctx4k_bs128_bf16_q2_w127_sinks_lse"]
    gpt_oss = shapes.shape_set("features")[3]
    assert (gpt_oss.num_heads, gpt_oss.num_kv_heads, gpt_oss.head_dim, gpt_oss.window_left) == (64, 8, 64, 127)
    assert shapes.uniform_shape(1, 2048).shape_id == "b1_h32kv8_d128_ctx2k_bs128_fp16"  # plain ids unchanged
    assert shapes.window_left_of(128) == 127 and shapes.window_left_of(None) == -1


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"q_len": 17}, "--q-len must be in 1..16"), ({"q_len": 4, "context": 3}, "counts the query tokens"),
    ({"window_left": -2}, "--window-left"),
])
def test_feature_flags_are_checked(kwargs: dict[str, int], message: str) -> None:
    arguments = {"batch": 1, "context": 64, **kwargs}
    with pytest.raises(ValueError, match=message):
        shapes.uniform_shape(**arguments)  # type: ignore[arg-type]


def test_case_inputs_for_features_keep_the_plain_tensors() -> None:
    plain, featured = build_case(_shape()), build_case(_shape(q_len=1, sinks=True, lse=True))
    assert torch.equal(plain.query, featured.query) and torch.equal(plain.key_cache, featured.key_cache)
    assert featured.sinks is not None and featured.sinks.dtype == torch.bfloat16 and featured.sinks.shape == (8,)
    assert tuple(build_case(_shape(q_len=3)).query.shape) == (2, 3, 8, 64)


def test_a_windowed_case_holds_only_the_pages_its_windows_read() -> None:
    """As an engine frees the pages a window has left: the cache holds each sequence's pages from its first
    token's window's first page on (plus spares), and the table's earlier entries name a spare page, a valid id
    (IFA requires one) that no sequence reads."""
    plain, windowed = build_case(_shape()), build_case(_shape(window_left=7))
    assert torch.equal(plain.query, windowed.query)
    first = abi.kv_first_token(300, 1, 7, 16) // 16  # keys 292..299: page 18 of 19
    assert first == 18
    read = windowed.block_table[:, first:]
    assert windowed.key_cache.shape[0] < plain.key_cache.shape[0] and read.unique().numel() == read.numel() == 2
    early = windowed.block_table[:, :first].unique()
    assert early.numel() == 1 and int(early) not in read.flatten().tolist()


def test_bytes_model_of_a_feature_shape_by_hand() -> None:
    t = bytes_model.traffic(_shape(q_len=2, window_left=7, sinks=True, lse=True))
    assert t.q_bytes == t.o_bytes == 2 * 2 * 8 * 64 * 2
    assert t.kv_bytes == 2 * (2 * 9) * 2 * 64 * 2  # keys 291..299 of each sequence: W + q_len
    assert t.block_table_bytes == 2 * 4  # those keys sit in one page of 16 per sequence
    assert t.flops == 4 * 8 * 64 * (2 * 2 * 8)  # each of the 2 x 2 query tokens attends W + 1 keys
    assert (t.sink_bytes, t.lse_bytes) == (8 * 2, 2 * 2 * 8 * 4)
    no_window = bytes_model.traffic(_shape(q_len=2))
    assert no_window.flops == 4 * 8 * 64 * 2 * (299 + 300) and no_window.kv_bytes == 2 * 600 * 2 * 64 * 2


# ---- torch peers and applicability -----------------------------------------------------------------------

FEATURE_SHAPES = {
    "q2": {"q_len": 2}, "w7": {"window_left": 7}, "q4 w7 lse": {"q_len": 4, "window_left": 7, "lse": True},
    "w31 sinks": {"window_left": 31, "sinks": True},
    "ragged q2 w7 sinks lse": {"lens": (2, 300, 17, 0), "q_len": 2, "window_left": 7, "sinks": True, "lse": True},
}


@pytest.mark.parametrize("name", ["torch-paged", "torch-dense", "sdpa"])
@pytest.mark.parametrize("label", list(FEATURE_SHAPES))
def test_torch_peers_compute_the_features_or_say_why_not(name: str, label: str) -> None:
    features = dict(FEATURE_SHAPES[label])
    case = build_case(_shape(features.pop("lens", (300, 300)), **features))
    if name == "sdpa" and (case.shape.sinks or case.shape.lse):
        with pytest.raises(NotApplicableError, match="sdpa does not compute"):
            prepare_baseline(name, case)
        return
    out, lse = split_result(prepare_baseline(name, case)())
    ref = golden(case)
    assert within_tolerance(max_abs_error(out, ref), ref)
    assert (lse is not None) == case.shape.lse and (lse is None or lse_error(lse, ref)[1])


def test_torch_peer_without_sinks_or_with_a_wider_window_fails_the_golden() -> None:
    case = build_case(_shape(window_left=7, sinks=True))
    position = 300 - 1 - 7 - 1  # the key just before the window: a large value there shows who reads it
    for seq in range(2):
        case.value_cache[int(case.block_table[seq, position // 16]), position % 16] = 64.0
    ref = golden(case)
    assert within_tolerance(max_abs_error(prepare_baseline("torch-dense", case)(), ref), ref)
    sinkless = replace(case, sinks=None)
    assert not within_tolerance(max_abs_error(prepare_baseline("torch-dense", sinkless)(), ref), ref)
    wider = replace(case, shape=replace(case.shape, window_left=8))
    assert not within_tolerance(max_abs_error(prepare_baseline("torch-dense", wider)(), ref), ref)


@pytest.mark.parametrize("label", list(FEATURE_SHAPES))
def test_ifa_is_not_applicable_to_any_feature(label: str) -> None:
    features = dict(FEATURE_SHAPES[label])
    case = build_case(_shape(features.pop("lens", (300, 300)), **features))
    calls: list[Any] = []
    with pytest.raises(NotApplicableError, match="ifa does not compute"):
        prepare_ifa(case, fake_torch_npu(calls))
    assert not calls


# ---- the suite's rows ------------------------------------------------------------------------------------


def test_suite_times_pa_kit_and_fia_v2_and_reports_the_others_as_not_applicable() -> None:
    shape = shapes.uniform_shape(2, 300, num_heads=8, num_kv_heads=2, head_dim=64, block_size=16, dtype="bf16",
                                 q_len=2, window_left=127, sinks=True, lse=True)
    options = SuiteOptions("mock", ("ifa", "fia", "fia-v2", "torch-dense", "sdpa"), QUICK,
                           externals=(("other", str(REPO / "absent.so")),))
    suite = Suite(options, DEVICE, log=lambda _: None)
    calls: list[Any] = []
    suite.torch_npu = fake_torch_npu(calls)
    rows = {r.implementation: r for r in suite.run_shape(shape)}
    assert rows["pa-kit"].ok and rows["fia-v2"].ok and rows["torch-dense"].ok, {k: r.status for k, r in rows.items()}
    assert rows["fia-v2"].max_lse_error is not None and rows["fia-v2"].pa_kit_speedup is not None
    assert rows["pa-kit"].max_lse_error is not None and rows["pa-kit"].features == "q2 w127 sinks lse"
    for name, missing in (("ifa", "multi-token, window, sinks, lse"), ("fia", "sinks"), ("sdpa", "sinks, lse"),
                          ("other", "multi-token, window, sinks, lse")):
        assert rows[name].not_applicable and f"does not compute {missing}" in rows[name].status, rows[name].status
        assert rows[name].time_ms is None
    assert {name for name, _, _ in calls} == {"fia-v2"}  # IFA and FIA v1 were never called
    table = report.render_table(list(rows.values()))
    assert "n/a: ifa does not compute" in table and "lse err" in table


@pytest.mark.parametrize("label", list(FEATURE_SHAPES))
def test_pa_kit_on_the_mock_passes_the_golden_with_each_feature(label: str) -> None:
    features = dict(FEATURE_SHAPES[label])
    case = build_case(_shape(features.pop("lens", (300, 300)), **features))
    runner = make_runner(case, SuiteOptions("mock", (), QUICK), checked=True)
    out, lse = split_result(runner())
    ref = golden(case)
    assert within_tolerance(max_abs_error(out, ref), ref)
    assert (lse is not None) == case.shape.lse and (lse is None or lse_error(lse, ref)[1])


def test_script_runs_a_feature_shape_on_the_mock(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    command = [sys.executable, str(REPO / "bench_pa_performance.py"), "--backend", "mock", "--batch", "2", "--ctx",
               "300", "--heads", "8", "--kv-heads", "2", "--head-dim", "64", "--block-size", "16", "--dtype", "bf16",
               "--q-len", "2", "--window-left", "7", "--sinks", "--lse", "--warmup", "1", "--iters", "2",
               "--min-iters", "1", "--budget-ms", "20", "--bandwidth-mib", "16", "--flush-mib", "8",
               "--engine-steps", "0", "--json", str(out)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "b2_h8kv2_d64_ctx300_bs16_bf16_q2_w7_sinks_lse" in done.stdout and "n/a: sdpa" in done.stdout
    rows = {r.implementation: r for r in report.read_json(out).records}
    assert rows["pa-kit"].ok and rows["torch-paged"].ok and rows["torch-dense"].ok and rows["sdpa"].not_applicable
    assert rows["pa-kit"].max_lse_error is not None and rows["pa-kit"].features == "q2 w7 sinks lse"
