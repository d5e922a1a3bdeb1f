"""Differential tests: each vector tile op our kernel uses, pto-isa's A2/A3 implementation on the emulator
against pto-isa's CPU implementation, on the same random inputs, in the kernel's tile shapes.

Bit-exact where the op is exact; otherwise within a stated bound; and every known difference (SEMANTICS.md,
"Known differences") asserted as it is, so the test fails if it disappears or changes.
"""

from __future__ import annotations

import ctypes
from functools import cache

import numpy as np
import pytest
from emu_harness import library_or_skip

OPS = ["LoadStore", "MulS", "AddS", "Add", "Sub", "Mul", "Max", "Exp", "Log", "RowMax", "RowSum", "RowExpandSub",
       "RowExpandMul", "RowExpandDiv", "ColSum", "CvtF16", "CvtBf16", "WidenF16", "WidenBf16", "FillF32", "FillF16",
       "ColStorePitch"]
#: (rows, valid cols, GM pitch): the S piece (16 x 512), partial rows and columns, one row, a pitch past the tile
SHAPES = [(16, 512, 512), (13, 300, 512), (1, 37, 40), (16, 64, 64), (5, 130, 200)]
NARROW = {"RowExpandSub", "RowExpandMul", "RowExpandDiv", "ColSum"}  # tiles of 128 (O) columns
EXACT = set(OPS) - {"Exp", "Log", "RowSum", "ColStorePitch"}
SCALAR = np.float32(0.37)


@cache
def harness(kind: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(library_or_skip(f"libpa_emu_diff_vector_{kind}.so")))
    lib.pa_diff_vector.argtypes = [ctypes.c_int32] * 4 + [ctypes.c_void_p] * 3 + [ctypes.c_float]
    lib.pa_diff_last_error.restype = ctypes.c_char_p
    return lib


def run(kind: str, op: str, rows: int, cols: int, pitch: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.full(rows * pitch + 64, np.nan, dtype=np.float32)
    lib = harness(kind)
    if lib.pa_diff_vector(OPS.index(op), rows, cols, pitch, a.ctypes.data, b.ctypes.data, out.ctypes.data,
                          SCALAR) != 0:
        raise AssertionError(f"{kind}: {lib.pa_diff_last_error().decode()}")
    return out


def inputs(op: str, rows: int, pitch: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    low = 0.25 if op == "Log" else -3.0
    a = rng.uniform(low, 3.0, (rows, pitch)).astype(np.float32)
    b = rng.uniform(0.5, 3.0, (rows, pitch)).astype(np.float32)  # divisors away from 0
    if op == "WidenF16":
        a = a.astype(np.float16)
    if op == "WidenBf16":
        a = (a.view(np.uint32) >> 16).astype(np.uint16)
    return np.ascontiguousarray(a), b


def ulp_distance(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    xi, yi = x.view(np.int32).astype(np.int64), y.view(np.int32).astype(np.int64)
    return np.abs(xi - yi)


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{r}x{c}p{p}" for r, c, p in SHAPES])
@pytest.mark.parametrize("op", OPS)
def test_a2a3_on_the_emulator_matches_the_cpu_implementation(op: str, shape: tuple[int, int, int]) -> None:
    rows, cols, pitch = shape
    if op in NARROW:
        cols, pitch = min(cols, 128), max(min(pitch, 128), min(cols, 128))
    if op == "ColSum":
        rows = max(rows, 2)
    a, b = inputs(op, rows, pitch, seed=rows * 1000 + cols)
    dev, cpu = run("dev", op, rows, cols, pitch, a, b), run("cpu", op, rows, cols, pitch, a, b)
    if op in EXACT:
        assert np.array_equal(dev.view(np.uint32), cpu.view(np.uint32)), \
            f"{op}: first difference at flat index {int(np.argmax(dev.view(np.uint32) != cpu.view(np.uint32)))}"
        return
    if op in ("Exp", "Log"):  # IEEE fp32 functions of two libms: the device's accuracy is not published
        valid = ~np.isnan(cpu)
        assert np.array_equal(valid, ~np.isnan(dev))
        assert ulp_distance(dev[valid], cpu[valid]).max() <= 2
        return
    if op == "RowSum":  # A2/A3: 64-lane pairs then a tree (vadd + vcadd); CPU: a sequential row sum
        got, want = dev[:rows], cpu[:rows]
        bound = cols * np.finfo(np.float32).eps * np.abs(a[:rows, :cols]).sum(axis=1)
        assert (np.abs(got - want) <= bound).all()
        assert np.isnan(dev[rows:]).all() and np.isnan(cpu[rows:]).all()
        return
    # ColStorePitch, a known defect of the A2/A3 path (SEMANTICS.md, known difference 1): a one-column DN tile is
    # stored as one burst of `rows` contiguous floats; the GM pitch is ignored.  The CPU implementation honours it.
    maxima = a[:rows, :cols].max(axis=1)
    assert np.array_equal(cpu[0:rows * pitch:pitch], maxima)
    assert np.array_equal(dev[:rows], maxima)
    if rows > 1 and pitch > 1:
        assert not np.array_equal(dev[0:rows * pitch:pitch], maxima)
