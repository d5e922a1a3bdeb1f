"""``merge_by_lse``: partial outputs of disjoint page shards, each from pa-kit on the mock with ``return_lse``,
merge to the float64 golden of the whole context; empty shards weigh nothing, an all-empty row is 0 / -inf,
sinks join once.  Negative controls: sinks on every shard, or a window applied per shard, miss the golden.
The decode loop across ranks that uses it: ``examples/decode_cp.py`` (``tests/test_e2e_decode_cp.py``)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from accuracy.harness import shuffled_block_table
from accuracy.reference import Features, compare, compare_lse, reference
from launcher import merge_by_lse, paged_attention

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from decode_cp import BLOCK_SIZE, shard

HEADS, KV_HEADS, DIM, WORLD = 12, 4, 64, 3
LENS = [150, 0, 7, 40, 33]  # 10, 0, 1, 3, 3 pages: ranks 1-2 empty for the 7-token one, everyone for the empty one
NUM_BLOCKS = 30


def _inputs(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    cache = (NUM_BLOCKS, BLOCK_SIZE, KV_HEADS, DIM)
    pages = [-(-n // BLOCK_SIZE) for n in LENS]
    table = shuffled_block_table(pages, NUM_BLOCKS, gen, max(pages))
    return (torch.randn(len(LENS), HEADS, DIM, generator=gen).bfloat16(), torch.randn(cache, generator=gen).bfloat16(),
            torch.randn(cache, generator=gen).bfloat16(), table)


def _partials(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, table: torch.Tensor, **features: object,
              ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each rank's (out, lse) over its pages (page j on rank j % WORLD), the caches shared (ids stay global)."""
    outs, lses = [], []
    for rank in range(WORLD):
        rows, lens = [], []
        for row, n in enumerate(LENS):
            ids = [int(g) for g in table[row, :-(-n // BLOCK_SIZE)]]
            local, tokens = shard([g * WORLD for g in ids], n, rank, WORLD)  # local id = global * WORLD // WORLD
            rows.append(local)
            lens.append(tokens)
        shard_table = torch.full((len(LENS), max(1, *map(len, rows))), -1, dtype=torch.int32)
        for row, ids in enumerate(rows):
            shard_table[row, :len(ids)] = torch.tensor(ids, dtype=torch.int32)
        out, lse = paged_attention(query, k, v, shard_table, lens, return_lse=True, **features)  # type: ignore[arg-type]
        outs.append(out)
        lses.append(lse)
    return outs, lses


def test_shards_merge_to_the_golden_with_sinks_added_once() -> None:
    query, k, v, table = _inputs(1)
    sinks = torch.randn(HEADS, generator=torch.Generator().manual_seed(2)) * 2
    outs, lses = _partials(query, k, v, table)
    assert any(bool(torch.isinf(lse).all()) for lse in (lse[2] for lse in lses))  # an empty shard, not the empty row
    for with_sinks in (None, sinks):
        merged, lse = merge_by_lse(outs, lses, sinks=with_sinks)
        ref = reference(query, k, v, table, LENS, DIM ** -0.5, Features(sinks=with_sinks))
        assert compare(merged, ref).passed, compare(merged, ref).summary()
        assert compare_lse(lse, ref).passed, compare_lse(lse, ref).summary()
        assert merged.dtype == torch.bfloat16 and lse.dtype == torch.float32
        assert torch.equal(merged[1], torch.zeros_like(merged[1])) and bool(torch.isneginf(lse[1]).all())
    stacked, _ = merge_by_lse(torch.stack(outs), torch.stack(lses), sinks=sinks)
    assert torch.equal(stacked.view(torch.int16), merged.view(torch.int16))


def test_negative_controls_sinks_per_shard_and_window_per_shard_miss_the_golden() -> None:
    query, k, v, table = _inputs(3)
    sinks = torch.randn(HEADS, generator=torch.Generator().manual_seed(4)) * 2
    outs, lses = _partials(query, k, v, table, sinks=sinks)  # each rank adds the sink: counted WORLD times
    merged, _ = merge_by_lse(outs, lses)
    assert not compare(merged, reference(query, k, v, table, LENS, DIM ** -0.5, Features(sinks=sinks))).passed
    outs, lses = _partials(query, k, v, table, window_left=20)  # each rank's window on its own positions
    merged, _ = merge_by_lse(outs, lses)
    assert not compare(merged, reference(query, k, v, table, LENS, DIM ** -0.5, Features(window_left=20))).passed


def test_empty_shards_weigh_nothing_whatever_they_hold() -> None:
    gen = torch.Generator().manual_seed(5)
    real = torch.randn(2, HEADS, DIM, generator=gen)
    lse = torch.randn(2, HEADS, generator=gen)
    garbage = torch.full_like(real, math.nan)
    empty = torch.full_like(lse, -math.inf)
    merged, merged_lse = merge_by_lse([garbage, real, garbage], [empty, lse, empty])
    assert torch.equal(merged, real) and torch.equal(merged_lse, lse)
    zero, none = merge_by_lse([garbage, garbage], [empty, empty], sinks=torch.zeros(HEADS))
    assert torch.equal(zero, torch.zeros_like(zero)) and bool(torch.isneginf(none).all())
    bad_lse = lse.clone()
    bad_lse[0, 0] = math.nan  # a NaN where a shard is not empty reaches the result
    poisoned, _ = merge_by_lse([real, real], [bad_lse, lse])
    assert bool(torch.isnan(poisoned[0, 0]).all()) and not bool(torch.isnan(poisoned[1]).any())


def test_two_equal_halves_give_the_half_and_log_two_more() -> None:
    gen = torch.Generator().manual_seed(6)
    part = torch.randn(3, HEADS, DIM, generator=gen, dtype=torch.float64)
    lse = torch.randn(3, HEADS, generator=gen, dtype=torch.float64)
    merged, merged_lse = merge_by_lse([part, part], [lse, lse])
    assert torch.allclose(merged, part) and torch.allclose(merged_lse, lse + math.log(2))
    out = torch.empty_like(part)
    assert merge_by_lse([part], [lse], out=out)[0] is out and torch.equal(out, part)


@pytest.mark.parametrize(("outputs", "lses", "options", "error", "message"), [
    ([], [], {}, ValueError, "at least one"),
    ([torch.zeros(2, 4, 8)], [], {}, ValueError, "one lse per output"),
    ([torch.zeros(2, 4, 8), torch.zeros(2, 4, 4)], [torch.zeros(2, 4)] * 2, {}, ValueError, r"outputs\[1\]"),
    ([torch.zeros(2, 4, 8)], [torch.zeros(2, 5)], {}, ValueError, r"lses\[0\] must be the outputs' shape"),
    ([torch.zeros(2, 4, 8)], [torch.zeros(2, 4, dtype=torch.float16)], {}, TypeError, "float32"),
    ([torch.zeros(2, 4, 8, dtype=torch.int32)], [torch.zeros(2, 4)], {}, TypeError, "outputs must be one of"),
    ([torch.zeros(2, 4, 8)], [torch.zeros(2, 4)], {"sinks": torch.zeros(5)}, ValueError, r"sinks must be"),
    ([torch.zeros(2, 4, 8)], [torch.zeros(2, 4)], {"out": torch.zeros(2, 4, 7)}, ValueError, "out must be"),
    ("ab", [torch.zeros(2, 4)], {}, TypeError, "sequence of tensors"),
])
def test_bad_input_names_what_was_expected(outputs: object, lses: object, options: dict[str, object], error: type,
                                           message: str) -> None:
    with pytest.raises(error, match=message):
        merge_by_lse(outputs, lses, **options)  # type: ignore[arg-type]
