"""The roofline of a shape on an A2: is the launch bound by HBM or by the cube?

A decode launch cannot beat ``max(FLOPs / cube peak, bytes / HBM bandwidth)``.  Which term wins is the shape's
arithmetic intensity (FLOPs per byte) against the machine's ridge point (cube peak / bandwidth).  GQA decode sits
far below the ridge whatever its size (each K/V byte serves one KV group's few heads).  Absorbed MLA is the case
that moves: every query head reuses the same latent, so its intensity is about ``heads x q_len x 1088 / 576``
FLOP per byte, and DeepSeek-V3 at 128 heads per rank lands at A2's ridge, 16 heads (TP 8) far below it.

Two intensities are reported per shape:

* **ideal**: the bytes model's (``workloads/bytes_model.py``): every K/V byte read once.  The shape's label
  (``memory-bound`` / ``compute-bound``) is this one: it is what the shape is, whatever the kernel does.
* **plan**: the K/V bytes times the number of times pa-kit's A2 plan (24 cube cores) reads them.  A task takes
  at most ``HEAD_SPLIT_LIMIT`` query heads, so a KV group wider than that is split over several tasks and each
  of them streams the group's K/V again: MLA's 128 heads are 4 tasks of 32, reading the latent 4 times.

A2's numbers are the ones the timing model already uses (``docs/TIMING_MODEL.md``): HBM 1.6 TB/s
(``timing.model.ModelConstants.hbm_peak_bytes_per_s``), 24 cube cores (``cube_cores``) at 1.85 GHz (pto-isa's
``kMainFrequencyHz``, ``timing/costs.py``), each doing one 16 x 16 x 16 fp16/bf16 fractal per cycle (pto-isa's
``mad`` cost: one cycle per fractal repeat for 2-byte operands, ``timing/costs.py``): 363.8 TFLOP/s, a ridge
at 227 FLOP/byte.  No Huawei datasheet is cited for either figure; they are the model's, labelled as such.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from timing.model import DEFAULT as MODEL
from timing.model import cube_peak_flops_per_s
from workloads import bytes_model
from workloads.shapes import BenchShape

MEMORY_BOUND, COMPUTE_BOUND = "memory-bound", "compute-bound"
US_PER_S = 1e6


@dataclass(frozen=True)
class Machine:
    """The two roofs: HBM bandwidth (bytes/s) and the cube's fp16/bf16 peak (FLOP/s)."""

    name: str
    hbm_bytes_per_s: float
    cube_flops_per_s: float

    @property
    def ridge(self) -> float:
        """FLOP per byte above which the cube, not HBM, bounds a launch."""
        return self.cube_flops_per_s / self.hbm_bytes_per_s


A2 = Machine("A2 (910B-class; timing model's constants)", MODEL.hbm_peak_bytes_per_s,
             cube_peak_flops_per_s(MODEL.cube_cores))


def bound_of(intensity: float, machine: Machine = A2) -> str:
    return COMPUTE_BOUND if intensity >= machine.ridge else MEMORY_BOUND


