"""Inputs, the float64 golden, and every implementation the benchmark times (pa-kit and its peers).

Each implementation turns a :class:`BenchCase` into a zero-argument callable that launches once and returns
the output ``[batch, num_heads, head_dim]``.  Everything a launch needs (gather buffers, dense KV, argument
lists) is built in ``prepare``, outside the timed region.  Every output is checked against the float64 golden
before the implementation is timed.

Peers:

* ``ifa``: CANN ``torch_npu.npu_incre_flash_attention`` on the same paged cache, every argument by keyword
  (the keyword-only order changed between torch_npu releases);
* ``fia``: ``torch_npu.npu_fused_infer_attention_score`` when present, in the TND layout with the arguments
  vLLM-Ascend's decode passes (cumulative query lengths, per-sequence KV lengths, ``sparse_mode=3`` with its
  2048 x 2048 causal mask); TND takes head_dim 64, 128 or 192 only;
* external ATB-ABI kernel libraries (``--external NAME=PATH``): launched by pa-kit's own runner with that
  library in place of ours (:func:`prepare_external`), rows named ``NAME``;
* ``torch-paged``: gather the pages into preallocated buffers, grouped matmul, softmax, matmul (gather timed);
* ``torch-dense``: the same on K/V gathered beforehand into ``[batch, kv_heads, ctx, head_dim]``: the upper
  bound of what torch can do on this device;
* ``sdpa``: ``torch.nn.functional.scaled_dot_product_attention(enable_gqa=True)`` on that dense K/V.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from accuracy.reference import Reference, compare, reference
from workloads.bytes_model import pages_used
from workloads.cases import BenchCase

NPU_IMPLEMENTATIONS = ("ifa", "fia")
TORCH_IMPLEMENTATIONS = ("torch-paged", "torch-dense", "sdpa")
BASELINES = NPU_IMPLEMENTATIONS + TORCH_IMPLEMENTATIONS

Launch = Callable[[], torch.Tensor]


def sequence_kv(case: BenchCase, seq: int, cache: torch.Tensor) -> torch.Tensor:
    """``[context, kv_heads, head_dim]`` of sequence ``seq`` gathered from a paged cache."""
    length = case.shape.context_lens[seq]
    rows = case.block_table[seq, :pages_used(length, case.shape.block_size)].long()
    return cache.index_select(0, rows).reshape(-1, case.shape.num_kv_heads, case.shape.head_dim)[:length]


def golden(case: BenchCase) -> Reference:
    """The float64 golden and the case's tolerance, by the project's one policy (:mod:`accuracy.reference`)."""
    return reference(case.query, case.key_cache, case.value_cache, case.block_table, case.shape.context_lens,
                     case.scale)


def max_abs_error(out: torch.Tensor, ref: Reference) -> float:
    return compare(out, ref).max_abs_error


def within_tolerance(error: float, ref: Reference) -> bool:
    """Twice torch's own low-precision error on this case (flash-attention's rule), see accuracy/reference.py."""
    return error <= ref.allowed_error


# ---- torch peers ----------------------------------------------------------------------------------------


def _grouped_attention(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float) -> torch.Tensor:
    """query ``[..., kv, group, D]``, keys/values ``[..., kv, ctx, D]``: matmuls in the input dtype, fp32 softmax."""
    scores = query @ keys.transpose(-1, -2)
    probs = torch.softmax(scores.float() * scale, dim=-1).to(query.dtype)
    return probs @ values


def _grouped_query(case: BenchCase) -> torch.Tensor:
    s = case.shape
    return case.query.view(s.batch, s.num_kv_heads, s.group_size, s.head_dim)


def _dense_kv(case: BenchCase, cache: torch.Tensor) -> list[torch.Tensor]:
    """Per sequence ``[kv_heads, ctx, head_dim]``, contiguous (gathered once, before timing)."""
    return [sequence_kv(case, seq, cache).transpose(0, 1).contiguous() for seq in range(case.shape.batch)]


def _dense_batch(case: BenchCase, cache: torch.Tensor) -> torch.Tensor:
    """``[batch, kv_heads, ctx, head_dim]`` of a uniform batch, filled one sequence at a time (no stacking
    copy: at 128K tokens the cache alone is gigabytes)."""
    s = case.shape
    dense = torch.empty(s.batch, s.num_kv_heads, s.max_context, s.head_dim, dtype=cache.dtype, device=case.device)
    for seq in range(s.batch):
        dense[seq].copy_(sequence_kv(case, seq, cache).transpose(0, 1))
    return dense


def prepare_torch_dense(case: BenchCase) -> Launch:
    s = case.shape
    query = _grouped_query(case)
    if s.uniform:
        key_batch, value_batch = _dense_batch(case, case.key_cache), _dense_batch(case, case.value_cache)
        return lambda: _grouped_attention(query, key_batch, value_batch, case.scale).view(s.batch, s.num_heads, -1)
    keys, values = _dense_kv(case, case.key_cache), _dense_kv(case, case.value_cache)
    out = torch.empty_like(case.query)

    def run() -> torch.Tensor:
        for seq in range(s.batch):
            out[seq] = _grouped_attention(query[seq], keys[seq], values[seq], case.scale).view(s.num_heads, -1)
        return out

    return run


def prepare_sdpa(case: BenchCase) -> Launch:
    s = case.shape
    query = case.query.view(s.batch, s.num_heads, 1, s.head_dim)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if s.uniform:
        key_batch, value_batch = _dense_batch(case, case.key_cache), _dense_batch(case, case.value_cache)
        return lambda: sdpa(query, key_batch, value_batch, scale=case.scale, enable_gqa=True).view(
            s.batch, s.num_heads, -1)
    keys, values = _dense_kv(case, case.key_cache), _dense_kv(case, case.value_cache)
    out = torch.empty_like(case.query)

    def run() -> torch.Tensor:
        for seq in range(s.batch):
            out[seq] = sdpa(query[seq], keys[seq], values[seq], scale=case.scale, enable_gqa=True).view(
                s.num_heads, -1)
        return out

    return run


def prepare_torch_paged(case: BenchCase) -> Launch:
    """Gather pages with ``index_select(out=...)``, copy them to ``[kv_heads, tokens, head_dim]``, attend.

    Both copies go to buffers allocated and touched here; attending on the strided view of the gathered
    pages instead is several times slower on the CPU (torch copies it into fresh memory per call).
    """
    s = case.shape
    query = _grouped_query(case)
    counts = [pages_used(n, s.block_size) for n in s.context_lens]
    if s.uniform:
        groups = [(list(range(s.batch)), counts[0], s.context_lens[0])]
    else:
        groups = [([seq], counts[seq], s.context_lens[seq]) for seq in range(s.batch)]
    plans = []
    for seqs, count, length in groups:
        rows = case.block_table[seqs, :count].reshape(-1).long()
        n, tokens = len(seqs), count * s.block_size
        pages = [torch.zeros(n * count, *case.key_cache.shape[1:], dtype=case.key_cache.dtype, device=case.device)
                 for _ in range(2)]
        heads_major = [torch.zeros(n, s.num_kv_heads, tokens, s.head_dim, dtype=case.key_cache.dtype,
                                   device=case.device) for _ in range(2)]
        plans.append((slice(seqs[0], seqs[-1] + 1), rows, pages, heads_major, tokens, length))
    out = torch.empty_like(case.query)

    def run() -> torch.Tensor:
        for seqs, rows, (kpages, vpages), (keys, values), tokens, length in plans:
            n = seqs.stop - seqs.start
            for cache, paged, dense in ((case.key_cache, kpages, keys), (case.value_cache, vpages, values)):
                torch.index_select(cache, 0, rows, out=paged)
                dense.copy_(paged.view(n, tokens, s.num_kv_heads, s.head_dim).transpose(1, 2))
            result = _grouped_attention(query[seqs], keys[:, :, :length], values[:, :, :length], case.scale)
            out[seqs] = result.reshape(n, s.num_heads, s.head_dim)
        return out

    return run


# ---- NPU peers --------------------------------------------------------------------------------------------


def ifa_arguments(case: BenchCase) -> dict[str, Any]:
    """Keyword arguments of ``npu_incre_flash_attention`` for the paged cache (BSH layout).

    Q ``[B, 1, Hq*D]``, K/V ``[num_blocks, block_size, Hkv*D]`` (views, no copy), ``block_table`` int32 on the
    device, ``actual_seq_lengths`` a host list of ints.  ``scale_value`` must be passed: its default is 1.0.
    """
    s = case.shape
    return {
        "query": case.query.view(s.batch, 1, s.num_heads * s.head_dim),
        "key": case.key_cache.view(case.key_cache.shape[0], s.block_size, s.num_kv_heads * s.head_dim),
        "value": case.value_cache.view(case.value_cache.shape[0], s.block_size, s.num_kv_heads * s.head_dim),
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


#: head_dim values FIA's TND layout accepts.
FIA_TND_HEAD_DIMS = (64, 128, 192)
#: Side of the compressed causal mask that ``sparse_mode=3`` takes.
FIA_MASK_SIDE = 2048
FIA_SPARSE_MODE_CAUSAL = 3


def fia_arguments(case: BenchCase, scale_keyword: str = "scale") -> dict[str, Any]:
    """Keyword arguments of ``npu_fused_infer_attention_score`` as vLLM-Ascend's decode passes them (TND).

    Q ``[T, Hq, D]`` with ``T = batch`` (one token per sequence), ``actual_seq_lengths`` the cumulative query
    lengths ``[1, 2, ..., B]``, ``actual_seq_lengths_kv`` the per-sequence KV lengths, both host lists of
    ints; K/V the paged cache viewed ``[num_blocks, block_size, Hkv*D]``; ``sparse_mode=3`` with a
    2048 x 2048 upper-triangular bool mask (for one query token per sequence it masks nothing).
    """
    s = case.shape
    if s.head_dim not in FIA_TND_HEAD_DIMS:
        raise ValueError(f"FIA's TND layout takes head_dim {FIA_TND_HEAD_DIMS}, got {s.head_dim}")
    mask = torch.ones(FIA_MASK_SIDE, FIA_MASK_SIDE, dtype=torch.bool, device=case.query.device).triu(diagonal=1)
    return {
        "query": case.query,
        "key": case.key_cache.view(case.key_cache.shape[0], s.block_size, s.num_kv_heads * s.head_dim),
        "value": case.value_cache.view(case.value_cache.shape[0], s.block_size, s.num_kv_heads * s.head_dim),
        "atten_mask": mask,
        "block_table": case.block_table,
        "input_layout": "TND",
        "block_size": s.block_size,
        "actual_seq_lengths": list(range(1, s.batch + 1)),
        "actual_seq_lengths_kv": [int(n) for n in s.context_lens],
        "num_key_value_heads": s.num_kv_heads,
        "num_heads": s.num_heads,
        scale_keyword: case.scale,
        "sparse_mode": FIA_SPARSE_MODE_CAUSAL,
    }


def prepare_ifa(case: BenchCase, torch_npu: Any) -> Launch:
    s = case.shape
    args = ifa_arguments(case)
    op = torch_npu.npu_incre_flash_attention
    return lambda: op(**args).view(s.batch, s.num_heads, s.head_dim)


def prepare_fia(case: BenchCase, torch_npu: Any) -> Launch:
    s = case.shape
    args = fia_arguments(case, fia_scale_keyword())
    op = torch_npu.npu_fused_infer_attention_score
    return lambda: op(**args)[0].view(s.batch, s.num_heads, s.head_dim)  # TND out: [T = batch, Hq, D]


def available_npu_peers(torch_npu: Any) -> tuple[str, ...]:
    return tuple(name for name, attr in (("ifa", "npu_incre_flash_attention"),
                                         ("fia", "npu_fused_infer_attention_score")) if hasattr(torch_npu, attr))


def parse_external(spec: str) -> tuple[str, str]:
    """``NAME=PATH`` of ``--external``: a row name that is not one of ours, and a library path."""
    name, sep, path = spec.partition("=")
    name, path = name.strip(), path.strip()
    if not sep or not name or not path:
        raise ValueError(f"--external takes NAME=PATH, got {spec!r}")
    if name in BASELINES or name.startswith("pa-kit"):
        raise ValueError(f"--external name {name!r} is taken by a built-in implementation; pick another")
    return name, path


def prepare_external(case: BenchCase, path: str, backend: str, **options: Any) -> Any:
    """pa-kit's runner on an external ATB-ABI library at ``path``: same plan, arguments and golden check.

    On the npu backend the library is launched as an NPU kernel (an external ATB-ABI kernel gets its empty
    rows zeroed by the runner); on mock/sim it must speak the mock protocol (e.g. another build of the
    mock device), which is how the CPU tests exercise this path.  Returns the runner (its call launches).
    """
    from launcher import PagedAttentionRunner
    from launcher.backends import BACKENDS

    return PagedAttentionRunner(
        case.query, case.key_cache, case.value_cache, case.block_table, case.context_lens, scale=case.scale,
        backend=BACKENDS[backend](path), out=torch.empty_like(case.query), **options,
    )


def prepare_baseline(name: str, case: BenchCase, torch_npu: Any = None) -> Launch:
    """The launch callable of baseline ``name`` (one of :data:`BASELINES`)."""
    if name == "ifa":
        return prepare_ifa(case, torch_npu)
    if name == "fia":
        return prepare_fia(case, torch_npu)
    torch_peers = {"torch-paged": prepare_torch_paged, "torch-dense": prepare_torch_dense, "sdpa": prepare_sdpa}
    if name not in torch_peers:
        raise ValueError(f"baseline must be one of {', '.join(BASELINES)}, got {name!r}")
    return torch_peers[name](case)
