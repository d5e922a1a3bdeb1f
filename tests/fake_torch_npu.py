"""A fake ``torch_npu`` for CPU tests of how the benchmark calls CANN's attention operators.

Each operator binds its arguments to the documented signature (a wrong keyword is a ``TypeError``).  FIA in
the TND layout also enforces the documented TND rules a decode call must follow, and then *computes* the
attention from what it was given (float32 on the CPU), so a call that passes the rules but means something
else (per-sequence instead of cumulative query lengths, the wrong block table, a wrong KV view) gives a
wrong answer and fails the golden check.  The rules (torch_npu 7.x FIA reference; head_dim set per
vLLM-Ascend's use of TND):

* ``query`` ``[T, num_heads, D]`` with ``D`` in 64, 128, 192; same dtype as ``key``/``value``;
* ``key``/``value`` the paged cache ``[num_blocks, block_size, num_key_value_heads * D]``, equal shapes;
  ``block_size`` equals ``key.shape[1]``, a multiple of 16 and at most 512;
* ``num_heads`` a multiple of ``num_key_value_heads``;
* ``actual_seq_lengths`` (cumulative query lengths) and ``actual_seq_lengths_kv`` (KV length per sequence)
  are lists of Python ints of the same length ``B``; the cumulative lengths strictly increase and end at
  ``T``; every KV length fits the block table row;
* ``block_table`` int32 ``[B, max_blocks]``;
* ``sparse_mode=3`` takes a bool/int8/uint8 ``atten_mask`` of ``2048 x 2048``.
"""

from __future__ import annotations

import inspect
import types
from typing import Any

import torch

TND_HEAD_DIMS = (64, 128, 192)
MAX_BLOCK_SIZE = 512
BLOCK_ALIGN = 16
MASK_SIDE = 2048
MASK_DTYPES = (torch.bool, torch.int8, torch.uint8)

Calls = list[tuple[str, tuple[Any, ...], dict[str, Any]]]


def documented_ifa(query: Any, key: Any, value: Any, *, padding_mask=None, pse_shift=None, atten_mask=None,
                   actual_seq_lengths=None, dequant_scale1=None, quant_scale1=None, dequant_scale2=None,
                   quant_scale2=None, quant_offset2=None, antiquant_scale=None, antiquant_offset=None,
                   block_table=None, kv_padding_size=None, num_heads=1, scale_value=1.0, input_layout="BSH",
                   num_key_value_heads=0, block_size=0, inner_precise=1) -> Any:
    """torch_npu.npu_incre_flash_attention as documented (torch_npu 6.0.0+)."""


def documented_fia(query: Any, key: Any, value: Any, *, pse_shift=None, atten_mask=None, actual_seq_lengths=None,
                   actual_seq_lengths_kv=None, block_table=None, num_heads=1, scale=1.0,
                   pre_tokens=2147483647, next_tokens=2147483647, input_layout="BSH", num_key_value_heads=0,
                   sparse_mode=0, inner_precise=0, block_size=0, antiquant_mode=0,
                   softmax_lse_flag=False) -> Any:
    """torch_npu.npu_fused_infer_attention_score (7.x), the arguments a paged decode uses."""


def _int_list(value: Any, name: str) -> list[int]:
    if not isinstance(value, list) or not all(type(item) is int for item in value):
        raise TypeError(f"FIA TND: {name} must be a list of Python ints, got {type(value).__name__}")
    return value


