"""Departure 10: balanced cores for ragged batches, by the gather map and, where needed, a split-KV grid.

The kernel's task loop is static (docs/CONTRACT.md, "Task loop"): core ``c`` runs processes ``c, c + bd, ...``
of the former pass, then restarts at ``c`` for the tail pass.  A schedule position's processes therefore land
on a fixed run of cores: position ``p`` of a former pass with ``P = head chunks x kvCN`` processes per
position starts at core ``(p * P) mod bd``, and each of its processes adds the work of its (head chunk, split)
to the core it lands on.  Which sequence sits at which position is the planner's choice (the gather map), and
it changes no task's arithmetic, only which core runs it.

* :func:`balanced_gather` places the sequences longest first, each at the free position whose cores end
  lowest (a longest-processing-time rule with the loop's fixed positions as bins), where ATB's ascending
  order gives the cores of the last round the longest sequences of all.
* :func:`balance_ragged` also tries split-KV grids when the order alone leaves a core :data:`MIN_GAIN` above
  the mean: a whole-sequence task longer than a core's share cannot be balanced, its KV ranges can.  A
  :class:`GridRule` says which: the widest whole-group tasks for GQA (:func:`gqa_rule`), all-head tasks of at
  least one hand-off per range for MLA (``tiling.mla_grid.mla_grid_rule``).  A candidate replaces the grid
  only if its most loaded core does :data:`MIN_GAIN` less work, each range paying :data:`TASK_OVERHEAD` (and
  :data:`PARTIAL_OVERHEAD` where its sequence has two or more; MLA's rule has its own overheads).
* Batches of more than :data:`MAX_BALANCED_BATCH` sequences keep ATB's order: with that many sequences per
  core its rounds hold neighbouring lengths, and the placement's host time grows with the batch.

Work is counted in query-head tokens (one token for one query head of a task; a task of whole groups reads a
KV head's rows once, so this is KV-head tokens times the group size, the same ranking).  It is an integer held
in a float64, so every sum is exact in any order and the compiled decision (``tiling/csrc/pa_balance.c``) makes
the numpy reference's choices bit for bit.  It ranks placements and grids; the timing model
(kernel/npu/PERFORMANCE.md, change 6) is what says the result is faster.
"""

from __future__ import annotations

import functools
import heapq
import math
from dataclasses import dataclass

import numpy as np

from tiling import abi, native
from tiling.splits import CoreSplit, ceil_div, combine_split_limit, one_pass_grid

#: Work a task costs besides its tokens, in tokens per query head it holds (its Q load, the first
#: hand-off's fill of the cube and vector pipes, its output or partial row).
TASK_OVERHEAD = 64
#: Work of one split's partial in the combine, in tokens per query head (a partial row written and read
#: again, its weight), for a sequence of two or more splits; a one-split sequence writes its output row
#: instead (kernel/npu/pa_vector.hpp, Finish).
PARTIAL_OVERHEAD = 16
#: A grid other than the one planned by the split rules is taken only if its most loaded core does this
#: fraction less work: the proxy ranks grids, it does not time them.
MIN_GAIN = 0.10
#: Largest batch the balancer places (host time grows with it; beyond it the ascending order is within a few
#: per cent of the mean on 24 cores: b1024 ragged 16-32K, 1.08).
MAX_BALANCED_BATCH = 1024
#: Balancing decisions kept, keyed by the grid, the page counts and the shape: a decode step whose sequences
#: all stay inside their pages re-plans without placing anything.
DECISIONS_CACHED = 8
#: A tie between two starts goes to the lower position, added at this scale: below any real difference of
#: ends (whole query-head tokens) at the batch sizes balanced.  Past about 2^23 query-head tokens on a core it
#: is lost in rounding and a tie goes to the lowest start core: still deterministic.
TIE_SCALE = 1.0 / (1 << 30)


@dataclass(frozen=True)
class GridRule:
    """How a ragged batch's work is counted and which split-KV grid the balancer may try: tasks of
    ``task_heads`` query heads and at most ``split_limit`` ranges, each range paying ``task_overhead`` and, in a
    sequence of two or more, ``partial_overhead`` (tokens per query head, whole numbers so that every sum is
    exact).  :func:`gqa_rule` is GQA's; ``tiling.mla_grid.mla_grid_rule`` MLA's."""

    task_heads: int
    split_limit: int
    task_overhead: int = TASK_OVERHEAD
    partial_overhead: int = PARTIAL_OVERHEAD


