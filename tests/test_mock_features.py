"""The mock device executes ABI v3's decode features: several query tokens, windows, sinks and the lse.

Each case is planned by the planner and launched on ``libpa_mock.so`` directly (the launcher's own tests go
through the API), then compared with the one float64 golden (:mod:`accuracy.reference`).  The cases are a
pairwise covering array over q_len, window, sinks, lse, dtype, group ratio, block size and strategy (every pair
of values appears in some case, far fewer cases than the full product), each a ragged batch with empty rows.
Pages wholly before a window hold NaN and their block-table entries are -1: a read of either fails the case.
"""

from __future__ import annotations

import ctypes
import itertools
import math
import random
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from accuracy.reference import Features, compare, compare_lse, reference
from launcher import mock_api
from tests.built_library import library_or_skip
from tests.mock_harness import launch, load_mock
from tiling import abi, plan_paged_attention

#: Values each feature takes; "large" windows reach past every context.
FACTORS: dict[str, list[Any]] = {
    "q_len": [1, 2, 4, 16],
    "window": [-1, 0, 1, 127, 128, 100_000],
    "sinks": [None, "fp32", "bf16", "fp16"],
    "lse": [False, True],
    "dtype": ["fp16", "bf16"],
    "group": [1, 4, 8],
    "block_size": [16, 64, 128],
    "strategy": ["auto", "bn", "split_kv"],
}
TORCH = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def pairwise_cases(seed: int = 7, candidates: int = 60) -> list[dict[str, Any]]:
    """A greedy covering array: each new case is the random candidate covering the most uncovered pairs."""
    rng = random.Random(seed)
    names = list(FACTORS)
    uncovered = {((a, va), (b, vb)) for a, b in itertools.combinations(names, 2)
                 for va in FACTORS[a] for vb in FACTORS[b]}
    cases: list[dict[str, Any]] = []
    while uncovered:
        best: dict[str, Any] = {}
        best_gain = -1
        for _ in range(candidates):
            case = {name: rng.choice(values) for name, values in FACTORS.items()}
            gain = sum(((a, case[a]), (b, case[b])) in uncovered for a, b in itertools.combinations(names, 2))
            if gain > best_gain:
                best, best_gain = case, gain
        uncovered -= {((a, best[a]), (b, best[b])) for a, b in itertools.combinations(names, 2)}
        cases.append(best)
    return cases


CASES = pairwise_cases()


@dataclass
class Built:
    plan: Any
    query: torch.Tensor  # [B, q_len, Hq, D]
    key_cache: torch.Tensor
    value_cache: torch.Tensor
    table: torch.Tensor
    lens: list[int]
    sinks: torch.Tensor | None
    features: Features


