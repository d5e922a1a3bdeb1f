"""Negative controls of the device path's cross-core and kernel-exit rules, put back into the kernel itself.

The device-path simulation (``sim``) ends a launch with ``TRAILING_FLAG`` when a core exits with an intra-core
flag set and never waited, or when, after the whole launch, a cross-core counter is not back at 0 (always on,
checked mode or not); a counter pushed past 15 faults; consecutive cross-core sets of one core leave in a seeded
order.  The kernel drains every write-after-read flag at exit and waits every cross-core signal it receives:
each mutation below removes one of those and must make the launch fail, on every seed of a fixed list (the
mutations are fault injections of ``pa_sim_mutate_sync``, the kernel's ``DrainFlag`` and ``CrossWait``):

* ``PA_SIM_MUTATE_NO_DRAIN`` on a vector's and on a cube's free flag -> TRAILING_FLAG naming the core and pipes;
* ``PA_SIM_MUTATE_SKIP_CROSS_WAIT`` on a cube -> vector signal -> TRAILING_FLAG naming the cross-core flag (a
  vector reads S before it is written: the checker, when on, reports that race first), and on a launch with
  more than 15 units per cluster the counter itself overflows.

Launches run in a child process (this file run as a script), as in test_sim_hazards.py.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
for path in (ROOT, TESTS):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from test_sim_hazards import edge  # noqa: E402
from test_sim_kernel import BASE, LIB, needs_sim, run_case  # noqa: E402

from tiling import abi  # noqa: E402

HAZARD = int(abi.ErrorCode.HAZARD)
MUTATE_SKIP_CROSS_WAIT, MUTATE_NO_DRAIN = 4, 5
#: seeds fixed in advance: a control must fire on each, not on a lucky schedule
SEEDS = (1, 2, 3)
CHILD_TIMEOUT_S = 300
#: small: two clusters, a few units each (BN and split-KV with the combine)
SMALL = {**BASE, "lens": [300, 40], "d": 64, "bs": 64, "cores": 2}
SMALL_SPLIT = {**SMALL, "lens": [700, 90], "cores": 4, "strategy": "split_kv"}
#: one cluster, 34 one-unit tasks (units alternate the two stages): a skipped stage-0 wait leaves 17 sets on one
#: counter
LONG = {**BASE, "lens": [64] * 34, "hq": 2, "hkv": 1, "d": 64, "bs": 64, "cores": 1, "strategy": "bn"}


def child(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    lib = ctypes.CDLL(str(LIB))
    lib.pa_sim_mutate_sync.argtypes = [ctypes.c_int32, ctypes.c_int32]
    lib.pa_sim_set_seed.argtypes = [ctypes.c_int64]
    results = []
    for run in runs:
        lib.pa_sim_mutate_sync(run["kind"], run["edge"])
        lib.pa_sim_set_seed(run["seed"])
        res = run_case(run["case"])
        results.append({"rc": res["rc"], "message": res["err"]["message"][:400], "passed": res.get("passed")})
    lib.pa_sim_mutate_sync(-1, -1)
    lib.pa_sim_set_seed(-1)
    return results


def run_child(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # The mad operand check off: a skipped wait lets the cube multiply P before the vectors wrote it, which that
    # check (tests/test_sim_device_path.py) reports first; these tests are about the counter and exit rules.
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), json.dumps(runs)], capture_output=True,
                          text=True, timeout=CHILD_TIMEOUT_S, check=False,
                          env={**os.environ, "PA_SIM_MAD_INPUT_CHECK": "0"})
    assert proc.returncode == 0, f"simulation child failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    return list(json.loads(proc.stdout.strip().splitlines()[-1]))


def launches(kind: int, edge_name: str, case: dict[str, Any], *, unchecked: bool) -> list[dict[str, Any]]:
    return [{"kind": kind, "edge": edge(edge_name) if edge_name else -1, "seed": seed,
             "case": {**case, "unchecked": unchecked}} for seed in SEEDS]


def controls() -> dict[str, list[dict[str, Any]]]:
    """Every launch of this file by name: one child runs them all (its start-up is most of the time)."""
    return {
        "baseline": launches(-1, "", SMALL, unchecked=True) + launches(-1, "", SMALL_SPLIT, unchecked=True),
        "vector undrained": launches(MUTATE_NO_DRAIN, "kEdgeSUbFree", SMALL, unchecked=True),
        "cube undrained": launches(MUTATE_NO_DRAIN, "kEdgeKvL1Free0", SMALL_SPLIT, unchecked=True),
        "vector undrained, checked": launches(MUTATE_NO_DRAIN, "kEdgeOutUbFree", SMALL, unchecked=False),
        "S wait skipped": launches(MUTATE_SKIP_CROSS_WAIT, "kEdgeQkReady0", SMALL, unchecked=True),
        "O_tmp wait skipped": launches(MUTATE_SKIP_CROSS_WAIT, "kEdgeUpdateReady0", SMALL_SPLIT, unchecked=True),
        "S wait skipped, checked": launches(MUTATE_SKIP_CROSS_WAIT, "kEdgeQkReady0", SMALL, unchecked=False),
        "S wait skipped, long": launches(MUTATE_SKIP_CROSS_WAIT, "kEdgeQkReady0", LONG, unchecked=True)[:1],
    }


@cache
def outcomes() -> dict[str, list[tuple[dict[str, Any], dict[str, Any]]]]:
    named = controls()
    runs = [run for group in named.values() for run in group]
    outs = iter(run_child(runs))
    return {name: [(run, next(outs)) for run in group] for name, group in named.items()}


@needs_sim
def test_the_controls_launches_pass_unmutated_on_every_seed() -> None:
    """The baseline: with nothing mutated the same launches are clean and right."""
    for run, out in outcomes()["baseline"]:
        assert out["rc"] == 0 and out["passed"], (run, out)


@needs_sim
@pytest.mark.parametrize(("name", "pattern"), [
    ("vector undrained", r"vec core \d+\.\d ends with flag V->MTE2 event 0 still set"),
    ("cube undrained", r"cube core \d+\.0 ends with flag MTE1->MTE2 event 0 still set"),
    ("vector undrained, checked", r"vec core \d+\.\d ends with flag MTE3->V event \d still set"),
])
def test_a_free_flag_left_undrained_is_trailing(name: str, pattern: str) -> None:
    """A write-after-read flag the kernel pre-arms and does not drain at exit: TRAILING_FLAG (PA_ERR_HAZARD), with
    the hazard checker off or on, naming the core and the flag's pipes and event."""
    for run, out in outcomes()[name]:
        assert out["rc"] == HAZARD and out["message"].startswith("TRAILING_FLAG (HAZARD): "), (run, out)
        assert re.search(pattern, out["message"]), (run, out)