def gqa_rule(num_heads: int, num_kv_heads: int, head_dim: int) -> GridRule:
    """GQA's rule: the widest whole-group tasks, the combine's cap at ``head_dim``, GQA's overheads."""
    return GridRule(widest_whole_groups(num_heads, num_kv_heads), combine_split_limit(head_dim))


def _pass_work(lens: np.ndarray, *, num_heads: int, head_split: int, kv_split: int, kvcn: int, block_size: int,
               cores: int, overheads: tuple[int, int]) -> np.ndarray:
    """Work per core of each sequence's processes when its position's first process lands on core 0.

    Processes run head chunk major, split minor (the task loop); splits past a sequence's length are empty.
    """
    chunks = ceil_div(num_heads, head_split)
    aligned = -(-lens // block_size) * block_size
    splits = -(-aligned // kv_split)  # per sequence; 0 for an empty one
    index = np.arange(kvcn)
    tokens = np.where(index[None, :] < splits[:, None] - 1, kv_split,
                      np.where(index[None, :] == splits[:, None] - 1, lens[:, None] - index[None, :] * kv_split, 0))
    task, partial = overheads
    overhead = task + np.where(splits >= 2, partial, 0)[:, None]  # one split: no partial
    per_split = np.where(tokens > 0, tokens + overhead, 0).astype(np.float64)
    heads = np.minimum(head_split, num_heads - np.arange(chunks) * head_split)
    work = (heads[None, :, None] * per_split[:, None, :]).reshape(lens.size, chunks * kvcn)
    width = ceil_div(work.shape[1], cores) * cores
    padded = np.zeros((lens.size, width))
    padded[:, :work.shape[1]] = work
    return padded.reshape(lens.size, width // cores, cores).sum(axis=1)


class _Passes:
    """A grid's positions: which pass each is in, the core its first process lands on, and every sequence's
    work per core in either pass."""

    def __init__(self, split: CoreSplit, lens: np.ndarray, num_heads: int, block_size: int,
                 rule: GridRule | None = None) -> None:
        self.split, self.lens = split, lens
        cores = split.block_dim
        former_p = ceil_div(num_heads, split.former_head) * split.kv_core_num
        tail_p = ceil_div(num_heads, split.tail_head) if split.tail_batch else 0
        positions = np.arange(lens.size)
        self.is_tail = positions >= split.former_batch
        self.base = np.where(self.is_tail, (positions - split.former_batch) * tail_p, positions * former_p) % cores
        overheads = (rule.task_overhead, rule.partial_overhead) if rule else (TASK_OVERHEAD, PARTIAL_OVERHEAD)
        common = {"num_heads": num_heads, "block_size": block_size, "cores": cores, "overheads": overheads}
        self.former = _pass_work(lens, head_split=split.former_head, kv_split=split.kv_split_tokens,
                                 kvcn=split.kv_core_num, **common)
        self.tail = _pass_work(lens, head_split=split.tail_head, kv_split=split.kv_split_tokens, kvcn=1,
                               **common) if split.tail_batch else self.former


def core_work(split: CoreSplit, lens: np.ndarray, gather: np.ndarray, *, num_heads: int, num_kv_heads: int,
              block_size: int, rule: GridRule | None = None) -> np.ndarray:
    """Work per core (query-head tokens) of a grid and gather map, as the task loop distributes it (overheads
    from ``rule``, GQA's by default); the unit counts query heads, the same for every group size."""
    del num_kv_heads
    return _core_work(_Passes(split, lens, num_heads, block_size, rule), gather)


def _core_work(passes: _Passes, gather: np.ndarray) -> np.ndarray:
    cores = passes.split.block_dim
    work = np.where(passes.is_tail[:, None], passes.tail[gather], passes.former[gather])
    target = (passes.base[:, None] + np.arange(cores)[None, :]) % cores
    return np.bincount(target.reshape(-1), weights=work.reshape(-1), minlength=cores)


def balanced_gather(split: CoreSplit, lens: np.ndarray, *, num_heads: int, num_kv_heads: int,
                    block_size: int, rule: GridRule | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Schedule position -> slot, longest sequence first onto the free position whose cores end lowest; and
    the work per core that leaves (what :func:`core_work` gives for it).

    "End lowest": the most loaded of the cores the sequence's tasks land on, after adding them; ties go to the
    lowest position, so equal lengths keep a deterministic order.  The tail pass (finer head chunks) keeps the
    longest ``tail_batch`` sequences, as the split rules meant it.  A sequence of one task only needs the
    least loaded free start (a heap: the classic longest-processing-time rule); one of several tasks is
    tried at every free start at once.
    """
    del num_kv_heads
    return _balanced_gather(_Passes(split, lens, num_heads, block_size, rule))


def _balanced_gather(passes: _Passes) -> tuple[np.ndarray, np.ndarray]:
    split, lens = passes.split, passes.lens
    cores = split.block_dim
    order = np.argsort(-lens, kind="stable")
    work = np.where((np.arange(lens.size) < split.tail_batch)[:, None], passes.tail[order], passes.former[order])
    single = (work[:, 1:] == 0).all(axis=1)  # at most one task, on the core the position starts at
    placed = native.balanced_gather(cores, split.tail_batch, passes.is_tail, passes.base, order, work, single,
                                    TIE_SCALE)
    if placed is not None:
        return placed
    return _balanced_gather_numpy(passes, order, work, single)


def _balanced_gather_numpy(passes: _Passes, order: np.ndarray, work: np.ndarray,
                           single: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The greedy placement in numpy: the reference ``tiling/csrc/pa_balance.c`` must match bit for bit."""
    split, lens = passes.split, passes.lens
    cores = split.block_dim
    # pass, start -> its free positions, lowest first; firsts: the lowest (inf: none left)
    free: list[list[list[int]]] = [[[] for _ in range(cores)] for _ in range(2)]
    for position, (tail, base) in enumerate(zip(passes.is_tail.tolist(), passes.base.tolist(), strict=True)):
        free[tail][base].append(position)
    firsts = [np.array([q[0] if q else np.inf for q in queues], dtype=np.float64) for queues in free]
    cores_idx = np.arange(cores)
    from_start = (cores_idx[None, :] - cores_idx[:, None]) % cores  # [b, i]: offset of core i from start b
    first_work = work[:, 0].tolist()
    load = np.zeros(cores)
    gather = [0] * lens.size
    heaps: list[list[tuple[float, float, int]] | None] = [None, None]
    for rank, (slot, one_task) in enumerate(zip(order.tolist(), single.tolist(), strict=True)):
        tail = int(rank < split.tail_batch)
        if one_task:
            heap = heaps[tail]
            if heap is None:  # the least loaded free start wins; (load, lowest free position, start) per start
                heap = heaps[tail] = [(float(load[b]), f, b) for b, f in enumerate(firsts[tail].tolist())
                                      if f < math.inf]
                heapq.heapify(heap)
            while heap[0][0] != load[heap[0][2]]:  # stale: its core took work since (loads only grow)
                _, first, base = heapq.heappop(heap)
                heapq.heappush(heap, (float(load[base]), first, base))
            base = heapq.heappop(heap)[2]
            load[base] += first_work[rank]
        else:
            placed = work[rank][from_start]  # [b, i]: its work on core i when it starts at b
            ends = np.where(placed > 0, load + placed, -np.inf).max(axis=1)  # cores it lands on only
            base = int(np.argmin(ends + firsts[tail] * TIE_SCALE))
            load += placed[base]
            heaps[tail] = None  # its loads predate this placement: rebuilt at the next one-task sequence
        queue = free[tail][base]
        gather[queue.pop(0)] = slot
        firsts[tail][base] = queue[0] if queue else math.inf
        if queue and heaps[tail] is not None:
            heapq.heappush(heaps[tail], (float(load[base]), float(queue[0]), base))
    return np.array(gather, dtype=np.int64), load


def widest_whole_groups(num_heads: int, num_kv_heads: int) -> int:
    """Query heads of the widest task of whole KV groups, at most ``HEAD_SPLIT_LIMIT``: the longest K/V bursts
    and the fewest Q loads.  A group wider than the limit gives tasks of ``HEAD_SPLIT_LIMIT`` heads of one
    group, as the split rules do (departure 8)."""
    group = num_heads // num_kv_heads
    if group >= abi.HEAD_SPLIT_LIMIT:
        return abi.HEAD_SPLIT_LIMIT
    return min(num_heads, abi.HEAD_SPLIT_LIMIT) // group * group


def split_kv_candidate(split: CoreSplit, lens: np.ndarray, *, num_heads: int, num_kv_heads: int,
                       block_size: int, core_count: int, rule: GridRule) -> CoreSplit | None:
    """The split-KV grid of ``rule``'s tasks (``task_heads`` query heads, at most ``split_limit`` ranges) to try
    against ``split``, or None.

    A position's processes start ``chunks x kvCN`` cores after the previous position's, so only the counts
    that let a position start on the most cores compete (coprime with the launched cores, where one is).
    Among those the grid with the lowest estimate of its most loaded core after :func:`balanced_gather`
    wins: the mean work per core (every range pays the rule's task overhead, a range of a sequence of two or
    more also its partial overhead) plus half a range, the excess a longest-first placement typically
    leaves; the fewest ranges among equals.
    """
    pages = -(-int(lens.max()) // block_size)
    head_split = rule.task_heads
    chunks = ceil_div(num_heads, head_split)
    kvcn = np.arange(2, rule.split_limit + 1)
    split_pages = -(-pages // kvcn)
    valid = -(-pages // split_pages) == kvcn  # the longest sequence really runs kvcn ranges of that length
    valid &= (split_pages * block_size != split.kv_split_tokens) | (head_split != split.former_head)
    if not valid.any():
        return None
    kvcn, split_pages = kvcn[valid], split_pages[valid]
    block_dim = np.minimum(chunks * lens.size * kvcn, core_count)
    aligned_pages = -(-lens // block_size)
    ranges = -(-aligned_pages[None, :] // split_pages[:, None])
    partials = np.where(ranges >= 2, ranges, 0).sum(axis=1)
    total = (float(lens.sum()) + ranges.sum(axis=1) * rule.task_overhead
             + partials * rule.partial_overhead) * num_heads
    one_range = (split_pages * block_size + rule.task_overhead + rule.partial_overhead) * head_split
    estimate = np.maximum(total / block_dim + one_range / 2, one_range)
    reach = np.gcd(chunks * kvcn, block_dim)
    best = int(np.lexsort((kvcn, estimate, reach))[0])
    return one_pass_grid(lens.size, num_heads, num_kv_heads, head_split, int(split_pages[best]) * block_size,
                         int(kvcn[best]), core_count)


def balance_ragged(split: CoreSplit, lens: np.ndarray, ascending: np.ndarray, *, num_heads: int,
                   num_kv_heads: int, block_size: int, head_dim: int, core_count: int,
                   grid_fixed: bool = False, rule: GridRule | None = None) -> tuple[CoreSplit, np.ndarray]:
    """The grid and gather map of a ragged batch.

    The given grid keeps the ``ascending`` gather map while its most loaded core does at most :data:`MIN_GAIN`
    more than the mean (and for batches over :data:`MAX_BALANCED_BATCH`); else it takes the balanced map if
    that leaves the most loaded core less work (the placement is a heuristic: it can do worse).  Unless
    ``grid_fixed``, and only while a core is still :data:`MIN_GAIN` above the mean, the split-KV candidate
    then replaces the grid if its most loaded core does :data:`MIN_GAIN` less work.  When one sequence's work
    on one core alone keeps the given grid that far above its mean, no order can balance it: the candidate is
    tried first, and the balanced order only if the candidate does not beat that bound by :data:`MIN_GAIN`.

    ``rule`` (:class:`GridRule`, default :func:`gqa_rule`) counts the work and shapes the candidate: an MLA
    batch's tasks hold every head, its ranges are at least one hand-off long and cost MLA's overheads.

    Lengths count in whole pages here (the kernel's tiles, and what kvCN depends on), so the decision holds
    while no sequence crosses a page boundary: decode steps that only add tokens inside pages find it in a
    small cache (:data:`DECISIONS_CACHED`), and any order it returns stays valid for the new lengths.
    """
    if lens.size > MAX_BALANCED_BATCH:
        return split, ascending
    pages = (-(-lens.astype(np.int64) // block_size)).astype(np.int64)
    grid, gather = _decide(split, pages.tobytes(), num_heads=num_heads, num_kv_heads=num_kv_heads,
                           block_size=block_size, head_dim=head_dim, core_count=core_count, grid_fixed=grid_fixed,
                           rule=rule or gqa_rule(num_heads, num_kv_heads, head_dim))
    return (split, ascending) if gather is None else (grid, np.frombuffer(gather, dtype=np.int64).copy())


@functools.lru_cache(maxsize=DECISIONS_CACHED)
def _decide(split: CoreSplit, pages: bytes, *, num_heads: int, num_kv_heads: int, block_size: int, head_dim: int,
            core_count: int, grid_fixed: bool, rule: GridRule) -> tuple[CoreSplit, bytes | None]:
    """:func:`balance_ragged` on page counts: the grid and the gather map (None: keep the ascending order).

    The compiled decision when ``build/lib/libpa_plan.so`` is built, else :func:`_decide_numpy`: the same
    choices bit for bit.
    """
    lens = np.frombuffer(pages, dtype=np.int64) * block_size
    decided = native.balance_decide(
        split, lens, num_heads=num_heads, num_kv_heads=num_kv_heads, block_size=block_size, head_dim=head_dim,
        core_count=core_count, grid_fixed=grid_fixed, combine_limit=rule.split_limit,
        whole_group_heads=rule.task_heads, task_overhead=rule.task_overhead,
        partial_overhead=rule.partial_overhead, min_gain=MIN_GAIN, tie_scale=TIE_SCALE)
    if decided is None:
        return _decide_numpy(split, lens, num_heads=num_heads, num_kv_heads=num_kv_heads, block_size=block_size,
                             head_dim=head_dim, core_count=core_count, grid_fixed=grid_fixed, rule=rule)
    decision, grid, gather = decided
    if decision == native.KEEP_ASCENDING:
        return split, None
    if decision == native.CANDIDATE_GRID:
        assert grid is not None
        split = one_pass_grid(lens.size, num_heads, num_kv_heads, grid.former_head, grid.kv_split_tokens,
                              grid.kv_core_num, core_count)
    return split, gather.tobytes()


def _decide_numpy(split: CoreSplit, lens: np.ndarray, *, num_heads: int, num_kv_heads: int, block_size: int,
                  head_dim: int, core_count: int, grid_fixed: bool, rule: GridRule) -> tuple[CoreSplit, bytes | None]:
    """The decision in numpy: the reference ``tiling/csrc/pa_balance.c`` (``pa_balance_decide``) must match."""
    kw = {"num_heads": num_heads, "num_kv_heads": num_kv_heads, "block_size": block_size}
    del head_dim  # in the rule's split limit
    passes = _Passes(split, lens, num_heads, block_size, rule)
    work = _core_work(passes, np.argsort(lens, kind="stable"))
    mean = work.mean()
    if work.max() <= (1.0 + MIN_GAIN) * mean:
        return split, None
    longest = np.argsort(-lens, kind="stable")  # the tail pass takes the first tail_batch of these
    bound = max(mean, float(passes.tail[longest[:split.tail_batch]].max(initial=0.0)),
                float(passes.former[longest[split.tail_batch:]].max(initial=0.0)))

    def try_candidate() -> tuple[CoreSplit, np.ndarray, float] | None:
        grid = None if grid_fixed else split_kv_candidate(split, lens, core_count=core_count, rule=rule, **kw)
        if grid is None:
            return None
        gather, load = balanced_gather(grid, lens, rule=rule, **kw)
        return grid, gather, float(load.max())

    candidate = try_candidate() if bound > (1.0 + MIN_GAIN) * mean else None
    if candidate is not None and candidate[2] <= (1.0 - MIN_GAIN) * bound:
        return candidate[0], candidate[1].tobytes()
    best: tuple[CoreSplit, bytes | None] = (split, None)
    best_end = float(work.max())
    gather, balanced = _balanced_gather(passes)
    if balanced.max() < best_end:
        best, best_end = (split, gather.tobytes()), float(balanced.max())
    if best_end <= (1.0 + MIN_GAIN) * mean:
        return best
    if candidate is None and bound <= (1.0 + MIN_GAIN) * mean:
        candidate = try_candidate()
    if candidate is not None and candidate[2] <= (1.0 - MIN_GAIN) * best_end:
        return candidate[0], candidate[1].tobytes()
    return best
