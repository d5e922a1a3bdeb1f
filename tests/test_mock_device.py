"""The mock NPU device, driven through ctypes directly (no launcher): numerics against a float64 golden,
faithfulness of the scratch round trip, determinism, and every contract check with its error record.

Over 400 lines because the contract checks are one table of corrupted launches with their expected records,
driven by one set of ctypes helpers; split by topic, each file would repeat the helpers.
"""

from __future__ import annotations

import ctypes
import dataclasses
import math
import os
import signal
import threading
import time
from collections import defaultdict

import mock_harness as h
import numpy as np
import pytest
import torch

from accuracy.reference import compare
from launcher import mock_api
from tiling import abi

Slot = abi.ArgSlot
Word = abi.TilingWord
Field = abi.BatchField
Err = abi.ErrorCode
CHILD_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def lib() -> ctypes.CDLL:
    assert h.MOCK_LIBRARY.is_file(), f"{h.MOCK_LIBRARY} is not built: run `bash compile.sh`"
    return h.load_mock()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261122)


def assert_close(case: h.Case, out: np.ndarray) -> None:
    """Output against the golden by the project's one tolerance policy; empty sequences give zero rows."""
    result = compare(torch.from_numpy(h.from_bits(out, case.dtype)), h.golden(case))
    assert result.passed, result.summary()
    for b, n in enumerate(case.lens):
        if n == 0:
            assert not out[b].any(), f"empty sequence {b} must give an all-zero row"


# ---- exports --------------------------------------------------------------------------------------------

def test_exports(lib: ctypes.CDLL) -> None:
    assert lib.pa_abi_version() == abi.ABI_VERSION
    assert lib.pa_supported_keys() == abi.SUPPORTED_KEYS_ALL
    assert mock_api.struct_layout_matches(lib), (mock_api.python_layout(), mock_api.c_layout(lib))
    assert lib.call_kernel_noop(0, None, *([None] * abi.NUM_PTR_ARGS)) == 0
    assert lib.pa_mock_isa_available(mock_api.Isa.PORTABLE) == 1
    assert lib.pa_mock_isa_available(lib.pa_mock_best_isa()) == 1
    assert lib.pa_mock_isa_available(99) == 0


class ConfigWithoutIsa(ctypes.Structure):
    """``pa_mock_config`` as an out-of-date copy would declare it: the ``isa`` field is missing."""

    _fields_ = [field for field in mock_api.MockConfig._fields_ if field[0] != "isa"]


class ErrorWithWideSlot(ctypes.Structure):
    """``pa_mock_error`` with ``arg_slot`` declared 64 bits wide: every later field moves."""

    _fields_ = [(name, ctypes.c_int64 if name == "arg_slot" else kind) for name, kind in mock_api.MockError._fields_]


def test_layout_mirror_detects_a_wrong_struct(lib: ctypes.CDLL) -> None:
    """Negative control for the layout check: the checker the launcher runs refuses wrong mirrors."""
    assert mock_api.layout_mismatches(lib) == []
    missing = mock_api.layout_mismatches(lib, config=ConfigWithoutIsa)
    assert missing and "layout words" in missing[0]
    wide = mock_api.layout_mismatches(lib, error=ErrorWithWideSlot)
    assert any(problem.startswith("ErrorWithWideSlot.arg_slot") for problem in wide), wide


def test_read_bandwidth_is_positive(lib: ctypes.CDLL) -> None:
    assert lib.pa_mock_read_bandwidth_gbs(1 << 22, 1, 2) > 0.1


# ---- numerics -------------------------------------------------------------------------------------------

