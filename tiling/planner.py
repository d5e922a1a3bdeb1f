"""The host-side planner: from a decode step's shapes to the kernel's tiling words and workspace sizes.

``plan_paged_attention`` runs once per decode step (context lengths change every step, and they live in the
tiling, not in a kernel argument).  Its result is a frozen :class:`PagedAttentionPlan`; the launcher uploads
``plan.tiling`` and allocates ``plan.workspace`` and does nothing else on the launch path.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tiling import abi
from tiling.balance import balance_ragged
from tiling.invariant import invariant_tile, split_invariant
from tiling.mla_grid import mla_grid_rule, split_mla
from tiling.rules import (
    DTYPES,
    lengths_array,
    requested_features,
    validate_dtype,
    validate_lengths,
    validate_mla_rescale,
    validate_option,
    validate_plan_options,
    validate_q_len,
    validate_query_tokens,
    validate_rope_dim,
    validate_scale,
    validate_shape,
    validate_sinks_dtype,
    validate_window_left,
)
from tiling.splits import CoreSplit, Strategy, cap_task_rows, choose_tile, headnum_move, split_cores
from tiling.workspace import WorkspaceSizes, workspace_sizes

#: ATB's PP_MM bucket for a single query token.
DECODE_M_UBD = 16
#: Mask modulus/divisor that make the (unused) mask offset arithmetic an identity.
MASK_MODCOEF = 0xFFFFFFFF
MASK_DIVCOEF = 1
UINT32_MASK = 0xFFFFFFFF


@dataclass(frozen=True)
class PagedAttentionPlan:
    """Everything a launch needs besides the tensors.  ``tiling`` is read-only."""

    tiling: np.ndarray
    block_dim: int
    key: abi.TilingKey
    workspace: WorkspaceSizes
    strategy: str
    kv_split_tokens: int
    kv_core_num: int
    tile_tokens: int
    split: CoreSplit
    batch: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    block_size: int
    max_pages: int
    num_blocks: int
    dtype: str
    scale: float
    context_lens: tuple[int, ...]
    #: Planned by :mod:`tiling.invariant` (split length, tile and head split pinned).
    batch_invariant: bool = False
    #: Tokens per cube->vector hand-off the kernel runs (tiling word 42, or ABI v1's 512 when it is 0).
    handoff_tokens: int = abi.DEFAULT_HANDOFF_TOKENS
    #: Decode features (ABI v3 words 44-47): query tokens per sequence, the window (-1: none), the sinks'
    #: element type (None: no sinks) and whether the launch writes each row's lse.
    q_len: int = 1
    window_left: int = -1
    sinks_dtype: str | None = None
    return_lse: bool = False
    #: MLA (ABI v4 word 48): the rope width R of an absorbed-MLA launch (``head_dim`` is then the latent's), or 0
    rope_dim: int = 0
    #: MLA (ABI v5 word 49): how the NPU kernel rescales a task's output accumulator, 'plain' or 'pow2' (AMLA)
    mla_rescale: str = "plain"

    @property
    def nonempty_batch(self) -> int:
        return sum(1 for n in self.context_lens if n > 0)

    @property
    def split_batch(self) -> int:
        """Sequences with split-KV partials: the non-empty ones the former pass runs (a tail pass is written whole,
        ABI v6); 0 without split-KV."""
        if self.kv_core_num <= 1:
            return 0
        table = self.tiling[abi.TILING_HEADER_WORDS:].reshape(self.batch, abi.TILING_BATCH_WORDS)
        gather = table[:, abi.BatchField.GATHER].astype(np.int64)
        return int(split_slots(np.asarray(self.context_lens), gather, self.split.former_batch).sum())

    @property
    def features(self) -> int:
        """The :class:`abi.Feature` bits this plan asks of a library."""
        return requested_features(q_len=self.q_len, window_left=self.window_left, sinks_dtype=self.sinks_dtype,
                                  return_lse=self.return_lse, rope_dim=self.rope_dim)


def _float_bits(value: float) -> int:
    return int(struct.unpack("<I", struct.pack("<f", value))[0])


def max_task_heads(split: CoreSplit) -> int:
    """q heads of the plan's largest task: the rows of an S/P stage."""
    return max(split.former_head, split.tail_head if split.tail_batch else 0)


