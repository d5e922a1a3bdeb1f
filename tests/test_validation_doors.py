"""One rule, one message: a bad input gets the same exception type and message through every door that takes it.

The doors: ``paged_attention``, the runner's tensor constructor, ``PagedAttentionRunner.for_engine``,
``runner.update``, ``runner.run`` and the planner.  Each case names the doors that can express its input (the
planner takes no tensors; ``paged_attention`` takes no ``strategy``); every one of them must raise the same
``(type, message)``, which is how the rules living once in :mod:`tiling.rules` show.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch

from launcher import PagedAttentionRunner, paged_attention
from tiling import plan_paged_attention

HEADS, KV_HEADS, DIM, BS, BLOCKS, PAGES = 8, 2, 64, 16, 12, 4
Door = Callable[[dict[str, Any]], object]


def inputs(**change: Any) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(0)
    heads, kv_heads, bs = change.pop("heads", HEADS), change.pop("kv_heads", KV_HEADS), change.pop("bs", BS)
    base: dict[str, Any] = {
        "query": torch.randn(2, heads, DIM, generator=gen).half(),
        "key_cache": torch.randn(BLOCKS, bs, kv_heads, DIM, generator=gen).half(),
        "block_table": torch.tensor([[3, 7, -1, -1], [0, 1, 2, 9]], dtype=torch.int32),
        "context_lens": [2 * bs - 5, 4 * bs], "options": {},
    }
    base["value_cache"] = base["key_cache"].clone()
    base.update(change)
    return base


def _tensors(x: dict[str, Any]) -> tuple[Any, ...]:
    return x["query"], x["key_cache"], x["value_cache"], x["block_table"], x["context_lens"]


def functional(x: dict[str, Any]) -> object:
    return paged_attention(*_tensors(x), **x["options"])


def constructor(x: dict[str, Any]) -> object:
    return PagedAttentionRunner(*_tensors(x), **x["options"])


def for_engine(x: dict[str, Any]) -> object:
    _, bs, kv_heads, dim = x["key_cache"].shape
    return PagedAttentionRunner.for_engine(num_heads=x["query"].shape[1], num_kv_heads=kv_heads, head_dim=dim,
                                           block_size=bs, dtype=torch.float16, max_batch=4, max_pages_per_seq=PAGES,
                                           num_blocks=BLOCKS, **x["options"])


def update(x: dict[str, Any]) -> object:
    runner = PagedAttentionRunner(*_tensors(inputs()))
    return runner.update(x["context_lens"], x["block_table"])


def run(x: dict[str, Any]) -> object:
    good = inputs()
    runner = PagedAttentionRunner(*_tensors(good))
    return runner.run(x["query"], x["key_cache"], x["value_cache"])


def planner(x: dict[str, Any]) -> object:
    _, bs, kv_heads, dim = x["key_cache"].shape
    lens = x["context_lens"]
    return plan_paged_attention(lens, num_heads=x["query"].shape[1], num_kv_heads=kv_heads, head_dim=dim,
                                block_size=bs, max_pages=x["block_table"].shape[1], num_blocks=BLOCKS,
                                scale=x["options"].get("scale", 0.125),
                                **{k: v for k, v in x["options"].items() if k != "scale"})


LAUNCHER = (functional, constructor, update)
# (id, the bad input, the doors that take it)
CASES: list[tuple[str, dict[str, Any], tuple[Door, ...]]] = [
    ("negative length", inputs(context_lens=[-3, 4]), (*LAUNCHER, planner)),
    ("length past the table", inputs(context_lens=[5, PAGES * BS + 1]), (*LAUNCHER, planner)),
    ("float length", inputs(context_lens=[5, 2.5]), (*LAUNCHER, planner)),
    ("length kind", inputs(context_lens="12"), (*LAUNCHER, planner)),
    ("block id too big", inputs(block_table=torch.tensor([[3, 7, -1, -1], [0, 1, 2, BLOCKS]], dtype=torch.int32)),
     LAUNCHER),
    ("block id negative", inputs(block_table=torch.tensor([[-1, 7, -1, -1], [0, 1, 2, 3]], dtype=torch.int32)),
     LAUNCHER),
    ("heads not a multiple", inputs(heads=6, kv_heads=4), (functional, constructor, for_engine, planner)),
    ("block size", inputs(bs=24), (functional, constructor, for_engine, planner)),
    ("scale nan", inputs(options={"scale": math.nan}), (functional, constructor, for_engine, planner)),
    ("scale kind", inputs(options={"scale": "0.1"}), (functional, constructor, for_engine, planner)),
    ("strategy", inputs(options={"strategy": "fast"}), (constructor, for_engine, planner)),
    ("invariant with strategy", inputs(options={"strategy": "bn", "batch_invariant": True}),
     (constructor, for_engine, planner)),
    ("batch_invariant kind", inputs(options={"batch_invariant": 1}), (functional, constructor, for_engine, planner)),
    ("handoff alignment", inputs(options={"handoff_tokens": 700}), (constructor, for_engine, planner)),
    ("handoff kind", inputs(options={"handoff_tokens": 512.0}), (constructor, for_engine, planner)),
    ("core_count", inputs(options={"core_count": 0}), (constructor, for_engine)),
    ("query dtype at run", inputs(query=torch.randn(2, HEADS, DIM)), (run,)),
    ("cache not contiguous at run", inputs(key_cache=torch.randn(BLOCKS, BS, DIM, KV_HEADS).half().transpose(2, 3)),
     (run,)),
]


def _failure(door: Door, x: dict[str, Any]) -> tuple[type[BaseException], str]:
    with pytest.raises((TypeError, ValueError)) as info:
        door(x)
    return info.type, str(info.value)


@pytest.mark.parametrize(("name", "bad", "doors"), CASES, ids=[c[0] for c in CASES])
def test_every_door_gives_the_same_error(name: str, bad: dict[str, Any], doors: tuple[Door, ...]) -> None:
    failures = {door.__name__: _failure(door, bad) for door in doors}
    distinct = set(failures.values())
    assert len(distinct) == 1, f"{name}: doors disagree: {failures}"


def test_the_good_input_passes_every_door() -> None:
    """Positive control: without the fault, no door raises."""
    x = inputs()
    for door in (functional, constructor, for_engine, update, run):
        door(x)
    planner(x)
    assert torch.isfinite(paged_attention(*_tensors(x)).float()).all()
