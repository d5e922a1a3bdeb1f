"""``PagedAttentionRunner.run``: one plan per decode step, one launch per layer on that layer's tensors.

Checked: every layer's output equals a fresh runner's on the same tensors (same bits) and the float64 golden;
``runner()`` still launches on the bound tensors afterwards; nothing is re-planned or reallocated; every bad
argument raises before any launch (a counting wrapper sees zero launches and the poisoned output stays NaN).
Every test runs twice: with run()'s compiled checks (``launcher/run_check``, when built) and with its Python
checks alone; the compiled check itself answers "look again" on every bad call and touches nothing then.
"""

from __future__ import annotations

import math
import os
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from accuracy.harness import Inputs, golden, shuffled_block_table
from accuracy.reference import compare
from launcher import PagedAttentionRunner, run_check
from launcher.runner import FIRST_POINTER_ARG
from tiling import abi

LAYERS = 3
#: the loader itself, before the check_path fixture replaces it for the Python-checks runs
LOAD_RUN_CHECK = run_check.load
HEADS, KV_HEADS, HEAD_DIM, BLOCK = 8, 2, 64, 16


def _layer(seed: int, lens: tuple[int, ...], table: torch.Tensor, num_blocks: int,
           dtype: torch.dtype = torch.bfloat16) -> Inputs:
    gen = torch.Generator().manual_seed(seed)
    cache = (num_blocks, BLOCK, KV_HEADS, HEAD_DIM)
    return Inputs(query=torch.randn(len(lens), HEADS, HEAD_DIM, generator=gen).to(dtype),
                  key_cache=torch.randn(cache, generator=gen).to(dtype),
                  value_cache=torch.randn(cache, generator=gen).to(dtype), block_table=table, lens=lens)


