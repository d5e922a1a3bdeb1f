"""The torch peers of the CPU backends: paged decode written with torch operators, every decode feature included.

* ``torch-paged``: gather the pages into preallocated buffers, grouped matmul, softmax, matmul (gather timed);
* ``torch-dense``: the same on K/V gathered beforehand into ``[batch, kv_heads, keys, head_dim]``: the upper
  bound of what torch can do on this device;
* ``sdpa``: ``torch.nn.functional.scaled_dot_product_attention(enable_gqa=True)`` on that dense K/V (query
  tokens and windows through its boolean mask; no sinks, no lse).

Query heads are grouped per KV head, rows ordered (query token, head of the group).  With a window only the
keys some query token keeps are gathered (from :func:`~workloads.bytes_model.first_key_read`); what a token
must not see is masked.  A sink joins each row's softmax as one more logit whose weight is then dropped.

Absorbed MLA is the same code on other operands: the query and its rope part side by side (576 wide) against
keys that are the latent and its rope part side by side, gathered into one buffer, and values that are the first
512 columns of that buffer (a view: the latent is gathered once and read as K and as V).  That is multi-query
attention with one 576-wide key head, which is what ``score_j = scale * (q . kv_j + q_rope . rope_j)`` is.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from workloads.bytes_model import first_key_read, pages_used
from workloads.cases import BenchCase

Launch = Callable[[], Any]
#: (cache, the region of a heads-major buffer its gathered pages are copied into)
Targets = list[tuple[torch.Tensor, torch.Tensor]]


def sequence_kv(case: BenchCase, seq: int, cache: torch.Tensor, start: int = 0) -> torch.Tensor:
    """``[context - start, kv_heads, head_dim]``: keys (or values) ``start..context-1`` of sequence ``seq``."""
    s = case.shape
    length = s.context_lens[seq]
    first = start // s.block_size
    rows = case.block_table[seq, first:pages_used(length, s.block_size)].long()
    tokens = cache.index_select(0, rows).reshape(-1, s.num_kv_heads, cache.shape[-1])
    return tokens[start - first * s.block_size:length - first * s.block_size]


def query_operand(case: BenchCase) -> torch.Tensor:
    """The query the scores are taken with: ``case.query``, or for MLA the query and its rope part side by side."""
    if case.shape.is_mla:
        assert case.query_rope is not None, "an MLA case has a query_rope"
        return torch.cat([case.query, case.query_rope], dim=-1)
    return case.query


def grouped_query(case: BenchCase) -> torch.Tensor:
    """``[batch, kv_heads, q_len * group, width]`` of :func:`query_operand` (a view for one token per sequence
    without MLA, else a copy)."""
    s, query = case.shape, query_operand(case)
    width = query.shape[-1]
    if s.q_len == 1:
        return query.view(s.batch, s.num_kv_heads, s.group_size, width)
    tokens = query.view(s.batch, s.q_len, s.num_kv_heads, s.group_size, width)
    return tokens.transpose(1, 2).reshape(s.batch, s.num_kv_heads, s.q_len * s.group_size, width)


def ungroup(case: BenchCase, rows: torch.Tensor) -> torch.Tensor:
    """``[n, kv, q_len * group, ...]`` back to the query's layout ``[n, (q_len,) heads, ...]``."""
    s = case.shape
    n, tail = rows.shape[0], rows.shape[3:]
    if s.q_len == 1:
        return rows.reshape(n, s.num_heads, *tail)
    split = rows.view(n, s.num_kv_heads, s.q_len, s.group_size, *tail).transpose(1, 2)
    return split.reshape(n, s.q_len, s.num_heads, *tail)


def sink_rows(case: BenchCase) -> torch.Tensor | None:
    """Each grouped row's sink logit ``[kv_heads, q_len * group]`` (float32), or None."""
    s = case.shape
    if case.sinks is None:
        return None
    per_head = case.sinks.float().view(s.num_kv_heads, 1, s.group_size)
    return per_head.expand(s.num_kv_heads, s.q_len, s.group_size).reshape(s.num_kv_heads, -1).contiguous()


def token_mask(case: BenchCase, context: int, start: int) -> torch.Tensor | None:
    """``[q_len, keys]`` True where query token ``s`` (at ``context - q_len + s``) sees key ``start + j``;
    None when every token sees every key."""
    s = case.shape
    keys = torch.arange(start, context)
    position = torch.arange(context - s.q_len, context)
    keep = keys[None, :] <= position[:, None]
    if s.window_left >= 0:
        keep &= keys[None, :] >= (position - s.window_left)[:, None]
    return None if bool(keep.all()) else keep.to(case.device)


