"""Property tests of the planner: coverage, scratch isolation and in-bounds accesses for random shapes.

Everything is checked through ``tiling.enumerate_tasks``, which reads only the tiling words the way the
kernel does, so a wrong word (not just a wrong Python attribute) fails here.  A table of known splits pins
ATB's choices, and negative controls show the checks catch a corrupted plan.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tiling import PagedAttentionPlan, abi, enumerate_tasks, plan_paged_attention
from tiling.splits import combine_split_limit, round_up

RATIOS = (1, 2, 4, 5, 8, 16, 32, 64)
FP32 = 4
ELEM = 2  # fp16 / bf16


@dataclasses.dataclass(frozen=True)
class Shape:
    lens: tuple[int, ...]
    num_heads: int
    num_kv_heads: int
    head_dim: int
    block_size: int
    max_pages: int
    core_count: int
    strategy: str
    dtype: str


@st.composite
def shapes(draw: st.DrawFn, max_len: int = 3000) -> Shape:
    ratio = draw(st.sampled_from(RATIOS))
    num_kv_heads = draw(st.integers(1, max(1, min(8, 128 // ratio))))
    block_size = draw(st.sampled_from(abi.SUPPORTED_BLOCK_SIZES))
    batch = draw(st.integers(1, 40))
    special = st.sampled_from([0, 1, block_size - 1, block_size, block_size + 1])
    lens = tuple(draw(st.lists(st.one_of(special, st.integers(0, max_len)), min_size=batch, max_size=batch)))
    extra_pages = draw(st.integers(0, 3))
    return Shape(
        lens=lens, num_heads=ratio * num_kv_heads, num_kv_heads=num_kv_heads,
        head_dim=draw(st.sampled_from([16, 64, 96, 128, 192, 256])), block_size=block_size,
        max_pages=max(1, -(-max(lens) // block_size)) + extra_pages,
        core_count=draw(st.sampled_from([1, 2, 7, 20, 24, 30, 48])),
        strategy=draw(st.sampled_from(["auto", "bn", "split_kv"])), dtype=draw(st.sampled_from(["fp16", "bf16"])),
    )


def make_plan(shape: Shape) -> PagedAttentionPlan:
    return plan_paged_attention(
        shape.lens, num_heads=shape.num_heads, num_kv_heads=shape.num_kv_heads, head_dim=shape.head_dim,
        block_size=shape.block_size, max_pages=shape.max_pages, num_blocks=1000, scale=0.125,
        dtype=shape.dtype, core_count=shape.core_count, strategy=shape.strategy,  # type: ignore[arg-type]
    )


def word(plan: PagedAttentionPlan, w: abi.TilingWord) -> int:
    return int(plan.tiling[w])


def field(plan: PagedAttentionPlan, slot: int, f: abi.BatchField) -> int:
    return int(plan.tiling[abi.batch_word(slot, f)])


def pair(plan: PagedAttentionPlan, slot: int, hi: abi.BatchField, lo: abi.BatchField) -> int:
    return field(plan, slot, hi) << 32 | field(plan, slot, lo)


def coverage_problems(plan: PagedAttentionPlan) -> list[str]:
    """Every non-empty (sequence, head, token) exactly once, nothing for empty sequences."""
    lens = plan.context_lens
    counts = np.zeros((plan.batch, plan.num_heads, max(1, max(lens))), dtype=np.int16)
    for task in enumerate_tasks(plan.tiling, plan.block_dim):
        counts[task.slot, task.head_start:task.head_start + task.head_count,
               task.token_start:task.token_start + task.token_count] += 1
    problems = []
    for seq, length in enumerate(lens):
        covered = counts[seq, :, :length]
        if covered.size and not (covered == 1).all():
            bad = np.argwhere(covered != 1)[0]
            problems.append(f"seq {seq} head {bad[0]} token {bad[1]} covered {covered[tuple(bad)]} times")
        if (counts[seq, :, length:] != 0).any():
            problems.append(f"seq {seq} (length {length}) has tasks past its end")
    return problems


def access_problems(plan: PagedAttentionPlan) -> list[str]:
    """Each task's q/o/o_core/l/block-table accesses and per-core scratch stay inside their buffers."""
    f = abi.BatchField
    d, hq, kvcn = plan.head_dim, plan.num_heads, plan.kv_core_num
    q_elems = plan.batch * hq * d
    o_core_elems = plan.workspace.o_core_bytes // FP32
    l_elems = plan.workspace.l_bytes // FP32
    table_elems = plan.batch * plan.max_pages
    tile = word(plan, abi.TilingWord.BLOCKSIZE_CALC)
    # ABI v2: word 43 is the S/P stage per core (0: v1's fixed halves), word 42 the hand-off, the S/P row pitch
    handoff = word(plan, abi.TilingWord.HANDOFF_TOKENS) or abi.DEFAULT_HANDOFF_TOKENS
    s_half, p_half = abi.scratch_halves(plan.tiling)
    problems = []
    for task in enumerate_tasks(plan.tiling, plan.block_dim):
        where = f"core {task.core} seq {task.slot} heads {task.head_start}+{task.head_count} split {task.split}"
        if not 0 <= task.core < plan.block_dim:
            problems.append(f"{where}: core outside [0, block_dim={plan.block_dim})")
        last_head = task.head_start + task.head_count - 1
        q_end = pair(plan, task.slot, f.ADDR_Q_HI, f.ADDR_Q_LO) + last_head * d + d
        o_end = pair(plan, task.slot, f.ADDR_O_HI, f.ADDR_O_LO) + last_head * d + d
        if q_end > q_elems or o_end > q_elems:
            problems.append(f"{where}: q/o end {q_end}/{o_end} > {q_elems}")
        row = field(plan, task.slot, f.BATCH_IDX)
        first_page = task.token_start // plan.block_size
        last_page = (task.token_start + task.token_count - 1) // plan.block_size
        if row * plan.max_pages + last_page >= table_elems or last_page >= plan.max_pages or first_page < 0:
            problems.append(f"{where}: block-table pages {first_page}..{last_page} of row {row} out of range")
        if kvcn > 1:
            ofd = pair(plan, task.slot, f.ADDR_OFD_HI, f.ADDR_OFD_LO) * kvcn
            o_core_end = ofd + last_head * kvcn * d + task.split * d + d
            l_end = pair(plan, task.slot, f.ADDR_L_HI, f.ADDR_L_LO) + last_head * kvcn + task.split + 1
            if o_core_end > o_core_elems or l_end > l_elems:
                problems.append(f"{where}: o_core/l end {o_core_end}/{l_end} > {o_core_elems}/{l_elems}")
        tokens = round_up(min(tile, task.token_count), abi.TILE_ALIGN_TOKENS)
        if task.head_count * tokens > min(abi.S_HALF_ELEMS, s_half, p_half) or \
                task.head_count * round_up(d, 16) > abi.O_TMP_HALF_ELEMS:
            problems.append(f"{where}: a tile of {task.head_count} heads overflows a scratch half")
        if task.head_count * handoff > min(s_half, p_half):
            problems.append(f"{where}: {task.head_count} rows of a {handoff}-token hand-off overflow an S/P stage")
    ws = plan.workspace
    for name, allocated, needed in (
        ("s", ws.s_bytes, plan.block_dim * 2 * s_half * FP32),
        ("p", ws.p_bytes, plan.block_dim * 2 * p_half * ELEM),
        ("o_tmp", ws.o_tmp_bytes, plan.block_dim * abi.O_TMP_CORE_STRIDE_ELEMS * FP32),
    ):
        if needed > allocated:
            problems.append(f"{name}: block_dim x stride = {needed} B > allocated {allocated} B")
    return problems


