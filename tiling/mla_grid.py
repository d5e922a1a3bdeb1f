"""The MLA task grid (ABI v5-v6): how an absorbed-MLA decode batch is cut into per-core tasks.

An MLA task holds every q head of its token range (:func:`mla_task_heads`), so a sequence's latent is read once
per split.  What is left to choose is how many KV ranges each sequence is cut into, and (ABI v6) which sequences
are cut at all: a batch that does not divide the cores leaves a last round of tasks on some cores only, and
splitting every sequence to even it out costs partials and a combine for all of them, while splitting only the
sequences of that last round (a former pass of split sequences, a tail pass of whole ones) costs them for a few.

Costs are in MLA hand-offs (units of ``abi.MLA_HANDOFF_TOKENS`` tokens), the steady step of the cube at 128 heads.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from math import gcd

import numpy as np

from tiling import abi
from tiling.balance import GridRule
from tiling.splits import (
    CoreSplit,
    Strategy,
    ceil_div,
    combine_split_limit,
    kv_align_tokens,
    one_pass_grid,
    split_kv_grid,
)

#: What a task costs a core besides its units (Q's load, its output rows), and what one split partial of
#: ``abi.MLA_MAX_TASK_ROWS`` rows costs the combine (its 256 KiB read back), from the timing model's replay at 128
#: heads (kernel/npu/PERFORMANCE.md, change 14: a second task of 8 units on a core adds 50.2 µs, 9.3 units of
#: 5.38 µs; a partial's read at pto-isa's GM -> UB rate is 2.4 µs).
MLA_TASK_OVERHEAD_UNITS = 1.3
MLA_PARTIAL_UNITS = 0.5
#: MLA grids kept by :func:`split_mla` (its whole search costs about a millisecond at B64 on the host)
GRIDS_CACHED = 8


def mla_task_heads(num_heads: int, q_len: int) -> int:
    """q heads of an MLA task (ABI v5): all of them, up to ``abi.MLA_MAX_TASK_ROWS`` rows of heads x q_len."""
    return max(1, min(num_heads, abi.MLA_MAX_TASK_ROWS // q_len))


def split_mla(batch: int, num_heads: int, max_kv: int, block_size: int, core_count: int, strategy: Strategy,
              q_len: int, *, uniform: bool = False) -> CoreSplit:
    """The MLA task grid: each task holds every q head of its token range (:func:`mla_task_heads`), so a
    sequence's latent is read once per split, whatever the head count.  Each sequence may be cut into page ranges
    of at least one MLA hand-off: in ``auto`` mode as many as :func:`mla_ranges` finds fastest (filling idle cores,
    or evening out the last round of tasks), with ``split_kv`` enough to fill the cores (at least two where the
    pages allow), never with ``bn``.  The combine's cap bounds the ranges (``combine_split_limit`` at D 512).

    In ``auto`` mode a batch of ``uniform`` lengths may instead get :func:`split_remainder`'s grid (ABI v6): only
    the sequences of the last round cut, the rest whole in a tail pass, where that leaves the busiest core less
    work.  A ragged batch's grid is then the balancer's to replace (``tiling.balance.balance_ragged`` under
    :func:`mla_grid_rule`): this one is planned from the longest sequence alone.

    The grid depends on ``max_kv`` only through its whole pages, so it comes from a cache of :data:`GRIDS_CACHED`
    grids: an engine's decode steps re-plan the same batch until a sequence crosses a page."""
    return _split_mla(batch, num_heads, kv_align_tokens(max_kv, block_size), max_kv == 0, block_size, core_count,
                      strategy, q_len, uniform)


