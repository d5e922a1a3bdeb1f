"""What an engine's decode loop, written from the docs, hits first (issue 40): each friction's fix, for the GQA
runner and the MLA runner alike.

1. a shape error of ``run`` suggests ``runner.update()`` only when the batch size is what differs;
2. a strided block table (a column slice of the engine's persistent ``[max_batch, max_pages]`` table) is taken
   where pa-kit copies it, and a view of the runner's own table is refused unless it addresses that table as
   the kernel does (in place, at its origin);
3. context lengths as a torch int64 tensor (``torch.tensor([...])``'s default) are taken like int32 ones;
4. a second ``run`` of one step into the runner's default output warns that it overwrote the first's result.

Every result is checked against the float64 golden; every refusal raises before a launch.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import pytest
import torch

from accuracy.cases import DEEPSEEK_V3_SCALE
from accuracy.harness import shuffled_block_table
from accuracy.reference import Features, compare, mla_reference, reference
from launcher import DefaultOutputReusedWarning, MlaPagedAttentionRunner, PagedAttentionRunner, paged_attention

HEADS, KV_HEADS, HEAD_DIM, BLOCK, NUM_BLOCKS = 12, 4, 64, 16, 40
MAX_BATCH, MAX_PAGES = 4, 8
MLA_HEADS, MLA_BLOCK = 20, 64

#: every run() test on both of run()'s check paths (conftest.py's check_path)
pytestmark = pytest.mark.usefixtures("check_path")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _caches(seed: int, dtype: torch.dtype = torch.bfloat16) -> tuple[torch.Tensor, torch.Tensor]:
    gen = _gen(seed)
    shape = (NUM_BLOCKS, BLOCK, KV_HEADS, HEAD_DIM)
    return torch.randn(shape, generator=gen).to(dtype), torch.randn(shape, generator=gen).to(dtype)


def _query(batch: int, seed: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.randn(batch, HEADS, HEAD_DIM, generator=_gen(seed)).to(dtype)


def _engine_runner(**options: Any) -> PagedAttentionRunner:
    return PagedAttentionRunner.for_engine(
        num_heads=HEADS, num_kv_heads=KV_HEADS, head_dim=HEAD_DIM, block_size=BLOCK, dtype=torch.bfloat16,
        max_batch=MAX_BATCH, max_pages_per_seq=MAX_PAGES, num_blocks=NUM_BLOCKS, **options)


def _persistent_table(lens: list[int], seed: int) -> torch.Tensor:
    """The engine's own table: ``[max_batch, max_pages]``, this step's rows at the top, -1 elsewhere."""
    table = torch.full((MAX_BATCH, MAX_PAGES), -1, dtype=torch.int32)
    pages = [-(-n // BLOCK) for n in lens]
    table[:len(lens)] = shuffled_block_table(pages, NUM_BLOCKS, _gen(seed), MAX_PAGES)
    return table


def _mla_runner(**options: Any) -> MlaPagedAttentionRunner:
    return MlaPagedAttentionRunner.for_engine(num_heads=MLA_HEADS, block_size=MLA_BLOCK, dtype=torch.float16,
                                              max_batch=MAX_BATCH, max_pages_per_seq=4, num_blocks=12,
                                              scale=DEEPSEEK_V3_SCALE, **options)


def _mla_tensors(batch: int, seed: int) -> dict[str, torch.Tensor]:
    gen = _gen(seed)
    return {"query": torch.randn(batch, MLA_HEADS, 512, generator=gen).half(),
            "query_rope": torch.randn(batch, MLA_HEADS, 64, generator=gen).half(),
            "kv_cache": torch.randn(12, MLA_BLOCK, 1, 512, generator=gen).half(),
            "kv_rope_cache": torch.randn(12, MLA_BLOCK, 1, 64, generator=gen).half()}


# ---- 1. the update() hint only where a batch size differs -------------------------------------------------

HINT = "update()"


def _gqa_bad_calls(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> list[tuple[str, dict[str, Any], bool]]:
    """(what, run()'s changed arguments, whether the batch size is what differs)."""
    b = q.shape[0]
    return [
        ("query of another batch", {"query": q[:1].contiguous()}, True),
        ("out of another batch", {"out": torch.empty(b + 1, HEADS, HEAD_DIM, dtype=q.dtype)}, True),
        ("lse of another batch", {"lse": torch.empty(b + 1, HEADS)}, True),
        ("query of other heads", {"query": q[:, :4].contiguous()}, False),
        ("key cache of another block count", {"key_cache": k[:-1].contiguous()}, False),
        ("value cache of another block size", {"value_cache": v[:, :8].contiguous()}, False),
        ("out of another head_dim", {"out": torch.empty(b, HEADS, HEAD_DIM // 2, dtype=q.dtype)}, False),
        ("lse of other heads", {"lse": torch.empty(b, HEADS + 1)}, False),
        ("lse with a token axis", {"lse": torch.empty(b, 1, HEADS)}, False),
        ("sinks of other heads", {"sinks": torch.zeros(HEADS + 1)}, False),
    ]


def test_update_hint_only_where_the_batch_size_differs() -> None:
    k, v = _caches(1)
    lens = [40, 17, 3]
    runner = _engine_runner(sinks_dtype=torch.float32, return_lse=True)
    runner.update(lens, _persistent_table(lens, 2)[:3])
    q = _query(3, 3)
    sinks = torch.randn(HEADS)
    for what, change, batch_differs in _gqa_bad_calls(q, k, v):
        args: dict[str, Any] = {"query": q, "key_cache": k, "value_cache": v, "sinks": sinks, **change}
        with pytest.raises(ValueError, match="shape must be the planned") as caught:
            runner.run(**args)
        assert (HINT in str(caught.value)) == batch_differs, f"{what}: {caught.value}"
        if batch_differs:
            assert "planned for 3 sequences" in str(caught.value), f"{what}: {caught.value}"


def test_mla_update_hint_only_where_the_batch_size_differs() -> None:
    lens = [70, 5]
    runner = _mla_runner(return_lse=True)
    table = shuffled_block_table([2, 1], 12, _gen(4), 4)
    runner.update(lens, table)
    t = _mla_tensors(2, 5)
    q, qr, kv, kr = t["query"], t["query_rope"], t["kv_cache"], t["kv_rope_cache"]
    cases: list[tuple[str, tuple[Any, ...], dict[str, Any], bool]] = [
        ("query_rope of another batch", (q, qr[:1].contiguous(), kv, kr), {}, True),
        ("query_rope of another width", (q, qr[..., :32].contiguous(), kv, kr), {}, False),
        ("kv_rope_cache of another block count", (q, qr, kv, kr[:-1].contiguous()), {}, False),
        ("kv_cache of another block count", (q, qr, kv[:-1].contiguous(), kr), {}, False),
        ("lse of other heads", (q, qr, kv, kr), {"lse": torch.empty(2, MLA_HEADS - 1)}, False),
        ("lse of another batch", (q, qr, kv, kr), {"lse": torch.empty(3, MLA_HEADS)}, True),
    ]
    for what, args, kwargs, batch_differs in cases:
        with pytest.raises(ValueError, match="shape must be the planned") as caught:
            runner.run(*args, **kwargs)
        assert (HINT in str(caught.value)) == batch_differs, f"{what}: {caught.value}"


# ---- 2. strided block tables where pa-kit copies them ----------------------------------------------------

def test_update_takes_a_column_slice_of_the_engines_persistent_table() -> None:
    k, v = _caches(6)
    lens = [33, 0, 47]
    persistent = _persistent_table(lens, 7)
    step = persistent[:3, :4]  # this step's rows and the columns its longest sequence needs: strided
    assert not step.is_contiguous()
    runner = _engine_runner()
    runner.update(lens, step)
    q = _query(3, 8)
    out = runner.run(q, k, v, out=torch.full_like(q, math.nan))
    result = compare(out, reference(q, k, v, step, lens, HEAD_DIM ** -0.5))
    assert result.passed, result.summary()
    persistent.fill_(-7)  # copied: the engine may reuse its table at once
    again = runner.run(q, k, v, out=torch.full_like(q, math.nan))
    assert torch.equal(again.view(torch.int16), out.view(torch.int16))


def test_paged_attention_takes_a_strided_table() -> None:
    k, v = _caches(9)
    lens = [5, 60]
    table = _persistent_table(lens, 10)[:2, :4]
    q = _query(2, 11)
    result = compare(paged_attention(q, k, v, table, lens), reference(q, k, v, table, lens, HEAD_DIM ** -0.5))
    assert result.passed, result.summary()


def test_mla_update_takes_a_strided_table() -> None:
    lens = [130, 9]
    persistent = torch.full((MAX_BATCH, 6), -1, dtype=torch.int32)
    persistent[:2, :4] = shuffled_block_table([3, 1], 12, _gen(12), 4)
    step = persistent[:2, :3]
    runner = _mla_runner()
    runner.update(lens, step)
    t = _mla_tensors(2, 13)
    out = runner.run(t["query"], t["query_rope"], t["kv_cache"], t["kv_rope_cache"],
                     out=torch.full_like(t["query"], math.nan))
    ref = mla_reference(t["query"], t["query_rope"], t["kv_cache"], t["kv_rope_cache"], step, lens,
                        DEEPSEEK_V3_SCALE)
    assert compare(out, ref).passed, compare(out, ref).summary()


def test_the_runners_own_table_in_place_and_a_shifted_view_of_it() -> None:
    """The runner's table, or a [:b, :pages] view of it, is addressed in place (the kernel reads it with the
    runner's row stride); a view of it that starts elsewhere would be copied over itself: refused, naming why."""
    k, v = _caches(14)
    lens = [20, 40, 9]
    runner = _engine_runner()
    runner.update(lens, _persistent_table(lens, 15)[:3, :3])
    own = runner.block_table[:3, :3]
    runner.update([21, 41, 10], own)  # in place: same ids, one more token each
    q = _query(3, 16)
    out = runner.run(q, k, v, out=torch.empty_like(q))
    assert compare(out, reference(q, k, v, own, [21, 41, 10], HEAD_DIM ** -0.5)).passed
    with pytest.raises(ValueError, match="runner's own block table"):
        runner.update([20, 40], runner.block_table[1:3, :3])


# ---- 3. torch int64 context lengths -----------------------------------------------------------------------

def test_int64_tensor_context_lens_are_taken_on_the_host() -> None:
    k, v = _caches(17)
    lens = [25, 64, 1]
    table = _persistent_table(lens, 18)[:3, :4]
    runner = _engine_runner()
    runner.update(torch.tensor(lens), table)  # torch.tensor([...]) is int64
    assert runner.plan is not None and list(runner.plan.context_lens) == lens
    q = _query(3, 19)
    out = runner.run(q, k, v, out=torch.empty_like(q))
    assert compare(out, reference(q, k, v, table, lens, HEAD_DIM ** -0.5)).passed
    functional = paged_attention(q, k, v, table, torch.tensor(lens))
    assert torch.equal(functional.view(torch.int16), out.view(torch.int16))
    mla = _mla_runner()
    mla.update(torch.tensor([3, 70]), shuffled_block_table([1, 2], 12, _gen(20), 4))
    assert mla.plan is not None and list(mla.plan.context_lens) == [3, 70]


@pytest.mark.parametrize(("lens", "error", "message"), [
    (torch.tensor([2.0, 3.0]), TypeError, "integer dtype.*got torch.float32"),
    (torch.tensor([True, False]), TypeError, "integer dtype.*got torch.bool"),
    (torch.tensor([[2, 3]]), ValueError, "1-D"),
    (torch.tensor([2, 1 << 40]), ValueError, "context length at index 1 must be <="),
    (torch.tensor([2, -1]), ValueError, "context_lens"),
])
def test_bad_tensor_context_lens_are_refused(lens: torch.Tensor, error: type, message: str) -> None:
    runner = _engine_runner()
    with pytest.raises(error, match=message):
        runner.update(lens, _persistent_table([2, 3], 21)[:2, :1])


# ---- 4. the default output is one buffer: a second run() of a step says it overwrote the first -----------

def test_second_run_into_the_default_output_warns() -> None:
    k, v = _caches(22)
    lens = [30, 12]
    runner = _engine_runner()
    runner.update(lens, _persistent_table(lens, 23)[:2, :2])
    q0, q1 = _query(2, 24), _query(2, 25)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first = runner.run(q0, k, v)  # one default-output run per step: fine
    with pytest.warns(DefaultOutputReusedWarning, match="out="):
        second = runner.run(q1, k, v)
    assert second is first  # the semantics kept: run() without out= returns the runner's one output


def test_runs_with_out_or_one_per_step_do_not_warn() -> None:
    k, v = _caches(26)
    lens = [30, 12]
    table = _persistent_table(lens, 27)[:2, :2]
    runner = _engine_runner(window_left=7, return_lse=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for step in range(3):
            runner.update([n + step for n in lens], table)
            runner.run(_query(2, step), k, v)  # the default output, once per step
            for layer in range(2):  # and every layer into its own out=, lse=
                q = _query(2, 10 + layer)
                out, _ = runner.run(q, k, v, out=torch.empty_like(q), lse=torch.empty(2, HEADS))
                ref = reference(q, k, v, table, [n + step for n in lens], HEAD_DIM ** -0.5, Features(window_left=7))
                assert compare(out, ref).passed


def test_mla_second_run_into_the_default_output_warns() -> None:
    runner = _mla_runner()
    runner.update([70, 5], shuffled_block_table([2, 1], 12, _gen(28), 4))
    t = _mla_tensors(2, 29)
    args = (t["query"], t["query_rope"], t["kv_cache"], t["kv_rope_cache"])
    runner.run(*args)
    with pytest.warns(DefaultOutputReusedWarning):
        runner.run(*args)
