"""What the benchmark runs on: backend, device kind, the bandwidth it is judged against, and versions.

Peak bandwidth on an NPU comes from a small table of nominal figures (no official datasheet exists; the
numbers are those commonly published for each device model: ``NPU_PEAKS`` below; ``--peak-gbs`` overrides).
On the mock there is no nominal figure: the physical limit is this host's read bandwidth, measured at start
by the mock library's multi-threaded C read loop (``pa_mock_read_bandwidth_gbs``).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ("mock", "sim", "npu")
MIB = 1 << 20


@dataclass(frozen=True)
class NpuPeak:
    """Nominal HBM bandwidth and L2 size of one NPU model, matched by a substring of its device name."""

    name_contains: str
    peak_gb_per_s: float
    l2_bytes: int


#: Nominal figures (public hardware-model file, per die).  A3 dies report names like "Ascend910_9392".
NPU_PEAKS = (
    NpuPeak("910B2", 1600.0, 192 * MIB),
    NpuPeak("910B3", 1600.0, 192 * MIB),
    NpuPeak("910B4", 800.0, 96 * MIB),
    NpuPeak("910_93", 1600.0, 192 * MIB),
)
#: L2 assumed for an NPU missing from the table (the 910B2's).
DEFAULT_NPU_L2_BYTES = 192 * MIB
#: A flush writes this many times the cache it must evict.
FLUSH_CACHE_MULTIPLE = 2
#: Host flush size bounds: virtual machines may report a host-wide last-level cache.
HOST_FLUSH_MIN_BYTES = 64 * MIB
HOST_FLUSH_MAX_BYTES = 256 * MIB
#: Read-bandwidth probe on the mock: buffer, threads (0 = every CPU) and passes (best is kept).
BANDWIDTH_PROBE_BYTES = 512 * MIB
BANDWIDTH_PROBE_REPS = 5
#: Passes of the FMA-peak probe (best is kept; each about 10 ms).
FMA_PROBE_REPS = 5
#: Share of the host's CPU time used by other processes above which host timings are flagged unreliable.
BUSY_OTHER_SHARE = 0.10


@dataclass(frozen=True)
class DeviceInfo:
    """``kind`` is what the regression gate compares: results of different kinds are not comparable."""

    kind: str
    backend: str
    name: str
    peak_gb_per_s: float | None
    peak_source: str
    cache_bytes: int
    cpu_count: int
    #: The mock: this host's fp32 multiply-add GFLOP/s (every CPU), the roof of shapes compute-bound on it.
    fma_peak_gflops: float | None = None
    fma_peak_source: str = ""

    @property
    def ridge_flop_per_byte(self) -> float | None:
        """FLOPs per byte at which the FMA roof meets the read roof (None without both)."""
        if not self.fma_peak_gflops or not self.peak_gb_per_s:
            return None
        return self.fma_peak_gflops / self.peak_gb_per_s

    def compute_bound(self, flops: int, total_bytes: int) -> bool:
        """True when a launch of this FLOP/byte is bound by the FMA roof rather than the read roof here."""
        ridge = self.ridge_flop_per_byte
        return ridge is not None and total_bytes > 0 and flops / total_bytes > ridge

    @property
    def flush_bytes(self) -> int:
        wanted = FLUSH_CACHE_MULTIPLE * self.cache_bytes
        if self.backend == "npu":
            return wanted
        return max(HOST_FLUSH_MIN_BYTES, min(HOST_FLUSH_MAX_BYTES, wanted))


def npu_available() -> bool:
    """True when torch_npu imports and sees a device.  Never breaks ``import torch`` (auto-load is off)."""
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    if importlib.util.find_spec("torch_npu") is None:
        return False
    try:
        import torch
        import torch_npu  # noqa: F401

        return bool(torch.npu.is_available())
    except (ImportError, RuntimeError, OSError):
        return False


def default_backend() -> str:
    return "npu" if npu_available() else "mock"


def cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    match = re.search(r"^(?:model name|Model)\s*:\s*(.+)$", text, re.MULTILINE)
    return match.group(1).strip() if match else platform.machine()


def host_cache_bytes() -> int:
    """Largest CPU cache this host reports (last level), or 32 MiB when unknown."""
    best = 0
    for size_file in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        match = re.fullmatch(r"(\d+)([KMG]?)", size_file.read_text().strip())
        if match:
            scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[match.group(2)]
            best = max(best, int(match.group(1)) * scale)
    return best or 32 * MIB


def _mock_handle() -> Any:
    """The loaded mock library (its probes' signatures declared)."""
    from launcher.library import library_path, load_library

    return load_library(library_path("mock")).handle


def measure_read_bandwidth_gbs(nbytes: int = BANDWIDTH_PROBE_BYTES, threads: int = 0,
                               reps: int = BANDWIDTH_PROBE_REPS) -> float:
    """The mock library's C read loop: decimal GB/s, best of ``reps`` passes over ``nbytes``."""
    return float(_mock_handle().pa_mock_read_bandwidth_gbs(nbytes, threads, reps))


def measure_fma_peak_gflops(threads: int = 0, reps: int = FMA_PROBE_REPS) -> float:
    """The mock library's fp32 multiply-add loop on the widest vector unit: GFLOP/s of ``threads`` threads."""
    return float(_mock_handle().pa_mock_fma_peak_gflops(threads, reps))


def library_abi_version(backend: str) -> int | None:
    """``pa_abi_version()`` of the backend's kernel library; None for an external ATB-ABI kernel or none built."""
    from launcher.library import library_path, load_library

    try:
        return load_library(library_path(backend)).abi_version
    except (OSError, RuntimeError):
        return None


def describe_device(backend: str, *, peak_gb_per_s: float | None = None,
                    bandwidth_probe_bytes: int = BANDWIDTH_PROBE_BYTES) -> DeviceInfo:
    """Device information for ``backend``; ``peak_gb_per_s`` overrides the table or the measurement."""
    cpus = os.cpu_count() or 1
    if backend == "npu":
        import torch

        name = str(torch.npu.get_device_name())
        entry = next((p for p in NPU_PEAKS if p.name_contains in name), None)
        peak = peak_gb_per_s if peak_gb_per_s is not None else (entry.peak_gb_per_s if entry else None)
        source = "given (--peak-gbs)" if peak_gb_per_s is not None else (
            "nominal (public hardware model)" if entry else "unknown: pass --peak-gbs")
        return DeviceInfo(f"npu:{name}", backend, name, peak, source,
                          entry.l2_bytes if entry else DEFAULT_NPU_L2_BYTES, cpus)
    model = cpu_model()
    if backend == "mock":
        if peak_gb_per_s is not None:
            peak, source = peak_gb_per_s, "given (--peak-gbs)"
        else:
            probe_mib = bandwidth_probe_bytes / MIB
            peak = measure_read_bandwidth_gbs(bandwidth_probe_bytes)
            source = f"measured: C read loop, {cpus} threads, {probe_mib:.0f} MiB, best of {BANDWIDTH_PROBE_REPS}"
        fma = measure_fma_peak_gflops()
        from launcher.backends import MOCK_ISA_ENV

        forced = os.environ.get(MOCK_ISA_ENV)  # a run of one SIMD path says so in its header and JSON
        path = f", SIMD path {forced} ({MOCK_ISA_ENV})" if forced else ""
        return DeviceInfo(f"mock:{model}:{cpus}cpu", backend, f"mock NPU on {model}{path}", peak, source,
                          host_cache_bytes(), cpus, fma, f"measured: fp32 FMA loop, {cpus} threads, widest vector "
                                                         f"unit, best of {FMA_PROBE_REPS}")
    if backend == "sim":
        return DeviceInfo(f"sim:{model}:{cpus}cpu", backend, f"A2/A3 intrinsic emulator on {model}",
                          peak_gb_per_s, "none: simulated time is not device time", host_cache_bytes(), cpus)
    raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")


def pa_kit_version() -> str:
    """Installed package metadata, else the version line of pyproject.toml in this checkout."""
    try:
        return importlib.metadata.version("pa-kit")
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        text = (REPO_ROOT / "pyproject.toml").read_text()
    except OSError:
        return "unknown"
    match = re.search(r'^version\s*=\s*"([^"]+)"', text, re.MULTILINE)
    return match.group(1) if match else "unknown"


def _module_version(name: str) -> str | None:
    if name == "torch_npu" and importlib.util.find_spec("torch_npu") is None:
        return None
    try:
        module: Any = __import__(name)
    except (ImportError, RuntimeError, OSError):
        return None
    return str(getattr(module, "__version__", "unknown"))


def collect_versions(backend: str) -> dict[str, str | int | None]:
    """Everything a reader needs to reproduce a row: software versions and both ABI versions."""
    from tiling import abi

    versions: dict[str, str | int | None] = {
        "pa_kit": pa_kit_version(),
        "abi_python": abi.ABI_VERSION,
        "abi_library": library_abi_version(backend),
        "python": platform.python_version(),
        "numpy": _module_version("numpy"),
        "torch": _module_version("torch"),
    }
    if backend == "npu":
        versions["torch_npu"] = _module_version("torch_npu")
        versions["cann"] = os.environ.get("ASCEND_TOOLKIT_HOME") or os.environ.get("ASCEND_HOME_PATH")
    return versions


@dataclass(frozen=True)
class CpuSnapshot:
    """CPU seconds spent by the whole host (all CPUs, from /proc/stat) and by this process, at one moment."""

    host_busy_s: float
    host_total_s: float
    self_s: float


def cpu_snapshot() -> CpuSnapshot | None:
    try:
        fields_ = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    user, nice, system, idle, iowait, irq, softirq, steal = (fields_ + [0] * 8)[:8]
    busy = user + nice + system + irq + softirq + steal
    own = os.times()
    return CpuSnapshot(busy / tick, (busy + idle + iowait) / tick, own.user + own.system)


def other_processes_share(start: CpuSnapshot | None, end: CpuSnapshot | None) -> float | None:
    """Fraction of the host's CPU time other processes used between two snapshots (0 = quiet host)."""
    if start is None or end is None or end.host_total_s <= start.host_total_s:
        return None
    others = (end.host_busy_s - start.host_busy_s) - (end.self_s - start.self_s)
    return max(0.0, others / (end.host_total_s - start.host_total_s))


def busy_host_warning(share: float | None) -> str | None:
    """A warning when other processes took a noticeable share of the CPUs during a host-timed run."""
    if share is None or share <= BUSY_OTHER_SHARE:
        return None
    return (f"host busy: other processes used {100 * share:.0f} % of the CPUs during this run; wall-clock "
            f"figures are unreliable, rerun on a quiet machine")
