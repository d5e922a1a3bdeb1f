"""Narrowing before the emulator sees a value, and the shapes that would need it.

pto-isa's A2/A3 TLOAD fills the 16-bit ``srcDValue`` of its GM -> L1 move from an int, so a row pitch above 65535
elements would reach the emulator wrapped to a smaller, legal value.  ``libpa_sim.so``'s kernel is built with
clang's implicit-conversion sanitizers and the emulator's handler (kernel/npu/emu/emu_ubsan.cpp) turns such a
conversion into a fault naming pto-isa's file and line.  The launcher refuses the two shape and plan values that
reach such a field (``tiling.rules.validate_npu_kernel_fields``) on ``sim`` and ``npu``, not on the mock; the
largest values it accepts compute right on ``sim``.

The known-answer tests bypass the refusal with a direct C-level launch; the negative control
(``PA_SIM_NARROWING=0``) shows the same launch without the fault completes with a wrong output.
"""

from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest
import torch

import tests.mock_harness as h
from accuracy.reference import compare, reference
from launcher import PagedAttentionRunner, mock_api
from launcher.library import library_path
from tests.test_sim_device_path import _case as sim_case
from tiling import abi, rules

LIB = library_path("sim")
pytestmark = pytest.mark.skipif(not LIB.is_file(), reason=f"{LIB} not built (bash compile.sh --all)")


@pytest.fixture(scope="module")
def sim() -> ctypes.CDLL:
    handle = ctypes.CDLL(str(LIB))
    mock_api.declare(handle)
    return handle


def _error_text(handle: ctypes.CDLL) -> str:
    return mock_api.last_error_text(handle) or mock_api.last_error(handle).message.decode(errors="replace")


def _bypassed_case(monkeypatch: pytest.MonkeyPatch, *, handoff: int | None = None, **shape: int) -> h.Case:
    """A case planned past the launcher's refusal: the planner knows no backend, and the hand-off cap is lifted
    for the test (the contract checker has none)."""
    monkeypatch.setattr(rules, "MAX_HANDOFF_TOKENS", 1 << 20)
    case = h.make_case(np.random.default_rng(7), [40, 23], block_size=16, **shape)
    if handoff is not None:
        case.plan = h.plan_paged_attention(
            case.lens, num_heads=case.num_heads, num_kv_heads=case.num_kv_heads, head_dim=case.head_dim,
            block_size=case.block_size, max_pages=case.block_table.shape[1], num_blocks=case.k.shape[0],
            scale=case.scale, dtype=case.dtype, core_count=24, handoff_tokens=handoff)
    return case


def _out(launch: h.Launch, case: h.Case) -> torch.Tensor:
    return h.as_tensor(launch.out, case.dtype)


