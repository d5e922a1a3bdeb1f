#!/usr/bin/env python3
"""Benchmark pa-kit's paged-attention decode against CANN's IFA/FIA (NPU) or torch (CPU), in TB/s.

    python bench_pa_performance.py                                   # default short set, best backend present
    python bench_pa_performance.py --shapes pr                       # the published table, cold L2, median
    python bench_pa_performance.py --shapes pr --no-flush --stat mean --warmup 5 --iters 20   # published method
    python bench_pa_performance.py --batch 8 --ctx 4096 --dtype bf16 # one shape
    python bench_pa_performance.py --shapes features                 # spec decode; gpt-oss-20b window + sinks
    python bench_pa_performance.py --batch 8 --ctx 4096 --q-len 2 --window-left 127 --sinks --lse   # features
    python bench_pa_performance.py --shapes mla                      # DeepSeek-V3 absorbed MLA, TP 1/4/8, + MTP
    python bench_pa_performance.py --mla --heads 16 --batch 32 --ctx 4096   # one MLA shape (bf16 by default)
    python bench_pa_performance.py --json run.json --compare base.json --tolerance 5   # regression gate
    python bench_pa_performance.py --batch-invariant                 # also time batch_invariant=True
    python bench_pa_performance.py --external simpler=/path/libpa.so # an external ATB-ABI kernel as a peer

Exit status: 0 ok; 1 the gate found regressed or missing shapes; 2 the gate refused the comparison (other
device kind or timing method) or an argument was invalid; 3 pa-kit failed or was inaccurate on some shape.
Progress goes to stderr, the report to stdout.  See ``benchmark/`` for the method.
"""

from __future__ import annotations

import os

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")  # before torch: see docs/API.md, "Environment variables"

import argparse
import shlex
import sys
from dataclasses import asdict
from datetime import datetime, timezone

from benchmark.baselines import BASELINES, NPU_IMPLEMENTATIONS, TORCH_IMPLEMENTATIONS, parse_external
from benchmark.compare import EXIT_REFUSED, IncomparableResultsError, check_comparable, compare
from benchmark.device import (
    BACKENDS,
    MIB,
    busy_host_warning,
    collect_versions,
    cpu_snapshot,
    default_backend,
    describe_device,
    other_processes_share,
)
from benchmark.npu_peers import available_npu_peers
from benchmark.report import PA_KIT, SCHEMA_VERSION, BenchReport, read_json, render, write_json
from benchmark.suite import Suite, SuiteOptions, measure_launch_overhead
from benchmark.timing import STATISTICS, TimingPolicy
from workloads import bytes_model
from workloads.shapes import (
    BLOCK_SIZE,
    DEEPSEEK_V3_DTYPE,
    DEEPSEEK_V3_HEADS,
    DEFAULT_SEED,
    DTYPES,
    HEAD_DIM,
    MAX_Q_LEN,
    MLA_LATENT_DIM,
    MLA_ROPE_DIM,
    NUM_HEADS,
    NUM_KV_HEADS,
    SHAPE_SETS,
    BenchShape,
    shape_set,
    uniform_shape,
)

EXIT_PA_KIT_FAILED = 3
SINGLE_SHAPE_FLAGS = ("batch", "heads", "kv_heads", "head_dim", "ctx", "block_size", "dtype", "q_len",
                      "window_left", "sinks", "lse", "mla")
