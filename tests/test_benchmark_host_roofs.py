"""The mock's two roofs in the benchmark: the host's read and fp32 FMA peaks, which of them a shape is judged
against (its FLOP/byte against the host's ridge), and pa-kit's ratio to the fastest peer of each shape."""

from __future__ import annotations

import ctypes
from dataclasses import replace

import mock_harness as h
import pytest

from benchmark import report
from benchmark.device import DeviceInfo
from benchmark.suite import with_speedups

HOST = DeviceInfo("mock:test-cpu:2cpu", "mock", "mock NPU on test-cpu", 30.0, "given", 32 << 20, 2, 450.0, "given")


@pytest.fixture(scope="module")
def lib() -> ctypes.CDLL:
    return h.load_mock()


def test_fma_probe_scales_with_threads_and_beats_a_scalar_core(lib: ctypes.CDLL) -> None:
    """One core's fp32 FMA rate is at least a scalar core's (1 GFLOP/s at any clock this runs on); two threads on
    two CPUs are not slower than one (a probe that times one thread's work for all would be)."""
    one, every = lib.pa_mock_fma_peak_gflops(1, 2), lib.pa_mock_fma_peak_gflops(0, 2)
    assert one > 1.0 and every > 0.8 * one


def test_host_ridge_splits_memory_from_compute_bound() -> None:
    assert HOST.ridge_flop_per_byte == pytest.approx(15.0)
    assert not HOST.compute_bound(4 * 1000, 1000)  # GQA decode: 4 FLOP/B
    assert HOST.compute_bound(200 * 1000, 1000)  # MLA at 128 heads: ~200 FLOP/B
    no_fma = replace(HOST, fma_peak_gflops=None)
    assert no_fma.ridge_flop_per_byte is None and not no_fma.compute_bound(10**9, 1)


def _record(impl: str, ms: float | None, status: str = report.STATUS_OK) -> report.BenchRecord:
    return report.BenchRecord("s", impl, 1, 1, 1, 64, 16, "fp16", 16, 16, 1, 1, 1, status, time_ms=ms,
                              percent_of_peak=50.0)


def test_pa_kit_row_names_the_fastest_timed_peer() -> None:
    rows = with_speedups([_record("pa-kit", 2.0), _record("torch-dense", 5.0), _record("sdpa", 3.0),
                          _record("torch-paged", 1.0, status=report.STATUS_INACCURATE), _record("pa-kit checked", 1.9)])
    pa, dense, sdpa, paged, checked = rows
    assert checked.pa_kit_speedup == pytest.approx(0.95)  # pa-kit's checked mode is timed against it, not a peer
    assert (pa.best_peer, pa.best_peer_speedup) == ("sdpa", 1.5) and pa.pa_kit_speedup is None
    assert dense.pa_kit_speedup == 2.5 and sdpa.pa_kit_speedup == 1.5 and paged.pa_kit_speedup is None
    cells = report.table_rows(rows[:4])
    assert cells[0][8] == "1.50 vs sdpa" and cells[1][8] == "2.50"
    assert with_speedups([_record("pa-kit", 2.0)])[0].best_peer == ""  # no peer timed: nothing claimed


def test_percent_cell_says_which_peak() -> None:
    read, fma = _record("pa-kit", 1.0), replace(_record("pa-kit", 1.0), peak_kind="FMA")
    assert report.table_rows([read])[0][7] == "50.0" and report.table_rows([fma])[0][7] == "50.0 FMA"
    header = report.render_header(report.BenchReport(1, "t", "c", HOST, {}, {}, "", report.LaunchOverhead(
        None, None, "p"), ()))
    assert "fp32 FMA 450 GFLOP/s (given); host ridge 15.0 FLOP/B" in header
