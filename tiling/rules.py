"""Every rule on a decode step's sizes and options, each written once.

The planner, the launcher's tensor checks (:mod:`launcher.validation`) and the runner all call these, so a bad
input gets the same exception type and the same message whichever door it came in by.  Failures are a
``TypeError`` (wrong kind of value) or a ``ValueError`` (wrong size or value) naming the argument, what was
expected and what was given.  Nothing here imports torch: the launcher turns tensors into numpy first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from tiling import abi
from tiling.splits import STRATEGIES

#: Element sizes of the input dtypes the kernels execute, by the planner's dtype names.
DTYPES: dict[str, int] = {"fp16": 2, "bf16": 2}
#: Largest hand-off a plan may ask for: 64K tokens, a whole context of any shape the benchmarks run.
MAX_HANDOFF_TOKENS = 65536
#: Cap on how many offending entries a message lists.
MAX_REPORTED = 5
#: Largest GM row pitch, in elements, the NPU kernel's loads into L1 may use on A2/A3: the ND -> Nz move
#: (copy_gm_to_cbuf_multi_nd2nz) takes it in its 16-bit ``srcDValue``, which pto-isa's TLOAD fills from an int
#: without a check, so a larger pitch would wrap to a smaller, legal one (kernel/npu/README.md, "Field limits").
NPU_MAX_L1_LOAD_PITCH_ELEMS = 65535
#: Backends that run our NPU kernel's A2/A3 code, to which its field limits apply (the mock has none of them).
NPU_KERNEL_BACKENDS = ("sim", "npu")


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def validate_mla_shape(*, num_heads: int, num_kv_heads: int, head_dim: int, rope_dim: int) -> None:
    """MLA's shape (ABI header, "MLA"): one latent head of ``abi.MLA_LATENT_DIM``, a rope part of
    ``abi.MLA_ROPE_DIM`` and 1..``abi.MLA_MAX_HEADS`` query heads, DeepSeek-V3's (and Kimi K2's) widths."""
    _require(rope_dim == abi.MLA_ROPE_DIM,
             f"MLA's rope width (query_rope's and kv_rope_cache's last dim) must be {abi.MLA_ROPE_DIM}, got {rope_dim}")
    _require(head_dim == abi.MLA_LATENT_DIM,
             f"MLA's latent width (query's and kv_cache's last dim, kv_lora_rank) must be {abi.MLA_LATENT_DIM}, "
             f"got {head_dim}")
    _require(num_kv_heads == 1,
             f"MLA has one latent KV head (kv_cache [num_blocks, block_size, 1, {abi.MLA_LATENT_DIM}]), got "
             f"{num_kv_heads}")
    _require(1 <= num_heads <= abi.MLA_MAX_HEADS,
             f"MLA's num_heads must be in [1, {abi.MLA_MAX_HEADS}], got {num_heads}")


#: ``mla_rescale`` names (docs/API.md, "MLA decode") and the tiling word value each plans.
MLA_RESCALES: dict[str, int] = {"plain": abi.MLA_RESCALE_PLAIN, "pow2": abi.MLA_RESCALE_POW2}


def validate_mla_rescale(mla_rescale: object, rope_dim: int) -> int:
    """``mla_rescale``: how the NPU kernel rescales an MLA task's output accumulator, 'plain' (the exact running
    max; the rows read, multiplied, written back) or 'pow2' (AMLA: the max on the grid of multiples of ln 2, the
    rescale an integer add to the fp32 exponent, exact while no accumulator element is 0 or below 2^-62).  Only
    MLA (``rope_dim`` > 0) has it; returns the value of tiling word MLA_RESCALE (0 without MLA)."""
    if not isinstance(mla_rescale, str):
        raise TypeError(f"mla_rescale must be one of {', '.join(map(repr, MLA_RESCALES))}, got {mla_rescale!r}")
    _require(mla_rescale in MLA_RESCALES,
             f"mla_rescale must be one of {', '.join(map(repr, MLA_RESCALES))}, got {mla_rescale!r}")
    _require(bool(rope_dim) or mla_rescale == "plain",
             f"mla_rescale={mla_rescale!r} applies to MLA launches (rope_dim > 0) only")
    return MLA_RESCALES[mla_rescale] if rope_dim else 0


def validate_rope_dim(rope_dim: object) -> int:
    """``rope_dim``: 0 (GQA/MQA/MHA) or ``abi.MLA_ROPE_DIM`` (an absorbed-MLA launch)."""
    if not isinstance(rope_dim, int | np.integer) or isinstance(rope_dim, bool):
        raise TypeError(f"rope_dim must be an int, got {type(rope_dim).__name__}")
    _require(int(rope_dim) in (0, abi.MLA_ROPE_DIM),
             f"rope_dim must be 0 (not MLA) or {abi.MLA_ROPE_DIM} (MLA's rope width), got {int(rope_dim)}")
    return int(rope_dim)


def validate_shape(
    *, batch: int, num_heads: int, num_kv_heads: int, head_dim: int, block_size: int, max_pages: int,
    num_blocks: int, core_count: int, rope_dim: int = 0,
) -> None:
    """Reject every shape the kernels do not support (``batch`` 0 is an empty step, allowed); ``rope_dim`` > 0
    is an MLA launch, whose head rules are :func:`validate_mla_shape`'s."""
    _require(0 <= batch <= abi.MAX_BATCH, f"batch must be in [0, {abi.MAX_BATCH}], got {batch}")
    if rope_dim:
        validate_mla_shape(num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim, rope_dim=rope_dim)
        _validate_pages(block_size=block_size, max_pages=max_pages, num_blocks=num_blocks, core_count=core_count)
        return
    _require(
        1 <= num_heads <= abi.MAX_NUM_HEADS, f"num_heads must be in [1, {abi.MAX_NUM_HEADS}], got {num_heads}"
    )
    _require(num_kv_heads >= 1, f"num_kv_heads must be >= 1, got {num_kv_heads}")
    _require(
        num_heads % num_kv_heads == 0,
        f"num_heads must be a multiple of num_kv_heads, got {num_heads} and {num_kv_heads}",
    )
    _require(
        num_heads // num_kv_heads <= abi.MAX_GROUP,
        f"num_heads / num_kv_heads must be <= {abi.MAX_GROUP}, got {num_heads} / {num_kv_heads}",
    )
    _require(
        head_dim % abi.HEAD_DIM_ALIGN == 0 and abi.HEAD_DIM_ALIGN <= head_dim <= abi.MAX_HEAD_DIM,
        f"head_dim must be a multiple of {abi.HEAD_DIM_ALIGN} in [{abi.HEAD_DIM_ALIGN}, {abi.MAX_HEAD_DIM}], "
        f"got {head_dim}",
    )
    _validate_pages(block_size=block_size, max_pages=max_pages, num_blocks=num_blocks, core_count=core_count)


