"""Accuracy suite: paged-attention decode against an independent float64 golden, on any backend.

Run it with pytest (``python -m pytest test_pa_accuracy.py [--backend mock|sim|npu] [-m slow]``) or as a
script (``python test_pa_accuracy.py [--backend mock|sim|npu] [--slow]``), which prints a summary table.

* **Golden**: a dense gather of each sequence's pages through the block table, then softmax attention in
  float64, one (sequence, KV head) at a time so that long contexts fit in memory.  It shares no code with
  the planner or the kernels.
* **Inputs**: fresh random values per case (seeded from the case name), never zeros; block tables are
  shuffled over more pages than needed, with junk (-1, huge ids) in the entries past each sequence's end;
  the output and the whole workspace are poisoned with NaN before every launch, so an unwritten row or a
  read-before-write shows up.
* **Tolerances**: one (atol, rtol) per dtype, twice the error of torch's own low-precision attention; see
  ``TOLERANCES`` and ``test_tolerances_are_twice_torch_low_precision_error``.
* **Negative controls**: corrupted tilings (byte instead of element offsets, undersized ``o_core``, a bad
  gather map, a bad key, a bad block id) must raise ``KernelContractError``; the comparison itself must flag
  a wrong output.
"""

from __future__ import annotations

import os

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

import argparse
import dataclasses
import math
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from launcher import KernelContractError, PagedAttentionRunner, paged_attention
from launcher.backends import Backend, MockBackend, SimBackend
from tiling import abi

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}

# Tolerance: |out - golden| <= atol + rtol * |golden|, elementwise.
# Justification (measured with torch 2.13 on CPU, fixed seeds, 8 q heads x head_dim 64/128/256 x context
# 2..4096 tokens, standard-normal q/k/v): torch's own attention computed in the low precision
# (softmax(q @ k.T * scale) @ v with every tensor fp16 or bf16) against this file's float64 golden reaches
#   fp16: max abs error 1.25e-3, and at most 0.89 x (1e-3 + 2e-3 |golden|);
#   bf16: max abs error 7.3e-3,  and at most 0.82 x (8e-3 + 1.6e-2 |golden|).
# The kernels round the same quantities (P to the input dtype before P.V, the output once), so we allow
# twice torch's error, as flash-attention's tests do.  test_tolerances_are_twice_torch_low_precision_error
# re-measures this and fails if the table drifts from "about 2x".
TOLERANCES: dict[str, tuple[float, float]] = {"fp16": (2e-3, 4e-3), "bf16": (1.6e-2, 3.2e-2)}
#: Entries written past each sequence's last page: never read by the kernel, rejected if it did.
JUNK_IDS = (-1, 2**31 - 1, -(2**31), 1 << 30)


@dataclass(frozen=True)
class Case:
    """One accuracy case.  ``spare_pages`` more pages than needed exist in the cache (shuffled ids);
    ``shared_pool`` pages are drawn with repetition from a pool of that size instead (big batch x long
    context in little memory)."""

    name: str
    lens: tuple[int, ...]
    num_heads: int
    num_kv_heads: int
    head_dim: int
    block_size: int
    dtype: str = "fp16"
    strategy: str = "auto"
    spare_pages: int = 7
    extra_columns: int = 3
    shared_pool: int = 0
    core_count: int | None = None
    slow: bool = False

    @property
    def seed(self) -> int:
        return zlib.crc32(self.name.encode())

    @property
    def ratio(self) -> int:
        return self.num_heads // self.num_kv_heads

    def describe(self) -> str:
        return (f"b{len(self.lens)} h{self.num_heads}/{self.num_kv_heads} d{self.head_dim} bs{self.block_size} "
                f"{self.dtype} max_kv {max(self.lens)}")


def _edge(bs: int, *more: int) -> tuple[int, ...]:
    """Lengths at the page edges (1, bs-1, bs+1, empty) plus ``more``."""
    return (1, bs - 1, bs + 1, 0, *more)


