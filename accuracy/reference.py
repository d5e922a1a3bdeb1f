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


def attention(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, block_table: torch.Tensor,
              lens: tuple[int, ...] | list[int], scale: float, precision: torch.dtype) -> torch.Tensor:
    """Paged decode attention with every operation in ``precision``; empty sequences give zero rows."""
    batch, num_heads, head_dim = query.shape
    _, block_size, num_kv_heads, _ = key_cache.shape
    group = num_heads // num_kv_heads
    out = torch.zeros(batch, num_heads, head_dim, dtype=precision)
    table = block_table.cpu()
    for seq, length in enumerate(lens):
        if length == 0:
            continue
        pages = table[seq, :-(-length // block_size)].long()
        keys = key_cache.cpu()[pages].reshape(-1, num_kv_heads, head_dim)[:length].to(precision)
        values = value_cache.cpu()[pages].reshape(-1, num_kv_heads, head_dim)[:length].to(precision)
        for kv_head in range(num_kv_heads):
            heads = slice(kv_head * group, (kv_head + 1) * group)
            q = query[seq, heads].cpu().to(precision)
            scores = q @ keys[:, kv_head].T * scale
            out[seq, heads] = torch.softmax(scores, dim=-1) @ values[:, kv_head]
    return out


@dataclass(frozen=True)
class Reference:
    """The golden of one case and the error torch's own low-precision attention makes on it."""

    golden: torch.Tensor  # float64 [B, Hq, D]
    torch_error: float

    @property
    def allowed_error(self) -> float:
        return ERROR_FACTOR * self.torch_error + ERROR_FLOOR


def reference(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, block_table: torch.Tensor,
              lens: tuple[int, ...] | list[int], scale: float) -> Reference:
    """The golden and torch's error in the inputs' own dtype (fp16 or bf16) on these inputs."""
    golden = attention(query, key_cache, value_cache, block_table, lens, scale, torch.float64)
    low = attention(query, key_cache, value_cache, block_table, lens, scale, query.dtype)
    return Reference(golden, float((low.double() - golden).abs().max()) if golden.numel() else 0.0)


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
