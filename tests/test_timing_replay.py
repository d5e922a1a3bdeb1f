"""The timing model's replay on traces with known answers, and the trace mirror against the simulation.

Synthetic traces use a stand-in cost table with round numbers (1 GHz, 100 GB/s per pipe, one cycle per vector
element), so each expected time can be written down by hand: a lone load, two pipes overlapping, a flag that
serialises them, cores sharing HBM, short strided bursts against one long burst, a cube->vector->cube hand-off
chain.  The last test records a real launch in the simulation and replays it.
"""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
for path in (ROOT, TESTS):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from timing import trace as tr  # noqa: E402
from timing.costs import CostTables, load_cost_tables  # noqa: E402
from timing.model import ModelConstants  # noqa: E402
from timing.replay import replay  # noqa: E402

OPS = ("TLOAD", "TSTORE", "TMOV", "TEXTRACT", "TEXPANDS_L1", "TMATMUL", "TMATMUL_ACC", "TEXP")
PIPE_BYTES_PER_S = 100e9
K_SLOT = 1  # the K cache: HBM traffic


@dataclass(frozen=True)
class RoundCosts:
    """A stand-in for timing.costs.CostTables with numbers a reader can check by hand."""

    frequency_hz: float = 1e9
    intrinsics = MappingProxyType({})  # no device intrinsics: the synthetic traces use tile ops

    def vector_cycles(self, op: str, dtype: str, rows: int, cols: int) -> float:
        return float(rows * cols)

    def matmul_cycles(self, m: int, k: int, n: int, dtype: str) -> float:
        return float(m * k * n) / 4096

    def transfer_cycles(self, pipe_key: str, nbytes: int) -> float:
        return nbytes / PIPE_BYTES_PER_S * self.frequency_hz


#: no floor, no latency, HBM far above one core's pipes unless a test lowers it
CONSTANTS = ModelConstants(launch_floor_s=0.0, handoff_latency_s=0.0, hbm_peak_bytes_per_s=1e15, hbm_efficiency=1.0)


def ev(core: int = 0, role: int = 0, kind: int = tr.EV_INSTR, pipe: int = tr.PIPE_MTE2, **fields: int) -> dict:
    return {"core": core, "role": role, "kind": kind, "pipe": pipe, "slot": tr.NO_SLOT, **fields}