# Pairwise coverage: every ratio (1..64 and MQA), head_dim, block_size, dtype and strategy appears, each
# value with several partners; test_case_table_covers_the_required_values keeps it that way.
CASES: tuple[Case, ...] = (
    Case("mha_d128_bs128", _edge(128, 300), 8, 8, 128, 128, "fp16"),
    Case("gqa2_d64_bs16_splitkv", _edge(16, 100, 1000), 16, 8, 64, 16, "bf16", "split_kv"),
    Case("gqa4_d96_bs32_bn", _edge(32, 500), 16, 4, 96, 32, "fp16", "bn"),
    Case("gqa5_d128_bs64", _edge(64, 1000), 10, 2, 128, 64, "bf16"),
    Case("gqa8_d256_bs128_splitkv", _edge(128, 2000), 32, 4, 256, 128, "fp16", "split_kv"),
    Case("gqa16_d64_bs256_bn", _edge(256, 3000), 32, 2, 64, 256, "bf16", "bn"),
    Case("gqa32_d128_bs512", _edge(512, 2500), 64, 2, 128, 512, "fp16"),
    Case("gqa64_d96_bs16_splitkv", _edge(16, 200), 128, 2, 96, 16, "bf16", "split_kv"),
    Case("mqa_d256_bs32", _edge(32, 777), 8, 1, 256, 32, "bf16"),
    Case("mqa64_d64_bs512_splitkv", _edge(512, 1500), 64, 1, 64, 512, "fp16", "split_kv"),
    Case("mha_d96_bs256_splitkv", _edge(256, 900), 4, 4, 96, 256, "bf16", "split_kv"),
    Case("gqa2_d256_bs512_bn", _edge(512, 1100), 4, 2, 256, 512, "fp16", "bn"),
    Case("gqa4_d256_bs64", _edge(64, 640), 8, 2, 256, 64, "bf16"),
    Case("gqa8_d64_bs32_bn", _edge(32, 2049), 32, 4, 64, 32, "bf16", "bn"),
    Case("gqa16_d96_bs128_splitkv", _edge(128, 1700), 16, 1, 96, 128, "fp16", "split_kv"),
    Case("gqa32_d256_bs16", _edge(16, 333), 32, 1, 256, 16, "bf16"),
    Case("gqa5_d64_bs512_splitkv", _edge(512, 1025), 20, 4, 64, 512, "bf16", "split_kv"),
    Case("gqa64_d128_bs64_bn", _edge(64, 700), 64, 1, 128, 64, "fp16", "bn"),
    Case("mha_d64_bs16_many_seqs", tuple(range(0, 80, 3)), 4, 4, 64, 16, "fp16", core_count=7),
    Case("single_token_batch", (1,) * 40, 16, 2, 128, 128, "bf16"),
    Case("all_empty", (0, 0, 0), 8, 2, 128, 64, "fp16"),
    Case("all_empty_splitkv", (0, 0), 8, 2, 64, 16, "bf16", "split_kv"),
    Case("long16k_splitkv", (16_390, 3, 0), 8, 1, 128, 128, "fp16"),
    Case("long16k_bn_bf16", (16_400, 16_383), 8, 2, 64, 64, "bf16", "bn"),
    # Long-sequence split-KV just under ATB's batch guard: o_core must hold B x Hq x kvCN x D.
    Case("splitkv_guard_b16_kv8k", tuple(8192 - 37 * i for i in range(16)), 32, 8, 128, 128, "fp16",
         shared_pool=96),
    # The upstream o_core overflow shape (b32 h32/8 kv 8192): ATB's batch guard makes it BN here.
    Case("upstream_overflow_b32_kv8k", tuple(8192 - 5 * i for i in range(32)), 32, 8, 128, 128, "fp16",
         shared_pool=96),
    Case("upstream_overflow_b256_mqa", tuple(8192 - i for i in range(256)), 16, 1, 128, 128, "bf16",
         shared_pool=96, slow=True),
    Case("long32k_splitkv_d256", (32_768, 20_001), 16, 2, 256, 128, "bf16", "split_kv", slow=True),
)


# ---- inputs and golden ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Inputs:
    query: torch.Tensor
    key_cache: torch.Tensor
    value_cache: torch.Tensor
    block_table: torch.Tensor
    lens: tuple[int, ...]


