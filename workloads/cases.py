"""The tensors of a benchmark shape: seeded inputs, each sequence's pages a shuffled subset of a larger cache.

Shared by the benchmark (``benchmark/``) and the timing model (``timing/``), which both run these cases.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from tiling.abi import kv_first_token
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

    An absorbed-MLA shape's ``key_cache`` is the latent cache ``[num_blocks, block_size, 1, 512]`` and
    ``value_cache`` is the same tensor (the latent is read as K and as V); ``query_rope`` (the query's shape with
    ``rope_dim`` last) and ``kv_rope_cache`` ``[num_blocks, block_size, 1, rope_dim]`` hold the rope parts.
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
    query_rope: torch.Tensor | None = None
    kv_rope_cache: torch.Tensor | None = None

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


def scale_of(shape: BenchShape) -> float:
    """``1/sqrt(width of a score's dot product)``: N(0, 1) inputs then give scores of unit variance.  For MLA the
    dot product runs over latent and rope (576): a model's own scale (DeepSeek-V3's carries YaRN's mscale) is
    about the model's weights, which random inputs do not have."""
    return 1.0 / math.sqrt(shape.head_dim + shape.rope_dim)


def build_case(shape: BenchShape, device: str = "cpu") -> BenchCase:
    """Seeded inputs for ``shape``: N(0, 1) values, each sequence's pages a random subset of the cache."""
    if shape.is_mla:
        return _build_mla_case(shape, device)
    gen = torch.Generator().manual_seed(shape.seed)
    dtype = TORCH_DTYPES[shape.dtype]
    num_blocks = _num_blocks(shape)
    page_shape = (shape.block_size, shape.num_kv_heads, shape.head_dim)
    tokens = (shape.batch, shape.q_len) if shape.q_len > 1 else (shape.batch,)
    query = torch.randn(*tokens, shape.num_heads, shape.head_dim, generator=gen, dtype=dtype)
    key_cache = torch.randn(num_blocks, *page_shape, generator=gen, dtype=dtype)
    value_cache = torch.randn(num_blocks, *page_shape, generator=gen, dtype=dtype)
    block_table = _block_table(shape, num_blocks, gen)
    lens = torch.tensor(shape.context_lens, dtype=torch.int32)
    tensors = [t.to(device) for t in (query, key_cache, value_cache, block_table, lens)]
    sinks = draw_sinks(shape, gen).to(device) if shape.sinks else None  # drawn last: other tensors keep their seeds
    return BenchCase(shape, device, *tensors, scale=scale_of(shape), sinks=sinks)


def _first_page(shape: BenchShape, context: int) -> int:
    """The first page a sequence's query tokens read: the one holding its first token's window's first key (0
    without a window).  Pages before it are never read; an engine frees them as the window slides."""
    return kv_first_token(context, shape.q_len, shape.window_left, shape.block_size) // shape.block_size


def _num_blocks(shape: BenchShape) -> int:
    """The pages the sequences read plus spares, so that the shuffled table spans a larger cache.  A windowed
    shape holds only its windows' pages, as an engine does: a 32K-token gpt-oss layer is as cheap to set up as
    a 128-token one."""
    total = sum(pages_used(n, shape.block_size) - _first_page(shape, n) for n in shape.context_lens)
    return total + max(1, math.ceil(total * SPARE_PAGE_FRACTION))


def _block_table(shape: BenchShape, num_blocks: int, gen: torch.Generator) -> torch.Tensor:
    """Each sequence's pages a shuffled subset of ``num_blocks``.  Entries past a sequence's last page, and those
    before its first page read (a window's freed pages), hold a spare page's id, a valid one that no sequence
    reads: IFA requires every entry in [0, num_blocks)."""
    pages = [pages_used(n, shape.block_size) for n in shape.context_lens]
    firsts = [_first_page(shape, n) for n in shape.context_lens]
    order = torch.randperm(num_blocks, generator=gen).to(torch.int32)
    used = sum(p - f for p, f in zip(pages, firsts, strict=True))
    spare = int(order[used]) if any(firsts) else 0
    table = torch.full((shape.batch, max(pages)), spare, dtype=torch.int32)
    start = 0
    for row, (count, first) in enumerate(zip(pages, firsts, strict=True)):
        table[row, first:count] = order[start:start + count - first]
        start += count - first
    return table


def _build_mla_case(shape: BenchShape, device: str) -> BenchCase:
    """An absorbed-MLA case: query and its rope part, the latent cache (K and V) and the rope cache."""
    gen = torch.Generator().manual_seed(shape.seed)
    dtype = TORCH_DTYPES[shape.dtype]
    num_blocks = _num_blocks(shape)
    tokens = (shape.batch, shape.q_len) if shape.q_len > 1 else (shape.batch,)
    query = torch.randn(*tokens, shape.num_heads, shape.head_dim, generator=gen, dtype=dtype)
    query_rope = torch.randn(*tokens, shape.num_heads, shape.rope_dim, generator=gen, dtype=dtype)
    latent = torch.randn(num_blocks, shape.block_size, 1, shape.head_dim, generator=gen, dtype=dtype)
    rope = torch.randn(num_blocks, shape.block_size, 1, shape.rope_dim, generator=gen, dtype=dtype)
    table = _block_table(shape, num_blocks, gen)
    lens = torch.tensor(shape.context_lens, dtype=torch.int32)
    query, query_rope, latent, rope, table, lens = (t.to(device) for t in (query, query_rope, latent, rope, table,
                                                                           lens))
    return BenchCase(shape, device, query, latent, latent, table, lens, scale=scale_of(shape), query_rope=query_rope,
                     kv_rope_cache=rope)
