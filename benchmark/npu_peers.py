"""CANN's attention operators as peers on an NPU: how the benchmark calls them, in the forms vLLM-Ascend uses.

* ``ifa``: ``torch_npu.npu_incre_flash_attention`` on the paged cache, every argument by keyword (the
  keyword-only order changed between torch_npu releases); one query token per sequence, no window, sinks or lse;
* ``fia``: ``torch_npu.npu_fused_infer_attention_score`` in the TND layout with the arguments vLLM-Ascend's
  decode and speculative-decoding paths pass: query ``[T, Hq, D]`` (``T = batch * q_len``), cumulative query
  lengths, per-sequence KV lengths, ``sparse_mode=3`` with its 2048 x 2048 causal mask, or ``sparse_mode=4``
  (band) with ``pre_tokens``/``next_tokens`` for a sliding window; ``softmax_lse_flag`` for lse; no sinks;
* ``fia-v2``: ``torch_npu.npu_fused_infer_attention_score_v2``, the operator vLLM-Ascend calls for gpt-oss
  (``learnable_sink``): the same TND call under v2's names (``num_query_heads``, ``softmax_scale``,
  ``actual_seq_qlen``/``actual_seq_kvlen``, ``return_softmax_lse``).

**MLA.**  ``fia`` also runs CANN's MLA mode (``query_rope``/``key_rope`` given, query D 512, one KV head), called
as vLLM-Ascend's MLA decode (``vllm_ascend/attention/mla_v1.py``, ``_forward_decode``) calls it: the latent cache
passed as both key and value and viewed ``[num_blocks, 1, block_size, 512]`` (the rope cache ``[..., 64]``; with
one KV head that view of pa-kit's ``[num_blocks, block_size, 1, D]`` pages moves nothing),
``num_key_value_heads=1``, ``antiquant_mode=0``, ``block_table``, ``actual_seq_lengths_kv``; one token per
sequence in ``BNSD_NBSD`` (query ``[B, N, 1, 512]``, ``sparse_mode=0`` without a mask, output ``[N, B, 1, 512]``),
MTP in ``TND_NTD`` (query ``[T, N, 512]``, cumulative ``actual_seq_lengths``, ``sparse_mode=3`` with the causal
mask, output ``[N, T, 512]``).  The outputs come back as views in the query's layout: no copy is timed.
``fia-v2`` runs the same mode as vLLM-Ascend's MLA decode calls it today (v2 since its PR 7222): the v1 call under
v2's names, without ``antiquant_mode``/``antiquant_scale``, query, key and value by position, and
``return_softmax_lse`` for lse (v2's MLA mode returns it: ``[B, N, 1, 1]`` in BNSD_NBSD, ``[T, N, 1]`` in TND_NTD).

**Windows.**  CANN's band (``sparse_mode=4``, aligned at the bottom-right corner as ``sparse_mode=3`` is) keeps,
for a query token at position ``p``, keys ``p - pre_tokens .. p + next_tokens``.  pa-kit's ``window_left = W``
keeps ``p - W .. p``: so ``pre_tokens = W`` and ``next_tokens = 0``.  vLLM-Ascend passes its ``sliding_window``
(transformers' count, 128 for gpt-oss, which keeps 128 keys: ``W = 127``) as ``pre_tokens``: by that rule one key
more than the model's window.  The benchmark passes ``W`` so that every implementation computes one function.
"""

from __future__ import annotations

from typing import Any

import torch

from benchmark.applicability import require
from benchmark.torch_peers import Launch
from workloads.cases import BenchCase

#: head_dim values FIA's TND layout takes in vLLM-Ascend's use (CANN's v2 page lists 128 and 192; gpt-oss runs
#: 64 through it).
FIA_TND_HEAD_DIMS = (64, 128, 192)
#: Side of the compressed causal mask that ``sparse_mode`` 2, 3 and 4 take.
FIA_MASK_SIDE = 2048
FIA_SPARSE_MODE_CAUSAL = 3
FIA_SPARSE_MODE_BAND = 4
#: ``pre_tokens``/``next_tokens`` default: no limit.
FIA_NO_LIMIT = 2147483647


