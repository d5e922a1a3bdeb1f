"""``merge_by_lse``: combine partial attention outputs of disjoint key sets by their log-sum-exp.

Decode context parallelism (vLLM-Ascend's DCP, SGLang's): each rank holds a shard of every sequence's KV pages,
runs pa-kit on its shard with ``return_lse=True`` and the ranks exchange ``(out_r, lse_r)``.  Attention over
the union of the shards is then, per row (sequence, query token, head)::

    lse = log(sum_r exp(lse_r) [+ exp(sink)])        out = sum_r exp(lse_r - lse) * out_r

which is exact because each ``out_r`` is already normalised by its own ``exp(lse_r)``.  A sink joins the
denominator once overall, so the ranks run without sinks and the merge adds them (adding them on every rank
would count each sink once per rank).  The split-KV combine inside the kernel does the same for one launch's
KV splits (``docs/CONTRACT.md``, "Split-KV combine"); this is its host-side counterpart across launches.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

#: Output element types the merge takes (pa-kit's fp16/bf16 outputs; float32/float64 for goldens and tests).
OUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
LSE_DTYPES = (torch.float32, torch.float64)


def _as_list(parts: Sequence[torch.Tensor] | torch.Tensor, name: str) -> list[torch.Tensor]:
    if isinstance(parts, torch.Tensor):
        if parts.dim() < 2:
            raise ValueError(f"{name} as one tensor must be [shards, ...], got shape {tuple(parts.shape)}")
        return list(parts.unbind(0))
    if isinstance(parts, (str, bytes)) or not isinstance(parts, Sequence):
        raise TypeError(f"{name} must be a sequence of tensors or one [shards, ...] tensor, got "
                        f"{type(parts).__name__}")
    items = list(parts)
    for index, item in enumerate(items):
        if not isinstance(item, torch.Tensor):
            raise TypeError(f"{name}[{index}] must be a torch.Tensor, got {type(item).__name__}")
    return items


def _check(outs: list[torch.Tensor], lses: list[torch.Tensor], sinks: torch.Tensor | None) -> None:
    if not outs:
        raise ValueError("outputs must hold at least one shard's output, got none")
    if len(lses) != len(outs):
        raise ValueError(f"lses must hold one lse per output ({len(outs)}), got {len(lses)}")
    first = outs[0]
    if first.dtype not in OUT_DTYPES:
        raise TypeError(f"outputs must be one of {OUT_DTYPES}, got {first.dtype}")
    if first.dim() < 2:
        raise ValueError(f"each output must be [..., head_dim] with at least a head axis, got {tuple(first.shape)}")
    rows = first.shape[:-1]
    for index, (out, lse) in enumerate(zip(outs, lses, strict=True)):
        if out.shape != first.shape or out.dtype != first.dtype or out.device != first.device:
            raise ValueError(f"outputs[{index}] must match outputs[0] ({tuple(first.shape)}, {first.dtype}, "
                             f"{first.device}), got ({tuple(out.shape)}, {out.dtype}, {out.device})")
        if lse.dtype not in LSE_DTYPES:
            raise TypeError(f"lses[{index}] dtype must be torch.float32 or torch.float64 (pa-kit's lse is float32), "
                            f"got {lse.dtype}")
        if lse.shape != rows or lse.device != first.device:
            raise ValueError(f"lses[{index}] must be the outputs' shape without head_dim, {tuple(rows)} on "
                             f"{first.device}, got {tuple(lse.shape)} on {lse.device}")
    if sinks is not None:
        if not isinstance(sinks, torch.Tensor):
            raise TypeError(f"sinks must be a torch.Tensor [num_heads], got {type(sinks).__name__}")
        if sinks.shape != rows[-1:] or not sinks.dtype.is_floating_point:
            raise ValueError(f"sinks must be a floating [num_heads] = {tuple(rows[-1:])} tensor, got "
                             f"{tuple(sinks.shape)} {sinks.dtype}")


def merge_by_lse(outputs: Sequence[torch.Tensor] | torch.Tensor, lses: Sequence[torch.Tensor] | torch.Tensor, *,
                 sinks: torch.Tensor | None = None, out: torch.Tensor | None = None,
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention over the union of disjoint key sets, from each set's normalised output and natural-log lse.

    ``outputs``: one ``[..., num_heads, head_dim]`` tensor per shard (pa-kit's ``out``: ``[b, (q_len,) H, D]``),
    or one tensor with a leading shard axis (what an all-gather into one buffer gives); ``lses``: the matching
    ``[..., num_heads]`` float32 (or float64) lse of each.  ``sinks``: an optional ``[num_heads]`` logit per
    head that joins every non-empty row's denominator once (the ranks then run without sinks).  ``out``: where
    to write the merged output (default: a new tensor of the outputs' shape and dtype).

    Returns ``(out, lse)``, lse float32 (float64 when a given lse is).  A shard whose lse is ``-inf`` (an empty
    shard: pa-kit writes zeros there) has weight 0 whatever its output holds; a row empty on every shard gives
    out 0 and lse ``-inf`` (with sinks too, as pa-kit's own empty rows do).  The arithmetic is float32 (float64
    when any input is); a NaN in a non-empty shard reaches the result.
    """
    outs, parts = _as_list(outputs, "outputs"), _as_list(lses, "lses")
    _check(outs, parts, sinks)
    if out is not None and (not isinstance(out, torch.Tensor) or out.shape != outs[0].shape
                            or out.device != outs[0].device or out.dtype not in OUT_DTYPES):
        got = f"{tuple(out.shape)} {out.dtype} on {out.device}" if isinstance(out, torch.Tensor) else \
            type(out).__name__
        raise ValueError(f"out must be a float tensor {tuple(outs[0].shape)} on {outs[0].device}, got {got}")
    wide = any(t.dtype == torch.float64 for t in (*outs, *parts)) or (sinks is not None and
                                                                    sinks.dtype == torch.float64)
    compute = torch.float64 if wide else torch.float32
    lse_all = torch.stack([t.to(compute) for t in parts])                  # [n, *rows]
    top = lse_all.amax(0)                                                  # -inf where every shard is empty
    empty = top == -math.inf
    if sinks is not None:
        sink = sinks.to(device=top.device, dtype=compute).expand_as(top)
        top = torch.where(empty, top, torch.maximum(top, sink))
    shift = torch.where(empty, torch.zeros_like(top), top)                 # no inf - inf on empty rows
    weights = torch.exp(lse_all - shift)                                   # an empty shard's: exp(-inf) = 0
    total = weights.sum(0)
    if sinks is not None:
        total = total + torch.where(empty, torch.zeros_like(top), torch.exp(sink - shift))
    merged = torch.zeros(outs[0].shape, dtype=compute, device=outs[0].device)
    for part, lse_part, weight in zip(outs, lse_all, weights, strict=True):
        # an empty shard adds nothing, even where its output holds NaN; a NaN lse is not -inf and propagates
        contribution = torch.where((lse_part == -math.inf)[..., None], 0.0, weight[..., None] * part.to(compute))
        merged += contribution
    merged = torch.where(empty[..., None], 0.0, merged / torch.where(empty, 1.0, total)[..., None])
    lse = torch.where(empty, -math.inf, shift + torch.log(torch.where(empty, 1.0, total)))
    lse_dtype = torch.float64 if any(t.dtype == torch.float64 for t in parts) else torch.float32
    if out is None:
        return merged.to(outs[0].dtype), lse.to(lse_dtype)
    out.copy_(merged)
    return out, lse.to(lse_dtype)
