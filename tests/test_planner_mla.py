"""The planner's MLA grid (ABI v5): every query head of a (sequence, split) in one task, the MLA hand-off, the
rescale word, and the number of KV ranges (``tiling.splits.mla_ranges``).  Pure planning: no library is loaded."""

from __future__ import annotations

from typing import Any

import pytest

from tiling import abi, plan_paged_attention
from tiling.splits import combine_split_limit, mla_ranges, mla_task_heads

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
    assert plan.split.former_head == heads and plan.split.tail_batch == 0
    assert plan.split.task_count == batch * plan.kv_core_num
    assert plan.tiling[T.HANDOFF_TOKENS] == abi.MLA_HANDOFF_TOKENS == plan.handoff_tokens
    assert plan.workspace.s_bytes == plan.block_dim * 2 * heads * abi.MLA_HANDOFF_TOKENS * 4


def test_more_rows_than_the_cap_cut_the_heads() -> None:
    """128 heads x q_len 2 = 256 rows: 64-head tasks (the latent is read once per head slice)."""
    plan = mla_plan([2048, 900], 128, q_len=2)
    assert plan.split.former_head == 64 == mla_task_heads(128, 2)
    assert mla_task_heads(128, 16) == 8 and mla_task_heads(7, 16) == 7


@pytest.mark.parametrize(("batch", "ctx", "block_size", "ranges"), [
    (128, 8192, 256, 2),   # 128 tasks leave 6 rounds on 8 cores; two ranges: 11 rounds of half the work
    (24, 8192, 256, 1),    # one task per core already
    (64, 2048, 128, 1),    # 3 rounds of 16 hand-offs beat 6 rounds of 8 plus the combine
    (8, 4096, 128, 3),     # fills the cores: 24 tasks
    (5, 4096, 128, 4),     # 20 tasks in one round, not 25 in two
    (1, 8192, 128, 16),    # as far as the combine holds at D 512
])
def test_ranges_even_out_the_busiest_core(batch: int, ctx: int, block_size: int, ranges: int) -> None:
    plan = mla_plan([ctx] * batch, 128, block_size=block_size)
    assert plan.kv_core_num == ranges
    assert plan.kv_core_num <= combine_split_limit(abi.MLA_LATENT_DIM)
    assert (plan.key & abi.KEY_SPLIT_KV_BIT != 0) == (ranges > 1)


def test_the_range_count_is_the_cheapest_by_its_documented_cost() -> None:
    """Against a brute-force reference of the cost ``mla_ranges`` documents (busiest core: rounds x (hand-offs per
    range + task overhead), plus the partials' share of the combine), over a grid of task counts, sequence
    lengths and core counts: the chosen count is the cheapest, the fewest ranges on a tie."""
    from tiling.splits import MLA_PARTIAL_UNITS, MLA_TASK_OVERHEAD_UNITS

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
