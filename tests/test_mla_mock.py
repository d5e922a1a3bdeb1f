"""The mock device executes ABI v4's MLA launch: absorbed latent attention with a rope part.

Each case is planned by the planner (``rope_dim=64``) and launched on ``libpa_mock.so`` directly, with output,
lse and workspace NaN-poisoned, pages shuffled over a larger pool, a ragged batch with an empty row, and judged
by the one float64 golden (:func:`accuracy.reference.mla_reference`, which writes the score as one 576-wide dot
product, not the kernel's two).  The launcher's own tests (``tests/test_mla_api.py``) go through the API.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from accuracy.cases import DEEPSEEK_V3_SCALE
from accuracy.harness import shuffled_block_table
from accuracy.reference import Reference, compare, compare_lse, mla_reference
from launcher import mock_api
from launcher.library import load_library
from tests.built_library import library_or_skip
from tests.mock_harness import launch, load_mock, workspace
from tiling import PagedAttentionPlan, abi, plan_paged_attention

TORCH = {"fp16": torch.float16, "bf16": torch.bfloat16}
LATENT, ROPE = abi.MLA_LATENT_DIM, abi.MLA_ROPE_DIM


@dataclass
class MlaCase:
    plan: PagedAttentionPlan
    query: torch.Tensor  # [B, q_len, H, 512]
    query_rope: torch.Tensor  # [B, q_len, H, 64]
    kv_cache: torch.Tensor  # [num_blocks, bs, 1, 512]
    kv_rope_cache: torch.Tensor  # [num_blocks, bs, 1, 64]
    table: torch.Tensor
    lens: list[int]


def build(*, heads: int, q_len: int, dtype: str, block_size: int, lens: list[int], seed: int, strategy: str = "auto",
          return_lse: bool = True, core_count: int = 8) -> MlaCase:
    """Random inputs of DeepSeek-like magnitude (the rope part large enough to move the softmax), pages shuffled
    over a pool with spare pages."""
    gen = torch.Generator().manual_seed(seed)
    pages = [-(-n // block_size) for n in lens]
    num_blocks = sum(pages) + 7
    table = shuffled_block_table(pages, num_blocks, gen, max(max(pages), 1))
    t = TORCH[dtype]
    kv_cache = torch.randn(num_blocks, block_size, 1, LATENT, generator=gen).to(t)
    kv_rope_cache = (torch.randn(num_blocks, block_size, 1, ROPE, generator=gen) * 2).to(t)
    query = torch.randn(len(lens), q_len, heads, LATENT, generator=gen).to(t)
    query_rope = (torch.randn(len(lens), q_len, heads, ROPE, generator=gen) * 2).to(t)
    plan = plan_paged_attention(
        lens, num_heads=heads, num_kv_heads=1, head_dim=LATENT, rope_dim=ROPE, block_size=block_size,
        max_pages=table.shape[1], num_blocks=num_blocks, scale=DEEPSEEK_V3_SCALE, dtype=dtype, core_count=core_count,
        strategy=strategy, q_len=q_len, return_lse=return_lse)  # type: ignore[arg-type]
    return MlaCase(plan, query, query_rope, kv_cache, kv_rope_cache, table, lens)


def bits(tensor: torch.Tensor) -> np.ndarray:
    return tensor.contiguous().view(torch.int16).numpy().view(np.uint16)


def run_mock(c: MlaCase, *, lib: ctypes.CDLL | None = None, checked: bool = True, isa: int = 0,
             pointers: dict[int, int | None] | None = None, extents: dict[int, int] | None = None,
             tiling: np.ndarray | None = None) -> tuple[int, Any, torch.Tensor, torch.Tensor]:
    """call_kernel with NaN-poisoned output, lse and workspace (:func:`tests.mock_harness.workspace`); (code,
    error, out, lse)."""
    lib = load_mock() if lib is None else lib
    slot = abi.ArgSlot
    latent = bits(c.kv_cache)
    case = SimpleNamespace(q=bits(c.query), k=latent, v=latent, block_table=c.table.numpy(), plan=c.plan,
                           dtype=c.plan.dtype)
    buffers = workspace(case)  # type: ignore[arg-type]
    out = torch.from_numpy(buffers[slot.O].view(np.int16)).view(c.query.dtype)
    lse = torch.full(c.query.shape[:3], math.nan, dtype=torch.float32)
    buffers[slot.Q_ROPE], buffers[slot.K_ROPE] = bits(c.query_rope), bits(c.kv_rope_cache)
    if c.plan.return_lse:
        buffers[slot.LSE] = lse.numpy()
    result = launch(lib, case, buffers=buffers, checked=checked, isa=isa, pointers=pointers,  # type: ignore[arg-type]
                    extents=extents, tiling=tiling)
    return result.code, result.error, out, lse


def golden(c: MlaCase) -> Reference:
    return mla_reference(c.query, c.query_rope, c.kv_cache, c.kv_rope_cache, c.table, c.lens, c.plan.scale)


#: heads x q_len x dtype x block size x strategy: each value of every factor, the compute-heavy ones once.
CASES = [
    dict(heads=16, q_len=1, dtype="fp16", block_size=64, strategy="auto"),
    dict(heads=16, q_len=4, dtype="bf16", block_size=128, strategy="bn"),
    dict(heads=32, q_len=1, dtype="bf16", block_size=128, strategy="auto"),
    dict(heads=32, q_len=2, dtype="fp16", block_size=64, strategy="split_kv"),
    dict(heads=64, q_len=1, dtype="fp16", block_size=128, strategy="split_kv"),
    dict(heads=64, q_len=2, dtype="bf16", block_size=64, strategy="auto"),
    dict(heads=128, q_len=1, dtype="bf16", block_size=64, strategy="bn"),
    dict(heads=128, q_len=2, dtype="fp16", block_size=128, strategy="auto"),
    dict(heads=7, q_len=16, dtype="bf16", block_size=16, strategy="auto"),
    dict(heads=1, q_len=1, dtype="fp16", block_size=32, strategy="split_kv"),
]


def case_id(case: dict[str, Any]) -> str:
    return "-".join(f"{k}{v}" for k, v in case.items())


@pytest.mark.parametrize("index", range(len(CASES)), ids=[case_id(c) for c in CASES])
def test_mla_case_matches_the_golden(index: int) -> None:
    case = CASES[index]
    q_len = case["q_len"]
    c = build(**case, lens=[0, q_len, q_len + 45, 300 + q_len, 611], seed=100 + index)
    code, err, out, lse = run_mock(c)
    assert code == 0, err.message
    ref = golden(c)
    result = compare(out, ref)
    assert result.passed, result.summary()
    lse_result = compare_lse(lse, ref)
    assert lse_result.passed, lse_result.summary()


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_long_context_small_batch_splits_the_kv_range(dtype: str) -> None:
    """DeepSeek-V3 at TP 8 (16 heads), batch 2, 8K and 5K tokens: the planner splits each context over the cores
    and the combine merges the partials."""
    c = build(heads=16, q_len=1, dtype=dtype, block_size=128, lens=[8192, 5000], seed=7, core_count=24)
    assert c.plan.kv_core_num > 1 and c.plan.key & abi.KEY_SPLIT_KV_BIT
    code, err, out, lse = run_mock(c)
    assert code == 0, err.message
    ref = golden(c)
    assert compare(out, ref).passed, compare(out, ref).summary()
    assert compare_lse(lse, ref).passed


def test_an_mla_task_holds_every_head_up_to_its_rows() -> None:
    """ABI v5: an MLA task holds every q head of its token range (the latent read once per split), up to
    abi.MLA_MAX_TASK_ROWS rows: 128 heads at q_len 1 in one task, q_len 4 x 128 heads cut to tasks of 32."""
    for q_len, heads in ((1, 128), (4, 32)):
        c = build(heads=128, q_len=q_len, dtype="fp16", block_size=64, lens=[70, 64], seed=9, return_lse=False)
        assert c.plan.split.former_head == heads and c.plan.handoff_tokens == abi.MLA_HANDOFF_TOKENS
        code, err, out, _ = run_mock(c)
        assert code == 0, err.message
        assert compare(out, golden(c)).passed


def test_simd_paths_and_checked_mode_agree_bit_for_bit() -> None:
    """The portable, AVX2 and AVX-512 paths (those this CPU has) and the unchecked mode give the same bits."""
    lib = load_mock()
    c = build(heads=32, q_len=2, dtype="bf16", block_size=64, lens=[0, 200, 333], seed=12)
    results = []
    for isa in (1, 2, 3):
        if not lib.pa_mock_isa_available(isa):
            continue
        for checked in (True, False):
            code, err, out, lse = run_mock(c, lib=lib, isa=isa, checked=checked)
            assert code == 0, err.message
            results.append((isa, checked, out, lse))
    assert len(results) >= 2
    for isa, checked, out, lse in results[1:]:
        assert torch.equal(out.view(torch.int16), results[0][2].view(torch.int16)), (isa, checked)
        assert torch.equal(lse, results[0][3]), (isa, checked)


def test_a_golden_without_the_rope_part_fails() -> None:
    """Negative control: the same launches judged by a golden whose rope parts are zero (the kernel dropping the
    rope dot would pass it) fail, and so does one with the latent and rope swapped for another page's."""
    c = build(heads=16, q_len=1, dtype="fp16", block_size=64, lens=[0, 1, 250, 611], seed=21)
    code, err, out, _ = run_mock(c)
    assert code == 0, err.message
    no_rope = mla_reference(c.query, torch.zeros_like(c.query_rope), c.kv_cache, torch.zeros_like(c.kv_rope_cache),
                            c.table, c.lens, c.plan.scale)
    assert not compare(out, no_rope).passed
    rolled = replace(c, kv_rope_cache=c.kv_rope_cache.roll(1, dims=0))
    assert not compare(out, golden(rolled)).passed