def _validate_pages(*, block_size: int, max_pages: int, num_blocks: int, core_count: int) -> None:
    _require(
        block_size in abi.SUPPORTED_BLOCK_SIZES,
        f"block_size must be one of {abi.SUPPORTED_BLOCK_SIZES}, got {block_size}",
    )
    _require(max_pages >= 1, f"block_table must have at least one column, got {max_pages}")
    _require(num_blocks >= 1, f"the KV cache must hold at least one page, got num_blocks={num_blocks}")
    validate_core_count(core_count)


def lengths_array(context_lens: object) -> np.ndarray:
    """A sequence of ints or an integer numpy array, as a 1-D int64 array (tensors are converted by the caller)."""
    if isinstance(context_lens, np.ndarray):
        if context_lens.dtype.kind not in "iu":
            raise TypeError(f"context_lens must hold integers, got dtype {context_lens.dtype}")
        lens = context_lens.astype(np.int64)
    elif isinstance(context_lens, Sequence) and not isinstance(context_lens, (str, bytes)):
        try:  # the fast path: a list of Python ints becomes int64 in one call, anything else raises or widens
            lens = np.array(context_lens, dtype=np.int64) if all(type(n) is int for n in context_lens) else None
        except OverflowError:
            lens = None
        if lens is None:
            for index, item in enumerate(context_lens):
                if isinstance(item, bool) or not isinstance(item, (int, np.integer)):
                    raise TypeError(f"context_lens must hold ints, got {type(item).__name__} {item!r} at index "
                                    f"{index}")
            huge = next((n for n in context_lens if not -(1 << 63) <= int(n) < (1 << 63)), None)
            if huge is not None:
                raise ValueError(f"context_lens must fit in 64 bits, got {huge}")
            lens = np.fromiter((int(item) for item in context_lens), dtype=np.int64, count=len(context_lens))
    else:
        raise TypeError(f"context_lens must be a list of ints or an integer numpy array (the launcher also takes an "
                        f"int32 torch.Tensor; the planner does not), got {type(context_lens).__name__}")
    _require(lens.ndim == 1, f"context_lens must be 1-D [batch], got shape {tuple(lens.shape)}")
    return lens


