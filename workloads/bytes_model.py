"""The one bytes/FLOPs model of the benchmark.  Every figure the report prints comes from here.

Bytes a decode launch must move at least once between memory and the chip:

* Q:  batch x q_len x num_heads x head_dim elements, read;
* K, V: only the *valid* tokens, num_kv_heads x head_dim elements each per token, read once (a kernel that reads
  each K/V tile once per KV group, as GQA allows): every token of the context, or with a window ``W`` the last
  ``W + q_len`` (what the sequence's query tokens keep between them);
* O:  batch x q_len x num_heads x head_dim elements, written (same dtype as Q);
* the block table: the int32 entries of the pages holding those tokens;
* with sinks, num_heads sink logits (bf16) read; with lse, batch x q_len x num_heads fp32 written.

Absorbed MLA (``rope_dim`` > 0, DeepSeek-V3): the one latent head (``head_dim`` = 512) is both K and V and sits
beside its rope part (64), so a token's K/V is 512 + 64 elements read once (1152 bytes in fp16/bf16); Q is
``head_dim + rope_dim`` wide, O ``head_dim``.  Its FLOPs per query-key pair are 2 x (576 + 512) per head: the
score over latent and rope, then P times the latent (``2 x H x q_len x ctx x 1088`` for a uniform batch).

Workspace round trips (S, P, O_tmp, split-KV partials) are not counted: they are the kernel's own cost.
Bandwidth is decimal: 1 TB/s = 1e12 bytes/s and 1 GB/s = 1e9 bytes/s (not TiB/GiB).
FLOPs: two matmuls of 2 x num_heads x keys x head_dim each per query token, ``keys`` the keys that token
attends to: 4 x Hq x D x sum(context) for one token per sequence (4·B·Hq·ctx·D for a uniform batch); softmax is
not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from workloads.shapes import BenchShape

ELEMENT_BYTES = {"fp16": 2, "bf16": 2}
BLOCK_TABLE_ENTRY_BYTES = 4
SINK_BYTES = 2  # bf16, what FIA v2's learnable_sink takes
LSE_BYTES = 4
#: Two matmuls (Q·Kᵀ and P·V), each a multiply and an add per element.
FLOPS_PER_QUERY_KEY_ELEMENT = 4
#: A multiply and an add per element of each matmul (MLA's two matmuls have different widths).
FLOPS_PER_MULTIPLY_ADD = 2
BYTES_PER_TB = 1e12
BYTES_PER_GB = 1e9
MS_PER_S = 1e3

DESCRIPTION = (
    "bytes = Q + valid K/V tokens (a window's only) + O + used block-table entries (int32) [+ sinks + lse]; "
    "workspace traffic not counted; decimal units (1 TB/s = 1e12 B/s); FLOPs = 4 x Hq x D x keys attended, "
    "summed over query tokens (sum(context) for one token per sequence); MLA: K/V = latent + rope read once, "
    "FLOPs = 2 x Hq x (D + R + D) x keys attended"
)


@dataclass(frozen=True)
class TrafficModel:
    """Minimum traffic and work of one launch for a shape."""

    q_bytes: int
    kv_bytes: int
    o_bytes: int
    block_table_bytes: int
    flops: int
    sink_bytes: int = 0
    lse_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        return self.q_bytes + self.kv_bytes + self.o_bytes + self.block_table_bytes + self.sink_bytes + self.lse_bytes


def pages_used(context: int, block_size: int) -> int:
    """Pages (block-table entries) a sequence of ``context`` tokens reads."""
    return -(-context // block_size)


def first_key_read(context: int, q_len: int, window_left: int) -> int:
    """Position of the first key any of a sequence's query tokens keeps (0 without a window)."""
    return 0 if window_left < 0 else max(0, context - q_len - window_left)


def keys_attended(context: int, q_len: int, window_left: int) -> int:
    """Query-key pairs of one sequence: token ``s`` at ``p = context - q_len + s`` attends to ``min(p, W) + 1``."""
    total = 0
    for s in range(min(q_len, context)):
        p = context - q_len + s
        total += p + 1 if window_left < 0 else min(p, window_left) + 1
    return total


def traffic(shape: BenchShape) -> TrafficModel:
    """The model above, for ``shape``."""
    elem = ELEMENT_BYTES[shape.dtype]
    rows = shape.batch * shape.q_len * shape.num_heads
    starts = [first_key_read(n, shape.q_len, shape.window_left) for n in shape.context_lens]
    tokens = sum(n - start for n, start in zip(shape.context_lens, starts, strict=True))
    pages = sum(pages_used(n, shape.block_size) - start // shape.block_size
                for n, start in zip(shape.context_lens, starts, strict=True) if n > 0)
    pairs = sum(keys_attended(n, shape.q_len, shape.window_left) for n in shape.context_lens)
    if shape.is_mla:  # one latent head read as K and V, its rope part beside it (module docstring)
        key_width = shape.head_dim + shape.rope_dim
        kv_elements = tokens * shape.num_kv_heads * key_width
        flops = FLOPS_PER_MULTIPLY_ADD * shape.num_heads * (key_width + shape.head_dim) * pairs
    else:
        key_width = shape.head_dim
        kv_elements = 2 * tokens * shape.num_kv_heads * shape.head_dim
        flops = FLOPS_PER_QUERY_KEY_ELEMENT * shape.num_heads * shape.head_dim * pairs
    return TrafficModel(
        q_bytes=rows * key_width * elem,
        kv_bytes=kv_elements * elem,
        o_bytes=rows * shape.head_dim * elem,
        block_table_bytes=pages * BLOCK_TABLE_ENTRY_BYTES,
        flops=flops,
        sink_bytes=shape.num_heads * SINK_BYTES if shape.sinks else 0,
        lse_bytes=rows * LSE_BYTES if shape.lse else 0,
    )


def tb_per_s(total_bytes: int, time_ms: float) -> float:
    """Decimal TB/s."""
    return total_bytes / BYTES_PER_TB / (time_ms / MS_PER_S)


def gb_per_s(total_bytes: int, time_ms: float) -> float:
    """Decimal GB/s."""
    return total_bytes / BYTES_PER_GB / (time_ms / MS_PER_S)


def tflop_per_s(flops: int, time_ms: float) -> float:
    return flops / 1e12 / (time_ms / MS_PER_S)


def percent_of_peak(achieved_gb_per_s: float, peak_gb_per_s: float | None) -> float | None:
    """Achieved / peak bandwidth in percent, or None when the peak is unknown."""
    if peak_gb_per_s is None or peak_gb_per_s <= 0:
        return None
    return 100.0 * achieved_gb_per_s / peak_gb_per_s