SHAPES = [
    # lens, Hq, Hkv, D, bs: ragged (0, 1, bs-1, bs+1, not multiples of 16), GQA / MQA / MHA, two-page tiles
    ([0, 1, 15, 17, 300, 129], 8, 2, 64, 16),
    ([1000, 77, 0, 128], 32, 8, 128, 128),
    ([2000, 3], 16, 1, 80, 64),
    ([511, 513], 4, 4, 96, 32),
]


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("strategy", ["bn", "split_kv"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"b{len(s[0])}-h{s[1]}/{s[2]}-d{s[3]}-bs{s[4]}")
def test_matches_golden(lib: ctypes.CDLL, rng: np.random.Generator, dtype: str, strategy: str, shape) -> None:
    lens, hq, hkv, d, bs = shape
    case = h.make_case(rng, lens, num_heads=hq, num_kv_heads=hkv, head_dim=d, block_size=bs, dtype=dtype,
                       strategy=strategy)
    assert case.plan.strategy == strategy
    run = h.launch(lib, case)
    assert run.code == 0, run.error.message
    assert_close(case, run.out)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_bn_tail_pass(lib: ctypes.CDLL, rng: np.random.Generator, dtype: str) -> None:
    """Ten ragged sequences: eight in the former pass, the two longest in a tail pass with 3-head tasks."""
    lens = [int(n) for n in rng.integers(0, 400, size=10)]
    lens[3] = 0
    case = h.make_case(rng, lens, num_heads=32, num_kv_heads=8, head_dim=64, block_size=16, dtype=dtype,
                       strategy="bn")
    assert case.plan.split.tail_batch == 2 and case.plan.split.tail_head == 3
    run = h.launch(lib, case)
    assert run.code == 0, run.error.message
    assert_close(case, run.out)


@pytest.mark.parametrize("strategy", ["bn", "split_kv"])
def test_long_context(lib: ctypes.CDLL, rng: np.random.Generator, strategy: str) -> None:
    """32K tokens: 256 tiles in one BN task, or the maximum split count of split-KV."""
    case = h.make_case(rng, [32768, 17, 0, 5000], num_heads=8, num_kv_heads=1, head_dim=128, block_size=128,
                       dtype="bf16", strategy=strategy)
    run = h.launch(lib, case)
    assert run.code == 0, run.error.message
    assert_close(case, run.out)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("strategy", ["bn", "split_kv"])
def test_split_block_keys(lib: ctypes.CDLL, rng: np.random.Generator, dtype: str, strategy: str) -> None:
    """D = 256 with 128-token pages: the tile is the page (split-block keys 128/129/144/145)."""
    case = h.make_case(rng, [300, 0, 129], num_heads=8, num_kv_heads=2, head_dim=256, block_size=128, dtype=dtype,
                       strategy=strategy)
    assert case.plan.key & abi.KEY_SPLIT_BLOCK_BIT
    assert bool(case.plan.key & abi.KEY_SPLIT_KV_BIT) == (strategy == "split_kv")
    run = h.launch(lib, case)
    assert run.code == 0, run.error.message
    assert_close(case, run.out)


def test_split_block_tile_smaller_than_page(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    """A 512-token page cut into 128-token tiles (bs * D beyond the tile limit)."""
    case = h.make_case(rng, [1100, 40], num_heads=4, num_kv_heads=1, head_dim=64, block_size=512)
    assert case.plan.key & abi.KEY_SPLIT_BLOCK_BIT and case.plan.tile_tokens < 512
    run = h.launch(lib, case)
    assert run.code == 0, run.error.message
    assert_close(case, run.out)


def test_all_empty_batch_gives_zero_rows(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    case = h.make_case(rng, [0, 0, 0], num_heads=4, num_kv_heads=2, head_dim=32, block_size=16)
    run = h.launch(lib, case)
    assert run.code == 0, run.error.message
    assert not run.out.any()


def test_golden_check_catches_a_wrong_scale(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    """Negative control for the tolerance: a 1 % wrong scale in the tiling must fail the comparison."""
    case = h.make_case(rng, [700, 90], num_heads=8, num_kv_heads=2, head_dim=64, block_size=64, value_scale=2.0)
    tiling = case.plan.tiling.copy()
    tiling[Word.TOR] = np.float32(case.scale * 1.01).view(np.uint32)
    run = h.launch(lib, case, tiling=tiling)
    assert run.code == 0
    with pytest.raises(AssertionError, match="max abs error"):
        assert_close(case, run.out)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("n", [2, 37])
def test_rounding_matches_torch_bit_for_bit(lib: ctypes.CDLL, rng: np.random.Generator, dtype: str, n: int) -> None:
    """Scale 0 makes every P exactly 1, so the output is (sum of V rows per 32-token tile, tiles added) / n in
    fp32, rounded once to the dtype: reproducible exactly with float32 numpy and torch's round-to-nearest-even."""
    case = h.make_case(rng, [n, n], num_heads=4, num_kv_heads=2, head_dim=64, block_size=16, dtype=dtype,
                       scale=0.0, strategy="bn")
    assert case.plan.tile_tokens == 32
    v = h.from_bits(case.v, dtype).astype(np.float32)
    want = np.zeros(case.q.shape, dtype=np.float32)
    for b in range(len(case.lens)):
        rows = v[case.block_table[b, : math.ceil(n / 16)]].reshape(-1, 2, 64)[:n]
        total = np.zeros((2, 64), dtype=np.float32)
        for start in range(0, n, 32):
            tile = np.zeros((2, 64), dtype=np.float32)
            for row in rows[start:start + 32]:
                tile = tile + row
            total = total + tile
        want[b] = np.repeat(total / np.float32(n), 2, axis=0)
    paths = [isa for isa in mock_api.EXACT_ISAS if lib.pa_mock_isa_available(isa)]
    for isa in paths:
        run = h.launch(lib, case, isa=isa)
        assert run.code == 0, run.error.message
        assert np.array_equal(run.out, h.to_bits(want, dtype)), mock_api.Isa(isa).name


# ---- faithfulness of the scratch round trip -------------------------------------------------------------

def test_scratch_holds_the_last_tile_at_kernel_strides(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    """One core, one task: S, P and O_tile of the last tile sit at block_idx 0, half (tiles-1)&1, row*round16."""
    hq, d, bs, n = 4, 32, 16, 40  # three 32-token tiles (2 pages each), the last one 8 tokens wide
    case = h.make_case(rng, [n], num_heads=hq, num_kv_heads=1, head_dim=d, block_size=bs)
    case.plan = h.plan_paged_attention([n], num_heads=hq, num_kv_heads=1, head_dim=d, block_size=bs,
                                       max_pages=case.block_table.shape[1], num_blocks=case.k.shape[0],
                                       scale=case.scale, core_count=1, strategy="bn")
    assert case.plan.block_dim == 1 and case.plan.split.former_head == hq and case.plan.tile_tokens == 2 * bs
    run = h.launch(lib, case)
    assert run.code == 0, run.error.message
    tiles = math.ceil(n / case.plan.tile_tokens)
    last = n - (tiles - 1) * case.plan.tile_tokens
    cols = -(-last // abi.TILE_ALIGN_TOKENS) * abi.TILE_ALIGN_TOKENS
    half = (tiles - 1) & 1
    s_half, p_half = abi.scratch_halves(case.plan.tiling)
    s = run.buffers[Slot.S][half * s_half:][: hq * cols].reshape(hq, cols)
    p = h.from_bits(run.buffers[Slot.P][half * p_half:][: hq * cols].reshape(hq, cols), "fp16")
    o_tile = run.buffers[Slot.O_TMP][half * abi.O_TMP_HALF_ELEMS:][: hq * d].reshape(hq, d)
    ids = case.block_table[0, : math.ceil(n / bs)]
    k = h.from_bits(case.k, "fp16")[ids].reshape(-1, d)[n - last:n]
    v = h.from_bits(case.v, "fp16")[ids].reshape(-1, d)[n - last:n]
    q = h.from_bits(case.q[0], "fp16")
    np.testing.assert_allclose(s[:, :last], q @ k.T, rtol=1e-5, atol=1e-4)
    assert (p[:, last:] == 0).all(), "P padding columns must be zero"
    assert ((p[:, :last] > 0) & (p[:, :last] <= 1)).all(), "P = exp(S*tor - running max) lies in (0, 1]"
    np.testing.assert_allclose(o_tile, p[:, :last] @ v, rtol=1e-5, atol=1e-5)
    other = run.buffers[Slot.S][(1 - half) * s_half:][: hq * 2 * bs]
    assert np.isfinite(other).all(), "the previous tile used the other half"


def test_cores_stay_in_their_scratch_regions(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    """Scratch one core larger than the plan, poisoned: the spare region stays untouched."""
    case = h.make_case(rng, [300, 200, 100, 50], num_heads=8, num_kv_heads=2, head_dim=64, block_size=32,
                       strategy="bn")  # a BN grid gives every launched core work
    buffers = h.workspace(case)
    s_half, p_half = abi.scratch_halves(case.plan.tiling)
    strides = {Slot.S: 2 * s_half, Slot.P: 2 * p_half, Slot.O_TMP: abi.O_TMP_CORE_STRIDE_ELEMS}
    poison = {}
    for slot, stride in strides.items():
        buffers[slot] = np.concatenate([buffers[slot], buffers[slot][:stride]])
        poison[slot] = buffers[slot][-stride:].copy()
    run = h.launch(lib, case, buffers=buffers)
    assert run.code == 0, run.error.message
    for slot, stride in strides.items():
        spare = buffers[slot][-stride:]
        assert np.array_equal(spare.view(np.uint8), poison[slot].view(np.uint8)), f"{slot.name} beyond block_dim"
        used = buffers[slot][: case.plan.block_dim * stride].reshape(case.plan.block_dim, stride)
        written = ~np.isnan(used) if used.dtype == np.float32 else used != h.FP16_NAN
        assert written.any(axis=1).all(), f"every launched core wrote its {slot.name} region"
    assert_close(case, run.out)


# ---- determinism ----------------------------------------------------------------------------------------

def test_bitwise_same_for_any_thread_count(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    for strategy in ("bn", "split_kv"):
        case = h.make_case(rng, [900, 33, 0, 400, 257], num_heads=16, num_kv_heads=4, head_dim=64, block_size=64,
                           dtype="bf16", strategy=strategy)
        outs = []
        for threads in (1, 2, 3, 0):
            run = h.launch(lib, case, threads=threads)
            assert run.code == 0, run.error.message
            outs.append(run.out.copy())
        assert all(np.array_equal(outs[0], o) for o in outs[1:]), strategy


def test_gangs_give_the_bits_of_cores_run_alone(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    """A host thread runs a sequence's head groups (or those of one KV split) together by default (gang_cores 0),
    reading each KV row once for all of them; on every path, exact or native (whose sums follow the call
    boundaries), the results are those of the logical cores run one at a time, whatever the gang."""
    paths = [isa for isa in mock_api.Isa if isa != mock_api.Isa.AUTO and lib.pa_mock_isa_available(isa)]
    batch = [700, 129, 0, 300, 65, 512, 33, 200]
    # (strategy, lengths, whether the plan has several head groups per sequence, several KV splits):
    # BN with head groups (consecutive gangs); split-KV with head groups (gangs of one split, kvCN cores apart);
    # split-KV with whole rows per task (gangs of one: only the order of the cores' tasks is in question)
    for strategy, lengths, groups, splits in (("bn", batch, True, False), ("split_kv", [4000], True, True),
                                              ("split_kv", batch, False, True)):
        case = h.make_case(rng, lengths, num_heads=32, num_kv_heads=8, head_dim=128, block_size=64, dtype="bf16",
                           value_scale=2.0, strategy=strategy)
        words = case.plan.tiling
        assert bool(words[Word.FORMER_BATCH] and words[Word.FORMER_HEAD] < case.num_heads) == groups, lengths
        assert (words[Word.KVCORENUM] > 1) == splits, lengths
        for isa in paths:
            alone = h.launch(lib, case, isa=isa, gang_cores=1)
            assert alone.code == 0, alone.error.message
            for gang in (2, 3, 4, 0):
                run = h.launch(lib, case, isa=isa, gang_cores=gang)
                assert run.code == 0, run.error.message
                assert np.array_equal(run.out, alone.out), (strategy, isa, gang)
                for slot in (Slot.O_TMP, Slot.O_CORE, Slot.L):  # fp32: where a changed sum order shows
                    assert np.array_equal(run.buffers[slot], alone.buffers[slot], equal_nan=True), (strategy, isa, slot)


def test_gang_cores_out_of_range_is_refused(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    case = h.make_case(rng, [100], num_heads=8, num_kv_heads=2, head_dim=64, block_size=16)
    for gang in (-1, 5):
        error = expect(h.launch(lib, case, gang_cores=gang), Err.BAD_LAUNCH)
        assert "gang_cores" in error.message.decode(), error.message


def test_bitwise_same_for_every_simd_path(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    """Large scores make P span fp16 subnormals and bf16's range; every path must agree bit for bit."""
    paths = [isa for isa in mock_api.EXACT_ISAS if lib.pa_mock_isa_available(isa)]
    for dtype in ("fp16", "bf16"):
        for d in (64, 48):
            case = h.make_case(rng, [333, 64, 5], num_heads=8, num_kv_heads=2, head_dim=d, block_size=16,
                               dtype=dtype, value_scale=3.0, strategy="split_kv")
            results = [h.launch(lib, case, isa=isa) for isa in paths]
            assert all(r.code == 0 for r in results)
            base = results[0]
            for r in results[1:]:
                assert np.array_equal(base.out, r.out), (dtype, d)
                assert np.array_equal(base.buffers[Slot.P], r.buffers[Slot.P]), (dtype, d)
                assert np.array_equal(base.buffers[Slot.L], r.buffers[Slot.L], equal_nan=True), (dtype, d)


def with_head_dim(rng: np.random.Generator, case: h.Case, d: int) -> h.Case:
    """The case re-made with a head_dim the planner refuses (not a multiple of 16), the plan's D-dependent
    words patched by hand so that only the head_dim itself breaks the contract."""
    old = case.head_dim
    assert case.plan.tile_tokens * old <= abi.TILE_ELEMS_LIMIT
    q = h.to_bits(rng.standard_normal((*case.q.shape[:2], d)) * 3.0, case.dtype)
    k = h.to_bits(rng.standard_normal((*case.k.shape[:3], d)) * 3.0, case.dtype)
    v = h.to_bits(rng.standard_normal((*case.v.shape[:3], d)), case.dtype)
    tiling = case.plan.tiling.copy()
    for word in (Word.HEADDIM, Word.HEADDIM_V, Word.HEADDIM_K_SPLIT, Word.HEADDIM_V_SPLIT,
                 Word.HEADDIM_V_SPLIT_VECTOR_FORMER, Word.HEADDIM_V_SPLIT_VECTOR_TAIL):
        tiling[word] = d
    for s in range(len(case.lens)):
        for hi, lo in ((Field.ADDR_Q_HI, Field.ADDR_Q_LO), (Field.ADDR_O_HI, Field.ADDR_O_LO),
                       (Field.ADDR_OFD_HI, Field.ADDR_OFD_LO)):
            set_pair(tiling, s, hi, lo, get_pair(tiling, s, hi, lo) // old * d)
    tiling.setflags(write=False)
    ws = case.plan.workspace
    plan = dataclasses.replace(case.plan, tiling=tiling, head_dim=d,
                               workspace=dataclasses.replace(ws, o_core_bytes=ws.o_core_bytes // old * d))
    return dataclasses.replace(case, head_dim=d, q=q, k=k, v=v, plan=plan)


def test_head_dim_not_a_multiple_of_16_is_refused(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    """The header's shape limits bind the mock as they bind the planner: an otherwise consistent D = 40 launch
    is a contract error naming the head_dim word."""
    for strategy in ("bn", "split_kv"):
        base = h.make_case(rng, [300, 0, 17], num_heads=4, num_kv_heads=2, head_dim=48, block_size=16,
                           strategy=strategy)
        case = with_head_dim(rng, base, 40)
        expect(h.launch(lib, case), Err.BAD_TILING, Slot.TILING, element_offset=Word.HEADDIM)


def test_host_flush_to_zero_does_not_change_results(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    """torch.set_flush_denormal(True) sets FTZ/DAZ on the calling thread; the device computes in the default
    environment anyway.  bf16 values of about 1e-39 are fp32 subnormals: they would all flush to zero.  (On an
    exact path: the native AVX512-BF16 path's dot products treat subnormal inputs as zero by design,
    tests/test_mock_native_paths.py.)"""
    import torch

    exact = max(isa for isa in mock_api.EXACT_ISAS if lib.pa_mock_isa_available(isa))
    case = h.make_case(rng, [100, 37], num_heads=4, num_kv_heads=2, head_dim=64, block_size=16, dtype="bf16",
                       strategy="bn")
    case.v = h.to_bits(h.from_bits(case.v, "bf16") * 1e-39, "bf16")
    want = h.launch(lib, case, threads=1, isa=exact).out.copy()
    assert np.count_nonzero(want) > want.size // 2, "the control needs non-zero subnormal outputs"
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU has no flush-to-zero mode")
    try:
        for threads in (1, 2):
            assert np.array_equal(h.launch(lib, case, threads=threads, isa=exact).out, want)
    finally:
        torch.set_flush_denormal(False)


def test_checked_and_unchecked_agree(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    case = h.make_case(rng, [650, 1, 129], num_heads=8, num_kv_heads=8, head_dim=128, block_size=128)
    a = h.launch(lib, case, checked=True)
    b = h.launch(lib, case, checked=False)
    assert a.code == b.code == 0
    assert np.array_equal(a.out, b.out)


def test_concurrent_launches_from_host_threads(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    """Runners on different host threads launch at the same time (ctypes drops the GIL): same results."""
    cases = [h.make_case(rng, [300 + 50 * i, 77], num_heads=8, num_kv_heads=2, head_dim=64, block_size=32,
                         strategy=("bn", "split_kv")[i % 2]) for i in range(4)]
    expected = [h.launch(lib, c, threads=1).out.copy() for c in cases]
    got: dict[int, list[np.ndarray]] = defaultdict(list)

    def worker(i: int) -> None:
        for _ in range(5):
            run = h.launch(lib, cases[i], threads=2)
            assert run.code == 0
            got[i].append(run.out.copy())

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(len(cases))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for i, want in enumerate(expected):
        assert len(got[i]) == 5 and all(np.array_equal(want, o) for o in got[i])


def test_launch_in_a_forked_child(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    """The helper-thread pool does not survive fork(); the child must re-create it instead of hanging."""
    case = h.make_case(rng, [200, 100], num_heads=4, num_kv_heads=2, head_dim=32, block_size=16, strategy="bn")
    parent = h.launch(lib, case, threads=2)
    assert parent.code == 0
    pid = os.fork()
    if pid == 0:  # child: exit status 0 only if the launch finishes with the parent's result
        try:
            child = h.launch(lib, case, threads=2)
            os._exit(0 if child.code == 0 and np.array_equal(child.out, parent.out) else 1)
        finally:
            os._exit(2)
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError("a launch in a forked child hung")


def test_binding_is_per_thread(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    """A thread that never called pa_mock_bind cannot launch, whatever other threads bound."""
    case = h.make_case(rng, [20], num_heads=2, num_kv_heads=1, head_dim=16, block_size=16)
    assert h.launch(lib, case).code == 0
    result: dict[str, object] = {}

    def unbound() -> None:
        ws = h.workspace(case)
        ptrs = [None] * abi.NUM_PTR_ARGS
        for slot, array in {Slot.Q: case.q, Slot.K: case.k, Slot.V: case.v, Slot.BLOCK_TABLES: case.block_table,
                            Slot.TILING: case.plan.tiling, **ws}.items():
            ptrs[slot] = array.ctypes.data if array.size else None
        result["code"] = lib.call_kernel(case.plan.block_dim, None, *ptrs)
        result["error"] = mock_api.last_error(lib)

    worker = threading.Thread(target=unbound)
    worker.start()
    worker.join()
    assert result["code"] == Err.BAD_LAUNCH
    assert b"pa_mock_bind" in result["error"].message


# ---- contract checks: negative controls ------------------------------------------------------------------

def expect(run: h.Launch, code: Err, slot: Slot | None = None, **fields: int) -> mock_api.MockError:
    e = run.error
    assert run.code == code, f"expected {code.name}, got {run.code}: {e.message.decode()}"
    assert e.code == code
    if slot is not None:
        assert e.arg_slot == slot, f"arg slot {e.arg_slot}, expected {slot.name}: {e.message.decode()}"
    for name, value in fields.items():
        assert getattr(e, name) == value, f"{name} = {getattr(e, name)}, expected {value}: {e.message.decode()}"
    return e


def set_pair(tiling: np.ndarray, slot: int, hi: Field, lo: Field, value: int) -> None:
    tiling[abi.batch_word(slot, hi)] = value >> 32
    tiling[abi.batch_word(slot, lo)] = value & 0xFFFFFFFF


def get_pair(tiling: np.ndarray, slot: int, hi: Field, lo: Field) -> int:
    return int(tiling[abi.batch_word(slot, hi)]) << 32 | int(tiling[abi.batch_word(slot, lo)])


@pytest.mark.parametrize(("hi", "lo"), [(Field.ADDR_Q_HI, Field.ADDR_Q_LO), (Field.ADDR_O_HI, Field.ADDR_O_LO)])
def test_byte_offsets_in_addr_q_and_o(lib: ctypes.CDLL, rng: np.random.Generator, hi: Field, lo: Field) -> None:
    """Offsets written in bytes instead of elements: slot 1 is the first whose offset leaves the layout."""
    case = h.make_case(rng, [100, 300, 50, 0, 210, 64], num_heads=8, num_kv_heads=2, head_dim=64, block_size=32)
    tiling = case.plan.tiling.copy()
    for s in range(len(case.lens)):
        set_pair(tiling, s, hi, lo, 2 * get_pair(tiling, s, hi, lo))
    for checked in (True, False):
        expect(h.launch(lib, case, tiling=tiling, checked=checked), Err.BAD_TILING, Slot.TILING,
               element_offset=abi.batch_word(1, hi), seq=1, core=-1)


@pytest.mark.parametrize(("hi", "lo", "strategy"), [
    (Field.ADDR_Q_HI, Field.ADDR_Q_LO, "bn"), (Field.ADDR_O_HI, Field.ADDR_O_LO, "bn"),
    (Field.ADDR_L_HI, Field.ADDR_L_LO, "split_kv"), (Field.ADDR_OFD_HI, Field.ADDR_OFD_LO, "split_kv"),
])
def test_offset_inside_the_buffer_at_the_wrong_place(lib: ctypes.CDLL, rng: np.random.Generator, hi: Field,
                                                      lo: Field, strategy: str) -> None:
    """A middle sequence pointed at the last sequence's rows stays inside every buffer, and would silently
    compute with (or overwrite) another sequence's data: the layout check refuses it in both modes."""
    case = h.make_case(rng, [300, 500, 200], num_heads=4, num_kv_heads=2, head_dim=32, block_size=32,
                       strategy=strategy)
    tiling = case.plan.tiling.copy()
    set_pair(tiling, 1, hi, lo, get_pair(tiling, 2, hi, lo))
    for checked in (True, False):
        expect(h.launch(lib, case, tiling=tiling, checked=checked), Err.BAD_TILING, Slot.TILING,
               element_offset=abi.batch_word(1, hi), seq=1)


def test_block_table_row_must_be_the_slot(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    case = h.make_case(rng, [300, 500], num_heads=4, num_kv_heads=2, head_dim=32, block_size=32)
    tiling = case.plan.tiling.copy()
    tiling[abi.batch_word(0, Field.BATCH_IDX)] = 1
    expect(h.launch(lib, case, tiling=tiling), Err.BAD_TILING, Slot.TILING,
           element_offset=abi.batch_word(0, Field.BATCH_IDX), seq=0)


def test_undersized_o_core(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    """o_core sized per core without the batch dimension (the upstream port's bug)."""
    case = h.make_case(rng, [4000, 3000, 2500], num_heads=8, num_kv_heads=2, head_dim=64, block_size=64,
                       strategy="split_kv")
    plan = case.plan
    assert plan.kv_core_num > 1
    too_small = plan.num_heads * plan.kv_core_num * plan.head_dim * 4
    for checked in (True, False):
        run = h.launch(lib, case, extents={Slot.O_CORE: too_small}, checked=checked)
        expect(run, Err.OUT_OF_BOUNDS, Slot.O_CORE, extent_elems=too_small // 4, element_offset=too_small // 4,
               core=-1)


def test_undersized_l(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    case = h.make_case(rng, [600, 900], num_heads=4, num_kv_heads=2, head_dim=32, block_size=32, strategy="split_kv")
    short = case.plan.workspace.l_bytes - 4
    expect(h.launch(lib, case, extents={Slot.L: short}), Err.OUT_OF_BOUNDS, Slot.L, extent_elems=short // 4)


@pytest.mark.parametrize("how", ["duplicate", "out_of_range"])
def test_bad_gather_map(lib: ctypes.CDLL, rng: np.random.Generator, how: str) -> None:
    case = h.make_case(rng, [10, 20, 30, 40], num_heads=2, num_kv_heads=1, head_dim=16, block_size=16)
    tiling = case.plan.tiling.copy()
    word = abi.batch_word(2, Field.GATHER)
    tiling[word] = tiling[abi.batch_word(0, Field.GATHER)] if how == "duplicate" else 4
    expect(h.launch(lib, case, tiling=tiling), Err.BAD_GATHER, Slot.TILING, element_offset=word, seq=2)


@pytest.mark.parametrize("checked", [False, True])
@pytest.mark.parametrize("bad_id", ["num_blocks", "negative"])
def test_bad_block_id(lib: ctypes.CDLL, rng: np.random.Generator, checked: bool, bad_id: str) -> None:
    case = h.make_case(rng, [100, 300, 50], num_heads=4, num_kv_heads=2, head_dim=32, block_size=32)
    case.block_table[1, 5] = case.k.shape[0] if bad_id == "num_blocks" else -7
    e = expect(h.launch(lib, case, checked=checked), Err.BAD_BLOCK_ID, Slot.BLOCK_TABLES,
               element_offset=1 * case.block_table.shape[1] + 5, seq=1)
    assert e.core >= 0


def test_junk_past_the_last_page_is_ignored(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    case = h.make_case(rng, [33, 64], num_heads=2, num_kv_heads=1, head_dim=16, block_size=32, spare_columns=3)
    case.block_table[0, 2:] = 2**31 - 1
    case.block_table[1, 2:] = -(2**31)
    run = h.launch(lib, case, checked=False)
    assert run.code == 0, run.error.message
    assert_close(case, run.out)


@pytest.mark.parametrize("key", [2, 32, 64, 130, 255, 0xFFFFFFFF])
def test_invalid_key(lib: ctypes.CDLL, rng: np.random.Generator, key: int) -> None:
    case = h.make_case(rng, [20], num_heads=2, num_kv_heads=1, head_dim=16, block_size=16)
    tiling = case.plan.tiling.copy()
    tiling[Word.KEY] = key
    expect(h.launch(lib, case, tiling=tiling), Err.BAD_KEY, Slot.TILING, element_offset=Word.KEY)


def test_key_decides_the_dtype(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    """fp16 data under a bf16 key is read as bf16: the result is wrong, not an error (dtype comes from the key)."""
    case = h.make_case(rng, [64], num_heads=2, num_kv_heads=1, head_dim=16, block_size=16, strategy="bn")
    assert case.plan.key == abi.TilingKey.FP16
    tiling = case.plan.tiling.copy()
    tiling[Word.KEY] = abi.TilingKey.BF16
    run = h.launch(lib, case, tiling=tiling)
    assert run.code == 0
    with pytest.raises(AssertionError):
        assert_close(case, run.out)


@pytest.mark.parametrize("slot", [Slot.Q, Slot.K, Slot.V, Slot.BLOCK_TABLES, Slot.O, Slot.S, Slot.P, Slot.O_TMP])
def test_null_pointer(lib: ctypes.CDLL, rng: np.random.Generator, slot: Slot) -> None:
    case = h.make_case(rng, [20], num_heads=2, num_kv_heads=1, head_dim=16, block_size=16)
    expect(h.launch(lib, case, pointers={slot: None}), Err.NULL_POINTER, slot)


def test_split_kv_needs_o_core_and_l(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    split = h.make_case(rng, [600], num_heads=2, num_kv_heads=1, head_dim=16, block_size=16, strategy="split_kv")
    assert split.plan.kv_core_num > 1
    expect(h.launch(lib, split, pointers={Slot.L: None}), Err.NULL_POINTER, Slot.L)
    bn = h.make_case(rng, [600], num_heads=2, num_kv_heads=1, head_dim=16, block_size=16, strategy="bn")
    assert h.launch(lib, bn, pointers={Slot.O_CORE: None, Slot.L: None}).code == 0


def test_mask_pointer_must_be_null(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    case = h.make_case(rng, [20], num_heads=2, num_kv_heads=1, head_dim=16, block_size=16)
    dummy = np.zeros(1, dtype=np.uint8)
    expect(h.launch(lib, case, pointers={Slot.MASK: dummy.ctypes.data}), Err.NULL_POINTER, Slot.MASK)


def _tiling_case(rng: np.random.Generator, strategy: str = "bn") -> h.Case:
    return h.make_case(rng, [300, 40, 0, 129], num_heads=8, num_kv_heads=2, head_dim=64, block_size=32,
                       strategy=strategy)


# (word, new value or function of the tiling, strategy) -> BAD_TILING naming that word
HEADER_CORRUPTIONS = {
    "headsize": (Word.HEADSIZE, 45, "bn"),
    "parasize": (Word.PARASIZE, 16, "bn"),
    "prefill_bs": (Word.PREFILL_BS, 1, "bn"),
    "mask_max_len": (Word.MASK_MAX_LEN, 128, "bn"),
    "scaletype": (Word.SCALETYPE, 2, "bn"),
    "batch": (Word.BATCH, 5, "bn"),
    "numblocks": (Word.NUMBLOCKS, lambda t: t[Word.NUMBLOCKS] + 1, "bn"),
    "kv_heads_not_dividing": (Word.KVHEADS, 3, "bn"),
    "groupnum": (Word.GROUPNUM, 2, "bn"),
    "dv": (Word.HEADDIM_V, 32, "bn"),
    "tor_nan": (Word.TOR, np.float32(np.nan).view(np.uint32), "bn"),
    "former_tail_sum": (Word.FORMER_BATCH, 3, "bn"),
    "head_split_over_limit": (Word.FORMER_HEAD, 9, "bn"),
    "group_move_straddles": (Word.FORMER_GROUP_MOVE, 3, "bn"),
    "tile_not_page_multiple": (Word.BLOCKSIZE_CALC, 16, "bn"),
    "tile_over_l1": (Word.BLOCKSIZE_CALC, 512, "bn"),
    "kvsplit_not_page_multiple": (Word.KVSPLIT, lambda t: t[Word.KVSPLIT] + 8, "split_kv"),
    "kvcn_inconsistent": (Word.KVCORENUM, lambda t: t[Word.KVCORENUM] + 1, "split_kv"),
    "kvcn_without_split_key": (Word.KVCORENUM, 2, "bn"),
    "kvcn_over_combine_limit": (Word.KVCORENUM, 200, "split_kv"),
    "tail_head_over_limit": (Word.TAIL_HEAD, lambda t: _tail_with_head(t, 9), "bn"),
    "headnum_move": (Word.HEADNUM_MOVE, 3, "bn"),
    "quantype": (Word.QUANTYPE, 1, "bn"),
    "head_dim_over_max": (Word.HEADDIM, abi.MAX_HEAD_DIM + 16, "bn"),
    "decoder_bs_zero": (Word.DECODER_BS, 0, "bn"),
}


def _tail_with_head(tiling: np.ndarray, heads: int) -> int:
    """A one-sequence tail pass; returns the TAIL_HEAD word to set."""
    tiling[Word.TAIL_BATCH] = _move_to_tail(tiling, 1)
    return heads


def _move_to_tail(tiling: np.ndarray, batches: int) -> int:
    """A consistent tail pass of ``batches`` sequences (returns the new TAIL_BATCH word)."""
    tiling[Word.FORMER_BATCH] -= batches
    tiling[Word.TAIL_HEAD] = tiling[Word.FORMER_HEAD]
    tiling[Word.TAIL_GROUP_MOVE] = tiling[Word.FORMER_GROUP_MOVE]
    return batches


@pytest.mark.parametrize("name", sorted(HEADER_CORRUPTIONS))
def test_corrupted_header_word(lib: ctypes.CDLL, rng: np.random.Generator, name: str) -> None:
    word, value, strategy = HEADER_CORRUPTIONS[name]
    case = _tiling_case(rng, strategy)
    tiling = case.plan.tiling.copy()
    tiling[word] = value(tiling) if callable(value) else value
    e = expect(h.launch(lib, case, tiling=tiling), Err.BAD_TILING, Slot.TILING, element_offset=word)
    assert e.message


def test_a_tail_slot_under_a_split_kv_key_keeps_no_partial_offset(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    """ABI v6: a split-KV launch may have a tail pass (whole sequences, written straight to o), and the partial
    offsets count the split slots only (a tail slot's are 0): a sequence moved into the tail with every slot's
    offsets left as they were is refused, naming the first slot whose l offset is now wrong."""
    case = _tiling_case(rng, "split_kv")
    tiling = case.plan.tiling.copy()
    tiling[Word.TAIL_BATCH] = _move_to_tail(tiling, 1)
    e = expect(h.launch(lib, case, tiling=tiling), Err.BAD_TILING, Slot.TILING)
    assert (e.element_offset - abi.TILING_HEADER_WORDS) % abi.TILING_BATCH_WORDS == Field.ADDR_L_HI
    assert b"l offset" in e.message


def test_split_block_tile_must_divide_the_page(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    case = h.make_case(rng, [300], num_heads=4, num_kv_heads=2, head_dim=256, block_size=128, strategy="bn")
    assert case.plan.key & abi.KEY_SPLIT_BLOCK_BIT
    tiling = case.plan.tiling.copy()
    tiling[Word.BLOCKSIZE_CALC] = 96
    expect(h.launch(lib, case, tiling=tiling), Err.BAD_TILING, Slot.TILING, element_offset=Word.BLOCKSIZE_CALC)


def test_l_offset_beyond_32_bits(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    """The kernel keeps the l offset in a uint32: an offset that would wrap is a tiling error."""
    case = h.make_case(rng, [600, 900], num_heads=4, num_kv_heads=2, head_dim=32, block_size=32, strategy="split_kv")
    tiling = case.plan.tiling.copy()
    set_pair(tiling, 1, Field.ADDR_L_HI, Field.ADDR_L_LO, 2**32 - 2)
    expect(h.launch(lib, case, tiling=tiling), Err.BAD_TILING, Slot.TILING,
           element_offset=abi.batch_word(1, Field.ADDR_L_HI), seq=1)


def test_tiling_pointer_and_header_extent(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    case = _tiling_case(rng)
    expect(h.launch(lib, case, pointers={Slot.TILING: None}), Err.NULL_POINTER, Slot.TILING)
    expect(h.launch(lib, case, extents={Slot.TILING: 4 * (abi.TILING_HEADER_WORDS - 1)}), Err.OUT_OF_BOUNDS,
           Slot.TILING, extent_elems=abi.TILING_HEADER_WORDS - 1)


def test_scratch_half_overflow(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    """32 heads x a 1024-token tile do not fit one S half (16384 floats), though the tile rule holds."""
    case = h.make_case(rng, [2048], num_heads=32, num_kv_heads=32, head_dim=16, block_size=512, strategy="bn")
    tiling = case.plan.tiling.copy()
    tiling[Word.FORMER_HEAD] = 32
    tiling[Word.FORMER_GROUP_MOVE] = 1
    tiling[Word.BLOCKSIZE_CALC] = 1024
    tiling[Word.SCORE_STAGE_ELEMS] = 32 * int(tiling[Word.HANDOFF_TOKENS])  # the stage holds 32 heads' hand-off
    expect(h.launch(lib, case, tiling=tiling), Err.BAD_TILING, Slot.TILING, element_offset=Word.BLOCKSIZE_CALC)


def test_context_longer_than_the_table_row(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    case = _tiling_case(rng)
    tiling = case.plan.tiling.copy()
    tiling[abi.batch_word(1, Field.KV_SEQLEN)] = case.block_table.shape[1] * case.block_size + 1
    expect(h.launch(lib, case, tiling=tiling), Err.BAD_TILING, Slot.TILING,
           element_offset=abi.batch_word(1, Field.KV_SEQLEN), seq=1)


def test_tiling_shorter_than_its_batch(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    case = _tiling_case(rng)
    words = abi.tiling_words(len(case.lens))
    expect(h.launch(lib, case, extents={Slot.TILING: (words - 1) * 4}), Err.OUT_OF_BOUNDS, Slot.TILING,
           extent_elems=words - 1)


@pytest.mark.parametrize("slot", [Slot.S, Slot.P, Slot.O_TMP])
def test_block_dim_beyond_scratch(lib: ctypes.CDLL, rng: np.random.Generator, slot: Slot) -> None:
    case = _tiling_case(rng)
    assert h.launch(lib, case, block_dim=case.plan.block_dim + 1).code == Err.BAD_LAUNCH
    short = {Slot.S: case.plan.workspace.s_bytes, Slot.P: case.plan.workspace.p_bytes,
             Slot.O_TMP: case.plan.workspace.o_tmp_bytes}[slot] - 4
    expect(h.launch(lib, case, extents={slot: short}), Err.BAD_LAUNCH, slot)


def test_block_dim_zero(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    expect(h.launch(lib, _tiling_case(rng), block_dim=0), Err.BAD_LAUNCH)


def test_fewer_cores_than_planned_is_still_correct(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    """Round-robin task loops need no particular block_dim: 5 cores run a 24-core plan's tasks."""
    case = _tiling_case(rng, "split_kv")
    run = h.launch(lib, case, block_dim=5)
    assert run.code == 0, run.error.message
    assert_close(case, run.out)


@pytest.mark.parametrize("slot", [Slot.Q, Slot.K, Slot.V, Slot.O])
def test_undersized_input_extent(lib: ctypes.CDLL, rng: np.random.Generator, slot: Slot) -> None:
    """One element short: refused before any core runs, in both modes, whether or not the launch reaches it."""
    case = _tiling_case(rng)
    nbytes = {Slot.Q: case.q.nbytes, Slot.K: case.k.nbytes, Slot.V: case.v.nbytes, Slot.O: case.q.nbytes}[slot]
    for checked in (True, False):
        expect(h.launch(lib, case, extents={slot: nbytes - 2}, checked=checked), Err.OUT_OF_BOUNDS, slot,
               extent_elems=nbytes // 2 - 1, element_offset=nbytes // 2 - 1, core=-1)


def test_unavailable_simd_path_is_refused(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    expect(h.launch(lib, _tiling_case(rng), isa=99), Err.BAD_LAUNCH)


def test_num_blocks_must_be_bound(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    expect(h.launch(lib, _tiling_case(rng), num_blocks=0), Err.BAD_LAUNCH)


FUZZ_TRIALS = 400
FUZZ_VALUES = (0, 1, 2, 7, 16, 17, 44, 127, 128, 1000, 2**16, 2**31 - 1, 2**31, 2**32 - 1)


def test_corrupted_tilings_never_fault(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    """Checked mode is memory-safe whatever the tiling says: one to three random words of a valid tiling are
    overwritten per trial; every launch returns PA_OK or an error code.  Runs in a forked child so that a
    fault fails this test (with the trial) instead of killing the run."""
    cases = [_tiling_case(rng, "bn"), _tiling_case(rng, "split_kv")]
    pid = os.fork()
    if pid == 0:
        status = 0
        try:
            for trial in range(FUZZ_TRIALS):
                case = cases[trial % 2]
                tiling = case.plan.tiling.copy()
                for _ in range(int(rng.integers(1, 4))):
                    word = int(rng.integers(0, tiling.size))
                    tiling[word] = FUZZ_VALUES[int(rng.integers(0, len(FUZZ_VALUES)))] if rng.random() < 0.7 \
                        else int(rng.integers(0, 2**32))
                code = h.launch(lib, case, tiling=tiling).code
                if code not in {int(c) for c in Err}:
                    status = 3
                    break
        finally:
            os._exit(status)
    _, wait_status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(wait_status) == 0, f"child exit {os.waitstatus_to_exitcode(wait_status)}"


def test_errors_are_deterministic(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    """An error found while cores run (bad block ids in several sequences): the lowest failing core's record."""
    case = h.make_case(rng, [700, 900, 1200, 300], num_heads=8, num_kv_heads=2, head_dim=64, block_size=64,
                       strategy="split_kv")
    for seq in (1, 2, 3):
        case.block_table[seq, 3] = -1
    records = []
    for threads in (1, 2, 4, 1, 2):
        run = h.launch(lib, case, threads=threads)
        assert run.code == Err.BAD_BLOCK_ID
        e = run.error
        records.append((e.arg_slot, e.element_offset, e.core, e.seq, e.head, e.split, e.message))
    assert len(set(records)) == 1, records
