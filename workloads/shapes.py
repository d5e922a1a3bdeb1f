"""Benchmark shapes: the named sets (`default`, `pr`, `long`, `ragged`, `features`, `mla`) and the single-shape flags.

A shape is pure description (no tensors): batch, heads, head_dim, page size, dtype, the context length of
every sequence, and the decode features it asks for (query tokens per sequence, sliding window, sinks, lse).
Its ``shape_id`` is stable across runs and machines, because the regression gate (``benchmark/compare.py``)
matches results by it; a shape without features keeps the id it always had.

An absorbed-MLA shape (``rope_dim`` > 0: DeepSeek-V3's decode) has one latent KV head of ``head_dim`` = 512 that
is read as both K and V, a rope part of ``rope_dim`` = 64 beside it, and ``num_heads`` query heads; its id says
``d512r64``.

Feature semantics are pa-kit's (``accuracy/reference.py``): ``context_lens`` counts the query tokens, token
``s`` of a sequence sits at ``p = context - q_len + s`` and attends causally to keys ``0..p``; ``window_left
= W >= 0`` keeps keys ``max(0, p - W)..p``.
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
#: The ragged set's second shape: an engine's decode batch, 64 sequences of 16..4K tokens (benchmark/engine_cost.py's).
ENGINE_RAGGED_BATCH, ENGINE_RAGGED_MAX_TOKENS = 64, 4096

#: Query tokens per sequence pa-kit takes (1 = plain decode; more = speculative decoding / MTP verification).
MAX_Q_LEN = 16
#: gpt-oss-20b's attention: 64 query and 8 KV heads of 64, bf16, a 128-token sliding window on every other layer
#: (transformers' ``sliding_window=128`` keeps the last 128 keys: window_left 127) and one sink per query head.
GPT_OSS_HEADS, GPT_OSS_KV_HEADS, GPT_OSS_HEAD_DIM, GPT_OSS_DTYPE = 64, 8, 64, "bf16"
GPT_OSS_SLIDING_WINDOW = 128

#: DeepSeek-V3's attention (absorbed MLA): 128 query heads, kv_lora_rank 512 (the latent, read as K and V),
#: qk_rope_head_dim 64, bf16.  Tensor parallelism splits the heads: TP 1, 4 and 8 give a rank 128, 32 and 16.
DEEPSEEK_V3_HEADS, MLA_LATENT_DIM, MLA_ROPE_DIM, DEEPSEEK_V3_DTYPE = 128, 512, 64, "bf16"
DEEPSEEK_V3_TP_SIZES = (1, 4, 8)
#: The ``mla`` set: batches at one context, and one MTP verify step (q_len 2) at TP 1.
MLA_BATCHES = (1, 8, 32, 64, 128)
MLA_CONTEXT = 4096
MLA_MTP_BATCH, MLA_MTP_Q_LEN = 32, 2

SHAPE_SETS = ("default", "pr", "long", "ragged", "features", "mla")


def window_left_of(sliding_window: int | None) -> int:
    """pa-kit's ``window_left`` for a model config's ``sliding_window`` (tokens kept, the current one included,
    as transformers and vLLM count it): ``sliding_window - 1``; ``None`` (no window) is -1."""
    if sliding_window is None:
        return -1
    if sliding_window < 1:
        raise ValueError(f"sliding_window must be >= 1 or None, got {sliding_window}")
    return sliding_window - 1


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
    #: query tokens per sequence (counted in ``context_lens``)
    q_len: int = 1
    #: keys ``p - window_left .. p`` of a token at ``p`` (-1: all keys up to ``p``)
    window_left: int = -1
    #: one sink logit per query head in the softmax denominator (gpt-oss)
    sinks: bool = False
    #: the launch also returns each row's log-sum-exp (natural log, sink included)
    lse: bool = False
    #: absorbed MLA: the rope part's width beside the ``head_dim``-wide latent (0: GQA/MQA/MHA)
    rope_dim: int = 0

    @property
    def is_mla(self) -> bool:
        return self.rope_dim > 0

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

    @property
    def features(self) -> tuple[str, ...]:
        """What this shape needs beyond one-token GQA decode, by name: ``mla`` (absorbed MLA's latent + rope
        inputs), ``multi-token``, ``window``, ``sinks``, ``lse`` (``benchmark/applicability.py`` says who
        computes which)."""
        names = ["mla"] if self.is_mla else []
        if self.q_len > 1:
            names.append("multi-token")
        if self.window_left >= 0:
            names.append("window")
        if self.sinks:
            names.append("sinks")
        if self.lse:
            names.append("lse")
        return tuple(names)

    @property
    def features_label(self) -> str:
        """e.g. ``q2 w127 sinks lse`` or ``mla q2``; empty for plain GQA decode."""
        label = features_suffix(self.q_len, self.window_left, self.sinks, self.lse).replace("_", " ").strip()
        return f"mla {label}".strip() if self.is_mla else label


def tokens_label(tokens: int) -> str:
    """2048 -> "2k", 131072 -> "128k", 300 -> "300"."""
    return f"{tokens // 1024}k" if tokens % 1024 == 0 else str(tokens)


def features_suffix(q_len: int = 1, window_left: int = -1, sinks: bool = False, lse: bool = False) -> str:
    """``_q2_w127_sinks_lse``: the features part of a shape id (empty for plain decode)."""
    parts = [f"q{q_len}"] if q_len > 1 else []
    parts += [f"w{window_left}"] if window_left >= 0 else []
    parts += ["sinks"] if sinks else []
    parts += ["lse"] if lse else []
    return "".join(f"_{p}" for p in parts)


def shape_id_for(
    *, batch: int, num_heads: int, num_kv_heads: int, head_dim: int, block_size: int, dtype: str, context: str,
    features: str = "", rope_dim: int = 0,
) -> str:
    """Stable id, e.g. ``b64_h32kv8_d128_ctx2k_bs128_fp16`` (+ :func:`features_suffix`); MLA's head part reads
    ``d512r64`` (latent and rope widths)."""
    dims = f"d{head_dim}r{rope_dim}" if rope_dim else f"d{head_dim}"
    return f"b{batch}_h{num_heads}kv{num_kv_heads}_{dims}_ctx{context}_bs{block_size}_{dtype}{features}"


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
    q_len: int = 1,
    window_left: int = -1,
    sinks: bool = False,
    lse: bool = False,
    rope_dim: int = 0,
) -> BenchShape:
    """Every sequence attends to ``context`` tokens (its ``q_len`` query tokens included)."""
    validate_arguments(batch=batch, context=context, num_heads=num_heads, num_kv_heads=num_kv_heads,
                       head_dim=head_dim, block_size=block_size, dtype=dtype, q_len=q_len, window_left=window_left,
                       sinks=sinks, rope_dim=rope_dim)
    sid = shape_id_for(batch=batch, num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
                       block_size=block_size, dtype=dtype, context=tokens_label(context),
                       features=features_suffix(q_len, window_left, sinks, lse), rope_dim=rope_dim)
    return BenchShape(sid, num_heads, num_kv_heads, head_dim, block_size, dtype, (context,) * batch, seed,
                      q_len=q_len, window_left=window_left, sinks=sinks, lse=lse, rope_dim=rope_dim)


def mla_shape(batch: int, context: int, *, num_heads: int = DEEPSEEK_V3_HEADS, q_len: int = 1, lse: bool = False,
              block_size: int = BLOCK_SIZE, dtype: str = DEEPSEEK_V3_DTYPE, seed: int = DEFAULT_SEED) -> BenchShape:
    """An absorbed-MLA decode layer of DeepSeek-V3 on one rank: ``num_heads`` query heads (128 / TP size), one
    512-wide latent KV head and its 64-wide rope part, bf16, pages of 128."""
    return uniform_shape(batch, context, num_heads=num_heads, num_kv_heads=1, head_dim=MLA_LATENT_DIM,
                         block_size=block_size, dtype=dtype, seed=seed, q_len=q_len, lse=lse, rope_dim=MLA_ROPE_DIM)


def gpt_oss_shape(batch: int, context: int, *, q_len: int = 1, lse: bool = False,
                  seed: int = DEFAULT_SEED) -> BenchShape:
    """A gpt-oss-20b sliding-window layer (64/8 heads of 64, bf16, window_left 127, sinks), pages of 128."""
    return uniform_shape(batch, context, num_heads=GPT_OSS_HEADS, num_kv_heads=GPT_OSS_KV_HEADS,
                         head_dim=GPT_OSS_HEAD_DIM, dtype=GPT_OSS_DTYPE, seed=seed, q_len=q_len,
                         window_left=window_left_of(GPT_OSS_SLIDING_WINDOW), sinks=True, lse=lse)


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
    """The published shapes: the table of hw-native-sys/simpler PRs #655/#899 (fp16, D 128, pages of 128), then
    the shape of hw-native-sys/pypto-lib issue #622 (b16 h40/kv8 ctx 4K bf16; its page size is not stated: 128),
    measured there for pypto's kernel and the open CCE kernel (``timing/published.json``)."""
    shapes = [uniform_shape(1, ctx, num_heads=16, seed=seed) for ctx in (2048, 4096)]
    shapes += [uniform_shape(1, ctx, seed=seed) for ctx in (2048, 4096, 8192)]
    shapes += [uniform_shape(1, 2048, num_heads=h, seed=seed) for h in (40, 64)]
    shapes.append(uniform_shape(1, 2048, num_kv_heads=32, seed=seed))
    shapes += [uniform_shape(b, 2048, seed=seed) for b in (4, 8, 16, 32, 64)]
    shapes.append(uniform_shape(16, 4096, num_heads=40, dtype="bf16", seed=seed))
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


