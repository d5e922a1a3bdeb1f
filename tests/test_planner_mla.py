"""The planner's MLA grid (ABI v5-v6): every query head of a (sequence, split) in one task, the MLA hand-off, the
rescale word, the number of KV ranges (``tiling.mla_grid.mla_ranges``) and which sequences are cut.  Pure
planning: no library is loaded."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest

from tiling import abi, plan_paged_attention
from tiling.mla_grid import mla_ranges, mla_task_heads, split_mla
from tiling.schedule import enumerate_tasks
from tiling.splits import combine_split_limit
from workloads.shapes import log_uniform_lengths

T = abi.TilingWord


def mla_plan(lens: list[int], heads: int, *, q_len: int = 1, block_size: int = 128, **options: Any) -> Any:
    pages = max(-(-n // block_size) for n in lens) + 1
    return plan_paged_attention(lens, num_heads=heads, num_kv_heads=1, head_dim=abi.MLA_LATENT_DIM,
                                rope_dim=abi.MLA_ROPE_DIM, block_size=block_size, max_pages=pages,
                                num_blocks=len(lens) * pages, scale=0.1, q_len=q_len, **options)


@pytest.mark.parametrize("heads", [16, 32, 64, 128])
@pytest.mark.parametrize("batch", [1, 4, 128])
def test_one_token_tasks_hold_every_head(heads: int, batch: int) -> None:
    """q_len 1: one task per (sequence, split) with all heads, past the 32-head cap of other launches; the
    scratch holds one MLA hand-off of every row, per stage and core."""
    plan = mla_plan([4096] * batch, heads)
    split = plan.split
    assert split.former_head == heads and split.tail_head in (0, heads)
    assert split.task_count == split.former_batch * plan.kv_core_num + split.tail_batch
    assert plan.tiling[T.HANDOFF_TOKENS] == abi.MLA_HANDOFF_TOKENS == plan.handoff_tokens
    assert plan.workspace.s_bytes == plan.block_dim * 2 * heads * abi.MLA_HANDOFF_TOKENS * 4


def test_more_rows_than_the_cap_cut_the_heads() -> None:
    """128 heads x q_len 2 = 256 rows: 64-head tasks (the latent is read once per head slice)."""
    plan = mla_plan([2048, 900], 128, q_len=2)
    assert plan.split.former_head == 64 == mla_task_heads(128, 2)
    assert mla_task_heads(128, 16) == 8 and mla_task_heads(7, 16) == 7


@pytest.mark.parametrize(("batch", "ctx", "block_size", "ranges", "whole"), [
    (128, 8192, 256, 3, 120),  # 120 whole in 5 rounds, the last round's 8 cut in 3: 342 hand-offs, not 352
    (24, 8192, 256, 1, 0),     # one task per core already
    (64, 2048, 128, 3, 48),    # 2 rounds of 16 hand-offs, then 16 sequences cut in 3 (two of 6 a core): 50.2, not 51.9
    (8, 4096, 128, 3, 0),      # fills the cores: 24 tasks
    (5, 4096, 128, 4, 0),      # 20 tasks in one round, not 25 in two
    (1, 8192, 128, 16, 0),     # as far as the combine holds at D 512
])
def test_ranges_even_out_the_busiest_core(batch: int, ctx: int, block_size: int, ranges: int, whole: int) -> None:
    plan = mla_plan([ctx] * batch, 128, block_size=block_size)
    assert plan.kv_core_num == ranges and plan.split.tail_batch == whole
    assert plan.kv_core_num <= combine_split_limit(abi.MLA_LATENT_DIM)
    assert (plan.key & abi.KEY_SPLIT_KV_BIT != 0) == (ranges > 1)


def test_the_range_count_is_the_cheapest_by_its_documented_cost() -> None:
    """Against a brute-force reference of the cost ``mla_ranges`` documents (busiest core: rounds x (hand-offs per
    range + task overhead), plus the partials' share of the combine), over a grid of task counts, sequence
    lengths and core counts: the chosen count is the cheapest, the fewest ranges on a tie."""
    from tiling.mla_grid import MLA_PARTIAL_UNITS, MLA_TASK_OVERHEAD_UNITS

    def cost(head_tasks: int, rows: int, pages: int, ranges: int, cores: int) -> float:
        units = -(-pages // ranges)  # pages of one hand-off each (block_size = abi.MLA_HANDOFF_TOKENS below)
        busiest = -(-head_tasks * ranges // cores) * (units + MLA_TASK_OVERHEAD_UNITS)
        return busiest + (head_tasks * ranges * MLA_PARTIAL_UNITS * rows / abi.MLA_MAX_TASK_ROWS / cores
                          if ranges > 1 else 0.0)

    checked = 0
    for cores in (20, 24):
        for head_tasks in (1, 5, 7, 16, 24, 40, 128, 196, 300):
            for pages in (1, 3, 8, 36, 64, 100):
                for rows in (16, 128):
                    most = min(pages, 16)
                    chosen = mla_ranges(head_tasks, rows, pages, abi.MLA_HANDOFF_TOKENS, cores, most)
                    costs = [cost(head_tasks, rows, pages, r, cores) for r in range(1, most + 1)]
                    assert chosen == 1 + costs.index(min(costs)), (cores, head_tasks, pages, rows, costs)
                    checked += 1
    assert checked == 216


def test_forced_strategies_keep_their_meaning() -> None:
    assert mla_plan([8192], 128, strategy="bn").kv_core_num == 1
    assert mla_plan([8192] * 128, 128, block_size=256, strategy="bn").kv_core_num == 1
    assert mla_plan([8192] * 128, 128, strategy="split_kv").kv_core_num == 2


def test_ragged_batch_keeps_the_mla_grid() -> None:
    plan = mla_plan([8192, 100, 3000, 0, 5000], 64)
    assert plan.split.former_head == 64
    assert plan.split.kv_core_num <= combine_split_limit(abi.MLA_LATENT_DIM)


@pytest.mark.parametrize(("batch", "high", "block_size", "heads", "q_len"), [
    (32, 8192, 128, 128, 1),
    (64, 4096, 64, 32, 1),
    (16, 16384, 128, 128, 2),  # two head chunks a sequence
])
def test_a_ragged_batch_is_balanced_with_mla_tasks(batch: int, high: int, block_size: int, heads: int,
                                                   q_len: int) -> None:
    """A ragged MLA batch gets the balancer's split-KV grid under MLA's rule (``mla_grid_rule``): every task holds
    all heads a task can (the latent read once per range), each range is at least one hand-off, each sequence's
    ranges cover its tokens once, and the busiest core runs fewer hand-offs (counted from the tiling words) than
    the grid ``split_mla`` plans from the longest sequence alone (the planner before ragged MLA batches were
    balanced: the control)."""
    lens = list(log_uniform_lengths(batch, 16, high, 1234))
    plan = mla_plan(lens, heads, q_len=q_len, block_size=block_size)
    split = plan.split
    assert split.former_head == mla_task_heads(heads, q_len) and split.kv_core_num > 1
    assert split.kv_split_tokens >= abi.MLA_HANDOFF_TOKENS
    covered: dict[tuple[int, int], int] = {}
    for task in enumerate_tasks(plan.tiling, plan.block_dim):
        covered[(task.slot, task.head_start)] = covered.get((task.slot, task.head_start), 0) + task.token_count
    for (slot, _), tokens in covered.items():
        assert tokens == lens[slot]
    longest_only = mla_plan(lens, heads, q_len=q_len, block_size=block_size,
                            grid=split_mla(batch, heads, max(lens), block_size, 24, "auto", q_len))
    assert max(_handoffs_per_core(plan)) < 0.9 * max(_handoffs_per_core(longest_only))


def _handoffs_per_core(plan: Any) -> list[int]:
    """Each core's MLA hand-offs, walking the tiling words as the kernel does (:mod:`tiling.schedule`)."""
    load = [0] * plan.block_dim
    for task in enumerate_tasks(plan.tiling, plan.block_dim):
        load[task.core] += -(-task.token_count // abi.MLA_HANDOFF_TOKENS)
    return load


@pytest.mark.parametrize(("batch", "ctx", "block_size", "cores", "heads", "q_len"), [
    (128, 8192, 256, 24, 128, 1),  # tilelang's shape: 342 hand-offs on the busiest core, not 352
    (16, 8192, 256, 3, 128, 1),    # its three-core proxy (kernel/npu/PERFORMANCE.md)
    (100, 4096, 128, 24, 64, 1),
    (7, 600, 64, 3, 16, 1),
    (40, 2048, 128, 24, 128, 2),   # two head chunks a sequence
])
def test_the_last_round_grid_evens_out_the_cores(batch: int, ctx: int, block_size: int, cores: int, heads: int,
                                                 q_len: int) -> None:
    """ABI v6, counted from the tiling words: the tail pass runs whole sequences, the former pass's ranges of each
    cut sequence cover its tokens once, and the busiest core runs fewer hand-offs than with every sequence cut
    alike (the grid ``mla_ranges`` gives, planned through ``grid=``)."""
    plan = mla_plan([ctx] * batch, heads, q_len=q_len, block_size=block_size, core_count=cores)
    split = plan.split
    assert split.tail_batch > 0 and split.kv_core_num > 1 and split.tail_head == split.former_head
    tasks = enumerate_tasks(plan.tiling, plan.block_dim)
    covered: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for task in tasks:
        covered.setdefault((task.slot, task.head_start), []).append((task.token_start, task.token_count))
        if task.position >= split.former_batch:
            assert (task.token_start, task.token_count) == (0, ctx)
    assert len(covered) == batch * -(-heads // split.former_head)
    for ranges in covered.values():
        ranges.sort()
        assert ranges[0][0] == 0 and sum(n for _, n in ranges) == ctx
        assert all(a + n == b for (a, n), (b, _) in pairwise(ranges))
    alike = mla_plan([ctx] * batch, heads, q_len=q_len, block_size=block_size, core_count=cores,
                     grid=split_mla(batch, heads, ctx, block_size, cores, "auto", q_len))
    assert alike.split.tail_batch == 0
    assert max(_handoffs_per_core(plan)) < max(_handoffs_per_core(alike))
    assert plan.split_batch == split.former_batch < batch


def test_a_decode_step_inside_its_pages_reuses_the_cached_grid() -> None:
    """``split_mla`` depends on the longest sequence only through its whole pages, so an engine's next step (one
    token more, no page crossed) takes the grid from the cache; a step that crosses a page plans again."""
    from tiling.mla_grid import _split_mla

    _split_mla.cache_clear()
    first = split_mla(128, 128, 4000, 128, 24, "auto", 1, uniform=True)
    assert split_mla(128, 128, 4001, 128, 24, "auto", 1, uniform=True) is first
    assert _split_mla.cache_info().hits == 1
    split_mla(128, 128, 4097, 128, 24, "auto", 1, uniform=True)
    assert _split_mla.cache_info().misses == 2
