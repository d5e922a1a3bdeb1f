"""Departure 10: ragged batches get a balanced gather order and, where one sequence outweighs a core's share, a
split-KV grid (tiling/balance.py).

The work per core is checked against ``tiling.enumerate_tasks``, which walks the tiling words the way the
kernel does, so the balancer's own model of the task loop cannot drift from the loop.  Each balancing claim
is checked against what the planner would launch without it (the negative control: the same assertion fails
on that plan).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pytest
from test_tiling_planner import coverage_problems, field, gather_problems

from tiling import PagedAttentionPlan, abi, balance, enumerate_tasks, planner
from tiling.splits import one_pass_grid

GQA = {"num_heads": 32, "num_kv_heads": 8, "head_dim": 128, "block_size": 128}
#: 64 ragged sequences on 24 cores: in ATB's BN grid one task each, in ascending order over three rounds.
RAGGED_64 = np.random.default_rng(5).integers(16, 4096, 64)
#: 64 lengths log-uniform in [16, 4096]: the longest alone holds more tokens than a core's share.
LOG_RAGGED_64 = np.exp(np.random.default_rng(5).uniform(np.log(16), np.log(4096), 64)).astype(np.int64)


@pytest.fixture(autouse=True)
def fresh_decisions() -> Iterator[None]:
    """Some tests change the balancer's constants: no decision cached under other constants may serve them."""
    balance._decide.cache_clear()
    yield
    balance._decide.cache_clear()