def choose_handoff(split: CoreSplit) -> int:
    """The planner's hand-off size: 512 tokens for every plan.

    The frozen timing model (``python -m timing.handoff_table``, kernel/npu/PERFORMANCE.md "Change 4") puts
    512 first or within 0.4 % of the best size at every shape it ran: a longer hand-off removes the overlap of
    one unit's softmax with the next unit's Q.K^T (b1 ctx 2K: 19.0 µs at 512, 19.9 µs at 1024 and above) and
    saves nothing where HBM bounds the launch (b64 ctx 2K: 448.7 µs at 512, 447.4 µs at 2048).
    """
    del split  # the rule does not depend on the grid yet
    return abi.DEFAULT_HANDOFF_TOKENS


def _header(words: np.ndarray, plan_split: CoreSplit, key: abi.TilingKey, **v: int) -> None:
    t = abi.TilingWord
    batch, hq, hkv, d = v["batch"], v["num_heads"], v["num_kv_heads"], v["head_dim"]
    values = {
        t.BATCH: batch, t.NUMHEADS: hq, t.HEADDIM: d, t.NUMBLOCKS: v["num_blocks"],
        t.BLOCKSIZE: v["block_size"], t.MAXBLOCKS: v["max_pages"], t.TOR: v["scale_bits"], t.KVHEADS: hkv,
        t.FORMER_BATCH: plan_split.former_batch, t.FORMER_HEAD: plan_split.former_head,
        t.TAIL_BATCH: plan_split.tail_batch, t.TAIL_HEAD: plan_split.tail_head,
        t.HEADNUM_MOVE: headnum_move(hq, hkv, d), t.MASK_MAX_LEN: 0, t.BATCH_STRIDE: 0, t.HEAD_STRIDE: 0,
        t.KEY: int(key), t.HEADSIZE: abi.TILING_HEADER_WORDS, t.PARASIZE: abi.TILING_BATCH_WORDS,
        t.GROUPNUM: hq // hkv, t.FORMER_GROUP_MOVE: plan_split.former_group_move,
        t.TAIL_GROUP_MOVE: plan_split.tail_group_move, t.MAX_KVSEQLEN: v["max_kv"],
        t.KVSPLIT: plan_split.kv_split_tokens, t.KVCORENUM: plan_split.kv_core_num,
        t.BLOCKSIZE_CALC: v["tile_tokens"], t.TOTAL_BLOCK_NUM: 0, t.PREFILL_BS: 0, t.DECODER_BS: batch,
        t.HEADDIM_V: d, t.MODCOEF: MASK_MODCOEF, t.DIVCOEF: MASK_DIVCOEF, t.QHEADORIGINAL: hq,
        t.COMPRESSHEAD: 0, t.QUANTYPE: 0, t.DATA_SHAPE_TYPE: 0, t.SCALETYPE: 0, t.MASK_TYPE_ND: 0,
        t.HEADDIM_K_SPLIT: min(d, abi.MAX_HEAD_DIM), t.HEADDIM_V_SPLIT: min(d, abi.MAX_HEAD_DIM),
        t.HEADDIM_V_SPLIT_VECTOR_FORMER: min(d, abi.MAX_HEAD_DIM),
        t.HEADDIM_V_SPLIT_VECTOR_TAIL: min(d, abi.MAX_HEAD_DIM),
        t.HANDOFF_TOKENS: v["handoff_tokens"], t.SCORE_STAGE_ELEMS: v["score_stage_elems"],
        t.Q_LEN: v["q_len"], t.WINDOW_LEFT: v["window_left"] & UINT32_MASK, t.SINKS_DTYPE: v["sinks_code"],
        t.LSE: v["lse"], t.ROPE_DIM: v["rope_dim"], t.MLA_RESCALE: v["mla_rescale"],
    }
    for word, value in values.items():
        words[word] = value