#: Timing defaults per backend: (warm-up, min launches, max launches, budget ms per implementation and shape).
TIMING_DEFAULTS = {"npu": (10, 20, 100, 2000.0), "mock": (2, 3, 30, 600.0), "sim": (1, 1, 3, 5000.0)}
DEFAULT_TOLERANCE_PERCENT = 5.0


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=BACKENDS, help="default: npu if torch_npu sees a device, else mock")
    p.add_argument("--shapes", choices=SHAPE_SETS, default="default", help="named shape set (default: %(default)s)")
    single = p.add_argument_group("single shape (any of these replaces --shapes with one shape)")
    single.add_argument("--batch", type=int, help="sequences (default 1)")
    single.add_argument("--heads", type=int, help=f"query heads (default {NUM_HEADS})")
    single.add_argument("--kv-heads", type=int, help=f"KV heads (default {NUM_KV_HEADS})")
    single.add_argument("--head-dim", type=int, help=f"default {HEAD_DIM}")
    single.add_argument("--ctx", type=int, help="context tokens of every sequence (default 2048)")
    single.add_argument("--block-size", type=int, help=f"tokens per page (default {BLOCK_SIZE})")
    single.add_argument("--dtype", choices=DTYPES, help="default fp16")
    single.add_argument("--q-len", type=int, help=f"query tokens per sequence, counted in --ctx (speculative "
                                                  f"decoding / MTP; 1..{MAX_Q_LEN}, default 1)")
    single.add_argument("--window-left", type=int, help="sliding window: a token at p sees keys p-W..p "
                                                        "(transformers' sliding_window=128 is 127; default -1: none)")
    single.add_argument("--sinks", action="store_true", default=None, help="one sink logit per query head (gpt-oss)")
    single.add_argument("--lse", action="store_true", default=None, help="launches also return the lse")
    single.add_argument("--mla", action="store_true", default=None,
                        help=f"absorbed MLA (DeepSeek-V3): one {MLA_LATENT_DIM}-wide latent KV head with a "
                             f"{MLA_ROPE_DIM}-wide rope part; --heads query heads (default {DEEPSEEK_V3_HEADS}), "
                             f"dtype bf16 unless --dtype")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed of the inputs (default %(default)s)")
    p.add_argument("--list-shapes", action="store_true", help="print the shapes and exit")
    peers = p.add_argument_group("implementations")
    peers.add_argument("--baselines", help=f"comma list of {', '.join(BASELINES)}, or none (default: "
                                           f"{','.join(NPU_IMPLEMENTATIONS)} where present on npu; "
                                           f"{','.join(TORCH_IMPLEMENTATIONS)} elsewhere)")
    peers.add_argument("--checked", action="store_true", help="also time pa-kit in checked mode (mock/sim)")
    peers.add_argument("--core-count", type=int, help="cube cores to plan for (default: the device's)")
    peers.add_argument("--strategy", choices=("auto", "bn", "split_kv"), default="auto")
    peers.add_argument("--mla-rescale", choices=("plain", "pow2"), default="plain",
                       help="MLA shapes: how the NPU kernel rescales its output accumulator (docs/API.md, mla_rescale)")
    peers.add_argument("--batch-invariant", action="store_true",
                       help="also time pa-kit with batch_invariant=True (rows 'pa-kit invariant')")
    peers.add_argument("--external", action="append", default=[], metavar="NAME=PATH",
                       help="time an external ATB-ABI kernel library as a peer, rows named NAME (repeatable); on "
                            "mock/sim it must speak the mock protocol")
    timing = p.add_argument_group("timing")
    timing.add_argument("--engine-steps", type=int, default=128,
                        help="steps of the engine loop whose host cost is reported (update per step, run per "
                             "layer, ragged b64 with the batch changing each step; 0: skip)")
    timing.add_argument("--stat", choices=STATISTICS, default="median",
                        help="median of per-launch times (default) or mean; --no-flush --stat mean is the "
                             "published method (one timed window of back-to-back launches)")
    timing.add_argument("--no-flush", action="store_true", help="do not flush the cache between launches")
    timing.add_argument("--flush-mib", type=int, help="bytes written by a flush (default: 2x L2 / last cache)")
    timing.add_argument("--warmup", type=int, help="warm-up launches (backend default)")
    timing.add_argument("--iters", type=int, help="timed launches per implementation and shape (with --budget-ms: "
                                                  "the most; default: as many as the budget allows)")
    timing.add_argument("--min-iters", type=int, help="min timed launches, even past the budget")
    timing.add_argument("--budget-ms", type=float, help="time budget per implementation and shape")
    timing.add_argument("--peak-gbs", type=float, help="peak bandwidth in GB/s (overrides table/measurement)")
    timing.add_argument("--bandwidth-mib", type=int, default=512, help="mock read-bandwidth probe size (MiB)")
    out = p.add_argument_group("output")
    out.add_argument("--json", metavar="FILE", help="write the results (schema in benchmark/report.py)")
    out.add_argument("--compare", metavar="BASELINE.json", help="regression gate against a saved --json")
    out.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE_PERCENT, metavar="PCT",
                     help="allowed slow-down per shape in percent (default %(default)s)")
    out.add_argument("--predict", action="store_true",
                     help="predict each pa-kit launch's NPU time with the timing model (implies --backend sim; "
                          "a prediction, not a measurement: docs/TIMING_MODEL.md)")
    out.add_argument("--trace", metavar="FILE.json",
                     help="with --predict: write the replay as a Chrome/Perfetto trace (a track per core and pipe)")
    out.add_argument("--plot", metavar="FILE.png", help="TB/s against batch and context (needs matplotlib)")
    return p.parse_args(argv)


