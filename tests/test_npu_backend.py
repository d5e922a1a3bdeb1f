"""The npu backend without an NPU: a fake ``torch_npu``/``torch.npu`` and fake kernel libraries built with gcc.

The fakes record what the launcher passes (block_dim, stream handle, the 23 pointers), so these tests check
argument building, the stream choice, the core count from device properties, NULL for unused slots, the
split-KV zeroing on the launch stream, and the zero rows the launcher writes for an external ATB-ABI kernel.
Only the device type is relaxed (CPU tensors stand in for NPU tensors); everything else is the real path.
"""

from __future__ import annotations

import ctypes
import math
import shutil
import subprocess
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch

from launcher import KernelContractError, PagedAttentionRunner
from launcher.backends import NPU_LIB_ENV, NpuBackend
from tiling import abi

FAKE_KERNEL_C = r"""
#include <stdint.h>
#define P(i) void *p##i
static uint32_t g_block_dim; static void *g_stream; static void *g_ptrs[23]; static int g_calls, g_noops;
static int32_t g_return;
#define RECORD g_block_dim = bd; g_stream = stream; \
  void *a[23] = {p0,p1,p2,p3,p4,p5,p6,p7,p8,p9,p10,p11,p12,p13,p14,p15,p16,p17,p18,p19,p20,p21,p22}; \
  for (int i = 0; i < 23; ++i) g_ptrs[i] = a[i];
#define ARGS uint32_t bd, void *stream, P(0),P(1),P(2),P(3),P(4),P(5),P(6),P(7),P(8),P(9),P(10),P(11), \
  P(12),P(13),P(14),P(15),P(16),P(17),P(18),P(19),P(20),P(21),P(22)
#ifdef OURS
int32_t pa_abi_version(void) { return FAKE_ABI_VERSION; }
uint32_t pa_supported_keys(void) { return 255u; }
int32_t call_kernel(ARGS) { RECORD ++g_calls; return g_return; }
int32_t call_kernel_noop(ARGS) { RECORD ++g_noops; return 0; }
#else
void call_kernel(ARGS) { RECORD ++g_calls; }
#endif
void fake_set_return(int32_t value) { g_return = value; }
int fake_calls(void) { return g_calls; }
int fake_noops(void) { return g_noops; }
uint32_t fake_block_dim(void) { return g_block_dim; }
void *fake_stream(void) { return g_stream; }
void *fake_ptr(int i) { return g_ptrs[i]; }
"""

CUBE_CORES = 20
CURRENT_STREAM = 0xA11CE


def _build(directory: Path, name: str, ours: bool) -> Path:
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        pytest.skip("no C compiler to build the fake kernel libraries")
    source = directory / "fake_kernel.c"
    source.write_text(FAKE_KERNEL_C)
    target = directory / name
    flags = [f"-DFAKE_ABI_VERSION={abi.ABI_VERSION}"] + (["-DOURS"] if ours else [])
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", *flags, str(source), "-o", str(target)], check=True)
    return target


@pytest.fixture(scope="module")
def fake_libraries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("fake_kernels")
    return {"ours": _build(directory, "libfake_ours.so", True),
            "external": _build(directory, "libfake_atb.so", False)}


class FakeStream:
    def __init__(self, handle: int) -> None:
        self.npu_stream = handle


class FakeNpu(types.SimpleNamespace):
    """Stands in for ``torch.npu``: records which streams launches were queued on."""

    def __init__(self) -> None:
        super().__init__(entered=[], current_calls=0)

    def current_stream(self, device: Any = None) -> FakeStream:
        self.current_calls += 1
        return FakeStream(CURRENT_STREAM)

    def get_device_properties(self, device: Any) -> Any:
        return types.SimpleNamespace(name="fake 910B", cube_core_num=CUBE_CORES)

    def is_available(self) -> bool:
        return True

    class Event:
        """Host-side stand-in: the copies it orders are synchronous on the CPU."""

        def record(self, stream: Any = None) -> None:
            del stream

        def synchronize(self) -> None:
            pass

    @contextmanager
    def stream(self, stream: Any) -> Iterator[None]:
        self.entered.append(stream)
        yield


@pytest.fixture
def fake_npu(monkeypatch: pytest.MonkeyPatch) -> FakeNpu:
    fake = FakeNpu()
    monkeypatch.setitem(sys.modules, "torch_npu", types.ModuleType("torch_npu"))
    monkeypatch.setattr(torch, "npu", fake, raising=False)
    return fake


class CpuStandInNpuBackend(NpuBackend):
    """The real npu backend, except that CPU tensors stand in for NPU tensors."""

    device_type = "cpu"


def handle(library: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(library))
    lib.fake_ptr.restype = ctypes.c_void_p
    lib.fake_stream.restype = ctypes.c_void_p
    lib.fake_block_dim.restype = ctypes.c_uint32
    return lib


