"""The instruction trace of one simulated launch (``pa_sim_trace_*`` in ``kernel/npu/pa_sim_api.h``).

``TRACE_DTYPE`` mirrors ``pa_sim_trace_event`` field by field; ``tests/test_timing_replay.py`` checks its size
against the library's ``pa_sim_trace_event_bytes``.  ``capture`` records the launches a callable makes on the
calling thread (the simulation keeps its trace per host thread).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

TRACE_DTYPE = np.dtype([
    ("bytes", "<u8"), ("gm_offset", "<u8"), ("rows", "<u4"), ("cols", "<u4"), ("k", "<u4"),
    ("burst_bytes", "<u4"), ("bursts", "<u4"), ("core", "<u2"), ("id", "<u2"), ("role", "u1"), ("kind", "u1"),
    ("pipe", "u1"), ("op", "u1"), ("src", "u1"), ("dst", "u1"), ("elem_bytes", "u1"), ("slot", "u1"),
])

# event kinds (PA_SIM_EV_*)
EV_INSTR, EV_SET, EV_WAIT, EV_BARRIER, EV_SIGNAL, EV_XWAIT, EV_ALLVEC = range(7)
# pipes, numbered as the kernel's pa_sync.hpp numbers them
PIPES = ("S", "MTE2", "MTE1", "M", "FIX", "V", "MTE3")
PIPE_S, PIPE_MTE2, PIPE_MTE1, PIPE_M, PIPE_FIX, PIPE_V, PIPE_MTE3, PIPE_ALL = range(8)
ROLES = ("cube", "vector 0", "vector 1")
#: cross-core signal directions (``dst`` of SIGNAL/XWAIT)
TO_VECTORS, TO_CUBE = 0, 1
NO_SLOT = 255
#: kernel ABI slots of the K and V caches (``tiling.abi.ArgSlot.K``, ``.V``)
KV_SLOTS = (1, 2)


@dataclass(frozen=True)
class Trace:
    """Events of one launch, role stream after role stream, and the op-code names of the library."""

    events: np.ndarray
    op_names: tuple[str, ...]
    block_dim: int

    def streams(self) -> dict[tuple[int, int], np.ndarray]:
        """(core, role) -> that role's events in program order."""
        keys = self.events["core"].astype(np.int64) * len(ROLES) + self.events["role"]
        order = np.argsort(keys, kind="stable")
        ev = self.events[order]
        keys = keys[order]
        cuts = np.flatnonzero(np.diff(keys)) + 1
        return {(int(c[0]["core"]), int(c[0]["role"])): c for c in np.split(ev, cuts) if len(c)}


def kv_loads(events: np.ndarray) -> np.ndarray:
    """Which events are loads of the K or V cache (instructions on MTE2 from those slots), in either record."""
    return (events["kind"] == EV_INSTR) & (events["pipe"] == PIPE_MTE2) & np.isin(events["slot"], KV_SLOTS)


def declare(lib: ctypes.CDLL) -> None:
    lib.pa_sim_trace_enable.argtypes = [ctypes.c_int32]
    lib.pa_sim_trace_count.restype = ctypes.c_int64
    lib.pa_sim_trace_copy.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    lib.pa_sim_trace_copy.restype = ctypes.c_int64
    lib.pa_sim_trace_op_name.argtypes = [ctypes.c_int32]
    lib.pa_sim_trace_op_name.restype = ctypes.c_char_p
    lib.pa_sim_trace_event_bytes.restype = ctypes.c_int32


def op_names(lib: ctypes.CDLL) -> tuple[str, ...]:
    names = []
    while (name := lib.pa_sim_trace_op_name(len(names))) is not None:
        names.append(name.decode())
    return tuple(names)


def capture(lib: ctypes.CDLL, launch: Callable[[], object], block_dim: int) -> Trace:
    """Runs ``launch`` (one simulated launch on this thread) with recording on and returns its trace."""
    declare(lib)
    if lib.pa_sim_trace_event_bytes() != TRACE_DTYPE.itemsize:
        raise RuntimeError(f"pa_sim_trace_event is {lib.pa_sim_trace_event_bytes()} bytes in the library, "
                           f"{TRACE_DTYPE.itemsize} in timing/trace.py: rebuild (bash compile.sh)")
    lib.pa_sim_trace_enable(1)
    try:
        launch()
    finally:
        lib.pa_sim_trace_enable(0)
    n = lib.pa_sim_trace_count()
    events = np.zeros(n, dtype=TRACE_DTYPE)
    got = lib.pa_sim_trace_copy(events.ctypes.data, n)
    return Trace(events[:got], op_names(lib), block_dim)
