"""The simulation's hazard checker against real races: every sync edge of the kernel is load-bearing, wrong
meanings are caught, and a library of small racy kernels fails while their fixed twins pass.

On the device path each core's pipes retire out of program order as far as the flags permit
(``kernel/npu/emu/emu_pipes.cpp``), so a missing flag usually corrupts the output even without the checker
(``test_missing_flags_corrupt_data_without_the_checker``); the hazard checker (checked mode) sees every one,
also those a given schedule happens to survive and the V-pipe barriers, whose pipe the emulator executes in
order.  These are its negative controls:

* drop each synchronisation edge in turn (``pa_sim_drop_sync``) on a small set of varied cases (fp16/bf16,
  head_dim 64/128/256, BN and split-KV with the combine, tails that are not a multiple of 16, a core that
  runs an empty sequence after a full one): every edge must produce ``PA_ERR_HAZARD``, not just any failure;
* change an edge's meaning (``pa_sim_mutate_sync``): a flag set from the wrong source pipe, both ping-pong
  halves on one event id, a cross-core signal issued from another pipe;
* the race library in ``kernel/npu/pa_sim_races.cpp``: small kernels with one defect each, run on the same
  emulator and checker (``kernel/npu/devsim/devsim_races.cpp``), each failing while its fixed twin passes.

Launches run in child processes (this file run as a script): a pto-isa on-chip overflow aborts the process.
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

from test_sim_kernel import BASE, LIB, needs_sim, run_case  # noqa: E402

from launcher.mock_api import MockError  # noqa: E402
from tiling import abi  # noqa: E402

SYNC_HEADER = ROOT / "kernel" / "npu" / "pa_sync.hpp"
CHILD_TIMEOUT_S = 600
HAZARD = int(abi.ErrorCode.HAZARD)
MUTATE_WRONG_SOURCE, MUTATE_SHARED_EVENT, MUTATE_SIGNAL_PIPE = 1, 2, 3

#: Small launches that together reach every edge: multi-unit tasks and two KV groups per task (fp16 D128),
#: split-KV with the combine and several heads per vector sub-core (bf16 D64), ragged tails with D256, many
#: splits, an empty sequence after a full one on one core (a gather order the planner does not choose),
#: 1024-token hand-offs (the vectors' two-pass pieces, the cube's P windows) on the chunk path and, with a KV
#: group of 32 heads, on the head path, and the decode features (window, sinks, lse, several query tokens) with and
#: without the combine.
DROP_CASES: list[dict[str, Any]] = [
    {**BASE, "lens": [1, 130, 1300], "cores": 2},
    {**BASE, "lens": [1500, 40], "hq": 16, "hkv": 2, "d": 64, "bs": 64, "dtype": "bf16", "cores": 3},
    {**BASE, "lens": [3000, 0, 700], "hq": 4, "hkv": 1, "d": 64, "bs": 64, "dtype": "bf16", "cores": 8,
     "strategy": "split_kv"},
    {**BASE, "lens": [37, 300], "hq": 4, "hkv": 2, "d": 256, "bs": 64, "cores": 1},
    {**BASE, "lens": [4100], "hq": 2, "hkv": 1, "d": 32, "bs": 16, "cores": 24, "strategy": "split_kv"},
    {**BASE, "lens": [40, 0], "hq": 4, "hkv": 2, "d": 64, "bs": 16, "cores": 1, "reverse_gather": True},
    {**BASE, "lens": [1300, 90], "cores": 2, "handoff": 1024, "strategy": "bn"},
    {**BASE, "lens": [1100, 77], "hq": 32, "hkv": 1, "d": 64, "bs": 64, "cores": 2, "handoff": 1024, "strategy": "bn"},
    # the decode features of one token: a masked window start, 16-bit sinks joining the output row, the lse of
    # full and empty rows; then fp32 sinks and the lse through the combine
    {**BASE, "lens": [300, 0, 45], "window": 100, "sinks": "fp16", "lse": True, "cores": 2, "strategy": "bn"},
    {**BASE, "lens": [800, 0, 40], "hq": 4, "hkv": 1, "d": 64, "bs": 64, "dtype": "bf16", "window": 500,
     "sinks": "fp32", "lse": True, "cores": 8, "strategy": "split_kv"},
    # several query tokens: a piece masked on both sides (a window's left edge and the causal edge) on the chunk
    # path; 64-row runs on the head path (two slices) with a window, the lse and the combine
    {**BASE, "lens": [300, 0, 45], "q_len": 4, "hq": 8, "hkv": 2, "d": 64, "bs": 16, "window": 20, "sinks": "bf16",
     "lse": True, "cores": 2, "strategy": "bn"},
    {**BASE, "lens": [700, 33], "q_len": 8, "hq": 8, "hkv": 1, "d": 64, "bs": 64, "window": 200, "lse": True,
     "cores": 8, "strategy": "split_kv"},
    # MLA (ABI v5): AMLA's rescale over multi-unit tasks with a rising max (the last page's keys scaled up), an empty
    # sequence and an MTP step; the plain rescale through the combine with two row groups per vector sub-core (both
    # on the three-tile path, the next unit's latent prefetched); one core's tasks putting the third tile's first
    # load and a task's first unit in that tile (its own load, no P load behind it); 72 rows on the two-tile path,
    # eleven units on one core, so that each tile's halves are loaded again while P.V reads its other half
    {**BASE, "mla": "pow2", "lens": [450, 0, 60], "q_len": 2, "hq": 16, "bs": 64, "lse": True, "cores": 2,
     "strategy": "bn", "boost_last_page": 3.0},
    {**BASE, "mla": "plain", "lens": [700, 33], "hq": 40, "bs": 64, "lse": True, "cores": 6, "strategy": "split_kv",
     "boost_last_page": 3.0},
    {**BASE, "mla": "plain", "lens": [900, 300], "hq": 16, "bs": 64, "cores": 1, "strategy": "bn"},
    {**BASE, "mla": "plain", "lens": [200, 200, 200], "hq": 16, "bs": 64, "cores": 1, "strategy": "bn"},
    {**BASE, "mla": "plain", "lens": [1300, 40], "hq": 72, "bs": 64, "cores": 1, "strategy": "bn",
     "boost_last_page": 3.0},
    # the combine in steps (at most 8 splits), several steps per vector sub-core back to back: 32 rows on 4
    # sub-cores, and 16-bit sinks end a step at its query token's last row (4 heads), so each run is two steps
    {**BASE, "lens": [1200], "q_len": 8, "hq": 4, "hkv": 1, "d": 64, "bs": 64, "sinks": "fp16", "lse": True,
     "cores": 2, "strategy": "split_kv"},
]


#: Edges the device path shows are ordered without them, each for a reason of the A2/A3 instruction stream; the
#: kernel keeps them rather than rely on pto-isa's internals or on a case shape.
DEVICE_PATH_REDUNDANT = {
    "kEdgeBarPieceMax": "pto-isa's A2/A3 TROWMAX ends with pipe_barrier(PIPE_V)",
    "kEdgeBarPieceSum": "pto-isa's A2/A3 TROWSUM ends with pipe_barrier(PIPE_V)",
    "kEdgeBarUpdate": "the last softmax ends with TROWSUM, which ends with pipe_barrier(PIPE_V)",
    "kEdgeBarPieceScaled": "pto-isa's A2/A3 TROWEXPANDSUB broadcasts first and barriers before its vsub",
    "kEdgeBarCombSink": "the combine's weight sum is TROWSUM, which ends with pipe_barrier(PIPE_V)",
    "kEdgeBarCombMax": "the combine step's row maxima are TROWMAX, which ends with pipe_barrier(PIPE_V)",
    "kEdgeBarRise": "MLA: a group's rise is written before the softmax's later barriers, and pto-isa's A2/A3 TROWMAX "
                    "(the fold's first op) ends with pipe_barrier(PIPE_V)",
    "kEdgeRopeL1Free1": "MLA, three tiles (the only path with rope flags): a load into rope tile 1 (an odd unit "
                        "counter c >= 3) also waits for its latent tile's free flag, which MTE1 sets after the P.V of "
                        "unit c - 3, so after Q.K^T(c - 2), the rope tile's last reader; only rope tile 0 has a load "
                        "(unit 2's, into the third tile's first use) with no such P.V before it",
    "kEdgePLeftFree": "MLA: each P.V starts with the cross-core wait for the vectors' P, and the emulator's "
                      "wait_flag_dev sends (so completes) what the core's pipes queued before it, the last P.V's "
                      "matmuls included",
}

#: tails of 37 and 300 - 256 = 44 tokens: the last P.V sub-tile's inner length is not a multiple of 16
PADDING_CASE = DROP_CASES[3]


@cache
def edge_names() -> list[str]:
    """The kernel's edge ids in order, read from the header that names them (pa_sync.hpp's ``enum Edge``)."""
    text = SYNC_HEADER.read_text()
    body = text[text.index("enum Edge") : text.index("kEdgeCount")]
    return re.findall(r"^\s*(kEdge\w+),", body, flags=re.MULTILINE)


def edge(name: str) -> int:
    return edge_names().index(name)


def _lib() -> ctypes.CDLL:
    """The device-path simulation: drops and mutations act on the emulator's instruction stream."""
    lib = ctypes.CDLL(str(LIB))
    lib.pa_sim_drop_sync.argtypes = [ctypes.c_int32]
    lib.pa_sim_mutate_sync.argtypes = [ctypes.c_int32, ctypes.c_int32]
    return lib


