"""The mock's native arithmetic (``Isa.AVX512BF16``: AVX512-BF16 dot products, ``Isa.AMX``: AMX-BF16 tile
products, each for bf16 Q.K and P.V) and its fallbacks: every path this CPU has passes the float64 golden on GQA
and MLA launches in awkward shapes; each path can be forced and one the CPU lacks is refused; AUTO picks AMX where
present, then AVX512-BF16 on AMD CPUs, else the widest exact path (on the Xeons measured VDPBF16PS was slower,
kernel/mock/PERFORMANCE.md steps 22, 23 and 27);
each native path really runs (its bits differ from the exact paths', which agree among themselves); and AMX
shares its thread with torch's own AMX kernels."""

from __future__ import annotations

import ctypes
from pathlib import Path

import mock_harness as h
import numpy as np
import pytest
import torch

from accuracy.reference import compare, compare_lse
from launcher import mock_api
from tests.test_mla_mock import build as build_mla
from tests.test_mla_mock import golden as mla_golden
from tests.test_mla_mock import run_mock as run_mla

Isa = mock_api.Isa
PATHS = [isa for isa in Isa if isa != Isa.AUTO]
NATIVE = [isa for isa in PATHS if isa not in mock_api.EXACT_ISAS]


def cpuinfo_field(name: str) -> str:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    line = next((row for row in text.splitlines() if row.split(":", 1)[0].strip() == name), "")
    return line.split(":", 1)[-1].strip()


def cpu_flags() -> set[str]:
    return set(cpuinfo_field("flags").split())


def cpu_vendor() -> str:
    return cpuinfo_field("vendor_id")


#: /proc/cpuinfo's names of what each path needs (the library's own test is __builtin_cpu_supports).
NEEDS = {Isa.PORTABLE: set(), Isa.AVX2: {"avx2", "fma", "f16c"},
         Isa.AVX512: {"avx512f", "avx512bw", "avx512vl", "avx2", "fma", "f16c"},
         Isa.AVX512BF16: {"avx512f", "avx512bw", "avx512vl", "avx2", "fma", "f16c", "avx512_bf16"},
         Isa.AMX: {"avx512f", "avx512bw", "avx512vl", "avx2", "fma", "f16c", "amx_tile", "amx_bf16"},
         Isa.NEON: {"asimd"}}  # aarch64's name (its /proc/cpuinfo says "Features", so this test skips there)


@pytest.fixture(scope="module")
def lib() -> ctypes.CDLL:
    return h.load_mock()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261125)


def test_every_path_is_available_exactly_where_the_cpu_has_it(lib: ctypes.CDLL) -> None:
    flags = cpu_flags()
    if not flags:
        pytest.skip("no /proc/cpuinfo flags to compare with")
    for isa in PATHS:
        assert bool(lib.pa_mock_isa_available(isa)) == NEEDS[isa].issubset(flags), isa.name
    best = max((isa for isa in mock_api.EXACT_ISAS if lib.pa_mock_isa_available(isa)), key=int)
    if lib.pa_mock_isa_available(Isa.AVX512BF16) and cpu_vendor() == "AuthenticAMD":
        best = Isa.AVX512BF16
    if lib.pa_mock_isa_available(Isa.AMX):
        best = Isa.AMX
    assert lib.pa_mock_best_isa() == best  # AUTO: AMX, then AVX512-BF16 on AMD, then the widest exact path


