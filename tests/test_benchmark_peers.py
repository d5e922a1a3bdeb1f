"""The benchmark's newer peers: FIA in vLLM-Ascend's TND form, external kernels, batch-invariant rows, run().

FIA's arguments are checked by a fake torch_npu that enforces the documented TND rules and computes the
attention from what it received, so both a rule broken and a call that means something else fail here.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from fake_torch_npu import check_fia_tnd, fake_torch_npu

from benchmark import report
from benchmark.baselines import (
    golden,
    max_abs_error,
    parse_external,
    prepare_external,
    within_tolerance,
)
from benchmark.npu_peers import fia_arguments, prepare_fia
from launcher.library import library_path
from workloads import shapes
from workloads.cases import BenchCase, build_case

REPO = Path(__file__).resolve().parent.parent
Calls = list[tuple[str, tuple[Any, ...], dict[str, Any]]]


def _case(head_dim: int = 128, lens: tuple[int, ...] = (5, 300, 17, 0), dtype: str = "fp16") -> BenchCase:
    return build_case(shapes.BenchShape("t", 8, 2, head_dim, 16, dtype, lens, seed=5))


@pytest.mark.parametrize("head_dim", [64, 128, 192])
def test_fia_tnd_call_as_vllm_ascend_makes_it_passes_the_rules_and_the_golden(head_dim: int) -> None:
    case = _case(head_dim)
    calls: Calls = []
    out = prepare_fia(case, fake_torch_npu(calls))()
    (name, args, kw), = calls
    assert name == "fia" and args == () and kw["input_layout"] == "TND" and kw["sparse_mode"] == 3
    assert kw["actual_seq_lengths"] == [1, 2, 3, 4] and kw["actual_seq_lengths_kv"] == [5, 300, 17, 0]
    assert kw["key"].data_ptr() == case.key_cache.data_ptr()  # a view of the paged cache, not a copy
    assert within_tolerance(max_abs_error(out, golden(case)), golden(case))


def test_fia_tnd_refuses_head_dims_it_does_not_take() -> None:
    with pytest.raises(ValueError, match="head_dim"):
        fia_arguments(_case(96))


def _broken(kw: dict[str, Any], case: BenchCase) -> dict[str, dict[str, Any]]:
    s = case.shape
    return {
        "per-sequence query lengths": {"actual_seq_lengths": [1] * s.batch},
        "lengths as a tensor": {"actual_seq_lengths_kv": torch.tensor(list(s.context_lens))},
        "one length short": {"actual_seq_lengths_kv": [int(n) for n in s.context_lens][:-1]},
        "BSH query": {"query": case.query.view(s.batch, 1, -1)},
        "4-D cache": {"key": case.key_cache, "value": case.value_cache},
        "no mask": {"atten_mask": None},
        "small mask": {"atten_mask": kw["atten_mask"][:128, :128]},
        "int64 table": {"block_table": case.block_table.long()},
        "kv heads": {"num_key_value_heads": 3},
        "kv length beyond the table": {"actual_seq_lengths_kv": [10**6] * s.batch},
    }


def test_fia_fake_enforces_each_tnd_rule() -> None:
    """Negative controls: each documented rule, broken alone, is refused."""
    case = _case()
    kw = fia_arguments(case)
    check_fia_tnd(kw)  # positive control
    for what, change in _broken(kw, case).items():
        with pytest.raises((ValueError, TypeError)):
            check_fia_tnd({**kw, **change})
            pytest.fail(f"{what}: accepted")


def test_fia_fake_computes_so_a_wrong_table_fails_the_golden() -> None:
    case = _case(lens=(64, 64))
    kw = fia_arguments(case)
    calls: Calls = []
    fia = fake_torch_npu(calls).npu_fused_infer_attention_score
    swapped = {**kw, "block_table": case.block_table.flip(0).contiguous()}
    out = fia(**swapped)[0].view(case.query.shape)
    assert not within_tolerance(max_abs_error(out, golden(case)), golden(case))


# ---- external ATB-ABI kernels as peers -------------------------------------------------------------------


@pytest.fixture(scope="module")
def external_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another build of the mock device, under another name: a library the launcher loads separately."""
    mock = library_path("mock")
    if not mock.is_file():
        pytest.fail(f"{mock} not built: run bash compile.sh")
    target = tmp_path_factory.mktemp("external") / "libother_pa.so"
    shutil.copy(mock, target)
    return target


def test_parse_external() -> None:
    assert parse_external("simpler=/opt/lib/libpa.so") == ("simpler", "/opt/lib/libpa.so")
    for bad in ("simpler", "=x.so", "name=", "ifa=x.so", "pa-kit=x.so"):
        with pytest.raises(ValueError):
            parse_external(bad)


def test_external_runner_passes_the_golden(external_copy: Path) -> None:
    case = _case(lens=(300, 0, 41))
    runner = prepare_external(case, str(external_copy), "mock")
    assert runner.library.path == external_copy.resolve()
    runner.out.fill_(math.nan)
    assert within_tolerance(max_abs_error(runner(), golden(case)), golden(case))


def test_script_times_externals_and_invariant_rows_and_reports_run(external_copy: Path, tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    command = [sys.executable, str(REPO / "bench_pa_performance.py"), "--backend", "mock", "--batch", "2", "--ctx",
               "2500", "--heads", "8", "--kv-heads", "2", "--warmup", "1", "--iters", "2", "--min-iters", "1",
               "--budget-ms", "20", "--bandwidth-mib", "16", "--flush-mib", "8", "--baselines", "none",
               "--batch-invariant", "--external", f"other={external_copy}",
               "--external", f"missing={tmp_path / 'absent.so'}", "--json", str(out)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "per runner.run(q, k, v, out)" in done.stdout
    saved = report.read_json(out)
    rows = {r.implementation: r for r in saved.records}
    assert rows["other"].ok and rows["pa-kit invariant"].ok and rows["pa-kit"].ok
    assert rows["pa-kit invariant"].plan and "kvCN2" in rows["pa-kit invariant"].plan  # 2500 tokens: 2 splits
    assert rows["missing"].status.startswith("error") and "not found" in rows["missing"].status
    assert saved.launch_overhead.run_noop_us is not None and saved.launch_overhead.run_noop_us > 0


def test_script_refuses_duplicate_external_names(capsys: pytest.CaptureFixture[str]) -> None:
    import bench_pa_performance

    code = bench_pa_performance.main(["--backend", "mock", "--batch", "1", "--ctx", "64",
                                      "--external", "a=x.so", "--external", "a=y.so"])
    assert code == 2 and "--external names must differ" in capsys.readouterr().err
