"""Known-answer tests of the emulator's initcheck (kernel/npu/emu/emu_initcheck.hpp): a GM store of data derived
from on-chip bytes never written in the launch is an UNINIT fault naming the store, region, offset and origin; a
read of unwritten bytes whose result is never stored is not.  Inputs are fresh random values; the unwritten bytes
keep the emulator's hostile fill."""

from __future__ import annotations

import numpy as np
import pytest
from emu_harness import CUBE, VECTOR, Core, EmuFaultError, address

RNG = np.random.default_rng(20261128)


def vector() -> Core:
    core = Core(VECTOR)
    core.call("set_mask_norm")
    core.call("set_vector_mask", -1, -1)
    core.initcheck(True)
    return core


def test_a_load_then_a_store_passes() -> None:
    core = vector()
    src = RNG.standard_normal(37).astype(np.float32)  # 148 bytes: the dummy tail of the block is written too
    core.call("copy_gm_to_ubuf_align_b32", 0, address(src), 0, 1, 148, 0, 0, 0, 0)
    out = np.full(37, np.nan, dtype=np.float32)
    core.call("copy_ubuf_to_gm_align_b32", address(out), 0, 0, 1, 148, 0, 0, 0, 0)
    assert np.array_equal(out, src)


def test_a_store_of_never_written_ub_faults_naming_region_and_offset() -> None:
    core = vector()
    src = RNG.standard_normal(64).astype(np.float32)
    core.call("copy_gm_to_ubuf_align_b32", 0, address(src), 0, 1, 256, 0, 0, 0, 0)
    out = np.zeros(64, dtype=np.float32)
    with pytest.raises(EmuFaultError) as err:  # the burst reads UB [4096, 4352): never written
        core.call("copy_ubuf_to_gm_align_b32", address(out), 4096, 0, 1, 256, 0, 0, 0, 0)
    text = str(err.value)
    assert "UNINIT" in text and "copy_ubuf_to_gm_align_b32" in text and "UB byte 4096" in text, text
    assert "vec core 0.0" in text, text
    assert not out.any(), "nothing reaches GM"


def test_a_read_of_unwritten_bytes_never_stored_does_not_fault_and_one_stored_names_its_origin() -> None:
    core = vector()
    src = RNG.standard_normal(64).astype(np.float32)
    core.call("copy_gm_to_ubuf_align_b32", 0, address(src), 0, 1, 256, 0, 0, 0, 0)
    # two repeats: the second reads UB [256, 512), never written, into dst [1280, 1536)
    core.call("vadd_f32", 1024, 0, 0, 2, 1, 1, 1, 8, 8, 8)
    first = np.zeros(64, dtype=np.float32)
    core.call("copy_ubuf_to_gm_align_b32", address(first), 1024, 0, 1, 256, 0, 0, 0, 0)
    assert np.array_equal(first, src + src)
    second = np.zeros(64, dtype=np.float32)
    with pytest.raises(EmuFaultError) as err:
        core.call("copy_ubuf_to_gm_align_b32", address(second), 1280, 0, 1, 256, 0, 0, 0, 0)
    text = str(err.value)
    assert "UNINIT" in text and "UB byte 1280" in text and "vadd read unwritten UB byte 256" in text, text


def test_a_reduction_over_an_unwritten_lane_is_tainted_and_a_masked_one_is_not() -> None:
    core = vector()
    src = RNG.standard_normal(63).astype(np.float32)  # 252 bytes: lane 63 is the burst's dummy tail, written too
    core.call("copy_gm_to_ubuf_align_b32", 0, address(src), 0, 1, 252, 0, 0, 0, 0)
    core.call("vcadd", 512, 0, 1, 1, 1, 8, 0)
    out = np.zeros(8, dtype=np.float32)
    core.call("copy_ubuf_to_gm_align_b32", address(out), 512, 0, 1, 4, 0, 0, 0, 0)  # clean: the dummy is written
    core.call("vcadd", 1024, 256, 1, 1, 1, 8, 0)  # a row never written
    with pytest.raises(EmuFaultError, match=r"UNINIT.*vcadd read unwritten UB byte 256"):
        core.call("copy_ubuf_to_gm_align_b32", address(out), 1024, 0, 1, 4, 0, 0, 0, 0)
    core.call("set_vector_mask", 0, (1 << 32) - 1)  # lanes 0-31 of the written row only
    core.call("vcadd", 2048, 0, 1, 1, 1, 8, 0)
    core.call("copy_ubuf_to_gm_align_b32", address(out), 2048, 0, 1, 4, 0, 0, 0, 0)
    assert np.isclose(out[0], src[:32].sum(), rtol=1e-5)


def test_mad_taints_only_the_columns_of_c_whose_b_column_is_unwritten() -> None:
    """C[i][j] derives from unwritten bytes iff a row of A or a column of B it reads over the valid k does:
    columns 16-31 of B were never written, so storing C's first 16 columns passes and the next faults."""
    core = Core(CUBE)
    core.initcheck(True)
    m, k, n = 16, 16, 32
    l0a, l0b = core.buffer("L0A", np.uint16), core.buffer("L0B", np.uint16)
    a = RNG.standard_normal((m, k)).astype(np.float16)
    b = RNG.standard_normal((k, 16)).astype(np.float16)
    l0a[:256] = a.view(np.uint16).reshape(-1)  # Zz: one fractal, (m, k) at m * 16 + k
    l0b[:256] = b.T.view(np.uint16).reshape(-1)  # Zn: (k, n) at n * 16 + k for n < 16
    # columns 16-31: finite stale values, never marked written (mad's operand check faults on a non-finite one)
    l0b[256:512] = RNG.standard_normal(256).astype(np.float16).view(np.uint16)
    core.mark_written("L0A", 0, 512)
    core.mark_written("L0B", 0, 512)
    core.call("mad_f16", 0, 0, 0, m, k, n, 0, 0, 0, 1)
    core.call("set_nd_para", 1 | (16 * 16 * 2) << 16 | 32 << 32)
    gm = np.full((m, 32), np.nan, dtype=np.float32)
    core.call("copy_matrix_cc_to_gm", address(gm), 0, 16 << 4 | m << 16 | 32 << 32, 16 | 1 << 43)
    expected = a.astype(np.float64) @ b.astype(np.float64)
    assert np.allclose(gm[:, :16], expected, rtol=1e-3, atol=1e-3)
    with pytest.raises(EmuFaultError, match=r"UNINIT: L0C byte 1024 .*mad read unwritten L0B byte 512"):
        core.call("copy_matrix_cc_to_gm", address(gm), 0, 32 << 4 | m << 16 | 32 << 32, 16 | 1 << 43)


def test_initcheck_off_and_host_fills() -> None:
    """A core starts with initcheck off (the other known-answer tests fill buffers from the host); a host fill
    declared written is clean."""
    core = Core(VECTOR)
    out = np.zeros(8, dtype=np.float32)
    core.call("copy_ubuf_to_gm_align_b32", address(out), 0, 0, 1, 32, 0, 0, 0, 0)
    core.initcheck(True)
    with pytest.raises(EmuFaultError, match="UNINIT"):
        core.call("copy_ubuf_to_gm_align_b32", address(out), 0, 0, 1, 32, 0, 0, 0, 0)
    core.buffer("UB", np.float32)[:8] = 1.5
    core.mark_written("UB", 0, 32)
    core.call("copy_ubuf_to_gm_align_b32", address(out), 0, 0, 1, 32, 0, 0, 0, 0)
    assert (out == 1.5).all()