def ragged_shapes(seed: int = DEFAULT_SEED) -> list[BenchShape]:
    """Ragged batches: 32 sequences of 16..16K tokens, and an engine's decode batch of 64 of 16..4K in fp16 and bf16
    (bf16 is where torch's CPU formulations are fastest)."""
    engine = [ragged_shape(ENGINE_RAGGED_BATCH, high=ENGINE_RAGGED_MAX_TOKENS, dtype=dtype, seed=seed)
              for dtype in ("fp16", "bf16")]
    return [ragged_shape(seed=seed), *engine]


def feature_shapes(seed: int = DEFAULT_SEED) -> list[BenchShape]:
    """The decode features: speculative-decoding steps (2, 4 and 8 query tokens per sequence) on the default family
    at batch 64 and 2K tokens, and gpt-oss-20b's sliding-window layer with sinks at batch 64 at 8K and 32K tokens,
    and verifying one draft token with lse returned (a window of 128 keys moves little per sequence: the batch
    makes it a bandwidth case; the cases hold only the windows' pages, as an engine does)."""
    return [
        *(uniform_shape(64, 2048, q_len=q_len, seed=seed) for q_len in (2, 4, 8)),
        gpt_oss_shape(64, 8192, seed=seed),
        gpt_oss_shape(64, 32768, seed=seed),
        gpt_oss_shape(64, 4096, q_len=2, lse=True, seed=seed),
    ]


