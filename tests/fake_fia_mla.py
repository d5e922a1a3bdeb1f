"""CANN's ``npu_fused_infer_attention_score`` (FIA v1) and ``..._v2`` in their MLA mode, faked on the CPU for tests.

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

FIA v2 ([TN2]: op-plugin ``docs/zh/custom_APIs/torch_npu/torch_npu-npu_fused_infer_attention_score_v2.md``, commit
56bbfdf, 2026-08, "MLA场景约束"; its schema ``op_plugin/config/op_plugin_functions.yaml`` and
``FusedInferAttentionScoreV2KernelNpuOpApi.cpp``, commit 517f2e7d) has the same MLA mode under other names
(:data:`V2`): ``num_query_heads``, ``softmax_scale``, ``actual_seq_qlen``/``actual_seq_kvlen``,
``return_softmax_lse``; no ``antiquant_*``.  Its MLA section no longer lists softmax_lse as unsupported (the 2025-08
page did), so v2 returns the lse: fp32 ``[T, N, 1]`` in TND layouts, ``[B, N, S, 1]`` otherwise, a ``[0]`` tensor
when not asked for (the source's shape).  vLLM-Ascend's MLA decode calls v2 since its commit 3f39ac9c8d (PR 7222,
2026-03): the v1 call above renamed, ``antiquant_mode``/``antiquant_scale`` dropped, query, key and value passed
by position (``mla_v1.py`` ``_forward_decode``, commit 182b75ea).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
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
#: [TN2] adds 9 (a tree mask, MLA only).
MLA_SPARSE_MODES = (0, 3, 4)
MLA_SPARSE_MODES_V2 = (0, 3, 4, 9)
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
#: [TN2] MLA, D = 512: "不支持左padding、tensorlist、pse、prefix、伪量化、后量化"; ``learnable_sink`` needs a
#: value head_dim <= 128 ([TN2] learnable_sink); ``dequant_scale_key_rope`` is reserved.
UNSUPPORTED_V2 = {
    "pse_shift": "pse", "quant_scale_out": "post-quantisation", "quant_offset_out": "post-quantisation",
    "quant_scale_p": "post-quantisation", "dequant_scale_key_rope": "a reserved argument",
    "learnable_sink": "sinks (learnable_sink needs a value head_dim <= 128)",
}
#: [TN2] MLA, D = 512: full quantisation (int8 query/key/value with these scales and modes) is supported; the
#: fake computes fp16/bf16 only.
FULL_QUANT_V2 = ("dequant_scale_query", "dequant_scale_key", "dequant_offset_key", "dequant_scale_value",
                 "dequant_offset_value", "query_quant_mode", "key_quant_mode", "value_quant_mode")
#: [TN] antiquant_mode: "Q_S = 1时传入其他值会异常" (0 and 1 only); inner_precise: "Q_S = 1时仅支持0和1".
DECODE_MODES = (0, 1)
INNER_PRECISE_MODES = (0, 1, 2, 3)


@dataclass(frozen=True)
class FiaNames:
    """What FIA v1 and v2 call the same arguments (torch_npu's two pages); the TND fake and the MLA fake both
    read these."""

    heads: str
    q_lens: str
    kv_lens: str
    scale: str
    lse: str


FIA_V1_NAMES = FiaNames("num_heads", "actual_seq_lengths", "actual_seq_lengths_kv", "scale", "softmax_lse_flag")
FIA_V2_NAMES = FiaNames("num_query_heads", "actual_seq_qlen", "actual_seq_kvlen", "softmax_scale",
                        "return_softmax_lse")


@dataclass(frozen=True)
class MlaNames(FiaNames):
    """FIA v1's or v2's names, and what each refuses in the MLA mode."""

    operator: str
    sparse_modes: tuple[int, ...]
    unsupported: dict[str, str] = field(hash=False)
    returns_lse: bool
    full_quant: tuple[str, ...] = ()


V1 = MlaNames(**asdict(FIA_V1_NAMES), operator="FIA MLA", sparse_modes=MLA_SPARSE_MODES, unsupported=UNSUPPORTED,
              returns_lse=False)
V2 = MlaNames(**asdict(FIA_V2_NAMES), operator="FIA v2 MLA", sparse_modes=MLA_SPARSE_MODES_V2,
              unsupported=UNSUPPORTED_V2, returns_lse=True, full_quant=FULL_QUANT_V2)


def _refuse(rule: str, source: str, names: MlaNames = V1) -> ValueError:
    return ValueError(f"{names.operator}: {rule} ({source})")


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
    lse: bool


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


def _int_list(value: Any, name: str, names: MlaNames = V1) -> list[int]:
    if not isinstance(value, list) or not all(type(item) is int for item in value):
        raise TypeError(f"{names.operator}: {name} must be a list of Python ints, got {type(value).__name__}")
    return value


def _check_arguments(kw: dict[str, Any], layout: str, names: MlaNames) -> None:
    """Everything but the shapes: both rope parts, dtypes, contiguity, unsupported features, modes, the mask."""
    if kw.get("query_rope") is None or kw.get("key_rope") is None:
        raise _refuse("query_rope and key_rope must be given together", "[TN] MLA", names)
    if layout not in MLA_LAYOUTS:
        raise _refuse(f"input_layout must be one of {MLA_LAYOUTS}, got {layout!r}", "[TN] MLA, D = 512", names)
    q, k, v, qr, kr = (kw[name] for name in ("query", "key", "value", "query_rope", "key_rope"))
    if q.dtype not in DTYPES or any(t.dtype != q.dtype for t in (k, v, qr, kr)):
        raise TypeError(f"{names.operator}: query, key, value, query_rope and key_rope must share one dtype of "
                        f"fp16/bf16, got {[t.dtype for t in (q, k, v, qr, kr)]} ([TN] query, query_rope, key_rope)")
    for name in ("query", "key", "value", "query_rope", "key_rope"):
        if not kw[name].is_contiguous():
            raise _refuse(f"{name} must be contiguous", "[TN] parameters: 不支持非连续Tensor", names)
    given = [name for name in names.unsupported if kw.get(name) is not None]
    if given:
        raise _refuse(f"MLA mode takes no {given[0]} ({names.unsupported[given[0]]})", "[TN] MLA, D = 512", names)
    quantised = [name for name in names.full_quant if kw.get(name) not in (None, 0)]
    if quantised:
        raise NotImplementedError(f"the fake does not model full quantisation ({quantised[0]}): int8 K/V")
    if kw.get(names.lse, False) and not names.returns_lse:
        raise _refuse(f"MLA mode returns no softmax_lse ({names.lse} must be False)", "[TN] MLA, D = 512", names)
    mode, mask = kw.get("sparse_mode", 0), kw.get("atten_mask")
    if mode not in names.sparse_modes:
        raise _refuse(f"sparse_mode must be one of {names.sparse_modes}, got {mode}", "[TN] MLA, D = 512", names)
    if mode in MASKED_MODES:
        template = torch.ones(MASK_SIDE, MASK_SIDE, dtype=torch.bool).triu(diagonal=1)
        if mask is None or mask.dtype not in MASK_DTYPES or tuple(mask.shape[-2:]) != (MASK_SIDE, MASK_SIDE) \
                or mask.dim() > 4 or any(n != 1 for n in mask.shape[:-2]) \
                or not torch.equal(mask.reshape(MASK_SIDE, MASK_SIDE).cpu().bool(), template):
            raise _refuse(f"sparse_mode={mode} needs the {MASK_SIDE}x{MASK_SIDE} causal atten_mask (True above the "
                          "diagonal)", "[TN] atten_mask, sparse_mode", names)
    if kw.get("num_key_value_heads", 0) != MLA_KV_HEADS:
        raise _refuse(f"num_key_value_heads must be {MLA_KV_HEADS}, got {kw.get('num_key_value_heads', 0)}",
                      "[TN] MLA: key的N=1", names)
    if kw.get(names.heads, 1) not in MLA_HEADS:
        raise _refuse(f"{names.heads} must be one of {MLA_HEADS}, got {kw.get(names.heads, 1)}", "[TN] MLA, D = 512",
                      names)


def _query_lengths(kw: dict[str, Any], layout: str, tokens: int, batch: int, per_seq: int,
                   names: MlaNames) -> list[int]:
    """Each sequence's query tokens: the cumulative ``actual_seq_lengths`` in TND, else S for every sequence."""
    if layout != "TND":
        if per_seq > 1 and kw.get(names.q_lens) is not None:
            raise _refuse(f"with several query tokens only TND takes {names.q_lens}",
                          "[ACL] MLA: 仅inputLayout为TND时支持配置actualSeqLengths", names)
        return [per_seq] * batch
    cumulative = _int_list(kw.get(names.q_lens), names.q_lens, names)
    steps = [b - a for a, b in zip([0, *cumulative[:-1]], cumulative, strict=True)]
    if not cumulative or len(cumulative) > TND_MAX_BATCH or cumulative[-1] != tokens or tokens > TND_MAX_TOKENS:
        raise _refuse(f"TND {names.q_lens} must be 1..{TND_MAX_BATCH} cumulative lengths ending at T={tokens} "
                      f"(T <= {TND_MAX_TOKENS}), got {cumulative}", "[TN] TND", names)
    if any(not 1 <= step <= MAX_QUERY_TOKENS for step in steps):
        raise _refuse(f"each sequence takes 1..{MAX_QUERY_TOKENS} query tokens, got {steps}", "[ACL] TND, D = 512",
                      names)
    return steps


def check_fia_mla(kw: dict[str, Any], names: MlaNames = V1) -> MlaCall:
    """Raise naming the first documented MLA rule ``kw`` breaks; else the call in canonical form."""
    layout = kw.get("input_layout", "BSH")
    _check_arguments(kw, layout, names)
    layout_in, _, layout_out = layout.partition("_")
    heads = kw.get(names.heads, 1)
    q, qr = kw["query"], kw["query_rope"]
    if q.shape[-1] != MLA_LATENT_DIM and layout_in != "BSH":
        if q.shape[-1] == 128:
            raise NotImplementedError("the fake models MLA's D 512 mode, not its D 128 one")
        raise _refuse(f"query D must be {MLA_LATENT_DIM} (or 128), got {q.shape[-1]}", "[TN] MLA", names)
    query, batch, per_seq = _tokens(q, layout_in, heads, MLA_LATENT_DIM, "query")
    query_rope, _, _ = _tokens(qr, layout_in, heads, MLA_ROPE_DIM, "query_rope")
    if tuple(query.shape[:2]) != tuple(query_rope.shape[:2]):
        raise _refuse(f"query_rope must match query but for D, got {tuple(qr.shape)} and {tuple(q.shape)}",
                      "[TN] MLA", names)
    table = kw.get("block_table")
    if table is None or table.dtype != torch.int32 or table.dim() != 2:
        raise _refuse("MLA needs PageAttention: block_table int32 [B, max_blocks], got "
                      f"{None if table is None else (table.dtype, tuple(table.shape))}", "[TN] MLA, block_table", names)
    if layout_in == "TND":
        q_lens = _query_lengths(kw, layout_in, query.shape[0], 0, 0, names)
        batch = len(q_lens)
    elif not (1 <= batch <= MAX_BATCH and 1 <= per_seq <= MAX_QUERY_TOKENS):
        raise _refuse(f"batch 1..{MAX_BATCH} and 1..{MAX_QUERY_TOKENS} query tokens per sequence, got batch {batch}, "
                      f"S {per_seq}", "[TN] Q_S = 1 B轴; [TN7] query_rope: Q_S 1-16", names)
    else:
        q_lens = _query_lengths(kw, layout_in, query.shape[0], batch, per_seq, names)
    key, value = _pages(kw["key"], layout_in, MLA_LATENT_DIM, "key"), _pages(kw["value"], layout_in, MLA_LATENT_DIM,
                                                                             "value")
    key_rope = _pages(kw["key_rope"], layout_in, MLA_ROPE_DIM, "key_rope")
    block = kw.get("block_size", 0)
    if tuple(kw["key"].shape) != tuple(kw["value"].shape) or key.shape[:2] != key_rope.shape[:2] \
            or key.shape[1] != block:
        raise _refuse(f"key and value must share one shape, key_rope match it but for D, with block_size={block} "
                      f"tokens per block; got {tuple(kw['key'].shape)}, {tuple(kw['value'].shape)}, "
                      f"{tuple(kw['key_rope'].shape)}", "[TN] base constraints, key_rope", names)
    if block % BLOCK_ALIGN or not 0 < block <= MAX_BLOCK:
        raise _refuse(f"block_size must be a multiple of {BLOCK_ALIGN} up to {MAX_BLOCK}, got {block}", "[TN] MLA",
                      names)
    kv_lens = _int_list(kw.get(names.kv_lens), names.kv_lens, names)
    if layout_in != "TND" and len(kv_lens) == 1:
        kv_lens = kv_lens * batch  # [TN] Q_S = 1: "传入长度为1/≥batch"
    if len(kv_lens) < batch or (layout_in == "TND" and len(kv_lens) != batch):
        raise _refuse(f"{names.kv_lens} needs one length per sequence ({batch}), got {len(kv_lens)}",
                      "[TN] actual_seq_lengths_kv, TND", names)
    kv_lens = kv_lens[:batch]
    if table.shape[0] != batch or any(not 0 <= n <= table.shape[1] * block for n in kv_lens):
        raise _refuse(f"block_table must be [B={batch}, >= the blocks of the longest sequence], got "
                      f"{tuple(table.shape)} for lengths {kv_lens}", "[TN] PageAttention: block_table二维", names)
    if sum(math.ceil(n / block) for n in kv_lens) > key.shape[0]:
        raise _refuse(f"{key.shape[0]} blocks cannot hold the sequences' blocks", "[TN] PageAttention: blocknum下限",
                      names)
    decode = all(n == 1 for n in q_lens)
    if decode and (kw.get("antiquant_mode", 0) not in DECODE_MODES or kw.get("inner_precise", 0) not in DECODE_MODES):
        raise _refuse("with one query token antiquant_mode and inner_precise must be 0 or 1", "[TN] antiquant_mode, "
                      "inner_precise", names)
    if kw.get("inner_precise", 0) not in INNER_PRECISE_MODES:
        raise _refuse(f"inner_precise must be one of {INNER_PRECISE_MODES}", "[TN] inner_precise", names)
    _modelled_mask(kw, decode)
    return MlaCall(layout_in, layout_out or layout_in, batch, tuple(q_lens), tuple(kv_lens), query, query_rope, key,
                   value, key_rope, table, block, float(kw.get(names.scale, 1.0)), kw.get("sparse_mode", 0), heads,
                   q.dtype, bool(kw.get(names.lse, False)))


def _modelled_mask(kw: dict[str, Any], decode: bool) -> None:
    """The masks a paged decode uses: none for one token (every key), the causal one (sparse 3) otherwise."""
    mode, mask = kw.get("sparse_mode", 0), kw.get("atten_mask")
    if mode == 3 or (mode == 0 and mask is None and decode):
        return
    raise NotImplementedError(f"the fake does not model sparse_mode={mode} "
                              f"{'with a custom mask' if mask is not None else 'for several query tokens'}")


def fia_mla_attention(call: MlaCall) -> tuple[torch.Tensor, torch.Tensor]:
    """What the mode computes, in float64: ``[T, N, 512]`` and each row's lse ``[T, N]``, rows of a sequence without
    keys zero.  Token ``i`` of ``n`` at position ``L - n + i`` sees keys ``0..L - n + i`` (sparse 3, CANN's
    right-down causal); one token sees all ``L``."""
    out = torch.zeros(call.query.shape, dtype=torch.float64)
    lse = torch.full(call.query.shape[:2], -math.inf, dtype=torch.float64)
    start = 0
    for seq, (n, length) in enumerate(zip(call.q_lens, call.kv_lens, strict=True)):
        rows = slice(start, start + n)
        start += n
        if length == 0:
            if call.lse:
                raise NotImplementedError("the fake does not guess the lse FIA writes for a sequence without keys")
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
        lse[rows] = torch.logsumexp(scores, dim=-1)
    return out, lse


def arrange(call: MlaCall, out: torch.Tensor) -> torch.Tensor:
    """``[T, N, 512]`` in the call's output layout ([TN] input_layout table), the query's dtype, contiguous."""
    if call.layout_in == "TND":
        laid = out if call.layout_out == "TND" else out.transpose(0, 1)  # NTD: [N, T, D]
    else:
        bsnd = out.view(call.batch, -1, call.heads, MLA_LATENT_DIM)
        laid = {"BSND": bsnd, "BNSD": bsnd.transpose(1, 2), "NBSD": bsnd.permute(2, 0, 1, 3),
                "BSH": bsnd.flatten(2)}[call.layout_out]
    return laid.to(call.dtype).contiguous()


def arrange_lse(call: MlaCall, lse: torch.Tensor) -> torch.Tensor:
    """v2's softmax_lse: fp32 ``[T, N, 1]`` in TND layouts, ``[B, N, S, 1]`` otherwise; ``[0]`` when not asked for
    ([TN2] softmax_lse; the source's ``infer_lse_out_shape``)."""
    if not call.lse:
        return torch.zeros(0, dtype=torch.float32)
    if call.layout_in == "TND":
        return lse.float().unsqueeze(-1).contiguous()
    return lse.float().view(call.batch, -1, call.heads).transpose(1, 2).unsqueeze(-1).contiguous()


def fia_mla(kw: dict[str, Any], names: MlaNames = V1) -> tuple[torch.Tensor, torch.Tensor]:
    """A checked MLA-mode call's ``(attention_out, softmax_lse)``: v1's lse is its ``[1]`` placeholder (the mode
    has none), v2's as :func:`arrange_lse` lays it out."""
    call = check_fia_mla(kw, names)
    out, lse = fia_mla_attention(call)
    return arrange(call, out), arrange_lse(call, lse) if names.returns_lse else torch.zeros(1, dtype=torch.float32)
