"""The NPU kernel's MLA path (ABI v5, issue #39) on the device-path simulation (``libpa_sim.so``).

Each launch is planned by the planner (``rope_dim=64``), with inputs fresh per case, pages shuffled over more pages
than needed, output, lse and workspace NaN-poisoned (:func:`test_sim_kernel.run_case`), and judged by the one float64
golden (:func:`accuracy.reference.mla_reference`).  Both rescales of the output accumulator run: AMLA's (the
running max on the grid of multiples of ln 2, the rescale an integer add to the accumulator's fp32 bits) and the
plain one (read, multiply, write back).  The hazard sweep covers the MLA path's edges (tests/test_sim_hazards.py).
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from test_sim_kernel import needs_sim, run_case, run_in_child  # noqa: E402

from tiling import abi  # noqa: E402

RESCALES = ("plain", "pow2")
#: The mock's MLA factors (tests/test_mla_mock.py CASES): every head count DeepSeek-V3 runs at TP 1..8, q_len 1, 2
#: (MTP), 4 and 16, fp16/bf16, pages of 16..128 tokens, each strategy.
CASES: list[dict[str, Any]] = [
    dict(hq=16, q_len=1, dtype="fp16", bs=64, strategy="auto"),
    dict(hq=16, q_len=4, dtype="bf16", bs=128, strategy="bn"),
    dict(hq=32, q_len=1, dtype="bf16", bs=128, strategy="auto"),
    dict(hq=32, q_len=2, dtype="fp16", bs=64, strategy="split_kv"),
    dict(hq=64, q_len=1, dtype="fp16", bs=128, strategy="split_kv"),
    dict(hq=64, q_len=2, dtype="bf16", bs=64, strategy="auto"),
    dict(hq=128, q_len=1, dtype="bf16", bs=64, strategy="bn"),
    dict(hq=128, q_len=2, dtype="fp16", bs=128, strategy="auto"),
    dict(hq=7, q_len=16, dtype="bf16", bs=16, strategy="auto"),
    dict(hq=1, q_len=1, dtype="fp16", bs=32, strategy="split_kv"),
]
LATENT_ROW_BYTES = (abi.MLA_LATENT_DIM + abi.MLA_ROPE_DIM) * 2
#: the latent (rope aside) of one 128-token unit, fp16/bf16
UNIT_LATENT_BYTES = 128 * abi.MLA_LATENT_DIM * 2


def mla_case(index: int, rescale: str, **extra: Any) -> dict[str, Any]:
    """Case `index` as a run_case spec: a ragged batch with an empty row, a one-token row and a multi-unit one."""
    spec = CASES[index]
    q = spec["q_len"]
    return {**spec, "mla": rescale, "lens": [0, q, q + 45, 300 + q, 611], "cores": 8, "lse": True,
            "seed": 100 + index, **extra}


def case_id(index: int) -> str:
    return "-".join(f"{k}{v}" for k, v in CASES[index].items())


def passed(res: dict[str, Any]) -> None:
    assert res["rc"] == 0, res["err"]["message"]
    assert res["passed"], (res.get("summary"), res.get("lse_summary"))


#: The default run keeps one case per head count under 'plain' and the 128-head MTP and 16-head cases under 'pow2'
#: (the CI budget: the whole default run < 10 min on 2 cores); the rest run with -m slow.
DEFAULT_CASES = {("plain", 0), ("plain", 2), ("plain", 4), ("plain", 6), ("plain", 8), ("pow2", 7), ("pow2", 0)}
PARAMS = [pytest.param(index, rescale, id=f"{case_id(index)}-{rescale}",
                       marks=() if (rescale, index) in DEFAULT_CASES else pytest.mark.slow)
          for index in range(len(CASES)) for rescale in RESCALES]


@needs_sim
@pytest.mark.parametrize(("index", "rescale"), PARAMS)
def test_mla_case_on_the_device_path_matches_the_golden(index: int, rescale: str) -> None:
    passed(run_case(mla_case(index, rescale)))


@needs_sim
def test_each_latent_byte_is_read_once_per_split() -> None:
    """128 heads in one task read each latent and rope byte of a sequence once, as 16 heads do; a split-KV plan reads
    each split's range once (the splits cover each sequence once)."""
    lens = [611, 0, 300, 1]
    expected = sum(lens) * LATENT_ROW_BYTES
    for hq, strategy in ((128, "bn"), (16, "bn"), (64, "split_kv")):
        res = run_case({"mla": "plain", "hq": hq, "q_len": 1, "dtype": "fp16", "bs": 64, "lens": lens, "cores": 4,
                        "strategy": strategy})
        passed(res)
        if strategy == "split_kv":
            assert res["kvcn"] > 1
        assert res["stats"]["kv_read_bytes"] == expected, (hq, strategy, res["stats"]["kv_read_bytes"], expected)


