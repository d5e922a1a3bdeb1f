"""The one bytes/FLOPs model of the benchmark.  Every figure the report prints comes from here.

Bytes a decode launch must move at least once between memory and the chip:

* Q:  batch x num_heads x head_dim elements, read;
* K, V: only the *valid* tokens, sum(context_lens) x num_kv_heads x head_dim elements each, read once
  (a kernel that reads each K/V tile once per KV group, as GQA allows);
* O:  batch x num_heads x head_dim elements, written (same dtype as Q);
* the block table: the int32 entries the sequences use, ceil(context / block_size) per sequence.

Workspace round trips (S, P, O_tmp, split-KV partials) are not counted: they are the kernel's own cost.
Bandwidth is decimal: 1 TB/s = 1e12 bytes/s and 1 GB/s = 1e9 bytes/s (not TiB/GiB).
FLOPs: two matmuls of 2 x num_heads x context x head_dim each per sequence: 4 x Hq x ctx x D summed over the
batch (4·B·Hq·ctx·D for a uniform batch); softmax is not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from workloads.shapes import BenchShape

ELEMENT_BYTES = {"fp16": 2, "bf16": 2}
BLOCK_TABLE_ENTRY_BYTES = 4
#: Two matmuls (Q·Kᵀ and P·V), each a multiply and an add per element.
FLOPS_PER_QUERY_KEY_ELEMENT = 4
BYTES_PER_TB = 1e12
BYTES_PER_GB = 1e9
MS_PER_S = 1e3

DESCRIPTION = (
    "bytes = Q + valid K/V tokens + O + used block-table entries (int32); workspace traffic not counted; "
    "decimal units (1 TB/s = 1e12 B/s); FLOPs = 4 x Hq x D x sum(context)"
)


@dataclass(frozen=True)
class TrafficModel:
    """Minimum traffic and work of one launch for a shape."""

    q_bytes: int
    kv_bytes: int
    o_bytes: int
    block_table_bytes: int
    flops: int

    @property
    def total_bytes(self) -> int:
        return self.q_bytes + self.kv_bytes + self.o_bytes + self.block_table_bytes


def pages_used(context: int, block_size: int) -> int:
    """Pages (block-table entries) a sequence of ``context`` tokens reads."""
    return -(-context // block_size)


def traffic(shape: BenchShape) -> TrafficModel:
    """The model above, for ``shape``."""
    elem = ELEMENT_BYTES[shape.dtype]
    row_elems = shape.batch * shape.num_heads * shape.head_dim
    tokens = shape.total_context_tokens
    return TrafficModel(
        q_bytes=row_elems * elem,
        kv_bytes=2 * tokens * shape.num_kv_heads * shape.head_dim * elem,
        o_bytes=row_elems * elem,
        block_table_bytes=sum(pages_used(n, shape.block_size) for n in shape.context_lens) * BLOCK_TABLE_ENTRY_BYTES,
        flops=FLOPS_PER_QUERY_KEY_ELEMENT * shape.num_heads * shape.head_dim * tokens,
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