def _race_lib() -> ctypes.CDLL:
    lib = _lib()
    lib.pa_sim_race_name.restype = ctypes.c_char_p
    lib.pa_sim_race_run.argtypes = [ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(MockError)]
    return lib


def _outcome(res: dict[str, Any]) -> dict[str, Any]:
    return {"rc": res["rc"], "code": res["err"]["code"], "message": res["err"]["message"][:400],
            "passed": res.get("passed"), "summary": res.get("summary")}


def child_sweep(shard: int, shards: int) -> dict[str, Any]:
    """Shard ``shard`` of ``shards``: the baseline of every case (shard 0 only), then each of its edges (every
    ``shards``-th) dropped until one case fails.  Edges of one stage are neighbours in ``enum Edge``, so each
    edge first tries the case that caught the shard's previous edge, then the others in order."""
    lib = _lib()
    cases = DROP_CASES
    baseline = [_outcome(run_case(case)) for case in cases] if shard == 0 else []
    dropped: dict[int, dict[str, Any]] = {}
    first = 0
    for e in range(shard, lib.pa_sim_sync_point_count(), shards):
        lib.pa_sim_drop_sync(e)
        for i in [first, *(i for i in range(len(cases)) if i != first)]:
            out = {**_outcome(run_case(cases[i])), "case": i}
            if out["rc"] != 0:
                first = i
                break
        dropped[e] = out
    lib.pa_sim_drop_sync(-1)
    return {"count": lib.pa_sim_sync_point_count(), "baseline": baseline, "dropped": dropped}


