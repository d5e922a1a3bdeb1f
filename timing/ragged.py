"""Predicted time of ragged batches: the planner's grid for each, at both ends of the model's band, beside the
levers' balanced-cores bound (every core ending at the mean, but not before HBM has moved the bytes).

    python -m timing.ragged [--shapes b64:4096,b32:16384]

Each entry is ``batch:longest`` for ``benchmark.shapes.ragged_shape`` (lengths log-uniform from 16 tokens,
h32/kv8, D 128, pages of 128, fp16, the default seed).  Predictions of the frozen model, not measurements.
"""

from __future__ import annotations

import argparse

from benchmark.shapes import ragged_shape
from timing.levers import predicted_us
from timing.model import DEFAULT, at_band_end
from timing.predictions import trace_of

DEFAULT_SHAPES = "b8:8192,b16:8192,b32:8192,b32:16384,b64:4096,b64:8192,b128:4096"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default=DEFAULT_SHAPES)
    args = p.parse_args(argv)
    pessimistic = at_band_end(DEFAULT, 1)
    print("| shape | plan | nominal µs | bound | pessimistic µs | bound |")
    print("|---|---|---|---|---|---|")
    for entry in args.shapes.split(","):
        batch, longest = entry.removeprefix("b").split(":")
        shape = ragged_shape(int(batch), high=int(longest))
        trace, plan = trace_of(shape, DEFAULT.cube_cores, with_plan=True)
        grid = f"{plan.strategy} bd{plan.block_dim} kvCN{plan.kv_core_num} {plan.split.former_head} heads/task"
        print(f"| {shape.shape_id} | {grid} | {predicted_us(trace, DEFAULT):.1f} | "
              f"{predicted_us(trace, DEFAULT, balanced=True):.1f} | {predicted_us(trace, pessimistic):.1f} | "
              f"{predicted_us(trace, pessimistic, balanced=True):.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