# ---- known answers: a narrowing pto-isa makes faults naming its line ------------------------------------------
def test_a_kv_row_pitch_of_65536_faults_naming_tloads_line(sim: ctypes.CDLL,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    case = _bypassed_case(monkeypatch, num_heads=256, num_kv_heads=256, head_dim=256)
    launch = h.launch(sim, case)
    text = _error_text(sim)
    assert launch.code == abi.ErrorCode.INTERNAL, text
    assert re.search(r"implicit integer truncation at \S*/pto/npu/a2a3/TLoad\.hpp:\d+:\d+: 65536 of type 'int' "
                     r"became 0 of type 'uint16_t'", text), text
    assert "cube core" in text and "PA_SIM_SEED=" in text, text


def test_a_handoff_pitch_that_wraps_to_a_legal_value_faults_and_is_silent_without_the_check(
        sim: ctypes.CDLL, monkeypatch: pytest.MonkeyPatch) -> None:
    """66048 = 65536 + 512 wraps to a pitch of 512, which the emulator's own field check accepts."""
    case = _bypassed_case(monkeypatch, handoff=66048, num_heads=8, num_kv_heads=1, head_dim=64)
    launch = h.launch(sim, case)
    text = _error_text(sim)
    assert launch.code == abi.ErrorCode.INTERNAL, text
    assert re.search(r"TLoad\.hpp:\d+:\d+: 66048 of type 'int' became 512 of type 'uint16_t'", text), text

    # negative control: without the fault the wrapped pitch executes, and the output is wrong (no other check fires;
    # the mad operand check is off too, as the wrapped pitch makes the cube read P rows the vectors never wrote)
    monkeypatch.setenv("PA_SIM_NARROWING", "0")
    monkeypatch.setenv("PA_SIM_MAD_INPUT_CHECK", "0")
    silent = h.launch(sim, case)
    assert silent.code == 0, _error_text(sim)
    assert not compare(_out(silent, case), h.golden(case)).passed


def test_the_same_launch_at_a_hand_off_that_fits_is_right(sim: ctypes.CDLL,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The control of the two above: same shape and path, a pitch that fits."""
    case = _bypassed_case(monkeypatch, handoff=65024, num_heads=8, num_kv_heads=1, head_dim=64)
    launch = h.launch(sim, case)
    assert launch.code == 0, _error_text(sim)
    assert compare(_out(launch, case), h.golden(case)).passed


# ---- the launcher refuses what would narrow, on the NPU kernel's backends only ---------------------------------
def _runner_case(hq: int, hkv: int, d: int, lens: list[int], bs: int = 16, seed: int = 0) -> dict:
    """The sim tests' random inputs (a shuffled block table over more pages than needed)."""
    return sim_case(lens, hq=hq, hkv=hkv, d=d, bs=bs, seed=seed)


def _run(case: dict, backend: str, **options: object) -> torch.Tensor:
    runner = PagedAttentionRunner(case["query"], case["key_cache"], case["value_cache"], case["block_table"],
                                  case["context_lens"], backend=backend, **options)
    return runner().clone()


def _check(out: torch.Tensor, case: dict) -> None:
    ref = reference(case["query"], case["key_cache"], case["value_cache"], case["block_table"],
                    case["context_lens"].tolist(), 1.0 / case["query"].shape[-1] ** 0.5)
    result = compare(out, ref)
    assert result.passed, result.summary()


def test_sim_refuses_a_kv_row_pitch_above_65535_before_launch() -> None:
    case = _runner_case(256, 256, 256, [20])
    with pytest.raises(ValueError, match=r"at most 65535 on the sim backend .* got 256 x 256 = 65536"):
        _run(case, "sim")


def test_sim_refuses_a_handoff_above_65535_before_launch() -> None:
    case = _runner_case(8, 1, 64, [40])
    with pytest.raises(ValueError, match=r"handoff_tokens .* at most 65024 on the sim backend .* got 65536"):
        _run(case, "sim", handoff_tokens=65536)


def test_the_mock_takes_both_values_it_has_no_such_field() -> None:
    case = _runner_case(256, 256, 256, [20])
    _check(_run(case, "mock"), case)
    case = _runner_case(8, 1, 64, [40])
    _check(_run(case, "mock", handoff_tokens=65536), case)


@pytest.mark.parametrize("backend", rules.NPU_KERNEL_BACKENDS)
def test_the_rule_names_the_backend_and_accepts_the_largest_values(backend: str) -> None:
    rules.validate_npu_kernel_fields(backend=backend, num_kv_heads=255, head_dim=256, handoff_tokens=65024)
    with pytest.raises(ValueError, match=f"on the {backend} backend"):
        rules.validate_npu_kernel_fields(backend=backend, num_kv_heads=128, head_dim=512, handoff_tokens=512)
    rules.validate_npu_kernel_fields(backend="mock", num_kv_heads=256, head_dim=256, handoff_tokens=65536)


# ---- the largest shapes the launcher accepts compute right on sim -------------------------------------------
def test_sim_computes_the_largest_kv_row_pitch_it_accepts() -> None:
    case = _runner_case(255, 255, 256, [20])
    _check(_run(case, "sim"), case)


def test_sim_computes_the_largest_handoff_it_accepts() -> None:
    case = _runner_case(8, 1, 64, [700, 40])
    _check(_run(case, "sim", handoff_tokens=65024), case)


def test_sim_computes_the_largest_group_block_and_head_dim() -> None:
    """64 q heads on one KV head (two 32-row matmuls), 512-token pages, head_dim 256, a split sequence."""
    case = _runner_case(64, 1, 256, [1030, 3], bs=512)
    _check(_run(case, "sim"), case)


def test_sim_computes_block_ids_past_16_bits() -> None:
    """Block ids above 65535 in a cache of 70000 pages: the K/V offsets are 64-bit (id x block_size x Hkv x D).
    The pages the table does not name hold NaN, so a wrong page read shows in the output."""
    case = _runner_case(4, 1, 16, [33, 17])
    far = 70_000
    k = torch.full((far + case["key_cache"].shape[0], 16, 1, 16), float("nan"), dtype=torch.float16)
    v = torch.full_like(k, float("nan"))
    k[far:] = case["key_cache"]
    v[far:] = case["value_cache"]
    ids = case["block_table"].clone()
    ids[ids >= 0] += far
    case = {**case, "key_cache": k, "value_cache": v, "block_table": ids}
    _check(_run(case, "sim"), case)


@pytest.mark.slow
def test_sim_computes_the_largest_batch() -> None:
    """65535 sequences (the ABI's limit), one query head: about 70 s on the emulator."""
    case = _runner_case(1, 1, 16, [3] * abi.MAX_BATCH)
    _check(_run(case, "sim"), case)
