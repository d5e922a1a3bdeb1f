"""A fake ``torch_npu`` for CPU tests of how the benchmark calls CANN's attention operators.

Each operator binds its arguments to the documented signature (a wrong keyword is a ``TypeError``).  FIA
(``npu_fused_infer_attention_score``, v1) and FIA v2 (``npu_fused_infer_attention_score_v2``) in the TND layout
enforce the documented rules a decode call must follow, then convert what they were given into pa-kit's terms
(each sequence's query tokens and context length, ``window_left``, sinks) and *compute* with the golden's
semantics (``accuracy.reference.attention_lse``, in float32), so a call that passes the rules but means
something else (per-sequence instead of cumulative query lengths, the wrong block table, a window one key off,
sinks on the wrong heads) gives a wrong answer and fails the golden check.

Rules (torch_npu's FIA v1 page, 7.x; its v2 page; head_dim set per vLLM-Ascend's use of TND):

* ``query`` ``[T, heads, D]`` with ``D`` in 64, 128, 192; same dtype as ``key``/``value``;
* ``key``/``value`` the paged cache ``[num_blocks, block_size, kv_heads * D]``, equal shapes; ``block_size`` equals
  ``key.shape[1]``, a multiple of 16, at most 512 (v1) or 1024 (v2's TND page-attention rule);
* heads a multiple of kv_heads, at most 64 query heads per KV head;
* the cumulative query lengths and the per-sequence KV lengths are lists of Python ints of one length ``B``
  (at most 4096 in v2); the cumulative lengths never decrease and end at ``T``; every KV length fits the block
  table row; ``block_table`` int32 ``[B, max_blocks]``;
* ``sparse_mode`` 0..4; modes 2, 3 and 4 take the compressed causal mask: bool/int8/uint8, ``2048 x 2048`` (or with
  leading 1s), True above the diagonal;
* v2's ``learnable_sink``: bf16 ``[num_query_heads]``, TND/NTD_TND only, value head_dim at most 128.

Masks, as CANN's sparse-mode page describes them (origin at the bottom-right corner: query row ``i`` of ``n``
against ``L`` keys sits at ``p = L - n + i``; its split example shows the ``next_tokens`` end inclusive) and as
the reference masks of CANN's test tools build them (both ends inclusive): ``sparse_mode=3`` keeps keys ``<= p``
and ignores ``pre_tokens``/``next_tokens``; ``sparse_mode=4`` (band) keeps keys ``p - pre_tokens .. p +
next_tokens``.  So pa-kit's ``window_left = W`` is ``sparse_mode=4, pre_tokens=W, next_tokens=0``.  Combinations
a decode does not use (a band reaching forward, modes 1 and 2, a custom mask, several tokens without a mask)
raise ``NotImplementedError``: the fake does not guess.

FIA v1 or v2 with ``query_rope``/``key_rope`` is CANN's MLA mode: ``fake_fia_mla.py`` checks and computes it.

Caveats from the pages: v2's says ``pre_tokens``/``next_tokens`` and ``sparse_mode`` have no effect when Q_S is 1
(without rope); vLLM-Ascend relies on ``sparse_mode=4`` in TND decode for gpt-oss, and the fake applies the band
at every query length.  Neither page says whether ``learnable_sink`` enters ``softmax_lse``; the fake's lse, like
pa-kit's, includes the sink.  On a device the golden check settles both.
"""

from __future__ import annotations

import inspect
import types
from dataclasses import asdict, dataclass
from typing import Any

import torch
from fake_fia_mla import FIA_V1_NAMES, FIA_V2_NAMES, FiaNames, fia_mla, is_mla_call
from fake_fia_mla import V2 as MLA_V2

from accuracy.reference import Features, attention_lse

TND_HEAD_DIMS = (64, 128, 192)
BLOCK_ALIGN = 16
MASK_SIDE = 2048
MASK_DTYPES = (torch.bool, torch.int8, torch.uint8)
SPARSE_MODES = range(5)
MASKED_MODES = (2, 3, 4)
MAX_GROUP = 64
NO_LIMIT = 2147483647
SINK_LAYOUTS = ("TND", "NTD_TND")
SINK_MAX_HEAD_DIM = 128

Calls = list[tuple[str, tuple[Any, ...], dict[str, Any]]]