def select_shapes(args: argparse.Namespace) -> list[BenchShape]:
    if args.mla:
        return [uniform_shape(
            args.batch or 1, args.ctx or 2048, num_heads=args.heads or DEEPSEEK_V3_HEADS,
            num_kv_heads=args.kv_heads or 1, head_dim=args.head_dim or MLA_LATENT_DIM,
            block_size=args.block_size or BLOCK_SIZE, dtype=args.dtype or DEEPSEEK_V3_DTYPE, seed=args.seed,
            q_len=args.q_len or 1, window_left=-1 if args.window_left is None else args.window_left,
            sinks=bool(args.sinks), lse=bool(args.lse), rope_dim=MLA_ROPE_DIM)]
    if any(getattr(args, flag) is not None for flag in SINGLE_SHAPE_FLAGS):
        return [uniform_shape(
            args.batch or 1, args.ctx or 2048, num_heads=args.heads or NUM_HEADS,
            num_kv_heads=args.kv_heads or NUM_KV_HEADS, head_dim=args.head_dim or HEAD_DIM,
            block_size=args.block_size or BLOCK_SIZE, dtype=args.dtype or "fp16", seed=args.seed,
            q_len=args.q_len or 1, window_left=-1 if args.window_left is None else args.window_left,
            sinks=bool(args.sinks), lse=bool(args.lse))]
    return shape_set(args.shapes, seed=args.seed)


def select_baselines(args: argparse.Namespace, backend: str) -> tuple[str, ...]:
    if args.baselines is None:
        if backend != "npu":
            return TORCH_IMPLEMENTATIONS
        import torch_npu

        return available_npu_peers(torch_npu)
    if args.baselines.strip().lower() == "none":
        return ()
    names = tuple(n.strip() for n in args.baselines.split(",") if n.strip())
    unknown = [n for n in names if n not in BASELINES]
    if unknown:
        raise ValueError(f"--baselines: unknown {', '.join(unknown)}; expected {', '.join(BASELINES)} or none")
    if backend != "npu" and set(names) - set(TORCH_IMPLEMENTATIONS):
        raise ValueError(f"--baselines {'/'.join(NPU_IMPLEMENTATIONS)} need the npu backend")
    return names


def timing_policy(args: argparse.Namespace, backend: str, flush_bytes: int) -> TimingPolicy:
    warmup, min_iters, max_iters, budget = TIMING_DEFAULTS[backend]
    if args.iters is not None:
        max_iters = args.iters
        if args.budget_ms is None:  # an exact launch count, as the published method uses
            min_iters = args.iters
    return TimingPolicy(
        statistic=args.stat, l2_flush=not args.no_flush,
        warmup=args.warmup if args.warmup is not None else warmup,
        min_iters=min(max_iters, args.min_iters if args.min_iters is not None else min_iters),
        max_iters=max_iters, budget_ms=args.budget_ms if args.budget_ms is not None else budget,
        flush_bytes=args.flush_mib * MIB if args.flush_mib else flush_bytes,
    )


