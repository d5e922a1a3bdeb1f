"""``mla_paged_attention`` and ``MlaPagedAttentionRunner``: results, the engine life cycle, and every refusal.

The runner is a :class:`PagedAttentionRunner` whose caches are MLA's latent cache; these tests check what MLA
adds (the rope parts, the required scale, MLA's shapes) and that the GQA life cycle holds for it: plan once
per step with continuous batching, run per layer without allocating, the default output's address fixed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from accuracy.cases import DEEPSEEK_V3_SCALE
from accuracy.harness import shuffled_block_table
from accuracy.reference import compare, compare_lse, mla_reference
from launcher import MlaPagedAttentionRunner, mla_paged_attention
from tests.test_runner_engine import _OnlyInPlace
from tiling import abi, plan_paged_attention
from tiling.splits import combine_split_limit
from tiling.workspace import capacity_workspace

SCALE = DEEPSEEK_V3_SCALE
BS = 64


def tensors(batch: int, heads: int, *, q_len: int | None = None, num_blocks: int = 48,
            dtype: torch.dtype = torch.float16, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    tokens = () if q_len is None else (q_len,)
    return {
        "query": torch.randn(batch, *tokens, heads, 512, generator=gen).to(dtype),
        "query_rope": (2 * torch.randn(batch, *tokens, heads, 64, generator=gen)).to(dtype),
        "kv_cache": torch.randn(num_blocks, BS, 1, 512, generator=gen).to(dtype),
        "kv_rope_cache": (2 * torch.randn(num_blocks, BS, 1, 64, generator=gen)).to(dtype),
    }


def shuffled_table(lens: list[int], num_blocks: int, seed: int, columns: int | None = None) -> torch.Tensor:
    pages = [-(-n // BS) for n in lens]
    return shuffled_block_table(pages, num_blocks, torch.Generator().manual_seed(seed), columns or max(max(pages), 1))


def check(out: torch.Tensor, t: dict[str, torch.Tensor], table: torch.Tensor, lens: list[int],
          lse: torch.Tensor | None = None) -> None:
    ref = mla_reference(t["query"], t["query_rope"], t["kv_cache"], t["kv_rope_cache"], table, lens, SCALE)
    result = compare(out, ref)
    assert result.passed, result.summary()
    if lse is not None:
        assert compare_lse(lse, ref).passed, compare_lse(lse, ref).summary()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("q_len", [None, 1, 2])
def test_functional_matches_the_golden(dtype: torch.dtype, q_len: int | None) -> None:
    lens = [0, 2, 200, 777]
    t = tensors(len(lens), 32, q_len=q_len, dtype=dtype, seed=3)
    table = shuffled_table(lens, 48, seed=4)
    out, lse = mla_paged_attention(t["query"], t["query_rope"], t["kv_cache"], t["kv_rope_cache"], table, lens,
                                   scale=SCALE, return_lse=True)
    assert out.shape == t["query"].shape and out.dtype == dtype
    assert lse.shape == t["query"].shape[:-1] and lse.dtype == torch.float32
    assert torch.all(out[0] == 0) and torch.all(torch.isinf(lse[0]))
    check(out, t, table, lens, lse)
    plain = mla_paged_attention(t["query"], t["query_rope"], t["kv_cache"], t["kv_rope_cache"], table, lens,
                                scale=SCALE)
    assert torch.equal(plain, out)


def test_bound_runner_launches_on_its_tensors() -> None:
    lens = [64, 300]
    t = tensors(2, 16, seed=5)
    table = shuffled_table(lens, 48, seed=6)
    runner = MlaPagedAttentionRunner(t["query"], t["query_rope"], t["kv_cache"], t["kv_rope_cache"], table, lens,
                                     scale=SCALE)
    out = runner()
    check(out, t, table, lens)
    assert "MlaPagedAttentionRunner" in repr(runner) and "latent=512+rope=64" in repr(runner)


def test_engine_loop_with_continuous_batching() -> None:
    """Sequences join, grow and leave over eight steps; three layers per step, each its own caches; every
    step's output matches the golden, the default output keeps its address and the plan carries MLA."""
    layers = [tensors(1, 64, q_len=2, num_blocks=80, dtype=torch.bfloat16, seed=10 + i) for i in range(3)]
    runner = MlaPagedAttentionRunner.for_engine(num_heads=64, block_size=BS, dtype=torch.bfloat16, max_batch=6,
                                                max_pages_per_seq=16, num_blocks=80, scale=SCALE, q_len=2,
                                                return_lse=True)
    rng = np.random.default_rng(0)
    live: dict[int, int] = {}
    address = runner._device.out.data_ptr()
    for step in range(8):
        for seq in list(live):
            live[seq] += 2
            if rng.random() < 0.2:
                del live[seq]
        while len(live) < 6 and rng.random() < 0.6:
            live[100 * step + len(live)] = int(rng.integers(2, 900))
        lens = list(live.values())
        table = shuffled_table(lens, 80, seed=step, columns=16)
        runner.update(lens, table)
        assert runner.plan is None or runner.plan.rope_dim == abi.MLA_ROPE_DIM
        for layer in layers:
            gen = torch.Generator().manual_seed(step)
            q = torch.randn(len(lens), 2, 64, 512, generator=gen).bfloat16()
            qr = torch.randn(len(lens), 2, 64, 64, generator=gen).bfloat16()
            out, lse = runner.run(q, qr, layer["kv_cache"], layer["kv_rope_cache"])
            assert out.shape == (len(lens), 2, 64, 512)
            check(out, {**layer, "query": q, "query_rope": qr}, table, lens, lse)
        assert runner._device.out.data_ptr() == address