@needs_sim
@pytest.mark.parametrize(("hq", "rescale"), [(16, "plain"), pytest.param(128, "pow2", marks=pytest.mark.slow)])
def test_a_uniform_batch_cut_in_its_last_round_matches_the_golden(hq: int, rescale: str) -> None:
    """ABI v6 on the device path: seven sequences of 600 tokens on 3 cores run six whole in the tail pass (written
    straight to o under the split-KV key) and one cut into 3 ranges, combined; every row matches the golden, and
    each latent byte is read once (the tail's sequences once, the cut one once over its ranges)."""
    lens = [600] * 7
    res = run_case({"mla": rescale, "hq": hq, "q_len": 1, "dtype": "fp16", "bs": 64, "lens": lens, "cores": 3,
                    "lse": True, "seed": 61})
    passed(res)
    assert res["kvcn"] == 3
    assert res["stats"]["kv_read_bytes"] == sum(lens) * LATENT_ROW_BYTES


@needs_sim
@pytest.mark.parametrize(("hq", "q_len", "rescale"), [(16, 1, "plain"),
                                                      pytest.param(128, 1, "pow2", marks=pytest.mark.slow),
                                                      pytest.param(64, 2, "plain", marks=pytest.mark.slow)])
def test_a_ragged_batch_on_the_balancers_grid_matches_the_golden(hq: int, q_len: int, rescale: str) -> None:
    """A ragged batch gets the balancer's split-KV grid under MLA's rule (tiling.mla_grid.mla_grid_rule: ranges
    of 5 pages for the longest of 1500 tokens, where the longest alone would plan one range each): every row
    matches the golden and each latent byte is read once."""
    lens = [1500, 40, 700, 16, 900, 300]
    res = run_case({"mla": rescale, "hq": hq, "q_len": q_len, "dtype": "bf16", "bs": 64, "lens": lens, "cores": 6,
                    "lse": True, "seed": 67})
    passed(res)
    assert res["kvcn"] == 5
    assert res["stats"]["kv_read_bytes"] == sum(lens) * LATENT_ROW_BYTES


@needs_sim
@pytest.mark.parametrize(("heads", "ahead"), [(16, 2), (64, 2), (72, 1), (128, 1)])
def test_tasks_of_at_most_64_rows_load_the_next_latent_before_the_first_matmul(heads: int, ahead: int) -> None:
    """A task of at most kMlaPrefetchRows rows holds three latent tiles, and each unit's Q.K^T first issues the load
    of the task's next unit (kernel/npu/PERFORMANCE.md, change 15): each cube core issues the latent loads of two
    units before its first matmul (whole units of 128 tokens), where a larger task issues one (in two halves,
    change 17)."""
    import numpy as np

    from timing import trace as tr
    from timing.predictions import trace_of
    from workloads.shapes import mla_shape

    trace = trace_of(mla_shape(2, 1024, num_heads=heads), 4)
    ev = trace.events
    mads = [i for i, name in enumerate(trace.op_names) if name == "mad"]
    cube = (ev["role"] == 0) & (ev["kind"] == tr.EV_INSTR)
    latent = cube & tr.kv_loads(ev)  # the latent cache (the rope part has a slot of its own)
    for core in np.unique(ev["core"][cube]):
        mine = ev["core"] == core
        first_mad = int(np.flatnonzero(mine & cube & np.isin(ev["op"], mads))[0])
        before = int(ev["bytes"][:first_mad][latent[:first_mad] & mine[:first_mad]].sum())
        assert before == ahead * UNIT_LATENT_BYTES, (heads, int(core), before / UNIT_LATENT_BYTES)


