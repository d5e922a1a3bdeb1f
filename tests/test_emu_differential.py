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
       "ColStorePitch", "AtomicAdd", "ColExpandSub", "CvtS32"]
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
    if op == "CvtS32":  # half-integers (ties to even) and fractions, up to AMLA's shifts of 64 * 2^23 in magnitude
        a = np.where(rng.random((rows, pitch)) < 0.5, rng.integers(-2**20, 2**20, (rows, pitch)) / 2,
                     rng.uniform(-2.0**29, 2.0**29, (rows, pitch))).astype(np.float32)
    if op == "WidenF16":
        a = a.astype(np.float16)
    if op == "WidenBf16":
        a = (a.view(np.uint32) >> 16).astype(np.uint16)
    return np.ascontiguousarray(a), b


def ulp_distance(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    xi, yi = x.view(np.int32).astype(np.int64), y.view(np.int32).astype(np.int64)
    return np.abs(xi - yi)


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{r}x{c}p{p}" for r, c, p in SHAPES])
@pytest.mark.parametrize("op", [op for op in OPS if op != "AtomicAdd"])
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


def test_an_atomic_store_adds_on_the_a2a3_path_and_overwrites_on_the_cpu() -> None:
    """Known difference 5: TSTORE<AtomicAdd> of a UB tile adds into GM on the A2/A3 path (set_atomic_f32,
    set_atomic_add, the store, set_atomic_none) and overwrites on the pinned CPU implementation."""
    rows, cols, pitch = 13, 300, 512
    a, b = inputs("Add", rows, pitch, seed=4242)
    valid = np.zeros((rows, pitch), dtype=bool)
    valid[:, :cols] = True
    outs = {}
    for kind in ("dev", "cpu"):
        out = np.concatenate([b.ravel(), np.full(64, 7.0, np.float32)])  # finite: atomic adds into NaN fault
        lib = harness(kind)
        if lib.pa_diff_vector(OPS.index("AtomicAdd"), rows, cols, pitch, a.ctypes.data, b.ctypes.data,
                              out.ctypes.data, SCALAR) != 0:
            raise AssertionError(f"{kind}: {lib.pa_diff_last_error().decode()}")
        outs[kind] = out
    dev, cpu = outs["dev"][:rows * pitch].reshape(rows, pitch), outs["cpu"][:rows * pitch].reshape(rows, pitch)
    assert np.array_equal(dev[valid], (b + a)[valid]) and np.array_equal(cpu[valid], a[valid])
    for out in (dev, cpu):
        assert np.array_equal(out[~valid], b[~valid])
    assert (outs["dev"][rows * pitch:] == 7.0).all() and (outs["cpu"][rows * pitch:] == 7.0).all()


# ---- cube chains ------------------------------------------------------------------------------------------------

STATIC = 128  # the chunk path's static tile extents: Tok = DCap = 128


@cache
def cube_harness(kind: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(library_or_skip(f"libpa_emu_diff_cube_{kind}.so")))
    lib.pa_diff_cube.argtypes = [ctypes.c_int32] * 8 + [ctypes.c_void_p] * 3
    lib.pa_diff_last_error.restype = ctypes.c_char_p
    return lib


def as16(x: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "fp16":
        return np.ascontiguousarray(x.astype(np.float16))
    return np.ascontiguousarray((x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16))


def from16(x: np.ndarray, dtype: str) -> np.ndarray:
    return x.view(np.float16).astype(np.float64) if dtype == "fp16" else \
        (x.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


CHUNK_PATH, HEAD_PATH = 0, 1


def run_cube(kind: str, chain: int, dtype: str, rows: int, tokens: int, dim: int, col: int, x: np.ndarray,
             y: np.ndarray, *, path: int = CHUNK_PATH, kernel_operands: bool = False) -> np.ndarray:
    """One chain; ``kernel_operands`` uses the kernel's own matmul operands (``CubeTiles::Qk`` / ``Pv``),
    otherwise every tile is valid over the data's extent (the kernel before defect 2 was fixed)."""
    size = rows * (tokens if chain == 0 else dim)
    out = np.full(size + 32, np.nan, dtype=np.float32)
    lib = cube_harness(kind)
    if lib.pa_diff_cube(chain, int(dtype == "bf16"), path, int(kernel_operands), rows, tokens, dim, col,
                        x.ctypes.data, y.ctypes.data, out.ctypes.data) != 0:
        raise AssertionError(f"{kind}: {lib.pa_diff_last_error().decode()}")
    assert np.isnan(out[size:]).all(), f"{kind}: wrote past the result"
    return out[:size].reshape(rows, -1)


def static_b_read_with_valid_n(b_static: np.ndarray, n: int) -> np.ndarray:
    """What ``mad`` reads as B (K x n) from an L0B tile laid out Zn for the static width: SEMANTICS.md's mad row
    addresses B's fractals with ceil(n / 16) fractals per 16-row block of K, the tile holds STATIC / 16."""
    k = b_static.shape[0]
    fractals_valid, fractals_static = -(-n // 16), STATIC // 16
    row, j = np.meshgrid(np.arange(k), np.arange(n), indexing="ij")
    fractal = (row // 16) * fractals_valid + j // 16
    l_static = (fractal // fractals_static) * 16 + row % 16
    j_static = (fractal % fractals_static) * 16 + j % 16
    return b_static[l_static, j_static]


CUBE_CASES = [  # (chain, dtype, rows, tokens, dim, col)
    (0, "fp16", 16, 128, 128, 0), (0, "bf16", 16, 128, 128, 0), (0, "fp16", 5, 128, 128, 0),
    (0, "fp16", 16, 128, 64, 0), (0, "fp16", 16, 44, 128, 0), (0, "bf16", 3, 112, 128, 0),
    (1, "fp16", 16, 128, 128, 0), (1, "bf16", 4, 44, 128, 64), (1, "fp16", 16, 96, 128, 384),
    (1, "fp16", 16, 128, 64, 128), (1, "bf16", 16, 96, 64, 192),
]


@pytest.mark.parametrize("case", CUBE_CASES, ids=[f"{'qk' if c[0] == 0 else 'pv'}-{c[1]}-r{c[2]}t{c[3]}d{c[4]}c{c[5]}"
                                                  for c in CUBE_CASES])
def test_cube_chain_on_the_emulator_against_the_cpu_implementation(case: tuple[int, str, int, int, int, int]) -> None:
    chain, dtype, rows, tokens, dim, col = case
    rng = np.random.default_rng(sum(case[2:]))
    x = as16(rng.standard_normal((rows, dim)) if chain == 0 else rng.uniform(0, 1, (rows, 512)), dtype)
    y = as16(rng.standard_normal((tokens, dim)), dtype)
    dev = run_cube("dev", chain, dtype, rows, tokens, dim, col, x, y)
    cpu = run_cube("cpu", chain, dtype, rows, tokens, dim, col, x, y)
    a = from16(x, dtype) if chain == 0 else from16(x, dtype)[:, col:col + tokens]
    b = from16(y, dtype).T if chain == 0 else from16(y, dtype)  # K x N
    factor = 1.0 if chain == 0 else 2.0  # the pv chain accumulates P.V twice (TMATMUL then TMATMUL_ACC)
    golden = factor * (a @ b)
    tolerance = 1e-5 * np.abs(a).max() * np.abs(b).max() * a.shape[1]
    assert np.abs(cpu - golden).max() <= tolerance, "the CPU implementation disagrees with the float64 golden"
    n = b.shape[1]
    if n == STATIC:
        assert np.abs(dev - golden).max() <= tolerance
        assert np.array_equal(dev, cpu) or np.abs(dev - cpu).max() <= tolerance
        return
    # Known difference 2 (SEMANTICS.md): with a valid width n below the static tile width, pto-isa's A2/A3 path
    # loads L0B with the static Zn layout (TMOV moves whole static tiles) but TMATMUL passes the valid n to mad,
    # which addresses B with ceil(n / 16) fractals per row block: the device multiplies the wrong elements.
    b_static = np.zeros((b.shape[0], STATIC))
    b_static[:, :n] = b
    device_model = factor * (a @ static_b_read_with_valid_n(b_static, n))
    assert np.abs(dev - device_model).max() <= tolerance, "the emulator's result is not the modelled misread"
    assert np.abs(dev - golden).max() > 100 * tolerance, "the A2/A3 result should be wrong here"


def chain_inputs(case: tuple[int, str, int, int, int, int], seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x, y, the float64 golden) of a chain case."""
    chain, dtype, rows, tokens, dim, col = case
    rng = np.random.default_rng(seed)
    x = as16(rng.standard_normal((rows, dim)) if chain == 0 else rng.uniform(0, 1, (rows, 512)), dtype)
    y = as16(rng.standard_normal((tokens, dim)), dtype)
    a = from16(x, dtype) if chain == 0 else from16(x, dtype)[:, col:col + tokens]
    b = from16(y, dtype).T if chain == 0 else from16(y, dtype)
    return x, y, (1.0 if chain == 0 else 2.0) * (a @ b)


#: Pieces shorter than the tile, head dims below DCap, partial rows; the head path's tiles hold kCubeRows (32)
#: rows, so its cases also take two 16-row blocks of A.
KERNEL_CASES = [  # (path, chain, dtype, rows, tokens, dim, col)
    (CHUNK_PATH, 0, "fp16", 16, 44, 128, 0), (CHUNK_PATH, 0, "bf16", 3, 112, 96, 0),
    (CHUNK_PATH, 0, "fp16", 16, 128, 64, 0), (CHUNK_PATH, 1, "fp16", 16, 96, 64, 384),
    (CHUNK_PATH, 1, "bf16", 16, 96, 80, 192), (CHUNK_PATH, 1, "fp16", 7, 33, 128, 64),
    # one q head (MHA): TMATMUL avoids mad's GEMV form
    (CHUNK_PATH, 0, "fp16", 1, 128, 128, 0), (CHUNK_PATH, 1, "bf16", 1, 96, 128, 64),
    (HEAD_PATH, 0, "fp16", 17, 44, 96, 0), (HEAD_PATH, 1, "fp16", 17, 128, 128, 0),  # a last block of one row
    (HEAD_PATH, 0, "fp16", 24, 44, 96, 0), (HEAD_PATH, 0, "bf16", 32, 128, 128, 0),
    (HEAD_PATH, 0, "fp16", 17, 128, 64, 0), (HEAD_PATH, 1, "fp16", 31, 96, 96, 64),
    (HEAD_PATH, 1, "bf16", 32, 128, 128, 0), (HEAD_PATH, 1, "fp16", 24, 17, 112, 300),
]


@pytest.mark.parametrize("case", KERNEL_CASES, ids=[
    f"{'chunk' if c[0] == CHUNK_PATH else 'head'}-{'qk' if c[1] == 0 else 'pv'}-{c[2]}-r{c[3]}t{c[4]}d{c[5]}c{c[6]}"
    for c in KERNEL_CASES])
def test_the_kernels_matmul_operands_are_right_on_the_a2a3_path(case: tuple[int, ...]) -> None:
    """Regression of defect 2: with the kernel's operands (right operand and accumulator at their static width,
    the valid columns stored) pto-isa's A2/A3 path on the emulator gives the float64 golden's result, where the
    data-extent operands do not (the negative control, on the cases with a narrow right operand)."""
    path, *rest = case
    chain, dtype, rows, tokens, dim, col = rest
    x, y, golden = chain_inputs(tuple(rest), seed=sum(rest[2:]))  # type: ignore[arg-type]
    dev = run_cube("dev", chain, dtype, rows, tokens, dim, col, x, y, path=path, kernel_operands=True)
    cpu = run_cube("cpu", chain, dtype, rows, tokens, dim, col, x, y, path=path, kernel_operands=True)
    scale = np.abs(golden).max() + 1.0
    tolerance = 1e-5 * scale * (dim if chain == 0 else tokens)
    assert np.abs(cpu - golden).max() <= tolerance, "the CPU implementation disagrees with the golden"
    assert np.abs(dev - golden).max() <= tolerance, np.unravel_index(np.argmax(np.abs(dev - golden)), dev.shape)
    narrow = (tokens if chain == 0 else dim) < STATIC
    if narrow:
        before = run_cube("dev", chain, dtype, rows, tokens, dim, col, x, y, path=path, kernel_operands=False)
        assert np.abs(before - golden).max() > 100 * tolerance, "the data-extent operands should be wrong here"

