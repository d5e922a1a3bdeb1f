"""Workspace buffer sizes, by formula from the kernel's strides (ABI header, "per-core scratch").

``s``, ``p`` and ``o_tmp`` are private per launched core (``block_idx``) and written before they are read
in every launch; ``o_core`` and ``l`` hold the split-KV partials of every non-empty sequence, which is the
size the upstream port got wrong (it sized them per core and dropped the batch dimension).
"""

from __future__ import annotations

from dataclasses import dataclass

from tiling import abi

FP32_BYTES = 4


@dataclass(frozen=True)
class WorkspaceSizes:
    """Bytes of each workspace buffer; 0 means the launch passes NULL for that slot."""

    s_bytes: int
    p_bytes: int
    o_tmp_bytes: int
    o_core_bytes: int
    l_bytes: int

    def by_slot(self) -> dict[abi.ArgSlot, int]:
        return {
            abi.ArgSlot.S: self.s_bytes,
            abi.ArgSlot.P: self.p_bytes,
            abi.ArgSlot.O_TMP: self.o_tmp_bytes,
            abi.ArgSlot.O_CORE: self.o_core_bytes,
            abi.ArgSlot.L: self.l_bytes,
        }

    @property
    def total_bytes(self) -> int:
        return self.s_bytes + self.p_bytes + self.o_tmp_bytes + self.o_core_bytes + self.l_bytes


def workspace_sizes(
    *, block_dim: int, elem_bytes: int, split_batch: int, num_heads: int, head_dim: int, kv_core_num: int,
    score_stage_elems: int = 0, mla: bool = False,
) -> WorkspaceSizes:
    """Sizes for one plan: per-core scratch for ``block_dim`` cores, split-KV partials when kvCN > 1 for the
    ``split_batch`` sequences that have them (non-empty, in the former pass: a tail pass is written whole, ABI v6).

    ``score_stage_elems`` is tiling word 43 (ABI v2): two S/P stages of that many elements per core; 0 keeps
    ABI v1's fixed strides (what an external ATB-ABI kernel addresses).  An MLA plan (``mla``) takes two output
    accumulators of o_tmp per core (``abi.MLA_O_TMP_CORE_STRIDE_ELEMS``)."""
    split = kv_core_num > 1
    partial_rows = split_batch * num_heads * kv_core_num if split else 0
    s_stride = 2 * score_stage_elems if score_stage_elems else abi.S_CORE_STRIDE_ELEMS
    p_stride = 2 * score_stage_elems if score_stage_elems else abi.P_CORE_STRIDE_ELEMS
    return WorkspaceSizes(
        s_bytes=block_dim * s_stride * FP32_BYTES,
        p_bytes=block_dim * p_stride * elem_bytes,
        o_tmp_bytes=block_dim * (abi.MLA_O_TMP_CORE_STRIDE_ELEMS if mla else abi.O_TMP_CORE_STRIDE_ELEMS) * FP32_BYTES,
        o_core_bytes=partial_rows * head_dim * FP32_BYTES,
        l_bytes=partial_rows * FP32_BYTES,
    )


def capacity_workspace(
    *, core_count: int, elem_bytes: int, max_batch: int, num_heads: int, head_dim: int, max_pages: int,
    handoff_tokens: int | None, kv_split_limit: int, q_len: int = 1, rope_dim: int = 0,
) -> WorkspaceSizes:
    """Sizes that hold the workspace of every plan a runner of this capacity can make (engines allocate once).

    Every bound is one the planner keeps by construction: at most ``core_count`` launched cores; a task holds
    at most ``num_heads`` q heads, so an S/P stage is at most ``num_heads x hand-off`` elements (the planner's
    hand-off is :data:`abi.DEFAULT_HANDOFF_TOKENS` unless one is forced; 0 keeps ABI v1's fixed strides); kvCN
    is at most ``kv_split_limit`` (the combine's cap, ``splits.combine_split_limit``) and at most the pages of
    the longest sequence, and partials exist for at most ``max_batch`` non-empty sequences.
    ``tests/test_runner_engine.py`` checks the bound against random plans.  With ``q_len`` query tokens a task's
    rows are its heads x q_len, at most :data:`abi.MAX_TASK_ROWS` (the planner's cap, ``splits.cap_task_rows``),
    and the partials hold q_len rows per head.  An MLA runner (``rope_dim`` > 0, ABI v5) hands off
    :data:`abi.MLA_HANDOFF_TOKENS` whatever ``handoff_tokens`` says, and its tasks hold at most
    :data:`abi.MLA_MAX_TASK_ROWS` rows (``mla_grid.mla_task_heads``).
    """
    if rope_dim:
        handoff = abi.MLA_HANDOFF_TOKENS
        rows = min(num_heads * q_len, max(abi.MLA_MAX_TASK_ROWS, q_len))
    else:
        handoff = abi.DEFAULT_HANDOFF_TOKENS if handoff_tokens is None else handoff_tokens
        rows = num_heads if q_len == 1 else min(num_heads * q_len, max(abi.MAX_TASK_ROWS, q_len))
    stage = rows * handoff if handoff else 0
    return workspace_sizes(
        block_dim=core_count, elem_bytes=elem_bytes, split_batch=max_batch, num_heads=num_heads * q_len,
        head_dim=head_dim, kv_core_num=max(1, min(kv_split_limit, max_pages)), score_stage_elems=stage,
        mla=bool(rope_dim),
    )