@functools.lru_cache(maxsize=GRIDS_CACHED)
def _split_mla(batch: int, num_heads: int, kv_align: int, empty: bool, block_size: int, core_count: int,
               strategy: Strategy, q_len: int, uniform: bool) -> CoreSplit:
    """:func:`split_mla` on the longest sequence's whole pages (``kv_align`` tokens; ``empty`` when it is 0)."""
    head_split = mla_task_heads(num_heads, q_len)
    chunks = ceil_div(num_heads, head_split)
    head_tasks = chunks * batch
    kv_pages = kv_align // block_size
    most = mla_range_limit(kv_pages, block_size)
    ranges = 1
    if strategy == "auto":
        ranges = mla_ranges(head_tasks, head_split * q_len, kv_pages, block_size, core_count, most)
    elif strategy == "split_kv":
        ranges = min(max(ceil_div(core_count, head_tasks), 2), most)
    if ranges <= 1:
        grid = one_pass_grid(batch, num_heads, 1, head_split, kv_align, 1, core_count)
    else:
        grid = split_kv_grid(batch, num_heads, 1, kv_align, block_size, abi.MLA_LATENT_DIM,
                              ceil_div(kv_pages, ranges), head_split, core_count)
    if strategy != "auto" or not uniform or empty:
        return grid
    rows = head_split * q_len
    best = split_remainder(batch, chunks, rows, kv_pages, block_size, core_count, most)
    if best is None:
        return grid
    whole, cut, cut_ranges = best
    alike = batch if grid.kv_core_num > 1 else 0  # the one-pass grid: every sequence cut alike, or none
    now = grid_cost(alike, batch - alike, grid.kv_core_num, chunks, rows, kv_pages, block_size, core_count)
    if grid_cost(cut, whole, cut_ranges, chunks, rows, kv_pages, block_size, core_count) >= now - 1e-9:
        return grid
    pieces = split_kv_grid(cut, num_heads, 1, kv_align, block_size, abi.MLA_LATENT_DIM,
                            ceil_div(kv_pages, cut_ranges), head_split, core_count)
    return replace(pieces, tail_batch=whole, tail_head=head_split, tail_group_move=pieces.former_group_move,
                   block_dim=min(core_count, pieces.task_count + whole * chunks),
                   task_count=pieces.task_count + whole * chunks)


