"""ctypes access to the A2/A3 intrinsic emulator (``build/lib/libpa_emu.so``) for the emulator's tests.

A :class:`Core` is one emulated AI core; its buffers are numpy views of the emulator's memory, so a test
writes inputs, calls an intrinsic by name with integer arguments (on-chip operands as byte offsets, GM operands
as host addresses, float scalars as their bits) and reads the result.  A fault comes back as
:class:`EmuFaultError` carrying the emulator's message.
"""

from __future__ import annotations

import ctypes
from functools import cache
from pathlib import Path

import built_library
import numpy as np

SPACES = {"UB": 1, "L1": 2, "L0A": 3, "L0B": 4, "L0C": 5}
CUBE, VECTOR = 0, 1
#: pipe_t values (pto-isa's qualifiers) and the emulator's PIPE_FIX
PIPE = {"S": 0, "V": 1, "MTE1": 2, "MTE2": 3, "MTE3": 4, "M": 5, "ALL": 6, "FIX": 7}


class EmuFaultError(RuntimeError):
    """An intrinsic the emulator refused, with its message."""


def library_or_skip(name: str = "libpa_emu.so") -> Path:
    return built_library.library_or_skip(name)


@cache
def emu() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(library_or_skip()))
    lib.pa_emu_last_error.restype = ctypes.c_char_p
    lib.pa_emu_core_new.argtypes = [ctypes.c_char_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, ctypes.c_uint64]
    lib.pa_emu_buffer.restype = ctypes.c_void_p
    lib.pa_emu_buffer.argtypes = [ctypes.c_int32, ctypes.POINTER(ctypes.c_uint64)]
    lib.pa_emu_call.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int64), ctypes.c_int32]
    lib.pa_emu_register_gm.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
    lib.pa_emu_initcheck.argtypes = [ctypes.c_int32]
    lib.pa_emu_mark_written.argtypes = [ctypes.c_int32, ctypes.c_uint64, ctypes.c_uint64]
    return lib


class Core:
    """One emulated AI core (cube or vector), selected on the calling thread while in use."""

    def __init__(self, kind: int, soc: str = "910B2", seed: int = 1) -> None:
        lib = emu()
        self.handle = lib.pa_emu_core_new(soc.encode(), kind, 0, 0, seed)
        if self.handle < 0:
            raise EmuFaultError(lib.pa_emu_last_error().decode())
        self.select()

    def select(self) -> None:
        assert emu().pa_emu_core_select(self.handle) == 0

    def buffer(self, space: str, dtype: np.dtype | type = np.uint8) -> np.ndarray:
        self.select()
        size = ctypes.c_uint64()
        address = emu().pa_emu_buffer(SPACES[space], ctypes.byref(size))
        raw = (ctypes.c_uint8 * size.value).from_address(address)
        return np.frombuffer(raw, dtype=np.uint8).view(dtype)

    def initcheck(self, on: bool = True) -> None:
        """initcheck on (every byte unwritten from now) or off for this core (kernel/npu/emu/emu_initcheck.hpp)."""
        self.select()
        assert emu().pa_emu_initcheck(int(on)) == 0, emu().pa_emu_last_error().decode()

    def mark_written(self, space: str, offset: int, nbytes: int) -> None:
        """Declare bytes a test filled from the host written (initcheck cannot see host writes)."""
        self.select()
        if emu().pa_emu_mark_written(SPACES[space], offset, nbytes) != 0:
            raise EmuFaultError(emu().pa_emu_last_error().decode())

    def call(self, name: str, *args: int) -> None:
        self.select()
        values = (ctypes.c_int64 * max(1, len(args)))(*[int(a) for a in args])
        if emu().pa_emu_call(name.encode(), values, len(args)) != 0:
            raise EmuFaultError(emu().pa_emu_last_error().decode())


def address(array: np.ndarray) -> int:
    return int(array.ctypes.data)


def f32_bits(value: float) -> int:
    return int(np.array([value], dtype=np.float32).view(np.uint32)[0])


def f16_bits(value: float) -> int:
    return int(np.array([value], dtype=np.float16).view(np.uint16)[0])