@needs_sim
@pytest.mark.parametrize("name", ["S wait skipped", "O_tmp wait skipped"])
def test_a_cross_core_wait_skipped_leaves_the_counter_raised(name: str) -> None:
    """A cube -> vector signal the vector no longer waits for: with the checker off the launch ends with that
    vector's counter raised, TRAILING_FLAG naming the flag id; never a passing launch."""
    for run, out in outcomes()[name]:
        assert out["rc"] == HAZARD, (run, out)
        assert re.search(r"^TRAILING_FLAG \(HAZARD\): vec core \d+\.\d ends with cross-core flag \d+'s counter at \d+",
                         out["message"]), (run, out)


@needs_sim
def test_a_cross_core_wait_skipped_is_a_race_for_the_checker() -> None:
    """With the checker on, the vector's read of S before the cube wrote it is reported (a HAZARD before the
    launch ends)."""
    for run, out in outcomes()["S wait skipped, checked"]:
        assert out["rc"] == HAZARD and out["message"].startswith("HAZARD (write after read)"), (run, out)
        assert re.search(r"writes GM buffer s, .* which copy_gm_to_ubuf\w* on vec core", out["message"]), (run, out)


@needs_sim
def test_a_skipped_wait_on_a_long_launch_overflows_the_counter() -> None:
    """More than 15 sets of one flag never consumed: the 16th finds the 4-bit counter full and faults, naming the
    flag, the receiving core and the count."""
    for run, out in outcomes()["S wait skipped, long"]:
        assert out["rc"] != 0, (run, out)
        assert re.search(r"counter of flag \d+ on vec core 0\.\d is already 15", out["message"]), (run, out)


if __name__ == "__main__":
    print(json.dumps(child(json.loads(sys.argv[1]))))
