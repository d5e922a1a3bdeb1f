"""tools/first_contact.py rehearsed on a CPU: the mock stands in for the NPU, the fake torch_npu for CANN.

What a CPU can check: every step runs or skips with its reason, a failed step does not stop the run and makes
the exit code non-zero, the determinism check catches a launch whose bits differ, and the comparison table
sets measured against predicted.  What it cannot: the build with bisheng, msprof itself, device timings.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from tools import contact_report, first_contact

TESTS = Path(__file__).resolve().parent
SMALL_SHAPE = "b1_h16kv8_d128_ctx2k_bs128_fp16"  # the smallest published shape


def summary(out: Path) -> dict[str, dict]:
    return {step["name"]: step for step in json.loads((out / "summary.json").read_text())["steps"]}


def fake_msprof(directory: Path) -> Path:
    """An ``msprof`` that records its arguments and succeeds."""
    script = directory / "msprof"
    script.write_text(f"#!/bin/sh\necho \"$@\" >> {directory / 'msprof_args.txt'}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_cpu_rehearsal_runs_every_step_on_the_mock(tmp_path, monkeypatch, capsys):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake_msprof(bindir)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    predictions = tmp_path / "predictions.json"
    predictions.write_text(json.dumps({"predictions": [
        {"shape_id": "b1_h32kv8_d128_ctx256_bs128_fp16", "predicted_us": 10.0, "low_us": 5.0, "high_us": 20.0}]}))
    out = tmp_path / "out"
    code = first_contact.main([
        "--backend", "mock", "--out", str(out), "--skip", "build", "--launches", "4",
        "--determinism-shape", SMALL_SHAPE, "--accuracy-select", "single_token_batch",
        "--bench-arg=--batch", "--bench-arg=1", "--bench-arg=--ctx", "--bench-arg=256",
        "--bench-arg=--baselines", "--bench-arg=none", "--bench-arg=--iters", "--bench-arg=3",
        "--bench-arg=--bandwidth-mib", "--bench-arg=16", "--predictions", str(predictions)])
    steps = summary(out)
    assert code == 0, capsys.readouterr().out
    assert steps["build"]["status"] == "skipped"
    for name in ("accuracy", "determinism", "bench", "msprof", "compare"):
        assert steps[name]["status"] == "ok", (name, steps[name]["detail"])
    assert "1 passed" in steps["accuracy"]["detail"]
    assert f"{SMALL_SHAPE}: 4 launches, 0 differing" in steps["determinism"]["detail"]
    gqa, mla = (tmp_path / "bin" / "msprof_args.txt").read_text().splitlines()  # one profile each
    for args, name in ((gqa, "gqa"), (mla, "mla")):
        assert "--application=" in args and "bench_pa_performance.py" in args, args
        assert f"--output={out / 'msprof' / name}" in args, args
    assert "--baselines ifa" in gqa and "--mla" not in gqa
    assert "--mla" in mla and "--heads 128" in mla and "--baselines fia" in mla
    table = (out / "compare.txt").read_text()
    assert "b1_h32kv8_d128_ctx256_bs128_fp16" in table and "5.0-20.0" in table
    assert "mean |error|" in table and "rehearsal on mock" in table and "a CPU model of the device" in table
    assert "means nothing about the timing model's accuracy" in table, table


def test_npu_without_a_device_skips_every_device_step_with_the_reason(tmp_path, monkeypatch):
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "torch_npu.py").write_text(
        "import types, torch\nfrom fake_torch_npu import fake_torch_npu\n"
        "_ops = fake_torch_npu([])\n"
        "npu_incre_flash_attention = _ops.npu_incre_flash_attention\n"
        "npu_fused_infer_attention_score = _ops.npu_fused_infer_attention_score\n"
        "torch.npu = types.SimpleNamespace(is_available=lambda: False)\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(shim), str(TESTS)]))
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))  # no msprof
    out = tmp_path / "out"
    code = first_contact.main(["--out", str(out), "--skip", "build"])
    steps = summary(out)
    assert code == first_contact.NOTHING_PROVEN
    for name in ("accuracy", "determinism", "bench"):
        assert steps[name] == steps[name] | {"status": "skipped", "detail": "torch_npu reports no NPU"}
    assert steps["msprof"]["status"] == "skipped" and "not on PATH" in steps["msprof"]["detail"]
    assert steps["compare"]["status"] == "skipped"


def test_a_failed_step_is_reported_and_the_run_goes_on(tmp_path, monkeypatch):
    original = first_contact.run_logged

    def failing_build(ctx, name, command):
        if name == "build":
            return 2, "bisheng: command not found"
        return original(ctx, name, command)

    monkeypatch.setattr(first_contact, "run_logged", failing_build)
    out = tmp_path / "out"
    code = first_contact.main(["--backend", "mock", "--out", str(out), "--skip", "accuracy,bench,msprof",
                               "--launches", "2", "--determinism-shape", SMALL_SHAPE,
                               "--predictions", str(tmp_path / "none.json")])
    steps = summary(out)
    assert code == 1
    assert steps["build"]["status"] == "FAILED" and "bisheng: command not found" in steps["build"]["detail"]
    assert steps["determinism"]["status"] == "ok"  # ran after the failure
    assert steps["compare"]["status"] == "skipped"
    assert "does not exist" in steps["compare"]["detail"]


def test_unknown_step_names_are_refused(tmp_path):
    assert first_contact.main(["--backend", "mock", "--out", str(tmp_path), "--skip", "bulid"]) == 2


def test_determinism_catches_a_launch_with_other_bits(monkeypatch):
    import launcher

    class Flaky(launcher.PagedAttentionRunner):
        calls = 0

        def __call__(self, *args, **kwargs):
            out = super().__call__(*args, **kwargs)
            Flaky.calls += 1
            if Flaky.calls == 3:  # one launch's last bit flips
                bits = out.view(dtype=__import__("torch").int16)
                bits.view(-1)[0] ^= 1
            return out

    shape = first_contact.find_shape(SMALL_SHAPE)
    assert first_contact.launches_identical(shape, "mock", 4)[0] == 0
    monkeypatch.setattr(launcher, "PagedAttentionRunner", Flaky)
    differing, note = first_contact.launches_identical(shape, "mock", 4)
    assert differing == 1 and "first differing launch #2" in note


def bench_report(records: list[tuple[str, str, float]]) -> dict:
    return {"records": [{"shape_id": sid, "implementation": impl, "status": "ok", "time_ms": ms}
                        for sid, impl, ms in records]}


def test_comparison_table_sets_measured_against_predicted(tmp_path):
    sid = "b64_h32kv8_d128_ctx2k_bs128_fp16"
    bench = bench_report([(sid, "pa-kit", 0.500), (sid, "ifa", 0.550), (sid, "fia", 0.540),
                          ("b1_h32kv8_d128_ctx2k_bs128_fp16", "pa-kit", 0.040)])
    predictions = {sid: contact_report.Prediction(400.0, 300.0, 450.0)}
    published = contact_report.load_ifa_published()
    assert published[sid] == pytest.approx(533.7)
    rows = contact_report.compare(bench, predictions, published)
    row = rows[0]
    assert row.measured_us == pytest.approx(500.0)
    assert row.error_percent == pytest.approx(25.0)
    assert row.within_band is False
    assert row.speedup_vs_ifa == pytest.approx(1.1)
    assert rows[1].predicted is None and rows[1].error_percent is None
    text = contact_report.render(rows, "note")
    assert "+25.0" in text and "NO" in text and "533.7" in text and "1.10" in text
    assert "mean |error| 25.0 % over 1 shapes" in text
    assert "rehearsal" not in text and "means nothing" not in text  # on an A2 the figure is the model's error


def test_a_rehearsal_says_what_its_error_figure_means() -> None:
    """Off a device the 'measured' time is a CPU's: the summary says the error compares that with an A2's
    predicted time and means nothing about the model; with no error figure there is nothing to qualify."""
    sid = "b64_h32kv8_d128_ctx2k_bs128_fp16"
    rows = contact_report.compare(bench_report([(sid, "pa-kit", 21.0)]),
                                  {sid: contact_report.Prediction(476.0, 470.0, 600.0)}, {})
    for backend, what in (("mock", "a CPU model of the device"), ("sim", "a CPU emulating the device")):
        text = contact_report.render(rows, "note", backend)
        summary = text.splitlines()[-1]
        assert summary.startswith("mean |error| 4311.8 % over 1 shapes (rehearsal on " + backend), summary
        assert what in summary and "an A2's predicted device time" in summary
        assert "means nothing about the timing model's accuracy" in summary
    empty = contact_report.render(contact_report.compare(bench_report([(sid, "pa-kit", 21.0)]), {}, {}), "n", "mock")
    assert empty.splitlines()[-1] == "no shape has both a measurement and a prediction"


def test_predictions_files_of_either_form_are_read(tmp_path):
    path = tmp_path / "p.json"
    assert contact_report.load_predictions(path)[0] == {}
    assert "does not exist" in contact_report.load_predictions(path)[1]
    path.write_text(json.dumps({"a": 1.5, "b": {"predicted_us": 2.0, "low_us": 1.0, "high_us": 3.0}}))
    found, _ = contact_report.load_predictions(path)
    assert found == {"a": contact_report.Prediction(1.5), "b": contact_report.Prediction(2.0, 1.0, 3.0)}
    path.write_text(json.dumps({"description": "x", "shapes": [
        {"shape_id": "c", "predicted_us": 4.0, "band_us": [3.0, 6.0]}]}))
    assert contact_report.load_predictions(path)[0] == {"c": contact_report.Prediction(4.0, 3.0, 6.0)}
    path.write_text("not json")
    assert "unreadable" in contact_report.load_predictions(path)[1]