def build(case: dict[str, Any], seed: int, *, head_dim: int = 64, kv_heads: int = 2) -> Built:
    """A ragged batch with an empty row, pages shuffled over more than needed, pages before each window NaN
    with table entries -1."""
    gen = torch.Generator().manual_seed(seed)
    q_len, bs, dtype = case["q_len"], case["block_size"], case["dtype"]
    hq = kv_heads * case["group"]
    lens = [0, q_len, q_len + 37, 300 + q_len, 700]
    pages = [-(-n // bs) for n in lens]
    num_blocks = sum(pages) + 5
    order = torch.randperm(num_blocks, generator=gen)
    max_pages = max(pages)
    table = torch.full((len(lens), max_pages), -1, dtype=torch.int32)
    start = 0
    for row, count in enumerate(pages):
        table[row, :count] = order[start:start + count].to(torch.int32)
        start += count
    shape = (num_blocks, bs, kv_heads, head_dim)
    key_cache = torch.randn(shape, generator=gen).to(TORCH[dtype])
    value_cache = torch.randn(shape, generator=gen).to(TORCH[dtype])
    window = case["window"]
    for row, n in enumerate(lens):
        first_page = abi.kv_first_token(n, q_len, window, bs) // bs
        for col in range(first_page):  # engines free pages a window has left behind
            page = int(table[row, col])
            key_cache[page] = math.nan
            value_cache[page] = math.nan
            table[row, col] = -1
    sinks = None
    if case["sinks"] is not None:
        sinks = (torch.randn(hq, generator=gen) * 2).to(TORCH[case["sinks"]])
    query = torch.randn(len(lens), q_len, hq, head_dim, generator=gen).to(TORCH[dtype])
    plan = plan_paged_attention(
        lens, num_heads=hq, num_kv_heads=kv_heads, head_dim=head_dim, block_size=bs, max_pages=max_pages,
        num_blocks=num_blocks, scale=head_dim**-0.5, dtype=dtype, core_count=6, strategy=case["strategy"],
        q_len=q_len, window_left=window, sinks_dtype=case["sinks"], return_lse=case["lse"],
    )
    return Built(plan, query, key_cache, value_cache, table, lens, sinks, Features(window, sinks))


def bits(tensor: torch.Tensor) -> np.ndarray:
    return tensor.contiguous().view(torch.int16).numpy().view(np.uint16) if tensor.element_size() == 2 else \
        tensor.contiguous().numpy()


#: The libraries that execute every decode feature of the covering array: the mock and the NPU kernel's sim.
LIBRARIES = ["libpa_mock.so", "libpa_sim.so"]


def _library(name: str) -> ctypes.CDLL:
    """``name`` from build/lib (skipped when not built), its C API declared."""
    lib = ctypes.CDLL(str(library_or_skip(name)))
    mock_api.declare(lib)
    return lib


def run_mock(b: Built, *, sinks_pointer: bool = True, lse_elems: int | None = None,
             lib: ctypes.CDLL | None = None) -> tuple[int, Any, Any, Any]:
    """call_kernel on the mock (or ``lib``) with NaN-poisoned output, lse and workspace; (code, error, out, lse)."""
    lib = load_mock() if lib is None else lib
    plan, slot = b.plan, abi.ArgSlot
    sizes = plan.workspace
    out = torch.full(b.query.shape, math.nan, dtype=b.query.dtype)
    rows = b.query.shape[0] * plan.q_len * plan.num_heads
    lse = torch.full((rows if lse_elems is None else lse_elems,), math.nan, dtype=torch.float32)
    buffers: dict[int, np.ndarray] = {
        slot.O: bits(out), slot.S: np.full(sizes.s_bytes // 4, np.nan, np.float32),
        slot.P: np.full(sizes.p_bytes // 2, 0xFFFF, np.uint16),
        slot.O_TMP: np.full(sizes.o_tmp_bytes // 4, np.nan, np.float32),
        slot.O_CORE: np.full(sizes.o_core_bytes // 4, np.nan, np.float32),
        slot.L: np.full(sizes.l_bytes // 4, np.nan, np.float32),
    }
    if plan.return_lse:
        buffers[slot.LSE] = lse.numpy()
    if b.sinks is not None and sinks_pointer:
        buffers[slot.SINKS] = bits(b.sinks)
    case = SimpleNamespace(q=bits(b.query), k=bits(b.key_cache), v=bits(b.value_cache),
                           block_table=b.table.numpy(), plan=plan)
    result = launch(lib, case, buffers=buffers)  # type: ignore[arg-type]
    return result.code, result.error, out, lse.reshape(b.query.shape[:3]) if lse_elems is None else lse


def case_id(case: dict[str, Any]) -> str:
    return "-".join(f"{k}{v}" for k, v in case.items())


def test_the_covering_array_covers_every_pair() -> None:
    names = list(FACTORS)
    for a, b in itertools.combinations(names, 2):
        seen = {(c[a], c[b]) for c in CASES}
        assert seen == set(itertools.product(FACTORS[a], FACTORS[b])), (a, b)
    assert len(CASES) < math.prod(len(v) for v in FACTORS.values()) // 100


def check_case(index: int, lib: ctypes.CDLL | None = None) -> None:
    """Covering-array case ``index`` on the mock (or ``lib``) against the golden, output and lse."""
    b = build(CASES[index], seed=1000 + index)
    code, err, out, lse = run_mock(b, lib=lib)
    assert code == 0, err.message
    ref = reference(b.query, b.key_cache, b.value_cache, b.table, b.lens, b.plan.scale, b.features)
    result = compare(out, ref)
    assert result.passed, result.summary()
    if b.plan.return_lse:
        lse_result = compare_lse(lse, ref)
        assert lse_result.passed, lse_result.summary()
    else:
        assert torch.isnan(lse).all(), "the lse buffer was written without return_lse"


@pytest.mark.parametrize("index", range(len(CASES)), ids=[case_id(c) for c in CASES])
def test_feature_case_matches_the_golden(index: int) -> None:
    check_case(index)


@pytest.mark.parametrize("index", range(len(CASES)), ids=[case_id(c) for c in CASES])
def test_feature_case_on_the_device_path_matches_the_golden(index: int) -> None:
    """The same launches on the NPU kernel's A2/A3 code (``libpa_sim.so``, a fresh seed per launch, named on
    failure), pages before each window NaN with table entries -1: several query tokens, windows, sinks and the lse,
    with and without split-KV, on the chunk path (a KV group's heads x query tokens <= 16) and the head path."""
    lib = _library("libpa_sim.so")
    every = abi.Feature.MULTI_TOKEN | abi.Feature.WINDOW | abi.Feature.SINKS | abi.Feature.LSE
    assert lib.pa_supported_features() & every == every
    check_case(index, lib)


def test_pages_outside_the_window_are_never_read() -> None:
    """The mock's page count: a window of 127 over 700-token contexts reads only the window's pages, one count
    per task and page, far fewer than the whole contexts."""
    lib = load_mock()
    case = {"q_len": 1, "window": 127, "sinks": None, "lse": False, "dtype": "fp16", "group": 1,
            "block_size": 16, "strategy": "bn"}
    b = build(case, seed=5)
    code, err, _, _ = run_mock(b)
    assert code == 0, err.message
    tasks_per_seq = -(-b.plan.num_heads // b.plan.split.former_head) if b.plan.split.former_batch else 0
    expected = 0
    for n in b.lens:
        if n:
            first = abi.kv_first_token(n, 1, 127, 16)
            expected += (-(-n // 16) - first // 16) * max(tasks_per_seq, 1)
    assert lib.pa_mock_kv_pages_read() == expected
    whole = sum(-(-n // 16) for n in b.lens) * max(tasks_per_seq, 1)
    assert expected < whole / 3


@pytest.mark.parametrize("library", LIBRARIES)
def test_merging_two_halves_by_their_lse_gives_the_whole(library: str) -> None:
    """Attention over a context equals the lse-weighted merge of attention over its two halves (q_len 1, no
    sink): the lse is the natural-log logsumexp a context-parallel merge needs; on the mock and on the NPU
    kernel's A2/A3 code (sim)."""
    lib = _library(library)
    gen = torch.Generator().manual_seed(11)
    bs, hq, hkv, d, n = 16, 8, 2, 64, 320
    pages = n // bs
    key_cache = torch.randn(pages, bs, hkv, d, generator=gen).half()
    value_cache = torch.randn(pages, bs, hkv, d, generator=gen).half()
    query = torch.randn(1, 1, hq, d, generator=gen).half()
    outs, lses = [], []
    for part in (slice(0, pages // 2), slice(pages // 2, pages)):
        ids = torch.arange(pages)[part].to(torch.int32)[None]
        sub_k, sub_v = key_cache, value_cache
        plan = plan_paged_attention([ids.shape[1] * bs], num_heads=hq, num_kv_heads=hkv, head_dim=d, block_size=bs,
                                    max_pages=ids.shape[1], num_blocks=pages, scale=d**-0.5, core_count=4,
                                    return_lse=True)
        built = Built(plan, query, sub_k, sub_v, ids, [ids.shape[1] * bs], None, Features())
        code, err, out, lse = run_mock(built, lib=lib)
        assert code == 0, err.message
        outs.append(out.double())
        lses.append(lse.double())
    weights = torch.softmax(torch.stack(lses), dim=0)[..., None]
    merged = (weights * torch.stack(outs)).sum(0)
    whole = reference(query, key_cache, value_cache, torch.arange(pages, dtype=torch.int32)[None], [n], d**-0.5)
    assert compare(merged, whole).passed
    assert torch.allclose(torch.logsumexp(torch.stack(lses), 0), whole.lse, atol=2e-3)


@pytest.mark.parametrize("library", LIBRARIES)
def test_sinks_pointer_missing_is_a_null_pointer_error(library: str) -> None:
    """The contract's refusals of a multi-token feature launch, the same on the mock and on sim."""
    case = {"q_len": 2, "window": -1, "sinks": "fp32", "lse": False, "dtype": "fp16", "group": 4,
            "block_size": 64, "strategy": "auto"}
    code, err, _, _ = run_mock(build(case, seed=3), sinks_pointer=False, lib=_library(library))
    assert code == abi.ErrorCode.NULL_POINTER and err.arg_slot == abi.ArgSlot.SINKS, err.message


@pytest.mark.parametrize("library", LIBRARIES)
def test_lse_buffer_too_small_is_out_of_bounds(library: str) -> None:
    case = {"q_len": 4, "window": 1, "sinks": None, "lse": True, "dtype": "bf16", "group": 1,
            "block_size": 16, "strategy": "split_kv"}
    b = build(case, seed=4)
    rows = b.query.shape[0] * 4 * b.plan.num_heads
    code, err, _, _ = run_mock(b, lse_elems=rows - 1, lib=_library(library))
    assert code == abi.ErrorCode.OUT_OF_BOUNDS and err.arg_slot == abi.ArgSlot.LSE, err.message


@pytest.mark.parametrize("word, value", [(abi.TilingWord.Q_LEN, 0), (abi.TilingWord.Q_LEN, abi.MAX_Q_LEN + 1),
                                         (abi.TilingWord.WINDOW_LEFT, 0x80000000), (abi.TilingWord.SINKS_DTYPE, 4),
                                         (abi.TilingWord.LSE, 2)])
@pytest.mark.parametrize("library", LIBRARIES)
def test_bad_feature_words_are_bad_tiling(word: abi.TilingWord, value: int, library: str) -> None:
    case = {"q_len": 2, "window": 127, "sinks": "bf16", "lse": True, "dtype": "fp16", "group": 4,
            "block_size": 64, "strategy": "auto"}
    b = build(case, seed=6)
    words = b.plan.tiling.copy()
    words[word] = value
    object.__setattr__(b, "plan", type(b.plan)(**{**b.plan.__dict__, "tiling": words}))
    code, err, _, _ = run_mock(b, lib=_library(library))
    assert code == abi.ErrorCode.BAD_TILING, err.message


def test_a_wrong_window_or_a_missing_sink_in_the_golden_is_caught() -> None:
    """Negative controls of the covering array: the same launches judged by a golden with window_left one larger,
    or without the sinks, fail."""
    window_cases = [i for i, c in enumerate(CASES) if 0 <= c["window"] < 300][:4]
    sink_cases = [i for i, c in enumerate(CASES) if c["sinks"] is not None][:4]
    assert window_cases and sink_cases
    for index in window_cases + sink_cases:
        b = build(CASES[index], seed=1000 + index)
        code, err, out, _ = run_mock(b)
        assert code == 0, err.message
        wrong = Features(b.features.window_left + 1, b.sinks) if index in window_cases else \
            Features(b.features.window_left, None)
        ref = reference(b.query, b.key_cache, b.value_cache, b.table, b.lens, b.plan.scale, wrong)
        assert not compare(out, ref).passed, CASES[index]


def test_the_device_path_sim_reports_every_decode_feature() -> None:
    """The NPU kernel executes several query tokens, windows, sinks, the lse and MLA (ABI v5): its sim says so
    through pa_supported_features() (MLA on sim: tests/test_sim_mla.py)."""
    lib = _library("libpa_sim.so")
    assert lib.pa_supported_features() == abi.FEATURES_ALL
