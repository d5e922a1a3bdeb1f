"""CANN's ``npu_fused_infer_attention_score`` (FIA v1) in its MLA mode, faked on the CPU for tests.

A call that gives ``query_rope`` and ``key_rope`` is CANN's MLA mode: absorbed multi-head latent attention, the
query and the latent key 512 wide, their rope parts 64 wide, one KV head whose latent is also the value::

    score_j = scale * (query . key_j + query_rope . key_rope_j)      out = softmax(score) @ value_j

The fake checks a call against the documented limits of that mode (below, each with its source), refusing with a
``ValueError``/``TypeError`` what the real operator refuses, then computes the answer in float64 and returns it in
the query's dtype and the call's output layout, with softmax_lse's placeholder (a ``[1]`` zero: MLA mode has no
lse).  Combinations the operator accepts but a paged decode never uses (a custom mask, a band, several tokens
without the causal mask, the NZ cache format, query D 128) raise ``NotImplementedError``: the fake does not guess.

Sources (CANN's own pages; where two disagree the newer torch_npu page is followed, and the older, narrower
statement is named next to the limit it narrows):

* [TN]  torch_npu's page ``torch_npu.npu_fused_infer_attention_score``: Ascend/op-plugin
  ``docs/zh/custom_APIs/torch_npu/torch_npu-npu_fused_infer_attention_score.md`` (commit 56bbfdfd, 2026-08),
  sections "MLA约束", "TND布局约束", "PageAttention约束", "Q_S = 1(Decode)专属约束" and the parameter list;
  published at https://www.hiascend.com/document (PyTorch API reference, same title).
* [TN7] the same page as torch_npu 7.x shipped it (op-plugin
  ``docs/context/torch_npu-npu_fused_infer_attention_score.md``, commit 0adf4501), its constraint
  "query_rope和key_rope输入时即为MLA场景".
* [ACL] CANN ops-transformer ``attention/fused_infer_attention_score/docs/aclnnFusedInferAttentionScoreV3.md``
  (gitcode.com/cann/ops-transformer, commit bfbbec83, 2025-12), 约束说明: "queryRope和keyRope输入时即为MLA场景"
  and "TND、TND_NTD、NTD_TND场景下query, key, value输入的综合限制".

How vLLM-Ascend calls the mode for DeepSeek decode (``vllm_ascend/attention/mla_v1.py``, ``_forward_decode``,
vllm-project/vllm-ascend commit 7faa6878a6): key = value = the latent cache viewed ``[num_blocks, 1, block_size,
512]``, ``key_rope`` the rope cache viewed ``[num_blocks, 1, block_size, 64]``, ``num_key_value_heads=1``,
``antiquant_mode=0``, ``block_table``, ``actual_seq_lengths_kv``; ``BNSD_NBSD`` with ``sparse_mode=0`` and no mask
for one token per request, ``TND_NTD`` with cumulative ``actual_seq_lengths`` and ``sparse_mode=3`` with the
2048 x 2048 causal mask for MTP.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

# ---- the documented limits ----------------------------------------------------------------------------------

#: [TN] MLA, D = 512: these layouts.  The general layout table restricts NBSD outputs to Q_S > 1; the MLA
#: section lists BNSD_NBSD without it and vLLM-Ascend's one-token decode uses it, so the MLA section is followed.
MLA_LAYOUTS = ("BSH", "BSND", "BNSD", "BNSD_NBSD", "BSND_NBSD", "BSH_NBSD", "TND", "TND_NTD")
#: [TN] MLA, D = 512: query N.  [TN7] said 32/64/128 only; [ACL] 1..128 except 32/64/128 in TND layouts.
MLA_HEADS = (1, 2, 4, 8, 16, 32, 64, 128)
#: [TN] "query的D仅支持512或128"; D 512 with a rope part of 64, "key的N=1、D=512".
MLA_LATENT_DIM, MLA_ROPE_DIM, MLA_KV_HEADS = 512, 64, 1
#: [TN] MLA: "支持PageAttention(block_size: 16的倍数、≤1024)".  [TN7]/[ACL] said 16 or 128 only.
BLOCK_ALIGN, MAX_BLOCK = 16, 1024
#: [TN7] "query_rope ... 仅支持Q_S等于1-16"; [ACL] TND: "支持query每个batch的s为1-16".
MAX_QUERY_TOKENS = 16
#: [TN] MLA, D = 512: "sparse支持0/3/4".  [TN7]/[ACL]: Q_S = 1 only sparse 0 without a mask, Q_S > 1 only 3.
MLA_SPARSE_MODES = (0, 3, 4)
MASKED_MODES = (3, 4)
MASK_SIDE = 2048
MASK_DTYPES = (torch.bool, torch.int8, torch.uint8)
#: [TN] TND: "元素个数即batch值(≤ 4096)"; "T小于等于1M" ([TN7], TND).
TND_MAX_BATCH, TND_MAX_TOKENS = 4096, 1 << 20
#: [TN] Q_S = 1: "B轴: ≤ 65536"; Q_S > 1: the same bound.
MAX_BATCH = 65536
#: [TN] query/key/value/query_rope/key_rope: float16 or bfloat16 (int8 keys are quantised modes MLA refuses).
DTYPES = (torch.float16, torch.bfloat16)
#: [TN] MLA, D = 512: "不支持: softmax_lse、左padding、tensorlist、pse、prefix、伪量化、全量化、后量化";
#: ``key_rope_antiquant_scale`` is "预留参数" (reserved, [TN7]).  argument -> the feature it turns on.
UNSUPPORTED = {
    "pse_shift": "pse", "query_padding_size": "left padding", "kv_padding_size": "left padding",
    "key_shared_prefix": "prefix", "value_shared_prefix": "prefix", "actual_shared_prefix_len": "prefix",
    "antiquant_scale": "pseudo-quantisation", "antiquant_offset": "pseudo-quantisation",
    "key_antiquant_scale": "pseudo-quantisation", "key_antiquant_offset": "pseudo-quantisation",
    "value_antiquant_scale": "pseudo-quantisation", "value_antiquant_offset": "pseudo-quantisation",
    "dequant_scale1": "full quantisation", "quant_scale1": "full quantisation", "dequant_scale2": "full quantisation",
    "quant_scale2": "post-quantisation", "quant_offset2": "post-quantisation",
    "key_rope_antiquant_scale": "a reserved argument",
}
#: [TN] antiquant_mode: "Q_S = 1时传入其他值会异常" (0 and 1 only); inner_precise: "Q_S = 1时仅支持0和1".
DECODE_MODES = (0, 1)
INNER_PRECISE_MODES = (0, 1, 2, 3)


def _refuse(rule: str, source: str) -> ValueError:
    return ValueError(f"FIA MLA: {rule} ({source})")


@dataclass(frozen=True)
class MlaCall:
    """A checked call in canonical form: query tokens ``[T, N, 512]`` / ``[T, N, 64]`` in sequence order, the
    caches as ``[num_blocks, block_size, W]`` pages, each sequence's query and KV lengths."""

    layout_in: str
    layout_out: str
    batch: int
    q_lens: tuple[int, ...]
    kv_lens: tuple[int, ...]
    query: torch.Tensor
    query_rope: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    key_rope: torch.Tensor
    block_table: torch.Tensor
    block_size: int
    scale: float
    sparse_mode: int
    heads: int
    dtype: torch.dtype