def mla_range_limit(kv_pages: int, block_size: int) -> int:
    """Most KV ranges a sequence of ``kv_pages`` pages may be cut into: each at least one MLA hand-off, at most the
    combine's cap at D 512 (``combine_split_limit``)."""
    min_pages = ceil_div(abi.MLA_HANDOFF_TOKENS, block_size)
    return min(max(1, kv_pages // min_pages), combine_split_limit(abi.MLA_LATENT_DIM))


def mla_grid_rule(num_heads: int, q_len: int, max_kv: int, block_size: int) -> GridRule:
    """How the ragged-batch balancer (``tiling.balance.balance_ragged``) counts an MLA batch's work and which grids
    it may try: tasks of every head (:func:`mla_task_heads`), ranges of at least one hand-off of the longest
    sequence and at most the combine's cap at D 512 (as :func:`split_mla` cuts a uniform batch), each range paying
    :data:`MLA_TASK_OVERHEAD_UNITS` and each partial :data:`MLA_PARTIAL_UNITS`, in tokens per query head."""
    kv_pages = kv_align_tokens(max_kv, block_size) // block_size
    return GridRule(task_heads=mla_task_heads(num_heads, q_len), split_limit=mla_range_limit(kv_pages, block_size),
                    task_overhead=round(MLA_TASK_OVERHEAD_UNITS * abi.MLA_HANDOFF_TOKENS),
                    partial_overhead=round(MLA_PARTIAL_UNITS * abi.MLA_HANDOFF_TOKENS))


def mla_ranges(head_tasks: int, task_rows: int, kv_pages: int, block_size: int, core_count: int, most: int) -> int:
    """KV ranges per sequence of an ``auto`` MLA grid: the count whose busiest core does the least work, in MLA
    hand-offs.  The static task loop gives the busiest core ``ceil(tasks / cores)`` tasks, each of its range's
    hand-offs plus :data:`MLA_TASK_OVERHEAD_UNITS`; a split adds its partials to the combine
    (:data:`MLA_PARTIAL_UNITS` per 128 rows, shared by the cores).  Ties go to fewer ranges.  B128 at 8K (64
    hand-offs a sequence, 24 cores): one range leaves 6 tasks on 8 cores (392), two give 11 rounds of 32 (366 + 5)."""
    best, best_cost = 1, float("inf")
    for ranges in range(1, most + 1):
        pages = ceil_div(kv_pages, ranges)
        units = ceil_div(pages * block_size, abi.MLA_HANDOFF_TOKENS)
        tasks = head_tasks * ranges
        cost = ceil_div(tasks, core_count) * (units + MLA_TASK_OVERHEAD_UNITS)
        if ranges > 1:
            cost += tasks * MLA_PARTIAL_UNITS * task_rows / abi.MLA_MAX_TASK_ROWS / core_count
        if cost < best_cost - 1e-9:
            best, best_cost = ranges, cost
    return best


def _range_units(kv_pages: int, ranges: int, block_size: int) -> list[int]:
    """Hand-offs of each KV range of a sequence of ``kv_pages`` pages cut into ``ranges`` (the last is shorter)."""
    pages = ceil_div(kv_pages, ranges)
    splits = ceil_div(kv_pages, pages)
    return [ceil_div(min(pages, kv_pages - i * pages) * block_size, abi.MLA_HANDOFF_TOKENS) for i in range(splits)]


def grid_cost(cut: int, whole: int, ranges: int, chunks: int, task_rows: int, kv_pages: int, block_size: int,
              core_count: int) -> float:
    """The busiest core's work, in MLA hand-offs, under the kernel's static task loop (docs/CONTRACT.md, "Task
    loop"): the former pass's ``cut`` sequences x ``chunks`` head chunks x their KV ranges, task p on core p mod
    cores, then the tail pass's ``whole`` sequences x ``chunks``, again from core 0; each task its hand-offs plus
    :data:`MLA_TASK_OVERHEAD_UNITS`, each partial :data:`MLA_PARTIAL_UNITS` per 128 rows shared by the cores."""
    pieces = np.asarray(_range_units(kv_pages, ranges, block_size) if cut else [], dtype=np.float64)
    task = np.arange(cut * chunks * pieces.size)
    load = np.zeros(core_count)  # task p on core p mod cores, added in task order
    load += np.bincount(task % core_count, weights=pieces[task % max(pieces.size, 1)] + MLA_TASK_OVERHEAD_UNITS,
                        minlength=core_count)
    tail_tasks = whole * chunks
    unit = ceil_div(kv_pages * block_size, abi.MLA_HANDOFF_TOKENS) + MLA_TASK_OVERHEAD_UNITS
    core = np.arange(core_count)
    load += (tail_tasks // core_count + (core < tail_tasks % core_count)) * unit
    partials = task.size if pieces.size > 1 else 0
    return float(load.max()) + partials * MLA_PARTIAL_UNITS * task_rows / abi.MLA_MAX_TASK_ROWS / core_count


def split_remainder(batch: int, chunks: int, task_rows: int, kv_pages: int, block_size: int, core_count: int,
                    most: int) -> tuple[int, int, int] | None:
    """(whole, cut, ranges): the sequences run whole in the tail pass, the ones cut into KV ranges in the former
    pass, and the ranges, whose :func:`grid_cost` is least; None when no sequence can stay whole.  The whole
    sequences' tasks fill rounds of every core (``whole x chunks`` a multiple of the cores), so the cut ones,
    the last round's, are what evens the cores out.  B128/H128 at 8K on 24 cores: 120 whole, 8 cut in 3
    (342 hand-offs on the busiest core; every sequence cut in 2: 352, and 16 times the partials)."""
    step = core_count // gcd(core_count, chunks)
    top = (batch - 1) // step * step
    best: tuple[int, int, int] | None = None
    best_cost = float("inf")
    for whole in (top, top - step):
        if whole <= 0:
            continue
        for ranges in range(2, most + 1):
            cost = grid_cost(batch - whole, whole, ranges, chunks, task_rows, kv_pages, block_size, core_count)
            if cost < best_cost - 1e-9:
                best, best_cost = (whole, batch - whole, ranges), cost
    return best
