"""Per-launch figures of the pto-isa simulation (``pa_sim_stats_get``, ``kernel/npu/pa_sim_api.h``).

They predict NPU behaviour where simulated wall time cannot: bytes between global memory and the on-chip
buffers (and how much of it is K/V, scratch and split-KV partials), cube<->vector hand-offs, and the peak use
of each on-chip buffer against its capacity.  The benchmark reads them right after the accuracy launch, on
the thread that launched (the simulation keeps them per thread).
"""

from __future__ import annotations

import ctypes
from typing import Any

from launcher.sim_api import REGIONS, declare, has_sim_api, last_stats

MB = 1e6
KIB = 1024


def read_sim_figures(handle: ctypes.CDLL, model_kv_bytes: int) -> dict[str, Any] | None:
    """The last launch's figures on this thread, or None when the library has no simulation counters."""
    if not has_sim_api(handle):
        return None
    declare(handle)
    stats = last_stats(handle)
    if stats is None:
        return None
    figures: dict[str, Any] = {
        "gm_read_mb": round(stats.gm_read_bytes / MB, 3),
        "gm_write_mb": round(stats.gm_write_bytes / MB, 3),
        "kv_read_mb": round(stats.kv_read_bytes / MB, 3),
        "kv_read_per_model_kv": round(stats.kv_read_bytes / model_kv_bytes, 3) if model_kv_bytes else None,
        "scratch_mb": round(stats.scratch_bytes / MB, 3),
        "partial_mb": round(stats.partial_bytes / MB, 3),
        "handoffs": int(stats.handoffs),
        "tasks": int(stats.tasks),
        "matmuls": int(stats.matmuls),
        "block_dim": int(stats.block_dim),
    }
    for i, region in enumerate(REGIONS):
        figures[f"peak_{region.lower()}_kib"] = f"{stats.peak_bytes[i] / KIB:.0f}/{stats.capacity_bytes[i] / KIB:.0f}"
    return figures
