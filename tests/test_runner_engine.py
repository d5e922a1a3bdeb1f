"""The runner as an engine uses it: one object for the loop, a batch that changes every step.

* a continuously batching loop (join, grow, leave; several layers' caches sharing one page pool) matches the
  float64 golden at every step and layer, on the mock and on the simulation;
* the data pointers of the tiling tensor, every workspace buffer and the default output never change;
* ``run`` issues no aten op other than in-place or ``out=`` ones (nothing allocated on the launch path);
* ``update`` reads no block-table value on the host for a backend whose device is not the CPU;
* capacity: what is allocated holds every plan of the capacity; asking for more is a ValueError naming it.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from launcher import PagedAttentionRunner
from launcher.backends import MockBackend
from launcher.library import library_path
from tiling import plan_paged_attention
from tiling.splits import combine_split_limit
from tiling.workspace import capacity_workspace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import continuous_batching as loop
from built_library import library_or_skip

SIZES = {"num_heads": 8, "num_kv_heads": 2, "head_dim": 64, "block_size": 16}


def _backend_or_skip(name: str) -> str:
    if name == "sim":
        library_or_skip(library_path("sim").name)
    return name


def _engine(seed: int, **overrides: Any) -> loop.Engine:
    kw: dict[str, Any] = {"layers": 2, **SIZES, "max_batch": 6, "max_pages": 24, "num_blocks": 6 * 24 + 5,
                          "dtype": torch.bfloat16, "seed": seed}
    kw.update(overrides)
    return loop.Engine(**kw)


@pytest.mark.parametrize("backend", ["mock", "sim"])
def test_continuous_batching_loop_matches_the_golden_every_step(backend: str) -> None:
    steps = 24 if backend == "mock" else 8
    engine = _engine(seed=3 if backend == "mock" else 5, dtype=torch.float16 if backend == "sim" else torch.bfloat16)
    sizes = loop.run_loop(engine, steps, _backend_or_skip(backend), check=True)
    changes = sum(1 for a, b in itertools.pairwise(sizes) if a != b)
    assert changes >= len(sizes) // 3, f"the batch size should change most steps, got {sizes}"
    assert max(sizes) >= 3


def _runner(max_batch: int = 8, max_pages: int = 32, **kw: Any) -> PagedAttentionRunner:
    return PagedAttentionRunner.for_engine(**SIZES, dtype=torch.float16, max_batch=max_batch,
                                           max_pages_per_seq=max_pages, num_blocks=300, **kw)


def _step(rng: np.random.Generator, runner: PagedAttentionRunner, pages: int = 32) -> tuple[list[int], torch.Tensor]:
    batch = int(rng.integers(1, runner.capacity.max_batch + 1))
    lens = [int(n) for n in rng.integers(0, pages * 16, batch)]
    table = torch.from_numpy(rng.permutation(300)[:batch * pages].reshape(batch, pages).astype(np.int32))
    return lens, table


def test_buffers_keep_their_addresses_over_100_steps() -> None:
    runner = _runner()
    rng = np.random.default_rng(0)
    first: dict[str, int] = {}
    strategies = set()
    for _ in range(100):
        lens, table = _step(rng, runner)
        runner.update(lens, table)
        assert runner.plan is not None
        strategies.add(runner.plan.strategy)
        now = {"tiling": runner.tiling.data_ptr(), "out": runner.out.data_ptr(),
               "block_table": runner.block_table.data_ptr(),
               **{slot.name: t.data_ptr() for slot, t in runner.workspace.items()}}
        for name, pointer in now.items():
            assert first.setdefault(name, pointer) == pointer, f"{name} moved"
    assert strategies == {"bn", "split_kv"}  # both kinds of plan, so every workspace slot was in use
    assert runner.workspace_bytes > 0


class _OnlyInPlace(TorchDispatchMode):
    """Fails on any aten op that is neither in-place (name ends in ``_``) nor an ``out=`` variant."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func.__name__  # e.g. "zero_.default", "add.out"
        base, _, overload = name.partition(".")
        if not (base.endswith("_") or overload.startswith("out")):
            raise AssertionError(f"run() issued {func}, which allocates")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("strategy", ["bn", "split_kv"])
def test_run_allocates_nothing(strategy: str) -> None:
    runner = _runner(strategy=strategy)
    rng = np.random.default_rng(1)
    lens, table = _step(rng, runner)
    runner.update(lens, table)
    assert runner.plan is not None and (runner.plan.kv_core_num > 1) == (strategy == "split_kv")
    kc = torch.randn(300, 16, 2, 64).half()
    q = torch.randn(len(lens), 8, 64).half()
    with _OnlyInPlace():
        runner.run(q, kc, kc)
    with pytest.raises(AssertionError, match="allocates"), _OnlyInPlace():  # negative control: it fires
        torch.empty_like(q)


