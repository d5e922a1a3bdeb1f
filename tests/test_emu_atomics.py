"""Known-answer tests of the emulator's store atomics (SEMANTICS.md "Store atomics") and their faults.

The stores that honour the mode: UB -> GM (``copy_ubuf_to_gm_align_b16/_b32``: add, max, min) and L0C -> GM
(``copy_matrix_cc_to_gm``: add).  Expected values are numpy's IEEE fp32 sums and fp16/bf16 rounded once, half to
even; GM starts with fresh random values (finite: an atomic store into a non-finite value faults), so a byte the
store should not touch, or should have combined and overwrote, shows.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from emu_harness import CUBE, VECTOR, Core, EmuFaultError, address, emu

RNG = np.random.default_rng(20261128)
GM_SPACE = 0


def vector(seed: int = 1) -> Core:
    core = Core(VECTOR, seed=seed)
    core.call("set_mask_norm")
    core.call("set_vector_mask", -1, -1)
    return core


def bf16_round(x: np.ndarray) -> np.ndarray:
    """fp32 -> bf16 bits, round half to even (finite inputs)."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_value(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def ub_store(core: Core, gm: np.ndarray, n: int, length_bytes: int, gap_bytes: int, elem: int) -> None:
    core.call(f"copy_ubuf_to_gm_align_b{8 * elem}", address(gm), 0, 0, n, length_bytes, 0, 0, 0, gap_bytes)


def written(n: int, length: int, gap: int, size: int) -> np.ndarray:
    """Mask of the GM elements a store of n bursts of `length` elements, `gap` apart, writes."""
    mask = np.zeros(size, dtype=bool)
    for i in range(n):
        mask[i * (length + gap): i * (length + gap) + length] = True
    return mask


# ---- UB -> GM ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("op", "combine"), [("add", np.add), ("max", np.maximum), ("min", np.minimum)])
def test_ub_to_gm_f32_and_s32_combine_with_gm(op: str, combine: np.ufunc) -> None:
    core = vector()
    n, length, gap = 3, 40, 24  # 160-byte bursts: 5 UB blocks each, read contiguously
    for dtype, setter in ((np.float32, "set_atomic_f32"), (np.int32, "set_atomic_s32")):
        values = (RNG.standard_normal(n * length) * 100).astype(dtype) if dtype == np.float32 else \
            RNG.integers(-2**30, 2**30, n * length, dtype=np.int32)
        core.buffer("UB", dtype)[:n * length] = values
        old = (RNG.standard_normal(200) * 100).astype(dtype) if dtype == np.float32 else \
            RNG.integers(-2**30, 2**30, 200, dtype=np.int32)
        gm = old.copy()
        core.call(setter)
        core.call(f"set_atomic_{op}")
        ub_store(core, gm, n, length * 4, gap * 4, 4)
        mask = written(n, length, gap, 200)
        expected = old.copy()
        expected[mask] = combine(old[mask], values)
        assert np.array_equal(gm.view(np.uint32), expected.view(np.uint32)), (op, dtype)
    core.call("set_atomic_none")  # back to plain stores
    gm = np.zeros(200, dtype=np.int32)
    ub_store(core, gm, n, length * 4, gap * 4, 4)
    assert np.array_equal(gm[written(n, length, gap, 200)], values)


def test_ub_to_gm_f16_bf16_s16_add_rounds_once() -> None:
    core = vector()
    n, length, gap = 2, 48, 6  # 96-byte bursts: 3 whole UB blocks each, so UB is read contiguously
    mask = written(n, length, gap, 120)
    new = RNG.standard_normal(n * length).astype(np.float32)
    base = RNG.standard_normal(120).astype(np.float32)
    ub = core.buffer("UB", np.uint16)

    ub[:n * length] = new.astype(np.float16).view(np.uint16)
    gm = base.astype(np.float16)
    expected = gm.copy()
    expected[mask] = (gm[mask].astype(np.float32) + new.astype(np.float16).astype(np.float32)).astype(np.float16)
    core.call("set_atomic_add")
    core.call("set_atomic_f16")
    ub_store(core, gm, n, length * 2, gap * 2, 2)
    assert np.array_equal(gm.view(np.uint16), expected.view(np.uint16))

    ub[:n * length] = bf16_round(new)
    gm = bf16_round(base)
    expected = gm.copy()
    expected[mask] = bf16_round(bf16_value(gm[mask]) + bf16_value(bf16_round(new)))
    core.call("set_atomic_bf16")
    ub_store(core, gm, n, length * 2, gap * 2, 2)
    assert np.array_equal(gm, expected)

    ints = RNG.integers(-1000, 1000, n * length, dtype=np.int16)
    ub[:n * length] = ints.view(np.uint16)
    gm = RNG.integers(-1000, 1000, 120, dtype=np.int16)
    expected = gm.copy()
    expected[mask] += ints
    core.call("set_atomic_s16")
    ub_store(core, gm, n, length * 2, gap * 2, 2)
    assert np.array_equal(gm, expected)


# ---- L0C -> GM --------------------------------------------------------------------------------------------------