def is_mla_call(kw: dict[str, Any]) -> bool:
    """FIA enters its MLA mode when ``query_rope`` or ``key_rope`` is given ([TN] "传入即进入MLA分支")."""
    return kw.get("query_rope") is not None or kw.get("key_rope") is not None


def _tokens(tensor: torch.Tensor, layout: str, heads: int, width: int, what: str) -> tuple[torch.Tensor, int, int]:
    """``tensor`` in ``layout`` as ``[T, N, width]`` with (batch, tokens per sequence) (TND: batch 0, unknown)."""
    dims = {"BSH": 3, "BSND": 4, "BNSD": 4, "TND": 3}[layout]
    if tensor.dim() != dims:
        raise _refuse(f"{what} in layout {layout} must be {dims}-D, got {tuple(tensor.shape)}", "[TN] input_layout")
    if layout == "BSH":
        if tensor.shape[2] != heads * width:
            raise _refuse(f"{what} BSH must be [B, S, {heads}*{width}], got {tuple(tensor.shape)}", "[TN] MLA")
        return tensor.reshape(-1, heads, width), tensor.shape[0], tensor.shape[1]
    n_axis = {"BSND": 2, "BNSD": 1, "TND": 1}[layout]
    if tensor.shape[n_axis] != heads or tensor.shape[-1] != width:
        raise _refuse(f"{what} {layout} must have N = num_heads = {heads} and D = {width}, got "
                      f"{tuple(tensor.shape)}", "[TN] num_heads, MLA")
    if layout == "TND":
        return tensor, 0, 0
    bsnd = tensor.transpose(1, 2) if layout == "BNSD" else tensor
    return bsnd.reshape(-1, heads, width), tensor.shape[0], bsnd.shape[1]