def _with_words(c: MlaCase, **words: int) -> np.ndarray:
    tiling = c.plan.tiling.copy()
    for name, value in words.items():
        tiling[abi.TilingWord[name]] = value
    return tiling


def contract_corruptions(c: MlaCase) -> dict[str, dict[str, Any]]:
    """One corruption per MLA obligation of the contract, with the error code and slot it must give."""
    slot, t = abi.ArgSlot, abi.TilingWord
    rope_bytes = c.kv_rope_cache.numel() * 2
    return {
        "rope width 32": dict(tiling=_with_words(c, ROPE_DIM=32), code=abi.ErrorCode.BAD_TILING, slot=slot.TILING,
                              offset=t.ROPE_DIM),
        "rope word 0 at D 512": dict(tiling=_with_words(c, ROPE_DIM=0, MLA_RESCALE=0), code=abi.ErrorCode.BAD_TILING,
                                     slot=slot.TILING, offset=t.HEADDIM),
        "rescale word 2": dict(tiling=_with_words(c, MLA_RESCALE=2), code=abi.ErrorCode.BAD_TILING, slot=slot.TILING,
                               offset=t.MLA_RESCALE),
        "hand-off 512": dict(tiling=_with_words(c, HANDOFF_TOKENS=512, SCORE_STAGE_ELEMS=16 * 512),
                             code=abi.ErrorCode.BAD_TILING, slot=slot.TILING, offset=t.HANDOFF_TOKENS),
        "129 rows per task": dict(tiling=_with_words(c, FORMER_HEAD=17, Q_LEN=8), code=abi.ErrorCode.BAD_TILING,
                                  slot=slot.TILING, offset=t.FORMER_HEAD),
        "two kv heads": dict(tiling=_with_words(c, KVHEADS=2, GROUPNUM=8), code=abi.ErrorCode.BAD_TILING,
                             slot=slot.TILING, offset=t.KVHEADS),
        "latent 256": dict(tiling=_with_words(c, HEADDIM=256, HEADDIM_V=256), code=abi.ErrorCode.BAD_TILING,
                           slot=slot.TILING, offset=t.HEADDIM),
        "q_rope NULL": dict(pointers={slot.Q_ROPE: None}, code=abi.ErrorCode.NULL_POINTER, slot=slot.Q_ROPE),
        "k_rope NULL": dict(pointers={slot.K_ROPE: None}, code=abi.ErrorCode.NULL_POINTER, slot=slot.K_ROPE),
        "v is not k": dict(pointers={slot.V: 0x1000}, code=abi.ErrorCode.BAD_LAUNCH, slot=slot.V),
        "k_rope short": dict(extents={slot.K_ROPE: rope_bytes - 2}, code=abi.ErrorCode.OUT_OF_BOUNDS,
                             slot=slot.K_ROPE),
        "q_rope short": dict(extents={slot.Q_ROPE: c.query_rope.numel() * 2 - 2}, code=abi.ErrorCode.OUT_OF_BOUNDS,
                             slot=slot.Q_ROPE),
    }