@needs_sim
def test_tasks_of_more_than_64_rows_put_the_next_q_k_between_a_p_v_s_slices() -> None:
    """On the two-tile path each P.V is fused with the Q.K^T two units later (kernel/npu/PERFORMANCE.md, change 18):
    in the cube's program order a Q.K^T matmul (k = 64 latent columns) sits between two P.V matmuls (k = a unit's
    128 tokens) of the same P.V, on every cube core (each runs one sequence of four units); a task of at most 64 rows
    keeps its matmuls in blocks."""

    from timing import trace as tr
    from timing.predictions import trace_of
    from workloads.shapes import mla_shape

    for heads, fused in ((128, True), (64, False)):
        trace = trace_of(mla_shape(2, 512, num_heads=heads), 2)
        mad = trace.op_names.index("mad")
        for (_, role), stream in trace.streams().items():
            if role != 0:
                continue
            ks = stream["k"][(stream["kind"] == tr.EV_INSTR) & (stream["op"] == mad)]
            order = "".join("Q" if k == 64 else "P" for k in ks)
            assert ("PQP" in order) == fused, (heads, order)


@needs_sim
def test_the_two_tile_path_loads_the_rope_with_the_latents_first_half() -> None:
    """On the two-tile path the rope of a unit lands with its latent's first half and the rope chunk runs before
    the second half's (kernel/npu/PERFORMANCE.md, change 23), so that after a fused step's last P.V slice only the
    second half is loaded: in each cube core's stream of cache loads every rope load (slot K_ROPE) sits between a
    unit's first and second half (slot K), never after both; a task of at most 64 rows loads a unit's latent, then
    its rope, whole (its control)."""
    from timing import trace as tr
    from timing.predictions import trace_of
    from workloads.shapes import mla_shape

    rope = int(abi.ArgSlot.K_ROPE)
    for heads, order in ((128, "LRL"), (64, "LR")):
        trace = trace_of(mla_shape(1, 512, num_heads=heads, block_size=128), 1)
        for (_, role), ev in trace.streams().items():
            if role != 0:
                continue
            cache = np.isin(ev["slot"], (*tr.KV_SLOTS, rope))  # the latent's loads name K or V (the same pointer)
            loads = (ev["kind"] == tr.EV_INSTR) & (ev["pipe"] == tr.PIPE_MTE2) & cache
            got = "".join("R" if slot == rope else "L" for slot in ev["slot"][loads])
            assert got == order * 4, (heads, got)


@needs_sim
def test_a_tasks_output_is_written_after_the_next_tasks_first_hand_over() -> None:
    """Two accumulators per core (one per task parity, ``MlaAcc``): a vector sub-core hands the next task's first P to
    the cube before it writes the finished task's output (one group after each later hand-over), so the cube's P.V
    does not wait for that output at a task boundary (kernel/npu/PERFORMANCE.md, change 20).  Two sequences of four
    units on one core: each sub-core signals the cube at least five times before its first output store; writing
    the output before the next task's first hand-over (one accumulator) made it four."""
    from timing import trace as tr
    from timing.predictions import trace_of
    from workloads.shapes import mla_shape

    trace = trace_of(mla_shape(2, 512, num_heads=32), 1)
    for (_, role), ev in trace.streams().items():
        if role == 0:
            continue
        instr = ev["kind"] == tr.EV_INSTR
        stores = np.flatnonzero(instr & (ev["pipe"] == tr.PIPE_MTE3) & (ev["slot"] == int(abi.ArgSlot.O)))
        assert len(stores), role
        signals = int(np.sum(ev["kind"][:stores[0]] == tr.EV_SIGNAL))
        assert signals >= 5, (role, signals)


