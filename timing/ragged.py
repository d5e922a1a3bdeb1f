"""Predicted time of ragged batches: the planner's grid for each, at both ends of the model's band, beside the
levers' balanced-cores bound (every core ending at the mean, but not before HBM has moved the bytes).

    python -m timing.ragged [--shapes b64:4096,b32:16384] [--kvcn 5,7,11] [--cores 24]
    python -m timing.ragged --mla-heads 128 --shapes b32:8192,b64:4096    # DeepSeek-V3's absorbed MLA, bf16

Each entry is ``batch:longest`` for ``workloads.shapes.ragged_shape`` (lengths log-uniform from 16 tokens,
h32/kv8, D 128, pages of 128, fp16, the default seed).  ``--kvcn`` replaces the planner's grid by the split-KV
grid of the widest whole-group tasks with that many ranges of the longest sequence, in the balanced order
(``tiling.balance``): how the planner's choice compares with the counts it passed over.  ``--cores`` plans for
fewer cores than the device's 24.  ``--mla-heads H`` makes each entry an absorbed-MLA batch of H heads (one
latent head of 512 + rope 64, bf16, pages of 128) with the same lengths (``--kvcn`` is GQA's only).
Predictions of the frozen model, not measurements.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np

from tiling import balance
from tiling.splits import CoreSplit, one_pass_grid
from timing.levers import predicted_and_balanced_us
from timing.model import DEFAULT, band_ends, prediction_text
from timing.predictions import trace_of
from workloads.shapes import mla_shape, ragged_shape, tokens_label

DEFAULT_SHAPES = "b8:8192,b16:8192,b32:8192,b32:16384,b64:4096,b64:8192,b128:4096"


def split_count_grid(lens: np.ndarray, kvcn: int, *, num_heads: int, num_kv_heads: int, block_size: int,
                     core_count: int) -> CoreSplit:
    """The split-KV grid of ``kvcn`` ranges of the longest sequence, widest whole-group tasks: what
    ``--kvcn`` passes as ``plan_paged_attention(grid=...)`` (the planner then gives it the balanced order)."""
    pages = -(-int(lens.max()) // block_size)
    grid = one_pass_grid(lens.size, num_heads, num_kv_heads, balance.widest_whole_groups(num_heads, num_kv_heads),
                         -(-pages // kvcn) * block_size, kvcn, core_count)
    if grid.kv_core_num != kvcn or -(-pages // (grid.kv_split_tokens // block_size)) != kvcn:
        raise ValueError(f"{pages} pages cannot be cut into exactly {kvcn} ranges of whole pages")
    return grid


def row(entry: str, kvcn: int | None, cores: int, mla_heads: int = 0) -> str:
    batch, longest = entry.removeprefix("b").split(":")
    shape = ragged_shape(int(batch), high=int(longest))
    if mla_heads:  # the same lengths, the ragged id's context label in the MLA shape's id
        mla = mla_shape(int(batch), int(longest), num_heads=mla_heads)
        lengths_label = shape.shape_id.split("_ctx")[1].split("_bs")[0]
        shape = replace(mla, context_lens=shape.context_lens, shape_id=mla.shape_id.replace(
            f"_ctx{tokens_label(int(longest))}_", f"_ctx{lengths_label}_"))
    ends = band_ends()
    if kvcn is None:
        trace, plan = trace_of(shape, cores, with_plan=True)
    else:
        grid = split_count_grid(np.asarray(shape.context_lens), kvcn, num_heads=shape.num_heads,
                                num_kv_heads=shape.num_kv_heads, block_size=shape.block_size, core_count=cores)
        trace, plan = trace_of(shape, cores, with_plan=True, grid=grid)
    grid = f"{plan.strategy} bd{plan.block_dim} kvCN{plan.kv_core_num}"
    grid += f" x {plan.kv_split_tokens} tokens" if plan.kv_core_num > 1 else ""
    grid += f", {plan.split.former_head} heads/task" + ("" if kvcn is None else " (forced)")
    today, balanced = zip(*(predicted_and_balanced_us(trace, c) for c in ends), strict=True)
    return (f"| {shape.shape_id} | {grid} | {prediction_text(today[0], today[1:])} | "
            f"{prediction_text(balanced[0], balanced[1:])} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default=DEFAULT_SHAPES)
    p.add_argument("--kvcn", default="", help="comma-separated split counts to force (default: the planner's)")
    p.add_argument("--cores", type=int, default=DEFAULT.cube_cores, help="cores the plan may launch")
    p.add_argument("--mla-heads", type=int, default=0, help="absorbed-MLA batches of this many q heads (1..128)")
    args = p.parse_args(argv)
    counts: list[int | None] = [int(k) for k in args.kvcn.split(",") if k] or [None]
    if args.mla_heads and counts != [None]:
        p.error("--kvcn forces GQA grids; it does not apply with --mla-heads")
    print("| shape | plan | prediction | balanced-cores bound |")
    print("|---|---|---|---|")
    for entry in args.shapes.split(","):
        for kvcn in counts:
            print(row(entry, kvcn, args.cores, args.mla_heads), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