def test_a_path_the_cpu_lacks_is_refused_at_launch(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    case = h.make_case(rng, [40], num_heads=4, num_kv_heads=1, head_dim=64, block_size=16, dtype="bf16")
    for isa in [*(isa for isa in PATHS if not lib.pa_mock_isa_available(isa)), 99]:
        run = h.launch(lib, case, isa=int(isa))
        assert run.code != 0 and b"not available on this CPU" in run.error.message, (isa, run.error.message)


#: lens with an empty row, odd lengths (a last token without a partner in P.V's pairs), a page boundary
#: mid-tile; head dims the native path takes (multiples of 32) and one it hands to the AVX-512 code (48).
GQA_CASES = [
    dict(lens=[0, 1, 37, 300, 129], num_heads=8, num_kv_heads=2, head_dim=128, block_size=16, strategy="auto"),
    dict(lens=[333, 64, 5], num_heads=8, num_kv_heads=2, head_dim=64, block_size=32, strategy="split_kv"),
    dict(lens=[77, 200], num_heads=32, num_kv_heads=8, head_dim=128, block_size=128, strategy="bn"),
    dict(lens=[45, 3], num_heads=6, num_kv_heads=6, head_dim=256, block_size=16, strategy="auto"),
    dict(lens=[99, 16], num_heads=4, num_kv_heads=1, head_dim=48, block_size=16, strategy="auto"),
    # 2 q rows per kv head; a head dim of three 32-column chunks (P.V's pairs of chunks and a single one)
    dict(lens=[61, 130], num_heads=6, num_kv_heads=3, head_dim=96, block_size=32, strategy="auto"),
    # 12 q rows per kv head: not a divisor of AMX's 16-row groups
    dict(lens=[150, 31], num_heads=24, num_kv_heads=2, head_dim=128, block_size=64, strategy="bn"),
]


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("index", range(len(GQA_CASES)))
def test_every_path_passes_the_golden(lib: ctypes.CDLL, rng: np.random.Generator, dtype: str, index: int) -> None:
    case = h.make_case(rng, dtype=dtype, value_scale=2.0, **GQA_CASES[index])  # type: ignore[arg-type]
    ref = h.golden(case)
    for isa in PATHS:
        if not lib.pa_mock_isa_available(isa):
            continue
        run = h.launch(lib, case, isa=int(isa))
        assert run.code == 0, (isa.name, run.error.message)
        result = compare(torch.from_numpy(h.from_bits(run.out, dtype)), ref)
        assert result.passed, (isa.name, result.summary())
        for b, n in enumerate(case.lens):
            assert n or not run.out[b].any(), (isa.name, "empty sequence must give a zero row")


@pytest.mark.parametrize(("heads", "q_len", "dtype"), [(128, 1, "bf16"), (16, 2, "bf16"), (7, 3, "fp16")])
def test_every_path_passes_the_mla_golden(lib: ctypes.CDLL, heads: int, q_len: int, dtype: str) -> None:
    c = build_mla(heads=heads, q_len=q_len, dtype=dtype, block_size=64, lens=[0, q_len, 301, 128], seed=heads + q_len)
    ref = mla_golden(c)
    for isa in PATHS:
        if not lib.pa_mock_isa_available(isa):
            continue
        code, err, out, lse = run_mla(c, lib=lib, isa=int(isa))
        assert code == 0, (isa.name, err.message)
        assert compare(out, ref).passed, (isa.name, compare(out, ref).summary())
        assert compare_lse(lse, ref).passed, isa.name


@pytest.mark.parametrize("native_isa", NATIVE)
def test_the_native_path_runs_and_the_exact_paths_agree(lib: ctypes.CDLL, rng: np.random.Generator,
                                                        native_isa: Isa) -> None:
    """bf16: a native path's bits differ from the exact paths' somewhere (so it is the one computing), while the
    exact paths agree bit for bit; fp16 launches on a native path are the AVX-512 path's, bit for bit."""
    if not lib.pa_mock_isa_available(native_isa):
        pytest.skip(f"this CPU cannot run {native_isa.name}")
    for dtype in ("bf16", "fp16"):
        case = h.make_case(rng, [300, 129, 77], num_heads=8, num_kv_heads=2, head_dim=128, block_size=16,
                           dtype=dtype)
        native = h.launch(lib, case, isa=int(native_isa))
        exact = [h.launch(lib, case, isa=int(isa)) for isa in mock_api.EXACT_ISAS if lib.pa_mock_isa_available(isa)]
        assert all(np.array_equal(exact[0].out, e.out) for e in exact[1:])
        assert np.array_equal(native.out, exact[0].out) == (dtype == "fp16"), dtype


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_the_exact_paths_agree_at_every_row_block(lib: ctypes.CDLL, rng: np.random.Generator, dtype: str) -> None:
    """1-7 q rows per kv head (the AVX2 Q.K's blocks of 4, 2 and 1 rows and their mixes) and head dims of 1, 2, 4
    and 8 chunks of 16: every exact path gives the same bits."""
    for group, dim in [(1, 64), (2, 16), (3, 128), (4, 32), (5, 256), (7, 128)]:
        case = h.make_case(rng, [130, 41], num_heads=2 * group, num_kv_heads=2, head_dim=dim, block_size=32,
                           dtype=dtype, value_scale=2.0)
        runs = [h.launch(lib, case, isa=int(isa)) for isa in mock_api.EXACT_ISAS if lib.pa_mock_isa_available(isa)]
        assert all(run.code == 0 for run in runs), [run.error.message for run in runs]
        assert all(np.array_equal(runs[0].out, run.out) for run in runs[1:]), (group, dim)


def test_the_backend_forces_a_path_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """MockBackend(isa=) and $PA_MOCK_ISA (how the benchmark runs a path AUTO would not choose) reach the launch:
    a path the CPU lacks is refused by it, and a name that is no path is a ValueError before any launch."""
    from launcher import paged_attention
    from launcher.backends import MOCK_ISA_ENV, MockBackend
    from launcher.errors import KernelContractError

    torch.manual_seed(5)
    q = torch.randn(2, 4, 64, dtype=torch.float16)
    k, v = (torch.randn(6, 16, 2, 64, dtype=torch.float16) for _ in range(2))
    table = torch.tensor([[0, 1, 2], [3, 4, 5]], dtype=torch.int32)
    lens = [40, 33]
    lib = h.load_mock()
    lacking = next((isa for isa in PATHS if not lib.pa_mock_isa_available(isa)), None)
    monkeypatch.delenv(MOCK_ISA_ENV, raising=False)
    auto = paged_attention(q, k, v, table, lens, backend=MockBackend())
    for isa in mock_api.EXACT_ISAS:
        if lib.pa_mock_isa_available(isa):
            monkeypatch.setenv(MOCK_ISA_ENV, isa.name.lower())
            assert MockBackend().isa == isa
            assert torch.equal(paged_attention(q, k, v, table, lens, backend=MockBackend()), auto), isa.name
    if lacking is not None:
        monkeypatch.setenv(MOCK_ISA_ENV, lacking.name)
        with pytest.raises(KernelContractError, match="not available on this CPU"):
            paged_attention(q, k, v, table, lens, backend=MockBackend())
        monkeypatch.delenv(MOCK_ISA_ENV)
        with pytest.raises(KernelContractError, match="not available on this CPU"):
            paged_attention(q, k, v, table, lens, backend=MockBackend(isa=lacking.name.lower()))
    monkeypatch.setenv(MOCK_ISA_ENV, "sse9")
    with pytest.raises(ValueError, match=r"must be one of .*got 'sse9'"):
        MockBackend()


@pytest.mark.parametrize("native_isa", NATIVE)
def test_the_native_path_flushes_bf16_subnormal_inputs(lib: ctypes.CDLL, rng: np.random.Generator,
                                                       native_isa: Isa) -> None:
    """VDPBF16PS and TDPBF16PS treat subnormal inputs as zero: V rows of about 1e-39 give zero rows where the exact
    paths give subnormal ones; both are within the golden's tolerance (the difference is below 1e-38)."""
    if not lib.pa_mock_isa_available(native_isa):
        pytest.skip(f"this CPU cannot run {native_isa.name}")
    case = h.make_case(rng, [100, 37], num_heads=4, num_kv_heads=2, head_dim=64, block_size=16, dtype="bf16")
    case.v = h.to_bits(h.from_bits(case.v, "bf16") * 1e-39, "bf16")
    native, exact = (h.launch(lib, case, isa=int(isa)).out for isa in (native_isa, Isa.AVX512))
    assert not native.any() and np.count_nonzero(exact) > exact.size // 2
    for out in (native, exact):
        assert compare(torch.from_numpy(h.from_bits(out, "bf16")), h.golden(case)).passed


def test_amx_shares_its_thread_with_torch(lib: ctypes.CDLL, rng: np.random.Generator) -> None:
    """torch's bf16 matmuls (oneDNN) configure AMX tiles on the same thread as a launch: the mock's path loads its
    own tile configuration when it finds another, and leaves torch's results as they were."""
    if not lib.pa_mock_isa_available(Isa.AMX):
        pytest.skip("this CPU has no AMX-BF16")
    case = h.make_case(rng, [300, 77], num_heads=32, num_kv_heads=2, head_dim=128, block_size=32, dtype="bf16")
    a = torch.randn(512, 1024, dtype=torch.bfloat16)  # large enough for oneDNN's AMX kernels (ONEDNN_VERBOSE=1)
    b = torch.randn(1024, 384, dtype=torch.bfloat16)
    before = a @ b
    first = h.launch(lib, case, isa=int(Isa.AMX)).out
    between = a @ b
    second = h.launch(lib, case, isa=int(Isa.AMX)).out
    assert np.array_equal(first, second)
    assert torch.equal(before, between) and torch.equal(before, a @ b)
    assert compare(torch.from_numpy(h.from_bits(second, "bf16")), h.golden(case)).passed