def gather_problems(plan: PagedAttentionPlan) -> list[str]:
    gather = [field(plan, p, abi.BatchField.GATHER) for p in range(plan.batch)]
    return [] if sorted(gather) == list(range(plan.batch)) else [f"gather map {gather} is not a permutation"]


PLANNER_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PLANNER_SETTINGS
@given(shapes())
def test_every_token_of_every_head_is_covered_exactly_once(shape: Shape) -> None:
    assert coverage_problems(make_plan(shape)) == []


@PLANNER_SETTINGS
@given(shapes())
def test_accesses_stay_inside_their_buffers(shape: Shape) -> None:
    plan = make_plan(shape)
    assert access_problems(plan) == []
    assert gather_problems(plan) == []


@PLANNER_SETTINGS
@given(shapes(max_len=40000))
def test_split_count_within_combine_limit_and_sizes_by_formula(shape: Shape) -> None:
    plan = make_plan(shape)
    kvcn = word(plan, abi.TilingWord.KVCORENUM)
    assert kvcn == plan.kv_core_num
    assert kvcn <= combine_split_limit(plan.head_dim)
    assert kvcn * round_up(plan.head_dim, 8) <= abi.COMBINE_UB_FLOATS
    assert 1 <= plan.block_dim <= shape.core_count
    assert word(plan, abi.TilingWord.KVSPLIT) % plan.block_size == 0
    rows = plan.split_batch * plan.num_heads * kvcn if kvcn > 1 else 0
    assert plan.workspace.o_core_bytes == rows * plan.head_dim * FP32
    assert plan.workspace.l_bytes == rows * FP32
    key = abi.TilingKey(word(plan, abi.TilingWord.KEY))
    assert bool(key & abi.KEY_SPLIT_KV_BIT) == (kvcn > 1)
    assert bool(key & abi.KEY_BF16_BIT) == (shape.dtype == "bf16")


