"""Which task grid the frozen model predicts fastest for a shape: the planner's choice against every one-pass
grid of whole KV groups per task and whole pages per KV range.

    python -m timing.plan_search [--shapes b1_h32kv8_d128_ctx2k_bs128_fp16,...] [--top 5] [--max-rounds 2]
                                 [--warm-l2]

For each shape the planner's own grid and each candidate (q heads per task: whole KV groups up to the ABI's
head-split cap; KV range: any whole number of pages that leaves at most ``--max-rounds`` (2) rounds of tasks on the
cores and no more ranges than the combine holds) run once in the simulation and are replayed at the model's nominal
constants; the best few are replayed at both ends of the band too.  This is the evidence behind
the planner's small-batch rule (``tiling/splits.py``: ``split_small_batch``); its figures are predictions, not
measurements.
"""

from __future__ import annotations

import argparse
import heapq
from dataclasses import dataclass

from tiling import abi, splits
from timing.costs import CostTables, load_cost_tables
from timing.model import DEFAULT, prediction_text
from timing.predictions import trace_of
from timing.replay import replay, replay_band
from timing.trace import Trace
from workloads.shapes import BenchShape, pr_shapes


@dataclass(frozen=True)
class Candidate:
    head_split: int
    pages_per_split: int
    kv_core_num: int
    tasks: int


def candidates(shape: BenchShape, core_count: int, max_rounds: int = 2) -> list[Candidate]:
    """Every whole-group head split x whole-page KV range with at most ``max_rounds`` rounds of tasks."""
    group = shape.num_heads // shape.num_kv_heads
    kv_pages = -(-shape.max_context // shape.block_size)
    limit = splits.combine_split_limit(shape.head_dim)
    out: dict[tuple[int, int], Candidate] = {}
    for head_split in range(group, min(shape.num_heads, abi.HEAD_SPLIT_LIMIT) + 1, group):
        chunks = -(-shape.num_heads // head_split)
        for pages in range(1, kv_pages + 1):
            kvcn = -(-kv_pages // pages)
            tasks = shape.batch * chunks * kvcn
            if kvcn > limit or tasks > max_rounds * core_count or (kvcn, head_split) in out:
                continue
            out[(kvcn, head_split)] = Candidate(head_split, pages, kvcn, tasks)
    return sorted(out.values(), key=lambda c: (c.tasks, c.head_split))


def candidate_grid(shape: BenchShape, cand: Candidate, core_count: int) -> splits.CoreSplit:
    """``cand``'s task grid, for ``plan_paged_attention(grid=...)``."""
    return splits.one_pass_grid(shape.batch, shape.num_heads, shape.num_kv_heads, cand.head_split,
                                cand.pages_per_split * shape.block_size, cand.kv_core_num, core_count)


def trace_for(shape: BenchShape, cand: Candidate | None) -> Trace:
    """The simulation's trace of ``cand``'s grid (None: the planner's)."""
    if cand is None:
        return trace_of(shape, DEFAULT.cube_cores)
    return trace_of(shape, DEFAULT.cube_cores, grid=candidate_grid(shape, cand, DEFAULT.cube_cores))


def predicted(shape: BenchShape, cand: Candidate | None, costs: CostTables | None = None) -> float:
    """``cand``'s (None: the planner's) predicted µs at the nominal constants."""
    return replay(trace_for(shape, cand), costs or load_cost_tables(), DEFAULT).predicted_us


def with_band(shape: BenchShape, cand: Candidate | None, trace: Trace | None = None,
              costs: CostTables | None = None, warm_l2: bool = False) -> str:
    """``cand``'s prediction with its band: one trace (``trace``, else traced here), replayed at the nominal
    constants and at both band ends (``warm_l2``: under warm-L2 conditions, docs/TIMING_MODEL.md rule 7)."""
    trace = trace if trace is not None else trace_for(shape, cand)
    costs = costs or load_cost_tables()
    nominal, fast, slow = (p.predicted_us for p in replay_band(trace, costs, inputs_in_l2=warm_l2))
    return prediction_text(nominal, (fast, slow))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="", help="comma-separated shape ids (default: the published b1 shapes)")
    ap.add_argument("--top", type=int, default=3)
    ap.add_argument("--max-rounds", type=int, default=2, help="candidates with at most this many rounds of tasks")
    ap.add_argument("--warm-l2", action="store_true",
                    help="replay with K/V read from a warm L2 (a launch whose tensors fit it; rule 7)")
    args = ap.parse_args(argv)
    wanted = [s for s in args.shapes.split(",") if s]
    shapes = [s for s in pr_shapes() if (s.shape_id in wanted if wanted else s.batch == 1)]
    print("| shape | grid | heads/task | KV ranges | tasks | prediction |")
    print("|---|---|---|---|---|---|")
    costs = load_cost_tables()
    for shape in shapes:
        # each candidate traced once; only the best few traces are kept for their bands
        traced = ((c, trace_for(shape, c)) for c in candidates(shape, DEFAULT.cube_cores, args.max_rounds))
        scored = ((replay(trace, costs, DEFAULT, inputs_in_l2=args.warm_l2).predicted_us, c, trace)
                  for c, trace in traced)
        best = heapq.nsmallest(args.top, scored, key=lambda r: r[0])
        planner = with_band(shape, None, costs=costs, warm_l2=args.warm_l2)
        print(f"| {shape.shape_id} | planner | - | - | - | {planner} |")
        for _, c, trace in best:
            print(f"| {shape.shape_id} | candidate | {c.head_split} | {c.kv_core_num} | {c.tasks} | "
                  f"{with_band(shape, c, trace, costs, args.warm_l2)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
