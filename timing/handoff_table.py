"""The hand-off size analysis on our kernel: what each cube<->vector hand-off size costs in hand-offs, rescales,
scratch and syncs per task, and its predicted time.

    python -m timing.handoff_table [--sizes 512,1024,2048,4096,whole] [--contexts 2048,8192,32768]
                                   [--batches 1,64] [--max-kv-gb 3]

The hand-off is a plan parameter (kernel ABI v2, tiling word 42; ``handoff_tokens=`` of the planner and the
runner); "whole" is the context rounded up to a multiple of 512, one hand-off per task.  Counts follow from the
plan (tokens per task) and the hand-off size: hand-offs per task = ceil(tokens / H), rescales = hand-offs - 1,
cube<->vector syncs = 4 per hand-off (S ready, P ready from each vector sub-core, O_tmp ready); S+P scratch per
core is the plan's (two stages of heads per task x H, fp32 S and input-dtype P; o_tmp keeps its fixed 256 KiB).
The predicted µs is the simulation's trace of that plan replayed by the timing model, where the shape's K/V
fit the host (``--max-kv-gb``).  Predictions are predictions, not measurements.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import numpy as np

from tiling import PagedAttentionPlan, abi, plan_paged_attention
from timing.model import prediction_text
from timing.predictions import predict_shape
from workloads.shapes import uniform_shape

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
    band_us: tuple[float, float] | None


def handoff_tokens(size: str, context: int) -> int:
    """Tokens of a hand-off size: a number, or "whole" (the context in whole 512-token pieces)."""
    if size == "whole":
        return -(-context // abi.HANDOFF_ALIGN_TOKENS) * abi.HANDOFF_ALIGN_TOKENS
    return int(size)


def plan_of(batch: int, context: int, handoff: int) -> PagedAttentionPlan:
    """The planner's plan on 24 cores with the hand-off forced."""
    pages = -(-context // BLOCK_SIZE)
    return plan_paged_attention(np.full(batch, context, np.int32), num_heads=HEADS, num_kv_heads=KV_HEADS,
                                head_dim=HEAD_DIM, block_size=BLOCK_SIZE, max_pages=pages,
                                num_blocks=batch * pages, scale=1.0, core_count=24, handoff_tokens=handoff)


def row(batch: int, context: int, size: str, max_kv_bytes: float) -> Row:
    handoff = handoff_tokens(size, context)
    plan = plan_of(batch, context, handoff)
    words = plan.tiling
    kvcn = int(words[abi.TilingWord.KVCORENUM])
    tokens = min(int(words[abi.TilingWord.KVSPLIT]) if kvcn > 1 else context, context)
    heads = int(words[abi.TilingWord.FORMER_HEAD]) or HEADS
    tasks = batch * math.ceil(HEADS / heads) * max(1, kvcn)
    units = math.ceil(tokens / handoff)
    scratch = (plan.workspace.s_bytes + plan.workspace.p_bytes) / plan.block_dim
    predicted: float | None = None
    band: tuple[float, float] | None = None
    kv_bytes = 2 * batch * context * KV_HEADS * HEAD_DIM * ELEM_BYTES
    if kv_bytes <= max_kv_bytes:
        shape = uniform_shape(batch, context, num_heads=HEADS, num_kv_heads=KV_HEADS, head_dim=HEAD_DIM,
                              block_size=BLOCK_SIZE)
        prediction = predict_shape(shape, handoff)
        low, high = prediction["band_us"]
        predicted, band = float(prediction["predicted_us"]), (float(low), float(high))
    return Row(batch, context, size, tasks, tokens, units, units - 1, scratch / 1024, 4 * units, predicted, band)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="512,1024,2048,4096,whole")
    p.add_argument("--contexts", default="2048,8192,32768")
    p.add_argument("--batches", default="1,64")
    p.add_argument("--max-kv-gb", type=float, default=3.0, help="largest K/V the simulation may allocate")
    args = p.parse_args(argv)
    print("| batch | context | hand-off | tasks | tokens/task | hand-offs/task | rescales/task | S+P scratch KiB/core "
          "| syncs/task | prediction |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for batch in (int(b) for b in args.batches.split(",")):
        for context in (int(c) for c in args.contexts.split(",")):
            for size in args.sizes.split(","):
                r = row(batch, context, size, args.max_kv_gb * 1e9)
                pred = "-"
                if r.predicted_us is not None and r.band_us is not None:
                    pred = prediction_text(r.predicted_us, r.band_us)
                print(f"| {r.batch} | {r.context} | {r.size} | {r.tasks} | {r.tokens_per_task} | {r.handoffs_per_task}"
                      f" | {r.rescales_per_task} | {r.scratch_kib_per_core:.0f} | {r.syncs_per_task} | {pred} |",
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
