"""Where a launch goes: the mock device, the pto-isa simulation, or an Ascend NPU, behind one interface.

A backend knows which library to load, which device the tensors must live on, how many cube cores to plan
for, which stream to launch on, and how to turn the cached argument tuple into a launch closure.  The runner
builds that closure once per plan, so a launch is one Python call into ctypes plus, for the mock protocol,
one ``pa_mock_bind``.

* ``mock``: ``build/lib/libpa_mock.so``, the C mock device on the CPU, bounds-checked by default.
* ``sim``: ``build/lib/libpa_sim.so``, our NPU kernel's A2/A3 code on the intrinsic emulator, same mock
  protocol; a library that does not say it is that device path (``pa_sim_device_path() == 1``) is refused.
* ``npu``: torch_npu tensors, the current NPU stream, core count from the device; ``torch_npu`` is imported
  only when this backend is used (importing it without CANN breaks ``import torch``).  An external ATB-ABI
  kernel can be named with ``library=`` or ``$PA_KIT_NPU_LIB``.
"""

from __future__ import annotations

import ctypes
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from launcher.errors import KernelContractError
from launcher.library import KernelLibrary, library_path, load_library

#: Logical cores of the mock device and the simulation: a 910B's 24 cube cores.
MOCK_CORE_COUNT = 24
#: Environment variable naming the NPU kernel library (ours or an external ATB-ABI one).
NPU_LIB_ENV = "PA_KIT_NPU_LIB"
#: Environment variable naming the mock's SIMD path (a ``launcher.mock_api.Isa`` name, e.g. ``avx2``) for every
#: ``MockBackend`` built without ``isa=``: how the benchmark runs a path AUTO would not choose on this host.
MOCK_ISA_ENV = "PA_MOCK_ISA"

Launch = Callable[[], None]