def child_mutations(mutations: list[tuple[int, int]]) -> list[dict[str, Any]]:
    lib = _lib()
    results = []
    for kind, e in mutations:
        lib.pa_sim_mutate_sync(kind, e)
        out: dict[str, Any] = {"rc": 0}
        for case in DROP_CASES:
            out = _outcome(run_case(case))
            if out["rc"] != 0:
                break
        results.append(out)
    lib.pa_sim_mutate_sync(-1, -1)
    return results


def child_races() -> list[dict[str, Any]]:
    lib = _race_lib()
    results = []
    for i in range(lib.pa_sim_race_count()):
        row: dict[str, Any] = {"name": lib.pa_sim_race_name(i).decode()}
        for fixed in (0, 1):
            err = MockError()
            rc = lib.pa_sim_race_run(i, fixed, ctypes.byref(err))
            row["fixed" if fixed else "racy"] = {"rc": rc, "code": err.code, "message": err.message.decode()[:400]}
        results.append(row)
    return results


def child_padding() -> dict[str, Any]:
    """A ragged-tail case with and without the kernel's zero fill of the padding its P.V multiplies."""
    lib = _lib()
    lib.pa_sim_skip_zero_padding.argtypes = [ctypes.c_int32]
    results = {}
    for skip in (1, 0):
        lib.pa_sim_skip_zero_padding(skip)
        res = run_case(PADDING_CASE)
        results["skipped" if skip else "filled"] = {**_outcome(res), "finite": res.get("finite")}
    return results