def ifa_arguments(case: BenchCase) -> dict[str, Any]:
    """Keyword arguments of ``npu_incre_flash_attention`` for the paged cache (BSH layout).

    Q ``[B, 1, Hq*D]``, K/V ``[num_blocks, block_size, Hkv*D]`` (views, no copy), ``block_table`` int32 on the
    device, ``actual_seq_lengths`` a host list of ints.  ``scale_value`` must be passed: its default is 1.0.
    """
    require("ifa", case.shape)
    s = case.shape
    return {
        "query": case.query.view(s.batch, 1, s.num_heads * s.head_dim),
        "key": _paged_view(case, case.key_cache),
        "value": _paged_view(case, case.value_cache),
        "num_heads": s.num_heads,
        "num_key_value_heads": s.num_kv_heads,
        "input_layout": "BSH",
        "scale_value": case.scale,
        "block_table": case.block_table,
        "actual_seq_lengths": [int(n) for n in s.context_lens],
        "block_size": s.block_size,
    }


def fia_scale_keyword() -> str:
    """FIA's scale argument: ``scale_value`` in torch_npu 6.0.0, ``scale`` from 7.x; read from the op schema."""
    try:
        schema = torch.ops.npu.npu_fused_infer_attention_score.default._schema
        names = {arg.name for arg in schema.arguments}
    except (AttributeError, RuntimeError):
        names = set()
    return "scale_value" if "scale_value" in names else "scale"


def fia_window(window_left: int) -> dict[str, int]:
    """``sparse_mode`` (+ ``pre_tokens``/``next_tokens``) that give pa-kit's causal attention with
    ``window_left`` (module docstring): the causal mask without a window, the band ``pre_tokens = W``,
    ``next_tokens = 0`` with one."""
    if window_left < 0:
        return {"sparse_mode": FIA_SPARSE_MODE_CAUSAL}
    return {"sparse_mode": FIA_SPARSE_MODE_BAND, "pre_tokens": window_left, "next_tokens": 0}


def fia_mask(case: BenchCase) -> torch.Tensor:
    """The 2048 x 2048 compressed mask of ``sparse_mode`` 3/4: True above the diagonal (masked)."""
    return torch.ones(FIA_MASK_SIDE, FIA_MASK_SIDE, dtype=torch.bool, device=case.query.device).triu(diagonal=1)


def _paged_view(case: BenchCase, cache: torch.Tensor) -> torch.Tensor:
    s = case.shape
    return cache.view(cache.shape[0], s.block_size, s.num_kv_heads * s.head_dim)


def _tnd(case: BenchCase) -> dict[str, Any]:
    """What FIA v1 and v2 share in the TND layout, under v1's names."""
    s = case.shape
    if s.head_dim not in FIA_TND_HEAD_DIMS:
        raise ValueError(f"FIA's TND layout takes head_dim {FIA_TND_HEAD_DIMS}, got {s.head_dim}")
    return {
        "query": case.query.view(s.batch * s.q_len, s.num_heads, s.head_dim),
        "key": _paged_view(case, case.key_cache),
        "value": _paged_view(case, case.value_cache),
        "atten_mask": fia_mask(case),
        "block_table": case.block_table,
        "input_layout": "TND",
        "block_size": s.block_size,
        "actual_seq_lengths": [s.q_len * (seq + 1) for seq in range(s.batch)],
        "actual_seq_lengths_kv": [int(n) for n in s.context_lens],
        "num_key_value_heads": s.num_kv_heads,
        "num_heads": s.num_heads,
        **fia_window(s.window_left),
    }