class Backend(ABC):
    """One place launches can go.  Subclasses are cheap to construct; libraries load on first use."""

    name: str
    #: ``torch.device.type`` every tensor of a launch must have.
    device_type: str
    #: Whether host staging buffers are pinned (asynchronous uploads need it on a device).
    pins_host_memory: bool = False

    def __init__(self, library: str | os.PathLike[str] | None = None) -> None:
        self._library_override = library
        self._library: KernelLibrary | None = None

    @property
    def library(self) -> KernelLibrary:
        if self._library is None:
            library = load_library(self._library_path())
            self._check_library(library)
            self._library = library
        return self._library

    def _check_library(self, library: KernelLibrary) -> None:
        """Raise if ``library`` cannot serve as this backend (the ABI itself is checked by ``load_library``)."""
        return None

    def _library_path(self) -> str | os.PathLike[str]:
        return self._library_override or library_path(self.name)

    @abstractmethod
    def core_count(self, device: torch.device) -> int:
        """Cube cores to plan for on ``device``."""

    def max_clusters(self, device: torch.device) -> int | None:
        """AI-core clusters that can be resident at once on ``device`` (None: no limit is modelled).  The
        split-KV combine waits at an all-vector-core barrier, which completes only when every launched block
        is resident, so a launch of more blocks than this would hang on a device."""
        return None

    @abstractmethod
    def resolve_stream(self, stream: Any) -> tuple[Any, int | None]:
        """(stream object, raw handle passed to ``call_kernel``) for a user's ``stream`` argument."""

    @abstractmethod
    def make_launch(self, function: Any, args: tuple[Any, ...], extents: Sequence[int], num_blocks: int,
                    checked: bool) -> Launch:
        """A closure calling ``function(*args)`` and raising :class:`KernelContractError` on an error code."""

    def on_stream(self, work: Launch, stream: Any) -> Launch:
        """``work`` wrapped so that its device operations are queued on the launch ``stream``."""
        return work

    def make_event(self) -> Any:
        """An event to record on the launch stream and wait for on the host (None: copies are synchronous)."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


#: ``int32_t pa_mock_bind(const pa_mock_config *)`` called with the config's address
_BIND_PROTOTYPE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p)


def mock_isa(name: str) -> int:
    """The ``PA_MOCK_ISA_*`` value of a SIMD path named as ``launcher.mock_api.Isa`` (case-insensitive); a path
    this CPU lacks is refused by the launch itself."""
    from launcher.mock_api import Isa

    if not isinstance(name, str) or name.upper() not in Isa.__members__:
        raise ValueError(f"the mock's SIMD path ({MOCK_ISA_ENV} or isa=) must be one of "
                         f"{', '.join(m.lower() for m in Isa.__members__)}, got {name!r}")
    return int(Isa[name.upper()])


class MockBackend(Backend):
    """The C mock device: call ``pa_mock_bind`` (extents, num_blocks, checked, threads), then ``call_kernel``."""

    name = "mock"
    device_type = "cpu"

    def __init__(self, library: str | os.PathLike[str] | None = None, *, num_threads: int = 0,
                 isa: str | None = None) -> None:
        super().__init__(library)
        if not isinstance(num_threads, int) or num_threads < 0:
            raise ValueError(f"num_threads must be an int >= 0 (0 = one per CPU), got {num_threads!r}")
        self.num_threads = num_threads
        self.isa = mock_isa(isa if isa is not None else os.environ.get(MOCK_ISA_ENV, "auto"))

    def core_count(self, device: torch.device) -> int:
        return MOCK_CORE_COUNT

    def resolve_stream(self, stream: Any) -> tuple[Any, int | None]:
        if stream is not None and not isinstance(stream, int):
            raise TypeError(f"the {self.name} backend takes stream=None or an int handle, got {type(stream)}")
        return stream, stream

    def make_launch(self, function: Any, args: tuple[Any, ...], extents: Sequence[int], num_blocks: int,
                    checked: bool) -> Launch:
        from launcher import mock_api

        library = self.library
        if not library.has_mock_api:
            raise RuntimeError(f"{library.path} does not export the mock API (pa_mock_bind); "
                               f"it cannot run as the {self.name} backend")
        config = mock_api.MockConfig()
        for slot, extent in enumerate(extents):
            config.extent_bytes[slot] = extent
        config.num_blocks = num_blocks
        config.checked = 1 if checked else 0
        config.num_threads = self.num_threads
        config.isa = self.isa
        # A prototype with a plain pointer argument: ctypes converts it about twice as fast as the declared
        # POINTER(MockConfig) argument, and the bind runs before every launch.
        config_addr = ctypes.c_void_p(ctypes.addressof(config))
        bind = _BIND_PROTOTYPE(ctypes.cast(library.handle.pa_mock_bind, ctypes.c_void_p).value)
        name = library.path.name

        def launch() -> None:
            bind(config_addr)
            code = function(*args)
            if code:
                raise last_error(library, code, name)

        launch.config = config  # type: ignore[attr-defined]  # keeps the struct alive as long as the closure
        return launch

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_threads={self.num_threads}, isa={self.isa})"


class SimBackend(MockBackend):
    """Our NPU kernel's A2/A3 code on the intrinsic emulator (``libpa_sim.so``); it speaks the mock protocol.
    Its SoC (``PA_SIM_SOC``, default 910B2) sets the clusters it plans for and the launch may use."""

    name = "sim"

    def _check_library(self, library: KernelLibrary) -> None:
        """Only the device path is ``sim``: a library that runs anything else (the mock, a stale build of the
        removed CPU-implementation simulation) would pass every test the emulator is there to fail."""
        probe = getattr(library.handle, "pa_sim_device_path", None)
        if probe is None:
            raise RuntimeError(f"{library.path} does not export pa_sim_device_path(): it is not the device-path "
                               "simulation the sim backend runs (rebuild it with `bash compile.sh --all`)")
        probe.restype = ctypes.c_int32
        probe.argtypes = []
        answer = int(probe())
        if answer != 1:
            raise RuntimeError(f"{library.path} reports pa_sim_device_path() = {answer}, expected 1: it is not the "
                               "device-path simulation the sim backend runs")

    def max_clusters(self, device: torch.device) -> int | None:
        handle = self.library.handle
        if not hasattr(handle, "pa_sim_soc_clusters"):
            return None
        handle.pa_sim_soc_clusters.argtypes = [ctypes.c_char_p]
        handle.pa_sim_soc_clusters.restype = ctypes.c_int32
        clusters = int(handle.pa_sim_soc_clusters(None))
        if clusters < 1:
            raise RuntimeError(f"{self.library.path.name} knows no SoC named by PA_SIM_SOC "
                               "(expected 910B1..910B4 or A3)")
        return clusters

    def core_count(self, device: torch.device) -> int:
        clusters = self.max_clusters(device)
        return MOCK_CORE_COUNT if clusters is None else clusters


def last_error(library: KernelLibrary, code: int, name: str = "") -> KernelContractError:
    """The :class:`KernelContractError` for the calling thread's last mock/sim error record."""
    from launcher import mock_api

    record = mock_api.last_error(library.handle)
    message = mock_api.last_error_text(library.handle) or record.message.decode(errors="replace")
    return KernelContractError(
        record.code or code, slot=record.arg_slot, element_offset=record.element_offset,
        extent=record.extent_elems, core=record.core, seq=record.seq, head=record.head, split=record.split,
        message=message, library=name,
    )