def load(nbytes: int, burst: int | None = None, **kw: int) -> dict:
    burst = burst or nbytes
    return ev(op=OPS.index("TLOAD"), bytes=nbytes, burst_bytes=burst, bursts=nbytes // burst, slot=K_SLOT,
              elem_bytes=2, rows=nbytes // burst, cols=burst // 2, **kw)


def vec(elements: int, **kw: int) -> dict:
    return ev(pipe=tr.PIPE_V, op=OPS.index("TEXP"), rows=1, cols=elements, elem_bytes=4, **kw)


def make_trace(events: list[dict], block_dim: int = 1) -> tr.Trace:
    arr = np.zeros(len(events), dtype=tr.TRACE_DTYPE)
    for i, e in enumerate(events):
        for name, value in e.items():
            arr[i][name] = value
    return tr.Trace(arr, OPS, block_dim)


def predict_us(events: list[dict], constants: ModelConstants = CONSTANTS) -> float:
    return replay(make_trace(events), RoundCosts(), constants).predicted_us


def test_a_lone_load_takes_bytes_over_bandwidth() -> None:
    assert predict_us([load(1_000_000)]) == pytest.approx(10.0)  # 1 MB at 100 GB/s


def test_two_pipes_overlap_without_a_flag() -> None:
    # 10 µs load on MTE2 and 5 µs of vector work on V, independent: the longer one
    assert predict_us([load(1_000_000), vec(5_000)]) == pytest.approx(10.0)


def test_a_flag_serialises_two_pipes() -> None:
    events = [load(1_000_000), ev(kind=tr.EV_SET, pipe=tr.PIPE_MTE2, src=tr.PIPE_MTE2, dst=tr.PIPE_V, id=0),
              ev(kind=tr.EV_WAIT, pipe=tr.PIPE_V, src=tr.PIPE_MTE2, dst=tr.PIPE_V, id=0), vec(5_000)]
    assert predict_us(events) == pytest.approx(15.0)


def test_cores_share_hbm() -> None:
    # 24 cores x 1 MB at 100 GB/s each would take 10 µs; 24 MB through 1.2 TB/s of HBM take 20 µs
    events = [load(1_000_000, core=c) for c in range(24)]
    constants = replace(CONSTANTS, hbm_peak_bytes_per_s=1.5e12, hbm_efficiency=0.8)
    pred = replay(make_trace(events, 24), RoundCosts(), constants)
    assert pred.predicted_us == pytest.approx(20.0, rel=1e-3)
    assert pred.bound == "HBM"
    assert pred.hbm_stretch == pytest.approx(2.0, rel=1e-3)


def test_a_warm_l2_serves_the_inputs_at_the_per_core_l2_rate() -> None:
    """Under warm-L2 conditions no transfer occupies HBM: the same 24 loads that HBM stretches to 20 µs take
    what each core's pipe (1 MB at 100 GB/s: 10 µs) or its L2 rate (at 40 GB/s: 25 µs) allows."""
    events = [load(1_000_000, core=c) for c in range(24)]
    constants = replace(CONSTANTS, hbm_peak_bytes_per_s=1.5e12, hbm_efficiency=0.8)
    warm = replay(make_trace(events, 24), RoundCosts(), constants, inputs_in_l2=True)
    assert warm.predicted_us == pytest.approx(10.0) and warm.hbm_bytes == 0 and warm.bound != "HBM"
    slow_l2 = replace(constants, l2_bytes_per_s_per_core=40e9)
    assert replay(make_trace(events, 24), RoundCosts(), slow_l2, inputs_in_l2=True).predicted_us == \
        pytest.approx(25.0)
    # negative control: the same trace cold is HBM's
    assert replay(make_trace(events, 24), RoundCosts(), constants).predicted_us == pytest.approx(20.0, rel=1e-3)


def test_ifa_is_compared_on_the_basis_its_time_was_measured_on() -> None:
    """IFA's published times came from a harness without an L2 flush: a launch that fits the L2 is compared with
    the warm prediction, one that does not with the cold one; a shape IFA did not publish gets nothing."""
    from timing.published import ifa_harness_kept_l2, versus_ifa

    model = ModelConstants()
    b16, b64 = "b16_h32kv8_d128_ctx2k_bs128_fp16", "b64_h32kv8_d128_ctx2k_bs128_fp16"
    assert ifa_harness_kept_l2(b16) and ifa_harness_kept_l2(b64)
    assert model.fits_l2(134_000_000) and not model.fits_l2(537_000_000)
    warm = versus_ifa(b16, (116.0, 158.0), (85.0, 130.0))
    assert warm["ifa_basis"] == "warm L2" and warm["speedup_vs_ifa"] == pytest.approx(102.4 / 85.0, abs=1e-3)
    assert warm["speedup_vs_ifa_cold"] == pytest.approx(102.4 / 116.0, abs=1e-3)
    cold = versus_ifa(b64, (448.8, 601.9), None)
    assert cold["ifa_basis"] == "cold" and cold["speedup_vs_ifa_pessimistic"] == pytest.approx(533.7 / 601.9, abs=1e-3)
    assert versus_ifa("b16_h40kv8_d128_ctx4k_bs128_bf16", (1.0, 1.0), (1.0, 1.0)) == {}


def test_short_strided_bursts_cost_more_than_one_long_burst() -> None:
    long_us = predict_us([load(65536)])
    short_us = predict_us([load(65536, burst=32)])
    mid_us = predict_us([load(65536, burst=128)])
    assert short_us == pytest.approx(long_us / CONSTANTS.dma_efficiency_32b)
    assert long_us < mid_us < short_us
    # a long burst whose start is only 32-byte aligned is priced as 32-byte bursts
    assert predict_us([load(65536, gm_offset=32)]) == pytest.approx(short_us)
    assert predict_us([load(65536, gm_offset=1024)]) == pytest.approx(long_us)


def test_a_hand_off_chain_pays_each_latency() -> None:
    latency = 2e-6
    constants = replace(CONSTANTS, handoff_latency_s=latency)
    events = [
        load(100_000),                                                                    # cube: 1 µs
        ev(kind=tr.EV_SIGNAL, pipe=tr.PIPE_MTE2, dst=tr.TO_VECTORS, id=3),
        ev(kind=tr.EV_XWAIT, pipe=tr.PIPE_ALL, dst=tr.TO_CUBE, id=4),                     # cube waits for both
        load(100_000),                                                                    # then 1 µs more
    ]
    for sub in (1, 2):
        events += [ev(role=sub, kind=tr.EV_XWAIT, pipe=tr.PIPE_ALL, dst=tr.TO_VECTORS, id=3),
                   vec(3_000, role=sub),                                                  # 3 µs
                   ev(role=sub, kind=tr.EV_SIGNAL, pipe=tr.PIPE_V, dst=tr.TO_CUBE, id=4)]
    # 1 + 2 (latency) + 3 + 2 (latency) + 1
    assert predict_us(events, constants) == pytest.approx(9.0)


def test_launch_floor_is_added_once() -> None:
    constants = replace(CONSTANTS, launch_floor_s=5e-6)
    assert predict_us([load(1_000_000)], constants) == pytest.approx(15.0)


def test_no_prediction_beats_the_hbm_bound() -> None:
    events = [load(4_000_000, core=c) for c in range(24)]
    pred = replay(make_trace(events, 24), RoundCosts(), replace(CONSTANTS, hbm_peak_bytes_per_s=1.6e12))
    assert pred.predicted_us >= 24 * 4_000_000 / 1.6e12 * 1e6


def test_perturbed_constants_scale_one_field() -> None:
    k = ModelConstants()
    assert k.perturbed("hbm_efficiency", 1.25).hbm_efficiency == pytest.approx(k.hbm_efficiency * 1.25)
    assert "cube_cores" not in k.names()


def test_band_ends_bracket_the_nominal_prediction() -> None:
    from timing.model import at_band_end

    events = [load(1_000_000, burst=256, core=c) for c in range(24)] + [vec(2_000)]
    nominal = predict_us(events, ModelConstants())
    fast = predict_us(events, at_band_end(ModelConstants(), 0))
    slow = predict_us(events, at_band_end(ModelConstants(), 1))
    assert fast < nominal < slow


# ---- the simulation's trace ---------------------------------------------------------------------------------
from test_sim_kernel import BASE, LIB, needs_sim, run_case  # noqa: E402


@pytest.fixture
def cost_tables() -> CostTables:
    """pto-isa's A2/A3 cost tables, or a skip that says why they are missing."""
    try:
        return load_cost_tables()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


@needs_sim
def test_device_trace_mirror_matches_the_library() -> None:
    lib = ctypes.CDLL(str(LIB))
    tr.declare(lib)
    assert lib.pa_sim_trace_event_bytes() == tr.TRACE_DTYPE.itemsize
    from tiling.abi import ArgSlot

    assert tr.KV_SLOTS == (ArgSlot.K, ArgSlot.V)


@needs_sim
def test_the_device_stream_replays_every_intrinsic_it_holds(cost_tables: CostTables) -> None:
    """The emulator's instruction stream of a split-KV launch: every kind of event is there (the all-vector
    barrier too), every intrinsic has a price, the K/V bytes of its GM loads are the sim's own K/V figure, each
    mad carries m, k and n, and the replay ends every role's stream."""
    from timing.replay import DEVICE_GM_TRANSFERS, Pricer

    case = {**BASE, "lens": [300, 1000], "hq": 8, "hkv": 2, "d": 128, "bs": 128, "cores": 4,
            "strategy": "split_kv"}
    lib = ctypes.CDLL(str(LIB))
    result: dict = {}
    trace = tr.capture(lib, lambda: result.update(run_case(case)), 4)
    assert result["rc"] == 0 and result["passed"], result
    ev = trace.events
    assert {tr.EV_INSTR, tr.EV_SET, tr.EV_WAIT, tr.EV_BARRIER, tr.EV_SIGNAL, tr.EV_XWAIT, tr.EV_ALLVEC} <= set(
        ev["kind"].tolist())
    names = np.array(trace.op_names)[ev["op"]]
    instr = ev["kind"] == tr.EV_INSTR
    assert {"mad", "copy_gm_to_cbuf_multi_nd2nz_b16", "vexp", "copy_matrix_cc_to_gm"} <= set(names[instr].tolist())
    pricer = Pricer(cost_tables, ModelConstants(), trace.op_names)
    for i in np.unique(ev[instr]["op"]):
        first = ev[instr & (ev["op"] == i)][0]
        assert pricer.price(first).seconds >= 0, trace.op_names[i]
    kv = tr.kv_loads(ev) & np.isin(names, list(DEVICE_GM_TRANSFERS))
    assert int(ev[kv]["bytes"].sum()) == result["stats"]["kv_read_bytes"]
    mads = ev[instr & (names == "mad")]
    assert (mads["rows"] > 0).all() and (mads["k"] > 0).all() and (mads["cols"] > 0).all()
    pred = replay(trace, cost_tables)
    assert pred.predicted_us * 1e-6 >= pred.hbm_bytes / 1.6e12
    assert len(pred.end_s) == 4 * 3


def test_an_intrinsic_without_a_price_is_an_error(cost_tables: CostTables) -> None:
    """A new intrinsic in the device stream must get a price: it is never free by default."""
    from timing.replay import Pricer

    pricer = Pricer(cost_tables, ModelConstants(), ("vfancy", "set_vector_mask"))
    event = {"op": 0, "pipe": tr.PIPE_V, "rows": 4, "cols": 0, "k": 0, "elem_bytes": 4, "bytes": 1024, "slot": 255,
             "burst_bytes": 0, "gm_offset": 0}
    with pytest.raises(KeyError):
        pricer.price(event)
    assert pricer.price({**event, "op": 1, "pipe": tr.PIPE_S}).seconds == 0.0


@needs_sim
def test_bench_predict_writes_predictions_and_a_trace(tmp_path: Path) -> None:
    """``--predict`` on a small shape: the pa-kit record carries predicted_us and the trace opens as JSON."""
    pytest.importorskip("timing.costs")
    import json

    from bench_pa_performance import main

    out, trace_file = tmp_path / "r.json", tmp_path / "t.json"
    rc = main(["--predict", "--batch", "2", "--heads", "8", "--kv-heads", "2", "--head-dim", "64", "--ctx", "300",
               "--baselines", "none", "--iters", "1", "--warmup", "0", "--json", str(out), "--trace", str(trace_file)])
    assert rc == 0
    records = [r for r in json.loads(out.read_text())["records"] if r["implementation"] == "pa-kit"]
    assert records and records[0]["predicted_us"] > 0 and records[0]["prediction"]["bound"]
    spans = [e for e in json.loads(trace_file.read_text())["traceEvents"] if e["ph"] == "X"]
    assert spans and {e["name"] for e in spans} >= {"copy_gm_to_cbuf_multi_nd2nz_b16", "mad"}  # the device stream


def test_predict_refuses_another_backend() -> None:
    from bench_pa_performance import main

    assert main(["--predict", "--backend", "mock", "--batch", "1", "--baselines", "none"]) != 0
    assert main(["--trace", "x.json", "--batch", "1", "--baselines", "none"]) != 0


@pytest.mark.parametrize("frozen", ["predictions.json", "predictions-2026-11-28.json",
                                    "predictions-2026-11-28-l2.json"])
def test_committed_predictions_keep_the_protocols_rules(frozen: str) -> None:
    """Both frozen files (the CPU build's trace, then the device stream's): every shape at or above its HBM floor
    (rule 4), band around the nominal value (rule 5), and no HBM-bound shape faster than the best measured
    kernel of our access pattern (rule 3) unless its trace shows the structural reason (longer K/V bursts)."""
    import json

    from timing.model import ModelConstants
    from timing.predictions import ENVELOPE_KV_BURST_BYTES, ENVELOPE_TB_PER_S, OUT, OUT_COLD, OUT_CPU

    path = OUT.parent / frozen
    assert path in (OUT, OUT_COLD, OUT_CPU)
    doc = json.loads(path.read_text())
    assert {row["shape_id"] for row in doc["shapes"]} >= {"b64_h32kv8_d128_ctx2k_bs128_fp16"}
    for row in doc["shapes"]:
        low, high = row["band_us"]
        assert row["hbm_floor_us"] <= low <= row["predicted_us"] <= high, row
        if row["bound"] == "HBM" and row["predicted_tb_per_s"] > ENVELOPE_TB_PER_S * 1.01:
            # only with rule 3's structural reason in the trace: K/V bursts longer than the envelope kernel's
            assert row["above_envelope"] and min(row.get("kv_burst_bytes", [0])) > ENVELOPE_KV_BURST_BYTES, row
        if row.get("fits_l2"):  # a warm L2 never slows a launch, nor beats every core's L2 share at once
            low, high = row["band_warm_l2_us"]
            k = ModelConstants()
            l2_floor_us = row["total_bytes"] / (k.cube_cores * k.l2_bytes_per_s_per_core * 1.25) * 1e6
            assert l2_floor_us <= low <= row["predicted_warm_l2_us"] <= high, row
            assert row["predicted_warm_l2_us"] <= row["predicted_us"] * 1.001, row
        if "fits_l2" in row and "ifa_published_us" in row:  # IFA on its own basis (rule 7)
            basis = row["predicted_warm_l2_us"] if row["ifa_basis"] == "warm L2" else row["predicted_us"]
            assert row["speedup_vs_ifa"] == pytest.approx(row["ifa_published_us"] / basis, abs=2e-3), row


def test_the_newest_frozen_predictions_meet_the_targets_against_ifa() -> None:
    """docs/TIMING_MODEL.md's targets, on IFA's own basis and at the nominal constants: every published shape at
    least as fast as IFA, b16 (the one shape the cold model has slower) at least 1.1x."""
    import json

    from timing.predictions import OUT

    rows = {row["shape_id"]: row for row in json.loads(OUT.read_text())["shapes"] if "ifa_published_us" in row}
    assert len(rows) == 13
    assert all(row["speedup_vs_ifa"] >= 1.0 for row in rows.values()), rows
    b16 = rows["b16_h32kv8_d128_ctx2k_bs128_fp16"]
    assert b16["ifa_basis"] == "warm L2" and b16["speedup_vs_ifa"] >= 1.1


def test_first_contact_compares_with_the_newest_frozen_predictions() -> None:
    from timing.predictions import OUT
    from tools.contact_report import PREDICTIONS

    assert PREDICTIONS == OUT and OUT.is_file()


def test_handoff_table_counts_follow_the_plan() -> None:
    """The hand-off table's counts come from the plan with the hand-off forced (no simulation here)."""
    from timing import handoff_table as ht

    assert ht.handoff_tokens("whole", 3000) == 3072 and ht.handoff_tokens("1024", 3000) == 1024
    r512, r1024 = ht.row(1, 2048, "512", 0.0), ht.row(1, 2048, "1024", 0.0)
    assert r512.predicted_us is None and r512.tokens_per_task == r1024.tokens_per_task
    assert (r512.handoffs_per_task, r1024.handoffs_per_task) == (-(-r512.tokens_per_task // 512), 1)
    assert r1024.syncs_per_task == 4 and r1024.rescales_per_task == 0
    assert r1024.scratch_kib_per_core == 2 * r512.scratch_kib_per_core  # S+P stages grow with the hand-off


def test_ragged_table_forces_a_split_count_through_the_planner_grid() -> None:
    """``timing.ragged --kvcn`` plans the split-KV grid of that many ranges (no simulation here)."""
    from tiling import planner
    from timing import ragged

    lens = np.array([4000, 300, 17, 2500])
    kw = {"num_heads": 32, "num_kv_heads": 8, "head_dim": 128, "block_size": 128, "max_pages": 32,
          "num_blocks": 1000, "scale": 0.1}
    grid_kw = {"num_heads": 32, "num_kv_heads": 8, "block_size": 128, "core_count": 24}
    plan = planner.plan_paged_attention(lens, **kw, grid=ragged.split_count_grid(lens, 7, **grid_kw))
    assert (plan.strategy, plan.kv_core_num, plan.kv_split_tokens, plan.split.former_head) == ("split_kv", 7, 640, 32)
    with pytest.raises(ValueError, match="exactly 9 ranges"):
        ragged.split_count_grid(lens, 9, **grid_kw)  # 32 pages: ranges of 4 pages make 8, of 3 pages 11
    assert planner.plan_paged_attention(lens, **kw).kv_core_num != 7  # nothing left behind


@needs_sim
def test_a_forced_grid_is_traced_and_replayed_with_its_band(cost_tables: CostTables) -> None:
    """``trace_of(grid=...)`` (what ``timing.plan_search`` and ``timing.ragged --kvcn`` replay) plans the given
    grid for the simulated launch, and a candidate's report carries its band."""
    from timing import plan_search
    from timing.predictions import trace_of
    from workloads.shapes import uniform_shape

    shape = uniform_shape(1, 1024, num_heads=8, num_kv_heads=2, head_dim=128, block_size=128)
    cores = plan_search.DEFAULT.cube_cores
    split = [c for c in plan_search.candidates(shape, cores) if c.kv_core_num > 1]
    assert split, "the shape should have split-KV candidates"
    _, plan = trace_of(shape, cores, with_plan=True, grid=plan_search.candidate_grid(shape, split[0], cores))
    assert (plan.strategy, plan.kv_core_num) == ("split_kv", split[0].kv_core_num)
    nominal, band = plan_search.with_band(shape, split[0]).removesuffix("]").split(" µs [band ")
    low, high = (float(x) for x in band.split("-"))
    assert low <= high and float(nominal) == pytest.approx(plan_search.predicted(shape, split[0]), abs=0.06)


@needs_sim
def test_the_fix_lever_prices_only_the_cubes_l0c_stores() -> None:
    """``timing.levers``' FIX x2 (the L0C -> GM rate a device may show above pto-isa's table): at 128 MLA heads,
    where the cube's FIX pipe bounds a unit, it shortens the launch; a factor of 1 is today's replay exactly."""
    from timing import levers
    from timing.model import DEFAULT
    from timing.predictions import trace_of
    from workloads.shapes import mla_shape

    shape = mla_shape(1, 1024, num_heads=128, dtype="fp16")
    trace = trace_of(shape, 1)
    today = levers.predicted_us(trace, DEFAULT)
    assert levers.predicted_us(trace, DEFAULT, fix_rate_factor=1.0) == today
    assert levers.predicted_us(trace, DEFAULT, fix_rate_factor=2.0) < 0.9 * today
    rows = levers.fix_grid(shape, trace, 1)  # --fix-grid: x1 at the prior hand-off is today's replay
    assert len(rows) == 2 + len(levers.FIX_GRID_FACTORS)
    assert rows[2].startswith(f"| x1 | {today:.1f} µs, ")
    with pytest.raises(SystemExit):
        levers.main(["--mla", "16,128,8192"])
