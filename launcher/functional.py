"""``paged_attention``: the one-call form of :class:`~launcher.runner.PagedAttentionRunner`."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from launcher.backends import Backend
from launcher.runner import PagedAttentionRunner


def paged_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_table: torch.Tensor,
    context_lens: torch.Tensor | Sequence[int],
    *,
    scale: float | None = None,
    backend: str | Backend | None = None,
    batch_invariant: bool = False,
) -> torch.Tensor:
    """Paged-attention decode: a new ``[batch, num_heads, head_dim]`` tensor.

    ``query`` ``[batch, num_heads, head_dim]`` (fp16 or bf16), ``key_cache``/``value_cache``
    ``[num_blocks, block_size, num_kv_heads, head_dim]`` (same dtype), ``block_table`` int32
    ``[batch, max_pages]``, ``context_lens`` int32 tensor or list of ints ``[batch]`` (0 gives a zero row),
    ``scale`` default ``1/sqrt(head_dim)``; ``backend`` default from the query's device (CPU -> mock,
    npu -> npu).  Query head ``h`` attends to KV head ``h // (num_heads // num_kv_heads)``.
    ``batch_invariant=True`` makes each sequence's output the same bits whatever else is in the batch and
    whatever the core count (:mod:`tiling.invariant`; RL rollouts that must match a single-sequence replay).

    Every call validates and plans; a decode loop should keep a runner and call ``update`` instead.
    """
    runner = PagedAttentionRunner(query, key_cache, value_cache, block_table, context_lens, scale=scale,
                                  backend=backend, batch_invariant=batch_invariant)
    return runner()