#: Pinned seeds of the unchecked sweep: a negative control must not depend on a lucky schedule.
UNCHECKED_SEEDS = (1, 2, 3)


def child_unchecked(kind: str) -> dict[str, Any]:
    """Each intra-core edge of `kind` ("data" or "release", _is_data_edge) that is not a V barrier dropped, the
    checker off: the first seed and case whose output is wrong or whose launch faults, or None when every one matched
    the golden."""
    lib = _lib()
    lib.pa_sim_set_seed.argtypes = [ctypes.c_int64]
    shown: dict[str, Any] = {}
    for e, name in enumerate(edge_names()):
        if name in DEVICE_PATH_REDUNDANT or name.startswith("kEdgeBar") or _is_data_edge(name) != (kind == "data"):
            continue
        lib.pa_sim_drop_sync(e)
        shown[name] = None
        for seed in UNCHECKED_SEEDS:
            lib.pa_sim_set_seed(seed)
            for i, case in enumerate(DROP_CASES):
                out = _outcome(run_case({**case, "unchecked": True}))
                if out["rc"] != 0 or not out["passed"]:
                    shown[name] = {"seed": seed, "case": i, "rc": out["rc"], "message": out["message"][:200]}
                    break
            if shown[name] is not None:
                break
    lib.pa_sim_drop_sync(-1)
    lib.pa_sim_set_seed(-1)
    return shown


def run_child(*args: str, env: dict[str, str] | None = None) -> Any:
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), *args], capture_output=True, text=True,
                          timeout=CHILD_TIMEOUT_S, check=False, env={**os.environ, **(env or {})})
    assert proc.returncode == 0, f"simulation child failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


#: the sweep's edges run in this many child processes at once (CI's machine has two cores; pytest uses one)
SWEEP_SHARDS = 2


@cache
def sweep() -> dict[str, Any]:
    """Every edge dropped in turn, the edges dealt over ``SWEEP_SHARDS`` concurrent children and merged.

    The mad operand check off: a dropped edge can let the cube multiply data not yet written, which that check
    reports before the hazard checker does; the sweep shows the hazard checker alone catches every edge."""
    env = {**os.environ, "PA_SIM_MAD_INPUT_CHECK": "0"}
    procs = [subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "sweep", str(shard), str(SWEEP_SHARDS)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for shard in range(SWEEP_SHARDS)]
    parts = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=CHILD_TIMEOUT_S)
        assert proc.returncode == 0, f"simulation child failed ({proc.returncode}):\n{stderr[-4000:]}"
        parts.append(json.loads(stdout.strip().splitlines()[-1]))
    count = parts[0]["count"]
    assert all(part["count"] == count for part in parts), "the shards saw different edge counts"
    dropped = {int(e): out for part in parts for e, out in part["dropped"].items()}
    assert sorted(dropped) == list(range(count)), "the shards did not sweep every edge once"
    return {"count": count, "baseline": parts[0]["baseline"], "dropped": dropped}


