"""Per-launch figures of the pto-isa simulation (``pa_sim_stats_get``, ``kernel/npu/pa_sim_api.h``).

They predict NPU behaviour where simulated wall time cannot: bytes between global memory and the on-chip
buffers (and how much of it is K/V, scratch and split-KV partials), cube<->vector hand-offs, and the peak use
of each on-chip buffer against its capacity.  The benchmark reads them right after the accuracy launch, on
the thread that launched (the simulation keeps them per thread).
"""

from __future__ import annotations

import ctypes
from typing import Any

#: On-chip regions in ``PA_SIM_REGION_*`` order.
REGIONS = ("UB", "L1", "L0A", "L0B", "L0C")
MB = 1e6
KIB = 1024


class SimStats(ctypes.Structure):
    """``pa_sim_stats``."""

    _fields_ = [
        ("gm_read_bytes", ctypes.c_uint64),
        ("gm_write_bytes", ctypes.c_uint64),
        ("kv_read_bytes", ctypes.c_uint64),
        ("scratch_bytes", ctypes.c_uint64),
        ("partial_bytes", ctypes.c_uint64),
        ("handoffs", ctypes.c_uint64),
        ("units", ctypes.c_uint64),
        ("tasks", ctypes.c_uint64),
        ("matmuls", ctypes.c_uint64),
        ("peak_bytes", ctypes.c_uint32 * len(REGIONS)),
        ("capacity_bytes", ctypes.c_uint32 * len(REGIONS)),
        ("block_dim", ctypes.c_uint32),
        ("threads", ctypes.c_uint32),
        ("wall_seconds", ctypes.c_double),
    ]


def read_sim_figures(handle: ctypes.CDLL, model_kv_bytes: int) -> dict[str, Any] | None:
    """The last launch's figures on this thread, or None when the library has no simulation counters."""
    entry = getattr(handle, "pa_sim_stats_get", None)
    if entry is None:
        return None
    entry.argtypes = [ctypes.POINTER(SimStats)]
    entry.restype = ctypes.c_int32
    stats = SimStats()
    if entry(ctypes.byref(stats)) != 0:
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
