"""The decode features through the public API on the mock, against the float64 golden (:mod:`accuracy.reference`).

``paged_attention`` and the runner (tensor constructor and ``for_engine``) with several query tokens, windows,
sinks of each dtype and the lse, on ragged batches with an empty row, forced strategies, and the block-table
entries of pages wholly before a window set to -1 (engines free them: a read would be a contract error).  The
outputs are compared with the golden by the project's tolerance policy (``compare``), the lse by
``compare_lse``.  The tests run once the mock library exports ``pa_supported_features`` (ABI v3's mock); before,
they are skipped with that reason.
"""

from __future__ import annotations

import ctypes
import math
from typing import Any

import pytest
import torch

from accuracy.harness import shuffled_block_table
from accuracy.reference import Features, Reference, compare, compare_lse, reference
from launcher import PagedAttentionRunner, paged_attention
from launcher.library import library_path
from tiling import abi

HEADS, KV_HEADS, DIM, BS = 8, 2, 64, 16
SINKS = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def _mock_exports_features() -> bool:
    path = library_path("mock")
    return path.is_file() and hasattr(ctypes.CDLL(str(path)), "pa_supported_features")


pytestmark = pytest.mark.skipif(not _mock_exports_features(),
                                reason="the mock library does not export pa_supported_features yet (bash compile.sh)")


def _table(lens: list[int], q_len: int, window: int, num_blocks: int, gen: torch.Generator) -> torch.Tensor:
    """A shuffled table whose pages wholly before each sequence's window hold -1."""
    pages = [-(-n // BS) for n in lens]
    table = shuffled_block_table(pages, num_blocks, gen, max(pages) + 1)
    for row, n in enumerate(lens):
        if n:
            table[row, :abi.kv_first_token(n, q_len, window, BS) // BS] = -1
    return table


def _case(lens: list[int], q_len: int | None, window: int, dtype: torch.dtype, seed: int) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(seed)
    num_blocks = sum(-(-n // BS) for n in lens) + 3
    tokens = () if q_len is None else (q_len,)
    cache = (num_blocks, BS, KV_HEADS, DIM)
    return {"query": torch.randn(len(lens), *tokens, HEADS, DIM, generator=gen).to(dtype),
            "key_cache": torch.randn(cache, generator=gen).to(dtype),
            "value_cache": torch.randn(cache, generator=gen).to(dtype),
            "block_table": _table(lens, q_len or 1, window, num_blocks, gen), "context_lens": lens}


def _golden(case: dict[str, Any], window: int, sinks: torch.Tensor | None) -> Reference:
    return reference(case["query"], case["key_cache"], case["value_cache"], case["block_table"],
                     case["context_lens"], DIM ** -0.5, Features(window_left=window, sinks=sinks))


def _check(out: torch.Tensor, lse: torch.Tensor | None, ref: Reference) -> None:
    assert out.shape == ref.golden.shape
    check = compare(out, ref)
    assert check.passed, check.summary()
    if lse is not None:
        assert lse.dtype == torch.float32 and ref.lse is not None and lse.shape == ref.lse.shape
        lse_check = compare_lse(lse, ref)
        assert lse_check.passed, lse_check.summary()


# (q_len: None = a 3-D query, window, sinks dtype, return_lse, dtype, strategy: None = paged_attention)
CASES = [
    (None, -1, None, True, torch.bfloat16, None),
    (None, 5, "fp32", True, torch.float16, "split_kv"),
    (1, 0, "bf16", False, torch.bfloat16, "bn"),
    (2, 0, None, True, torch.float16, None),
    (4, -1, "fp16", True, torch.float16, "auto"),
    (4, 40, None, True, torch.bfloat16, "split_kv"),
    (16, 5, "fp32", True, torch.bfloat16, "bn"),
    (16, 100_000, "bf16", False, torch.float16, "split_kv"),
]


@pytest.mark.parametrize(("q_len", "window", "sinks_dtype", "return_lse", "dtype", "strategy"), CASES)
def test_features_match_the_golden(q_len: int | None, window: int, sinks_dtype: str | None, return_lse: bool,
                                   dtype: torch.dtype, strategy: str | None) -> None:
    lens = [0, q_len or 1, 37, 300]
    case = _case(lens, q_len, window, dtype, seed=len(CASES) * (q_len or 0) + window % 97)
    sinks = None if sinks_dtype is None else (torch.randn(HEADS) * 2).to(SINKS[sinks_dtype])
    options: dict[str, Any] = {"window_left": window, "sinks": sinks, "return_lse": return_lse}
    if strategy is None:
        result = paged_attention(*case.values(), **options)
    else:
        result = PagedAttentionRunner(*case.values(), strategy=strategy, **options)()
    out, lse = result if return_lse else (result, None)
    ref = _golden(case, window, sinks)
    _check(out, lse, ref)
    assert not out[0].any()  # the empty row is zero
    if lse is not None:
        assert bool(torch.isneginf(lse[0]).all())


def test_a_one_token_4d_query_gives_the_3d_bits() -> None:
    case = _case([0, 17, 300], 1, 9, torch.bfloat16, seed=3)
    flat = {**case, "query": case["query"][:, 0].contiguous()}
    out4, lse4 = paged_attention(*case.values(), window_left=9, return_lse=True)
    out3, lse3 = paged_attention(*flat.values(), window_left=9, return_lse=True)
    assert out4.shape == (3, 1, HEADS, DIM) and out3.shape == (3, HEADS, DIM)
    assert torch.equal(out4[:, 0].view(torch.int16), out3.view(torch.int16))
    assert torch.equal(lse4[:, 0], lse3)


def test_engine_loop_with_per_layer_sinks_matches_the_golden_every_step() -> None:
    """for_engine(q_len=2, window, bf16 sinks, lse): each step the sequences grow by two tokens, each layer has
    its own caches and sinks, and every layer's output and lse pass the golden."""
    q_len, window, layers = 2, 20, 2
    runner = PagedAttentionRunner.for_engine(
        num_heads=HEADS, num_kv_heads=KV_HEADS, head_dim=DIM, block_size=BS, dtype=torch.float16, max_batch=4,
        max_pages_per_seq=8, num_blocks=40, q_len=q_len, window_left=window, sinks_dtype=torch.bfloat16,
        return_lse=True)
    gen = torch.Generator().manual_seed(11)
    caches = [(torch.randn(40, BS, KV_HEADS, DIM, generator=gen).half(),
               torch.randn(40, BS, KV_HEADS, DIM, generator=gen).half()) for _ in range(layers)]
    sinks = [torch.randn(HEADS, generator=gen).bfloat16() for _ in range(layers)]
    lens = [2, 0, 45, 90]
    for _ in range(3):
        table = _table([max(n, 1) for n in lens], q_len, window, 40, gen)
        runner.update(lens, table)
        for layer in range(layers):
            query = torch.randn(len(lens), q_len, HEADS, DIM, generator=gen).half()
            out = torch.full_like(query, math.nan)
            got = runner.run(query, *caches[layer], out=out, sinks=sinks[layer])
            assert got[0] is out and got[1] is runner.lse
            ref = reference(query, *caches[layer], table, lens, DIM ** -0.5,
                            Features(window_left=window, sinks=sinks[layer]))
            _check(out, runner.lse, ref)
        lens = [n + q_len if n else 0 for n in lens]