def test_run_allocates_nothing() -> None:
    t = tensors(3, 16, num_blocks=48, seed=12)
    runner = MlaPagedAttentionRunner.for_engine(num_heads=16, block_size=BS, dtype=torch.float16, max_batch=4,
                                                max_pages_per_seq=8, num_blocks=48, scale=SCALE)
    runner.update([5, 400, 0], shuffled_table([5, 400, 0], 48, seed=1, columns=8))
    with _OnlyInPlace():
        runner.run(t["query"], t["query_rope"], t["kv_cache"], t["kv_rope_cache"])


def test_capacity_workspace_holds_every_mla_plan() -> None:
    """``capacity_workspace``'s bound against random MLA plans (heads 1-128, q_len 1-16, every strategy)."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        heads, q_len = int(rng.integers(1, 129)), int(rng.choice([1, 2, 4, 16]))
        bs = int(rng.choice([16, 64, 128]))
        max_batch, max_pages, cores = int(rng.integers(1, 40)), int(rng.integers(1, 64)), int(rng.integers(1, 25))
        lens = np.maximum(rng.integers(0, max_pages * bs + 1, int(rng.integers(1, max_batch + 1))), 0)
        lens[(lens > 0) & (lens < q_len)] = q_len
        plan = plan_paged_attention(lens, num_heads=heads, num_kv_heads=1, head_dim=512, rope_dim=64, block_size=bs,
                                    max_pages=max_pages, num_blocks=10, scale=0.1, core_count=cores, q_len=q_len,
                                    strategy=str(rng.choice(["auto", "bn", "split_kv"])))  # type: ignore[arg-type]
        assert max(plan.split.former_head, plan.split.tail_head) * q_len <= abi.MLA_MAX_TASK_ROWS
        assert plan.split.former_head == min(heads, abi.MLA_MAX_TASK_ROWS // q_len)  # every head, up to the rows
        bound = capacity_workspace(core_count=cores, elem_bytes=2, max_batch=max_batch, num_heads=heads,
                                   head_dim=512, max_pages=max_pages, handoff_tokens=None, q_len=q_len,
                                   kv_split_limit=combine_split_limit(512), rope_dim=64).by_slot()
        for slot, need in plan.workspace.by_slot().items():
            assert need <= bound[slot], (slot.name, need, bound[slot], plan)
        # tight for S: the MLA hand-off (128 tokens), not GQA's 512 (a 4x larger scratch for nothing)
        rows = min(heads * q_len, abi.MLA_MAX_TASK_ROWS)
        assert bound[abi.ArgSlot.S] == cores * 2 * rows * abi.MLA_HANDOFF_TOKENS * 4


def _call(**change: Any) -> Any:
    t = tensors(2, 16, seed=1)
    args = {**t, "block_table": shuffled_table([10, 70], 48, seed=2), "context_lens": [10, 70], "scale": SCALE}
    args.update(change)
    return mla_paged_attention(args.pop("query"), args.pop("query_rope"), args.pop("kv_cache"),
                               args.pop("kv_rope_cache"), args.pop("block_table"), args.pop("context_lens"), **args)


@pytest.mark.parametrize(("change", "error", "message"), [
    ({"scale": None}, TypeError, "scale is required for MLA"),
    ({"query": torch.randn(2, 16, 256).half(), "kv_cache": torch.randn(48, BS, 1, 256).half()}, ValueError,
     "latent width .* must be 512, got 256"),
    ({"query_rope": torch.randn(2, 16, 32).half()}, ValueError, "rope width .* must be 64, got 32"),
    ({"kv_rope_cache": torch.randn(48, BS, 1, 32).half()}, ValueError, "rope width .* must be 64, got 32"),
    ({"kv_cache": torch.randn(48, BS, 2, 512).half(), "kv_rope_cache": torch.randn(48, BS, 2, 64).half()},
     ValueError, "one latent KV head"),
    ({"query": torch.randn(2, 129, 512).half(), "query_rope": torch.randn(2, 129, 64).half()}, ValueError,
     r"num_heads must be in \[1, 128\], got 129"),
    ({"query_rope": torch.randn(2, 16, 64).bfloat16()}, TypeError, "query_rope dtype must match query"),
    ({"kv_rope_cache": torch.randn(47, BS, 1, 64).half()}, ValueError, "kv_rope_cache must be"),
    ({"query_rope": torch.randn(2, 8, 64).half()}, ValueError, "query_rope must be"),
    ({"query_rope": torch.randn(2, 64, 16).half().transpose(1, 2)}, ValueError, "query_rope must be contiguous"),
    ({"kv_cache": torch.randn(48, BS, 1, 512).bfloat16()}, TypeError, "kv_cache dtype must match query"),
    ({"mla_rescale": "amla"}, ValueError, "mla_rescale must be one of 'plain', 'pow2', got 'amla'"),
    ({"mla_rescale": 0}, TypeError, "mla_rescale must be one of 'plain', 'pow2', got 0"),
])
def test_bad_input_is_refused_before_launch(change: dict[str, Any], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        _call(**change)


def test_run_checks_the_rope_tensors() -> None:
    t = tensors(2, 16, seed=8)
    runner = MlaPagedAttentionRunner.for_engine(num_heads=16, block_size=BS, dtype=torch.float16, max_batch=2,
                                                max_pages_per_seq=4, num_blocks=48, scale=SCALE)
    runner.update([10, 70], shuffled_table([10, 70], 48, seed=2, columns=4))
    q, qr, kv, kr = t["query"], t["query_rope"], t["kv_cache"], t["kv_rope_cache"]
    with pytest.raises(ValueError, match="query_rope shape must be the planned"):
        runner.run(q, qr[:1], kv, kr)
    with pytest.raises(TypeError, match="kv_rope_cache dtype must be the planned"):
        runner.run(q, qr, kv, kr.bfloat16())
    with pytest.raises(ValueError, match="out must not share memory with kv_rope_cache"):
        runner.run(q, qr, kv, kr, out=kr.view(-1)[: q.numel()].view(q.shape))
    with pytest.raises(ValueError, match="out must not share memory with query_rope"):
        shared = torch.zeros(q.numel(), dtype=q.dtype)
        runner.run(q, shared[: qr.numel()].view(qr.shape), kv, kr, out=shared.view(q.shape))
    check(runner.run(q, qr, kv, kr), t, runner.block_table, [10, 70])  # the same runner still works


def test_for_engine_refuses_missing_scale_and_bad_sizes() -> None:
    with pytest.raises(TypeError, match="scale is required for MLA"):
        MlaPagedAttentionRunner.for_engine(num_heads=16, block_size=BS, dtype=torch.float16, max_batch=2,
                                           max_pages_per_seq=4, num_blocks=48, scale=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"MLA's num_heads must be in \[1, 128\]"):
        MlaPagedAttentionRunner.for_engine(num_heads=256, block_size=BS, dtype=torch.float16, max_batch=2,
                                           max_pages_per_seq=4, num_blocks=48, scale=SCALE)
    with pytest.raises(ValueError, match="batch_invariant=True is not planned for MLA"):
        plan_paged_attention([5], num_heads=16, num_kv_heads=1, head_dim=512, rope_dim=64, block_size=BS,
                             max_pages=1, num_blocks=1, scale=0.1, batch_invariant=True)
    with pytest.raises(ValueError, match="rope_dim must be 0"):
        plan_paged_attention([5], num_heads=16, num_kv_heads=1, head_dim=512, rope_dim=32, block_size=BS,
                             max_pages=1, num_blocks=1, scale=0.1)