def _pages(cache: torch.Tensor, layout: str, width: int, what: str) -> torch.Tensor:
    """A paged cache as ``[num_blocks, block_size, width]``: BnBsH ``[nb, bs, 1*W]`` or, for BNSD/TND queries,
    BnNBsD ``[nb, 1, bs, W]`` ([TN] PageAttention: "BSH/BSND仅BnBsH; BNSD/TND支持BnBsH和BnNBsD")."""
    if cache.dim() == 5:
        raise NotImplementedError(f"the fake does not model the NZ cache format ({what} {tuple(cache.shape)})")
    if cache.dim() == 3 and cache.shape[2] == MLA_KV_HEADS * width:
        return cache
    if cache.dim() == 4 and layout in ("BNSD", "TND") and cache.shape[1] == MLA_KV_HEADS and cache.shape[3] == width:
        return cache.view(cache.shape[0], cache.shape[2], width)
    raise _refuse(f"{what} must be [num_blocks, block_size, {width}]" + (
        f" or [num_blocks, 1, block_size, {width}]" if layout in ("BNSD", "TND") else "") +
        f" for a {layout} query, got {tuple(cache.shape)}", "[TN] PageAttention, MLA")


def _int_list(value: Any, name: str) -> list[int]:
    if not isinstance(value, list) or not all(type(item) is int for item in value):
        raise TypeError(f"FIA MLA: {name} must be a list of Python ints, got {type(value).__name__}")
    return value


