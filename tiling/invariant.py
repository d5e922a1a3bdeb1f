"""The planner's batch-invariant mode: a task grid whose arithmetic per sequence never depends on the batch.

A sequence's output is a function of the order in which its tokens are folded into the online softmax and
of how its KV splits are combined.  The default planner picks the KV split length, the head split and the
tile from the whole batch and the core count, so the same sequence is summed in a different order when its
neighbours change (a sequence alone and inside a batch of 16 differ by up to 1e-3 in bf16).  This mode pins
all three, per (block_size, head_dim) only:

* **KV split points** at fixed absolute token positions: every split is :data:`INVARIANT_SPLIT_TOKENS`
  tokens (a multiple of every supported page size and of the NPU kernel's 512-token hand-off), so a
  sequence of ``n`` tokens always has the splits ``[0, S), [S, 2S), ...``.  The combine reads only the
  sequence's own splits, in split order (``pa_splits_of``/``SplitsOf`` in the kernels), whatever kvCN is.
* **The hand-off tile** (``BLOCKSIZE_CALC``): :func:`invariant_tile`, a fixed rule of this mode, not the
  planner's tile choice (which may be tuned per shape).
* **The head split**: whole KV groups (``min(group, HEAD_SPLIT_LIMIT)`` query heads per task).

The core count only decides which core runs which task (``block_dim``), never what a task computes.  What
remains batch-dependent is whether the launch uses the split-KV key at all: the ABI requires kvCN to be the
longest sequence's split count, so a batch whose sequences all fit one split is launched without a combine.
A sequence of at most one split is then computed by the no-split path; the tests check that both paths give
the same bits (the combine of a single partial is an exact identity in both kernels).

Cost: fewer tasks than the default planner at small batch and long context (the split length is not
shortened to fill the cores), and a combine pass for every batch with a sequence longer than one split.
"""

from __future__ import annotations

from tiling import abi
from tiling.splits import CoreSplit, TileChoice, ceil_div, combine_split_limit, one_pass_grid, round_up

#: Tokens per KV split in batch-invariant mode.  2048 keeps the longest context the combine can hold at
#: 128K tokens for head_dim <= 128 (64 splits) and 64K for head_dim 256 (32 splits).
INVARIANT_SPLIT_TOKENS = 2048
#: Tokens per hand-off tile in batch-invariant mode, by head_dim: 128 while 128 x D fits a tile, else 64.
INVARIANT_TILE_TOKENS = 128
INVARIANT_TILE_TOKENS_LARGE_HEAD = 64


def invariant_tile(block_size: int, head_dim: int) -> TileChoice:
    """The pinned tile: a whole number of small pages, or a slice of a large one (ABI header tile rule)."""
    tokens = INVARIANT_TILE_TOKENS if INVARIANT_TILE_TOKENS * head_dim <= abi.TILE_ELEMS_LIMIT \
        else INVARIANT_TILE_TOKENS_LARGE_HEAD
    return TileChoice(tokens, split_block=tokens < block_size)


def max_invariant_context(head_dim: int) -> int:
    """The longest context batch-invariant mode can plan: as many splits as the combine holds."""
    return combine_split_limit(head_dim) * INVARIANT_SPLIT_TOKENS


def split_invariant(batch: int, num_heads: int, num_kv_heads: int, max_kv: int, block_size: int, head_dim: int,
                    core_count: int) -> CoreSplit:
    """The batch-invariant task grid: whole-group tasks, one per fixed-length KV split that some sequence has."""
    limit = max_invariant_context(head_dim)
    if max_kv > limit:
        raise ValueError(
            f"batch_invariant=True supports contexts up to {limit} tokens at head_dim {head_dim} "
            f"({combine_split_limit(head_dim)} splits of {INVARIANT_SPLIT_TOKENS}), got {max_kv}")
    group = num_heads // num_kv_heads
    head_split = min(group, abi.HEAD_SPLIT_LIMIT)
    kv_align = max(round_up(max_kv, block_size), block_size)
    kv_core_num = ceil_div(kv_align, INVARIANT_SPLIT_TOKENS)
    return one_pass_grid(batch, num_heads, num_kv_heads, head_split, INVARIANT_SPLIT_TOKENS, kv_core_num, core_count)
