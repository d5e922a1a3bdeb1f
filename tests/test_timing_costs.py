"""timing/costs.py reads pto-isa's A2/A3 cost tables as pto-isa itself applies them.

The expected values are worked out by hand from rows of the fetched ``formula_params.csv`` and from
``arch_config.hpp``; the tests skip when ``bash compile.sh`` has not fetched the headers.
"""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import pytest

from timing.costs import DEFAULT_PTO_INCLUDE, FORMULA_CSV, load_cost_tables

pytestmark = pytest.mark.skipif(not (DEFAULT_PTO_INCLUDE / FORMULA_CSV).is_file(),
                                reason=f"pto-isa headers not fetched at {DEFAULT_PTO_INCLUDE} (bash compile.sh)")

GIB = 1024 ** 3


@pytest.fixture(scope="module")
def tables():
    return load_cost_tables()


def csv_row(op: str, dtype: str, cols: str) -> tuple[float, float]:
    """(slope, bias) of one csv row, read here independently of the module under test."""
    for line in (DEFAULT_PTO_INCLUDE / FORMULA_CSV).read_text().splitlines()[1:]:
        fields = line.split(",")
        if fields[:3] == [op, dtype, cols]:
            return float(fields[3]), float(fields[4])
    raise AssertionError(f"{op},{dtype},{cols} not in the csv")


@pytest.mark.parametrize(("op", "dtype", "rows", "cols"), [
    ("TROWMAX", "fp32", 32, 128),
    ("TSUB", "fp16", 16, 64),
    ("TADDS", "fp32", 8, 32),
])
def test_csv_rows_price_as_slope_times_elements_plus_bias(tables, op, dtype, rows, cols):
    slope, bias = csv_row(op, dtype, str(cols))
    assert tables.vector_cycles(op, dtype, rows, cols) == pytest.approx(slope * rows * cols + bias)


def test_hand_checked_rows(tables):
    # formula_params.csv: "TROWMAX,fp32,128,0.0625,48" and "TEXP,any,*,0.0314,30.1"
    assert tables.vector_cycles("TROWMAX", "fp32", 32, 128) == pytest.approx(0.0625 * 32 * 128 + 48)
    assert tables.vector_cycles("TEXP", "fp32", 4, 512) == pytest.approx(0.0314 * 4 * 512 + 30.1)


def test_bandwidth_is_gib_per_second_in_bytes(tables):
    # arch_config.hpp: GM_TO_UB 100.9 and GM_TO_L1 135.0 GiB/s at 1.85 GHz
    assert tables.frequency_hz == pytest.approx(1.85e9)
    assert tables.bandwidth_bytes_per_s["GM_TO_UB"] == pytest.approx(100.9 * GIB)
    assert tables.bandwidth_bytes_per_s["GM_TO_L1"] == pytest.approx(135.0 * GIB)
    expected = {"GM_TO_UB", "GM_TO_L1", "UB_TO_GM", "L0C_TO_GM", "L1_TO_L0A", "L1_TO_L0B", "L1_FILL"}
    assert expected <= set(tables.bandwidth_bytes_per_s)
    # 64 KiB GM -> L1: bytes / (135 GiB/s) x 1.85 GHz
    assert tables.transfer_cycles("GM_TO_L1", 65536) == pytest.approx(65536 / (135.0 * GIB) * 1.85e9)


def test_matmul_counts_fractal_repeats(tables):
    # 6 + ceil(32/16) x ceil(128/16) x ceil(512/16) for fp16; fp32 takes 2 cycles a repeat over 8-wide k
    assert tables.matmul_cycles(32, 128, 512, "fp16") == 6 + 2 * 8 * 32
    assert tables.matmul_cycles(32, 128, 512, "bf16") == 6 + 2 * 8 * 32
    assert tables.matmul_cycles(32, 128, 512, "fp32") == 6 + 2 * (2 * 16 * 32)
    assert tables.matmul_cycles(1, 1, 1, "fp16") == 7


def test_missing_width_is_never_free(tables):
    # the csv stops TROWMAX fp32 at 336 columns; pto-isa's lightweight model would charge 0 at 512
    at_336 = tables.vector_cycles("TROWMAX", "fp32", 32, 336)
    at_512 = tables.vector_cycles("TROWMAX", "fp32", 32, 512)
    assert at_512 > at_336 > 0
    # between two rows (128 and 144): between their costs
    lo = tables.vector_cycles("TROWMAX", "fp32", 32, 128)
    hi = tables.vector_cycles("TROWMAX", "fp32", 32, 144)
    assert min(lo, hi) <= tables.vector_cycles("TROWMAX", "fp32", 32, 136) <= max(lo, hi)


def test_ops_without_rows_use_the_intrinsic_model(tables):
    # TADD has no csv row: vadd is head 14, 1 a repeat, tail 18; 32 rows of 128 fp32 are 64 repeats of 256 B
    assert tables.vector_cycles("TADD", "fp32", 32, 128) == 14 + 64 + 18
    assert tables.vector_cycles("TROWEXPANDSUB", "fp32", 32, 128) == pytest.approx(
        tables.vector_cycles("TROWEXPAND", "fp32", 32, 128) + tables.vector_cycles("TSUB", "fp32", 32, 128))
    with pytest.raises(KeyError, match="TNOSUCHOP"):
        tables.vector_cycles("TNOSUCHOP", "fp32", 1, 32)


@pytest.mark.parametrize(("op", "dtype", "cols"), [
    ("TROWMAX", "fp32", 512), ("TROWSUM", "fp16", 128), ("TEXP", "fp32", 512), ("TCVT", "fp32", 512),
    ("TMAX", "fp32", 128), ("TMUL", "fp16", 100),
])
def test_more_repeats_cost_more(tables, op, dtype, cols):
    costs = [tables.vector_cycles(op, dtype, rows, cols) for rows in (1, 2, 8, 32, 64)]
    assert all(a < b for a, b in itertools.pairwise(costs))
    moves = [tables.transfer_cycles("GM_TO_UB", n) for n in (32, 512, 4096, 65536)]
    assert all(a < b for a, b in itertools.pairwise(moves))
    mads = [tables.matmul_cycles(16, k, 128, "fp16") for k in (16, 32, 128, 512)]
    assert all(a < b for a, b in itertools.pairwise(mads))


def test_missing_headers_name_the_path_and_the_fix(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match=r"bash compile\.sh") as info:
        load_cost_tables(tmp_path / "nowhere")
    assert str(tmp_path / "nowhere") in str(info.value)
    partial = tmp_path / "include"
    shutil.copytree(DEFAULT_PTO_INCLUDE / "pto" / "costmodel", partial / "pto" / "costmodel")
    (partial / FORMULA_CSV).unlink()
    with pytest.raises(FileNotFoundError, match=r"formula_params\.csv") as info:
        load_cost_tables(partial)
    assert "bash compile.sh" in str(info.value)