class _MetaBackend(MockBackend):
    """A backend whose tensors live on the meta device: any read of a block-table value fails."""

    name = "meta"
    device_type = "meta"

    def make_launch(self, function: Any, args: tuple[Any, ...], extents: Any, num_blocks: int,
                    checked: bool) -> Any:
        return lambda: None


def test_update_reads_no_block_table_value_off_the_cpu() -> None:
    runner = PagedAttentionRunner.for_engine(**SIZES, dtype=torch.float16, max_batch=4, max_pages_per_seq=8,
                                             num_blocks=64, device="meta", backend=_MetaBackend(library_path("mock")),
                                             core_count=24)
    table = torch.empty(3, 8, dtype=torch.int32, device="meta")
    with pytest.raises((NotImplementedError, RuntimeError)):
        table.cpu()  # positive control: reading this table's values is impossible
    runner.update([5, 100, 0], table)
    assert runner.plan is not None and runner.plan.batch == 3


def test_empty_step_returns_an_empty_output() -> None:
    runner = _runner()
    runner.update([])
    kc = torch.randn(300, 16, 2, 64).half()
    out = runner.run(torch.empty(0, 8, 64).half(), kc, kc)
    assert out.shape == (0, 8, 64)
    runner.update([7, 3], torch.tensor([[1, 2], [3, 4]], dtype=torch.int32))
    assert runner.run(torch.randn(2, 8, 64).half(), kc, kc).shape == (2, 8, 64)


@pytest.mark.parametrize(("change", "message"), [
    ({"lens": [1] * 9}, "batch 9 exceeds the runner's capacity max_batch=8"),
    ({"pages": 33}, "33 columns, more than the runner's capacity max_pages_per_seq=32"),
    ({"rows": 2}, r"one row per sequence \(3 rows\), got 2"),
])
def test_exceeding_the_capacity_names_it(change: dict[str, Any], message: str) -> None:
    runner = _runner()
    lens = change.get("lens", [5, 6, 7])
    table = torch.zeros(change.get("rows", len(lens)), change.get("pages", 4), dtype=torch.int32)
    with pytest.raises(ValueError, match=message):
        runner.update(lens, table)


def test_update_without_a_table_keeps_the_last_rows() -> None:
    runner = _runner()
    runner.update([5, 6, 7], torch.tensor([[1], [2], [3]], dtype=torch.int32))
    runner.update([6, 7])  # the first two rows of the last table
    assert runner.block_table[:, 0].tolist() == [1, 2]
    with pytest.raises(ValueError, match="needs a block_table: the last one given had 3 rows"):
        runner.update([1, 1, 1, 1])


def test_capacity_workspace_holds_every_plan() -> None:
    """The bound ``capacity_workspace`` claims, against random plans of every strategy and a forced hand-off."""
    rng = np.random.default_rng(7)
    for _ in range(300):
        heads_kv = int(rng.choice([1, 2, 4, 8]))
        heads = heads_kv * int(rng.choice([1, 2, 4, 8]))
        dim, bs = int(rng.choice([64, 128, 256])), int(rng.choice([16, 64, 128]))
        max_batch, max_pages, cores = int(rng.integers(1, 40)), int(rng.integers(1, 64)), int(rng.integers(1, 25))
        handoff = None if rng.random() < 0.7 else int(rng.choice([0, 512, 1024]))
        batch = int(rng.integers(1, max_batch + 1))
        lens = rng.integers(0, max_pages * bs + 1, batch)
        plan = plan_paged_attention(lens, num_heads=heads, num_kv_heads=heads_kv, head_dim=dim, block_size=bs,
                                    max_pages=max_pages, num_blocks=10, scale=0.1, core_count=cores,
                                    strategy=str(rng.choice(["auto", "bn", "split_kv"])), handoff_tokens=handoff)
        bound = capacity_workspace(core_count=cores, elem_bytes=2, max_batch=max_batch, num_heads=heads,
                                   head_dim=dim, max_pages=max_pages, handoff_tokens=handoff,
                                   kv_split_limit=combine_split_limit(dim)).by_slot()
        for slot, need in plan.workspace.by_slot().items():
            assert need <= bound[slot], (slot.name, need, bound[slot], plan)


def test_example_runs() -> None:
    assert loop.main(["--steps", "6", "--layers", "2", "--check"]) == 0