@pytest.mark.parametrize("strategy", ["auto", "bn", "split_kv"])
@pytest.mark.parametrize("batch", [1, 5, 64])
def test_all_empty_batch(strategy: str, batch: int) -> None:
    shape = Shape(lens=(0,) * batch, num_heads=8, num_kv_heads=2, head_dim=128, block_size=128, max_pages=2,
                  core_count=24, strategy=strategy, dtype="fp16")
    plan = make_plan(shape)
    assert plan.block_dim >= 1
    assert enumerate_tasks(plan.tiling, plan.block_dim) == []
    assert plan.workspace.o_core_bytes == plan.workspace.l_bytes == 0
    assert gather_problems(plan) == []


# (batch, Hq, Hkv, kv_len) -> expected (key, block_dim, strategy, former head split, KVSPLIT, kvCN); D 128, bs 128.
KNOWN_SPLITS = [
    # Departure 9, the small-batch grid: two KV heads per task (512-byte K rows at D 128), one round of tasks.
    # Taken over a two-round grid (8 heads x 16 ranges = 32 tasks) although its ranges are short ...
    ((1, 16, 8, 2048), (16, 24, "split_kv", 4, 384, 6)),
    # ... and wherever its ranges hold a whole hand-off (512 tokens) ...
    ((1, 32, 8, 8192), (16, 24, "split_kv", 8, 1408, 6)),
    ((1, 32, 8, 4096), (16, 24, "split_kv", 8, 768, 6)),
    # ... but not over a one-round grid when its ranges would be shorter than a hand-off (departure 8 stays).
    ((1, 32, 8, 2048), (16, 24, "split_kv", 4, 768, 3)),
    ((64, 32, 8, 2048), (0, None, "bn", None, None, 1)),
    ((256, 16, 1, 8192), (0, None, "bn", None, None, 1)),  # ATB's batch guard: no split-KV for a big batch
    ((32, 32, 8, 8192), (0, None, "bn", None, None, 1)),  # the upstream o_core overflow shape
    # Departure 8: ATB's BN grid would give 2 of a group's 4 heads per task (and 6 of 16); whole groups
    # with KV ranges read each K/V tile once.
    ((8, 16, 1, 1024), (16, 24, "split_kv", 16, 384, 3)),
]


