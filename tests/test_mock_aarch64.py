"""The mock built for aarch64 (Kunpeng 920 hosts of Atlas 800 A2/A3 servers) and launched under qemu-user
(tests/qemu_mock.py): AUTO takes the NEON path and the x86 paths are refused; each path forced in turn (portable,
NEON) passes the float64 golden on GQA launches with odd lengths and an empty row, a split-KV plan, a decode
feature launch (sliding window, sinks, lse, several query tokens) and an MLA launch; and the two paths give the
bits of the x86 build's exact paths (one canonical order, kernel/mock/mock_math.h).

Skipped where the cross build or qemu-aarch64 is missing; ``PA_KIT_REQUIRE_AARCH64=1`` (CI) makes that a failure.
"""

from __future__ import annotations

import ctypes

import mock_harness as h
import numpy as np
import pytest
import torch
from qemu_mock import QemuMock, require

from accuracy.reference import compare, compare_lse, reference
from launcher import mock_api
from tests import test_mla_mock as mla
from tests import test_mock_features as features
from tiling import abi

Isa = mock_api.Isa
#: The paths an aarch64 build has: a test forces each.
AARCH64_PATHS = [Isa.PORTABLE, Isa.NEON]
X86_PATHS = [Isa.AVX2, Isa.AVX512, Isa.AVX512BF16, Isa.AMX]

#: lens with an empty row and odd lengths (page and tile boundaries mid-way); a split-KV plan.
GQA_CASES = {
    "odd": dict(lens=[0, 1, 37, 300, 129], num_heads=8, num_kv_heads=2, head_dim=128, block_size=16, strategy="auto"),
    "split_kv": dict(lens=[333, 5], num_heads=8, num_kv_heads=2, head_dim=64, block_size=32, strategy="split_kv"),
}
FEATURE_CASE = dict(q_len=2, window=127, sinks="bf16", lse=True, dtype="fp16", group=4, block_size=64,
                    strategy="auto")


@pytest.fixture(scope="module")
def x86() -> ctypes.CDLL:
    return h.load_mock()


@pytest.fixture(scope="module", autouse=True)
def _aarch64_build() -> None:
    require()


def test_auto_takes_neon_and_x86_paths_are_refused() -> None:
    lib = QemuMock()
    assert lib.pa_mock_best_isa() == Isa.NEON
    assert all(lib.pa_mock_isa_available(isa) for isa in (Isa.AUTO, *AARCH64_PATHS))
    case = h.make_case(np.random.default_rng(41), [40], num_heads=4, num_kv_heads=1, head_dim=64, block_size=16)
    for isa in X86_PATHS:
        assert not lib.pa_mock_isa_available(isa), isa.name
        run = h.launch(lib, case, isa=int(isa))  # type: ignore[arg-type]
        assert run.code != 0 and b"not available on this CPU" in run.error.message, (isa.name, run.error.message)
        assert (run.out == h.FP16_NAN).all(), "a refused launch wrote its output"


def test_a_bad_launch_reports_its_error_through_the_replay() -> None:
    """Negative control of the replay itself: a corrupt tiling word comes back as the mock's error, not as a pass."""
    case = h.make_case(np.random.default_rng(42), [40], num_heads=4, num_kv_heads=1, head_dim=64, block_size=16)
    words = case.plan.tiling.copy()
    words[abi.TilingWord.HEADDIM] = 63
    run = h.launch(QemuMock(), case, tiling=words)  # type: ignore[arg-type]
    assert run.code != 0 and run.error.message, "the corrupt launch passed"


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("name", list(GQA_CASES))
def test_gqa_meets_the_golden_with_the_x86_bits(x86: ctypes.CDLL, name: str, dtype: str) -> None:
    case = h.make_case(np.random.default_rng(7), dtype=dtype, value_scale=2.0, **GQA_CASES[name])  # type: ignore[arg-type]
    ref = h.golden(case)
    want = h.launch(x86, case, isa=int(Isa.PORTABLE))
    assert want.code == 0, want.error.message
    for isa in AARCH64_PATHS:
        run = h.launch(QemuMock(isa), case)  # type: ignore[arg-type]
        assert run.code == 0, (isa.name, run.error.message)
        result = compare(torch.from_numpy(h.from_bits(run.out, dtype)), ref)
        assert result.passed, (isa.name, result.summary())
        assert all(n or not run.out[b].any() for b, n in enumerate(case.lens)), "an empty row is not zero"
        assert np.array_equal(run.out, want.out), f"{isa.name} on aarch64 differs from the x86 portable path"


@pytest.mark.parametrize("isa", AARCH64_PATHS, ids=lambda isa: isa.name)
def test_a_decode_feature_launch_meets_the_golden(isa: Isa) -> None:
    b = features.build(FEATURE_CASE, seed=41)
    code, err, out, lse = features.run_mock(b, lib=QemuMock(isa))  # type: ignore[arg-type]
    assert code == 0, err.message
    ref = reference(b.query, b.key_cache, b.value_cache, b.table, b.lens, b.plan.scale, b.features)
    assert compare(out, ref).passed, compare(out, ref).summary()
    assert compare_lse(lse, ref).passed, compare_lse(lse, ref).summary()


@pytest.mark.parametrize("isa", AARCH64_PATHS, ids=lambda isa: isa.name)
def test_an_mla_launch_meets_the_golden(isa: Isa) -> None:
    c = mla.build(heads=16, q_len=2, dtype="bf16", block_size=64, lens=[0, 2, 301, 128], seed=41)
    code, err, out, lse = mla.run_mock(c, lib=QemuMock(isa), isa=int(isa))  # type: ignore[arg-type]
    assert code == 0, err.message
    ref = mla.golden(c)
    assert compare(out, ref).passed, compare(out, ref).summary()
    assert compare_lse(lse, ref).passed, compare_lse(lse, ref).summary()