def mla_shapes(seed: int = DEFAULT_SEED) -> list[BenchShape]:
    """DeepSeek-V3's absorbed-MLA decode per rank at TP 1, 4 and 8 (128, 32, 16 heads) x batch 1..128 at 4K
    tokens, then one MTP verify step (2 query tokens) at TP 1.  The head count is what moves MLA along the
    roofline: every head reuses the same latent, so FLOPs per byte grow with heads x query tokens (a rank of 128
    heads sits near A2's ridge point, 16 heads well below it; ``benchmark/roofline.py``)."""
    shapes = [mla_shape(batch, MLA_CONTEXT, num_heads=DEEPSEEK_V3_HEADS // tp, seed=seed)
              for tp in DEEPSEEK_V3_TP_SIZES for batch in MLA_BATCHES]
    shapes.append(mla_shape(MLA_MTP_BATCH, MLA_CONTEXT, q_len=MLA_MTP_Q_LEN, seed=seed))
    return shapes


def shape_set(name: str, seed: int = DEFAULT_SEED) -> list[BenchShape]:
    """The named set with inputs drawn from ``seed``; ``ValueError`` names the valid sets."""
    builders = {"default": default_shapes, "pr": pr_shapes, "long": long_shapes,
                "ragged": ragged_shapes, "features": feature_shapes, "mla": mla_shapes}
    if name not in builders:
        raise ValueError(f"--shapes must be one of {', '.join(SHAPE_SETS)}, got {name!r}")
    return builders[name](seed)


def validate_arguments(
    *, batch: int, context: int, num_heads: int, num_kv_heads: int, head_dim: int, block_size: int, dtype: str,
    q_len: int = 1, window_left: int = -1, sinks: bool = False, rope_dim: int = 0,
) -> None:
    """Cheap checks of the single-shape flags, so a typo fails before any tensor is built.

    The kernel's full contract (supported head_dim, block sizes, ratios, MLA's head count) is the planner's to
    check; an MLA shape is checked here only for what the benchmark itself builds (one latent head of 512, a
    rope part of 64, no window or sinks: MLA decode has neither).
    """
    if rope_dim:
        if (rope_dim, head_dim, num_kv_heads) != (MLA_ROPE_DIM, MLA_LATENT_DIM, 1):
            raise ValueError(f"--mla is one latent KV head of {MLA_LATENT_DIM} with a rope part of {MLA_ROPE_DIM}, "
                             f"got kv-heads {num_kv_heads}, head-dim {head_dim}, rope {rope_dim}")
        if window_left >= 0 or sinks:
            raise ValueError("--mla takes no --window-left or --sinks (MLA decode has neither)")
    positive = {"batch": batch, "ctx": context, "heads": num_heads, "kv-heads": num_kv_heads,
                "head-dim": head_dim, "block-size": block_size}
    for flag, value in positive.items():
        if value < 1:
            raise ValueError(f"--{flag} must be >= 1, got {value}")
    if num_heads % num_kv_heads:
        raise ValueError(f"--heads must be a multiple of --kv-heads, got {num_heads} and {num_kv_heads}")
    if dtype not in DTYPES:
        raise ValueError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if not 1 <= q_len <= MAX_Q_LEN:
        raise ValueError(f"--q-len must be in 1..{MAX_Q_LEN}, got {q_len}")
    if q_len > context:
        raise ValueError(f"--ctx counts the query tokens: it must be >= --q-len {q_len}, got {context}")
    if window_left < -1:
        raise ValueError(f"--window-left must be >= 0, or -1 for no window, got {window_left}")