@pytest.mark.parametrize(("dims", "atb_head_split"), [((1, 32, 8, 4096), 2), ((8, 16, 1, 1024), 6)])
def test_forced_bn_keeps_atb_head_split(dims: tuple[int, int, int, int], atb_head_split: int) -> None:
    batch, hq, hkv, kv = dims
    plan = make_plan(Shape(lens=(kv,) * batch, num_heads=hq, num_kv_heads=hkv, head_dim=128, block_size=128,
                           max_pages=kv // 128, core_count=24, strategy="bn", dtype="fp16"))
    assert plan.strategy == "bn"
    assert word(plan, abi.TilingWord.FORMER_HEAD) == atb_head_split


@pytest.mark.parametrize(("dims", "expected"), KNOWN_SPLITS, ids=lambda v: "x".join(map(str, v)) if v else "")
def test_known_splits(dims: tuple[int, int, int, int], expected: tuple) -> None:
    batch, hq, hkv, kv = dims
    plan = make_plan(Shape(lens=(kv,) * batch, num_heads=hq, num_kv_heads=hkv, head_dim=128, block_size=128,
                           max_pages=kv // 128, core_count=24, strategy="auto", dtype="fp16"))
    key, block_dim, strategy, head_split, kv_split, kvcn = expected
    assert int(plan.key) == key
    assert plan.strategy == strategy
    assert plan.kv_core_num == kvcn
    if block_dim is not None:
        assert plan.block_dim == block_dim
    if head_split is not None:
        assert word(plan, abi.TilingWord.FORMER_HEAD) == head_split
    if kv_split is not None:
        assert word(plan, abi.TilingWord.KVSPLIT) == kv_split


# ---- negative controls: the checks above catch corrupted plans ----------------------------------------
def _corrupt(plan: PagedAttentionPlan, index: int, value: int) -> PagedAttentionPlan:
    words = plan.tiling.copy()
    words[index] = value
    return dataclasses.replace(plan, tiling=words)


def _reference_plan(lens: tuple[int, ...] = (300, 0, 1000, 17), strategy: str = "split_kv") -> PagedAttentionPlan:
    return make_plan(Shape(lens=lens, num_heads=8, num_kv_heads=2, head_dim=128, block_size=64,
                           max_pages=16, core_count=24, strategy=strategy, dtype="fp16"))


def test_negative_control_duplicate_gather_is_caught() -> None:
    plan = _reference_plan()
    bad = _corrupt(plan, abi.batch_word(1, abi.BatchField.GATHER), field(plan, 0, abi.BatchField.GATHER))
    assert gather_problems(bad)
    assert coverage_problems(bad)


def test_negative_control_byte_offsets_are_caught() -> None:
    plan = _reference_plan()
    last = plan.batch - 1
    bad = _corrupt(plan, abi.batch_word(last, abi.BatchField.ADDR_Q_LO),
                   field(plan, last, abi.BatchField.ADDR_Q_LO) * ELEM)
    assert access_problems(bad)


def test_negative_control_undersized_o_core_is_caught() -> None:
    plan = _reference_plan()
    assert plan.kv_core_num > 1
    per_sequence = plan.num_heads * plan.kv_core_num * plan.head_dim * FP32  # the batch dimension dropped
    bad = dataclasses.replace(plan, workspace=dataclasses.replace(plan.workspace, o_core_bytes=per_sequence))
    assert access_problems(bad)


def test_negative_control_wrong_length_word_is_caught() -> None:
    plan = _reference_plan(strategy="bn")
    short = _corrupt(plan, abi.batch_word(2, abi.BatchField.KV_SEQLEN), plan.context_lens[2] - 1)
    assert any("seq 2" in problem for problem in coverage_problems(short))


def test_negative_control_overlapping_head_chunks_are_caught() -> None:
    plan = _reference_plan(strategy="bn")
    assert word(plan, abi.TilingWord.FORMER_HEAD) < plan.num_heads
    wider = _corrupt(plan, abi.TilingWord.NUMHEADS, plan.num_heads * 2)  # more chunks than heads exist
    assert access_problems(wider)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shapes())
def test_auto_keeps_kv_groups_whole(shape: Shape) -> None:
    """Departure 8: with strategy auto, no task holds part of a KV group when a whole one would fit."""
    plan = make_plan(dataclasses.replace(shape, strategy="auto"))
    group = shape.num_heads // shape.num_kv_heads
    whole = min(group, abi.HEAD_SPLIT_LIMIT)
    for task in enumerate_tasks(plan.tiling, plan.block_dim):
        ends_at_last_head = task.head_start + task.head_count == shape.num_heads
        assert task.head_count >= whole or ends_at_last_head, task


def test_group_check_catches_a_split_group() -> None:
    """Negative control: ATB's forced BN grid for b1 32q/8kv at 4K puts 2 of 4 group heads in a task."""
    plan = make_plan(Shape(lens=(4096,), num_heads=32, num_kv_heads=8, head_dim=128, block_size=128,
                           max_pages=32, core_count=24, strategy="bn", dtype="fp16"))
    assert any(t.head_count < 4 for t in enumerate_tasks(plan.tiling, plan.block_dim))


# ---- the hand-off size (ABI v2, words 42-43) -------------------------------------------------------------


def _plan_with_handoff(handoff: int | None, **options: object) -> PagedAttentionPlan:
    return plan_paged_attention([3000, 100, 0], num_heads=32, num_kv_heads=8, head_dim=128, block_size=128,
                                max_pages=24, num_blocks=64, scale=0.1, core_count=24, handoff_tokens=handoff,
                                **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("handoff", [None, 512, 1024, 4096])
def test_handoff_words_and_scratch_follow_the_plan(handoff: int | None) -> None:
    plan = _plan_with_handoff(handoff)
    tokens = handoff or abi.DEFAULT_HANDOFF_TOKENS
    heads = max(plan.split.former_head, plan.split.tail_head if plan.split.tail_batch else 0)
    assert plan.handoff_tokens == word(plan, abi.TilingWord.HANDOFF_TOKENS) == tokens
    assert word(plan, abi.TilingWord.SCORE_STAGE_ELEMS) == heads * tokens
    assert plan.workspace.s_bytes == plan.block_dim * 2 * heads * tokens * 4
    assert plan.workspace.p_bytes == plan.block_dim * 2 * heads * tokens * 2
    assert access_problems(plan) == []


def test_handoff_zero_plans_abi_v1_scratch() -> None:
    plan = _plan_with_handoff(0)
    assert word(plan, abi.TilingWord.HANDOFF_TOKENS) == word(plan, abi.TilingWord.SCORE_STAGE_ELEMS) == 0
    assert plan.handoff_tokens == abi.DEFAULT_HANDOFF_TOKENS
    assert plan.workspace.s_bytes == plan.block_dim * abi.S_CORE_STRIDE_ELEMS * 4
    assert plan.workspace.p_bytes == plan.block_dim * abi.P_CORE_STRIDE_ELEMS * 2


@pytest.mark.parametrize(("handoff", "error", "message"), [
    (100, ValueError, "multiple of 512"), (-512, ValueError, "multiple of 512"), (True, TypeError, "int or None"),
    (512.0, TypeError, "int or None"), (1 << 20, ValueError, "at most"),
])
def test_bad_handoff_is_refused(handoff: object, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        _plan_with_handoff(handoff)  # type: ignore[arg-type]


def test_batch_invariant_pins_the_handoff() -> None:
    assert _plan_with_handoff(None, batch_invariant=True).handoff_tokens == abi.DEFAULT_HANDOFF_TOKENS
    with pytest.raises(ValueError, match="pins the hand-off"):
        _plan_with_handoff(1024, batch_invariant=True)


def test_ragged_multi_token_plans_keep_task_rows_within_the_scratch() -> None:
    """The ragged-batch balancer may replace the grid (departure 10); its grid is cut to heads x q_len <= the task
    rows too (a plan breaking the contract's row limit was refused at launch: 30 of these 300 were)."""
    rng = np.random.default_rng(0)
    for _ in range(300):
        lens = rng.integers(8, 4000, int(rng.integers(2, 20)))
        plan = plan_paged_attention(lens, num_heads=64, num_kv_heads=2, head_dim=128, block_size=128, max_pages=40,
                                    num_blocks=10, scale=0.1, core_count=24, q_len=8)
        assert max(plan.split.former_head, plan.split.tail_head) * 8 <= abi.MAX_TASK_ROWS, plan.split
