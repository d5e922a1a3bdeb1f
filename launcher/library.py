"""Loading kernel libraries with ctypes: signatures declared once, one handle per path, ABI detected.

Every ``.so`` the launcher talks to exports ``call_kernel(block_dim, stream, 23 pointers)`` (kernel ABI v1,
``kernel/pa_kernel_abi.h``).  Ours also export ``pa_abi_version``/``pa_supported_keys``/``call_kernel_noop``
and return an ``int32`` error code; a library without ``pa_abi_version`` is an *external* ATB-ABI kernel
(void return, keys 0/1/16/17, empty sequences' rows left unwritten).  Ours may export
``pa_supported_features`` (ABI v3: the decode features it executes, :class:`tiling.abi.Feature` bits); a
library without it executes none, so the runner refuses those options instead of launching a kernel that
would ignore the words that ask for them.  The mock device and the simulation
additionally export the mock API (``kernel/pa_mock_api.h``), declared by :mod:`launcher.mock_api`.

Declaring ``argtypes``/``restype`` here, once per loaded library, is what keeps the launch path free of
per-call ctypes conversions: the runner passes plain Python ints.
"""

from __future__ import annotations

import ctypes
import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.errors import KernelLibraryNotFoundError
from tiling import abi
from tiling.native import DEFAULT_LIB_DIR, LIB_DIR_ENV, lib_dir

#: File names of the libraries ``compile.sh`` builds, per backend.
LIBRARY_FILES = {"mock": "libpa_mock.so", "sim": "libpa_sim.so", "npu": "libpa_npu.so"}

#: ``call_kernel``: uint32 block_dim, void* stream, then one void* per ABI pointer slot.
CALL_KERNEL_ARGTYPES = [ctypes.c_uint32, ctypes.c_void_p] + [ctypes.c_void_p] * abi.NUM_PTR_ARGS


@dataclass(frozen=True)
class KernelLibrary:
    """A loaded kernel library and what it says about itself."""

    path: Path
    handle: ctypes.CDLL
    call_kernel: Any
    call_kernel_noop: Any | None
    abi_version: int | None
    supported_keys: frozenset[abi.TilingKey]
    has_mock_api: bool
    #: :class:`tiling.abi.Feature` bits of ``pa_supported_features()``; 0 where the symbol is missing
    supported_features: int = 0

    @property
    def external(self) -> bool:
        """True for an ATB-ABI kernel: void return, no zero rows for empty sequences."""
        return self.abi_version is None


def library_path(backend: str) -> Path:
    """Path of the library ``compile.sh`` builds for ``backend`` (it may not exist yet)."""
    try:
        name = LIBRARY_FILES[backend]
    except KeyError:
        raise ValueError(f"backend must be one of {sorted(LIBRARY_FILES)}, got {backend!r}") from None
    return lib_dir() / name


def load_library(path: str | os.PathLike[str]) -> KernelLibrary:
    """Load ``path`` (cached per resolved path) and declare its signatures.

    Raises :class:`KernelLibraryNotFoundError` telling the user how to build a missing library, and
    ``RuntimeError`` for a library that is not a paged-attention kernel or speaks another ABI version.
    """
    resolved = Path(path).resolve()
    if not resolved.is_file():
        current = os.environ.get(LIB_DIR_ENV) or f"unset, default {DEFAULT_LIB_DIR}"
        raise KernelLibraryNotFoundError(
            f"kernel library not found: {resolved}. Build it with `bash compile.sh` in the pa-kit checkout "
            f"(`bash compile.sh --all` for the sim backend's and the emulator's, which a fresh build/ leaves out), "
            f"or set {LIB_DIR_ENV} to a directory that holds it ({LIB_DIR_ENV}: {current})."
        )
    return _load_resolved(str(resolved))


@functools.cache
def _load_resolved(path: str) -> KernelLibrary:
    handle = ctypes.CDLL(path)
    if not hasattr(handle, "call_kernel"):
        raise RuntimeError(f"{path} does not export call_kernel: not a paged-attention kernel library")
    abi_version: int | None = None
    keys = abi.keys_from_mask(abi.SUPPORTED_KEYS_ATB)
    features = 0
    noop = None
    if hasattr(handle, "pa_abi_version"):
        handle.pa_abi_version.argtypes = []
        handle.pa_abi_version.restype = ctypes.c_int32
        abi_version = int(handle.pa_abi_version())
        if abi_version != abi.ABI_VERSION:
            raise RuntimeError(
                f"{path} speaks kernel ABI version {abi_version}, this launcher expects {abi.ABI_VERSION}: "
                "rebuild it with `bash compile.sh`"
            )
        handle.pa_supported_keys.argtypes = []
        handle.pa_supported_keys.restype = ctypes.c_uint32
        keys = abi.keys_from_mask(int(handle.pa_supported_keys()))
        if hasattr(handle, "pa_supported_features"):
            handle.pa_supported_features.argtypes = []
            handle.pa_supported_features.restype = ctypes.c_uint32
            features = int(handle.pa_supported_features()) & abi.FEATURES_ALL
    call = handle.call_kernel
    call.argtypes = CALL_KERNEL_ARGTYPES
    call.restype = None if abi_version is None else ctypes.c_int32
    if abi_version is not None and hasattr(handle, "call_kernel_noop"):
        noop = handle.call_kernel_noop
        noop.argtypes = CALL_KERNEL_ARGTYPES
        noop.restype = ctypes.c_int32
    has_mock_api = hasattr(handle, "pa_mock_bind") and hasattr(handle, "pa_mock_last_error")
    if has_mock_api:
        _declare_mirrors(path, handle)
    return KernelLibrary(
        path=Path(path), handle=handle, call_kernel=call, call_kernel_noop=noop, abi_version=abi_version,
        supported_keys=keys, has_mock_api=has_mock_api, supported_features=features,
    )


def _declare_mirrors(path: str, handle: ctypes.CDLL) -> None:
    """Declare the mock API (and the simulation's) and refuse a library whose structs the mirrors misdescribe:
    a wrong mirror would make the library read or write past a Python buffer."""
    from launcher import mock_api, sim_api

    mock_api.declare(handle)
    problems = mock_api.layout_mismatches(handle)
    if sim_api.has_sim_api(handle):
        sim_api.declare(handle)
        problems += sim_api.layout_mismatches(handle)
    if problems:
        raise RuntimeError(f"{path}: the launcher's ctypes mirrors do not match the library's structs "
                           f"({'; '.join(problems)}); rebuild it with `bash compile.sh`")