def row_mask(case: BenchCase, context: int, start: int) -> torch.Tensor | None:
    """:func:`token_mask` for the grouped rows (each token's row repeated for the heads of its group)."""
    mask = token_mask(case, context, start)
    return None if mask is None else mask.repeat_interleave(case.shape.group_size, dim=0)


def grouped_attention(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float,
                      mask: torch.Tensor | None = None, sinks: torch.Tensor | None = None,
                      want_lse: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """query ``[..., kv, rows, D]``, keys/values ``[..., kv, keys, D]``: matmuls in the input dtype, fp32 softmax;
    returns the output and (``want_lse``) each row's natural-log logsumexp, sink included."""
    scores = (query @ keys.transpose(-1, -2)).float() * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    if sinks is not None:
        scores = torch.cat([scores, sinks.expand(scores.shape[:-1]).unsqueeze(-1)], dim=-1)
    probs = torch.softmax(scores, dim=-1)
    if sinks is not None:
        probs = probs[..., :-1]
    lse = torch.logsumexp(scores, dim=-1) if want_lse else None
    return probs.to(query.dtype) @ values, lse


def _batches(case: BenchCase) -> list[tuple[slice, int, int]]:
    """(sequences, context, first key read): the whole batch at once when uniform, else one sequence each."""
    s = case.shape
    if s.uniform:
        return [(slice(0, s.batch), s.max_context, first_key_read(s.max_context, s.q_len, s.window_left))]
    return [(slice(seq, seq + 1), n, first_key_read(n, s.q_len, s.window_left))
            for seq, n in enumerate(s.context_lens)]


def _dense(case: BenchCase, caches: tuple[torch.Tensor, ...], seqs: slice, start: int) -> torch.Tensor:
    """``[n, kv_heads, context - start, width]`` of ``seqs``: the caches' rows side by side (one cache, or MLA's
    latent and rope), filled one sequence at a time (no stacking copy: at 128K tokens a cache is gigabytes)."""
    s = case.shape
    n, length = seqs.stop - seqs.start, s.context_lens[seqs.start] - start
    width = sum(cache.shape[-1] for cache in caches)
    dense = torch.empty(n, s.num_kv_heads, length, width, dtype=caches[0].dtype, device=case.device)
    for i, seq in enumerate(range(seqs.start, seqs.stop)):
        column = 0
        for cache in caches:
            part = slice(column, column + cache.shape[-1])
            dense[i, ..., part].copy_(sequence_kv(case, seq, cache, start).transpose(0, 1))
            column = part.stop
    return dense


def _dense_kv(case: BenchCase, seqs: slice, start: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values of ``seqs`` from key ``start`` on; for MLA the values are a view of the keys' latent."""
    s = case.shape
    if s.is_mla:
        assert case.kv_rope_cache is not None, "an MLA case has a kv_rope_cache"
        keys = _dense(case, (case.key_cache, case.kv_rope_cache), seqs, start)
        return keys, keys[..., :s.head_dim]
    return _dense(case, (case.key_cache,), seqs, start), _dense(case, (case.value_cache,), seqs, start)


def _plain(case: BenchCase) -> bool:
    """No decode feature beyond MLA's own operands: the launch can return the attention's result as is."""
    return not set(case.shape.features) - {"mla"}


class _Outputs:
    """The preallocated output (and lse) a launch writes, empty sequences already in their final state."""

    def __init__(self, case: BenchCase) -> None:
        self.case, self.want_lse = case, case.shape.lse
        self.out = torch.zeros_like(case.query)
        self.lse = torch.full(case.query.shape[:-1], -math.inf, dtype=torch.float32, device=case.device) \
            if self.want_lse else None

    def write(self, seqs: slice, out: torch.Tensor, lse: torch.Tensor | None) -> None:
        self.out[seqs] = ungroup(self.case, out)
        if self.lse is not None and lse is not None:
            self.lse[seqs] = ungroup(self.case, lse.unsqueeze(-1)).squeeze(-1)

    def result(self) -> Any:
        return (self.out, self.lse) if self.want_lse else self.out


def prepare_torch_dense(case: BenchCase) -> Launch:
    s = case.shape
    query, sinks, outputs = grouped_query(case), sink_rows(case), _Outputs(case)
    plans = [(seqs, *_dense_kv(case, seqs, start), row_mask(case, context, start))
             for seqs, context, start in _batches(case) if context > 0]
    if len(plans) == 1 and _plain(case):  # plain uniform decode: no copy into a preallocated output
        _, keys, values, _ = plans[0]
        return lambda: ungroup(case, grouped_attention(query, keys, values, case.scale)[0])

    def run() -> Any:
        for seqs, keys, values, mask in plans:
            out, lse = grouped_attention(query[seqs], keys, values, case.scale, mask, sinks, s.lse)
            outputs.write(seqs, out, lse)
        return outputs.result()

    return run


def prepare_sdpa(case: BenchCase) -> Launch:
    """Query tokens and windows go in as sdpa's boolean mask (True: attend); sinks and lse it cannot express.

    MLA goes in as multi-query attention written as rows: the grouped query ``[batch, 1, q_len * heads, 576]``
    against the one latent head, each row masked as its token.  (``enable_gqa`` would copy the latent once per
    query head: 128 copies of the cache.)"""
    s = case.shape
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if s.is_mla:
        query = grouped_query(case)
    elif s.q_len == 1:
        query = case.query.view(s.batch, s.num_heads, 1, s.head_dim)
    else:
        query = case.query.transpose(1, 2).contiguous()  # [batch, heads, q_len, head_dim]
    masks = row_mask if s.is_mla else token_mask
    plans = [(seqs, *_dense_kv(case, seqs, start), masks(case, context, start))
             for seqs, context, start in _batches(case) if context > 0]
    out = torch.zeros_like(case.query)

    def attend(seqs: slice, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        result = sdpa(query[seqs], keys, values, attn_mask=mask, scale=case.scale, enable_gqa=not s.is_mla)
        if s.is_mla:
            return ungroup(case, result)
        return result.view(-1, s.num_heads, s.head_dim) if s.q_len == 1 else result.transpose(1, 2)

    if len(plans) == 1 and _plain(case):
        return lambda: attend(*plans[0])

    def run() -> torch.Tensor:
        for seqs, keys, values, mask in plans:
            out[seqs] = attend(seqs, keys, values, mask)
        return out

    return run


def prepare_torch_paged(case: BenchCase) -> Launch:
    """Gather pages with ``index_select(out=...)``, copy them to ``[kv_heads, tokens, width]``, attend.

    Both copies go to buffers allocated and touched here; attending on the strided view of the gathered
    pages instead is several times slower on the CPU (torch copies it into fresh memory per call).  For MLA the
    latent and rope pages are copied side by side into one key buffer whose first 512 columns are the values.
    """
    s = case.shape
    query, sinks, outputs = grouped_query(case), sink_rows(case), _Outputs(case)
    plans = []
    for seqs, context, start in _batches(case):
        if context == 0:
            continue
        first = start // s.block_size
        count = pages_used(context, s.block_size) - first
        rows = case.block_table[seqs, first:first + count].reshape(-1).long()
        n, tokens = seqs.stop - seqs.start, count * s.block_size
        keys, values, targets = _heads_major(case, n, tokens)
        copies = [(cache, torch.zeros(n * count, *cache.shape[1:], dtype=cache.dtype, device=case.device), dense)
                  for cache, dense in targets]
        kept = slice(start - first * s.block_size, context - first * s.block_size)
        plans.append((seqs, rows, copies, keys, values, tokens, kept, row_mask(case, context, start)))

    def run() -> Any:
        for seqs, rows, copies, keys, values, tokens, kept, mask in plans:
            n = seqs.stop - seqs.start
            for cache, paged, dense in copies:
                torch.index_select(cache, 0, rows, out=paged)
                dense.copy_(paged.view(n, tokens, s.num_kv_heads, cache.shape[-1]).transpose(1, 2))
            out, lse = grouped_attention(query[seqs], keys[:, :, kept], values[:, :, kept], case.scale, mask,
                                         sinks, s.lse)
            outputs.write(seqs, out, lse)
        return outputs.result()

    return run


def _heads_major(case: BenchCase, n: int, tokens: int) -> tuple[torch.Tensor, torch.Tensor, Targets]:
    """Keys, values and (cache, region of the keys/values it is copied into): ``[n, kv_heads, tokens, width]``
    buffers, for MLA one buffer of latent and rope side by side whose latent columns are the values."""
    s = case.shape
    if s.is_mla:
        assert case.kv_rope_cache is not None, "an MLA case has a kv_rope_cache"
        keys = torch.zeros(n, 1, tokens, s.head_dim + s.rope_dim, dtype=case.key_cache.dtype, device=case.device)
        latent = keys[..., :s.head_dim]
        return keys, latent, [(case.key_cache, latent), (case.kv_rope_cache, keys[..., s.head_dim:])]
    keys, values = (torch.zeros(n, s.num_kv_heads, tokens, s.head_dim, dtype=case.key_cache.dtype,
                                device=case.device) for _ in range(2))
    return keys, values, [(case.key_cache, keys), (case.value_cache, values)]


TORCH_PEERS: dict[str, Callable[[BenchCase], Launch]] = {
    "torch-paged": prepare_torch_paged, "torch-dense": prepare_torch_dense, "sdpa": prepare_sdpa,
}
