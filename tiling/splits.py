"""How a decode batch is cut into per-core tasks: ATB's split rules, with the departures the ABI header lists.

Pure integer arithmetic, no arrays.  The rules follow ATB's ``SplitCoreND`` family:

* **BN** (split by batch x head, one task per whole sequence): the default once there are enough
  (sequence, head) pairs to fill the cores.
* **BNS / split-KV** (batch x head x KV range, then a combine): few sequences, or long ones.

``tiling/planner.py`` turns a :class:`CoreSplit` into tiling words.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from tiling import abi

Strategy = Literal["auto", "bn", "split_kv"]
STRATEGIES: tuple[str, ...] = ("auto", "bn", "split_kv")

#: ATB: a sequence is "long" once it spans two 128-token slices per core ...
LONG_SEQ_TOKENS_PER_CORE = 256
#: ... and split-KV / long-sequence choices only apply while the batch fills at most 80 % of the cores.
SPLIT_KV_CORE_RATIO = 0.8
#: ATB splits heads further only while batch x splits leave more than 10 % of the cores idle.
SPLIT_HEAD_CORE_RATIO = 0.9
#: ATB refines the tail pass's head split when fewer than this many tail tasks remain.
TAIL_REFINE_TASKS = 16
#: ATB's measured special case: batch 16 with 32 heads runs best with 8 heads per task.
SPECIAL_BATCH, SPECIAL_HEADS, SPECIAL_HEAD_SPLIT = 16, 32, 8
#: HEADNUM_MOVE for MHA with small heads: one K load covers two adjacent kv heads.
MHA_HEADNUM_MOVE = 2
MHA_HEADNUM_MOVE_MAX_DIM = 128
#: Departure 9: a token's K/V rows of this many bytes or more move at full DMA efficiency (the timing model's
#: burst curve, docs/TIMING_MODEL.md); the small-batch grid gives each task enough KV heads to reach it.
FULL_BURST_BYTES = 512
#: bytes per K/V element (fp16 and bf16)
KV_ELEM_BYTES = 2
#: The kernel's cube->vector hand-off (tokens): a small-batch range shorter than this saves no hand-off, it
#: only adds combine partials, so it is taken only to avoid a second round of tasks.
HANDOFF_TOKENS = abi.S_HALF_ELEMS // abi.HEAD_SPLIT_LIMIT


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def round_up(a: int, b: int) -> int:
    return ceil_div(a, b) * b


@dataclass(frozen=True)
class TileChoice:
    """Tokens per inner tile and whether the page is split (tile divides the page)."""

    tile_tokens: int
    split_block: bool


def kv_align_tokens(max_kv: int, block_size: int) -> int:
    """Tokens of the longest sequence rounded up to whole pages (at least one page, for all-empty batches)."""
    return max(round_up(max_kv, block_size), block_size)


def choose_tile(block_size: int, head_dim: int) -> TileChoice:
    """The tile rule of the ABI header: two small pages per tile, one page, or a slice of a large page."""
    if block_size <= 64 and 2 * block_size * head_dim <= abi.TILE_ELEMS_LIMIT:
        return TileChoice(2 * block_size, False)
    big_head_page = head_dim == abi.MAX_HEAD_DIM and block_size >= abi.SPLIT_BLOCK_TILE_TOKENS
    if block_size * head_dim <= abi.TILE_ELEMS_LIMIT and not big_head_page:
        return TileChoice(block_size, False)
    return TileChoice(min(abi.SPLIT_BLOCK_TILE_TOKENS, block_size), True)  # a 64-token page only at MLA's D 512


def combine_split_limit(head_dim: int) -> int:
    """Largest kvCN the combine can hold: kvCN x round8(D) floats fit the vector core's buffer."""
    return abi.COMBINE_UB_FLOATS // round_up(head_dim, 8)