@cache
def races() -> list[dict[str, Any]]:
    return run_child("races")


@needs_sim
def test_edge_names_mirror_the_library() -> None:
    assert len(edge_names()) == sweep()["count"] > 0


@needs_sim
def test_drop_cases_pass_with_every_edge() -> None:
    """The cases the sweep relies on are clean: no hazard and the golden's accuracy with all edges in place."""
    for case, out in zip(DROP_CASES, sweep()["baseline"], strict=True):
        assert out["rc"] == 0, (case, out)
        assert out["passed"], (case, out)


def _load_bearing(allowed: set[str]) -> None:
    dropped = sweep()["dropped"]
    survivors = {edge_names()[int(e)] for e, out in dropped.items() if out["rc"] == 0}
    assert survivors <= allowed, f"edges that survive being dropped: {sorted(survivors - allowed)}"
    wrong = {edge_names()[int(e)]: out for e, out in dropped.items() if out["rc"] not in (0, HAZARD)}
    assert not wrong, f"edges whose removal fails with something else than HAZARD: {wrong}"
    for out in dropped.values():
        if out["rc"]:
            assert out["code"] == HAZARD and ("hazard" in out["message"].lower() or "flag" in out["message"]), out


@needs_sim
def test_every_sync_edge_is_load_bearing_on_the_device_path() -> None:
    """Dropping an edge ends a launch of the kernel's A2/A3 code with PA_ERR_HAZARD, except where the A2/A3
    instruction stream orders the two ends by itself (DEVICE_PATH_REDUNDANT, each with its reason)."""
    _load_bearing(set(DEVICE_PATH_REDUNDANT))


MUTATIONS = {
    "K/V sub-tile loaded: set from the scalar pipe": (MUTATE_WRONG_SOURCE, "kEdgeKvLoaded0"),
    "S accumulator ready: set from the scalar pipe": (MUTATE_WRONG_SOURCE, "kEdgeSAccReady1"),
    "S rows in UB: set from the scalar pipe": (MUTATE_WRONG_SOURCE, "kEdgeSLoaded"),
    "output cast: set from the scalar pipe": (MUTATE_WRONG_SOURCE, "kEdgeOutReady"),
    "K/V L1 halves on one event": (MUTATE_SHARED_EVENT, "kEdgeKvLoaded1"),
    "K/V L1 free halves on one event": (MUTATE_SHARED_EVENT, "kEdgeKvL1Free1"),
    "L0 halves on one event": (MUTATE_SHARED_EVENT, "kEdgeL0Ready1"),
    "S accumulator halves on one event": (MUTATE_SHARED_EVENT, "kEdgeSAccFree1"),
    "S ready signalled from the scalar pipe": (MUTATE_SIGNAL_PIPE, "kEdgeQkReady0"),
    "P ready signalled from the scalar pipe": (MUTATE_SIGNAL_PIPE, "kEdgeSoftmaxReady1"),
    "O_tmp ready signalled from the scalar pipe": (MUTATE_SIGNAL_PIPE, "kEdgeUpdateReady0"),
    "split partials barrier from the scalar pipe": (MUTATE_SIGNAL_PIPE, "kEdgeReduceBarrier"),
    "MLA: P in L1 set from the scalar pipe": (MUTATE_WRONG_SOURCE, "kEdgePLoaded"),
    "MLA: accumulator round trip stored, set from the scalar pipe": (MUTATE_WRONG_SOURCE, "kEdgeAccUbFree"),
}


@needs_sim
def test_mutated_sync_meanings_are_hazards() -> None:
    names = sorted(MUTATIONS)
    results = run_child("mutations", json.dumps([(MUTATIONS[n][0], edge(MUTATIONS[n][1])) for n in names]))
    missed = {n: r for n, r in zip(names, results, strict=True) if r["rc"] != HAZARD}
    assert not missed, f"mutations the checker did not report as HAZARD: {missed}"


