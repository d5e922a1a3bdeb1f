"""What the benchmark prints and draws, beyond its numbers: each prediction with its band, no column on the
simulation that sets its wall time against a device's, and plots with the p20-p80 spread and the shape ids.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from benchmark import plot, report
from benchmark.device import DeviceInfo
from benchmark.predict import render_predictions
from launcher.library import library_path
from timing.model import prediction_text
from workloads import bytes_model

MOCK = DeviceInfo("mock:test-cpu:2cpu", "mock", "mock NPU on test-cpu", 40.0, "given", 32 << 20, 2)
SIM = DeviceInfo("sim:test-cpu:2cpu", "sim", "A2/A3 emulator on test-cpu", None,
                 "none: simulated time is not device time", 32 << 20, 2)


def record(shape_id: str, impl: str, ms: float, p20: float | None, p80: float | None,
           **more: Any) -> report.BenchRecord:
    return report.BenchRecord(
        shape_id=shape_id, implementation=impl, batch=1, num_heads=32, num_kv_heads=8, head_dim=128,
        block_size=128, dtype="fp16", context_tokens_max=2048, context_tokens_total=2048, total_bytes=8_405_056,
        kv_bytes=8_388_608, flops=33_554_432, status=report.STATUS_OK, statistic="median", time_ms=ms,
        p20_ms=p20, p80_ms=p80, samples=5, tb_per_s=bytes_model.tb_per_s(8_405_056, ms), **more)


def bench_report(records: list[report.BenchRecord], device: DeviceInfo = MOCK) -> report.BenchReport:
    return report.BenchReport(
        schema_version=report.SCHEMA_VERSION, created_utc="2026-01-01T00:00:00+00:00",
        command="python bench_pa_performance.py", device=device, versions={"pa_kit": "0.1.0"},
        timing={"statistic": "median", "l2_flush": True, "description": "d"}, bytes_model=bytes_model.DESCRIPTION,
        launch_overhead=report.LaunchOverhead(2.5, 1.4, "probe"), records=tuple(records))


# ---- --predict: the band beside every prediction -----------------------------------------------------------


def test_a_prediction_is_printed_with_its_band() -> None:
    assert prediction_text(448.7, [448.1, 601.5]) == "448.7 µs [band 448.1-601.5]"
    figures = {"predicted_us": 448.7, "band_us": [448.1, 601.5], "predicted_tb_per_s": 1.2,
               "predicted_percent_of_hbm": 75.0, "bound": "HBM", "ifa_published_us": 533.7,
               "predicted_speedup_vs_ifa": 1.19, "predicted_speedup_vs_ifa_pessimistic": 0.887}
    old = {k: v for k, v in figures.items() if k not in ("band_us", "predicted_speedup_vs_ifa_pessimistic")}
    rows = [record("b64", report.PA_KIT, 1.0, None, None, prediction=figures),
            record("b32", report.PA_KIT, 1.0, None, None, prediction=old)]
    text = render_predictions(rows)
    assert "| b64 | 448.7 µs [band 448.1-601.5] |" in text and "1.19x / 0.89x" in text, text
    assert "| b32 | 448.7 µs [band not recorded] |" in text, text  # a JSON written before bands were kept


# ---- the simulation: no column that compares its wall time with a device's --------------------------------


def test_the_sim_table_leaves_out_the_device_comparisons() -> None:
    rows = [record("b1", report.PA_KIT, 2.0, 1.9, 2.1), record("b1", "torch-dense", 5.0, 4.5, 5.5)]
    mock_text = report.render(bench_report(rows))
    sim_text = report.render(bench_report(rows, SIM))
    header = next(line for line in sim_text.splitlines() if line.startswith("| shape"))
    assert "pa-kit x" not in header and "% peak" not in header and "KV GB/s" in header, header
    assert "not device time" in sim_text and "are not shown" in sim_text
    mock_header = next(line for line in mock_text.splitlines() if line.startswith("| shape"))
    assert "pa-kit x" in mock_header and "% peak" in mock_header  # the negative control: elsewhere they stay
    assert "are not shown" not in mock_text


@pytest.mark.skipif(not library_path("sim").is_file(), reason=f"{library_path('sim')} not built")
def test_sim_predict_run_prints_bands_and_no_device_comparison(tmp_path: Path, capsys: pytest.CaptureFixture[str]) \
        -> None:
    """End to end on the simulation (a small shape, one launch): the printed prediction carries its band, the
    table no ratio or peak column, and the JSON no ratio or % of peak computed from simulated wall time."""
    from bench_pa_performance import main

    out = tmp_path / "r.json"
    rc = main(["--predict", "--batch", "2", "--heads", "8", "--kv-heads", "2", "--head-dim", "64", "--ctx", "300",
               "--baselines", "torch-dense", "--iters", "1", "--warmup", "0", "--engine-steps", "0",
               "--json", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    records = {r["implementation"]: r for r in json.loads(out.read_text())["records"]}
    low, high = records[report.PA_KIT]["prediction"]["band_us"]
    nominal = records[report.PA_KIT]["predicted_us"]
    assert low <= nominal <= high
    assert prediction_text(nominal, [low, high]) in printed, printed
    header = next(line for line in printed.splitlines() if line.startswith("| shape") and "impl" in line)
    assert "pa-kit x" not in header and "% peak" not in header, header
    assert records["torch-dense"]["status"] == "ok"
    for r in records.values():
        assert r["pa_kit_speedup"] is None and r["best_peer_speedup"] is None and r["percent_of_peak"] is None


# ---- plots: the p20-p80 spread and the shape ids ------------------------------------------------------------


def test_bars_carry_the_spread_as_rates() -> None:
    """A rate is bytes over time: the p80 time gives the low end of the bar's spread, the p20 time the high."""
    data = plot.bars(bench_report([record("b1", report.PA_KIT, 2.0, 1.0, 4.0),
                                   record("b1", "torch-dense", 3.0, None, None)]))
    value = data.values[report.PA_KIT][0]
    assert value is not None and data.spread[report.PA_KIT][0] == (pytest.approx(value / 2), pytest.approx(value * 2))
    assert data.spread["torch-dense"] == [None]  # no percentiles (the back-to-back mean): no error bar
    assert plot.error_bars([value, None], [(value / 2, value * 2), None]) == [[value / 2, 0.0], [value, 0.0]]