@needs_sim
def test_a_units_row_sums_come_after_its_hand_over() -> None:
    """l's update is off the chain from the cube's S(u) to its P.V(u) (kernel/npu/PERFORMANCE.md, change 22): a
    sub-core casts each group's P, hands P(u) over, and only then sums the rows of the P it held in UB.  One
    sequence of 512 tokens at 32 heads on one core (16 rows a sub-core, one group a unit): each of the four row sums
    (vcadd) of a vector stream follows that unit's signal to the cube; summed before the hand-over (each group's sum
    beside its cast), each preceded it."""
    from timing import trace as tr
    from timing.predictions import trace_of
    from workloads.shapes import mla_shape

    trace = trace_of(mla_shape(1, 512, num_heads=32), 1)
    vcadd = trace.op_names.index("vcadd")
    for (_, role), ev in trace.streams().items():
        if role == 0:
            continue
        sums = np.flatnonzero((ev["kind"] == tr.EV_INSTR) & (ev["op"] == vcadd))
        signals = np.flatnonzero(ev["kind"] == tr.EV_SIGNAL)
        assert len(sums) == 4 and len(signals) >= 4, (role, len(sums), len(signals))
        assert all(sums[i] > signals[i] for i in range(4)), (role, sums, signals)


@needs_sim
def test_the_two_rescales_agree_within_tolerance_and_differ_where_amla_is_not_exact() -> None:
    """Both rescales pass the golden and give different bits (AMLA's max sits up to ln 2 above the exact one, so
    P = exp(S - m) rounds differently).  They part where AMLA's integer add is not a multiply: a latent column that
    is 0 in every token leaves that column of the accumulator +0.0, and adding n * 2^23 (n < 0) to the bits of +0.0
    makes a huge negative number or -inf; the plain multiply keeps 0 (docs/API.md, ``mla_rescale``).  The last
    page's keys are scaled up so that the running max moves in a later unit (a rescale happens)."""
    base = {"hq": 16, "q_len": 1, "dtype": "fp16", "bs": 64, "lens": [611], "cores": 1, "strategy": "bn",
            "return_output": True, "seed": 7}
    plain, pow2 = run_case({**base, "mla": "plain"}), run_case({**base, "mla": "pow2"})
    passed(plain)
    passed(pow2)
    assert plain["out_bits"] != pow2["out_bits"]
    zero = {**base, "zero_latent_column": 100, "return_output": False, "boost_last_page": 3.0}
    passed(run_case({**zero, "mla": "plain"}))
    amla = run_case({**zero, "mla": "pow2"})
    assert amla["rc"] != 0 or not amla["passed"], "AMLA's exponent add kept a zero column exact"


SEEDS = [random.SystemRandom().randrange(1, 2**53) for _ in range(3)]


@needs_sim
@pytest.mark.parametrize("seed", SEEDS, ids=[f"seed{s}" for s in SEEDS])
def test_mla_on_fresh_seeds(seed: int) -> None:
    """Interleavings, pipes out of order and hostile on-chip state from a fresh seed (printed): 128 heads with MTP
    on split-KV, and 16 heads of bf16, under each rescale."""
    print(f"PA_SIM_SEED={seed}")
    for spec in (mla_case(7, "pow2", strategy="split_kv"), mla_case(0, "plain", dtype="bf16")):
        res = run_in_child(spec, env={"PA_SIM_SEED": str(seed)})
        assert res["rc"] == 0, f"PA_SIM_SEED={seed}: {res['err']['message']}"
        assert res["passed"], f"PA_SIM_SEED={seed}: {res.get('summary')}"