def check_fia_tnd(kw: dict[str, Any]) -> None:
    """Raise ``ValueError``/``TypeError`` naming the first documented TND rule ``kw`` breaks."""
    q, k, v, table = kw["query"], kw["key"], kw["value"], kw.get("block_table")
    heads, kv_heads, block = kw.get("num_heads", 1), kw.get("num_key_value_heads", 0), kw.get("block_size", 0)
    if q.dim() != 3 or q.shape[1] != heads:
        raise ValueError(f"FIA TND: query must be [T, num_heads={heads}, D], got {tuple(q.shape)}")
    d = q.shape[2]
    if d not in TND_HEAD_DIMS:
        raise ValueError(f"FIA TND: head_dim must be one of {TND_HEAD_DIMS}, got {d}")
    if kv_heads < 1 or heads % kv_heads:
        raise ValueError(f"FIA: num_heads {heads} must be a multiple of num_key_value_heads {kv_heads}")
    if k.dim() != 3 or tuple(k.shape) != tuple(v.shape) or k.shape[2] != kv_heads * d or k.shape[1] != block:
        raise ValueError(f"FIA paged KV must be [num_blocks, block_size={block}, {kv_heads}*{d}], got "
                         f"key {tuple(k.shape)}, value {tuple(v.shape)}")
    if block % BLOCK_ALIGN or not 0 < block <= MAX_BLOCK_SIZE:
        raise ValueError(f"FIA: block_size must be a multiple of {BLOCK_ALIGN} up to {MAX_BLOCK_SIZE}, got {block}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"FIA: query/key/value dtypes differ: {q.dtype}, {k.dtype}, {v.dtype}")
    cumulative = _int_list(kw.get("actual_seq_lengths"), "actual_seq_lengths")
    kv_lens = _int_list(kw.get("actual_seq_lengths_kv"), "actual_seq_lengths_kv")
    if len(cumulative) != len(kv_lens):
        raise ValueError(f"FIA TND: actual_seq_lengths ({len(cumulative)}) and actual_seq_lengths_kv "
                         f"({len(kv_lens)}) must have one entry per sequence each")
    steps = [b - a for a, b in zip([0, *cumulative[:-1]], cumulative, strict=True)]
    if any(step < 1 for step in steps) or (cumulative and cumulative[-1] != q.shape[0]):
        raise ValueError(f"FIA TND: actual_seq_lengths must be cumulative query lengths ending at T={q.shape[0]}, "
                         f"got {cumulative}")
    if table is None or table.dtype != torch.int32 or table.dim() != 2 or table.shape[0] != len(kv_lens):
        raise ValueError(f"FIA: block_table must be int32 [B={len(kv_lens)}, max_blocks], got "
                         f"{None if table is None else (table.dtype, tuple(table.shape))}")
    if any(not 0 <= n <= table.shape[1] * block for n in kv_lens):
        raise ValueError(f"FIA: actual_seq_lengths_kv {kv_lens} must fit {table.shape[1]} blocks of {block}")
    if kw.get("sparse_mode", 0) == 3:
        mask = kw.get("atten_mask")
        if mask is None or tuple(mask.shape) != (MASK_SIDE, MASK_SIDE) or mask.dtype not in MASK_DTYPES:
            raise ValueError(f"FIA: sparse_mode=3 needs a {MASK_SIDE}x{MASK_SIDE} bool/int8 atten_mask, got "
                             f"{None if mask is None else (mask.dtype, tuple(mask.shape))}")


def fia_tnd_attention(kw: dict[str, Any]) -> torch.Tensor:
    """What FIA computes for a TND decode call whose arguments passed :func:`check_fia_tnd` (causal within
    each sequence's query tokens, which for one token per sequence is no mask)."""
    q, k, v, table = kw["query"], kw["key"], kw["value"], kw["block_table"]
    heads, kv_heads, block = kw["num_heads"], kw["num_key_value_heads"], kw["block_size"]
    scale = kw.get("scale", 1.0)
    d = q.shape[2]
    out = torch.zeros(q.shape, dtype=torch.float32)
    starts = [0, *kw["actual_seq_lengths"][:-1]]
    for seq, (start, end, length) in enumerate(zip(starts, kw["actual_seq_lengths"], kw["actual_seq_lengths_kv"],
                                                   strict=True)):
        if length == 0:
            continue
        pages = table[seq, :-(-length // block)].long()
        keys = k[pages].reshape(-1, kv_heads, d)[:length].float()
        values = v[pages].reshape(-1, kv_heads, d)[:length].float()
        for token in range(start, end):
            visible = length - (end - 1 - token)  # causal: later query tokens see more
            for head in range(heads):
                kv = head // (heads // kv_heads)
                scores = keys[:visible, kv] @ q[token, head].float() * scale
                out[token, head] = torch.softmax(scores, dim=0) @ values[:visible, kv]
    return out.to(q.dtype)


def fake_torch_npu(calls: Calls) -> types.SimpleNamespace:
    """A module-like object with IFA (records, returns zeros) and FIA (TND: checks the rules, computes)."""
    def ifa(*args: Any, **kwargs: Any) -> Any:
        inspect.signature(documented_ifa).bind(*args, **kwargs)  # TypeError if it does not match the docs
        calls.append(("ifa", args, kwargs))
        return torch.zeros_like(kwargs["query"])

    def fia(*args: Any, **kwargs: Any) -> Any:
        inspect.signature(documented_fia).bind(*args, **kwargs)
        calls.append(("fia", args, kwargs))
        if kwargs.get("input_layout") == "TND":
            check_fia_tnd(kwargs)
            return fia_tnd_attention(kwargs), None
        return torch.zeros_like(kwargs["query"]), None

    return types.SimpleNamespace(npu_incre_flash_attention=ifa, npu_fused_infer_attention_score=fia)