@pytest.mark.parametrize("name", list(contract_corruptions(build(heads=16, q_len=1, dtype="fp16", block_size=64,
                                                                 lens=[100], seed=1))))
def test_mla_contract_violations_are_refused(name: str) -> None:
    c = build(heads=16, q_len=1, dtype="fp16", block_size=64, lens=[0, 100, 300], seed=31)
    spec = contract_corruptions(c)[name]
    code, err, out, _ = run_mock(c, tiling=spec.get("tiling"), pointers=spec.get("pointers"),
                                 extents=spec.get("extents"))
    assert code == spec["code"], f"{name}: {code} {err.message}"
    assert err.arg_slot == spec["slot"], err.message
    if "offset" in spec:
        assert err.element_offset == spec["offset"], err.message
    assert torch.isnan(out).all(), "a refused launch wrote the output"


def test_the_sim_executes_mla_and_says_so() -> None:
    """The device path executes MLA (ABI v5): the sim's library reports the feature and a launch matches the golden
    (tests/test_sim_mla.py runs the cases)."""
    sim = ctypes.CDLL(str(library_or_skip("libpa_sim.so")))
    mock_api.declare(sim)
    c = build(heads=16, q_len=1, dtype="fp16", block_size=64, lens=[100], seed=41, return_lse=False)
    code, err, out, _ = run_mock(c, lib=sim)
    assert code == 0, err.message
    assert compare(out, golden(c)).passed
    assert load_library(library_or_skip("libpa_sim.so")).supported_features & abi.Feature.MLA


