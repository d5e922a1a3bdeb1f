"""ctypes mirror of the mock-device API (``kernel/pa_mock_api.h``): the one copy of its structs.

The mock device and the simulation export, besides ``call_kernel``: ``pa_mock_bind`` (per-thread binding of
buffer extents, num_blocks, checked mode, thread count and SIMD path), ``pa_mock_last_error`` (per-thread error
record), the host probes ``pa_mock_read_bandwidth_gbs`` and ``pa_mock_fma_peak_gflops`` (the mock only),
``pa_mock_struct_layout`` and ``pa_abi_kv_splits``.  :func:`declare` sets ``argtypes`` and ``restype`` once on a
loaded library; :func:`layout_mismatches` compares these ``Structure`` classes with the C layout the library
reports (the launcher refuses a library that disagrees).  No other module defines these structs.
"""

from __future__ import annotations

import ctypes
from enum import IntEnum

from launcher import layout
from tiling import abi

MESSAGE_BYTES = 256
LAYOUT_WORDS = 17


class Isa(IntEnum):
    """SIMD paths of the mock (header ``PA_MOCK_ISA_*``).  The exact ones (:data:`EXACT_ISAS`) give
    bitwise-identical results; the native ones sum with the CPU's own dot products, as accurately, in another
    order."""

    AUTO = 0
    PORTABLE = 1
    AVX2 = 2
    AVX512 = 3
    AVX512BF16 = 4
    AMX = 5
    NEON = 6  # aarch64 AdvSIMD


#: The paths that compute the same bits (portable order, fused multiply-adds).
EXACT_ISAS = (Isa.PORTABLE, Isa.AVX2, Isa.AVX512, Isa.NEON)


class MockConfig(ctypes.Structure):
    """``pa_mock_config``: what ``pa_mock_bind`` copies for the calling thread's next launches."""

    _fields_ = [
        ("extent_bytes", ctypes.c_uint64 * abi.NUM_PTR_ARGS),
        ("num_blocks", ctypes.c_int64),
        ("checked", ctypes.c_int32),
        ("num_threads", ctypes.c_int32),
        ("isa", ctypes.c_int32),
        ("gang_cores", ctypes.c_int32),
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
        "pa_mock_fma_peak_gflops": ([ctypes.c_int32, ctypes.c_int32], ctypes.c_double),
        "pa_mock_struct_layout": ([ctypes.POINTER(ctypes.c_int64), ctypes.c_int32], ctypes.c_int32),
        "pa_mock_isa_available": ([ctypes.c_int32], ctypes.c_int32),
        "pa_mock_best_isa": ([], ctypes.c_int32),
        "pa_abi_version": ([], ctypes.c_int32),
        "pa_supported_keys": ([], ctypes.c_uint32),
        "pa_supported_features": ([], ctypes.c_uint32),
        "pa_abi_kv_splits": ([ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint32], ctypes.c_uint32),
        "pa_abi_kv_first_token": ([ctypes.c_uint32] * 4, ctypes.c_uint32),
        "pa_mock_kv_pages_read": ([], ctypes.c_uint64),
        "pa_sim_last_error_text": ([], ctypes.c_char_p),
    }
    for name, (argtypes, restype) in signatures.items():
        if hasattr(handle, name):
            function = getattr(handle, name)
            function.argtypes = argtypes
            function.restype = restype


def python_layout() -> list[int]:
    """Sizes and field offsets of the two Structures, in ``pa_mock_struct_layout`` order."""
    return layout.layout_of(MockConfig) + layout.layout_of(MockError)


def c_layout(handle: ctypes.CDLL) -> list[int]:
    """The same numbers as the library's C compiler laid them out."""
    return layout.layout_words(handle.pa_mock_struct_layout, LAYOUT_WORDS)


def layout_mismatches(
    handle: ctypes.CDLL, config: type[ctypes.Structure] = MockConfig, error: type[ctypes.Structure] = MockError
) -> list[str]:
    """Where ``config``/``error`` (by default this module's mirrors) differ from the library's structs."""
    words = (ctypes.c_int64 * LAYOUT_WORDS)()
    count = int(handle.pa_mock_struct_layout(words, LAYOUT_WORDS))
    if count != LAYOUT_WORDS:
        return [f"pa_mock_struct_layout reports {count} words, this module expects {LAYOUT_WORDS}"]
    return layout.mismatches([config, error], list(words))


def struct_layout_matches(handle: ctypes.CDLL) -> bool:
    """True when :class:`MockConfig` and :class:`MockError` match the library's structs exactly."""
    return not layout_mismatches(handle)


def last_error(handle: ctypes.CDLL) -> MockError:
    """The calling thread's last error record."""
    record = MockError()
    handle.pa_mock_last_error(ctypes.byref(record))
    return record


def last_error_text(handle: ctypes.CDLL) -> str | None:
    """The whole text of the calling thread's last error where the library keeps one longer than the record's
    message (the device-path simulation's hazard and deadlock reports), else None."""
    if not hasattr(handle, "pa_sim_last_error_text"):
        return None
    text = handle.pa_sim_last_error_text()
    return text.decode(errors="replace") if text else None
