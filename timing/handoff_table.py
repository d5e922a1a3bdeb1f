"""The hand-off size analysis on our kernel: what each cube<->vector hand-off size costs in hand-offs, rescales,
scratch and syncs per task, and the predicted time where the kernel supports the size.

    python -m timing.handoff_table [--sizes 512,1024,2048,4096,whole] [--contexts 2048,8192,32768]
                                   [--batches 1,64] [--max-kv-gb 3]

Counts follow from the plan (tokens per task) and the hand-off size: hand-offs per task = ceil(tokens / H),
rescales = hand-offs - 1, cube<->vector syncs = 4 per hand-off (S ready, P ready from each vector sub-core,
O_tmp ready), scratch per core = two ping-pong stages of S (fp32), P (input dtype) and O_tmp (fp32) for the
task's heads.  The predicted µs comes from the simulation's trace replayed by the timing model, only for the
size the built kernel uses (its compile-time hand-off, pa_config.hpp) and only where the shape's K/V fit the
host (``--max-kv-gb``); other sizes print "-" until the hand-off size is a plan parameter.  Predictions are
predictions, not measurements.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import numpy as np

from benchmark.shapes import uniform_shape
from tiling import abi, plan_paged_attention
from timing.predictions import predict_shape

#: the kernel's compile-time hand-off size (kernel/npu/pa_config.hpp: kMaxTaskHeads x 512 fills a scratch half)
BUILT_HANDOFF_TOKENS = abi.S_HALF_ELEMS // abi.HEAD_SPLIT_LIMIT
HEADS, KV_HEADS, HEAD_DIM, BLOCK_SIZE, ELEM_BYTES = 32, 8, 128, 128, 2


@dataclass(frozen=True)
class Row:
    batch: int
    context: int
    size: str
    tasks: int
    tokens_per_task: int
    handoffs_per_task: int
    rescales_per_task: int
    scratch_kib_per_core: float
    syncs_per_task: int
    predicted_us: float | None


def plan_tasks(batch: int, context: int) -> tuple[int, int, int]:
    """(tasks, tokens per task, heads per task) of the planner's default plan on 24 cores."""
    pages = -(-context // BLOCK_SIZE)
    plan = plan_paged_attention(np.full(batch, context, np.int32), num_heads=HEADS, num_kv_heads=KV_HEADS,
                                head_dim=HEAD_DIM, block_size=BLOCK_SIZE, max_pages=pages,
                                num_blocks=batch * pages, scale=1.0, core_count=24)
    words = plan.tiling
    kvcn = int(words[abi.TilingWord.KVCORENUM])
    tokens = int(words[abi.TilingWord.KVSPLIT]) if kvcn > 1 else context
    heads = int(words[abi.TilingWord.FORMER_HEAD]) or HEADS
    tasks = batch * math.ceil(HEADS / heads) * max(1, kvcn)
    return tasks, min(tokens, context), min(heads, abi.HEAD_SPLIT_LIMIT)


def row(batch: int, context: int, size: str, max_kv_bytes: float) -> Row:
    tasks, tokens, heads = plan_tasks(batch, context)
    h = tokens if size == "whole" else min(int(size), tokens)  # a hand-off never exceeds its task
    units = math.ceil(tokens / h)
    scratch = 2 * heads * (h * 4 + h * ELEM_BYTES + HEAD_DIM * 4)
    predicted = None
    kv_bytes = 2 * batch * context * KV_HEADS * HEAD_DIM * ELEM_BYTES
    if h == min(BUILT_HANDOFF_TOKENS, tokens) and kv_bytes <= max_kv_bytes:  # what the built kernel runs
        shape = uniform_shape(batch, context, num_heads=HEADS, num_kv_heads=KV_HEADS, head_dim=HEAD_DIM,
                              block_size=BLOCK_SIZE)
        predicted = predict_shape(shape)["predicted_us"]
    return Row(batch, context, size, tasks, tokens, units, units - 1, scratch / 1024, 4 * units, predicted)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="512,1024,2048,4096,whole")
    p.add_argument("--contexts", default="2048,8192,32768")
    p.add_argument("--batches", default="1,64")
    p.add_argument("--max-kv-gb", type=float, default=3.0, help="largest K/V the simulation may allocate")
    args = p.parse_args(argv)
    print("| batch | context | hand-off | tasks | tokens/task | hand-offs/task | rescales/task | scratch KiB/core "
          "| syncs/task | predicted µs |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for batch in (int(b) for b in args.batches.split(",")):
        for context in (int(c) for c in args.contexts.split(",")):
            for size in args.sizes.split(","):
                r = row(batch, context, size, args.max_kv_gb * 1e9)
                pred = "-" if r.predicted_us is None else f"{r.predicted_us:.1f}"
                print(f"| {r.batch} | {r.context} | {r.size} | {r.tasks} | {r.tokens_per_task} | {r.handoffs_per_task}"
                      f" | {r.rescales_per_task} | {r.scratch_kib_per_core:.0f} | {r.syncs_per_task} | {pred} |",
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
