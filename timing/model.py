"""The timing model's constants, each with its unit in the name and where its value comes from.

These are the model's assumptions about an A2 (910B-class: 24 cube cores, 48 vector sub-cores, 1.6 TB/s
HBM).  Which published number constrains which constant, and which numbers are held out, is written in
``docs/TIMING_MODEL.md``; a constant changes only through that protocol.  ``perturbed`` gives the ±25 % band
every claimed speed-up must survive.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace


@dataclass(frozen=True)
class ModelConstants:
    #: cube cores of a 910B-class A2 (each with two vector sub-cores)
    cube_cores: int = 24
    #: HBM nominal bandwidth of an A2 (Atlas 800T/I A2), decimal bytes/s
    hbm_peak_bytes_per_s: float = 1.6e12
    #: the share of nominal HBM bandwidth all cores together can draw (DMA and DRAM overheads)
    hbm_efficiency: float = 0.80
    #: DMA efficiency of a 32-byte aligned burst relative to a long one (vendor best-practice guides: ~70 %)
    dma_efficiency_32b: float = 0.70
    #: burst length from which a GM transfer runs at full DMA efficiency
    dma_full_efficiency_burst_bytes: int = 512
    #: extra efficiency loss of a burst whose start is not 32-byte aligned
    dma_misaligned_factor: float = 0.85
    #: one cube<->vector hand-off: FFTS flag plus the GM (L2) round trip it orders
    handoff_latency_s: float = 1.5e-6
    #: fixed cost of a launch: kernel start on all cores and the end barrier
    launch_floor_s: float = 12e-6
    #: a scalar read of GM (tiling words, block-table entries) through the scalar cache
    scalar_gm_read_s: float = 0.15e-6
    #: a scalar read of UB after a vector result (GetValue)
    scalar_ub_read_s: float = 0.02e-6
    #: bandwidth of scratch traffic (s/p/o_tmp/o_core/l) served from L2 rather than HBM, per core, bytes/s
    l2_bytes_per_s_per_core: float = 110e9

    def perturbed(self, name: str, factor: float) -> ModelConstants:
        """The same constants with ``name`` multiplied by ``factor`` (integers stay integers)."""
        value = getattr(self, name)
        return replace(self, **{name: type(value)(value * factor)})

    def names(self) -> list[str]:
        """The constants a sensitivity band varies (the chip's core count is a fact, not a fit)."""
        return [f.name for f in fields(self) if f.name != "cube_cores"]


DEFAULT = ModelConstants()