class NpuBackend(Backend):
    """An Ascend NPU through torch_npu (imported on first use, never at module import)."""

    name = "npu"
    device_type = "npu"
    pins_host_memory = True

    def _library_path(self) -> str | os.PathLike[str]:
        return self._library_override or os.environ.get(NPU_LIB_ENV) or library_path(self.name)

    @staticmethod
    def _npu() -> Any:
        """``torch.npu``, importing torch_npu lazily so CPU-only processes never touch it."""
        import torch_npu  # noqa: F401  # registers torch.npu

        return torch.npu  # type: ignore[attr-defined]

    def core_count(self, device: torch.device) -> int:
        properties = self._npu().get_device_properties(device)
        count = int(getattr(properties, "cube_core_num", 0) or 0)
        if count < 1:
            raise RuntimeError(f"device properties of {device} report no cube cores (cube_core_num={count}); "
                               "pass core_count= explicitly")
        return count

    def max_clusters(self, device: torch.device) -> int | None:
        return self.core_count(device)

    def resolve_stream(self, stream: Any) -> tuple[Any, int | None]:
        if stream is None:
            stream = self._npu().current_stream()
        return stream, stream_handle(stream)

    def make_launch(self, function: Any, args: tuple[Any, ...], extents: Sequence[int], num_blocks: int,
                    checked: bool) -> Launch:
        if self.library.external:
            def launch_external() -> None:
                function(*args)

            return launch_external
        name = self.library.path.name

        def launch() -> None:
            code = function(*args)
            if code:
                raise KernelContractError(code, message="returned by the NPU kernel", library=name)

        return launch

    def make_event(self) -> Any:
        return self._npu().Event()

    def on_stream(self, work: Launch, stream: Any) -> Launch:
        """Run ``work`` inside ``torch.npu.stream(stream)``, so a memset is ordered before the kernel even
        when the caller launches on a stream other than the current one."""
        stream_context = self._npu().stream

        def on_launch_stream() -> None:
            with stream_context(stream):
                work()

        return on_launch_stream


def stream_handle(stream: Any) -> int | None:
    """The raw ``aclrtStream`` of a torch_npu stream object (``npu_stream`` or ``_as_parameter_``)."""
    handle = getattr(stream, "npu_stream", None)
    if handle is None:
        parameter = getattr(stream, "_as_parameter_", None)
        handle = getattr(parameter, "value", parameter)
    if handle is None or isinstance(handle, bool) or not isinstance(handle, int):
        raise TypeError(f"stream must be a torch.npu.Stream (with npu_stream or _as_parameter_) or None, "
                        f"got {type(stream).__name__}")
    return handle


BACKENDS: Mapping[str, type[Backend]] = {"mock": MockBackend, "sim": SimBackend, "npu": NpuBackend}
#: Which backend a tensor's device implies when the user gives none.
DEVICE_BACKENDS = {"cpu": "mock", "npu": "npu"}


def get_backend(backend: str | Backend | None, device: torch.device) -> Backend:
    """Resolve the ``backend=`` argument: a name, an instance, or ``None`` (inferred from ``device``)."""
    if isinstance(backend, Backend):
        return backend
    if backend is None:
        try:
            backend = DEVICE_BACKENDS[device.type]
        except KeyError:
            raise ValueError(f"no backend for tensors on {device.type!r}: expected one of "
                             f"{sorted(DEVICE_BACKENDS)}, or pass backend= explicitly") from None
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"backend must be one of {sorted(BACKENDS)} or a Backend, got {backend!r}")
    return BACKENDS[backend]()


__all__ = [
    "BACKENDS", "MOCK_CORE_COUNT", "MOCK_ISA_ENV", "NPU_LIB_ENV", "Backend", "MockBackend", "NpuBackend", "SimBackend",
    "get_backend", "last_error", "stream_handle",
]