def documented_ifa(query: Any, key: Any, value: Any, *, padding_mask=None, pse_shift=None, atten_mask=None,
                   actual_seq_lengths=None, dequant_scale1=None, quant_scale1=None, dequant_scale2=None,
                   quant_scale2=None, quant_offset2=None, antiquant_scale=None, antiquant_offset=None,
                   block_table=None, kv_padding_size=None, num_heads=1, scale_value=1.0, input_layout="BSH",
                   num_key_value_heads=0, block_size=0, inner_precise=1) -> Any:
    """torch_npu.npu_incre_flash_attention as documented (torch_npu 6.0.0+)."""


def documented_fia(query: Any, key: Any, value: Any, *, pse_shift=None, atten_mask=None, actual_seq_lengths=None,
                   actual_seq_lengths_kv=None, dequant_scale1=None, quant_scale1=None, dequant_scale2=None,
                   quant_scale2=None, quant_offset2=None, antiquant_scale=None, antiquant_offset=None,
                   block_table=None, query_padding_size=None, kv_padding_size=None, key_antiquant_scale=None,
                   key_antiquant_offset=None, value_antiquant_scale=None, value_antiquant_offset=None,
                   key_shared_prefix=None, value_shared_prefix=None, actual_shared_prefix_len=None,
                   query_rope=None, key_rope=None, key_rope_antiquant_scale=None, num_heads=1, scale=1.0,
                   pre_tokens=2147483647, next_tokens=2147483647, input_layout="BSH", num_key_value_heads=0,
                   sparse_mode=0, inner_precise=0, block_size=0, antiquant_mode=0, softmax_lse_flag=False,
                   key_antiquant_mode=0, value_antiquant_mode=0) -> Any:
    """torch_npu.npu_fused_infer_attention_score (7.x and its current page), every documented argument."""


def documented_fia_v2(query: Any, key: Any, value: Any, *, query_rope=None, key_rope=None, pse_shift=None,
                      atten_mask=None, actual_seq_qlen=None, actual_seq_kvlen=None, block_table=None,
                      dequant_scale_query=None, dequant_scale_key=None, dequant_offset_key=None,
                      dequant_scale_value=None, dequant_offset_value=None, dequant_scale_key_rope=None,
                      quant_scale_out=None, quant_offset_out=None, quant_scale_p=None, learnable_sink=None,
                      num_query_heads=1,
                      num_key_value_heads=0, softmax_scale=1.0, pre_tokens=2147483647, next_tokens=2147483647,
                      input_layout="BSH", sparse_mode=0, block_size=0, query_quant_mode=0, key_quant_mode=0,
                      value_quant_mode=0, inner_precise=0, return_softmax_lse=False, query_dtype=None,
                      key_dtype=None, value_dtype=None, query_rope_dtype=None, key_rope_dtype=None,
                      key_shared_prefix_dtype=None, value_shared_prefix_dtype=None, dequant_scale_query_dtype=None,
                      dequant_scale_key_dtype=None, dequant_scale_value_dtype=None,
                      dequant_scale_key_rope_dtype=None, out_dtype=None) -> Any:
    """torch_npu.npu_fused_infer_attention_score_v2 as its page documents it (with ``learnable_sink``)."""


@dataclass(frozen=True)
class TndNames(FiaNames):
    """v1's or v2's names of the TND arguments, and their block-size and batch limits."""

    max_block: int
    max_batch: int | None


V1 = TndNames(**asdict(FIA_V1_NAMES), max_block=512, max_batch=None)
V2 = TndNames(**asdict(FIA_V2_NAMES), max_block=1024, max_batch=4096)


def _int_list(value: Any, name: str) -> list[int]:
    if not isinstance(value, list) or not all(type(item) is int for item in value):
        raise TypeError(f"FIA TND: {name} must be a list of Python ints, got {type(value).__name__}")
    return value


def _check_mask(kw: dict[str, Any]) -> None:
    mode, mask = kw.get("sparse_mode", 0), kw.get("atten_mask")
    if mode not in SPARSE_MODES:
        raise ValueError(f"FIA: sparse_mode must be one of 0..4, got {mode}")
    if mode not in MASKED_MODES:
        return
    if mask is None or mask.dtype not in MASK_DTYPES or tuple(mask.shape[-2:]) != (MASK_SIDE, MASK_SIDE) \
            or any(n != 1 for n in mask.shape[:-2]) or mask.dim() > 4:
        raise ValueError(f"FIA: sparse_mode={mode} needs a {MASK_SIDE}x{MASK_SIDE} bool/int8 atten_mask, got "
                         f"{None if mask is None else (mask.dtype, tuple(mask.shape))}")
    template = torch.ones(MASK_SIDE, MASK_SIDE, dtype=torch.bool).triu(diagonal=1)
    if not torch.equal(mask.reshape(MASK_SIDE, MASK_SIDE).cpu().bool(), template):
        raise ValueError("FIA: the compressed mask must be True above the diagonal and False elsewhere")