def _check_arguments(kw: dict[str, Any], layout: str) -> None:
    """Everything but the shapes: both rope parts, dtypes, contiguity, unsupported features, modes, the mask."""
    if kw.get("query_rope") is None or kw.get("key_rope") is None:
        raise _refuse("query_rope and key_rope must be given together", "[TN] MLA")
    if layout not in MLA_LAYOUTS:
        raise _refuse(f"input_layout must be one of {MLA_LAYOUTS}, got {layout!r}", "[TN] MLA, D = 512")
    q, k, v, qr, kr = (kw[name] for name in ("query", "key", "value", "query_rope", "key_rope"))
    if q.dtype not in DTYPES or any(t.dtype != q.dtype for t in (k, v, qr, kr)):
        raise TypeError(f"FIA MLA: query, key, value, query_rope and key_rope must share one dtype of fp16/bf16, "
                        f"got {[t.dtype for t in (q, k, v, qr, kr)]} ([TN] query, query_rope, key_rope)")
    for name in ("query", "key", "value", "query_rope", "key_rope"):
        if not kw[name].is_contiguous():
            raise _refuse(f"{name} must be contiguous", "[TN] parameters: 不支持非连续Tensor")
    given = [name for name in UNSUPPORTED if kw.get(name) is not None]
    if given:
        raise _refuse(f"MLA mode takes no {given[0]} ({UNSUPPORTED[given[0]]})", "[TN] MLA, D = 512")
    if kw.get("softmax_lse_flag", False):
        raise _refuse("MLA mode returns no softmax_lse (softmax_lse_flag must be False)", "[TN] MLA, D = 512")
    mode, mask = kw.get("sparse_mode", 0), kw.get("atten_mask")
    if mode not in MLA_SPARSE_MODES:
        raise _refuse(f"sparse_mode must be one of {MLA_SPARSE_MODES}, got {mode}", "[TN] MLA, D = 512")
    if mode in MASKED_MODES:
        template = torch.ones(MASK_SIDE, MASK_SIDE, dtype=torch.bool).triu(diagonal=1)
        if mask is None or mask.dtype not in MASK_DTYPES or tuple(mask.shape[-2:]) != (MASK_SIDE, MASK_SIDE) \
                or mask.dim() > 4 or any(n != 1 for n in mask.shape[:-2]) \
                or not torch.equal(mask.reshape(MASK_SIDE, MASK_SIDE).cpu().bool(), template):
            raise _refuse(f"sparse_mode={mode} needs the {MASK_SIDE}x{MASK_SIDE} causal atten_mask (True above the "
                          "diagonal)", "[TN] atten_mask, sparse_mode")
    if kw.get("num_key_value_heads", 0) != MLA_KV_HEADS:
        raise _refuse(f"num_key_value_heads must be {MLA_KV_HEADS}, got {kw.get('num_key_value_heads', 0)}",
                      "[TN] MLA: key的N=1")
    if kw.get("num_heads", 1) not in MLA_HEADS:
        raise _refuse(f"num_heads must be one of {MLA_HEADS}, got {kw.get('num_heads', 1)}", "[TN] MLA, D = 512")


def _query_lengths(kw: dict[str, Any], layout: str, tokens: int, batch: int, per_seq: int) -> list[int]:
    """Each sequence's query tokens: the cumulative ``actual_seq_lengths`` in TND, else S for every sequence."""
    if layout != "TND":
        if per_seq > 1 and kw.get("actual_seq_lengths") is not None:
            raise _refuse("with several query tokens only TND takes actual_seq_lengths",
                          "[ACL] MLA: 仅inputLayout为TND时支持配置actualSeqLengths")
        return [per_seq] * batch
    cumulative = _int_list(kw.get("actual_seq_lengths"), "actual_seq_lengths")
    steps = [b - a for a, b in zip([0, *cumulative[:-1]], cumulative, strict=True)]
    if not cumulative or len(cumulative) > TND_MAX_BATCH or cumulative[-1] != tokens or tokens > TND_MAX_TOKENS:
        raise _refuse(f"TND actual_seq_lengths must be 1..{TND_MAX_BATCH} cumulative lengths ending at T={tokens} "
                      f"(T <= {TND_MAX_TOKENS}), got {cumulative}", "[TN] TND")
    if any(not 1 <= step <= MAX_QUERY_TOKENS for step in steps):
        raise _refuse(f"each sequence takes 1..{MAX_QUERY_TOKENS} query tokens, got {steps}", "[ACL] TND, D = 512")
    return steps