def test_the_figure_draws_p20_p80_error_bars_and_labels_shapes_by_id() -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt
    from matplotlib.container import BarContainer

    rows = [record("b1_h32kv8_d128_ctx2k_bs128_fp16", report.PA_KIT, 2.0, 1.0, 4.0),
            record("b1_h32kv8_d128_ctx2k_bs128_fp16", "torch-dense", 4.0, 3.0, 5.0),
            replace(record("b8_h32kv8_d128_ctx2k_bs128_fp16", report.PA_KIT, 2.0, 1.6, 2.5), batch=8,
                    context_tokens_total=8 * 2048)]
    data = plot.bars(bench_report(rows))
    fig = plot.figure(bench_report(rows))
    try:
        ax = fig.axes[0]
        ticks = [t.get_text() for t in ax.get_xticklabels()]
        assert [t.splitlines()[0] for t in ticks] == ["b1_h32kv8_d128_ctx2k_bs128_fp16",
                                                      "b8_h32kv8_d128_ctx2k_bs128_fp16"], ticks
        bars = {c.get_label(): c for c in ax.containers if isinstance(c, BarContainer)}
        pa_kit = bars[report.PA_KIT].errorbar
        assert pa_kit is not None
        segments = pa_kit.lines[2][0].get_segments()  # one vertical segment per shape: (x, low) -> (x, high)
        for segment, spread in zip(segments, data.spread[report.PA_KIT], strict=True):
            assert spread is not None
            assert sorted(float(y) for _, y in segment) == [pytest.approx(spread[0]), pytest.approx(spread[1])]
    finally:
        plt.close(fig)