@pytest.mark.parametrize("q_len", [1, 2])
def test_a_uniform_batch_cuts_only_the_sequences_of_its_last_round(q_len: int) -> None:
    """ABI v6: seven sequences of 600 tokens on 3 cores run six whole (a tail pass under the split-KV key) and cut
    one into 3 KV ranges (the former pass); only the cut one has partials, and every row matches the golden.  A
    tail slot's partial offset other than 0 is refused (its negative control)."""
    c = build(heads=16, q_len=q_len, dtype="fp16", block_size=64, lens=[600] * 7, seed=51 + q_len, core_count=3)
    s = c.plan.split
    assert (s.former_batch, s.tail_batch, s.kv_core_num) == (1, 6, 3)
    assert c.plan.key & abi.KEY_SPLIT_KV_BIT and c.plan.split_batch == 1
    assert c.plan.workspace.l_bytes == 1 * 16 * q_len * 3 * 4
    code, err, out, lse = run_mock(c)
    assert code == 0, err.message
    ref = golden(c)
    assert compare(out, ref).passed, compare(out, ref).summary()
    assert compare_lse(lse, ref).passed
    tiling = c.plan.tiling.copy()
    tail_slot = int(tiling[abi.batch_word(6, abi.BatchField.GATHER)])
    tiling[abi.batch_word(tail_slot, abi.BatchField.ADDR_L_LO)] = 16 * q_len * 3
    code, err, out, _ = run_mock(c, tiling=tiling)
    assert code == abi.ErrorCode.BAD_TILING and b"l offset" in err.message, err.message
    assert torch.isnan(out).all()


def test_a_ragged_batch_cuts_every_sequence_alike() -> None:
    """The last-round grid is planned for uniform lengths only (the gather order of a ragged batch is the
    balancer's, tiling/balance.py): one token more in one sequence gives the one-pass grid."""
    c = build(heads=16, q_len=1, dtype="fp16", block_size=64, lens=[600] * 6 + [601], seed=54, core_count=3)
    assert c.plan.split.tail_batch == 0
