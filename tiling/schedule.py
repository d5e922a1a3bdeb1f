"""A Python model of how a kernel walks the tiling words: which core runs which task.

It reads nothing but the tiling tensor, the way the device does (ABI header; docs/CONTRACT.md, "Task loop"),
so the property tests can check a plan's coverage and memory footprint without running a kernel.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from tiling import abi


@dataclass(frozen=True)
class Task:
    """One (sequence, head range, KV range) unit of work on logical core ``core``."""

    core: int
    position: int
    slot: int
    head_start: int
    head_count: int
    split: int
    token_start: int
    token_count: int


def _word(tiling: np.ndarray, index: int) -> int:
    return int(tiling[index])


def _slot_of(tiling: np.ndarray, position: int) -> int:
    return _word(tiling, abi.batch_word(position, abi.BatchField.GATHER))


def _pass_tasks(
    tiling: np.ndarray, block_dim: int, *, first_position: int, positions: int, head_split: int,
    kv_core_num: int, whole: bool,
) -> Iterator[Task]:
    """A pass's tasks; ``whole`` (the tail pass) runs each sequence's whole range, also under a split-KV key."""
    w = abi.TilingWord
    num_heads = _word(tiling, w.NUMHEADS)
    block_size = _word(tiling, w.BLOCKSIZE)
    kv_split = _word(tiling, w.KVSPLIT)
    chunks = -(-num_heads // head_split)
    total = positions * chunks * kv_core_num
    for core in range(block_dim):
        for process in range(core, total, block_dim):
            position = first_position + process // (chunks * kv_core_num)
            slot = _slot_of(tiling, position)
            kv_len = _word(tiling, abi.batch_word(slot, abi.BatchField.KV_SEQLEN))
            if kv_len == 0:
                continue
            chunk = (process // kv_core_num) % chunks
            split = process % kv_core_num
            kv_loop = 1 if whole else abi.kv_splits(kv_len, block_size, kv_split)
            if split >= kv_loop:
                continue
            start = split * kv_split
            count = kv_len - start if split == kv_loop - 1 else kv_split
            head_start = chunk * head_split
            yield Task(core, position, slot, head_start, min(head_split, num_heads - head_start), split, start,
                       count)


def enumerate_tasks(tiling: np.ndarray, block_dim: int) -> list[Task]:
    """Every non-empty task of a launch with ``block_dim`` cores: former pass, then tail pass."""
    w = abi.TilingWord
    kv_core_num = _word(tiling, w.KVCORENUM)
    tasks = list(_pass_tasks(
        tiling, block_dim, first_position=0, positions=_word(tiling, w.FORMER_BATCH),
        head_split=_word(tiling, w.FORMER_HEAD), kv_core_num=kv_core_num, whole=kv_core_num == 1,
    ))
    tail_batch = _word(tiling, w.TAIL_BATCH)
    if tail_batch:
        tasks += _pass_tasks(
            tiling, block_dim, first_position=_word(tiling, w.FORMER_BATCH), positions=tail_batch,
            head_split=_word(tiling, w.TAIL_HEAD), kv_core_num=1, whole=True,
        )
    return tasks
