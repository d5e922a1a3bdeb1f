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
* **Tolerances**: per case, twice the error torch's own attention in the input dtype makes on that case
  (flash-attention's rule, :mod:`accuracy.reference`), so long contexts are judged as fairly as short ones.
* **Negative controls**: corrupted tilings (byte instead of element offsets, undersized ``o_core``, a bad
  gather map, a bad key, a bad block id) must raise ``KernelContractError``; the comparison itself must flag
  a wrong output, and the tolerance's basis (torch's error in the inputs' dtype, recomputed here without the
  policy's code) must be refused when measured in float32 or inflated.
"""

from __future__ import annotations

import os

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

import argparse
import dataclasses
import math
import sys
from collections.abc import Callable

import numpy as np
import pytest
import torch

from accuracy import reference as policy
from accuracy.cases import CASES, MLA_CASES, Case
from accuracy.harness import (
    Inputs,
    build_runner,
    compare,
    device_of,
    golden,
    launch_poisoned,
    make_backend,
    make_inputs,
    poison,
    run_case,
    skip_reason,
)
from launcher import KernelContractError, PagedAttentionRunner, paged_attention
from tiling import abi


# ---- pytest ----------------------------------------------------------------------------------------------
def _param(case: Case) -> object:
    return pytest.param(case, id=case.name, marks=[pytest.mark.slow] if case.slow else [])


@pytest.fixture
def mock_like(backend_name: str) -> str:
    """Cases that need the mock protocol (error records, thread count) run on mock or sim only."""
    if backend_name == "npu":
        pytest.skip("needs the mock protocol (mock or sim backend)")
    return backend_name


@pytest.mark.parametrize("case", [_param(c) for c in CASES + MLA_CASES])
def test_accuracy(case: Case, backend_name: str) -> None:
    reason = skip_reason(case, backend_name)
    if reason:
        pytest.skip(reason)
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
        result = compare(launch_poisoned(runner), golden(stepped, runner.scale))
        assert result.passed, f"step {step} lens {lens}: {result.summary()}"
        assert runner.plan.context_lens == tuple(lens)
    for slot, pointer in storage_before.items():
        if slot in runner.workspace and runner.plan.block_dim <= 24:
            assert runner.workspace[slot].untyped_storage().data_ptr() == pointer, f"{slot.name} reallocated"


def test_update_never_reallocates_workspace(mock_like: str) -> None:
    """The workspace is allocated once for the runner's capacity: a step with a larger plan (longer
    sequences, more partials) and a step back to short sequences reuse the same storage, and each plan's
    views are exactly its sizes."""
    case = Case("grow", (10, 20), 8, 2, 64, 16, "fp16", strategy="split_kv", spare_pages=400, extra_columns=200)
    inputs = make_inputs(case)
    runner = build_runner(case, inputs, make_backend(mock_like), "cpu")

    def storage() -> dict[abi.ArgSlot, int]:
        return {slot: t.untyped_storage().data_ptr() for slot, t in runner.workspace.items()}

    first = storage()
    first_o_core = runner.plan.workspace.o_core_bytes
    table = inputs.block_table.clone()
    pages = 3000 // case.block_size + 1
    table[:, :pages] = torch.randperm(inputs.key_cache.shape[0])[:2 * pages].view(2, -1).to(torch.int32)
    runner.update([1000, 3000], table)
    assert runner.plan.workspace.o_core_bytes > first_o_core  # a larger plan than the first step's
    assert storage() == first
    for slot, tensor in runner.workspace.items():
        assert tensor.numel() * tensor.element_size() == runner.plan.workspace.by_slot()[slot]
    result = compare(launch_poisoned(runner), golden(dataclasses.replace(inputs, block_table=table,
                                                                       lens=(1000, 3000)), runner.scale))
    assert result.passed, result.summary()
    runner.update([10, 20], table)
    assert storage() == first


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
    assert compare(fresh, golden(inputs, 1 / math.sqrt(case.head_dim))).passed


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
    assert error.code == abi.ErrorCode.BAD_TILING and error.buffer == "tiling", str(error)
    assert error.seq == 1 and error.element_offset == abi.batch_word(1, abi.BatchField.ADDR_Q_HI), str(error)


def test_negative_undersized_o_core(mock_like: str) -> None:
    runner = _split_kv_runner(mock_like)
    plan = runner.plan
    per_sequence = plan.num_heads * plan.kv_core_num * plan.head_dim * 4  # upstream: no batch dimension
    _replan(runner, o_core_bytes=per_sequence)
    error = _raise_contract(runner)
    assert error.code == abi.ErrorCode.OUT_OF_BOUNDS and error.buffer == "o_core", str(error)
    assert error.extent == per_sequence // 4 and error.core is None, str(error)  # refused before any core runs


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
    ref = golden(inputs, 1 / math.sqrt(case.head_dim))
    assert ref.torch_error > 0 and compare(ref.golden.to(torch.float16), ref).passed
    wrong = ref.golden.clone()
    wrong[4, 3, 17] += 1.5 * ref.allowed_error
    result = compare(wrong, ref)
    assert not result.passed and result.worst_index == (4, 3, 17)
    swapped = dataclasses.replace(inputs, block_table=inputs.block_table[[1, 0, 2, 3, 4]])
    assert not compare(golden(swapped, 1 / math.sqrt(case.head_dim)).golden, ref).passed
    unwritten = ref.golden.clone()
    unwritten[3] = math.nan  # an empty sequence's row left unwritten
    assert not compare(unwritten, ref).passed


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
    assert any(n >= 32_768 for c in CASES if not c.slow for n in c.lens)
    assert len({c.name for c in CASES}) == len(CASES)


def test_the_script_reports_a_kernel_error_as_that_cases_failure_and_goes_on(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    names = [c.name for c in CASES if not c.slow][:2]
    failing, real_run_case = names[0], run_case

    def run_or_fail(case: Case, backend: str) -> object:
        if case.name == failing:
            raise KernelContractError(abi.ErrorCode.BAD_BLOCK_ID, message="block id 99 outside [0, 9)")
        return real_run_case(case, backend)

    module = sys.modules[__name__]
    monkeypatch.setattr(module, "run_case", run_or_fail)
    monkeypatch.setattr(module, "CASES", [c for c in CASES if c.name in names])
    monkeypatch.setattr(module, "MLA_CASES", [])
    assert main(["--backend", "mock"]) == 1
    out = capsys.readouterr().out
    assert "1/2 cases passed" in out, out
    assert f"kernel error {failing}:" in out and "block id 99" in out, out
    assert f"| {names[1]}" in out and "pass" in out, out


def test_tolerance_follows_the_case() -> None:
    """The point of a per-case tolerance: torch's own error depends on the case (here it shrinks with the
    softmax length, as a long average of unit normals is small), so a 32K context gets the budget of a 32K
    context, not a 2K context's several times looser one."""
    allowed = {}
    for length in (2048, 32768):
        case = Case(f"ctx{length}", (length,), 8, 1, 128, 128, "bf16")
        allowed[length] = golden(make_inputs(case), 1 / math.sqrt(case.head_dim)).allowed_error
    assert max(allowed.values()) > 2 * min(allowed.values()), allowed


