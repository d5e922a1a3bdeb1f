"""The tensors of a benchmark shape: seeded inputs, each sequence's pages a shuffled subset of a larger cache.

Shared by the benchmark (``benchmark/``) and the timing model (``timing/``), which both run these cases.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from workloads.bytes_model import pages_used
from workloads.shapes import BenchShape

TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
#: Sinks are bf16, the one dtype FIA v2's ``learnable_sink`` takes (pa-kit takes fp32/bf16/fp16).
SINK_DTYPE = torch.bfloat16
#: Spread of the sink logits around the log of a row's softmax denominator (see :func:`draw_sinks`).
SINK_SPREAD = 1.5
#: Spare pages in the cache beyond what the sequences use, so that the shuffled table spans a larger cache.
SPARE_PAGE_FRACTION = 0.125


@dataclass
class BenchCase:
    """The tensors of one shape on one device.  ``block_table`` rows are shuffled over a larger cache.

    ``query`` is ``[batch, num_heads, head_dim]``, or ``[batch, q_len, num_heads, head_dim]`` when the shape has
    more than one query token per sequence; ``sinks`` ``[num_heads]`` (bf16) when it has sinks.
    """

    shape: BenchShape
    device: str
    query: torch.Tensor
    key_cache: torch.Tensor
    value_cache: torch.Tensor
    block_table: torch.Tensor
    context_lens: torch.Tensor
    scale: float
    sinks: torch.Tensor | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def window_left(self) -> int:
        return self.shape.window_left


def draw_sinks(shape: BenchShape, gen: torch.Generator) -> torch.Tensor:
    """One logit per query head, around the log of the softmax denominator of a row (keys attended, each
    ``e^(1/2)`` on average for N(0, 1) scores): a sink then carries a visible share of every row's weight, so an
    implementation that drops or misplaces it fails the golden check."""
    keys = shape.max_context if shape.window_left < 0 else min(shape.max_context, shape.window_left + 1)
    center = math.log(keys) + 0.5
    return (center + SINK_SPREAD * torch.randn(shape.num_heads, generator=gen)).to(SINK_DTYPE)


def build_case(shape: BenchShape, device: str = "cpu") -> BenchCase:
    """Seeded inputs for ``shape``: N(0, 1) values, each sequence's pages a random subset of the cache."""
    gen = torch.Generator().manual_seed(shape.seed)
    dtype = TORCH_DTYPES[shape.dtype]
    pages = [pages_used(n, shape.block_size) for n in shape.context_lens]
    total = sum(pages)
    num_blocks = total + max(1, math.ceil(total * SPARE_PAGE_FRACTION))
    page_shape = (shape.block_size, shape.num_kv_heads, shape.head_dim)
    tokens = (shape.batch, shape.q_len) if shape.q_len > 1 else (shape.batch,)
    query = torch.randn(*tokens, shape.num_heads, shape.head_dim, generator=gen, dtype=dtype)
    key_cache = torch.randn(num_blocks, *page_shape, generator=gen, dtype=dtype)
    value_cache = torch.randn(num_blocks, *page_shape, generator=gen, dtype=dtype)
    order = torch.randperm(num_blocks, generator=gen)[:total].to(torch.int32)
    # Entries past a sequence's last page hold 0, a valid id: IFA requires every entry in [0, num_blocks).
    block_table = torch.zeros(shape.batch, max(pages), dtype=torch.int32)
    start = 0
    for row, count in enumerate(pages):
        block_table[row, :count] = order[start:start + count]
        start += count
    lens = torch.tensor(shape.context_lens, dtype=torch.int32)
    tensors = [t.to(device) for t in (query, key_cache, value_cache, block_table, lens)]
    sinks = draw_sinks(shape, gen).to(device) if shape.sinks else None  # drawn last: other tensors keep their seeds
    return BenchCase(shape, device, *tensors, scale=1.0 / math.sqrt(shape.head_dim), sinks=sinks)