def plan(lens: np.ndarray, **kw: object) -> PagedAttentionPlan:
    shape = {**GQA, **kw}
    pages = max(1, -(-int(lens.max()) // int(shape["block_size"])))  # type: ignore[call-overload]
    return planner.plan_paged_attention(lens, max_pages=pages, num_blocks=4096, scale=0.1, **shape)  # type: ignore[arg-type]


def unbalanced(lens: np.ndarray, monkeypatch: pytest.MonkeyPatch, **kw: object) -> PagedAttentionPlan:
    """The plan without departure 10: the split rules' grid in ATB's ascending order."""
    with monkeypatch.context() as m:
        m.setattr(planner, "balance_ragged", lambda split, lens, ascending, **_: (split, ascending))
        return plan(lens, **kw)


def core_loads(p: PagedAttentionPlan) -> np.ndarray:
    """Query-head tokens per core, from the task list the tiling words describe."""
    loads = np.zeros(p.block_dim)
    for task in enumerate_tasks(p.tiling, p.block_dim):
        loads[task.core] += task.token_count * task.head_count
    return loads


def gather_of(p: PagedAttentionPlan) -> np.ndarray:
    return np.array([field(p, q, abi.BatchField.GATHER) for q in range(p.batch)])


@pytest.mark.parametrize(("lens", "kw"), [
    (RAGGED_64, {}),
    (RAGGED_64, {"strategy": "bn"}),
    (np.random.default_rng(7).integers(1, 300, 32), {"core_count": 24, "strategy": "bn"}),  # a tail pass
    (np.array([700, 33, 1200, 16, 513, 90, 300, 2000]), {"core_count": 4, "strategy": "split_kv"}),
    (np.array([5000, 0, 2100, 7, 64]), {"num_heads": 64, "num_kv_heads": 4, "core_count": 7}),
])
def test_balancer_work_is_what_the_task_loop_puts_on_each_core(lens: np.ndarray, kw: dict[str, object],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(balance, "TASK_OVERHEAD", 0)
    monkeypatch.setattr(balance, "PARTIAL_OVERHEAD", 0)
    p = plan(lens, **kw)
    shape = {"num_heads": p.num_heads, "num_kv_heads": p.num_kv_heads, "block_size": p.block_size}
    for gather in (gather_of(p), np.argsort(lens, kind="stable"), np.arange(lens.size)[::-1]):
        np.testing.assert_allclose(balance.core_work(p.split, lens, gather, **shape),
                                   core_loads(_with_gather(p, gather)))
    order, work = balance.balanced_gather(p.split, lens, **shape)
    np.testing.assert_allclose(work, balance.core_work(p.split, lens, order, **shape))


def _with_gather(p: PagedAttentionPlan, gather: np.ndarray) -> PagedAttentionPlan:
    tiling = p.tiling.copy()
    for position, slot in enumerate(gather):
        tiling[abi.batch_word(position, abi.BatchField.GATHER)] = slot
    return PagedAttentionPlan(**{**p.__dict__, "tiling": tiling})


def test_a_ragged_batch_gets_a_split_kv_grid_and_balanced_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """64 ragged sequences: the longest alone outweighs a core's share, so KV ranges of whole-group tasks
    replace whole-sequence tasks, and the most loaded core does far less than in ATB's plan."""
    assert LOG_RAGGED_64.max() > LOG_RAGGED_64.sum() / 24
    balanced, before = plan(LOG_RAGGED_64), unbalanced(LOG_RAGGED_64, monkeypatch)
    assert before.strategy == "bn" and balanced.strategy == "split_kv"
    assert balanced.split.former_head == balance.widest_whole_groups(32, 8) == 32
    assert coverage_problems(balanced) == [] and gather_problems(balanced) == []
    new, old = core_loads(balanced), core_loads(before)
    assert new.sum() == pytest.approx(old.sum())
    assert new.max() < 0.6 * old.max(), (new.max(), old.max())
    assert new.max() < 1.2 * new.mean(), (new.max(), new.mean())


@pytest.mark.parametrize(("kw", "gain"), [
    ({}, 0.75), ({"strategy": "bn"}, 0.75), ({"strategy": "split_kv"}, 0.9),
    # 8 head chunks x 2 splits per position: positions start on every 8th core only, so order alone moves
    # little; what it must not do is load a core more
    ({"batch_invariant": True}, 1.0),
])
def test_a_pinned_grid_keeps_its_grid_and_gets_the_balanced_order(kw: dict[str, object], gain: float,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    balanced, before = plan(RAGGED_64, **kw), unbalanced(RAGGED_64, monkeypatch, **kw)
    assert balanced.split == before.split
    assert coverage_problems(balanced) == [] and gather_problems(balanced) == []
    assert not np.array_equal(gather_of(balanced), gather_of(before))
    assert core_loads(balanced).max() <= gain * core_loads(before).max(), (core_loads(balanced).max(),
                                                                            core_loads(before).max())


@pytest.mark.parametrize("lens", [np.full(64, 2048), np.arange(2000, 2024), np.array([0, 0, 0])])
def test_uniform_or_near_uniform_batches_keep_the_plan(lens: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> None:
    """Equal lengths skip the balancer; a plan whose most loaded core is within the gain threshold of the mean
    (24 sequences of 2000-2023 tokens, one round) keeps ATB's plan."""
    a, b = plan(lens), unbalanced(lens, monkeypatch)
    assert a.split == b.split
    np.testing.assert_array_equal(a.tiling, b.tiling)


@pytest.mark.parametrize("seed", range(6))
def test_the_plan_never_loads_a_core_more_than_atbs_plan(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """By the balancer's own measure the plan it returns never does worse than the split rules' grid in ATB's
    ascending order (its placement alone can: it is a heuristic, and the planner keeps it only where it wins)."""
    rng = np.random.default_rng(seed)
    for _ in range(15):
        group = int(rng.choice([1, 2, 4, 8]))
        kv_heads = int(rng.choice([1, 2, 8]))
        lens = rng.integers(0, 6000, int(rng.integers(2, 90)))
        kw = {"num_heads": group * kv_heads, "num_kv_heads": kv_heads, "core_count": int(rng.choice([7, 20, 24])),
              "strategy": str(rng.choice(["auto", "bn", "split_kv"]))}
        new, old = plan(lens, **kw), unbalanced(lens, monkeypatch, **kw)
        shape = {"num_heads": new.num_heads, "num_kv_heads": new.num_kv_heads, "block_size": new.block_size}
        pages = -(-lens // 128) * 128  # the balancer counts whole pages
        assert (balance.core_work(new.split, pages, gather_of(new), **shape).max()
                <= balance.core_work(old.split, pages, gather_of(old), **shape).max())


def test_batches_over_the_limit_keep_atbs_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    lens = np.concatenate([[4000] * 8, np.full(balance.MAX_BALANCED_BATCH - 7, 16)])
    np.testing.assert_array_equal(plan(lens).tiling, unbalanced(lens, monkeypatch).tiling)
    fewer = lens[1:]  # at the limit the balancer runs, and changes this plan
    assert not np.array_equal(plan(fewer).tiling, unbalanced(fewer, monkeypatch).tiling)


def test_a_one_split_sequence_pays_no_partial() -> None:
    """In a split-KV grid only a sequence of two or more ranges writes partials for the combine."""
    grid = one_pass_grid(3, 8, 2, 8, 512, 4, 4)
    work = balance._Passes(grid, np.array([2000, 300, 0]), 8, 128).former
    per_task = 8 * balance.TASK_OVERHEAD  # eight query heads
    assert work[1].sum() == 8 * 300 + per_task
    assert work[0].sum() == 8 * 2000 + 4 * (per_task + 8 * balance.PARTIAL_OVERHEAD)
    assert work[2].sum() == 0


def test_a_decode_step_inside_the_pages_reuses_the_decision() -> None:
    """Lengths that grow inside their pages give the same grid and order from the cache, and an order that
    is still a valid plan: every token of the new lengths covered once."""
    first = plan(LOG_RAGGED_64)
    assert first.strategy == "split_kv"
    inside = LOG_RAGGED_64 + (-LOG_RAGGED_64 % 128 > 0)  # one more token where the last page has room
    hits = balance._decide.cache_info().hits
    again = plan(inside)
    assert balance._decide.cache_info().hits == hits + 1
    assert again.split == first.split and np.array_equal(gather_of(again), gather_of(first))
    assert coverage_problems(again) == [] and gather_problems(again) == []
    crossing = LOG_RAGGED_64 + 128  # every sequence one page longer: decided anew
    plan(crossing)
    assert balance._decide.cache_info().hits == hits + 1


def require_plan_library() -> None:
    """The compiled helper is built (else skip, or fail under ``PA_KIT_REQUIRE_SIM=1``) and in use, so the
    comparisons below compare C with numpy, not numpy with itself."""
    from built_library import library_or_skip

    from tiling import native

    library_or_skip(native.PLAN_LIBRARY)
    if os.environ.get(native.PYTHON_PLANNER_ENV) == "1":
        pytest.skip(f"{native.PYTHON_PLANNER_ENV}=1 plans with numpy only")
    assert native.available(), "libpa_plan.so is built but the planner does not load it"


def test_compiled_placement_matches_the_numpy_reference() -> None:
    """``tiling/csrc/pa_balance.c`` gives the numpy placement's gather and loads bit for bit, on random ragged
    batches and grids (BN with a tail pass, split-KV, several core counts); it is the planner's default when
    built, so a difference would change plans."""
    from tiling import native
    from tiling.splits import split_cores

    require_plan_library()
    rng = np.random.default_rng(11)
    grids = 0
    for _ in range(120):
        batch = int(rng.integers(2, 200))
        lens = np.exp(rng.uniform(np.log(16), np.log(8192), batch)).astype(np.int64)
        heads, kv = (32, 8) if rng.random() < 0.6 else (16, 16)
        cores = int(rng.choice([8, 20, 24]))
        for strategy in ("bn", "split_kv"):
            split = split_cores(batch, heads, kv, int(lens.max()), 128, 128, cores, strategy)  # type: ignore[arg-type]
            passes = balance._Passes(split, lens, heads, 128)
            order = np.argsort(-lens, kind="stable")
            work = np.where((np.arange(batch) < split.tail_batch)[:, None], passes.tail[order], passes.former[order])
            single = (work[:, 1:] == 0).all(axis=1)
            fast = native.balanced_gather(split.block_dim, split.tail_batch, passes.is_tail, passes.base, order,
                                          work, single, balance.TIE_SCALE)
            assert fast is not None
            slow = balance._balanced_gather_numpy(passes, order, work, single)
            assert np.array_equal(fast[0], slow[0]), (batch, cores, strategy)
            assert np.array_equal(fast[1], slow[1]), (batch, cores, strategy)
            grids += 1
    assert grids == 240


def test_compiled_decision_matches_the_numpy_reference() -> None:
    """``pa_balance_decide`` makes ``_decide_numpy``'s choice (keep the order, balanced order, or the split-KV
    candidate grid) with the same gather map, on random ragged batches of every strategy, group size, page size
    and core count, pinned grids included, a quarter of them MLA batches under MLA's rule; and every answer occurs,
    so the comparison covers each branch."""
    from tiling import abi
    from tiling.mla_grid import mla_grid_rule, split_mla
    from tiling.splits import split_cores

    require_plan_library()
    rng = np.random.default_rng(23)
    answers: dict[str, int] = {"keep": 0, "order": 0, "grid": 0}
    for _ in range(400):
        batch = int(rng.integers(2, 160))
        high = float(rng.choice([300, 4096, 20000]))
        lens = np.exp(rng.uniform(np.log(16), np.log(high), batch)).astype(np.int64)
        lens[rng.random(batch) < 0.1] = 0
        kv = int(rng.choice([1, 2, 4, 8]))
        heads = kv * int(rng.choice([1, 3, 4, 8, 16]))
        block_size, head_dim = int(rng.choice([16, 128])), int(rng.choice([64, 128]))
        cores = int(rng.choice([7, 20, 24]))
        strategy = str(rng.choice(["auto", "bn", "split_kv"]))
        if lens.min() == lens.max():
            continue
        pages = -(-lens // block_size)
        if rng.random() < 0.25:  # an MLA batch: one latent head, tasks of every head, MLA's overheads
            kv, head_dim, q_len = 1, abi.MLA_LATENT_DIM, int(rng.choice([1, 2]))
            rule = mla_grid_rule(heads, q_len, int(lens.max()), block_size)
            split = split_mla(batch, heads, int(lens.max()), block_size, cores, strategy, q_len)  # type: ignore[arg-type]
        else:
            rule = balance.gqa_rule(heads, kv, head_dim)
            split = split_cores(batch, heads, kv, int(lens.max()), block_size, head_dim, cores, strategy)  # type: ignore[arg-type]
        kw = {"num_heads": heads, "num_kv_heads": kv, "block_size": block_size, "head_dim": head_dim,
              "core_count": cores, "grid_fixed": strategy != "auto", "rule": rule}
        balance._decide.cache_clear()
        fast = balance._decide(split, pages.tobytes(), **kw)
        slow = balance._decide_numpy(split, pages * block_size, **kw)
        assert fast == slow, (batch, heads, kv, block_size, cores, strategy)
        answers["keep" if slow[1] is None else "order" if slow[0] == split else "grid"] += 1
    assert min(answers.values()) >= 10, answers
