"""ctypes mirror of the simulation's own exports (``kernel/npu/pa_sim_api.h``): the one copy of its stats.

``libpa_sim.so`` exports, besides the mock API (:mod:`launcher.mock_api`): ``pa_sim_stats_get`` (the figures
of the calling thread's last launch) and ``pa_sim_stats_layout`` (the C layout of ``pa_sim_stats``, which
:func:`layout_mismatches` compares with :class:`SimStats`; the launcher refuses a library that disagrees).  No
other module defines this struct.
"""

from __future__ import annotations

import ctypes

from launcher import layout

#: On-chip regions in ``PA_SIM_REGION_*`` order.
REGIONS = ("UB", "L1", "L0A", "L0B", "L0C")
#: ``sizeof`` and 16 field offsets (``pa_sim_stats_layout``).
LAYOUT_WORDS = 17


class SimStats(ctypes.Structure):
    """``pa_sim_stats``: per-launch figures that predict NPU behaviour (bytes moved, hand-offs, on-chip peaks)."""

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
        ("score_tiles", ctypes.c_uint64),
        ("masked_score_tiles", ctypes.c_uint64),
        ("peak_bytes", ctypes.c_uint32 * len(REGIONS)),
        ("capacity_bytes", ctypes.c_uint32 * len(REGIONS)),
        ("block_dim", ctypes.c_uint32),
        ("threads", ctypes.c_uint32),
        ("wall_seconds", ctypes.c_double),
    ]


def has_sim_api(handle: ctypes.CDLL) -> bool:
    """True for a library with the simulation's counters (``libpa_sim.so``)."""
    return hasattr(handle, "pa_sim_stats_get")


def declare(handle: ctypes.CDLL) -> None:
    """Declare the signatures of the simulation's exports present in ``handle`` (idempotent)."""
    signatures: dict[str, tuple[list[type], type]] = {
        "pa_sim_stats_get": ([ctypes.POINTER(SimStats)], ctypes.c_int32),
        "pa_sim_stats_layout": ([ctypes.POINTER(ctypes.c_int64), ctypes.c_int32], ctypes.c_int32),
    }
    for name, (argtypes, restype) in signatures.items():
        if hasattr(handle, name):
            function = getattr(handle, name)
            function.argtypes = argtypes
            function.restype = restype


def layout_mismatches(handle: ctypes.CDLL, stats: type[ctypes.Structure] = SimStats) -> list[str]:
    """Where ``stats`` (by default :class:`SimStats`) differs from the library's ``pa_sim_stats``."""
    if not hasattr(handle, "pa_sim_stats_layout"):
        return ["the library does not export pa_sim_stats_layout (built before it existed: run `bash compile.sh`)"]
    words = (ctypes.c_int64 * LAYOUT_WORDS)()
    count = int(handle.pa_sim_stats_layout(words, LAYOUT_WORDS))
    if count != LAYOUT_WORDS:
        return [f"pa_sim_stats_layout reports {count} words, this module expects {LAYOUT_WORDS}"]
    return layout.mismatches([stats], list(words))


def last_stats(handle: ctypes.CDLL) -> SimStats | None:
    """The figures of this thread's last launch, or None when no launch ran on it."""
    stats = SimStats()
    return stats if handle.pa_sim_stats_get(ctypes.byref(stats)) == 0 else None