def validate_lengths(lens: np.ndarray, *, block_size: int, max_pages: int, batch: int | None = None) -> None:
    """One length per sequence, each in ``[0, max_pages * block_size]`` (what the block table can address)."""
    if batch is not None and lens.size != batch:
        raise ValueError(f"context_lens must have one entry per sequence ({batch}), got {lens.size}")
    negative = np.flatnonzero(lens < 0)
    if negative.size:
        index = int(negative[0])
        raise ValueError(f"context_lens must be >= 0, got {int(lens[index])} at index {index}")
    limit = max_pages * block_size
    too_long = np.flatnonzero(lens > limit)
    if too_long.size:
        index = int(too_long[0])
        raise ValueError(
            f"context length at index {index} must be <= max_pages x block_size = {max_pages} x "
            f"{block_size} = {limit} (what the block table can address), got {int(lens[index])}"
        )


def first_pages(lens: np.ndarray, *, block_size: int, q_len: int = 1, window_left: int = -1) -> np.ndarray:
    """Each sequence's first page read: 0 without a window, else the page of its first query token's window
    start (``abi.kv_first_token``); pages before it are never read and may hold any id."""
    return np.array([abi.kv_first_token(int(n), q_len, window_left, block_size) // block_size for n in lens],
                    dtype=np.int64).reshape(lens.shape)


def validate_block_ids(table: np.ndarray, lens: np.ndarray, *, block_size: int, num_blocks: int, q_len: int = 1,
                       window_left: int = -1) -> None:
    """Block ids a sequence uses (its pages from the first its window reaches to ``ceil(len / block_size)``) lie
    in ``[0, num_blocks)``.

    Entries past a sequence's last page, and with a window those of pages wholly before every query token's
    window, are never read by the kernel and may hold anything (e.g. -1: engines free such pages).
    """
    pages = -(-lens // block_size)
    column = np.arange(table.shape[1])[None, :]
    used = (column < pages[:, None]) & (column >= first_pages(lens, block_size=block_size, q_len=q_len,
                                                               window_left=window_left)[:, None])
    bad = used & ((table < 0) | (table >= num_blocks))
    if bad.any():
        rows, cols = np.nonzero(bad)
        listed = ", ".join(
            f"block_table[{r}, {c}] = {int(table[r, c])}"
            for r, c in zip(rows[:MAX_REPORTED], cols[:MAX_REPORTED], strict=True)
        )
        raise ValueError(
            f"block ids used by a sequence must be in [0, num_blocks) = [0, {num_blocks}), got {listed}"
            f"{' ...' if rows.size > MAX_REPORTED else ''} ({int(bad.sum())} bad entries among the pages in use)"
        )


def validate_q_len(q_len: object) -> int:
    """Query tokens per sequence: an int in ``[1, abi.MAX_Q_LEN]`` (the kernel contract's limit)."""
    if not isinstance(q_len, int | np.integer) or isinstance(q_len, bool):
        raise TypeError(f"q_len must be an int, got {type(q_len).__name__}")
    _require(1 <= int(q_len) <= abi.MAX_Q_LEN,
             f"q_len (query tokens per sequence) must be in [1, {abi.MAX_Q_LEN}] (the kernel contract's limit), "
             f"got {int(q_len)}")
    return int(q_len)


def validate_window_left(window_left: object) -> int:
    """``window_left``: -1 (no window) or W >= 0 (keys ``p - W .. p``, FlashInfer's convention)."""
    if not isinstance(window_left, int | np.integer) or isinstance(window_left, bool):
        raise TypeError(f"window_left must be an int (-1: no window, W >= 0: keep keys p - W .. p), "
                        f"got {type(window_left).__name__}")
    _require(-1 <= int(window_left) < 2**31 - 1,
             f"window_left must be -1 (no window) or >= 0 (keep keys p - W .. p: a sliding_window of 128 in "
             f"transformers is window_left=127), got {int(window_left)}")
    return int(window_left)


#: Sinks element types by dtype name, as PA_TW_SINKS_DTYPE codes.
SINKS_DTYPES: dict[str, int] = {"fp32": abi.SINKS_FP32, "fp16": abi.SINKS_FP16, "bf16": abi.SINKS_BF16}


def validate_sinks_dtype(sinks_dtype: object) -> int:
    """``None`` (no sinks) or one of :data:`SINKS_DTYPES`; returns the tiling word's code."""
    if sinks_dtype is None:
        return abi.SINKS_NONE
    if not isinstance(sinks_dtype, str) or sinks_dtype not in SINKS_DTYPES:
        raise TypeError(f"sinks must be float32, float16 or bfloat16 (one logit per query head), got {sinks_dtype}")
    return SINKS_DTYPES[str(sinks_dtype)]


def validate_query_tokens(lens: np.ndarray, q_len: int) -> None:
    """A sequence holds its ``q_len`` query tokens: ``context_len`` is 0 (an empty row) or at least ``q_len``."""
    short = np.flatnonzero((lens > 0) & (lens < q_len))
    if short.size:
        index = int(short[0])
        raise ValueError(
            f"context_lens counts the query tokens: with q_len={q_len} each must be 0 (an empty row) or >= "
            f"{q_len}, got {int(lens[index])} at index {index}")


def requested_features(*, q_len: int, window_left: int, sinks_dtype: str | None, return_lse: bool,
                       rope_dim: int = 0) -> int:
    """The :class:`abi.Feature` bits a step with these (validated) options asks of a library: the one definition
    the planner's ``PagedAttentionPlan.features`` and the launcher's refusal of an unsupported feature share."""
    bits = abi.Feature.MULTI_TOKEN if q_len > 1 else 0
    bits |= abi.Feature.MLA if rope_dim else 0
    bits |= abi.Feature.WINDOW if window_left >= 0 else 0
    bits |= abi.Feature.SINKS if sinks_dtype is not None else 0
    return int(bits | (abi.Feature.LSE if return_lse else 0))


def validate_scale(scale: object, head_dim: int) -> float:
    """``None`` means ``1/sqrt(head_dim)``; otherwise a finite real number."""
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating, np.integer)):
        raise TypeError(f"scale must be a float or None, got {type(scale).__name__}")
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")
    return float(scale)


