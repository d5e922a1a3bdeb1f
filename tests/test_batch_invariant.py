"""Batch-invariant mode: a sequence's output is the same bits alone, in any batch, on any core count.

Each configuration launches a ragged batch (lengths on both sides of the pinned 2048-token split, one empty
sequence, shuffled pages over a larger cache), then every sequence alone, inside the reversed batch and with
other core counts, and compares bit patterns.  The batch is also checked against the float64 golden, and a
negative control shows the default planner is *not* invariant on the same inputs (so the comparison can
fail).  The simulation runs in a child process (pto-isa aborts the process on an on-chip overflow):
``python tests/test_batch_invariant.py sim`` is what the sim test runs.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from built_library import library_or_skip

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # the child process runs this file as a script
    sys.path.insert(0, str(ROOT))

from accuracy.harness import Inputs, golden, shuffled_block_table  # noqa: E402
from accuracy.reference import compare  # noqa: E402
from launcher import PagedAttentionRunner, paged_attention  # noqa: E402
from launcher.library import library_path  # noqa: E402
from tiling import PagedAttentionPlan, plan_paged_attention  # noqa: E402
from tiling.invariant import INVARIANT_SPLIT_TOKENS, invariant_tile, max_invariant_context  # noqa: E402

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
SIM_TIMEOUT_S = 600


@dataclass(frozen=True)
class Config:
    num_heads: int
    num_kv_heads: int
    head_dim: int
    block_size: int
    dtype: str
    lens: tuple[int, ...]
    seed: int


#: Lengths straddle one split (2048), include a single token, an empty sequence and several splits.
CONFIGS = (
    Config(8, 2, 128, 128, "bf16", (5000, 130, 2048, 2049, 0, 4113, 1), 1),
    Config(16, 1, 64, 16, "fp16", (3000, 17, 2100, 64), 2),
    Config(4, 4, 256, 512, "bf16", (4608, 511, 2560), 3),
)
CORE_COUNTS = (1, 7, 24)


def make_inputs(config: Config) -> Inputs:
    """N(0, 1) q/k/v; each sequence's pages a shuffled subset of a cache with spare pages; -1 past the end."""
    gen = torch.Generator().manual_seed(config.seed)
    pages = [-(-n // config.block_size) for n in config.lens]
    num_blocks = sum(pages) + 11
    table = shuffled_block_table(pages, num_blocks, gen, max(pages) + 2)
    dtype = DTYPES[config.dtype]
    cache = (num_blocks, config.block_size, config.num_kv_heads, config.head_dim)
    return Inputs(
        query=torch.randn(len(pages), config.num_heads, config.head_dim, generator=gen).to(dtype),
        key_cache=torch.randn(cache, generator=gen).to(dtype), value_cache=torch.randn(cache, generator=gen).to(dtype),
        block_table=table, lens=config.lens,
    )


def _attend(inputs: Inputs, rows: list[int], backend: str, **options: object) -> torch.Tensor:
    query = inputs.query[rows].contiguous()
    table = inputs.block_table[rows].contiguous()
    runner = PagedAttentionRunner(query, inputs.key_cache, inputs.value_cache, table,
                                  [inputs.lens[r] for r in rows], backend=backend, **options)  # type: ignore[arg-type]
    runner.out.fill_(float("nan"))
    for buffer in runner.workspace.values():
        buffer.fill_(float("nan"))
    return runner().clone()


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.view(torch.int16), b.view(torch.int16))


def invariance_failures(backend: str, configs: tuple[Config, ...] = CONFIGS) -> list[str]:
    """Every way a batch-invariant output differs from the batch's, plus accuracy failures (empty = pass)."""
    failures = []
    for config in configs:
        inputs = make_inputs(config)
        everyone = list(range(len(config.lens)))
        batch = _attend(inputs, everyone, backend, batch_invariant=True)
        check = compare(batch, golden(inputs, config.head_dim ** -0.5))
        if not check.passed:
            failures.append(f"{config}: not accurate: {check.summary()}")
        reversed_batch = _attend(inputs, everyone[::-1], backend, batch_invariant=True).flip(0)
        if not _same_bits(batch, reversed_batch):
            failures.append(f"{config}: reversed batch differs")
        for cores in CORE_COUNTS:
            other = _attend(inputs, everyone, backend, batch_invariant=True, core_count=cores)
            if not _same_bits(batch, other):
                failures.append(f"{config}: core_count {cores} differs")
        for seq in everyone:
            alone = _attend(inputs, [seq], backend, batch_invariant=True)
            if not _same_bits(alone, batch[seq:seq + 1]):
                failures.append(f"{config}: sequence {seq} (length {config.lens[seq]}) alone differs")
    return failures


def default_planner_differs(backend: str) -> bool:
    """Negative control: without the mode, some sequence alone differs from itself in the batch."""
    config = CONFIGS[0]
    inputs = make_inputs(config)
    everyone = list(range(len(config.lens)))
    batch = _attend(inputs, everyone, backend)
    return any(not _same_bits(_attend(inputs, [seq], backend), batch[seq:seq + 1]) for seq in everyone)


# ---- the planner's mode ---------------------------------------------------------------------------------


def _plan(lens: list[int], **options: object) -> PagedAttentionPlan:
    defaults: dict[str, object] = dict(num_heads=32, num_kv_heads=8, head_dim=128, block_size=128, max_pages=1100,
                                       num_blocks=5000, scale=0.1)
    return plan_paged_attention(lens, **{**defaults, **options})  # type: ignore[arg-type]


@pytest.mark.parametrize("lens", [[5000], [5000] * 3, [5000, 100, 9000], [100] * 40, [131072]])
@pytest.mark.parametrize("cores", [1, 20, 24])
def test_mode_pins_split_tile_and_heads_whatever_the_batch(lens: list[int], cores: int) -> None:
    plan = _plan(lens, core_count=cores, batch_invariant=True)
    assert plan.batch_invariant
    assert plan.kv_split_tokens == INVARIANT_SPLIT_TOKENS
    assert plan.tile_tokens == invariant_tile(128, 128).tile_tokens
    assert plan.split.former_head == 4 and plan.split.tail_batch == 0  # whole groups of 32/8
    assert plan.kv_core_num == -(-max(lens) // INVARIANT_SPLIT_TOKENS)
    assert plan.block_dim <= cores


def test_default_planner_would_split_these_lengths_otherwise() -> None:
    """The cases above include lengths where the default planner picks split-KV with another split length."""
    plan = _plan([5000], core_count=24)
    assert plan.strategy == "split_kv" and plan.kv_split_tokens != INVARIANT_SPLIT_TOKENS


def test_mode_rejects_forced_strategy_too_long_contexts_and_non_bools() -> None:
    with pytest.raises(ValueError, match="strategy"):
        _plan([100], batch_invariant=True, strategy="bn")
    limit = max_invariant_context(256)
    with pytest.raises(ValueError, match=f"up to {limit}"):
        _plan([limit + 1], batch_invariant=True, head_dim=256, max_pages=2000)
    with pytest.raises(TypeError, match="bool"):
        _plan([100], batch_invariant=1)
    query = torch.randn(1, 8, 64).half()
    cache = torch.randn(4, 16, 2, 64).half()
    with pytest.raises(ValueError, match="strategy"):
        PagedAttentionRunner(query, cache, cache, torch.zeros(1, 4, dtype=torch.int32), [10], batch_invariant=True,
                             strategy="split_kv")
    with pytest.raises(TypeError, match="bool"):
        paged_attention(query, cache, cache, torch.zeros(1, 4, dtype=torch.int32), [10],
                        batch_invariant="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize("block_size,head_dim", [(16, 64), (64, 128), (128, 128), (512, 64), (128, 256), (16, 256)])
def test_pinned_tile_obeys_the_tile_rule(block_size: int, head_dim: int) -> None:
    tile = invariant_tile(block_size, head_dim)
    assert INVARIANT_SPLIT_TOKENS % tile.tile_tokens == 0  # hand-off boundaries at absolute positions
    if tile.split_block:
        assert block_size % tile.tile_tokens == 0 and tile.tile_tokens % 16 == 0
    else:
        assert tile.tile_tokens % block_size == 0 and tile.tile_tokens * head_dim <= 16384


# ---- the kernels ----------------------------------------------------------------------------------------


def test_mock_outputs_are_batch_and_core_count_invariant() -> None:
    failures = invariance_failures("mock")
    assert not failures, "\n".join(failures)


def test_mock_default_planner_is_not_invariant() -> None:
    assert default_planner_differs("mock")


@pytest.fixture(scope="module")
def sim_built() -> None:
    library_or_skip(library_path("sim").name)


@pytest.mark.usefixtures("sim_built")
def test_sim_outputs_are_batch_and_core_count_invariant() -> None:
    result = subprocess.run([sys.executable, str(Path(__file__).resolve()), "sim"], cwd=ROOT, capture_output=True,
                            text=True, timeout=SIM_TIMEOUT_S, check=False)
    assert result.returncode == 0 and "sim: invariant" in result.stdout, result.stdout + result.stderr
    assert "sim: default planner differs" in result.stdout, result.stdout


if __name__ == "__main__":
    name = sys.argv[1]
    found = invariance_failures(name)
    for line in found:
        print(line)
    print(f"{name}: {'invariant' if not found else 'NOT invariant'}")
    if default_planner_differs(name):
        print(f"{name}: default planner differs")
    sys.exit(1 if found else 0)