def reproduce_command(argv: list[str], backend: str) -> str:
    words = ["python", "bench_pa_performance.py", *argv]
    if "--backend" not in argv:
        words += ["--backend", backend]
    return shlex.join(words)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    try:
        shapes = select_shapes(args)
        if args.list_shapes:
            from benchmark.roofline import roofline

            for s in shapes:
                features = f", {s.features_label}" if s.features else ""
                roof = roofline(s)
                print(f"{s.shape_id}  lengths {min(s.context_lens)}..{s.max_context}{features} "
                      f"({bytes_model.traffic(s).total_bytes / 1e6:.1f} MB, {roof.intensity:.0f} FLOP/B: {roof.bound})")
            return 0
        if args.trace and not args.predict:
            raise ValueError("--trace needs --predict")
        if args.predict and args.backend not in (None, "sim"):
            raise ValueError(f"--predict runs the simulation (--backend sim), got --backend {args.backend}")
        backend = "sim" if args.predict else args.backend or default_backend()
        baselines = select_baselines(args, backend)
        externals = tuple(parse_external(spec) for spec in args.external)
        names = [name for name, _ in externals]
        if len(set(names)) != len(names):
            raise ValueError(f"--external names must differ, got {names}")
        baseline_report = read_json(args.compare) if args.compare else None
    except ValueError as exc:
        log(f"error: {exc}")
        return EXIT_REFUSED

    log(f"pa-kit benchmark: backend {backend}, {len(shapes)} shape(s), baselines {', '.join(baselines) or 'none'}")
    device = describe_device(backend, peak_gb_per_s=args.peak_gbs, bandwidth_probe_bytes=args.bandwidth_mib * MIB)
    peak = "unknown" if device.peak_gb_per_s is None else f"{device.peak_gb_per_s:.1f} GB/s"
    log(f"device {device.kind}: peak {peak} ({device.peak_source})")
    policy = timing_policy(args, backend, device.flush_bytes)
    if baseline_report is not None:  # refuse before spending minutes measuring
        try:
            check_comparable(baseline_report, device.kind, asdict(policy))
        except IncomparableResultsError as exc:
            print(str(exc), flush=True)
            return EXIT_REFUSED
    options = SuiteOptions(backend=backend, baselines=baselines, policy=policy, time_checked=args.checked,
                           core_count=args.core_count, strategy=args.strategy, mla_rescale=args.mla_rescale,
                           batch_invariant=args.batch_invariant, externals=externals, predict=args.predict,
                           keep_spans=bool(args.trace))
    overhead = measure_launch_overhead(options, dtype=shapes[0].dtype)
    log(f"launch overhead: {overhead.runner_noop_us or 0:.2f} µs per runner launch into call_kernel_noop "
        f"({overhead.split_kv_runner_noop_us or 0:.2f} µs split-KV, {overhead.run_noop_us or 0:.2f} µs per run() "
        f"with a BN plan){'; ' + overhead.note if overhead.note else ''}")
    engine: dict[str, object] = {}
    if args.engine_steps:
        from benchmark.engine_cost import engine_cost

        cost = engine_cost(backend, steps=args.engine_steps, device="npu" if backend == "npu" else "cpu")
        engine = cost.as_dict()
        log(cost.summary())
    suite = Suite(options, device, log=log)
    records = []
    start = cpu_snapshot()
    for shape in shapes:
        records += suite.run_shape(shape)
    others = other_processes_share(start, cpu_snapshot())
    extras: dict[str, object] = {}
    if others is not None:
        extras["host"] = f"other processes used {100 * others:.0f} % of the host CPUs during the measurements"
    busy = busy_host_warning(others) if backend != "npu" else None
    if busy:
        extras["warning"] = busy

    report = BenchReport(
        schema_version=SCHEMA_VERSION, created_utc=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        command=reproduce_command(argv, backend), device=device, versions=collect_versions(backend),
        timing={**asdict(policy), "description": policy.describe()}, bytes_model=bytes_model.DESCRIPTION,
        launch_overhead=overhead, records=tuple(records),
        extras=extras, engine=engine,
    )
    print(render(report), flush=True)
    if args.trace:
        from benchmark.predict import write_chrome_trace

        write_chrome_trace(args.trace, suite.predictions)
        log(f"wrote {args.trace} (timing-model replay: open in Perfetto)")
    if args.json:
        write_json(report, args.json)
        log(f"wrote {args.json}")
    if args.plot:
        from benchmark.plot import plot_report

        plot_report(report, args.plot)
        log(f"wrote {args.plot}")
    status = 0
    if any(r.implementation == PA_KIT and not r.ok for r in records):
        status = EXIT_PA_KIT_FAILED
    if baseline_report is not None:
        try:
            result = compare(baseline_report, report, args.tolerance)
        except IncomparableResultsError as exc:
            print(str(exc), flush=True)
            return EXIT_REFUSED
        print(result.summary(), flush=True)
        status = result.exit_code or status
    return status


if __name__ == "__main__":
    sys.exit(main())