def validate_option(name: str, value: object, allowed: Sequence[object]) -> None:
    if isinstance(value, bool) != any(isinstance(a, bool) for a in allowed) or value not in allowed:
        raise ValueError(f"{name} must be one of {list(allowed)}, got {value!r}")


def validate_core_count(core_count: object) -> None:
    if core_count is not None and (isinstance(core_count, bool) or not isinstance(core_count, int)
                                   or core_count < 1):
        raise ValueError(f"core_count must be None or an int >= 1, got {core_count!r}")


def validate_dtype(dtype: object) -> None:
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")


def validate_plan_options(*, strategy: object, batch_invariant: object, handoff_tokens: object) -> None:
    """``strategy``, ``batch_invariant`` and ``handoff_tokens`` and how they combine."""
    validate_option("strategy", strategy, STRATEGIES)
    if not isinstance(batch_invariant, bool):
        raise TypeError(f"batch_invariant must be a bool, got {batch_invariant!r}")
    if batch_invariant and strategy != "auto":
        raise ValueError(f"batch_invariant=True pins the task grid; strategy must be 'auto', got {strategy!r}")
    if handoff_tokens is None:
        return
    if isinstance(handoff_tokens, bool) or not isinstance(handoff_tokens, int):
        raise TypeError(f"handoff_tokens must be an int or None, got {handoff_tokens!r}")
    if handoff_tokens < 0 or handoff_tokens % abi.HANDOFF_ALIGN_TOKENS:
        raise ValueError(f"handoff_tokens must be 0 (ABI v1 scratch) or a positive multiple of "
                         f"{abi.HANDOFF_ALIGN_TOKENS}, got {handoff_tokens}")
    if handoff_tokens > MAX_HANDOFF_TOKENS:
        raise ValueError(f"handoff_tokens must be at most {MAX_HANDOFF_TOKENS}, got {handoff_tokens}")
    if batch_invariant and handoff_tokens not in (0, abi.DEFAULT_HANDOFF_TOKENS):
        raise ValueError(f"batch_invariant=True pins the hand-off at {abi.DEFAULT_HANDOFF_TOKENS} tokens, "
                         f"got handoff_tokens={handoff_tokens}")