#: How far torch's error as the policy measured it may sit from the same attention recomputed here (they are the
#: same operations in the same dtype, so in practice equal; a policy measuring in float32 is ~1000x off).
BASIS_SLACK = 1.5


def dense_low_precision(inputs: Inputs, scale: float) -> torch.Tensor:
    """The tolerance's basis recomputed without :mod:`accuracy.reference`: each sequence's keys and values gathered
    densely, then per query head scores, softmax and P·V with every tensor in the inputs' dtype (float64 out)."""
    q, keys, values = inputs.query, inputs.key_cache, inputs.value_cache
    dtype, block_size, num_kv_heads = q.dtype, keys.shape[1], keys.shape[2]
    group = q.shape[1] // num_kv_heads
    out = torch.zeros(*q.shape[:2], values.shape[-1], dtype=torch.float64)
    for seq, length in enumerate(inputs.lens):
        pages = inputs.block_table[seq, :-(-length // block_size)].long()
        k = keys[pages].reshape(-1, num_kv_heads, keys.shape[-1])[:length].to(dtype)
        v = values[pages].reshape(-1, num_kv_heads, values.shape[-1])[:length].to(dtype)
        for head in range(q.shape[1] if length else 0):
            scores = (q[seq, head].to(dtype) @ k[:, head // group].T) * scale
            out[seq, head] = (torch.softmax(scores, dim=-1) @ v[:, head // group]).double()
    return out


def tolerance_basis_failure(inputs: Inputs, ref: policy.Reference, scale: float) -> str | None:
    """Why ``ref``'s torch error is not the error of attention in the inputs' dtype, or None.  The tolerance is
    only as good as that number: measured in a wider dtype it fails honest kernels, inflated it passes anything."""
    independent = float((dense_low_precision(inputs, scale) - ref.golden).abs().max())
    if not independent / BASIS_SLACK <= ref.torch_error <= independent * BASIS_SLACK:
        return (f"the policy's torch error {ref.torch_error:.3e} is not the {inputs.query.dtype} attention's error "
                f"{independent:.3e} (within x{BASIS_SLACK})")
    return None


def test_policy_is_flash_attentions_rule() -> None:
    """Twice torch's error in the inputs' dtype plus a floor far below one ulp: that error recomputed here
    (not by the policy's own code) matches the policy's, and 2.5 x it fails."""
    case = CASES[1]
    inputs = make_inputs(case)
    ref = golden(inputs, 1 / math.sqrt(case.head_dim))
    assert ref.allowed_error == policy.ERROR_FACTOR * ref.torch_error + policy.ERROR_FLOOR
    assert torch.finfo(torch.float16).eps / 100 > policy.ERROR_FLOOR
    failure = tolerance_basis_failure(inputs, ref, 1 / math.sqrt(case.head_dim))
    assert failure is None, failure
    assert compare(dense_low_precision(inputs, 1 / math.sqrt(case.head_dim)), ref).passed
    too_far = ref.golden + 2.5 * ref.torch_error
    assert not compare(too_far, ref).passed


def test_negative_tolerance_basis_measured_wrong() -> None:
    """Negative control for the check above: a torch error measured in float32 (a tolerance too tight for any
    fp16/bf16 kernel) or inflated tenfold (one no wrong output could exceed) is refused."""
    case = CASES[1]
    inputs = make_inputs(case)
    scale = 1 / math.sqrt(case.head_dim)
    ref = golden(inputs, scale)
    wide = policy.attention(inputs.query, inputs.key_cache, inputs.value_cache, inputs.block_table, inputs.lens,
                            scale, torch.float32)
    in_float32 = dataclasses.replace(ref, torch_error=float((wide.double() - ref.golden).abs().max()))
    assert tolerance_basis_failure(inputs, in_float32, scale) is not None
    assert tolerance_basis_failure(inputs, dataclasses.replace(ref, torch_error=10 * ref.torch_error),
                                   scale) is not None


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
    skipped: list[str] = []
    errors: list[str] = []
    for case in CASES + MLA_CASES:
        if (case.slow and not args.slow) or args.keyword not in case.name:
            continue
        reason = skip_reason(case, backend)
        if reason:
            skipped.append(f"{case.name}: {reason}")
            continue
        try:
            outcome = run_case(case, backend)
        except KernelContractError as error:  # that case's failure, like a wrong result: go on to the next
            failures += 1
            rows.append([case.name, case.describe(), "-", "-", "-", "-", "-", "FAIL"])
            errors.append(f"{case.name}: {error}")
            print(f"{case.name}: FAIL ({type(error).__name__})", file=sys.stderr, flush=True)
            continue
        c = outcome.comparison
        failures += not c.passed
        rows.append([case.name, case.describe(), outcome.plan, f"{c.max_abs_error:.2e}", list(c.worst_index),
                     f"{c.allowed_error:.2e}", f"{c.worst_ratio:.2f}", "pass" if c.passed else "FAIL"])
        print(f"{case.name}: {'pass' if c.passed else 'FAIL'}", file=sys.stderr, flush=True)
    print(f"backend: {backend}; allowed error per case = {policy.ERROR_FACTOR:g} x torch's low-precision error "
          f"on that case + {policy.ERROR_FLOOR:g}")
    print(tabulate(rows, headers=["case", "shape", "plan", "max abs err", "at [seq, head, dim]", "allowed",
                                  "err/tol", "result"], tablefmt="github"))
    print(f"{len(rows) - failures}/{len(rows)} cases passed" + (f"; {len(skipped)} skipped" if skipped else ""))
    for line in skipped:
        print(f"  skipped {line}")
    for line in errors:
        print(f"  kernel error {line}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
