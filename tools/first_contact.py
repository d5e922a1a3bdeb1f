"""First contact with an A2/A3: one command that can prove every timing prediction of this project wrong.

Run on a machine with an Ascend A2/A3, CANN and torch_npu (``bash tools/first_contact.sh``). Steps, in order;
a failed step is reported and the next one still runs; the exit code is 1 if any step failed (3 if none
failed but no NPU was found):

1. ``build``: ``bash compile.sh``, then the NPU library ``build/lib/libpa_npu.so`` must exist (the build
   needs CANN's bisheng);
2. ``accuracy``: the accuracy suite on the backend (``pytest test_pa_accuracy.py --backend npu``);
3. ``determinism``: 1,000 launches of one plan per shape, each output compared bit for bit with the first
   (the output is filled with NaN before every launch, so a launch that skips a row is caught too);
4. ``bench``: the published shapes against IFA and FIA (``bench_pa_performance.py --shapes pr --json``);
5. ``msprof``: CANN profiles, when ``msprof`` is on PATH: pa-kit and IFA on the largest published shape (its
   pipe utilisation gives the MTE2 busy time and the hand-off gaps the timing model needs), and pa-kit and FIA on
   DeepSeek-V3's MLA at 128 heads, where the model has the cube bound by FIX (the L0C -> GM stores): its FIX busy
   time gives the rate pto-isa's table assumes (70 GiB/s a core), which decides issue #39's cube target
   (kernel/npu/PERFORMANCE.md, "Where #39's targets stand");
6. ``compare``: measured against the newest committed predictions (``timing/predictions-2026-11-28-l2.json``)
   and IFA's published times, per shape (``tools/contact_report.py``).

Everything a step prints goes to ``<out>/<step>.log`` (msprof: one log per profile, ``msprof_<name>.log``);
``<out>/summary.json`` records every step's outcome.
On a CPU the same script runs with ``--backend mock`` (how ``tests/test_first_contact.py`` checks it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")  # before torch: see docs/API.md "Environment variables"

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tools import contact_report  # noqa: E402

STEPS = ("build", "accuracy", "determinism", "bench", "msprof", "compare")
OK, FAILED, SKIPPED = "ok", "FAILED", "skipped"
DEFAULT_LAUNCHES = 1000
#: Determinism shapes: a split-KV plan (b1, 8K: the combine's order is where non-determinism would hide) and
#: the largest published shape (every core busy).
DETERMINISM_SHAPES = ("b1_h32kv8_d128_ctx8k_bs128_fp16", "b64_h32kv8_d128_ctx2k_bs128_fp16")
#: What msprof profiles, each into a directory of its name: the largest published shape, pa-kit and IFA; and
#: tilelang's MLA shape per core (B24 of B128/H128/S8192, one sequence a core), pa-kit and FIA; few launches.
MSPROF_PROFILES: dict[str, tuple[str, ...]] = {
    "gqa": ("--batch", "64", "--ctx", "2048", "--baselines", "ifa", "--iters", "20"),
    "mla": ("--mla", "--batch", "24", "--heads", "128", "--ctx", "8192", "--block-size", "256", "--dtype", "fp16",
            "--baselines", "fia", "--iters", "20"),
}
NPU_LIBRARY = REPO_ROOT / "build" / "lib" / "libpa_npu.so"
LOG_TAIL_LINES = 15
#: Exit code when no step failed but ``--backend npu`` found no NPU: nothing was proven, and a script that
#: exits 0 there would read as a successful contact.
NOTHING_PROVEN = 3


@dataclass(frozen=True)
class StepResult:
    name: str
    status: str
    detail: str
    seconds: float = 0.0


@dataclass(frozen=True)
class Context:
    backend: str
    out: Path
    npu_missing: str | None
    launches: int
    determinism_shapes: tuple[str, ...]
    accuracy_select: str | None
    bench_args: tuple[str, ...]
    predictions: Path
    timeout_s: float


def npu_unavailable_reason() -> str | None:
    """Why no NPU can be used here, or None; asked in a child process so that a broken torch_npu stays there."""
    probe = ("import os; os.environ.setdefault('TORCH_DEVICE_BACKEND_AUTOLOAD', '0'); import torch, torch_npu; "
             "import sys; sys.exit(0 if torch.npu.is_available() else 3)")
    try:
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return "torch_npu did not answer within 300 s"
    if done.returncode == 0:
        return None
    if done.returncode == 3:
        return "torch_npu reports no NPU"
    lines = (done.stderr.strip() or "no output").splitlines()
    return f"torch_npu is unusable: {lines[-1]}"


def run_logged(ctx: Context, name: str, command: list[str]) -> tuple[int, str]:
    """Run ``command`` in the repository, output to ``<out>/<name>.log``; (exit code, last lines)."""
    log = ctx.out / f"{name}.log"
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    try:
        done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=ctx.timeout_s,
                              env=env)
        code, text = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as error:
        code, text = -1, f"{error}\n"
    except OSError as error:
        code, text = -1, f"could not start {command[0]}: {error}\n"
    log.write_text(f"$ {' '.join(command)}\n{text}")
    return code, "\n".join(text.strip().splitlines()[-LOG_TAIL_LINES:])


def step_build(ctx: Context) -> StepResult:
    code, tail = run_logged(ctx, "build", ["bash", "compile.sh"])
    if code != 0:
        return StepResult("build", FAILED, f"bash compile.sh exited {code}:\n{tail}")
    if ctx.backend == "npu" and not NPU_LIBRARY.is_file():
        return StepResult("build", FAILED, f"{NPU_LIBRARY} was not built (CANN's bisheng missing?):\n{tail}")
    return StepResult("build", OK, "bash compile.sh succeeded" + (f"; {NPU_LIBRARY.name} present"
                                                                   if ctx.backend == "npu" else ""))


def step_accuracy(ctx: Context) -> StepResult:
    if ctx.npu_missing:
        return StepResult("accuracy", SKIPPED, ctx.npu_missing)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_pa_accuracy.py",
               "--backend", ctx.backend]
    if ctx.accuracy_select:
        command += ["-k", ctx.accuracy_select]
    code, tail = run_logged(ctx, "accuracy", command)
    last = tail.splitlines()[-1] if tail else ""
    if code != 0:
        return StepResult("accuracy", FAILED, f"pytest exited {code}:\n{tail}")
    if " passed" not in last:
        return StepResult("accuracy", FAILED, f"no case ran: {last}")
    return StepResult("accuracy", OK, last)


def find_shape(shape_id: str):  # -> BenchShape
    from workloads.shapes import SHAPE_SETS, shape_set

    for name in SHAPE_SETS:
        for shape in shape_set(name):
            if shape.shape_id == shape_id:
                return shape
    raise KeyError(f"{shape_id} is in none of the benchmark's shape sets")


def launches_identical(shape, backend: str, launches: int) -> tuple[int, str]:
    """(launches whose output differs in any bit from the first one's, a note).  Why NaN first: see module."""
    import torch

    from launcher import PagedAttentionRunner
    from workloads.cases import build_case

    case = build_case(shape, "npu" if backend == "npu" else "cpu")
    out = torch.empty_like(case.query)
    runner = PagedAttentionRunner(case.query, case.key_cache, case.value_cache, case.block_table,
                                  case.context_lens, scale=case.scale, backend=backend, out=out, checked=False)
    first: torch.Tensor | None = None
    differing, first_bad = 0, None
    for index in range(launches):
        out.fill_(float("nan"))
        runner()
        bits = out.view(torch.int16)
        if first is None:
            first = bits.clone()
        elif not torch.equal(bits, first):
            differing += 1
            first_bad = index if first_bad is None else first_bad
    note = f"plan {runner.plan.strategy} bd{runner.plan.block_dim}"
    if first is not None and torch.isnan(first.view(out.dtype)).any():
        note += "; the first output holds NaN"
        differing = max(differing, 1)
    if first_bad is not None:
        note += f"; first differing launch #{first_bad}"
    return differing, note


def step_determinism(ctx: Context) -> StepResult:
    if ctx.npu_missing:
        return StepResult("determinism", SKIPPED, ctx.npu_missing)
    lines, bad = [], False
    for shape_id in ctx.determinism_shapes:
        try:
            differing, note = launches_identical(find_shape(shape_id), ctx.backend, ctx.launches)
        except Exception as error:  # report and go on: this is a first-contact script
            bad = True
            lines.append(f"{shape_id}: error {type(error).__name__}: {error}")
            continue
        bad |= differing > 0
        lines.append(f"{shape_id}: {ctx.launches} launches, {differing} differing from the first ({note})")
    (ctx.out / "determinism.log").write_text("\n".join(lines) + "\n")
    return StepResult("determinism", FAILED if bad else OK, "\n".join(lines))


def bench_json(ctx: Context) -> Path:
    return ctx.out / "bench.json"


def step_bench(ctx: Context) -> StepResult:
    if ctx.npu_missing:
        return StepResult("bench", SKIPPED, ctx.npu_missing)
    args = list(ctx.bench_args) or ["--shapes", "pr"]
    command = [sys.executable, "bench_pa_performance.py", "--backend", ctx.backend, *args,
               "--json", str(bench_json(ctx))]
    code, tail = run_logged(ctx, "bench", command)
    if code != 0 or not bench_json(ctx).is_file():
        return StepResult("bench", FAILED, f"bench exited {code}:\n{tail}")
    return StepResult("bench", OK, f"results in {bench_json(ctx)}")


def step_msprof(ctx: Context) -> StepResult:
    msprof = shutil.which("msprof")
    if msprof is None:
        return StepResult("msprof", SKIPPED, "msprof is not on PATH (source CANN's set_env.sh)")
    if ctx.npu_missing:
        return StepResult("msprof", SKIPPED, ctx.npu_missing)
    done = []
    for name, bench in MSPROF_PROFILES.items():
        application = " ".join([sys.executable, str(REPO_ROOT / "bench_pa_performance.py"), "--backend",
                                ctx.backend, *bench])
        profile = ctx.out / "msprof" / name
        command = [msprof, f"--output={profile}", "--aic-metrics=PipeUtilization", f"--application={application}"]
        code, tail = run_logged(ctx, f"msprof_{name}", command)
        if code != 0:
            return StepResult("msprof", FAILED, f"msprof ({name}) exited {code}:\n{tail}")
        done.append(str(profile))
    return StepResult("msprof", OK, f"profiles in {', '.join(done)}")


def step_compare(ctx: Context) -> StepResult:
    predictions, note = contact_report.load_predictions(ctx.predictions)
    if not bench_json(ctx).is_file():
        return StepResult("compare", SKIPPED, f"no benchmark results to compare; {note}")
    rows = contact_report.compare(json.loads(bench_json(ctx).read_text()), predictions,
                                  contact_report.load_ifa_published())
    table = contact_report.render(rows, note, ctx.backend)
    (ctx.out / "compare.txt").write_text(table + "\n")
    return StepResult("compare", OK, table)


STEP_FUNCTIONS: dict[str, Callable[[Context], StepResult]] = {
    "build": step_build, "accuracy": step_accuracy, "determinism": step_determinism, "bench": step_bench,
    "msprof": step_msprof, "compare": step_compare,
}


def run_steps(ctx: Context, skip: set[str], report: Callable[[StepResult], None] = lambda r: None) -> list[StepResult]:
    """Every step in order; a step's exception is its failure, never the end of the run."""
    results = []
    for name in STEPS:
        start = time.monotonic()
        if name in skip:
            result = StepResult(name, SKIPPED, "skipped on request (--skip)")
        else:
            try:
                result = STEP_FUNCTIONS[name](ctx)
            except Exception as error:
                result = StepResult(name, FAILED, f"{type(error).__name__}: {error}")
        result = StepResult(result.name, result.status, result.detail, round(time.monotonic() - start, 1))
        report(result)
        results.append(result)
    (ctx.out / "summary.json").write_text(json.dumps(
        {"backend": ctx.backend, "npu_missing": ctx.npu_missing, "steps": [asdict(r) for r in results]},
        indent=2) + "\n")
    return results


def print_result(result: StepResult) -> None:
    print(f"== {result.name}: {result.status} ({result.seconds:.1f} s)")
    for line in result.detail.splitlines():
        print(f"   {line}")
    sys.stdout.flush()


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", choices=("npu", "mock", "sim"), default="npu",
                   help="npu on a device (default); mock or sim to rehearse on a CPU")
    p.add_argument("--out", type=Path, default=None, help="directory for logs and results "
                   "(default build/first_contact/<UTC time>)")
    p.add_argument("--skip", default="", help=f"comma list of steps to skip: {', '.join(STEPS)}")
    p.add_argument("--launches", type=int, default=DEFAULT_LAUNCHES, help="determinism launches per shape")
    p.add_argument("--determinism-shape", action="append", default=None, metavar="SHAPE_ID",
                   help=f"shape id of the benchmark's sets (repeatable; default {', '.join(DETERMINISM_SHAPES)})")
    p.add_argument("--accuracy-select", default=None, metavar="EXPR", help="pytest -k expression (default: all)")
    p.add_argument("--bench-arg", action="append", default=None, metavar="ARG",
                   help="replaces the bench's '--shapes pr' (repeatable, e.g. --bench-arg=--batch --bench-arg=2)")
    p.add_argument("--predictions", type=Path, default=contact_report.PREDICTIONS)
    p.add_argument("--step-timeout", type=float, default=4 * 3600.0, help="seconds per external step")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    unknown = skip - set(STEPS)
    if unknown:
        print(f"unknown steps in --skip: {', '.join(sorted(unknown))}; steps: {', '.join(STEPS)}", file=sys.stderr)
        return 2
    out = args.out or REPO_ROOT / "build" / "first_contact" / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out.mkdir(parents=True, exist_ok=True)
    missing = npu_unavailable_reason() if args.backend == "npu" else None
    ctx = Context(backend=args.backend, out=out, npu_missing=missing, launches=args.launches,
                  determinism_shapes=tuple(args.determinism_shape or DETERMINISM_SHAPES),
                  accuracy_select=args.accuracy_select, bench_args=tuple(args.bench_arg or ()),
                  predictions=args.predictions, timeout_s=args.step_timeout)
    print(f"first contact: backend {args.backend}" + (f" (device steps skipped: {missing})" if missing else "")
          + f"; logs in {out}")
    results = run_steps(ctx, skip, print_result)
    failed = [r.name for r in results if r.status == FAILED]
    print(f"first contact: {len(failed)} step(s) failed" + (f": {', '.join(failed)}" if failed else ""))
    if failed:
        return 1
    return NOTHING_PROVEN if missing else 0


if __name__ == "__main__":
    sys.exit(main())
