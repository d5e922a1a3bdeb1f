"""pa-kit's one float64 golden and its one tolerance policy, used by the accuracy suite, the mock and
simulation tests and the benchmark.

**Golden.** A dense gather of each sequence's pages through the block table, then softmax attention in
float64, one (sequence, KV head) at a time so that long contexts fit in memory.  It shares no code with the
planner or the kernels.

**Tolerance.** How far an honest low-precision kernel lands from the golden depends on the case (softmax
length, output magnitudes, dtype), so a fixed (atol, rtol) table is loose for some cases and tight for
others: it judged a 32K context by a 2K context's budget.  The tolerance of a case is therefore derived
from that case, by the rule flash-attention's tests use: compute the same attention with torch in the input
dtype (every tensor, scores and softmax in fp16/bf16) and allow the kernel ``ERROR_FACTOR`` times torch's
largest error against the golden, plus a floor for cases where torch happens to be exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

#: The kernel may be this many times as far from the golden as torch's own low-precision attention.
ERROR_FACTOR = 2.0
#: Added to the allowed error so that a case torch computes exactly (all rows empty, one-token contexts)
#: does not demand bit-exactness from a kernel that rounds in another order: far below one fp16 ulp at 1.
ERROR_FLOOR = 1e-6


@dataclass(frozen=True)
class Features:
    """The decode features beyond plain attention, with the semantics every part of pa-kit shares (docs/API.md,
    "Decode features").

    ``window_left = W >= 0`` keeps keys ``max(0, p - W) .. p`` of a query token at position ``p``; -1 keeps all.
    ``sinks`` ``[num_heads]``: one logit per query head that joins the softmax denominator only.
    """

    window_left: int = -1
    sinks: torch.Tensor | None = None


NO_FEATURES = Features()


def as_tokens(query: torch.Tensor) -> torch.Tensor:
    """``[batch, heads, dim]`` (one token) as ``[batch, 1, heads, dim]``; ``[batch, q_len, heads, dim]`` as is."""
    return query.unsqueeze(1) if query.dim() == 3 else query


def attention_lse(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                  block_table: torch.Tensor, lens: tuple[int, ...] | list[int], scale: float,
                  precision: torch.dtype, features: Features = NO_FEATURES) -> tuple[torch.Tensor, torch.Tensor]:
    """Paged decode attention with every operation in ``precision``, and the natural-log logsumexp of each row's
    scaled logits (sink included) in float64.

    ``query`` ``[batch, heads, dim]`` or ``[batch, q_len, heads, dim]``; ``lens[i]`` counts sequence i's query
    tokens: token s sits at position ``lens[i] - q_len + s`` and attends causally to keys up to it.  An empty
    sequence gives zero rows and lse ``-inf``.  The output has the query's shape with the values' width (which
    may differ from the keys', as in MLA); lse is ``[batch, (q_len,) heads]``.
    """
    tokens = as_tokens(query)
    batch, q_len, num_heads, _ = tokens.shape
    _, block_size, num_kv_heads, _ = key_cache.shape
    group = num_heads // num_kv_heads
    out = torch.zeros(batch, q_len, num_heads, value_cache.shape[-1], dtype=precision)
    lse = torch.full((batch, q_len, num_heads), -math.inf, dtype=torch.float64)
    table = block_table.cpu()
    sinks = features.sinks.cpu().to(precision) if features.sinks is not None else None
    for seq, length in enumerate(lens):
        if length == 0:
            continue
        pages = table[seq, :-(-length // block_size)].long()
        position = torch.arange(length)
        for s in range(q_len):
            p = length - q_len + s
            keep = position <= p
            if features.window_left >= 0:
                keep &= position >= p - features.window_left
            # pages a window leaves out may hold any id (engines free them): gather only the kept keys' pages
            kept = position[keep]
            page_of = pages[kept // block_size]
            keys = key_cache.cpu()[page_of, kept % block_size].to(precision)
            values = value_cache.cpu()[page_of, kept % block_size].to(precision)
            for kv_head in range(num_kv_heads):
                heads = slice(kv_head * group, (kv_head + 1) * group)
                q = tokens[seq, s, heads].cpu().to(precision)
                scores = q @ keys[:, kv_head].T * scale
                if sinks is not None:
                    scores = torch.cat([scores, sinks[heads, None]], dim=1)
                weights = torch.softmax(scores, dim=-1)[:, : kept.numel()]
                out[seq, s, heads] = weights @ values[:, kv_head]
                lse[seq, s, heads] = torch.logsumexp(scores.double(), dim=-1)
    if query.dim() == 3:
        return out[:, 0], lse[:, 0]
    return out, lse


def attention(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, block_table: torch.Tensor,
              lens: tuple[int, ...] | list[int], scale: float, precision: torch.dtype,
              features: Features = NO_FEATURES) -> torch.Tensor:
    """Paged decode attention with every operation in ``precision``; empty sequences give zero rows."""
    return attention_lse(query, key_cache, value_cache, block_table, lens, scale, precision, features)[0]


@dataclass(frozen=True)
class Reference:
    """The golden of one case and the error torch's own low-precision attention makes on it."""

    golden: torch.Tensor  # float64, the query's shape
    torch_error: float
    lse: torch.Tensor | None = None  # float64 [B, (q_len,) Hq]: natural-log logsumexp of the scaled logits

    @property
    def allowed_error(self) -> float:
        return ERROR_FACTOR * self.torch_error + ERROR_FLOOR


def reference(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, block_table: torch.Tensor,
              lens: tuple[int, ...] | list[int], scale: float, features: Features = NO_FEATURES) -> Reference:
    """The golden and torch's error in the inputs' own dtype (fp16 or bf16) on these inputs."""
    golden, lse = attention_lse(query, key_cache, value_cache, block_table, lens, scale, torch.float64, features)
    low = attention(query, key_cache, value_cache, block_table, lens, scale, query.dtype, features)
    return Reference(golden, float((low.double() - golden).abs().max()) if golden.numel() else 0.0, lse)


def mla_reference(query: torch.Tensor, query_rope: torch.Tensor, kv_cache: torch.Tensor, kv_rope_cache: torch.Tensor,
                  block_table: torch.Tensor, lens: tuple[int, ...] | list[int], scale: float) -> Reference:
    """The golden of absorbed MLA decode: MQA whose keys are the latent and its rope part side by side (576
    wide) and whose values are the latent alone (512 wide), the definition ``score_j = scale * (q . kv_j +
    q_rope . rope_j)`` written as one dot product.  Inputs as :func:`launcher.mla.mla_paged_attention` takes
    them; torch's error is that of the same attention with every operation in the inputs' dtype."""
    return reference(torch.cat([query, query_rope], dim=-1), torch.cat([kv_cache, kv_rope_cache], dim=-1),
                     kv_cache, block_table, lens, scale)


#: lse is computed in fp32 from fp16/bf16 logits: its error is that of the scores (a few ulps of the largest
#: logit) plus fp32 rounding of the sum.  Allowed: this many times torch's low-precision output error, at least
#: LSE_FLOOR (absolute, in natural-log units).
LSE_FLOOR = 2e-3


def compare_lse(lse: torch.Tensor, ref: Reference) -> Comparison:
    """A kernel's lse against the golden's (``-inf`` rows must be ``-inf``); NaN counts as an infinite error."""
    assert ref.lse is not None, "the reference was built without lse"
    got, want = lse.detach().cpu().double(), ref.lse
    both_inf = torch.isinf(got) & torch.isinf(want) & (torch.sign(got) == torch.sign(want))
    error = torch.where(both_inf, torch.zeros_like(got), (got - want).abs())
    error = torch.where(torch.isfinite(error), error, torch.full_like(error, math.inf))
    flat = int(torch.argmax(error).item()) if error.numel() else 0
    index = tuple(int(i) for i in np.unravel_index(flat, tuple(error.shape))) if error.numel() else ()
    worst = float(error.max().item()) if error.numel() else 0.0
    allowed = max(LSE_FLOOR, ERROR_FACTOR * ref.torch_error)
    return Comparison(worst, index, allowed, ref.torch_error)


@dataclass(frozen=True)
class Comparison:
    """An output against a :class:`Reference`: the worst error, where, and the case's allowed error."""

    max_abs_error: float
    worst_index: tuple[int, ...]
    allowed_error: float
    torch_error: float

    @property
    def worst_ratio(self) -> float:
        return self.max_abs_error / self.allowed_error

    @property
    def passed(self) -> bool:
        return self.max_abs_error <= self.allowed_error

    def summary(self) -> str:
        return (f"max abs error {self.max_abs_error:.3e} at [seq, head, dim] = {list(self.worst_index)}; allowed "
                f"{self.allowed_error:.3e} ({ERROR_FACTOR:g} x torch's low-precision error "
                f"{self.torch_error:.3e} + {ERROR_FLOOR:g}), ratio {self.worst_ratio:.3f}")


def compare(out: torch.Tensor, ref: Reference) -> Comparison:
    """``out`` against ``ref``; NaN or inf anywhere counts as an infinite error."""
    error = (out.detach().cpu().double() - ref.golden).abs()
    error = torch.where(torch.isfinite(error), error, torch.full_like(error, math.inf))
    flat = int(torch.argmax(error).item()) if error.numel() else 0
    index = tuple(int(i) for i in np.unravel_index(flat, tuple(error.shape))) if error.numel() else ()
    worst = float(error.max().item()) if error.numel() else 0.0
    return Comparison(worst, index, ref.allowed_error, ref.torch_error)