def check_fia_mla(kw: dict[str, Any]) -> MlaCall:
    """Raise naming the first documented MLA rule ``kw`` breaks; else the call in canonical form."""
    layout = kw.get("input_layout", "BSH")
    _check_arguments(kw, layout)
    layout_in, _, layout_out = layout.partition("_")
    heads = kw.get("num_heads", 1)
    q, qr = kw["query"], kw["query_rope"]
    if q.shape[-1] != MLA_LATENT_DIM and layout_in != "BSH":
        if q.shape[-1] == 128:
            raise NotImplementedError("the fake models MLA's D 512 mode, not its D 128 one")
        raise _refuse(f"query D must be {MLA_LATENT_DIM} (or 128), got {q.shape[-1]}", "[TN] MLA")
    query, batch, per_seq = _tokens(q, layout_in, heads, MLA_LATENT_DIM, "query")
    query_rope, _, _ = _tokens(qr, layout_in, heads, MLA_ROPE_DIM, "query_rope")
    if tuple(query.shape[:2]) != tuple(query_rope.shape[:2]):
        raise _refuse(f"query_rope must match query but for D, got {tuple(qr.shape)} and {tuple(q.shape)}", "[TN] MLA")
    table = kw.get("block_table")
    if table is None or table.dtype != torch.int32 or table.dim() != 2:
        raise _refuse("MLA needs PageAttention: block_table int32 [B, max_blocks], got "
                      f"{None if table is None else (table.dtype, tuple(table.shape))}", "[TN] MLA, block_table")
    if layout_in == "TND":
        q_lens = _query_lengths(kw, layout_in, query.shape[0], 0, 0)
        batch = len(q_lens)
    elif not (1 <= batch <= MAX_BATCH and 1 <= per_seq <= MAX_QUERY_TOKENS):
        raise _refuse(f"batch 1..{MAX_BATCH} and 1..{MAX_QUERY_TOKENS} query tokens per sequence, got batch {batch}, "
                      f"S {per_seq}", "[TN] Q_S = 1 B轴; [TN7] query_rope: Q_S 1-16")
    else:
        q_lens = _query_lengths(kw, layout_in, query.shape[0], batch, per_seq)
    key, value = _pages(kw["key"], layout_in, MLA_LATENT_DIM, "key"), _pages(kw["value"], layout_in, MLA_LATENT_DIM,
                                                                             "value")
    key_rope = _pages(kw["key_rope"], layout_in, MLA_ROPE_DIM, "key_rope")
    block = kw.get("block_size", 0)
    if tuple(kw["key"].shape) != tuple(kw["value"].shape) or key.shape[:2] != key_rope.shape[:2] \
            or key.shape[1] != block:
        raise _refuse(f"key and value must share one shape, key_rope match it but for D, with block_size={block} "
                      f"tokens per block; got {tuple(kw['key'].shape)}, {tuple(kw['value'].shape)}, "
                      f"{tuple(kw['key_rope'].shape)}", "[TN] base constraints, key_rope")
    if block % BLOCK_ALIGN or not 0 < block <= MAX_BLOCK:
        raise _refuse(f"block_size must be a multiple of {BLOCK_ALIGN} up to {MAX_BLOCK}, got {block}", "[TN] MLA")
    kv_lens = _int_list(kw.get("actual_seq_lengths_kv"), "actual_seq_lengths_kv")
    if layout_in != "TND" and len(kv_lens) == 1:
        kv_lens = kv_lens * batch  # [TN] Q_S = 1: "传入长度为1/≥batch"
    if len(kv_lens) < batch or (layout_in == "TND" and len(kv_lens) != batch):
        raise _refuse(f"actual_seq_lengths_kv needs one length per sequence ({batch}), got {len(kv_lens)}",
                      "[TN] actual_seq_lengths_kv, TND")
    kv_lens = kv_lens[:batch]
    if table.shape[0] != batch or any(not 0 <= n <= table.shape[1] * block for n in kv_lens):
        raise _refuse(f"block_table must be [B={batch}, >= the blocks of the longest sequence], got "
                      f"{tuple(table.shape)} for lengths {kv_lens}", "[TN] PageAttention: block_table二维")
    if sum(math.ceil(n / block) for n in kv_lens) > key.shape[0]:
        raise _refuse(f"{key.shape[0]} blocks cannot hold the sequences' blocks", "[TN] PageAttention: blocknum下限")
    decode = all(n == 1 for n in q_lens)
    if decode and (kw.get("antiquant_mode", 0) not in DECODE_MODES or kw.get("inner_precise", 0) not in DECODE_MODES):
        raise _refuse("with one query token antiquant_mode and inner_precise must be 0 or 1", "[TN] antiquant_mode, "
                      "inner_precise")
    if kw.get("inner_precise", 0) not in INNER_PRECISE_MODES:
        raise _refuse(f"inner_precise must be one of {INNER_PRECISE_MODES}", "[TN] inner_precise")
    _modelled_mask(kw, decode)
    return MlaCall(layout_in, layout_out or layout_in, batch, tuple(q_lens), tuple(kv_lens), query, query_rope, key,
                   value, key_rope, table, block, float(kw.get("scale", 1.0)), kw.get("sparse_mode", 0), heads, q.dtype)