def test_fixpipe_adds_fp32_fp16_and_int32_into_gm() -> None:
    core = Core(CUBE)
    m, n, mp = 20, 44, 32  # NSize 44: not a multiple of 16, legal with NZ2ND
    l0c = core.buffer("L0C", np.float32)
    values = RNG.standard_normal(mp * 48).astype(np.float32)
    l0c[:mp * 48] = values
    i, j = np.meshgrid(np.arange(m), np.arange(n), indexing="ij")
    result = values[(j // 16) * mp * 16 + i * 16 + j % 16]
    core.call("set_nd_para", 1 | (mp * 16 * 3 & 0xFFFF) << 16 | 64 << 32)
    core.call("set_atomic_f32")
    core.call("set_atomic_add")

    old = RNG.standard_normal((m, 64)).astype(np.float32)
    gm = old.copy()
    core.call("copy_matrix_cc_to_gm", address(gm), 0, n << 4 | m << 16 | 64 << 32, mp | 1 << 43)
    assert np.array_equal(gm[:, :n], old[:, :n] + result) and np.array_equal(gm[:, n:], old[:, n:])

    half_old = RNG.standard_normal((m, n)).astype(np.float16)
    half = half_old.copy()
    core.call("set_atomic_f16")
    core.call("copy_matrix_cc_to_gm", address(half), 0, n << 4 | m << 16 | n << 32, mp | 1 << 34 | 1 << 43)
    want = (half_old.astype(np.float32) + result.astype(np.float16).astype(np.float32)).astype(np.float16)
    assert np.array_equal(half.view(np.uint16), want.view(np.uint16))

    ints = RNG.integers(-2**20, 2**20, mp * 48, dtype=np.int32)
    l0c.view(np.int32)[:mp * 48] = ints
    int_old = RNG.integers(-2**20, 2**20, (m, 64), dtype=np.int32)
    gm_int = int_old.copy()
    core.call("set_atomic_s32")
    core.call("copy_matrix_cc_to_gm", address(gm_int), 0, n << 4 | m << 16 | 64 << 32, mp | 1 << 43)
    assert np.array_equal(gm_int[:, :n], int_old[:, :n] + ints[(j // 16) * mp * 16 + i * 16 + j % 16])


# ---- the hazard checker's view ----------------------------------------------------------------------------------

def accesses() -> list[tuple[int, int, int, int]]:
    out = (ctypes.c_int64 * 64)()
    emu().pa_emu_last_accesses.argtypes = [ctypes.POINTER(ctypes.c_int64), ctypes.c_int32]
    count = emu().pa_emu_last_accesses(out, 16)
    return [tuple(out[4 * k: 4 * k + 4]) for k in range(count)]


def test_an_atomic_store_reports_a_gm_read_and_write_a_plain_one_only_the_write() -> None:
    core = vector()
    gm = RNG.standard_normal(64).astype(np.float32)
    core.buffer("UB", np.float32)[:32] = RNG.standard_normal(32)
    emu().pa_emu_record_accesses(1)
    try:
        core.call("set_atomic_none")
        ub_store(core, gm, 1, 128, 0, 4)
        assert [a for a in accesses() if a[0] == GM_SPACE] == [(GM_SPACE, address(gm), 128, 1)]
        core.call("set_atomic_f32")
        core.call("set_atomic_add")
        ub_store(core, gm, 1, 128, 0, 4)
        assert sorted(a for a in accesses() if a[0] == GM_SPACE) == [(GM_SPACE, address(gm), 128, 0),
                                                                     (GM_SPACE, address(gm), 128, 1)]
    finally:
        emu().pa_emu_record_accesses(0)


# ---- faults -----------------------------------------------------------------------------------------------------

def test_a_store_with_an_inherited_mode_faults_until_the_kernel_sets_it() -> None:
    """A core as a previous kernel left it (random mode, marked inherited): the first GM store faults on every
    seed, plain or atomic, until set_atomic_none; an operation set with an inherited type faults too."""
    gm = np.zeros(32, dtype=np.float32)
    for seed in range(4):
        core = vector(seed + 10)
        emu().pa_emu_randomise_mode_state.argtypes = [ctypes.c_uint64]
        assert emu().pa_emu_randomise_mode_state(seed) == 0
        with pytest.raises(EmuFaultError, match="store-atomic mode the previous kernel left"):
            ub_store(core, gm, 1, 128, 0, 4)
        core.call("set_atomic_add")
        with pytest.raises(EmuFaultError, match="element type the previous kernel left"):
            ub_store(core, gm, 1, 128, 0, 4)
        core.call("set_atomic_none")
        ub_store(core, gm, 1, 128, 0, 4)  # a plain store: fine


def test_what_the_pages_leave_open_faults() -> None:
    core = vector()
    core.buffer("UB", np.float32)[:64] = 1.0
    core.call("set_atomic_add")
    core.call("set_atomic_f16")
    with pytest.raises(EmuFaultError, match="does not match the store's 4-byte elements"):
        ub_store(core, np.zeros(32, np.float32), 1, 128, 0, 4)
    core.call("set_atomic_f32")
    poisoned = np.full(32, np.nan, dtype=np.float32)
    with pytest.raises(EmuFaultError, match="non-finite operand or result"):
        ub_store(core, poisoned, 1, 128, 0, 4)
    core.buffer("UB", np.float32)[:64] = 3e38
    with pytest.raises(EmuFaultError, match="non-finite operand or result"):
        ub_store(core, np.full(32, 3e38, np.float32), 1, 128, 0, 4)  # overflows to inf
    core.buffer("UB", np.int32)[:64] = 2**31 - 1
    core.call("set_atomic_s32")
    with pytest.raises(EmuFaultError, match="overflows"):
        ub_store(core, np.ones(32, np.int32), 1, 128, 0, 4)
    core.call("set_atomic_s8")
    with pytest.raises(EmuFaultError, match="s8 does not match"):
        ub_store(core, np.zeros(32, np.int32), 1, 128, 0, 4)

    cube = Core(CUBE)
    cube.call("set_nd_para", 1)
    cube.call("set_atomic_f32")
    cube.call("set_atomic_max")
    with pytest.raises(EmuFaultError, match="max on L0C -> GM: documented for UB -> GM only"):
        cube.call("copy_matrix_cc_to_gm", address(np.zeros(256, np.float32)), 0, 16 << 4 | 16 << 16 | 16 << 32,
                  16 | 1 << 43)
