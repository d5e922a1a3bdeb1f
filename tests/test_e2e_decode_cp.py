"""Decode context parallelism across 3 gloo ranks on the mock (``examples/decode_cp.py``): every merged layer
matches the float64 golden of the whole context (the example asserts it on rank 0), for GQA with sinks, with
window and sinks, and MLA, with 12, 20 and 40 heads, while sequences join, grow and leave and some shards are
empty.  No transformers needed; marked e2e, so it runs in CI's e2e step."""

from __future__ import annotations

import sys

import pytest

from tests.e2e_support import EXAMPLES

pytestmark = pytest.mark.e2e


def test_three_ranks_merge_to_the_golden_every_layer() -> None:
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    from decode_cp import LAYER_KINDS, run_context_parallel

    summary = run_context_parallel(world=3, steps=6, layers_per_kind=2, seed=0)
    assert set(summary["worst_ratio"]) == {kind.name for kind in LAYER_KINDS}
    assert all(0.0 < ratio <= 1.0 for ratio in summary["worst_ratio"].values()), summary
    assert summary["empty_shards"] > 0, summary
    assert len(set(summary["batches"])) > 1, f"the batch should change between steps: {summary['batches']}"
