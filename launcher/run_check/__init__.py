"""The compiled form of :meth:`PagedAttentionRunner.run`'s per-call checks (``pa_run_check.cpp``).

:func:`load` returns the module built by compile.sh for the torch this process runs, or None (not built, built
for another torch, or not importable); run() then keeps its Python checks, which are the reference: the
compiled check only ever answers "all good" or "look again".
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import os
from types import ModuleType

import torch

from launcher.library import lib_dir

#: set to 1 to keep run()'s Python checks even when the module is built (tests compare the two paths)
DISABLE_ENV = "PA_KIT_PYTHON_RUN_CHECKS"


@functools.cache
def load() -> ModuleType | None:
    if os.environ.get(DISABLE_ENV) == "1":
        return None
    directory = lib_dir()
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    path = next((directory / f"pa_run_check{s}" for s in suffixes if (directory / f"pa_run_check{s}").is_file()),
                None)
    if path is None:
        return None
    try:
        loader = importlib.machinery.ExtensionFileLoader("pa_run_check", str(path))
        spec = importlib.util.spec_from_file_location("pa_run_check", path, loader=loader)
        if spec is None:
            return None
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except (ImportError, OSError):
        return None
    return module if getattr(module, "TORCH_VERSION", None) == torch.__version__ else None