def group_aligned_head_split(head_split: int, group: int) -> int:
    """Departure 3: a split of at least one group becomes whole groups, so no task straddles two."""
    if head_split < group:
        return head_split
    up = round_up(head_split, group)
    if up <= abi.HEAD_SPLIT_LIMIT:
        return up
    return max(group, head_split // group * group)


def group_move(head_split: int, group: int, num_kv_heads: int) -> int:
    """ATB's ``CalcuHeadNd``: q heads that share one K/V tile load in the cube."""
    if head_split == 0:
        return 0
    if head_split % group == 0:
        return group
    if head_split < group and (num_kv_heads == 1 or group % head_split == 0):
        return head_split
    return 1


@dataclass(frozen=True)
class CoreSplit:
    """The task grid: what tiling words 8-11, 20-21, 23-24 say, plus the launched core count."""

    strategy: Literal["bn", "split_kv"]
    block_dim: int
    former_batch: int
    former_head: int
    tail_batch: int
    tail_head: int
    former_group_move: int
    tail_group_move: int
    kv_split_tokens: int
    kv_core_num: int
    task_count: int


def is_long_sequence(max_kv: int, batch: int, core_count: int) -> bool:
    """ATB's long-sequence test, with the batch guard the upstream port dropped (departure 1)."""
    return max_kv >= core_count * LONG_SEQ_TOKENS_PER_CORE and batch <= core_count * SPLIT_KV_CORE_RATIO


def choose_strategy(batch: int, num_heads: int, max_kv: int, core_count: int, strategy: Strategy) -> str:
    if strategy != "auto":
        return strategy
    if max_kv == 0:
        return "bn"
    long_seq = is_long_sequence(max_kv, batch, core_count)
    return "bn" if batch * num_heads >= core_count * SPLIT_KV_CORE_RATIO and not long_seq else "split_kv"


def _head_split(num_heads: int, cores_per_unit: int, group: int) -> int:
    split = min(ceil_div(num_heads, cores_per_unit), abi.HEAD_SPLIT_LIMIT)
    return group_aligned_head_split(split, group)


def split_bn(
    batch: int, num_heads: int, num_kv_heads: int, max_kv: int, block_size: int, core_count: int
) -> CoreSplit:
    """ATB's ``SplitCoreBNND``: whole sequences; a tail pass with finer heads evens out the last round."""
    group = num_heads // num_kv_heads
    cores_per_batch = ceil_div(core_count, batch)
    head_split = _head_split(num_heads, cores_per_batch, group)
    if batch == SPECIAL_BATCH and num_heads == SPECIAL_HEADS:
        head_split = group_aligned_head_split(SPECIAL_HEAD_SPLIT, group)
    loop_len = ceil_div(num_heads, head_split)
    tasks = loop_len * batch
    former_batch, tail_batch, tail_head = batch, 0, 0
    if tasks > core_count:
        former_batch = tasks // core_count * core_count // loop_len
        tail_batch = batch - former_batch
        remain = tail_batch * loop_len
        refine = tail_batch > 0 and remain < TAIL_REFINE_TASKS
        if num_kv_heads != num_heads:
            refine = refine and tail_batch <= core_count // 2
        if refine:
            tail_head = _head_split(num_heads, ceil_div(core_count, tail_batch), group)
        else:
            former_batch, tail_batch = batch, 0
    task_count = former_batch * loop_len + (tail_batch * ceil_div(num_heads, tail_head) if tail_batch else 0)
    return CoreSplit(
        strategy="bn",
        block_dim=max(1, min(tasks, core_count)),
        former_batch=former_batch,
        former_head=head_split,
        tail_batch=tail_batch,
        tail_head=tail_head,
        former_group_move=group_move(head_split, group, num_kv_heads),
        tail_group_move=group_move(tail_head, group, num_kv_heads),
        kv_split_tokens=kv_align_tokens(max_kv, block_size),
        kv_core_num=1,
        task_count=task_count,
    )


def split_kv_grid(
    batch: int, num_heads: int, num_kv_heads: int, kv_align: int, block_size: int, head_dim: int,
    pages_per_split: int, head_split: int | None, core_count: int,
) -> CoreSplit:
    """The split-KV task grid for a split length; ``head_split=None`` applies ATB's head rule."""
    group = num_heads // num_kv_heads
    kv_pages = kv_align // block_size
    # Departure 2: never more splits than the combine can hold.
    pages_per_split = max(pages_per_split, ceil_div(kv_pages, combine_split_limit(head_dim)))
    kv_split_tokens = pages_per_split * block_size
    kv_core_num = abi.kv_splits(kv_align, block_size, kv_split_tokens)
    if head_split is None:
        cores_per_kv = 1
        if batch * kv_core_num < core_count * SPLIT_HEAD_CORE_RATIO:
            cores_per_kv = ceil_div(core_count, batch * kv_core_num)
        head_split = _head_split(num_heads, cores_per_kv, group)
    return one_pass_grid(batch, num_heads, num_kv_heads, head_split, kv_split_tokens, kv_core_num, core_count)


def one_pass_grid(batch: int, num_heads: int, num_kv_heads: int, head_split: int, kv_split_tokens: int,
                  kv_core_num: int, core_count: int) -> CoreSplit:
    """A grid of the former pass only: every sequence x head chunk x KV split, on at most ``core_count`` cores."""
    tasks = ceil_div(num_heads, head_split) * batch * kv_core_num
    return CoreSplit(
        # A "split" into one range is a BN grid: say what the kernel will do, not what was asked.
        strategy="split_kv" if kv_core_num > 1 else "bn",
        block_dim=max(1, min(tasks, core_count)),
        former_batch=batch,
        former_head=head_split,
        tail_batch=0,
        tail_head=0,
        former_group_move=group_move(head_split, num_heads // num_kv_heads, num_kv_heads),
        tail_group_move=0,
        kv_split_tokens=kv_split_tokens,
        kv_core_num=kv_core_num,
        task_count=tasks,
    )


def split_kv(
    batch: int, num_heads: int, num_kv_heads: int, max_kv: int, block_size: int, head_dim: int, core_count: int
) -> CoreSplit:
    """ATB's ``SplitCoreBNSND``: each sequence's pages are cut into kvCN ranges, combined afterwards."""
    kv_align = kv_align_tokens(max_kv, block_size)
    kv_pages = kv_align // block_size
    if is_long_sequence(max_kv, batch, core_count):
        pages_per_split = ceil_div(kv_pages, core_count)
    else:
        pages_per_split = ceil_div(kv_pages, ceil_div(core_count, batch))
    return split_kv_grid(batch, num_heads, num_kv_heads, kv_align, block_size, head_dim, pages_per_split, None,
                          core_count)


def split_kv_whole_groups(
    batch: int, num_heads: int, num_kv_heads: int, max_kv: int, block_size: int, head_dim: int, core_count: int
) -> CoreSplit:
    """Departure 8: fill the cores by cutting the KV range, never a KV group, so K/V are read once.

    Each task takes a whole group of query heads (at most ``HEAD_SPLIT_LIMIT``); the sequence is cut into
    as many ranges as it takes for batch x groups x ranges to cover the cores.
    """
    group = num_heads // num_kv_heads
    head_split = min(group, abi.HEAD_SPLIT_LIMIT)
    head_tasks = ceil_div(num_heads, head_split) * batch
    kv_align = kv_align_tokens(max_kv, block_size)
    pages_per_split = ceil_div(kv_align // block_size, ceil_div(core_count, head_tasks))
    return split_kv_grid(batch, num_heads, num_kv_heads, kv_align, block_size, head_dim, pages_per_split,
                          head_split, core_count)


def split_small_batch(
    batch: int, num_heads: int, num_kv_heads: int, max_kv: int, block_size: int, head_dim: int, core_count: int
) -> CoreSplit | None:
    """Departure 9: the small-batch split-KV grid, one round of tasks with long K/V bursts.

    Each task takes the fewest whole KV groups whose K row per token reaches ``FULL_BURST_BYTES`` (two KV
    heads at D 128), and each sequence is cut into as many page ranges as leave every core one task.
    ``split_cores`` takes it when its ranges hold at least one hand-off or the grid it replaces needs a second
    round of tasks; the frozen timing model then ranks it first or within 1 % of the best one-pass grid at the
    published batch-1 shapes (``python -m timing.plan_search``, kernel/npu/PERFORMANCE.md).  None when the
    grid would not cut the KV range at least twice.
    """
    group = num_heads // num_kv_heads
    kv_per_task = min(num_kv_heads, ceil_div(FULL_BURST_BYTES, head_dim * KV_ELEM_BYTES))
    head_split = kv_per_task * group
    if head_split > abi.HEAD_SPLIT_LIMIT:
        return None
    ranges = core_count // (batch * ceil_div(num_heads, head_split))
    if ranges < 2:
        return None
    kv_align = kv_align_tokens(max_kv, block_size)
    split = split_kv_grid(batch, num_heads, num_kv_heads, kv_align, block_size, head_dim,
                           ceil_div(kv_align // block_size, ranges), head_split, core_count)
    return split if split.kv_core_num >= 2 else None


def splits_a_group(split: CoreSplit, group: int) -> bool:
    """Whether some task holds fewer heads of a KV group than a whole-group task could (K/V read again)."""
    whole = min(group, abi.HEAD_SPLIT_LIMIT)
    heads = [split.former_head] + ([split.tail_head] if split.tail_batch else [])
    return any(h < whole for h in heads)


def max_task_rows(head_dim: int) -> int:
    """Rows (heads x query tokens) of one task the scratch holds: o_tmp's half of round16(D)-wide rows, at most
    ``abi.MAX_TASK_ROWS`` (128 up to D = 256; 64 at MLA's D = 512)."""
    return min(abi.MAX_TASK_ROWS, abi.O_TMP_HALF_ELEMS // round_up(head_dim, abi.TILE_ALIGN_TOKENS))


def cap_task_rows(split: CoreSplit, q_len: int, num_heads: int, num_kv_heads: int,
                  head_dim: int = abi.MAX_HEAD_DIM) -> CoreSplit:
    """With ``q_len`` query tokens a task computes heads x q_len rows; the scratch holds
    :func:`max_task_rows` of them, so tasks of more heads than ``max_task_rows // q_len`` are cut to that many,
    whole KV groups where a group fits.  The task loop strides by the launched cores, so more tasks per pass
    need no change of ``block_dim``."""
    limit = max(1, max_task_rows(head_dim) // q_len)
    if max(split.former_head, split.tail_head) <= limit:
        return split
    group = num_heads // num_kv_heads

    def cut(heads: int) -> int:
        if heads <= limit:
            return heads
        return limit // group * group if group <= limit else limit

    former = cut(split.former_head) if split.former_batch else split.former_head
    tail = cut(split.tail_head) if split.tail_batch else split.tail_head
    per_pass = ceil_div(num_heads, former) * split.kv_core_num if split.former_batch else 0
    tasks = split.former_batch * per_pass + (split.tail_batch * ceil_div(num_heads, tail) if split.tail_batch else 0)
    return replace(
        split, former_head=former, tail_head=tail, task_count=tasks,
        former_group_move=group_move(former, group, num_kv_heads) if split.former_batch else split.former_group_move,
        tail_group_move=group_move(tail, group, num_kv_heads) if split.tail_batch else split.tail_group_move,
    )


def headnum_move(num_heads: int, num_kv_heads: int, head_dim: int) -> int:
    """ATB: MHA with D <= 128 (a multiple of 16) loads two kv heads per K transfer."""
    aligned = head_dim % abi.TILE_ALIGN_TOKENS == 0 and head_dim <= MHA_HEADNUM_MOVE_MAX_DIM
    return MHA_HEADNUM_MOVE if num_heads == num_kv_heads and aligned else 1


def split_cores(
    batch: int,
    num_heads: int,
    num_kv_heads: int,
    max_kv: int,
    block_size: int,
    head_dim: int,
    core_count: int,
    strategy: Strategy,
) -> CoreSplit:
    """Pick BN or split-KV (ATB's rule unless forced) and compute its task grid.

    In ``auto`` mode a grid that would cut a KV group across tasks is replaced by the whole-group split-KV
    grid (departure 8): decode is memory-bound, and each extra task on a group reads its K/V again.  A split-KV
    grid then gives way to the small-batch grid where that applies (departure 9).
    """
    chosen = choose_strategy(batch, num_heads, max_kv, core_count, strategy)
    if chosen == "bn":
        split = split_bn(batch, num_heads, num_kv_heads, max_kv, block_size, core_count)
    else:
        split = split_kv(batch, num_heads, num_kv_heads, max_kv, block_size, head_dim, core_count)
    if strategy != "auto" or max_kv == 0:
        return split
    if splits_a_group(split, num_heads // num_kv_heads):
        split = split_kv_whole_groups(batch, num_heads, num_kv_heads, max_kv, block_size, head_dim, core_count)
    if split.kv_core_num > 1:
        small = split_small_batch(batch, num_heads, num_kv_heads, max_kv, block_size, head_dim, core_count)
        if small is not None and (small.kv_split_tokens >= HANDOFF_TOKENS or split.task_count > core_count):
            return small
    return split
