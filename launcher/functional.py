"""``paged_attention``: the one-call form of :class:`~launcher.runner.PagedAttentionRunner`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, overload

import torch

from launcher.backends import Backend
from launcher.runner import PagedAttentionRunner


@overload
def paged_attention(
    query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, block_table: torch.Tensor,
    context_lens: torch.Tensor | Sequence[int], *, scale: float | None = None, window_left: int = -1,
    sinks: torch.Tensor | None = None, return_lse: Literal[False] = False, backend: str | Backend | None = None,
    batch_invariant: bool = False,
) -> torch.Tensor: ...


@overload
def paged_attention(
    query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, block_table: torch.Tensor,
    context_lens: torch.Tensor | Sequence[int], *, scale: float | None = None, window_left: int = -1,
    sinks: torch.Tensor | None = None, return_lse: Literal[True], backend: str | Backend | None = None,
    batch_invariant: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]: ...


def paged_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_table: torch.Tensor,
    context_lens: torch.Tensor | Sequence[int],
    *,
    scale: float | None = None,
    window_left: int = -1,
    sinks: torch.Tensor | None = None,
    return_lse: bool = False,
    backend: str | Backend | None = None,
    batch_invariant: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Paged-attention decode: a new tensor of the query's shape, or ``(out, lse)`` with ``return_lse=True``.

    ``query`` ``[batch, num_heads, head_dim]`` (one token per sequence) or ``[batch, q_len, num_heads,
    head_dim]`` (q_len 1..16), fp16 or bf16; ``key_cache``/``value_cache`` ``[num_blocks, block_size,
    num_kv_heads, head_dim]`` (same dtype), ``block_table`` int32 ``[batch, max_pages]``, ``context_lens`` int32
    tensor or list of ints ``[batch]``: each counts the sequence's query tokens (token s sits at position
    ``context_len - q_len + s`` and attends causally to keys up to it; 0 gives a zero row and lse ``-inf``).
    ``scale`` default ``1/sqrt(head_dim)``; ``window_left`` -1 (no window) or W >= 0 (keys ``p - W .. p``; pages
    wholly before the window may hold -1); ``sinks`` a ``[num_heads]`` float32/float16/bfloat16 tensor, one
    logit per query head joining the softmax denominator only; ``return_lse`` also returns the natural-log lse
    of each row's scaled logits (sink included), float32 ``[batch, (q_len,) num_heads]``.  ``backend`` default
    from the query's device (CPU -> mock, npu -> npu).  Query head ``h`` attends to KV head
    ``h // (num_heads // num_kv_heads)``.  ``batch_invariant=True`` makes each sequence's output the same bits
    whatever else is in the batch and whatever the core count (:mod:`tiling.invariant`; RL rollouts that must
    match a single-sequence replay).

    Every call validates and plans; a decode loop should keep a runner and call ``update`` instead.
    """
    runner = PagedAttentionRunner(query, key_cache, value_cache, block_table, context_lens, scale=scale,
                                  backend=backend, batch_invariant=batch_invariant, window_left=window_left,
                                  sinks=sinks, return_lse=return_lse)
    return runner()