def fia_arguments(case: BenchCase, scale_keyword: str = "scale") -> dict[str, Any]:
    """Keyword arguments of ``npu_fused_infer_attention_score`` as vLLM-Ascend's decode passes them (TND).

    Q ``[T, Hq, D]`` with ``T = batch * q_len``, ``actual_seq_lengths`` the cumulative query lengths ``[q, 2q,
    ..., Bq]``, ``actual_seq_lengths_kv`` the per-sequence KV lengths (query tokens included), both host lists of
    ints; K/V the paged cache viewed ``[num_blocks, block_size, Hkv*D]``; :func:`fia_window`'s sparse mode with a
    2048 x 2048 upper-triangular bool mask; ``softmax_lse_flag`` when the shape returns lse.
    """
    require("fia", case.shape)
    args = {**_tnd(case), scale_keyword: case.scale}
    if case.shape.lse:
        args["softmax_lse_flag"] = True
    return args


#: v1's name -> v2's, for the arguments both take (torch_npu's v2 page; vLLM-Ascend's v1 -> v2 change).
V2_NAMES = {"num_heads": "num_query_heads", "scale": "softmax_scale", "actual_seq_lengths": "actual_seq_qlen",
            "actual_seq_lengths_kv": "actual_seq_kvlen", "softmax_lse_flag": "return_softmax_lse"}


def fia_v2_arguments(case: BenchCase) -> dict[str, Any]:
    """Keyword arguments of ``npu_fused_infer_attention_score_v2`` as vLLM-Ascend's gpt-oss path passes them:
    :func:`fia_arguments` under v2's names, ``next_tokens=0``, ``learnable_sink`` (bf16 ``[Hq]``) with sinks,
    ``return_softmax_lse`` with lse."""
    require("fia-v2", case.shape)
    args = {V2_NAMES.get(name, name): value for name, value in _tnd(case).items()}
    args["softmax_scale"] = case.scale
    args.setdefault("pre_tokens", FIA_NO_LIMIT)
    args["next_tokens"] = 0
    if case.sinks is not None:
        args["learnable_sink"] = case.sinks
    if case.shape.lse:
        args["return_softmax_lse"] = True
    return args


def _fia_result(case: BenchCase, result: tuple[torch.Tensor, torch.Tensor]) -> Any:
    """FIA's TND ``(out [T, Hq, D], lse [T, Hq, 1])`` in the query's layout (and lse ``[B, (q_len,) Hq]``)."""
    out = result[0].view(case.query.shape)
    return (out, result[1].view(case.query.shape[:-1])) if case.shape.lse else out


def _mla_paged(case: BenchCase, cache: torch.Tensor) -> torch.Tensor:
    """pa-kit's ``[num_blocks, block_size, 1, W]`` pages as FIA's ``[num_blocks, 1, block_size, W]`` (BnNBsD):
    with one KV head the two are the same bytes, so this is a view."""
    return cache.view(cache.shape[0], 1, case.shape.block_size, cache.shape[-1])


def fia_mla_arguments(case: BenchCase, scale_keyword: str = "scale", peer: str = "fia") -> dict[str, Any]:
    """Keyword arguments of ``npu_fused_infer_attention_score`` in its MLA mode, as vLLM-Ascend's MLA decode passes
    them (module docstring): ``BNSD_NBSD`` for one query token per sequence, ``TND_NTD`` for several."""
    require(peer, case.shape)
    s = case.shape
    assert case.query_rope is not None and case.kv_rope_cache is not None, "an MLA case has both rope parts"
    latent = _mla_paged(case, case.key_cache)
    args: dict[str, Any] = {
        "key": latent, "value": latent, "key_rope": _mla_paged(case, case.kv_rope_cache),
        "num_heads": s.num_heads, "num_key_value_heads": 1, scale_keyword: case.scale, "antiquant_mode": 0,
        "antiquant_scale": None, "block_table": case.block_table, "block_size": s.block_size,
        "actual_seq_lengths_kv": [int(n) for n in s.context_lens],
    }
    if s.q_len == 1:
        args.update(query=case.query.view(s.batch, s.num_heads, 1, s.head_dim),
                    query_rope=case.query_rope.view(s.batch, s.num_heads, 1, s.rope_dim), input_layout="BNSD_NBSD",
                    atten_mask=None, sparse_mode=0, actual_seq_lengths=None)
    else:
        tokens = s.batch * s.q_len
        args.update(query=case.query.view(tokens, s.num_heads, s.head_dim),
                    query_rope=case.query_rope.view(tokens, s.num_heads, s.rope_dim), input_layout="TND_NTD",
                    atten_mask=fia_mask(case), sparse_mode=FIA_SPARSE_MODE_CAUSAL,
                    actual_seq_lengths=[s.q_len * (seq + 1) for seq in range(s.batch)])
    return args