def make_inputs(case: Case) -> Inputs:
    """Random q/k/v (standard normal) and a shuffled, junk-padded block table, on the CPU."""
    gen = torch.Generator().manual_seed(case.seed)
    dtype = DTYPES[case.dtype]
    pages = [-(-n // case.block_size) for n in case.lens]
    max_pages = max(1, max(pages)) + case.extra_columns
    if case.shared_pool:
        num_blocks = case.shared_pool
        rows = [torch.randint(0, num_blocks, (n,), generator=gen) for n in pages]
    else:
        num_blocks = sum(pages) + case.spare_pages
        ids = torch.randperm(num_blocks, generator=gen)
        starts = np.cumsum([0, *pages])
        rows = [ids[starts[i]:starts[i + 1]] for i in range(len(pages))]
    table = torch.empty(len(case.lens), max_pages, dtype=torch.int32)
    for seq, row in enumerate(rows):
        junk = torch.tensor([JUNK_IDS[(seq + j) % len(JUNK_IDS)] for j in range(max_pages - row.numel())],
                            dtype=torch.int32)
        table[seq] = torch.cat([row.to(torch.int32), junk])
    cache = (num_blocks, case.block_size, case.num_kv_heads, case.head_dim)
    return Inputs(
        query=torch.randn(len(case.lens), case.num_heads, case.head_dim, generator=gen).to(dtype),
        key_cache=torch.randn(cache, generator=gen).to(dtype),
        value_cache=torch.randn(cache, generator=gen).to(dtype),
        block_table=table, lens=case.lens,
    )


def golden(inputs: Inputs, scale: float) -> torch.Tensor:
    """float64 attention, gathering each sequence's pages densely, one (sequence, KV head) at a time."""
    batch, num_heads, head_dim = inputs.query.shape
    _, block_size, num_kv_heads, _ = inputs.key_cache.shape
    group = num_heads // num_kv_heads
    out = torch.zeros(batch, num_heads, head_dim, dtype=torch.float64)
    for seq, length in enumerate(inputs.lens):
        if length == 0:
            continue
        pages = inputs.block_table[seq, :-(-length // block_size)].long()
        keys = inputs.key_cache[pages].reshape(-1, num_kv_heads, head_dim)[:length]
        values = inputs.value_cache[pages].reshape(-1, num_kv_heads, head_dim)[:length]
        for kv_head in range(num_kv_heads):
            heads = slice(kv_head * group, (kv_head + 1) * group)
            q = inputs.query[seq, heads].double()
            scores = q @ keys[:, kv_head].double().T * scale
            out[seq, heads] = torch.softmax(scores, dim=-1) @ values[:, kv_head].double()
    return out


@dataclass(frozen=True)
class Comparison:
    max_abs_error: float
    worst_index: tuple[int, int, int]
    tolerance_there: float
    worst_ratio: float
    passed: bool

    def summary(self) -> str:
        return (f"max abs error {self.max_abs_error:.3e} at [seq, head, dim] = {list(self.worst_index)}, "
                f"tolerance there {self.tolerance_there:.3e}, worst error/tolerance {self.worst_ratio:.3f}")


def compare(out: torch.Tensor, reference: torch.Tensor, dtype: str) -> Comparison:
    """Elementwise check against ``atol + rtol * |golden|``; NaN/inf anywhere fails."""
    atol, rtol = TOLERANCES[dtype]
    error = (out.detach().cpu().double() - reference).abs()
    error = torch.where(torch.isfinite(error), error, torch.full_like(error, math.inf))
    tolerance = atol + rtol * reference.abs()
    ratio = error / tolerance
    flat = int(torch.argmax(error).item()) if error.numel() else 0
    index = tuple(int(i) for i in np.unravel_index(flat, tuple(error.shape))) if error.numel() else (0, 0, 0)
    worst_ratio = float(ratio.max().item()) if ratio.numel() else 0.0
    return Comparison(
        max_abs_error=float(error.max().item()) if error.numel() else 0.0,
        worst_index=index,  # type: ignore[arg-type]
        tolerance_there=float(tolerance[index].item()) if error.numel() else atol,
        worst_ratio=worst_ratio, passed=worst_ratio <= 1.0,
    )


# ---- running a case ------------------------------------------------------------------------------------
def make_backend(name: str, num_threads: int = 0) -> Backend | str:
    if name == "mock":
        return MockBackend(num_threads=num_threads)
    if name == "sim":
        return SimBackend(num_threads=num_threads)
    return name


def device_of(backend_name: str) -> str:
    return "npu" if backend_name == "npu" else "cpu"


def build_runner(case: Case, inputs: Inputs, backend: Backend | str, device: str,
                 **options: object) -> PagedAttentionRunner:
    return PagedAttentionRunner(
        inputs.query.to(device), inputs.key_cache.to(device), inputs.value_cache.to(device),
        inputs.block_table.to(device), list(inputs.lens), backend=backend, strategy=case.strategy,
        core_count=case.core_count, **options,  # type: ignore[arg-type]
    )


def poison(runner: PagedAttentionRunner) -> None:
    """NaN in the output and in every workspace buffer: reads-before-write and unwritten rows show up."""
    runner.out.fill_(math.nan)
    for buffer in runner.workspace.values():
        buffer.fill_(math.nan)


def launch_poisoned(runner: PagedAttentionRunner) -> torch.Tensor:
    poison(runner)
    return runner().cpu()


@dataclass(frozen=True)
class Outcome:
    case: Case
    plan: str
    comparison: Comparison


def run_case(case: Case, backend_name: str, num_threads: int = 0) -> Outcome:
    inputs = make_inputs(case)
    runner = build_runner(case, inputs, make_backend(backend_name, num_threads), device_of(backend_name))
    out = launch_poisoned(runner)
    plan = runner.plan
    described = f"{plan.strategy} key {int(plan.key)} bd {plan.block_dim} kvCN {plan.kv_core_num}"
    return Outcome(case, described, compare(out, golden(inputs, runner.scale), case.dtype))


# ---- pytest ----------------------------------------------------------------------------------------------
def _param(case: Case) -> object:
    return pytest.param(case, id=case.name, marks=[pytest.mark.slow] if case.slow else [])


@pytest.fixture
def mock_like(backend_name: str) -> str:
    """Cases that need the mock protocol (error records, thread count) run on mock or sim only."""
    if backend_name == "npu":
        pytest.skip("needs the mock protocol (mock or sim backend)")
    return backend_name


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_accuracy(case: Case, backend_name: str) -> None:
    outcome = run_case(case, backend_name)
    assert outcome.comparison.passed, f"{case.describe()} ({outcome.plan}): {outcome.comparison.summary()}"


THREAD_CASES = [c for c in CASES if c.name in ("gqa8_d256_bs128_splitkv", "gqa5_d128_bs64", "long16k_splitkv")]


@pytest.mark.parametrize("case", THREAD_CASES, ids=[c.name for c in THREAD_CASES])
def test_bitwise_identical_across_thread_counts(case: Case, mock_like: str) -> None:
    inputs = make_inputs(case)
    outs = []
    for threads in (1, 2):
        runner = build_runner(case, inputs, make_backend(mock_like, threads), "cpu")
        outs.append(launch_poisoned(runner))
    assert torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16)), "1 and 2 threads differ in bits"


def test_decode_steps_with_update(backend_name: str) -> None:
    """A decode loop: lengths grow by one token per step (crossing page edges), new pages are appended to
    the table, ``update`` re-plans; every step matches the golden and workspace that fits is reused."""
    case = Case("decode_loop", (15, 16, 0, 47, 200), 16, 4, 128, 16, "fp16", spare_pages=40)
    inputs = make_inputs(case)
    device = device_of(backend_name)
    runner = build_runner(case, inputs, make_backend(backend_name), device)
    table = inputs.block_table.clone()
    free = sorted(set(range(inputs.key_cache.shape[0])) - {int(i) for i in table.flatten() if i >= 0})
    lens = list(case.lens)
    storage_before = {slot: t.untyped_storage().data_ptr() for slot, t in runner.workspace.items()}
    for step in range(4):
        if step:
            for seq in range(len(lens)):
                lens[seq] += 1
                if (lens[seq] - 1) % case.block_size == 0:
                    table[seq, (lens[seq] - 1) // case.block_size] = free.pop()
            runner.update(lens, table.to(device))
        stepped = dataclasses.replace(inputs, block_table=table.clone(), lens=tuple(lens))
        result = compare(launch_poisoned(runner), golden(stepped, runner.scale), case.dtype)
        assert result.passed, f"step {step} lens {lens}: {result.summary()}"
        assert runner.plan.context_lens == tuple(lens)
    for slot, pointer in storage_before.items():
        if slot in runner.workspace and runner.plan.block_dim <= 24:
            assert runner.workspace[slot].untyped_storage().data_ptr() == pointer, f"{slot.name} reallocated"


def test_update_grows_workspace_only_when_needed(mock_like: str) -> None:
    """A step that needs more workspace grows exactly the slots that no longer fit; a step that fits
    (here: back to short sequences) reallocates nothing."""
    case = Case("grow", (10, 20), 8, 2, 64, 16, "fp16", strategy="split_kv", spare_pages=400, extra_columns=200)
    inputs = make_inputs(case)
    runner = build_runner(case, inputs, make_backend(mock_like), "cpu")

    def storage() -> dict[abi.ArgSlot, tuple[int, int]]:
        return {slot: (t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
                for slot, t in runner.workspace.items()}

    first = storage()
    table = inputs.block_table.clone()
    pages = 3000 // case.block_size + 1
    table[:, :pages] = torch.randperm(inputs.key_cache.shape[0])[:2 * pages].view(2, -1).to(torch.int32)
    runner.update([1000, 3000], table)
    assert runner.plan.workspace.o_core_bytes > first[abi.ArgSlot.O_CORE][1]
    second = storage()
    for slot, (pointer, capacity) in first.items():
        needed = runner.plan.workspace.by_slot()[slot]
        assert (second[slot][0] == pointer) == (needed <= capacity), f"{slot.name}: {needed} B vs {capacity} B"
        assert runner.workspace[slot].numel() * runner.workspace[slot].element_size() == needed
    result = compare(launch_poisoned(runner), golden(dataclasses.replace(inputs, block_table=table,
                                                                       lens=(1000, 3000)), runner.scale), "fp16")
    assert result.passed, result.summary()
    runner.update([10, 20], table)
    assert {slot: pointer for slot, (pointer, _) in storage().items()} == {
        slot: pointer for slot, (pointer, _) in second.items() if slot in runner.workspace}


def test_out_argument_and_functional_api(backend_name: str) -> None:
    case = CASES[0]
    inputs = make_inputs(case)
    device = device_of(backend_name)
    args = (inputs.query.to(device), inputs.key_cache.to(device), inputs.value_cache.to(device),
            inputs.block_table.to(device))
    out = torch.full_like(args[0], math.nan)
    runner = PagedAttentionRunner(*args, torch.tensor(case.lens, dtype=torch.int32), out=out,
                                  backend=make_backend(backend_name))
    assert runner() is out
    fresh = paged_attention(*args, list(case.lens), backend=make_backend(backend_name))
    assert fresh.data_ptr() != out.data_ptr() and fresh.shape == out.shape
    assert torch.equal(fresh.cpu(), out.cpu())
    assert compare(fresh, golden(inputs, 1 / math.sqrt(case.head_dim)), case.dtype).passed


def test_noop_runs_no_kernel(mock_like: str) -> None:
    """``noop`` is the launch overhead alone: same cached arguments, output untouched."""
    case = CASES[0]
    runner = build_runner(case, make_inputs(case), make_backend(mock_like), "cpu")
    poison(runner)
    runner.noop()
    assert torch.isnan(runner.out).all()
    assert not torch.isnan(runner()).any()


# ---- negative controls: the device must reject a broken contract ----------------------------------------
def _replan(runner: PagedAttentionRunner, edit: Callable[[np.ndarray], None] | None = None,
            **workspace: int) -> None:
    words = runner.plan.tiling.copy()
    if edit is not None:
        edit(words)
    sizes = dataclasses.replace(runner.plan.workspace, **workspace)
    runner.install_plan(dataclasses.replace(runner.plan, tiling=words, workspace=sizes))


def _split_kv_runner(backend_name: str, **options: object) -> PagedAttentionRunner:
    case = Case("negative", (300, 0, 1000, 17), 8, 2, 128, 64, "fp16", "split_kv")
    runner = build_runner(case, make_inputs(case), make_backend(backend_name), "cpu", **options)
    assert runner.plan.kv_core_num > 1
    runner()  # the uncorrupted plan runs cleanly
    return runner


def _raise_contract(runner: PagedAttentionRunner) -> KernelContractError:
    poison(runner)
    with pytest.raises(KernelContractError) as raised:
        runner()
    return raised.value


def test_negative_byte_offsets_for_q(mock_like: str) -> None:
    runner = _split_kv_runner(mock_like)
    elem = runner.query.element_size()

    def to_bytes(words: np.ndarray) -> None:
        for slot in range(runner.plan.batch):
            lo = abi.batch_word(slot, abi.BatchField.ADDR_Q_LO)
            words[lo] = words[lo] * elem

    _replan(runner, to_bytes)
    error = _raise_contract(runner)
    assert error.code == abi.ErrorCode.OUT_OF_BOUNDS and error.buffer == "q", str(error)
    assert error.extent == runner.query.numel() and error.element_offset >= error.extent  # type: ignore[operator]


def test_negative_undersized_o_core(mock_like: str) -> None:
    runner = _split_kv_runner(mock_like)
    plan = runner.plan
    per_sequence = plan.num_heads * plan.kv_core_num * plan.head_dim * 4  # upstream: no batch dimension
    _replan(runner, o_core_bytes=per_sequence)
    error = _raise_contract(runner)
    assert error.code == abi.ErrorCode.OUT_OF_BOUNDS and error.buffer == "o_core", str(error)
    assert error.seq is not None and error.seq > 0


def test_negative_bad_gather_map(mock_like: str) -> None:
    runner = _split_kv_runner(mock_like)

    def duplicate(words: np.ndarray) -> None:
        words[abi.batch_word(1, abi.BatchField.GATHER)] = words[abi.batch_word(0, abi.BatchField.GATHER)]

    _replan(runner, duplicate)
    assert _raise_contract(runner).code == abi.ErrorCode.BAD_GATHER


def test_negative_bad_key(mock_like: str) -> None:
    runner = _split_kv_runner(mock_like)

    def bad_key(words: np.ndarray) -> None:
        words[abi.TilingWord.KEY] = 99

    _replan(runner, bad_key)
    assert _raise_contract(runner).code == abi.ErrorCode.BAD_KEY


@pytest.mark.parametrize("checked", [True, False])
def test_negative_bad_block_id_even_unchecked(mock_like: str, checked: bool) -> None:
    runner = _split_kv_runner(mock_like, checked=checked)
    runner.block_table[2, 3] = 10**6  # behind validation's back: a page sequence 2 uses
    error = _raise_contract(runner)
    assert error.code == abi.ErrorCode.BAD_BLOCK_ID, str(error)


def test_negative_comparison_flags_wrong_output() -> None:
    case = CASES[0]
    inputs = make_inputs(case)
    reference = golden(inputs, 1 / math.sqrt(case.head_dim))
    assert compare(reference.to(torch.float16), reference, "fp16").passed
    wrong = reference.clone()
    wrong[4, 3, 17] += 10 * (TOLERANCES["fp16"][0] + TOLERANCES["fp16"][1] * abs(float(reference[4, 3, 17])))
    result = compare(wrong, reference, "fp16")
    assert not result.passed and result.worst_index == (4, 3, 17)
    swapped = dataclasses.replace(inputs, block_table=inputs.block_table[[1, 0, 2, 3, 4]])
    assert not compare(golden(swapped, 1 / math.sqrt(case.head_dim)), reference, "fp16").passed
    unwritten = reference.clone()
    unwritten[3] = math.nan  # an empty sequence's row left unwritten
    assert not compare(unwritten, reference, "fp16").passed


# ---- the case table and the tolerance table --------------------------------------------------------------
def test_case_table_covers_the_required_values() -> None:
    ratios = {c.ratio for c in CASES}
    assert {1, 2, 4, 5, 8, 16, 32, 64} <= ratios and any(c.num_kv_heads == 1 for c in CASES)
    assert {64, 96, 128, 256} <= {c.head_dim for c in CASES}
    assert {16, 32, 64, 128, 256, 512} <= {c.block_size for c in CASES}
    assert {"fp16", "bf16"} == {c.dtype for c in CASES}
    assert {"auto", "bn", "split_kv"} == {c.strategy for c in CASES}
    for bs in (16, 32, 64, 128, 256, 512):
        lengths = {n for c in CASES if c.block_size == bs for n in c.lens}
        assert {0, 1, bs - 1, bs + 1} <= lengths, f"block_size {bs} lacks an edge length"
    assert any(n >= 16_384 for c in CASES if not c.slow for n in c.lens)
    assert len({c.name for c in CASES}) == len(CASES)


def _torch_low_precision_ratio(dtype: str) -> float:
    """Worst ``|torch low-precision attention - golden| / tolerance`` over the shapes the comment cites."""
    atol, rtol = TOLERANCES[dtype]
    worst = 0.0
    for head_dim in (64, 128, 256):
        for length in (2, 3, 5, 17, 129, 1000, 4096):
            for seed in range(4):
                gen = torch.Generator().manual_seed(seed)
                q, k, v = (torch.randn(n, head_dim, generator=gen).to(DTYPES[dtype]) for n in (8, length, length))
                scale = 1 / math.sqrt(head_dim)
                reference = torch.softmax(q.double() @ k.double().T * scale, -1) @ v.double()
                low = torch.softmax(q @ k.T * scale, -1) @ v
                ratio = (low.double() - reference).abs() / (atol + rtol * reference.abs())
                worst = max(worst, float(ratio.max()))
    return worst


@pytest.mark.parametrize("dtype", sorted(TOLERANCES))
def test_tolerances_are_twice_torch_low_precision_error(dtype: str) -> None:
    ratio = _torch_low_precision_ratio(dtype)
    assert 0.3 <= ratio <= 0.5, f"torch's own {dtype} error is {ratio:.2f} x the tolerance; expected about 0.45"


# ---- script ----------------------------------------------------------------------------------------------
def _default_backend() -> str:
    from conftest import npu_unavailable_reason

    return "npu" if npu_unavailable_reason() is None else "mock"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("mock", "sim", "npu"), default=None,
                        help="default: npu if a usable NPU is present, else mock")
    parser.add_argument("--slow", action="store_true", help="also run the long cases")
    parser.add_argument("-k", dest="keyword", default="", help="only cases whose name contains this")
    args = parser.parse_args(argv)
    from tabulate import tabulate

    backend = args.backend or _default_backend()
    rows, failures = [], 0
    for case in CASES:
        if (case.slow and not args.slow) or args.keyword not in case.name:
            continue
        outcome = run_case(case, backend)
        c = outcome.comparison
        failures += not c.passed
        rows.append([case.name, case.describe(), outcome.plan, f"{c.max_abs_error:.2e}", list(c.worst_index),
                     f"{c.tolerance_there:.2e}", f"{c.worst_ratio:.2f}", "pass" if c.passed else "FAIL"])
        print(f"{case.name}: {'pass' if c.passed else 'FAIL'}", file=sys.stderr, flush=True)
    print(f"backend: {backend}; tolerance = atol + rtol |golden|: "
          + ", ".join(f"{d} ({a:g}, {r:g})" for d, (a, r) in TOLERANCES.items()))
    print(tabulate(rows, headers=["case", "shape", "plan", "max abs err", "at [seq, head, dim]", "tol there",
                                  "err/tol", "result"], tablefmt="github"))
    print(f"{len(rows) - failures}/{len(rows)} cases passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
