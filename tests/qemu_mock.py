"""The mock's aarch64 build (``build/aarch64``, kernel/mock/cross/build_aarch64.sh) behind the ctypes calls the test
helpers make, each launch run under qemu-user by ``pa_mock_replay``.

:class:`QemuMock` answers ``pa_mock_bind``, ``call_kernel``, ``pa_mock_last_error``, ``pa_mock_isa_available`` and
``pa_mock_best_isa`` the way a loaded ``libpa_mock.so`` does: ``call_kernel`` writes the bound extents of every
pointer to a launch file, replays it on the aarch64 library and copies every buffer back in place.  So
:func:`tests.mock_harness.launch` and the MLA and decode-feature helpers built on it run unchanged on aarch64, and
their outputs meet the same float64 golden.  The bound extents are what is copied, so it serves launches whose
extents are true (not the negative controls that overstate one).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest

from launcher import mock_api
from tiling import abi

AARCH64_DIR = Path(os.environ.get("PA_KIT_LIB_DIR", Path(__file__).resolve().parent.parent / "build" / "lib")).parent \
    / "aarch64"
REPLAY = AARCH64_DIR / "pa_mock_replay"
SYSROOT = Path("/usr/aarch64-linux-gnu")  # Debian's aarch64 libc, beside its cross compiler
MAGIC_IN, MAGIC_OUT = b"PAMOCKR1", b"PAMOCKW1"
REPLAY_TIMEOUT_S = 120
KIND_NULL, KIND_OWN, KIND_ALIAS = 0, 1, 2  # a slot's record in the launch file (pa_mock_replay.c)


def available() -> str | None:
    """None when the aarch64 build and qemu-aarch64 are here, else why not."""
    if not REPLAY.exists():
        return f"{REPLAY} not built (compile.sh builds it where Debian's aarch64 cross compiler is or can be installed)"
    if shutil.which("qemu-aarch64") is None:
        return "qemu-aarch64 not found (Debian: apt-get install qemu-user)"
    return None


def require() -> None:
    """Skip when the aarch64 build cannot run here; under ``PA_KIT_REQUIRE_AARCH64=1`` (CI) fail instead."""
    why = available()
    if why is None:
        return
    if os.environ.get("PA_KIT_REQUIRE_AARCH64") == "1":
        pytest.fail(f"PA_KIT_REQUIRE_AARCH64=1 but {why}")
    pytest.skip(why)


def run_replay(*args: str) -> subprocess.CompletedProcess[bytes]:
    cmd = ["qemu-aarch64", "-L", str(SYSROOT), str(REPLAY), *args]
    result = subprocess.run(cmd, capture_output=True, timeout=REPLAY_TIMEOUT_S, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {result.returncode}: {result.stderr.decode(errors='replace')}")
    return result


class QemuMock:
    """A stand-in for the loaded library.  ``force_isa`` replaces AUTO in every bound configuration, so helpers
    that never name a path run the one a test forces."""

    def __init__(self, force_isa: int = mock_api.Isa.AUTO) -> None:
        self.force_isa = int(force_isa)
        self._config = mock_api.MockConfig()
        self._error = mock_api.MockError()
        lines = run_replay("--isas").stdout.decode().split("\n")
        self._best = int(lines[0].split()[1])
        self._available = {int(w[1]): int(w[3]) for w in (line.split() for line in lines[1:] if line)}

    def pa_mock_best_isa(self) -> int:
        return self._best

    def pa_mock_isa_available(self, isa: int) -> int:
        return self._available.get(int(isa), 0)

    def pa_mock_bind(self, config: object) -> int:
        ctypes.memmove(ctypes.byref(self._config), config, ctypes.sizeof(mock_api.MockConfig))
        if self._config.isa == mock_api.Isa.AUTO:
            self._config.isa = self.force_isa
        return 0

    def pa_mock_last_error(self, record: object) -> int:
        ctypes.memmove(record, ctypes.byref(self._error), ctypes.sizeof(mock_api.MockError))
        return 0

    def call_kernel(self, block_dim: int, _stream: object, *pointers: int | None) -> int:
        if len(pointers) != abi.NUM_PTR_ARGS:
            raise TypeError(f"call_kernel takes {abi.NUM_PTR_ARGS} pointers, got {len(pointers)}")
        extents = [int(self._config.extent_bytes[i]) if pointers[i] else 0 for i in range(abi.NUM_PTR_ARGS)]
        parts = [MAGIC_IN, struct.pack("<II", block_dim, ctypes.sizeof(self._config)), bytes(self._config)]
        owned: list[tuple[int, int]] = []  # (pointer, bytes) of the slots that carry their own buffer
        for slot, (pointer, size) in enumerate(zip(pointers, extents, strict=True)):
            earlier = pointers.index(pointer) if pointer else slot
            if not pointer:
                parts.append(struct.pack("<IQ", KIND_NULL, 0))
            elif earlier < slot:  # the same pointer as an earlier slot (MLA's latent cache as K and V)
                parts.append(struct.pack("<IQ", KIND_ALIAS + earlier, size))
            else:
                parts += [struct.pack("<IQ", KIND_OWN, size), ctypes.string_at(pointer, size)]
                owned.append((pointer, size))
        with tempfile.TemporaryDirectory(prefix="pa_qemu_") as tmp:
            src, dst = Path(tmp) / "launch.bin", Path(tmp) / "result.bin"
            src.write_bytes(b"".join(parts))
            run_replay(str(src), str(dst))
            data = dst.read_bytes()
        error_bytes = ctypes.sizeof(mock_api.MockError)
        code, size = struct.unpack_from("<iI", data, len(MAGIC_OUT))
        if data[:len(MAGIC_OUT)] != MAGIC_OUT or size != error_bytes:
            raise RuntimeError("pa_mock_replay wrote an unexpected result header")
        offset = len(MAGIC_OUT) + 8
        ctypes.memmove(ctypes.byref(self._error), data[offset:offset + error_bytes], error_bytes)
        offset += error_bytes
        for pointer, size in owned:
            ctypes.memmove(pointer, data[offset:offset + size], size)
            offset += size
        if offset != len(data):
            raise RuntimeError(f"pa_mock_replay wrote {len(data)} bytes, expected {offset}")
        return int(code)