def inputs(lens: list[int], *, heads: int = 16, kv_heads: int = 8, dim: int = 128, bs: int = 128) -> tuple:
    gen = torch.Generator().manual_seed(len(lens))
    pages = max(1, max(-(-n // bs) for n in lens))
    blocks = pages * len(lens) + 2
    q = torch.randn(len(lens), heads, dim, generator=gen).half()
    k = torch.randn(blocks, bs, kv_heads, dim, generator=gen).half()
    table = torch.arange(len(lens) * pages, dtype=torch.int32).view(len(lens), pages)
    return q, k, k.clone(), table, lens


def runner_on(library: Path, lens: list[int], **options: Any) -> PagedAttentionRunner:
    return PagedAttentionRunner(*inputs(lens), backend=CpuStandInNpuBackend(library), **options)


def test_stream_defaults_to_current_stream_and_args_are_recorded(fake_npu: FakeNpu,
                                                                 fake_libraries: dict[str, Path]) -> None:
    runner = runner_on(fake_libraries["ours"], [2048])
    lib = handle(fake_libraries["ours"])
    before = lib.fake_calls()
    assert runner() is runner.out
    assert lib.fake_calls() == before + 1
    assert lib.fake_stream() == CURRENT_STREAM
    assert lib.fake_block_dim() == runner.plan.block_dim
    used = {abi.ArgSlot.Q: runner.query, abi.ArgSlot.K: runner.key_cache, abi.ArgSlot.V: runner.value_cache,
            abi.ArgSlot.BLOCK_TABLES: runner.block_table, abi.ArgSlot.O: runner.out, abi.ArgSlot.TILING: runner.tiling,
            **runner.workspace}
    for slot in abi.ArgSlot:
        expected = used[slot].data_ptr() if slot in used else None
        assert lib.fake_ptr(int(slot)) == expected, f"slot {slot.name}"
    assert {abi.ArgSlot.MASK, abi.ArgSlot.SINKS, abi.ArgSlot.LSE, abi.ArgSlot.Q_ROPE,
            abi.ArgSlot.K_ROPE}.isdisjoint(used)


def test_launch_arguments_are_one_cached_tuple(fake_npu: FakeNpu, fake_libraries: dict[str, Path]) -> None:
    runner = runner_on(fake_libraries["ours"], [100, 3])
    args = runner.launch_args
    runner()
    runner()
    assert runner.launch_args is args
    assert fake_npu.current_calls == 1  # the stream is resolved once, at construction
    assert args[0] == runner.plan.block_dim and args[1] == CURRENT_STREAM and len(args) == 2 + abi.NUM_PTR_ARGS


def test_explicit_stream_is_used(fake_npu: FakeNpu, fake_libraries: dict[str, Path]) -> None:
    runner = runner_on(fake_libraries["ours"], [300], stream=FakeStream(0x5EED))
    runner()
    assert handle(fake_libraries["ours"]).fake_stream() == 0x5EED
    assert fake_npu.current_calls == 0


def test_stream_as_parameter_object(fake_npu: FakeNpu, fake_libraries: dict[str, Path]) -> None:
    stream = types.SimpleNamespace(_as_parameter_=ctypes.c_void_p(0xBEEF))
    assert runner_on(fake_libraries["ours"], [300], stream=stream).launch_args[1] == 0xBEEF


def test_bad_stream_is_a_type_error(fake_npu: FakeNpu, fake_libraries: dict[str, Path]) -> None:
    with pytest.raises(TypeError, match=r"torch\.npu\.Stream.*got str"):
        runner_on(fake_libraries["ours"], [300], stream="stream0")


def test_core_count_from_device_properties(fake_npu: FakeNpu, fake_libraries: dict[str, Path]) -> None:
    runner = runner_on(fake_libraries["ours"], [2048], strategy="split_kv")  # 32 tasks: every core busy
    assert runner.core_count == CUBE_CORES
    assert runner.plan.block_dim == CUBE_CORES
    s_half, _ = abi.scratch_halves(runner.plan.tiling)
    assert runner.plan.workspace.s_bytes == CUBE_CORES * 2 * s_half * 4
    assert runner_on(fake_libraries["ours"], [2048], strategy="split_kv", core_count=8).plan.block_dim == 8


@pytest.mark.parametrize("kind", ["ours", "external"])
def test_split_kv_partials_zeroed_only_for_an_external_kernel(kind: str, fake_npu: FakeNpu,
                                                             fake_libraries: dict[str, Path]) -> None:
    """pa-kit's kernels write every partial their combine reads, so nothing is zeroed for them (a memset per
    layer would hide a missed write); an external ATB-ABI kernel gets its partials zeroed on the launch stream."""
    stream = FakeStream(0x5EED)
    runner = runner_on(fake_libraries[kind], [2048, 0], stream=stream, strategy="split_kv")
    assert runner.plan.kv_core_num > 1
    for buffer in runner.workspace.values():
        buffer.fill_(math.nan)
    fake_npu.entered.clear()  # update's uploads (block table, tiling) are on the launch stream too
    runner()
    if kind == "external":
        assert stream in fake_npu.entered
        for slot in (abi.ArgSlot.O_CORE, abi.ArgSlot.L):
            assert torch.count_nonzero(runner.workspace[slot]) == 0, slot.name
    else:
        assert fake_npu.entered == []
        for slot in (abi.ArgSlot.O_CORE, abi.ArgSlot.L):
            assert torch.isnan(runner.workspace[slot]).all(), slot.name
    assert torch.isnan(runner.workspace[abi.ArgSlot.S]).all()  # nothing else is touched


def test_bn_plan_passes_null_partials_and_zeroes_nothing(fake_npu: FakeNpu, fake_libraries: dict[str, Path]) -> None:
    runner = runner_on(fake_libraries["ours"], [300] * 64)
    assert runner.plan.kv_core_num == 1
    fake_npu.entered.clear()
    runner()
    lib = handle(fake_libraries["ours"])
    assert lib.fake_ptr(int(abi.ArgSlot.O_CORE)) is None and lib.fake_ptr(int(abi.ArgSlot.L)) is None
    assert fake_npu.entered == []


def test_external_kernel_rows_of_empty_sequences_zeroed(fake_npu: FakeNpu, fake_libraries: dict[str, Path]) -> None:
    runner = runner_on(fake_libraries["external"], [5, 0, 700, 0])
    # an ATB-ABI kernel gets ABI v1's scratch: words 42-43 zero, the fixed per-core strides
    assert int(runner.plan.tiling[abi.TilingWord.HANDOFF_TOKENS]) == 0 == int(runner.plan.tiling[43])
    assert runner.plan.workspace.s_bytes == runner.plan.block_dim * abi.S_CORE_STRIDE_ELEMS * 4
    assert runner.library.external
    runner.out.fill_(math.nan)
    runner()
    assert torch.count_nonzero(runner.out[[1, 3]]) == 0
    assert torch.isnan(runner.out[[0, 2]]).all()  # the (fake) kernel's rows are left to the kernel


def test_our_kernel_writes_its_own_zero_rows(fake_npu: FakeNpu, fake_libraries: dict[str, Path]) -> None:
    runner = runner_on(fake_libraries["ours"], [5, 0])
    runner.out.fill_(math.nan)
    runner()
    assert torch.isnan(runner.out).all()  # the launcher adds no work for our kernels


def test_external_kernel_rejects_split_block_keys_before_launch(fake_npu: FakeNpu,
                                                                fake_libraries: dict[str, Path]) -> None:
    lib = handle(fake_libraries["external"])
    before = lib.fake_calls()
    with pytest.raises(ValueError, match=r"needs tiling key 128.*executes only keys \[0, 1, 16, 17\]"):
        PagedAttentionRunner(*inputs([600], bs=256), backend=CpuStandInNpuBackend(fake_libraries["external"]),
                             strategy="bn")
    assert lib.fake_calls() == before


def test_error_code_raises_kernel_contract_error(fake_npu: FakeNpu, fake_libraries: dict[str, Path]) -> None:
    runner = runner_on(fake_libraries["ours"], [300])
    lib = handle(fake_libraries["ours"])
    lib.fake_set_return(int(abi.ErrorCode.OUT_OF_BOUNDS))
    try:
        with pytest.raises(KernelContractError) as raised:
            runner()
    finally:
        lib.fake_set_return(0)
    assert raised.value.code == abi.ErrorCode.OUT_OF_BOUNDS and "OUT_OF_BOUNDS" in str(raised.value)


def test_noop_uses_the_cached_arguments(fake_npu: FakeNpu, fake_libraries: dict[str, Path]) -> None:
    runner = runner_on(fake_libraries["ours"], [300])
    lib = handle(fake_libraries["ours"])
    noops, calls = lib.fake_noops(), lib.fake_calls()
    runner.noop()
    assert lib.fake_noops() == noops + 1 and lib.fake_calls() == calls
    assert lib.fake_ptr(int(abi.ArgSlot.Q)) == runner.query.data_ptr()
    with pytest.raises(RuntimeError, match="call_kernel_noop"):
        runner_on(fake_libraries["external"], [300]).noop()


def test_library_from_environment(monkeypatch: pytest.MonkeyPatch, fake_npu: FakeNpu,
                                  fake_libraries: dict[str, Path]) -> None:
    monkeypatch.setenv(NPU_LIB_ENV, str(fake_libraries["external"]))
    assert CpuStandInNpuBackend().library.external
    monkeypatch.setenv(NPU_LIB_ENV, str(fake_libraries["ours"]))
    assert not CpuStandInNpuBackend().library.external


def test_real_device_check_rejects_cpu_tensors(fake_npu: FakeNpu, fake_libraries: dict[str, Path]) -> None:
    with pytest.raises(ValueError, match=r"'npu' device.*got cpu"):
        PagedAttentionRunner(*inputs([300]), backend=NpuBackend(fake_libraries["ours"]))


def test_importing_the_launcher_never_imports_torch_npu() -> None:
    code = ("import sys, os, launcher, launcher.backends, launcher.runner; "
            "assert 'torch_npu' not in sys.modules, 'torch_npu imported'; "
            "assert os.environ['TORCH_DEVICE_BACKEND_AUTOLOAD'] == '0'")
    env = {k: v for k, v in __import__("os").environ.items() if k != "TORCH_DEVICE_BACKEND_AUTOLOAD"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=Path(__file__).resolve().parent.parent)
