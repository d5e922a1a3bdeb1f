"""Where the built libraries live, and the planner's optional compiled helper (``build/lib/libpa_plan.so``).

The planner is numpy; one part of it, the ragged-batch balancer (``tiling/balance.py``), costs an engine about
265 µs per decode step at b64 in numpy calls.  ``compile.sh`` builds the same decision in C
(``tiling/csrc/pa_balance.c``); :func:`balance_decide` and :func:`balanced_gather` use it when it is built and
return None otherwise, and the balancer then runs its numpy reference (``PA_KIT_PYTHON_PLANNER=1`` forces that;
the tests compare both).  The library directory is computed here, once, for every loader (``launcher.library``
imports it).
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


#: pa_balance_decide's answers.
KEEP_ASCENDING, BALANCED_ORDER, CANDIDATE_GRID = 0, 1, 2


class BalanceShape(ctypes.Structure):
    """Mirror of ``PaBalanceShape`` (tiling/csrc/pa_balance.c)."""

    _fields_ = [(name, ctypes.c_int32) for name in (
        "num_heads", "num_kv_heads", "block_size", "head_dim", "core_count", "grid_fixed", "combine_split_limit",
        "whole_group_heads")] + [(name, ctypes.c_double) for name in (
        "task_overhead", "partial_overhead", "min_gain", "tie_scale")]


class BalanceGrid(ctypes.Structure):
    """Mirror of ``PaBalanceGrid``: the task-grid fields of a ``tiling.splits.CoreSplit``."""

    _fields_ = [(name, ctypes.c_int32) for name in (
        "block_dim", "former_batch", "former_head", "tail_batch", "tail_head", "kv_split_tokens", "kv_core_num")]


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
    decide = lib.pa_balance_decide
    decide.restype = ctypes.c_int32
    decide.argtypes = [ctypes.POINTER(BalanceShape), ctypes.POINTER(BalanceGrid), ctypes.c_int32, ctypes.c_void_p,
                       ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(BalanceGrid), ctypes.c_void_p]
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


def balance_decide(split: object, lens: np.ndarray, *, num_heads: int, num_kv_heads: int, block_size: int,
                   head_dim: int, core_count: int, grid_fixed: bool, combine_limit: int, whole_group_heads: int,
                   task_overhead: float, partial_overhead: float, min_gain: float,
                   tie_scale: float) -> tuple[int, BalanceGrid | None, np.ndarray] | None:
    """The balancer's decision in C (``pa_balance_decide``): (answer, the candidate grid when the answer is
    :data:`CANDIDATE_GRID`, the gather map unless it is :data:`KEEP_ASCENDING`); None when not built.

    ``split`` is a ``tiling.splits.CoreSplit`` (not imported: this module sits below the planner).
    """
    lib = _library()
    if lib is None:
        return None
    shape = BalanceShape(num_heads, num_kv_heads, block_size, head_dim, core_count, int(grid_fixed), combine_limit,
                         whole_group_heads, task_overhead, partial_overhead, min_gain, tie_scale)
    grid = BalanceGrid(*(getattr(split, name) for name, _ in BalanceGrid._fields_))
    lens = np.ascontiguousarray(lens, dtype=np.int64)
    gather = np.empty(lens.size, dtype=np.int64)
    decision = ctypes.c_int32(-1)
    candidate = BalanceGrid()
    rc = lib.pa_balance_decide(ctypes.byref(shape), ctypes.byref(grid), lens.size,
                               lens.__array_interface__["data"][0], ctypes.byref(decision), ctypes.byref(candidate),
                               gather.__array_interface__["data"][0])
    if rc != 0:
        raise RuntimeError(f"pa_balance_decide failed with code {rc}")
    answer = decision.value
    return answer, candidate if answer == CANDIDATE_GRID else None, gather