def fia_mla_result(case: BenchCase, result: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """FIA's MLA output, ``[N, B, 1, 512]`` (NBSD) or ``[N, T, 512]`` (NTD), as a view in the query's layout."""
    out, s = result[0], case.shape
    if s.q_len == 1:
        return out.squeeze(2).transpose(0, 1)
    return out.transpose(0, 1).unflatten(0, (s.batch, s.q_len))


#: v1 arguments v2 does not take (v2 passes antiquant_mode 0 itself).
V1_ONLY = ("antiquant_mode", "antiquant_scale")


def fia_v2_mla_arguments(case: BenchCase) -> tuple[tuple[torch.Tensor, ...], dict[str, Any]]:
    """``npu_fused_infer_attention_score_v2``'s MLA call as vLLM-Ascend's MLA decode makes it: (query, key, value)
    by position, the rest :func:`fia_mla_arguments` under v2's names, ``return_softmax_lse`` when the shape returns
    lse."""
    require("fia-v2", case.shape)
    v1 = fia_mla_arguments(case, "scale", peer="fia-v2")
    positional = (v1.pop("query"), v1.pop("key"), v1.pop("value"))
    args = {V2_NAMES.get(name, name): value for name, value in v1.items() if name not in V1_ONLY}
    if case.shape.lse:
        args["return_softmax_lse"] = True
    return positional, args


def fia_v2_mla_result(case: BenchCase, result: tuple[torch.Tensor, torch.Tensor]) -> Any:
    """v2's MLA output as :func:`fia_mla_result`, with its lse ``[B, N, 1, 1]`` / ``[T, N, 1]`` as ``[B, (q_len,)
    N]`` when the shape returns lse."""
    out = fia_mla_result(case, result)
    if not case.shape.lse:
        return out
    s, lse = case.shape, result[1]
    return out, (lse.view(s.batch, s.num_heads) if s.q_len == 1 else lse.view(s.batch, s.q_len, s.num_heads))


def prepare_fia_mla(case: BenchCase, torch_npu: Any) -> Launch:
    args = fia_mla_arguments(case, fia_scale_keyword())
    op = torch_npu.npu_fused_infer_attention_score
    return lambda: fia_mla_result(case, op(**args))


def prepare_ifa(case: BenchCase, torch_npu: Any) -> Launch:
    args = ifa_arguments(case)
    op = torch_npu.npu_incre_flash_attention
    return lambda: op(**args).view(case.query.shape)


def prepare_fia(case: BenchCase, torch_npu: Any) -> Launch:
    if case.shape.is_mla:
        return prepare_fia_mla(case, torch_npu)
    args = fia_arguments(case, fia_scale_keyword())
    op = torch_npu.npu_fused_infer_attention_score
    return lambda: _fia_result(case, op(**args))


def prepare_fia_v2(case: BenchCase, torch_npu: Any) -> Launch:
    op = torch_npu.npu_fused_infer_attention_score_v2
    if case.shape.is_mla:
        positional, keywords = fia_v2_mla_arguments(case)
        return lambda: fia_v2_mla_result(case, op(*positional, **keywords))
    args = fia_v2_arguments(case)
    return lambda: _fia_result(case, op(**args))


#: peer name -> torch_npu attribute
NPU_OPERATORS = {"ifa": "npu_incre_flash_attention", "fia": "npu_fused_infer_attention_score",
                 "fia-v2": "npu_fused_infer_attention_score_v2"}
NPU_PEERS = {"ifa": prepare_ifa, "fia": prepare_fia, "fia-v2": prepare_fia_v2}


def available_npu_peers(torch_npu: Any) -> tuple[str, ...]:
    return tuple(name for name, attr in NPU_OPERATORS.items() if hasattr(torch_npu, attr))