def _table(lens: tuple[int, ...], num_blocks: int, seed: int = 0) -> torch.Tensor:
    pages = [-(-n // BLOCK) for n in lens]
    return shuffled_block_table(pages, num_blocks, torch.Generator().manual_seed(seed), max(pages) + 1)


#: every test runs on both of run()'s check paths (conftest.py's check_path)
pytestmark = pytest.mark.usefixtures("check_path")


@pytest.fixture
def layers() -> Iterator[list[Inputs]]:
    lens = (100, 1, 0, 333)
    num_blocks = sum(-(-n // BLOCK) for n in lens) + 9
    table = _table(lens, num_blocks)
    yield [_layer(10 + i, lens, table, num_blocks) for i in range(LAYERS)]


def _runner(inputs: Inputs, **options: object) -> PagedAttentionRunner:
    return PagedAttentionRunner(inputs.query, inputs.key_cache, inputs.value_cache, inputs.block_table,
                                list(inputs.lens), **options)  # type: ignore[arg-type]


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.view(torch.int16)


@pytest.mark.parametrize("strategy", ["auto", "split_kv", "bn"])
def test_run_per_layer_matches_a_fresh_runner_and_the_golden(layers: list[Inputs], strategy: str) -> None:
    runner = _runner(layers[0], strategy=strategy)
    plan, workspace = runner.plan, {slot: t.data_ptr() for slot, t in runner.workspace.items()}
    outs = [torch.full_like(layer.query, math.nan) for layer in layers]
    for layer, out in zip(layers, outs, strict=True):
        for buffer in runner.workspace.values():
            buffer.fill_(math.nan)
        assert runner.run(layer.query, layer.key_cache, layer.value_cache, out=out) is out
    for layer, out in zip(layers, outs, strict=True):
        fresh = _runner(layer, strategy=strategy)()
        assert torch.equal(_bits(out), _bits(fresh))
        check = compare(out, golden(layer, HEAD_DIM ** -0.5))
        assert check.passed, check.summary()
    assert runner.plan is plan  # never re-planned
    assert {slot: t.data_ptr() for slot, t in runner.workspace.items()} == workspace  # never reallocated
    # runner() still launches on the bound tensors (layer 0), not on the last run's.
    assert torch.equal(_bits(runner()), _bits(outs[0]))


def test_run_without_out_writes_the_runner_output(layers: list[Inputs]) -> None:
    runner = _runner(layers[0])
    runner.out.fill_(math.nan)
    result = runner.run(layers[1].query, layers[1].key_cache, layers[1].value_cache)
    assert result is runner.out
    assert torch.equal(_bits(result), _bits(_runner(layers[1])()))


def test_decode_loop_update_then_run_per_layer(layers: list[Inputs]) -> None:
    """Plan per step, run per layer: after update() each layer sees the new lengths."""
    runner = _runner(layers[0])
    longer = tuple(n + 1 if n else 0 for n in layers[0].lens)
    runner.update(list(longer))
    for layer in layers:
        grown = Inputs(layer.query, layer.key_cache, layer.value_cache, layer.block_table, longer)
        out = runner.run(layer.query, layer.key_cache, layer.value_cache, out=torch.empty_like(layer.query))
        assert compare(out, golden(grown, HEAD_DIM ** -0.5)).passed


def test_batch_invariant_runner_runs_layers(layers: list[Inputs]) -> None:
    runner = _runner(layers[0], batch_invariant=True)
    out = runner.run(layers[2].query, layers[2].key_cache, layers[2].value_cache, out=torch.empty_like(layers[2].query))
    assert torch.equal(_bits(out), _bits(_runner(layers[2], batch_invariant=True)()))


# ---- bad arguments: an error before any launch ----------------------------------------------------------


def _bad_calls(layer: Inputs, runner: PagedAttentionRunner) -> list[tuple[str, dict[str, object], type, str]]:
    q, k, v = layer.query, layer.key_cache, layer.value_cache
    return [
        ("query not a tensor", dict(query=q.tolist()), TypeError, "query must be a torch.Tensor"),
        ("query shape", dict(query=q[:, :4].contiguous()), ValueError, "query shape must be the planned"),
        ("key shape", dict(key_cache=k[:-1].contiguous()), ValueError, "key_cache shape"),
        ("value dtype", dict(value_cache=v.half()), TypeError, "value_cache dtype"),
        ("query dtype", dict(query=q.float()), TypeError, "query dtype"),
        ("non-contiguous key", dict(key_cache=k.transpose(1, 2).contiguous().transpose(1, 2)), ValueError,
         "contiguous"),
        ("meta value", dict(value_cache=torch.empty(v.shape, dtype=v.dtype, device="meta")), ValueError,
         "device|NULL"),
        ("out shape", dict(out=torch.empty(1, HEADS, HEAD_DIM, dtype=q.dtype)), ValueError, "out shape"),
        ("out dtype", dict(out=torch.empty(q.shape, dtype=torch.float16)), TypeError, "out dtype"),
        ("out is the query", dict(out=q), ValueError, "share memory with query"),
        ("out inside the key cache", dict(out=k.view(-1)[:q.numel()].view(q.shape)), ValueError,
         "share memory with key_cache"),
        ("out inside the value cache", dict(out=v.view(-1)[64:64 + q.numel()].view(q.shape)), ValueError,
         "share memory with value_cache"),
    ]


def test_bad_arguments_raise_before_any_launch(layers: list[Inputs]) -> None:
    runner = _runner(layers[0], strategy="split_kv")
    launches = []
    real = runner._run_launch
    runner._run_launch = lambda: (launches.append(1), real())[1]  # type: ignore[method-assign]
    layer = layers[1]
    for what, change, error, message in _bad_calls(layer, runner):
        args: dict[str, object] = {"query": layer.query, "key_cache": layer.key_cache,
                                   "value_cache": layer.value_cache, **change}
        runner.out.fill_(math.nan)
        with pytest.raises(error, match=message):
            runner.run(**args)  # type: ignore[arg-type]
        assert not launches, f"{what}: launched"
        assert torch.isnan(runner.out.float()).all(), f"{what}: output written"
    runner.run(layer.query, layer.key_cache, layer.value_cache)  # positive control: the wrapper counts
    assert launches == [1]


def test_out_over_the_block_table_is_refused(layers: list[Inputs]) -> None:
    """The kernel reads the runner's own copy of the block table: an ``out`` over it would be a race."""
    layer = layers[0]
    q = layer.query
    pages = -(-q.numel() * q.element_size() // (4 * q.shape[0]))  # the runner's table holds at least q's bytes
    runner = PagedAttentionRunner(q, layer.key_cache, layer.value_cache, layer.block_table, list(layer.lens),
                                  max_pages_per_seq=max(pages, layer.block_table.shape[1]))
    table = runner.block_table
    before = table.clone()
    out = table.view(-1).view(q.dtype)[:q.numel()].view(q.shape)
    with pytest.raises(ValueError, match="share memory with block_table"):
        runner.run(q, layer.key_cache, layer.value_cache, out=out)
    assert torch.equal(table, before)  # nothing written


def test_run_passes_the_new_pointers_and_zeroes_empty_rows_for_an_external_kernel(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """On the npu backend (a fake torch_npu, CPU tensors standing in) with an external ATB-ABI library:
    run() hands the kernel the new tensors and zeroes the empty sequences' rows of the given ``out``."""
    import test_npu_backend as npu

    library = npu._build(tmp_path, "libexternal.so", ours=False)
    monkeypatch.setitem(sys.modules, "torch_npu", types.ModuleType("torch_npu"))
    monkeypatch.setattr(torch, "npu", npu.FakeNpu(), raising=False)
    query, key, value, table, lens = npu.inputs([100, 0, 7])
    runner = PagedAttentionRunner(query, key, value, table, lens, backend=npu.CpuStandInNpuBackend(library))
    assert runner.library.external
    q2, k2, v2 = query.clone(), key.clone(), value.clone()
    out = torch.full_like(query, math.nan)
    runner.run(q2, k2, v2, out=out)
    recorded = npu.handle(library)
    slots = {abi.ArgSlot.Q: q2, abi.ArgSlot.K: k2, abi.ArgSlot.V: v2, abi.ArgSlot.O: out,
             abi.ArgSlot.BLOCK_TABLES: runner.block_table}  # the runner's copy
    for slot, tensor in slots.items():
        assert recorded.fake_ptr(int(slot)) == tensor.data_ptr(), slot.name
    assert bool((out[1] == 0).all()) and bool(torch.isnan(out[0]).all())  # the fake kernel writes nothing


# ---- the compiled check itself ------------------------------------------------------------------------


def test_compiled_check_is_built_where_required(check_path: str) -> None:
    if os.environ.get("PA_KIT_REQUIRE_RUN_CHECK") == "1":
        assert LOAD_RUN_CHECK() is not None, "PA_KIT_REQUIRE_RUN_CHECK=1 but launcher/run_check is not built"


def test_compiled_check_says_look_again_on_every_bad_call(layers: list[Inputs], check_path: str) -> None:
    """Negative controls: each bad call gets False and leaves the argument list alone; a good one gets True
    and the four pointers.  A subclass of torch.Tensor is also "look again" (the Python checks decide)."""
    module = run_check.load()
    if module is None:
        pytest.skip("the Python-checks run of this test has nothing to check")
    runner = _runner(layers[0])
    layer = layers[1]
    check, expect = module.check, runner._fast_expect
    assert runner._fast is module

    class Sub(torch.Tensor):
        pass

    bad = [(what, change) for what, change, _, _ in _bad_calls(layer, runner)]
    bad.append(("query subclass", dict(query=layer.query.as_subclass(Sub))))
    for what, change in bad:
        call: dict[str, object] = {"query": layer.query, "key_cache": layer.key_cache,
                                   "value_cache": layer.value_cache, "out": runner.out, **change}
        before = list(runner._run_args)
        assert check(expect, call["query"], call["key_cache"], call["value_cache"], call["out"],
                     runner._run_args) is False, what
        assert runner._run_args == before, f"{what}: argument list touched"
    out = torch.empty_like(layer.query)
    assert check(expect, layer.query, layer.key_cache, layer.value_cache, out, runner._run_args) is True
    got = [runner._run_args[FIRST_POINTER_ARG + slot] for slot in
           (abi.ArgSlot.Q, abi.ArgSlot.K, abi.ArgSlot.V, abi.ArgSlot.O)]
    assert got == [layer.query.data_ptr(), layer.key_cache.data_ptr(), layer.value_cache.data_ptr(), out.data_ptr()]