@dataclass(frozen=True)
class Roofline:
    """One shape against one machine; ``kv_reads`` None when no plan could be made (the plan figures are then
    absent)."""

    flops: int
    bytes: int
    kv_bytes: int
    kv_reads: float | None
    machine: Machine = A2

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else math.inf

    @property
    def bound(self) -> str:
        return bound_of(self.intensity, self.machine)

    @property
    def plan_bytes(self) -> int | None:
        if self.kv_reads is None:
            return None
        return round(self.bytes + self.kv_bytes * (self.kv_reads - 1))

    @property
    def plan_intensity(self) -> float | None:
        plan = self.plan_bytes
        return None if plan is None else (self.flops / plan if plan else math.inf)

    @property
    def plan_bound(self) -> str | None:
        intensity = self.plan_intensity
        return None if intensity is None else bound_of(intensity, self.machine)

    @property
    def floor_us(self) -> float:
        """The ideal roofline time: no launch on this machine can be faster."""
        return self._time_us(self.bytes)

    @property
    def plan_floor_us(self) -> float | None:
        """The roofline time of the plan's traffic: what pa-kit's grid can reach at best."""
        plan = self.plan_bytes
        return None if plan is None else self._time_us(plan)

    def _time_us(self, nbytes: int) -> float:
        return max(self.flops / self.machine.cube_flops_per_s, nbytes / self.machine.hbm_bytes_per_s) * US_PER_S

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (``BenchRecord.roofline``)."""
        return {"machine": self.machine.name, "hbm_tb_per_s": self.machine.hbm_bytes_per_s / 1e12,
                "cube_tflop_per_s": self.machine.cube_flops_per_s / 1e12, "ridge_flop_per_byte": self.machine.ridge,
                "flops": self.flops, "bytes": self.bytes, "flop_per_byte": self.intensity, "bound": self.bound,
                "floor_us": self.floor_us, "plan_kv_reads": self.kv_reads, "plan_bytes": self.plan_bytes,
                "plan_flop_per_byte": self.plan_intensity, "plan_bound": self.plan_bound,
                "plan_floor_us": self.plan_floor_us}

    def summary(self) -> str:
        return describe(self.as_dict())


def describe(figures: dict[str, Any]) -> str:
    """One line from :meth:`Roofline.as_dict`'s figures (a report read back from JSON has only those), e.g.
    ``9.13 GFLOP / 40 MB = 228 FLOP/B (1.00x ridge): compute-bound, floor 25.1 µs; plan reads K/V x4: 60 FLOP/B,
    memory-bound, floor 95.2 µs``."""
    intensity, ridge = figures["flop_per_byte"], figures["ridge_flop_per_byte"]
    text = (f"{figures['flops'] / 1e9:.3g} GFLOP / {figures['bytes'] / 1e6:.3g} MB = {intensity:.0f} FLOP/B "
            f"({intensity / ridge:.2f}x ridge): {figures['bound']}, floor {figures['floor_us']:.3g} µs")
    if figures.get("plan_kv_reads") is not None:
        text += (f"; plan reads K/V x{figures['plan_kv_reads']:.3g}: {figures['plan_flop_per_byte']:.0f} FLOP/B, "
                 f"{figures['plan_bound']}, floor {figures['plan_floor_us']:.3g} µs")
    return text


def kv_reads(plan: Any) -> float:
    """How many times ``plan`` reads each K/V byte, averaged over the batch: a KV group of ``g`` query heads
    split into tasks of ``h < g`` heads is read ``ceil(g / h)`` times (whole groups per task read it once).
    Sequences of the former pass take ``former_head`` heads per task, those of the tail pass ``tail_head``; the
    average weighs them by count, exact for a uniform batch."""
    split, group = plan.split, plan.num_heads // plan.num_kv_heads

    def reads(head_split: int) -> int:
        return math.ceil(group / head_split) if 0 < head_split < group else 1

    tail = split.tail_batch if split.tail_head else 0
    former = plan.batch - tail
    return (former * reads(split.former_head) + tail * reads(split.tail_head)) / max(1, plan.batch)


def plan_of(shape: BenchShape, core_count: int = MODEL.cube_cores) -> Any:
    """pa-kit's plan of ``shape`` for an A2's cube cores (the planner's own choice, as a launch would make it)."""
    from tiling import plan_paged_attention

    pages = bytes_model.pages_used(shape.max_context, shape.block_size)
    total = sum(bytes_model.pages_used(n, shape.block_size) for n in shape.context_lens)
    return plan_paged_attention(
        list(shape.context_lens), num_heads=shape.num_heads, num_kv_heads=shape.num_kv_heads,
        head_dim=shape.head_dim, block_size=shape.block_size, max_pages=max(1, pages), num_blocks=max(1, total),
        scale=1.0, dtype=shape.dtype, core_count=core_count, q_len=shape.q_len, window_left=shape.window_left,
        sinks_dtype="bf16" if shape.sinks else None, return_lse=shape.lse, rope_dim=shape.rope_dim)


def roofline(shape: BenchShape, machine: Machine = A2) -> Roofline:
    """``shape``'s roofline on ``machine``; the plan figures are left out when the planner refuses the shape."""
    traffic = bytes_model.traffic(shape)
    try:
        reads: float | None = kv_reads(plan_of(shape))
    except (ValueError, TypeError):
        reads = None
    return Roofline(traffic.flops, traffic.total_bytes, traffic.kv_bytes, reads, machine)