def _modelled_mask(kw: dict[str, Any], decode: bool) -> None:
    """The masks a paged decode uses: none for one token (every key), the causal one (sparse 3) otherwise."""
    mode, mask = kw.get("sparse_mode", 0), kw.get("atten_mask")
    if mode == 3 or (mode == 0 and mask is None and decode):
        return
    raise NotImplementedError(f"the fake does not model sparse_mode={mode} "
                              f"{'with a custom mask' if mask is not None else 'for several query tokens'}")


def fia_mla_attention(call: MlaCall) -> torch.Tensor:
    """What the mode computes, in float64: ``[T, N, 512]``, rows of a sequence without keys zero.  Token ``i`` of
    ``n`` at position ``L - n + i`` sees keys ``0..L - n + i`` (sparse 3, CANN's right-down causal); one token sees
    all ``L``."""
    out = torch.zeros(call.query.shape, dtype=torch.float64)
    start = 0
    for seq, (n, length) in enumerate(zip(call.q_lens, call.kv_lens, strict=True)):
        rows = slice(start, start + n)
        start += n
        if length == 0:
            continue
        if length < n:
            raise ValueError(f"FIA MLA: sequence {seq} has {n} query tokens but {length} keys: a token sees none")
        pages = call.block_table[seq, :math.ceil(length / call.block_size)].long().cpu()
        position = torch.arange(length)
        where = (pages[position // call.block_size], position % call.block_size)
        key, value, rope = (cache.cpu()[where].double() for cache in (call.key, call.value, call.key_rope))
        scores = (call.query[rows].cpu().double() @ key.T + call.query_rope[rows].cpu().double() @ rope.T) * call.scale
        keep = position[None, :] <= (length - n + torch.arange(n))[:, None]  # [n, L]
        scores = scores.masked_fill(~keep[:, None, :], -math.inf)
        out[rows] = torch.softmax(scores, dim=-1) @ value
    return out


def arrange(call: MlaCall, out: torch.Tensor) -> torch.Tensor:
    """``[T, N, 512]`` in the call's output layout ([TN] input_layout table), the query's dtype, contiguous."""
    if call.layout_in == "TND":
        laid = out if call.layout_out == "TND" else out.transpose(0, 1)  # NTD: [N, T, D]
    else:
        bsnd = out.view(call.batch, -1, call.heads, MLA_LATENT_DIM)
        laid = {"BSND": bsnd, "BNSD": bsnd.transpose(1, 2), "NBSD": bsnd.permute(2, 0, 1, 3),
                "BSH": bsnd.flatten(2)}[call.layout_out]
    return laid.to(call.dtype).contiguous()


def fia_mla(kw: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """A checked MLA-mode call's ``(attention_out, softmax_lse placeholder)``."""
    call = check_fia_mla(kw)
    return arrange(call, fia_mla_attention(call)), torch.zeros(1, dtype=torch.float32)