def check_fia_tnd(kw: dict[str, Any], names: TndNames = V1) -> None:
    """Raise ``ValueError``/``TypeError`` naming the first documented TND rule ``kw`` breaks."""
    q, k, v, table = kw["query"], kw["key"], kw["value"], kw.get("block_table")
    heads, kv_heads, block = kw.get(names.heads, 1), kw.get("num_key_value_heads", 0), kw.get("block_size", 0)
    if q.dim() != 3 or q.shape[1] != heads:
        raise ValueError(f"FIA TND: query must be [T, {names.heads}={heads}, D], got {tuple(q.shape)}")
    d = q.shape[2]
    if d not in TND_HEAD_DIMS:
        raise ValueError(f"FIA TND: head_dim must be one of {TND_HEAD_DIMS}, got {d}")
    if kv_heads < 1 or heads % kv_heads or heads // kv_heads > MAX_GROUP:
        raise ValueError(f"FIA: {names.heads} {heads} must be a multiple of num_key_value_heads {kv_heads}, at "
                         f"most {MAX_GROUP} times it")
    if k.dim() != 3 or tuple(k.shape) != tuple(v.shape) or k.shape[2] != kv_heads * d or k.shape[1] != block:
        raise ValueError(f"FIA paged KV must be [num_blocks, block_size={block}, {kv_heads}*{d}], got "
                         f"key {tuple(k.shape)}, value {tuple(v.shape)}")
    if block % BLOCK_ALIGN or not 0 < block <= names.max_block:
        raise ValueError(f"FIA: block_size must be a multiple of {BLOCK_ALIGN} up to {names.max_block}, got {block}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"FIA: query/key/value dtypes differ: {q.dtype}, {k.dtype}, {v.dtype}")
    cumulative = _int_list(kw.get(names.q_lens), names.q_lens)
    kv_lens = _int_list(kw.get(names.kv_lens), names.kv_lens)
    if len(cumulative) != len(kv_lens) or (names.max_batch is not None and len(kv_lens) > names.max_batch):
        raise ValueError(f"FIA TND: {names.q_lens} ({len(cumulative)}) and {names.kv_lens} ({len(kv_lens)}) must "
                         f"have one entry per sequence each (at most {names.max_batch})")
    steps = [b - a for a, b in zip([0, *cumulative[:-1]], cumulative, strict=True)]
    if any(step < 0 for step in steps) or (cumulative and cumulative[-1] != q.shape[0]):
        raise ValueError(f"FIA TND: {names.q_lens} must be cumulative query lengths ending at T={q.shape[0]}, "
                         f"got {cumulative}")
    if table is None or table.dtype != torch.int32 or table.dim() != 2 or table.shape[0] != len(kv_lens):
        raise ValueError(f"FIA: block_table must be int32 [B={len(kv_lens)}, max_blocks], got "
                         f"{None if table is None else (table.dtype, tuple(table.shape))}")
    if any(not 0 <= n <= table.shape[1] * block for n in kv_lens):
        raise ValueError(f"FIA: {names.kv_lens} {kv_lens} must fit {table.shape[1]} blocks of {block}")
    _check_mask(kw)


def check_learnable_sink(kw: dict[str, Any]) -> None:
    """v2's ``learnable_sink`` rules: bf16 ``[num_query_heads]``, TND/NTD_TND, value head_dim <= 128."""
    sink = kw.get("learnable_sink")
    if sink is None:
        return
    if kw.get("input_layout", "BSH") not in SINK_LAYOUTS:
        raise ValueError(f"FIA v2: learnable_sink takes input_layout {SINK_LAYOUTS}, got {kw.get('input_layout')}")
    if not isinstance(sink, torch.Tensor) or sink.dtype != torch.bfloat16 \
            or tuple(sink.shape) != (kw.get("num_query_heads", 1),):
        raise ValueError(f"FIA v2: learnable_sink must be bf16 [num_query_heads={kw.get('num_query_heads', 1)}], "
                         f"got {(sink.dtype, tuple(sink.shape)) if isinstance(sink, torch.Tensor) else sink!r}")
    if kw["value"].shape[-1] // max(1, kw.get("num_key_value_heads", 1)) > SINK_MAX_HEAD_DIM:
        raise ValueError(f"FIA v2: learnable_sink needs the value head_dim <= {SINK_MAX_HEAD_DIM}")


def window_left_of(kw: dict[str, Any], q_lens: list[int]) -> int:
    """The call's sparse mode and ``pre_tokens``/``next_tokens`` as pa-kit's ``window_left`` (module docstring)."""
    mode, mask = kw.get("sparse_mode", 0), kw.get("atten_mask")
    pre, nxt = kw.get("pre_tokens", NO_LIMIT), kw.get("next_tokens", NO_LIMIT)
    if mode == 3:
        return -1
    if mode == 4:
        if nxt != 0 or pre < 0:
            raise NotImplementedError(f"the fake models the causal band only (next_tokens=0, pre_tokens >= 0), "
                                      f"got pre_tokens={pre}, next_tokens={nxt}")
        return pre
    if mode == 0 and mask is None and all(n <= 1 for n in q_lens):
        return -1  # one token attends to every key: causal for the last position
    raise NotImplementedError(f"the fake does not model sparse_mode={mode} "
                              f"{'with a custom mask' if mask is not None else 'for several query tokens'}")


def fia_tnd_attention(kw: dict[str, Any], names: TndNames = V1) -> tuple[torch.Tensor, torch.Tensor]:
    """What FIA computes for a TND call that passed :func:`check_fia_tnd`: ``(out [T, N, D], lse [T, N, 1])``."""
    q, table = kw["query"], kw["block_table"]
    heads, kv_heads, block = kw[names.heads], kw["num_key_value_heads"], kw["block_size"]
    d = q.shape[2]
    cache_shape = (-1, block, kv_heads, d)
    key, value = kw["key"].reshape(cache_shape), kw["value"].reshape(cache_shape)
    cumulative, kv_lens = kw[names.q_lens], kw[names.kv_lens]
    starts = [0, *cumulative[:-1]]
    window = window_left_of(kw, [end - start for start, end in zip(starts, cumulative, strict=True)])
    features = Features(window_left=window, sinks=kw.get("learnable_sink"))
    out = torch.zeros(q.shape, dtype=torch.float32)
    lse = torch.full((q.shape[0], heads, 1), -torch.inf, dtype=torch.float32)
    for seq, (start, end, length) in enumerate(zip(starts, cumulative, kv_lens, strict=True)):
        n = end - start
        if n == 0 or length == 0:
            continue
        if length < n:
            raise ValueError(f"FIA: sequence {seq} has {n} query tokens but {length} keys: a token would see none")
        rows, row_lse = attention_lse(q[start:end].view(1, n, heads, d), key, value, table[seq:seq + 1], [length],
                                      kw.get(names.scale, 1.0), torch.float32, features)
        out[start:end], lse[start:end, :, 0] = rows[0], row_lse[0].float()
    return out.to(q.dtype), lse


def _result(kw: dict[str, Any], names: TndNames) -> tuple[torch.Tensor, torch.Tensor]:
    out, lse = fia_tnd_attention(kw, names)
    return out, lse if kw.get(names.lse, False) else torch.zeros(1, dtype=torch.float32)


def fake_torch_npu(calls: Calls) -> types.SimpleNamespace:
    """A module-like object with IFA (records, returns zeros), FIA and FIA v2 (TND: check the rules, compute)."""
    def ifa(*args: Any, **kwargs: Any) -> Any:
        inspect.signature(documented_ifa).bind(*args, **kwargs)  # TypeError if it does not match the docs
        calls.append(("ifa", args, kwargs))
        return torch.zeros_like(kwargs["query"])

    def fia(*args: Any, **kwargs: Any) -> Any:
        inspect.signature(documented_fia).bind(*args, **kwargs)
        calls.append(("fia", args, kwargs))
        if is_mla_call(kwargs):
            return fia_mla(dict(zip(("query", "key", "value"), args, strict=False)) | kwargs)
        if kwargs.get("input_layout") == "TND":
            check_fia_tnd(kwargs)
            return _result(kwargs, V1)
        return torch.zeros_like(kwargs["query"]), None

    def fia_v2(*args: Any, **kwargs: Any) -> Any:
        inspect.signature(documented_fia_v2).bind(*args, **kwargs)
        calls.append(("fia-v2", args, kwargs))
        if is_mla_call(kwargs):
            return fia_mla(dict(zip(("query", "key", "value"), args, strict=False)) | kwargs, MLA_V2)
        check_learnable_sink(kwargs)
        if kwargs.get("input_layout") != "TND":
            raise NotImplementedError("the fake models FIA v2's TND layout only")
        check_fia_tnd(kwargs, V2)
        return _result(kwargs, V2)

    return types.SimpleNamespace(npu_incre_flash_attention=ifa, npu_fused_infer_attention_score=fia,
                                 npu_fused_infer_attention_score_v2=fia_v2)