def gather_order(lens: np.ndarray) -> np.ndarray:
    """Schedule position -> slot: ATB's stable ascending sort of the lengths."""
    return np.argsort(lens, kind="stable").astype(np.int64)


def split_slots(lens: np.ndarray, gather: np.ndarray, former_batch: int) -> np.ndarray:
    """1 for each slot with split-KV partials: non-empty and run by the former pass (schedule positions below
    ``former_batch``); a tail-pass slot is written whole (ABI v6)."""
    former = np.zeros(lens.size, dtype=np.int64)
    former[gather[:former_batch]] = 1
    return former * (lens > 0)


def _per_sequence(words: np.ndarray, lens: np.ndarray, *, num_heads: int, head_dim: int, block_size: int,
                  kv_core_num: int, gather: np.ndarray, q_len: int, split: np.ndarray) -> None:
    """Slot words, vectorised: offsets in elements, 64-bit offsets as (hi, lo) pairs; a slot holds q_len x
    num_heads rows.  The partial offsets count the ``split`` slots (:func:`split_slots`) before each slot (0 for a
    tail slot); without split-KV every non-empty slot counts."""
    f = abi.BatchField
    batch = lens.size
    slots = np.arange(batch, dtype=np.int64)
    nonempty = (lens > 0).astype(np.int64)
    split = split if kv_core_num > 1 else nonempty
    before = np.concatenate(([0], np.cumsum(split)[:-1])).astype(np.int64) * split
    rows = q_len * num_heads
    row_elems = rows * head_dim
    columns = {
        f.Q_SEQLEN: nonempty * q_len,
        f.KV_SEQLEN: lens.astype(np.int64),
        f.M_UBD: np.full(batch, DECODE_M_UBD, np.int64),
        f.BLOCK_SIZE: np.full(batch, block_size, np.int64),
        f.BATCH_IDX: slots,
        # Gather map: schedule position p runs slot gather[p] (gather_order).
        f.GATHER: gather,
    }
    pairs = {
        (f.ADDR_Q_HI, f.ADDR_Q_LO): slots * row_elems,
        (f.ADDR_O_HI, f.ADDR_O_LO): slots * row_elems,
        (f.ADDR_L_HI, f.ADDR_L_LO): before * kv_core_num * rows,
        (f.ADDR_OFD_HI, f.ADDR_OFD_LO): before * row_elems,
    }
    table = words[abi.TILING_HEADER_WORDS:].reshape(batch, abi.TILING_BATCH_WORDS)
    for field, column in columns.items():
        table[:, field] = column
    for (hi, lo), column in pairs.items():
        table[:, hi] = column >> 32
        table[:, lo] = column & UINT32_MASK