def validate_npu_kernel_fields(*, backend: str, num_kv_heads: int, head_dim: int, handoff_tokens: int) -> None:
    """Refuse, before a launch on ``backend``, a shape or plan value our NPU kernel would put into an A2/A3
    intrinsic field too narrow for it (kernel/npu/README.md, "Field limits": the one table of them).

    Two values reach a 16-bit row pitch (``NPU_MAX_L1_LOAD_PITCH_ELEMS``): a KV cache token's ``num_kv_heads x
    head_dim`` elements (the K and V page loads) and ``handoff_tokens`` (the cube's P load).  Every other field
    the kernel fills from a shape is bounded by :func:`validate_shape`'s limits.  The mock executes any of them,
    so for a backend outside ``NPU_KERNEL_BACKENDS`` nothing is checked.
    """
    if backend not in NPU_KERNEL_BACKENDS:
        return
    limit = NPU_MAX_L1_LOAD_PITCH_ELEMS
    pitch = num_kv_heads * head_dim
    _require(pitch <= limit,
             f"num_kv_heads x head_dim (a KV cache token's elements, the row pitch of the NPU kernel's K and V page "
             f"loads) must be at most {limit} on the {backend} backend (A2/A3's 16-bit srcDValue of "
             f"copy_gm_to_cbuf_multi_nd2nz), got {num_kv_heads} x {head_dim} = {pitch}")
    largest = limit // abi.HANDOFF_ALIGN_TOKENS * abi.HANDOFF_ALIGN_TOKENS
    _require(handoff_tokens <= limit,
             f"handoff_tokens (the row pitch of the NPU kernel's P load from scratch) must be at most {largest} on "
             f"the {backend} backend (A2/A3's 16-bit srcDValue of copy_gm_to_cbuf_multi_nd2nz), got "
             f"{handoff_tokens}")