def _is_data_edge(name: str) -> bool:
    """A read-after-write edge (the consumer reads what the producer wrote), as opposed to a buffer's release."""
    return "Free" not in name


@needs_sim
def test_missing_flags_corrupt_data_without_the_checker() -> None:
    """With the pipes retiring out of order, dropping a read-after-write edge gives a wrong output or a fault with
    the checker off, as it would on a device."""
    shown = run_child("unchecked", "data")
    survived = sorted(name for name, out in shown.items() if out is None)
    assert shown and not survived, f"data edges the output survives: {survived}"


@needs_sim
@pytest.mark.slow  # ~30 s on 2 cores: a release the output survives runs every seed and drop case
def test_missing_releases_mostly_corrupt_data_without_the_checker() -> None:
    """A buffer release (the writer must lag the reader) dropped with the checker off shows on most edges: the
    reordering lets the next write overtake the read (the checker-on sweep guards every one of them)."""
    shown = run_child("unchecked", "release")
    survived = sorted(name for name, out in shown.items() if out is None)
    assert shown and len(survived) * 4 <= len(shown), f"releases the output survives: {survived} of {list(shown)}"


@needs_sim
@pytest.mark.slow  # ~80 s on 2 cores: every data edge dropped over every drop case, in program order
def test_program_order_hides_missing_flags() -> None:
    """The contrast: with every instruction retired at issue (PA_SIM_IN_FLIGHT=0) most dropped data edges go
    unseen without the checker; the reordering is what shows them (an experiment on the emulator, not a guard of
    the kernel: slow)."""
    data = run_child("unchecked", "data", env={"PA_SIM_IN_FLIGHT": "0"})
    survived = [name for name, out in data.items() if out is None]
    assert len(survived) * 2 >= len(data), f"only {survived} of {data} survive in program order"


#: What each race library kernel's defect ends in: the hazard checker's report, or (a wait nothing sets) the
#: scheduler's DEADLOCK, where the device hangs.  By name, so a reordered library cannot pair the wrong ones.
RACE_FAILURES = {"a wait_flag with no set_flag (the device hangs)": "DEADLOCK"}


@needs_sim
def test_race_library_has_at_least_ten_kernels() -> None:
    assert len(races()) >= 10


@needs_sim
@pytest.mark.parametrize("index", range(15))
def test_race_fails_and_its_fixed_twin_passes(index: int) -> None:
    rows = races()
    if index >= len(rows):
        pytest.skip("fewer race kernels in this build")
    row = rows[index]
    failure = RACE_FAILURES.get(row["name"], "HAZARD")
    code = HAZARD if failure == "HAZARD" else int(abi.ErrorCode.INTERNAL)
    assert row["racy"]["rc"] == code and row["racy"]["code"] == code, row
    assert failure in row["racy"]["message"], row
    assert row["fixed"]["rc"] == 0, row


@needs_sim
def test_the_device_path_ignores_k_padding() -> None:
    """On the device path (hostile NaN on-chip memory, mad as ASC's Mmad page documents it: a fractal's padding
    beyond the valid k is ignored) the ragged tail is right with and without the zero fill, which the kernel keeps
    until a device confirms that page."""
    res = run_child("padding")
    assert res["filled"]["rc"] == 0 and res["filled"]["passed"], res
    assert res["skipped"]["rc"] == 0 and res["skipped"]["passed"], res


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "sweep":
        print(json.dumps(child_sweep(int(sys.argv[2]), int(sys.argv[3]))))
    elif mode == "mutations":
        print(json.dumps(child_mutations([tuple(m) for m in json.loads(sys.argv[2])])))
    elif mode == "padding":
        print(json.dumps(child_padding()))
    elif mode == "unchecked":
        print(json.dumps(child_unchecked(sys.argv[2])))
    elif mode == "races":
        print(json.dumps(child_races()))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