def plan_paged_attention(
    context_lens: Sequence[int] | np.ndarray,
    *,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    block_size: int,
    max_pages: int,
    num_blocks: int,
    scale: float,
    dtype: str = "fp16",
    core_count: int = 24,
    strategy: Strategy = "auto",
    batch_invariant: bool = False,
    handoff_tokens: int | None = None,
    grid: CoreSplit | None = None,
    q_len: int = 1,
    window_left: int = -1,
    sinks_dtype: str | None = None,
    return_lse: bool = False,
    rope_dim: int = 0,
    mla_rescale: str = "plain",
) -> PagedAttentionPlan:
    """Plan one decode step.

    ``context_lens`` are the tokens each sequence attends to (0 = empty: a zero output row),
    ``max_pages`` the block table's row length, ``num_blocks`` the pages in the KV cache,
    ``core_count`` the device's cube cores (24 on a 910B), ``strategy`` forces BN or split-KV.
    ``batch_invariant`` pins split length, tile and head split (:mod:`tiling.invariant`) so that each
    sequence's output is the same bits whatever else is in the batch and whatever ``core_count`` is; it
    excludes a forced ``strategy``.  ``handoff_tokens`` is the cube->vector hand-off (kernel ABI v2): None lets
    the planner choose, a positive multiple of 512 forces it, 0 plans ABI v1's fixed scratch (what an external
    ATB-ABI kernel addresses; the hand-off is then 512).  Per-core S/P scratch is sized for the plan's largest
    task: heads per task x hand-off tokens.  ``grid`` plans that task grid instead of the planner's own choice
    (tools that rank grids, :mod:`timing.plan_search`, :mod:`timing.ragged`); a ragged batch still gets its
    balanced gather order for it, as a forced strategy does.

    Decode features (docs/API.md, "Decode features"): ``q_len`` query tokens per sequence (``context_lens`` counts
    them; a task then holds heads x q_len rows, at most ``abi.MAX_TASK_ROWS``), ``window_left`` (-1 or W >= 0:
    the grid and the splits cover only the pages from each sequence's first window page on), ``sinks_dtype``
    (None, 'fp32', 'fp16', 'bf16') and ``return_lse``.

    MLA (docs/API.md, "MLA decode"): ``rope_dim`` = ``abi.MLA_ROPE_DIM`` plans an absorbed-MLA step, with ``head_dim``
    the latent width (``abi.MLA_LATENT_DIM``) and ``num_kv_heads`` 1.  Its tasks hold every q head of a token range
    (ABI v5, :func:`tiling.mla_grid.split_mla`: the latent is read once per split) and its hand-off is
    ``abi.MLA_HANDOFF_TOKENS``; ``mla_rescale`` ('plain' or 'pow2') picks the NPU kernel's rescale of the output
    accumulator (:func:`tiling.rules.validate_mla_rescale`).  Every other option means what it means for GQA.
    """
    validate_dtype(dtype)
    rope_dim = validate_rope_dim(rope_dim)
    if rope_dim and handoff_tokens not in (None, abi.MLA_HANDOFF_TOKENS):
        raise ValueError(f"an MLA plan (rope_dim > 0) hands off {abi.MLA_HANDOFF_TOKENS} tokens (the latent tile the "
                         f"NPU kernel keeps on chip); handoff_tokens must be None or {abi.MLA_HANDOFF_TOKENS}, got "
                         f"{handoff_tokens!r}")
    validate_plan_options(strategy=strategy, batch_invariant=batch_invariant,
                          handoff_tokens=None if rope_dim else handoff_tokens)
    rescale_word = validate_mla_rescale(mla_rescale, rope_dim)
    if rope_dim and batch_invariant:
        raise ValueError("batch_invariant=True is not planned for MLA (rope_dim > 0): its pinned tile does not fit "
                         "MLA's 512-wide latent")
    lens = lengths_array(context_lens)
    validate_shape(
        batch=lens.size, num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
        block_size=block_size, max_pages=max_pages, num_blocks=num_blocks, core_count=core_count,
        rope_dim=rope_dim,
    )
    if lens.size == 0:
        raise ValueError("context_lens must hold at least one sequence: an empty step has nothing to plan "
                         "(PagedAttentionRunner.update accepts one and launches nothing)")
    validate_lengths(lens, block_size=block_size, max_pages=max_pages)
    scale = validate_scale(scale, head_dim)
    q_len, window_left = validate_q_len(q_len), validate_window_left(window_left)
    sinks_code = validate_sinks_dtype(sinks_dtype)
    validate_option("return_lse", return_lse, (True, False))
    validate_query_tokens(lens, q_len)
    batch = int(lens.size)
    # the grid is planned on the KV range each sequence reads (its window's pages), not its whole context
    first = np.array([abi.kv_first_token(int(n), q_len, window_left, block_size) for n in lens], dtype=np.int64)
    read = (lens - first).astype(lens.dtype)
    max_kv = int(read.max())
    tile = invariant_tile(block_size, head_dim) if batch_invariant else choose_tile(block_size, head_dim)
    if grid is not None:
        split = grid
    elif rope_dim:
        split = split_mla(batch, num_heads, max_kv, block_size, core_count, strategy, q_len,
                          uniform=bool(read.min() == read.max()))
    elif batch_invariant:
        split = split_invariant(batch, num_heads, num_kv_heads, max_kv, block_size, head_dim, core_count)
    else:
        split = split_cores(batch, num_heads, num_kv_heads, max_kv, block_size, head_dim, core_count, strategy)
    if grid is None and not rope_dim:
        split = cap_task_rows(split, q_len, num_heads, num_kv_heads, head_dim)
    gather = gather_order(read)
    if read.min() != read.max():  # departure 10; a pinned grid (given, forced, batch-invariant) only gets the order
        split, gather = balance_ragged(
            split, read, gather, num_heads=num_heads, num_kv_heads=num_kv_heads, block_size=block_size,
            head_dim=head_dim, core_count=core_count,
            grid_fixed=grid is not None or batch_invariant or strategy != "auto",
            rule=mla_grid_rule(num_heads, q_len, max_kv, block_size) if rope_dim else None)
        if grid is None and not rope_dim:  # the balancer's own grid is sized for one token: cut its tasks to the rows
            split = cap_task_rows(split, q_len, num_heads, num_kv_heads, head_dim)
    key = abi.make_key(bf16=dtype == "bf16", split_kv=split.kv_core_num > 1, split_block=tile.split_block)
    if rope_dim:
        handoff = abi.MLA_HANDOFF_TOKENS
    else:
        handoff = choose_handoff(split) if handoff_tokens is None else handoff_tokens
    stage = max_task_heads(split) * q_len * handoff if handoff else 0
    words = np.zeros(abi.tiling_words(batch), dtype=np.uint32)
    _header(
        words, split, key, batch=batch, num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
        num_blocks=num_blocks, block_size=block_size, max_pages=max_pages, scale_bits=_float_bits(scale),
        max_kv=int(lens.max()), tile_tokens=tile.tile_tokens, handoff_tokens=handoff, score_stage_elems=stage,
        q_len=q_len, window_left=window_left, sinks_code=sinks_code, lse=int(return_lse), rope_dim=rope_dim,
        mla_rescale=rescale_word,
    )
    partial_slots = split_slots(lens, gather, split.former_batch)
    _per_sequence(words, lens, num_heads=num_heads, head_dim=head_dim, block_size=block_size,
                  kv_core_num=split.kv_core_num, gather=gather, q_len=q_len, split=partial_slots)
    words.setflags(write=False)
    sizes = workspace_sizes(
        block_dim=split.block_dim, elem_bytes=DTYPES[dtype], split_batch=int(partial_slots.sum()),
        num_heads=num_heads * q_len, head_dim=head_dim, kv_core_num=split.kv_core_num, score_stage_elems=stage,
        mla=bool(rope_dim),
    )
    return PagedAttentionPlan(
        tiling=words, block_dim=split.block_dim, key=key, workspace=sizes, strategy=split.strategy,
        kv_split_tokens=split.kv_split_tokens, kv_core_num=split.kv_core_num, tile_tokens=tile.tile_tokens,
        split=split, batch=batch, num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
        block_size=block_size, max_pages=max_pages, num_blocks=num_blocks, dtype=dtype, scale=float(scale),
        context_lens=tuple(lens.tolist()), batch_invariant=batch_invariant,
        handoff_tokens=handoff or abi.DEFAULT_HANDOFF_TOKENS, q_len=q_len, window_left=window_left,
        sinks_dtype=sinks_dtype, return_lse=bool(return_lse), rope_dim=rope_dim, mla_rescale=mla_rescale,
    )
