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
    """Values before device contact, as docs/TIMING_MODEL.md ("Constants and what constrains each") sets them."""

    #: cube cores of a 910B-class A2 (each with two vector sub-cores)
    cube_cores: int = 24
    #: HBM nominal bandwidth of an A2, decimal bytes/s (the floor of every prediction: rule 4)
    hbm_peak_bytes_per_s: float = 1.6e12
    #: sustained share of nominal HBM all cores draw together; eta x e(256 B) = 1.126 / 1.6, the best measured
    #: kernel of our access pattern (rule 3's envelope)
    hbm_efficiency: float = 0.76
    #: DMA efficiency of a 32-byte burst relative to one of 512 bytes or more (vendor best-practice guides)
    dma_efficiency_32b: float = 0.70
    #: burst length from which a GM transfer runs at full DMA efficiency
    dma_full_efficiency_burst_bytes: int = 512
    #: per-core MTE2 rate as a factor of pto-isa's GM->L1 / GM->UB bandwidths (Ascend910B2.ini: 0.41)
    mte2_rate_factor: float = 1.0
    #: one cube<->vector hand-off: FIX store -> FFTS flag -> MTE2 load of the same scratch (a prior)
    handoff_latency_s: float = 1.0e-6
    #: device side of a launch: first core starts -> last core ends, beyond the work (a prior)
    launch_floor_s: float = 5e-6
    #: a scalar read of GM (tiling words, block-table entries) through the scalar cache
    scalar_gm_read_s: float = 0.15e-6
    #: a scalar read of UB after a vector result (GetValue)
    scalar_ub_read_s: float = 0.02e-6
    #: L2 rate per core for scratch (s/p/o_tmp/o_core/l), and for K/V under warm-L2 conditions: 110 bytes/cycle at
    #: 1.85 GHz (Ascend910B2.ini)
    l2_bytes_per_s_per_core: float = 110 * 1.85e9
    #: L2 capacity, bytes (Ascend910B2.ini ``l2_size``): a launch whose inputs and outputs fit is read from L2 when a
    #: harness repeats it on the same tensors without flushing (``replay(inputs_in_l2=True)``)
    l2_capacity_bytes: int = 201326592
    #: factors on pto-isa's vector and cube cycle tables (the band varies them)
    vector_cost_factor: float = 1.0
    cube_cost_factor: float = 1.0

    def perturbed(self, name: str, factor: float) -> ModelConstants:
        """The same constants with ``name`` multiplied by ``factor`` (integers stay integers)."""
        value = getattr(self, name)
        return replace(self, **{name: type(value)(value * factor)})

    def fits_l2(self, launch_bytes: int) -> bool:
        """Whether a launch's tensors (K+V+Q+O, ``launch_bytes``) fit the L2: a harness repeating it without a
        flush then reads them from L2 (docs/TIMING_MODEL.md, rule 7)."""
        return launch_bytes <= self.l2_capacity_bytes

    def names(self) -> list[str]:
        """The constants a sensitivity band varies (the chip's core count and L2 size are facts, not fits)."""
        return [f.name for f in fields(self) if f.name not in ("cube_cores", "l2_capacity_bytes")]


DEFAULT = ModelConstants()

#: pto-isa's A2/A3 main frequency (``kMainFrequencyHz``), the clock of the timing model's cycle tables.
CUBE_CLOCK_HZ = 1.85e9
#: One ``mad`` fractal repeat (16 x 16 x 16 multiply-adds) per cycle for fp16/bf16 operands (``timing/costs.py``).
CUBE_MACS_PER_CYCLE = 16 * 16 * 16
FLOPS_PER_MAC = 2


def cube_peak_flops_per_s(cores: int) -> float:
    """The fp16/bf16 cube peak of ``cores`` cube cores in the model's cycle tables (the roofline's compute roof)."""
    return cores * CUBE_MACS_PER_CYCLE * FLOPS_PER_MAC * CUBE_CLOCK_HZ

#: Each constant's band (docs/TIMING_MODEL.md): (factor at the optimistic end, factor at the pessimistic end).
#: The DMA curve's band is on its loss (1 - e), so it is applied to dma_efficiency_32b through ``loss_factor``.
BANDS: dict[str, tuple[float, float]] = {
    "hbm_efficiency": (1.126 / (1.6 * 0.76 * 0.93), 0.75),  # the top end capped by the envelope (rule 3)
    "dma_efficiency_32b": (0.75, 1.25),                      # factors on the loss 1 - e
    "mte2_rate_factor": (1.0, 59.0 / 145.0),                 # pto-isa's rate .. Ascend910B2.ini's
    "handoff_latency_s": (0.5, 2.0),
    "launch_floor_s": (0.5, 2.0),
    "l2_bytes_per_s_per_core": (1.25, 0.75),
    "vector_cost_factor": (0.75, 1.25),
    "cube_cost_factor": (0.75, 1.25),
}


def at_band_end(constants: ModelConstants, end: int) -> ModelConstants:
    """All constants at once at one end of their bands: 0 optimistic, 1 pessimistic (rule 5)."""
    out = constants
    for name, factors in BANDS.items():
        f = factors[end]
        if name == "dma_efficiency_32b":
            out = replace(out, dma_efficiency_32b=1.0 - (1.0 - out.dma_efficiency_32b) * f)
        else:
            out = out.perturbed(name, f)
    return out


def band_ends(constants: ModelConstants = DEFAULT) -> tuple[ModelConstants, ModelConstants, ModelConstants]:
    """The constants a prediction with its band is replayed at: as given, at the optimistic end, at the
    pessimistic end."""
    return constants, at_band_end(constants, 0), at_band_end(constants, 1)


def prediction_text(predicted_us: float, band_us: tuple[float, float] | list[float]) -> str:
    """A prediction as every report prints it, its band beside it (``448.7 µs [band 448.1-601.5]``): a nominal
    figure alone reads as more certain than the model is (docs/TIMING_MODEL.md, rule 5)."""
    return f"{predicted_us:.1f} µs [band {band_us[0]:.1f}-{band_us[1]:.1f}]"
