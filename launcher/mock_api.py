"""ctypes mirror of the mock-device API (``kernel/mock/pa_mock_api.h``).

The mock device (and the simulation) export, besides ``call_kernel``: ``pa_mock_bind`` (per-thread binding of
buffer extents, num_blocks, checked mode, thread count and SIMD path), ``pa_mock_last_error`` (per-thread error
record), ``pa_mock_read_bandwidth_gbs`` and a few introspection calls.  :func:`declare` sets ``argtypes`` and
``restype`` once on a loaded library; :func:`struct_layout_matches` compares these ``Structure`` classes with
the C layout the library reports.
"""

from __future__ import annotations

import ctypes
from enum import IntEnum

from tiling import abi

MESSAGE_BYTES = 256
LAYOUT_WORDS = 16


class Isa(IntEnum):
    """SIMD paths of the mock (header ``PA_MOCK_ISA_*``); all give bitwise-identical results."""

    AUTO = 0
    PORTABLE = 1
    AVX2 = 2
    AVX512 = 3


class MockConfig(ctypes.Structure):
    """``pa_mock_config``: what ``pa_mock_bind`` copies for the calling thread's next launches."""

    _fields_ = [
        ("extent_bytes", ctypes.c_uint64 * abi.NUM_PTR_ARGS),
        ("num_blocks", ctypes.c_int64),
        ("checked", ctypes.c_int32),
        ("num_threads", ctypes.c_int32),
        ("isa", ctypes.c_int32),
    ]


class MockError(ctypes.Structure):
    """``pa_mock_error``: the calling thread's last error record (-1 = not applicable)."""

    _fields_ = [
        ("code", ctypes.c_int32),
        ("arg_slot", ctypes.c_int32),
        ("element_offset", ctypes.c_int64),
        ("extent_elems", ctypes.c_int64),
        ("core", ctypes.c_int32),
        ("seq", ctypes.c_int32),
        ("head", ctypes.c_int32),
        ("split", ctypes.c_int32),
        ("message", ctypes.c_char * MESSAGE_BYTES),
    ]


CALL_KERNEL_ARGTYPES = [ctypes.c_uint32, ctypes.c_void_p] + [ctypes.c_void_p] * abi.NUM_PTR_ARGS


def declare(handle: ctypes.CDLL) -> None:
    """Declare the signatures of every mock export present in ``handle`` (idempotent)."""
    signatures: dict[str, tuple[list[type], type | None]] = {
        "call_kernel": (CALL_KERNEL_ARGTYPES, ctypes.c_int32),
        "call_kernel_noop": (CALL_KERNEL_ARGTYPES, ctypes.c_int32),
        "pa_mock_bind": ([ctypes.POINTER(MockConfig)], ctypes.c_int32),
        "pa_mock_last_error": ([ctypes.POINTER(MockError)], ctypes.c_int32),
        "pa_mock_read_bandwidth_gbs": ([ctypes.c_uint64, ctypes.c_int32, ctypes.c_int32], ctypes.c_double),
        "pa_mock_struct_layout": ([ctypes.POINTER(ctypes.c_int64), ctypes.c_int32], ctypes.c_int32),
        "pa_mock_isa_available": ([ctypes.c_int32], ctypes.c_int32),
        "pa_mock_best_isa": ([], ctypes.c_int32),
        "pa_abi_version": ([], ctypes.c_int32),
        "pa_supported_keys": ([], ctypes.c_uint32),
    }
    for name, (argtypes, restype) in signatures.items():
        if hasattr(handle, name):
            function = getattr(handle, name)
            function.argtypes = argtypes
            function.restype = restype


def python_layout() -> list[int]:
    """Sizes and field offsets of the two Structures, in ``pa_mock_struct_layout`` order."""
    layout = [ctypes.sizeof(MockConfig)]
    layout += [getattr(MockConfig, name).offset for name, *_ in MockConfig._fields_]
    layout.append(ctypes.sizeof(MockError))
    layout += [getattr(MockError, name).offset for name, *_ in MockError._fields_]
    return layout


def c_layout(handle: ctypes.CDLL) -> list[int]:
    """The same numbers as the library's C compiler laid them out."""
    out = (ctypes.c_int64 * LAYOUT_WORDS)()
    count = handle.pa_mock_struct_layout(out, LAYOUT_WORDS)
    if count != LAYOUT_WORDS:
        raise RuntimeError(f"pa_mock_struct_layout reports {count} words, this mirror expects {LAYOUT_WORDS}")
    return list(out)


def struct_layout_matches(handle: ctypes.CDLL) -> bool:
    """True when :class:`MockConfig` and :class:`MockError` match the library's structs exactly."""
    return python_layout() == c_layout(handle)


def last_error(handle: ctypes.CDLL) -> MockError:
    """The calling thread's last error record."""
    record = MockError()
    handle.pa_mock_last_error(ctypes.byref(record))
    return record
