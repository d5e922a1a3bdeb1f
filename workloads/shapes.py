"""Benchmark shapes: the named sets (`default`, `pr`, `long`, `ragged`) and the single-shape flags.

A shape is pure description (no tensors): batch, heads, head_dim, page size, dtype and the context length of
every sequence.  Its ``shape_id`` is stable across runs and machines, because the regression gate
(``benchmark/compare.py``) matches results by it.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

#: Defaults of every set unless a shape says otherwise (the published table's shape family).
HEAD_DIM = 128
BLOCK_SIZE = 128
NUM_HEADS = 32
NUM_KV_HEADS = 8
DTYPES = ("fp16", "bf16")
#: Seed of every generated tensor and of the ragged lengths; fixed so that runs are comparable.
DEFAULT_SEED = 20240601
#: Ragged set: batch and the range the lengths are drawn from, log-uniformly.
RAGGED_BATCH = 32
RAGGED_MIN_TOKENS = 16
RAGGED_MAX_TOKENS = 16384

SHAPE_SETS = ("default", "pr", "long", "ragged")


@dataclass(frozen=True)
class BenchShape:
    """One benchmark case.  ``context_lens`` holds the tokens each sequence attends to."""

    shape_id: str
    num_heads: int
    num_kv_heads: int
    head_dim: int
    block_size: int
    dtype: str
    context_lens: tuple[int, ...]
    seed: int = DEFAULT_SEED

    @property
    def batch(self) -> int:
        return len(self.context_lens)

    @property
    def max_context(self) -> int:
        return max(self.context_lens)

    @property
    def total_context_tokens(self) -> int:
        return sum(self.context_lens)

    @property
    def uniform(self) -> bool:
        return len(set(self.context_lens)) == 1

    @property
    def group_size(self) -> int:
        """Query heads per KV head (1 = MHA, num_heads = MQA)."""
        return self.num_heads // self.num_kv_heads


def tokens_label(tokens: int) -> str:
    """2048 -> "2k", 131072 -> "128k", 300 -> "300"."""
    return f"{tokens // 1024}k" if tokens % 1024 == 0 else str(tokens)


def shape_id_for(
    *, batch: int, num_heads: int, num_kv_heads: int, head_dim: int, block_size: int, dtype: str, context: str
) -> str:
    """Stable id, e.g. ``b64_h32kv8_d128_ctx2k_bs128_fp16``."""
    return f"b{batch}_h{num_heads}kv{num_kv_heads}_d{head_dim}_ctx{context}_bs{block_size}_{dtype}"


def uniform_shape(
    batch: int,
    context: int,
    *,
    num_heads: int = NUM_HEADS,
    num_kv_heads: int = NUM_KV_HEADS,
    head_dim: int = HEAD_DIM,
    block_size: int = BLOCK_SIZE,
    dtype: str = "fp16",
    seed: int = DEFAULT_SEED,
) -> BenchShape:
    """Every sequence attends to ``context`` tokens."""
    validate_arguments(batch=batch, context=context, num_heads=num_heads, num_kv_heads=num_kv_heads,
                       head_dim=head_dim, block_size=block_size, dtype=dtype)
    sid = shape_id_for(batch=batch, num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
                       block_size=block_size, dtype=dtype, context=tokens_label(context))
    return BenchShape(sid, num_heads, num_kv_heads, head_dim, block_size, dtype, (context,) * batch, seed)


def log_uniform_lengths(batch: int, low: int, high: int, seed: int) -> tuple[int, ...]:
    """``batch`` lengths drawn log-uniformly from [low, high] with a private generator."""
    rng = random.Random(seed)
    return tuple(
        min(high, max(low, round(math.exp(rng.uniform(math.log(low), math.log(high)))))) for _ in range(batch)
    )


def ragged_shape(
    batch: int = RAGGED_BATCH,
    low: int = RAGGED_MIN_TOKENS,
    high: int = RAGGED_MAX_TOKENS,
    *,
    dtype: str = "fp16",
    seed: int = DEFAULT_SEED,
) -> BenchShape:
    """A batch of lengths drawn log-uniformly from [low, high]; the seed is part of the id."""
    lens = log_uniform_lengths(batch, low, high, seed)
    context = f"{tokens_label(low)}-{tokens_label(high)}log_s{seed}"
    sid = shape_id_for(batch=batch, num_heads=NUM_HEADS, num_kv_heads=NUM_KV_HEADS, head_dim=HEAD_DIM,
                       block_size=BLOCK_SIZE, dtype=dtype, context=context)
    return BenchShape(sid, NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, BLOCK_SIZE, dtype, lens, seed)


def pr_shapes(seed: int = DEFAULT_SEED) -> list[BenchShape]:
    """The published table (hw-native-sys/simpler PRs #655/#899): fp16, D 128, pages of 128."""
    shapes = [uniform_shape(1, ctx, num_heads=16, seed=seed) for ctx in (2048, 4096)]
    shapes += [uniform_shape(1, ctx, seed=seed) for ctx in (2048, 4096, 8192)]
    shapes += [uniform_shape(1, 2048, num_heads=h, seed=seed) for h in (40, 64)]
    shapes.append(uniform_shape(1, 2048, num_kv_heads=32, seed=seed))
    shapes += [uniform_shape(b, 2048, seed=seed) for b in (4, 8, 16, 32, 64)]
    return shapes


def long_shapes(seed: int = DEFAULT_SEED) -> list[BenchShape]:
    """Long contexts: batch 1, 4, 8 at 16K, 32K and 128K tokens."""
    return [uniform_shape(b, ctx, seed=seed) for b in (1, 4, 8) for ctx in (16384, 32768, 131072)]


def default_shapes(seed: int = DEFAULT_SEED) -> list[BenchShape]:
    """A short set that runs in about a minute on the mock: latency, bandwidth, both dtypes, MHA, ragged."""
    return [
        uniform_shape(1, 4096, seed=seed),
        uniform_shape(8, 4096, seed=seed),
        uniform_shape(8, 4096, dtype="bf16", seed=seed),
        uniform_shape(32, 2048, seed=seed),
        uniform_shape(4, 2048, num_kv_heads=32, seed=seed),
        ragged_shape(16, high=8192, seed=seed),
    ]


def shape_set(name: str, seed: int = DEFAULT_SEED) -> list[BenchShape]:
    """The named set with inputs drawn from ``seed``; ``ValueError`` names the valid sets."""
    builders = {"default": default_shapes, "pr": pr_shapes, "long": long_shapes,
                "ragged": lambda seed: [ragged_shape(seed=seed)]}
    if name not in builders:
        raise ValueError(f"--shapes must be one of {', '.join(SHAPE_SETS)}, got {name!r}")
    return builders[name](seed)


def validate_arguments(
    *, batch: int, context: int, num_heads: int, num_kv_heads: int, head_dim: int, block_size: int, dtype: str
) -> None:
    """Cheap checks of the single-shape flags, so a typo fails before any tensor is built.

    The kernel's full contract (supported head_dim, block sizes, ratios) is the planner's to check.
    """
    positive = {"batch": batch, "ctx": context, "heads": num_heads, "kv-heads": num_kv_heads,
                "head-dim": head_dim, "block-size": block_size}
    for flag, value in positive.items():
        if value < 1:
            raise ValueError(f"--{flag} must be >= 1, got {value}")
    if num_heads % num_kv_heads:
        raise ValueError(f"--heads must be a multiple of --kv-heads, got {num_heads} and {num_kv_heads}")
    if dtype not in DTYPES:
        raise ValueError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
