"""Where the built libraries live, and the planner's optional compiled helper (``build/lib/libpa_plan.so``).

The planner is numpy; one step of it, the balancer's greedy placement, is a sequential loop that costs an
engine about 200 µs per grid at b64 in numpy calls.  ``compile.sh`` builds the same loop in C
(``tiling/csrc/pa_balance.c``); :func:`balanced_gather` uses it when it is built and falls back to the numpy
form otherwise (``PA_KIT_PYTHON_PLANNER=1`` forces the fallback; the tests compare both).  The library
directory is computed here, once, for every loader (``launcher.library`` imports it).
"""

from __future__ import annotations

import ctypes
import functools
import os
from pathlib import Path

import numpy as np

#: Environment variable naming another directory of built libraries.
LIB_DIR_ENV = "PA_KIT_LIB_DIR"
#: Where ``bash compile.sh`` puts the libraries, relative to the repository root.
DEFAULT_LIB_DIR = Path(__file__).resolve().parent.parent / "build" / "lib"
#: Set to 1 to plan with the numpy form only.
PYTHON_PLANNER_ENV = "PA_KIT_PYTHON_PLANNER"
PLAN_LIBRARY = "libpa_plan.so"


def lib_dir() -> Path:
    """The directory libraries are loaded from: ``$PA_KIT_LIB_DIR`` or ``build/lib`` of this checkout."""
    override = os.environ.get(LIB_DIR_ENV)
    return Path(override) if override else DEFAULT_LIB_DIR




@functools.cache
def _library() -> ctypes.CDLL | None:
    if os.environ.get(PYTHON_PLANNER_ENV) == "1":
        return None
    path = lib_dir() / PLAN_LIBRARY
    if not path.is_file():
        return None
    try:
        lib = ctypes.CDLL(str(path))
    except OSError:
        return None
    fn = lib.pa_balanced_gather
    fn.restype = ctypes.c_int32
    fn.argtypes = [ctypes.c_int32] * 3 + [ctypes.c_void_p] * 5 + [ctypes.c_double] + [ctypes.c_void_p] * 2
    return lib


def available() -> bool:
    return _library() is not None


def balanced_gather(cores: int, tail_batch: int, is_tail: np.ndarray, base: np.ndarray, order: np.ndarray,
                    work: np.ndarray, single: np.ndarray, tie_scale: float) -> tuple[np.ndarray, np.ndarray] | None:
    """The greedy placement in C (see ``pa_balance.c``), or None when the library is not built."""
    lib = _library()
    if lib is None:
        return None
    n = int(order.size)
    gather = np.empty(n, dtype=np.int64)
    load = np.empty(cores, dtype=np.float64)
    arrays = (np.ascontiguousarray(is_tail, dtype=np.uint8), np.ascontiguousarray(base, dtype=np.int64),
              np.ascontiguousarray(order, dtype=np.int64), np.ascontiguousarray(work, dtype=np.float64),
              np.ascontiguousarray(single, dtype=np.uint8))
    pointers = [a.__array_interface__["data"][0] for a in arrays]  # the arrays stay alive until the call returns
    rc = lib.pa_balanced_gather(cores, n, tail_batch, *pointers, tie_scale, gather.__array_interface__["data"][0],
                                load.__array_interface__["data"][0])
    if rc != 0:
        raise RuntimeError(f"pa_balanced_gather failed with code {rc}")
    return gather, load
