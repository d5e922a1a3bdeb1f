"""Known-answer tests of the A2/A3 intrinsic emulator, one or more per intrinsic, and its faults.

Expected values come from SEMANTICS.md's formulas written out here in numpy (never from pto-isa code).  Inputs
are fresh random values; destination memory keeps the emulator's hostile fill (or a poison the test writes), so a
byte the intrinsic should not touch, or should have written and did not, shows.

Over 400 lines because it holds one known answer per emulated intrinsic, in SEMANTICS.md's order.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from emu_harness import CUBE, PIPE, VECTOR, Core, EmuFaultError, address, f16_bits, f32_bits

RNG = np.random.default_rng(20261125)
POISON = np.uint8(0xA5)


def vector() -> Core:
    core = Core(VECTOR)
    core.call("set_mask_norm")
    core.call("set_vector_mask", -1, -1)
    return core


def cube() -> Core:
    return Core(CUBE)


# ---- DMA -----------------------------------------------------------------------------------------------------

def test_gm_to_ub_bursts_gaps_and_dummy_tail() -> None:
    """Without padding the dummy tail of a burst is copies of its first element (CCE copy_gm_to_ubuf_align)."""
    core = vector()
    rows, cols, pitch = 5, 37, 50  # 148-byte bursts: 5 blocks in UB, the last one 12 bytes of dummy data
    gm = RNG.standard_normal((rows, pitch)).astype(np.float32)
    ub = core.buffer("UB")
    ub[:] = POISON
    gap_blocks = 2
    core.call("copy_gm_to_ubuf_align_b32", 256, address(gm), 0, rows, cols * 4, 0, 0, (pitch - cols) * 4, gap_blocks)
    stride = (5 + gap_blocks) * 32
    for r in range(rows):
        burst = ub[256 + r * stride: 256 + r * stride + 5 * 32]
        assert np.array_equal(burst[:cols * 4].view(np.float32), gm[r, :cols]), r
        assert (burst[cols * 4:].view(np.float32) == gm[r, 0]).all(), "dummy tail: the burst's first element"
        if r < rows - 1:
            assert (ub[256 + r * stride + 160: 256 + (r + 1) * stride] == POISON).all(), "gap written"
    assert (ub[:256] == POISON).all() and (ub[256 + 4 * stride + 160:] == POISON).all()
    halves = RNG.standard_normal(21).astype(np.float16)  # 42 bytes: 11 dummy halves
    core.call("copy_gm_to_ubuf_align_b16", 0, address(halves), 0, 1, 42, 0, 0, 0, 0)
    assert (core.buffer("UB", np.float16)[21:32] == halves[0]).all()
    core.call("copy_gm_to_ubuf_align_b16", 0, address(halves), 0, 1, 42, 1, 0, 0, 0)  # padded: set_mov_pad_val's
    assert np.isnan(core.buffer("UB", np.float16)[[0, 22, 31]]).all()                # value, not emulated: NaN


def test_ub_to_gm_writes_only_len_bytes_per_burst() -> None:
    core = vector()
    ub = core.buffer("UB", np.uint16)
    data = RNG.integers(0, 1 << 16, 4096, dtype=np.uint16)
    ub[:4096] = data
    gm = np.full(2000, 0xBEEF, dtype=np.uint16)
    n, length_bytes, src_gap_blocks, dst_gap_bytes = 4, 300 * 2, 3, 40 * 2
    core.call("copy_ubuf_to_gm_align_b16", address(gm), 0, 0, n, length_bytes, 0, 0, src_gap_blocks, dst_gap_bytes)
    burst_blocks = -(-length_bytes // 32)
    expected = np.full(2000, 0xBEEF, dtype=np.uint16)
    for i in range(n):
        src = i * (burst_blocks + src_gap_blocks) * 16
        expected[i * 340: i * 340 + 300] = data[src: src + 300]
    assert np.array_equal(gm, expected)


def test_ub_to_ub_copies_blocks_with_gaps() -> None:
    core = vector()
    ub = core.buffer("UB")
    src = RNG.integers(0, 256, 4096, dtype=np.uint8)
    ub[:4096] = src
    ub[8192:16384] = POISON
    core.call("copy_ubuf_to_ubuf", 8192, 0, 0, 3, 2, 1, 4)
    for i in range(3):
        assert np.array_equal(ub[8192 + i * 6 * 32: 8192 + i * 6 * 32 + 64], src[i * 3 * 32: i * 3 * 32 + 64])
        assert (ub[8192 + i * 6 * 32 + 64: 8192 + (i + 1) * 6 * 32] == POISON).all()


def nz_offset(m: np.ndarray, n: np.ndarray, rows: int) -> np.ndarray:
    """Element offset of (m, n) in an Nz tile with ``rows`` (rounded to 16) rows, C0 = 16."""
    return (n // 16) * rows * 16 + m * 16 + n % 16


def test_nd2nz_layout_zero_pad_and_rows_past_n_untouched() -> None:
    core = cube()
    n, d, pitch, rows_static = 20, 40, 64, 32
    gm = RNG.integers(1, 1 << 15, (n, pitch), dtype=np.uint16)
    l1 = core.buffer("L1", np.uint16)
    l1[:] = 0xA5A5
    core.call("copy_gm_to_cbuf_multi_nd2nz_b16", 1024, address(gm), 0, 1, n, d, 0, pitch, rows_static, 1, 1)
    tile = l1[512: 512 + rows_static * 48]  # 1024 bytes in: 3 fractal columns of 32 rows
    m, c = np.meshgrid(np.arange(n), np.arange(d), indexing="ij")
    assert np.array_equal(tile[nz_offset(m, c, rows_static)], gm[:n, :d])
    pad_m, pad_c = np.meshgrid(np.arange(n), np.arange(d, 48), indexing="ij")
    assert (tile[nz_offset(pad_m, pad_c, rows_static)] == 0).all(), "the last block of a row is zero-padded"
    rest_m, rest_c = np.meshgrid(np.arange(n, rows_static), np.arange(48), indexing="ij")
    assert (tile[nz_offset(rest_m, rest_c, rows_static)] == 0xA5A5).all(), "rows >= nValue are not written"


def test_l1_fill_repeats_blocks_with_gaps() -> None:
    core = cube()
    l1 = core.buffer("L1", np.uint16)
    l1[:] = 0xA5A5
    value = f16_bits(-1.5)
    repeat, blocks, gap = 3, 2, 1
    core.call("create_cbuf_matrix", 2048, repeat | blocks << 16 | gap << 32, value)
    for r in range(repeat):
        start = 1024 + r * (blocks + gap) * 16
        assert (l1[start: start + blocks * 16] == value).all()
        assert (l1[start + blocks * 16: start + (blocks + gap) * 16] == 0xA5A5).all() or r == repeat - 1
    core.call("create_cbuf_matrix_bf16", 0, 1 | 1 << 16, 0x3F80)
    assert (l1[:16] == 0x3F80).all()


# ---- MTE1 and the cube ---------------------------------------------------------------------------------------

def test_img2col_window_to_l0a_zz_and_l0b_zn() -> None:
    core = cube()
    rows, cols = 48, 64  # an L1 Nz tile of 48 x 64 fp16
    mat = RNG.integers(0, 1 << 16, (rows, cols), dtype=np.uint16)
    l1 = core.buffer("L1", np.uint16)
    m, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    l1[nz_offset(m, c, rows)] = mat
    core.call("set_fmatrix", rows | 1 << 16)
    core.call("img2colv2_cbuf_to_ca", 0, 0, 32, 16, 16, 16, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, cols)
    window = mat[16:32, 16:48]
    l0a = core.buffer("L0A", np.uint16)
    wm, wk = np.meshgrid(np.arange(16), np.arange(32), indexing="ij")
    zz = (wm // 16) * 32 * 16 + (wk // 16) * 256 + (wm % 16) * 16 + wk % 16
    assert np.array_equal(l0a[zz], window)
    core.call("set_fmatrix_b", rows | 1 << 16)
    core.call("img2colv2_cbuf_to_cb", 0, 0, 64, 48, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, cols)
    l0b = core.buffer("L0B", np.uint16)  # K = 48 rows (tokens), N = 64 columns: Zn
    k, n = np.meshgrid(np.arange(48), np.arange(64), indexing="ij")
    zn = (k // 16) * 64 * 16 + (n // 16) * 256 + (n % 16) * 16 + k % 16
    assert np.array_equal(l0b[zn], mat)


def test_load_cbuf_to_cb_copies_fractals() -> None:
    core = cube()
    l1 = core.buffer("L1", np.uint16)
    l1[:16384] = RNG.integers(0, 1 << 16, 16384, dtype=np.uint16)
    l0b = core.buffer("L0B", np.uint16)
    l0b[:] = 0xA5A5
    core.call("load_cbuf_to_cb", 512, 0, 3, 4, 5, 1, 0, 0, 0)
    for r in range(4):
        fractal = (3 + r * 5) * 256
        assert np.array_equal(l0b[256 + r * 2 * 256: 256 + r * 2 * 256 + 256], l1[fractal: fractal + 256])
        assert (l0b[256 + (2 * r + 1) * 256: 256 + (2 * r + 2) * 256] == 0xA5A5).all()


def zz(m: np.ndarray, k: np.ndarray, kp: int) -> np.ndarray:
    return (m // 16) * kp * 16 + (k // 16) * 256 + (m % 16) * 16 + k % 16


def zn(k: np.ndarray, n: np.ndarray, np_: int) -> np.ndarray:
    return (k // 16) * np_ * 16 + (n // 16) * 256 + (n % 16) * 16 + k % 16


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_mad_computes_over_the_valid_k_and_accumulates(dtype: str) -> None:
    core = cube()
    m, k, n = 20, 44, 40
    mp, kp, np_ = 32, 48, 48
    a = RNG.standard_normal((m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    to16 = (lambda x: x.astype(np.float16).view(np.uint16)) if dtype == "f16" else \
        (lambda x: (x.view(np.uint32) >> 16).astype(np.uint16))  # bf16 by truncation: exact inputs
    a16, b16 = to16(a), to16(b)
    back = (lambda u: u.view(np.float16).astype(np.float64)) if dtype == "f16" else \
        (lambda u: (u.astype(np.uint32) << 16).view(np.float32).astype(np.float64))
    l0a, l0b = core.buffer("L0A", np.uint16), core.buffer("L0B", np.uint16)
    l0a[:] = 0x7E00  # NaN in the padding: ignored, as Mmad.md says padded data is
    l0b[:] = 0x7E00
    mm, kk = np.meshgrid(np.arange(m), np.arange(k), indexing="ij")
    l0a[zz(mm, kk, kp)] = a16
    kk2, nn = np.meshgrid(np.arange(k), np.arange(n), indexing="ij")
    l0b[zn(kk2, nn, np_)] = b16
    core.call(f"mad_{dtype}", 0, 0, 0, m, k, n, 0, 0, 0, 1)
    l0c = core.buffer("L0C", np.float32)
    i, j = np.meshgrid(np.arange(m), np.arange(n), indexing="ij")
    c_index = (j // 16) * mp * 16 + i * 16 + j % 16
    expected = back(a16) @ back(b16)
    assert np.allclose(l0c[c_index], expected, rtol=1e-5, atol=1e-5)
    core.call(f"mad_{dtype}", 0, 0, 0, m, k, n, 0, 0, 0, 0)  # C += A.B
    assert np.allclose(l0c[c_index], 2 * expected, rtol=1e-5, atol=1e-4)


def mad_operands(core: Core, a: np.ndarray, b: np.ndarray, dtype: str = "bf16") -> None:
    """A (m x k) and B (k x n) into L0A/L0B at offset 0 as 16-bit bits; everything else a NaN pattern."""
    (m, k), n = a.shape, b.shape[1]
    kp, np_ = -(-k // 16) * 16, -(-n // 16) * 16
    bits = (lambda x: x.astype(np.float16).view(np.uint16)) if dtype == "f16" else \
        (lambda x: (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16))
    l0a, l0b = core.buffer("L0A", np.uint16), core.buffer("L0B", np.uint16)
    l0a[:] = 0x7FC0 if dtype == "bf16" else 0x7E00
    l0b[:] = l0a[0]
    mm, kk = np.meshgrid(np.arange(m), np.arange(k), indexing="ij")
    l0a[zz(mm, kk, kp)] = bits(a)
    kk2, nn = np.meshgrid(np.arange(k), np.arange(n), indexing="ij")
    l0b[zn(kk2, nn, np_)] = bits(b)


@pytest.mark.parametrize("ctrl48", [0, 1])
def test_mad_saturates_inf_and_nan_outputs_while_ctrl48_is_0(ctrl48: int) -> None:
    """Mmad.md: with CTRL[48] = 0 an inf output becomes +-FLT_MAX and a NaN output 0; with 1 both are kept."""
    core = cube()
    m, k, n = 16, 16, 16
    a = RNG.uniform(-1, 1, (m, k)).astype(np.float32)
    b = RNG.uniform(-1, 1, (k, n)).astype(np.float32)
    a[0:3, 0:2], b[0:2, 0] = [[3e38, 0], [-3e38, 0], [3e38, -3e38]], [10, 10]  # sums: inf, -inf, inf + -inf
    mad_operands(core, a, b)
    core.call("set_ctrl", ctrl48 << 48)
    core.call("mad_bf16", 0, 0, 0, m, k, n, 0, 0, 0, 1)
    out = core.buffer("L0C", np.float32)[[0, 16, 32]]  # C[0..2][0]: (j // 16) x 256 + i x 16 + j % 16
    big = np.finfo(np.float32).max
    if ctrl48 == 0:
        assert out[0] == big and out[1] == -big and out[2] == 0.0, out
    else:
        assert out[0] == np.inf and out[1] == -np.inf and np.isnan(out[2]), out
    finite = core.buffer("L0C", np.float32)[3 * 16 + 1]  # C[3][1]: an ordinary sum, untouched by either mode
    assert np.isfinite(finite) and abs(finite) < 16


@pytest.mark.parametrize(("operand", "where", "offset"), [("b", (3, 20), 646), ("a", (5, 7), 174)])
def test_mad_faults_on_a_non_finite_element_it_reads(operand: str, where: tuple[int, int], offset: int) -> None:
    """Mmad.md warns a NaN input may raise an execution error: any element of the m x k of A or the k x n of B
    the multiply reads faults, including a column of B whose result the kernel never stores (n = 32, column 20)."""
    core = cube()
    a = RNG.standard_normal((16, 24)).astype(np.float32)
    b = RNG.standard_normal((24, 32)).astype(np.float32)
    (a if operand == "a" else b)[where] = np.nan
    mad_operands(core, a, b, "f16")
    region = "L0A" if operand == "a" else "L0B"  # b[3][20]: Zn element (20 // 16) x 256 + 4 x 16 + 3
    index = re.escape(f"{operand}[{where[0]}][{where[1]}]")
    with pytest.raises(EmuFaultError, match=rf"mad on cube core 0\.0, pipe M: {operand} = {offset} .*"
                                            rf"non-finite element {index} .*at {region} byte offset {offset}:"):
        core.call("mad_f16", 0, 0, 0, 16, 24, 32, 0, 0, 0, 1)
    (a if operand == "a" else b)[where] = np.inf  # inf too: inf x 0 is NaN
    mad_operands(core, a, b, "f16")
    with pytest.raises(EmuFaultError, match=index):
        core.call("mad_f16", 0, 0, 0, 16, 24, 32, 0, 0, 0, 1)


def test_mad_with_finite_operands_and_nan_only_past_k_and_n_runs() -> None:
    """Negative control of the check above: every element the multiply reads finite, NaN everywhere else
    (the fractal padding past k and n, which Mmad.md says is ignored): no fault, and the right product."""
    core = cube()
    a = RNG.standard_normal((16, 24)).astype(np.float32)
    b = RNG.standard_normal((24, 20)).astype(np.float32)
    mad_operands(core, a, b, "f16")
    core.call("mad_f16", 0, 0, 0, 16, 24, 20, 0, 0, 0, 1)
    i, j = np.meshgrid(np.arange(16), np.arange(20), indexing="ij")
    got = core.buffer("L0C", np.float32)[(j // 16) * 16 * 16 + i * 16 + j % 16]
    want = a.astype(np.float16).astype(np.float64) @ b.astype(np.float16).astype(np.float64)
    assert np.allclose(got, want, rtol=1e-5, atol=1e-5)


def test_fixpipe_nz2nd_fp32_and_fp16() -> None:
    core = cube()
    m, n, mp = 20, 44, 32
    l0c = core.buffer("L0C", np.float32)
    values = RNG.standard_normal(mp * 48).astype(np.float32)
    l0c[:mp * 48] = values
    gm = np.full((m, 64), np.nan, dtype=np.float32)
    core.call("set_nd_para", 1 | (mp * 16 * 3 & 0xFFFF) << 16 | 64 << 32)
    core.call("copy_matrix_cc_to_gm", address(gm), 0, n << 4 | m << 16 | 64 << 32, mp | 1 << 43)
    i, j = np.meshgrid(np.arange(m), np.arange(n), indexing="ij")
    assert np.array_equal(gm[:, :n], values[(j // 16) * mp * 16 + i * 16 + j % 16])
    assert np.isnan(gm[:, n:]).all(), "columns past NSize are not written"
    half = np.full((m, n), 0xA5A5, dtype=np.uint16)
    core.call("copy_matrix_cc_to_gm", address(half), 0, n << 4 | m << 16 | n << 32, mp | 1 << 34 | 1 << 43)
    assert np.array_equal(half.view(np.float16), values[(j // 16) * mp * 16 + i * 16 + j % 16].astype(np.float16))
    l0c[[0, 16, 32]] = [1e6, -np.inf, np.nan]  # C[0..2][0]: F322F16 saturates while CTRL[48] = 0, keeps with 1
    for ctrl, want in ((0, [65504, -65504, 0]), (1 << 48, [np.inf, -np.inf, np.nan])):
        core.call("set_ctrl", ctrl)
        core.call("copy_matrix_cc_to_gm", address(half), 0, n << 4 | m << 16 | n << 32, mp | 1 << 34 | 1 << 43)
        assert np.array_equal(half.view(np.float16)[:3, 0], np.array(want, np.float16), equal_nan=True), ctrl


# ---- vector -------------------------------------------------------------------------------------------------

def test_binary_ops_strides_and_normal_mask() -> None:
    core = vector()
    ub = core.buffer("UB", np.float32)
    ub[:12288] = RNG.standard_normal(12288).astype(np.float32)
    a, b = ub[0:2048].copy(), ub[2048:4096].copy()
    ub[8192:12288] = np.nan
    core.call("set_vector_mask", 0, (1 << 40) - 1)  # 40 of 64 lanes
    # 2 repeats; src0 repeat stride 16 blocks, src1 block stride 2, dst repeat stride 8
    core.call("vadd_f32", 8192 * 4, 0, 2048 * 4, 2, 1, 1, 2, 8, 16, 16)
    out = ub[8192:12288]
    for r in range(2):
        for lane in range(64):
            got = out[r * 64 + lane]
            if lane < 40:
                x = a[r * 128 + lane]
                y = b[r * 128 + (lane // 8) * 16 + lane % 8]
                assert got == np.float32(x + y), (r, lane)
            else:
                assert np.isnan(got), "a masked lane was written"


@pytest.mark.parametrize(("name", "op"), [("vsub", np.subtract), ("vmul", np.multiply), ("vdiv", np.divide),
                                           ("vmax", np.maximum)])
def test_binary_ops_f32(name: str, op: np.ufunc) -> None:
    core = vector()
    ub = core.buffer("UB", np.float32)
    ub[:256] = RNG.standard_normal(256).astype(np.float32) + 3.0
    core.call(f"{name}_f32", 2048, 0, 512, 2, 1, 1, 1, 8, 8, 8)
    assert np.array_equal(ub[512:640], op(ub[:128], ub[128:256]).astype(np.float32))


def test_fp16_arithmetic_rounds_once_and_saturates() -> None:
    core = vector()
    ub = core.buffer("UB", np.float16)
    a = RNG.standard_normal(128).astype(np.float16)
    b = RNG.standard_normal(128).astype(np.float16)
    a[:2], b[:2] = 65504, 65504          # overflow: saturates to 65504 while CTRL[48] = 0
    a[2], b[2] = np.nan, 1               # NaN -> 0 under saturation
    ub[:128], ub[128:256] = a, b
    core.call("vadd_f16", 1024, 0, 256, 1, 1, 1, 1, 8, 8, 8)
    with np.errstate(over="ignore", invalid="ignore"):  # the overflow is the point; fixed below
        expected = (a.astype(np.float32) + b.astype(np.float32)).astype(np.float16)
    expected[:2], expected[2] = 65504, 0
    assert np.array_equal(ub[512:640].view(np.uint16), expected.view(np.uint16))
    core.call("set_ctrl", 1 << 48)        # saturation off: inf and NaN pass through
    core.call("vadd_f16", 1024, 0, 256, 1, 1, 1, 1, 8, 8, 8)
    assert np.isinf(ub[512]) and np.isnan(ub[514])


def test_scalar_unary_ops_and_counter_mode() -> None:
    core = vector()
    ub = core.buffer("UB", np.float32)
    x = RNG.uniform(0.5, 4.0, 256).astype(np.float32)
    ub[:256] = x
    ub[1024:1280] = np.nan
    core.call("set_mask_count")
    core.call("set_vector_mask", 0, 150)  # 150 elements: 2 full iterations and 22 lanes of a third
    core.call("vmuls_f32", 4096, 0, f32_bits(0.375), 0, 1, 1, 8, 8)
    assert np.array_equal(ub[1024:1174], x[:150] * np.float32(0.375))
    assert np.isnan(ub[1174:1280]).all()
    core.call("vadds_f32", 4096, 0, f32_bits(-1.25), 0, 1, 1, 8, 8)
    assert np.array_equal(ub[1024:1174], x[:150] + np.float32(-1.25))
    core.call("vexp_f32", 4096, 0, 0, 1, 1, 8, 8)
    assert np.allclose(ub[1024:1174], np.exp(x[:150]), rtol=2e-7)
    core.call("vln_f32", 4096, 0, 0, 1, 1, 8, 8)
    assert np.allclose(ub[1024:1174], np.log(x[:150]), rtol=2e-7, atol=1e-7)
    core.call("set_mask_norm")
    core.call("set_vector_mask", -1, -1)
    core.call("vmuls_f32", 4096, 0, f32_bits(2.0), 0, 1, 1, 8, 8)  # repeat 0 in normal mode: nothing
    assert np.allclose(ub[1024:1174], np.log(x[:150]), rtol=2e-7, atol=1e-7)


def tree_sum(values: np.ndarray) -> np.float32:
    v = values.astype(np.float32)
    while v.size > 1:
        v = (v[0::2] + v[1::2]).astype(np.float32)
    return v[0]


def test_reductions_vcadd_tree_and_vcmax() -> None:
    core = vector()
    ub = core.buffer("UB", np.float32)
    x = (RNG.standard_normal(256) * np.float32(1e4)).astype(np.float32)
    ub[:256] = x
    ub[2048:2064] = np.nan
    core.call("vcadd", 8192, 0, 4, 2, 1, 8, 0)  # 4 repeats, one value each, 2 elements apart
    for r in range(4):
        assert ub[2048 + 2 * r] == tree_sum(x[r * 64:(r + 1) * 64]), r
        assert np.isnan(ub[2048 + 2 * r + 1])
    core.call("set_vector_mask", 0, (1 << 20) - 1)
    core.call("vcmax", 8192, 0, 4, 1, 1, 8, 0)
    for r in range(4):
        assert ub[2048 + r] == x[r * 64: r * 64 + 20].max()


def test_vbrcb_and_vector_dup() -> None:
    core = vector()
    ub = core.buffer("UB", np.float32)
    src = RNG.standard_normal(16).astype(np.float32)
    ub[:16] = src
    core.call("vbrcb", 4096, 0, 1, 8, 2)  # 2 repeats x 8 blocks x 8 copies
    assert np.array_equal(ub[1024:1152].reshape(16, 8), np.repeat(src[:, None], 8, axis=1))
    core.call("set_vector_mask", 0, 0b1011)
    ub[2048:2112] = np.nan
    core.call("vector_dup_f32", 8192, f32_bits(7.5), 1, 1, 1, 8, 8)
    assert list(ub[2048:2052]) == [7.5, 7.5, pytest.approx(np.nan, nan_ok=True), 7.5]
    assert np.isnan(ub[2049 + 3: 2112]).all()


def test_conversions_round_to_nearest_even_and_saturate() -> None:
    core = vector()
    ub = core.buffer("UB", np.float32)
    x = (RNG.standard_normal(64) * 100).astype(np.float32)
    x[0], x[1], x[2], x[3] = 1e6, -np.inf, np.nan, np.float32(1 + 2**-11)  # a tie: rounds to even (1.0)
    ub[:64] = x
    core.call("vconv_f322f16r", 1024, 0, 1, 1, 1, 4, 8)
    half = core.buffer("UB", np.float16)[512:576]
    with np.errstate(over="ignore"):
        expected = x.astype(np.float16)
    expected[0], expected[1], expected[2] = 65504, -65504, 0
    assert np.array_equal(half.view(np.uint16), expected.view(np.uint16))
    core.call("vconv_f162f32", 2048, 1024, 1, 1, 1, 8, 4)
    assert np.array_equal(ub[512:576], expected.astype(np.float32))
    core.call("vconv_f322bf16r", 1024, 0, 1, 1, 1, 4, 8)
    bits = x.view(np.uint32).astype(np.uint64)
    rne = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    rne[1], rne[2] = 0xFF7F, 0  # -inf -> -MAX, NaN -> 0
    assert np.array_equal(core.buffer("UB", np.uint16)[512:576], rne)
    core.call("vconv_bf162f32", 2048, 1024, 1, 1, 1, 8, 4)
    assert np.array_equal(ub[512:576].view(np.uint32), rne.astype(np.uint32) << 16)


# ---- control ------------------------------------------------------------------------------------------------

def test_flags_barriers_and_deadlocks() -> None:
    core = vector()
    core.call("set_flag", PIPE["MTE2"], PIPE["V"], 3)
    core.call("wait_flag", PIPE["MTE2"], PIPE["V"], 3)
    core.call("pipe_barrier", PIPE["V"])
    with pytest.raises(EmuFaultError, match=r"wait_flag .* DEADLOCK: waits for flag MTE2->V"):
        core.call("wait_flag", PIPE["MTE2"], PIPE["V"], 3)
    core.call("set_flag", PIPE["V"], PIPE["MTE3"], 0)
    with pytest.raises(EmuFaultError, match=r"HAZARD: flag .* set twice without a wait"):
        core.call("set_flag", PIPE["V"], PIPE["MTE3"], 0)
    with pytest.raises(EmuFaultError, match="event = 8"):
        core.call("set_flag", PIPE["V"], PIPE["MTE3"], 8)
    with pytest.raises(EmuFaultError, match="DEADLOCK: the cross-core counter is 0"):
        core.call("wait_flag_dev", 2)
    core.call("ffts_cross_core_sync", PIPE["MTE3"], 1 | 2 << 4 | 5 << 8)
    with pytest.raises(EmuFaultError, match="does not fit the 16-bit field"):
        core.call("ffts_cross_core_sync", PIPE["MTE3"], 1 << 16 | 1)


# ---- negative controls: the faults the issue names -------------------------------------------------------------

def test_a_stride_that_needs_17_bits_faults() -> None:
    core = cube()
    gm = np.zeros(16, dtype=np.uint16)
    with pytest.raises(EmuFaultError, match=r"copy_gm_to_cbuf_multi_nd2nz_b16 on cube core 0\.0, pipe MTE2: "
                                       r"srcDValue = 70000 .*16-bit field"):
        core.call("copy_gm_to_cbuf_multi_nd2nz_b16", 0, address(gm), 0, 1, 1, 16, 0, 70000, 16, 1, 1)


def test_an_address_past_ub_faults() -> None:
    core = vector()
    with pytest.raises(EmuFaultError, match=r"vadd on vec core 0\.0, pipe V: dst = 196608 .*runs past UB"):
        core.call("vadd_f32", 192 * 1024, 0, 0, 1, 1, 1, 1, 8, 8, 8)
    with pytest.raises(EmuFaultError, match="runs past UB"):  # the last repeat crosses the end
        core.call("vadd_f32", 192 * 1024 - 2048, 0, 0, 9, 1, 1, 1, 8, 8, 8)


def test_a_misaligned_l1_address_faults() -> None:
    core = cube()
    gm = np.zeros(256, dtype=np.uint16)
    with pytest.raises(EmuFaultError, match=r"dst = 48 .*L1 address not aligned to 32 bytes"):
        core.call("copy_gm_to_cbuf_multi_nd2nz_b16", 48, address(gm), 0, 1, 1, 16, 0, 16, 16, 1, 1)
    with pytest.raises(EmuFaultError, match="L0B address not aligned to 512 bytes"):
        core.call("load_cbuf_to_cb", 256, 0, 0, 1, 1, 0, 0, 0, 0)


def test_state_never_set_and_wrong_operands_fault() -> None:
    core = cube()
    with pytest.raises(EmuFaultError, match=r"ND_PARA .*before any set_nd_para"):
        core.call("copy_matrix_cc_to_gm", address(np.zeros(16, np.float32)), 0, 16 << 4 | 1 << 16 | 16 << 32,
                  16 | 1 << 43)
    with pytest.raises(EmuFaultError, match=r"FMATRIX .*before any set_fmatrix"):
        core.call("img2colv2_cbuf_to_ca", 0, 0, 16, 16, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 16)
    with pytest.raises(EmuFaultError, match="this core has no UB"):
        core.call("vadd_f32", 0, 0, 0, 1, 1, 1, 1, 8, 8, 8)
    core.call("set_nd_para", 1)
    with pytest.raises(EmuFaultError, match=r"MSize = 8193 .*\[1, 8192\]"):  # with NZ2ND (ASC Fixpipe, V220)
        core.call("copy_matrix_cc_to_gm", address(np.zeros(16, np.float32)), 0, 1 << 4 | 8193 << 16 | 1 << 32,
                  8208 | 1 << 43)
    with pytest.raises(EmuFaultError, match="m = 1 is the GEMV form"):
        core.call("mad_f16", 0, 0, 0, 1, 16, 16, 0, 0, 0, 1)
    with pytest.raises(EmuFaultError, match=r"repeat = 256 .*8-bit field"):
        vector().call("vadd_f32", 0, 0, 0, 256, 1, 1, 1, 8, 8, 8)
    with pytest.raises(EmuFaultError, match="negative value"):
        vector().call("vadd_f32", 0, 0, 0, -1, 1, 1, 1, 8, 8, 8)


def test_unknown_soc_and_entry_faults() -> None:
    with pytest.raises(EmuFaultError, match="unknown SoC 'B5'"):
        Core(VECTOR, soc="B5")
    with pytest.raises(EmuFaultError, match="no entry point"):
        vector().call("vcgmax", 0)
    assert Core(CUBE, soc="910B4").buffer("L1").size == 512 * 1024
    assert Core(VECTOR, soc="A3").buffer("UB").size == 192 * 1024


def test_gm_access_outside_the_registered_buffers_faults() -> None:
    """With buffers registered, a DMA that reaches past them faults; the same copy inside them runs."""
    from emu_harness import emu

    core = vector()
    gm = np.zeros(64, dtype=np.float32)
    assert emu().pa_emu_register_gm(address(gm), gm.nbytes) == 0
    try:
        core.call("copy_gm_to_ubuf_align_b32", 0, address(gm), 0, 1, 64 * 4, 0, 0, 0, 0)  # all 256 bytes: fine
        with pytest.raises(EmuFaultError, match="outside every registered buffer"):
            core.call("copy_gm_to_ubuf_align_b32", 0, address(gm), 0, 2, 64 * 4, 0, 0, 0, 0)  # 512 bytes
    finally:
        assert emu().pa_emu_clear_gm() == 0
