"""Standalone check of the kernel's simulation through ctypes: the device-path simulation (``build/lib/libpa_sim.so``,
the kernel's A2/A3 code on the intrinsic emulator).

Each case runs in a child process (this file run as a script): a pto-isa on-chip overflow asserts and
aborts, and that must fail one case, not the test session.  The child plans with the tiling planner,
poisons output and workspace with NaN, launches, and compares against the project's float64 golden and
tolerance policy (accuracy/reference.py) on the same fp16/bf16-rounded inputs, gathered through a shuffled
block table over more pages than needed.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
LIB_DIR = Path(os.environ.get("PA_KIT_LIB_DIR", ROOT / "build" / "lib"))
LIB = LIB_DIR / "libpa_sim.so"
CASE_TIMEOUT_S = 600
EXTRA_PAGES = 7

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from accuracy.cases import DEEPSEEK_V3_SCALE  # noqa: E402
from accuracy.reference import Features, compare, compare_lse, mla_reference, reference  # noqa: E402
from launcher.library import load_library  # noqa: E402
from launcher.mock_api import MockConfig, MockError, last_error_text  # noqa: E402
from launcher.sim_api import SimStats  # noqa: E402
from tiling import abi, plan_paged_attention  # noqa: E402


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bit patterns, round to nearest even."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16_bits(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


def quantize(x: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(device array, its exact values as float64)."""
    if dtype == "fp16":
        dev = x.astype(np.float16)
        return dev, dev.astype(np.float64)
    bits = to_bf16_bits(x)
    return bits, from_bf16_bits(bits).astype(np.float64)


def make_sinks(rng: np.random.Generator, sinks: str | None, hq: int) -> tuple[np.ndarray | None, torch.Tensor | None]:
    """Fresh sinks of the named dtype (device array, exact values): logits around the scores' own range."""
    if sinks is None:
        return None, None
    values = rng.standard_normal(hq) * 2.0 + 1.0
    if sinks == "fp32":
        dev32 = values.astype(np.float32)
        return dev32, torch.from_numpy(dev32.astype(np.float64))
    dev, exact = quantize(values, "fp16" if sinks == "fp16" else "bf16")
    return dev, torch.from_numpy(exact)


def as_tensor(device: np.ndarray, dtype: str) -> torch.Tensor:
    """A device array (fp16 values or bf16 bit patterns) as the torch tensor it encodes."""
    if dtype == "fp16":
        return torch.from_numpy(device)
    return torch.from_numpy(device.view(np.int16)).view(torch.bfloat16)


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    """Child-process body: plan, launch once, compare.  Returns figures for the parent.  ``"mla": "pow2"`` or
    ``"plain"`` makes it an absorbed-MLA launch (D 512 latent, its rope part, ``hkv`` 1) with that rescale;
    ``"zero_latent_column": c`` zeroes latent column c of every page (the one input AMLA's integer rescale
    does not keep exact); ``"boost_last_page": f`` scales sequence 0's last page of keys by f (its scores rise
    there, so the running max moves in a later unit)."""
    rng = np.random.default_rng(case.get("seed", 0))
    mla = case.get("mla")
    if mla:
        case = {**case, "hkv": 1, "d": abi.MLA_LATENT_DIM}
    lens, hq, hkv, d, bs = case["lens"], case["hq"], case["hkv"], case["d"], case["bs"]
    dtype, batch, q_len = case["dtype"], len(case["lens"]), case.get("q_len", 1)
    max_pages = max(1, max(-(-n // bs) for n in lens)) + 1
    num_blocks = sum(-(-n // bs) for n in lens) + EXTRA_PAGES
    scale = DEEPSEEK_V3_SCALE if mla else 1.0 / np.sqrt(d)
    mla_options: dict[str, Any] = {"rope_dim": abi.MLA_ROPE_DIM, "mla_rescale": mla} if mla else {}
    plan = plan_paged_attention(
        np.array(lens, dtype=np.int32), num_heads=hq, num_kv_heads=hkv, head_dim=d, block_size=bs,
        max_pages=max_pages, num_blocks=num_blocks, scale=scale, dtype=dtype,
        core_count=case.get("cores", 4), strategy=case.get("strategy", "auto"),
        handoff_tokens=case.get("handoff"), window_left=case.get("window", -1), sinks_dtype=case.get("sinks"),
        return_lse=bool(case.get("lse")), q_len=q_len, **mla_options,
    )
    q_dev, _ = quantize(rng.standard_normal((batch, q_len, hq, d)), dtype)
    k_dev, _ = quantize(rng.standard_normal((num_blocks, bs, hkv, d)), dtype)
    if "zero_latent_column" in case:
        k_dev[..., case["zero_latent_column"]] = 0
    v_dev = k_dev if mla else quantize(rng.standard_normal((num_blocks, bs, hkv, d)), dtype)[0]
    rope_dev: dict[int, np.ndarray] = {}
    if mla:  # DeepSeek-like magnitudes: the rope part large enough to move the softmax
        rope_dev[abi.ArgSlot.Q_ROPE] = quantize(rng.standard_normal((batch, q_len, hq, abi.MLA_ROPE_DIM)) * 2, dtype)[0]
        rope_dev[abi.ArgSlot.K_ROPE] = quantize(rng.standard_normal((num_blocks, bs, 1, abi.MLA_ROPE_DIM)) * 2,
                                                dtype)[0]
    table = np.full((batch, max_pages), -1, dtype=np.int32)
    ids = rng.permutation(num_blocks).astype(np.int32)
    used = 0
    for b, n in enumerate(lens):
        pages = -(-n // bs)
        table[b, :pages] = ids[used : used + pages]
        used += pages
    if "boost_last_page" in case:  # sequence 0's last page of keys scaled (values too, under MLA's one cache)
        page = int(table[0, -(-lens[0] // bs) - 1])
        exact = k_dev[page].astype(np.float64) if dtype == "fp16" else from_bf16_bits(k_dev[page]).astype(np.float64)
        k_dev[page] = quantize(exact * case["boost_last_page"], dtype)[0]
    if case.get("bad_block_id"):
        table[lens.index(next(n for n in lens if n > 0)), 0] = num_blocks + 3
    window = case.get("window", -1)
    if window >= 0:  # pages wholly before a window are never read: their entries may be anything
        for b, n in enumerate(lens):
            table[b, : int(abi.kv_first_token(n, q_len, window, bs)) // bs] = -1
    sinks_dev, sinks_ref = make_sinks(rng, case.get("sinks"), hq)
    elem = np.float16 if dtype == "fp16" else np.uint16
    out = np.full((batch, q_len, hq, d), np.nan, dtype=np.float32).astype(elem)
    ws = plan.workspace
    bufs = {
        abi.ArgSlot.Q: q_dev, abi.ArgSlot.K: k_dev, abi.ArgSlot.V: v_dev, abi.ArgSlot.BLOCK_TABLES: table,
        abi.ArgSlot.O: out, abi.ArgSlot.S: np.full(ws.s_bytes // 4, np.nan, np.float32),
        abi.ArgSlot.P: np.full(ws.p_bytes // 2, 0xFFFF, np.uint16),
        abi.ArgSlot.O_TMP: np.full(ws.o_tmp_bytes // 4, np.nan, np.float32),
        abi.ArgSlot.TILING: np.array(plan.tiling, dtype=np.uint32), **rope_dev,
    }
    if sinks_dev is not None:
        bufs[abi.ArgSlot.SINKS] = sinks_dev
    lse_out = np.full((batch, q_len, hq), np.nan, np.float32)
    if case.get("lse"):
        bufs[abi.ArgSlot.LSE] = lse_out
    if ws.o_core_bytes:
        shrink = case.get("shrink_o_core", 0)
        bufs[abi.ArgSlot.O_CORE] = np.full(ws.o_core_bytes // 4 - shrink, np.nan, np.float32)
        bufs[abi.ArgSlot.L] = np.full(ws.l_bytes // 4, np.nan, np.float32)
    tiling = bufs[abi.ArgSlot.TILING]
    if "force_key" in case:
        tiling[abi.TilingWord.KEY] = case["force_key"]
    if case.get("reverse_gather"):  # a valid permutation the planner would not choose (e.g. empty sequences last)
        words = [abi.batch_word(i, abi.BatchField.GATHER) for i in range(batch)]
        tiling[words] = tiling[words][::-1].copy()
    if case.get("bad_gather") and batch > 1:
        tiling[abi.batch_word(0, abi.BatchField.GATHER)] = tiling[abi.batch_word(1, abi.BatchField.GATHER)]
    # load_library declares the signatures and checks the struct mirrors against the library
    lib = load_library(LIB).handle
    cfg = MockConfig()
    ptrs: list[ctypes.c_void_p] = [ctypes.c_void_p(None)] * abi.NUM_PTR_ARGS
    for slot, arr in bufs.items():
        ptrs[int(slot)] = ctypes.c_void_p(arr.ctypes.data)
        cfg.extent_bytes[int(slot)] = arr.nbytes
    cfg.num_blocks, cfg.checked = num_blocks, 0 if case.get("unchecked") else 1
    if not case.get("unbound"):
        lib.pa_mock_bind(ctypes.byref(cfg))
    rc = lib.call_kernel(ctypes.c_uint32(plan.block_dim), None, *ptrs)
    err = MockError()
    lib.pa_mock_last_error(ctypes.byref(err))
    stats = SimStats()
    lib.pa_sim_stats_get(ctypes.byref(stats))
    result: dict[str, Any] = {
        "rc": rc, "key": int(tiling[abi.TilingWord.KEY]), "block_dim": plan.block_dim, "kvcn": plan.kv_core_num,
        "err": {"code": err.code, "slot": err.arg_slot, "offset": err.element_offset, "seq": err.seq,
                "message": last_error_text(lib) or err.message.decode(errors="replace")},
        "stats": {name: (list(getattr(stats, name)) if name.endswith("_bytes") and name.startswith(("peak", "cap"))
                         else getattr(stats, name)) for name, _ in SimStats._fields_},
    }
    if rc == 0:
        got = out.astype(np.float64) if dtype == "fp16" else from_bf16_bits(out).astype(np.float64)
        if mla:
            ref = mla_reference(as_tensor(q_dev, dtype), as_tensor(rope_dev[abi.ArgSlot.Q_ROPE], dtype),
                                as_tensor(k_dev, dtype), as_tensor(rope_dev[abi.ArgSlot.K_ROPE], dtype),
                                torch.from_numpy(table), lens, scale)
        else:
            ref = reference(as_tensor(q_dev, dtype), as_tensor(k_dev, dtype), as_tensor(v_dev, dtype),
                            torch.from_numpy(table), lens, scale, Features(window_left=window, sinks=sinks_ref))
        comparison = compare(torch.from_numpy(got), ref)
        result["passed"], result["summary"] = comparison.passed, comparison.summary()
        result["finite"] = bool(np.isfinite(got).all())
        result["out_bits"] = out.view(np.uint16).tolist() if case.get("return_output") else None
        if case.get("lse"):
            lse_cmp = compare_lse(torch.from_numpy(lse_out), ref)
            result["lse_passed"], result["lse_summary"] = lse_cmp.passed, lse_cmp.summary()
            result["passed"] = result["passed"] and lse_cmp.passed
    return result


def run_in_child(case: dict[str, Any], env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), json.dumps(case)],
        capture_output=True, text=True, timeout=CASE_TIMEOUT_S, check=False, env={**os.environ, **(env or {})},
    )
    assert proc.returncode == 0, f"simulation child failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


needs_sim = pytest.mark.skipif(not LIB.exists(), reason=f"{LIB} not built (bash compile.sh)")


def message_of(res: dict[str, Any]) -> str:
    return str(res["err"]["message"])

HANDOFFS_PER_UNIT = 4
BASE = {"hq": 8, "hkv": 2, "d": 128, "bs": 128, "dtype": "fp16", "cores": 4}
ACCURACY_CASES = {
    "fp16_bn_ragged": {"lens": [1, 130, 300]},
    "bf16_bn_ragged": {"lens": [77, 513, 16], "dtype": "bf16"},
    "fp16_empty_small_pages": {"lens": [0, 17, 129, 40], "d": 64, "bs": 16},
    "fp16_mqa_split_kv": {"lens": [700, 1500], "hkv": 1, "d": 64, "bs": 64, "strategy": "split_kv"},
    "bf16_split_kv_empty": {"lens": [1100, 0, 333], "dtype": "bf16", "strategy": "split_kv", "seed": 3},
    "fp16_split_block_mha": {"lens": [200, 129], "hq": 4, "hkv": 4, "d": 256, "bs": 128},
    "bf16_split_block_split_kv": {"lens": [900, 260], "hq": 4, "hkv": 2, "d": 256, "bs": 256, "dtype": "bf16",
                                  "strategy": "split_kv"},
    "fp16_d80_bs256": {"lens": [600, 255], "hq": 6, "hkv": 3, "d": 80, "bs": 256, "strategy": "bn"},
    "fp16_d32_bs512_split_kv": {"lens": [1500, 3, 511], "hq": 4, "hkv": 2, "d": 32, "bs": 512},
    "fp16_d208_bs64_mqa": {"lens": [300, 129], "hq": 4, "hkv": 1, "d": 208, "bs": 64},
    "fp16_mqa_64_heads": {"lens": [700, 90], "hq": 64, "hkv": 1, "bs": 64},
    # 24 cores as on a 910B: BN with a tail pass (24 former + 8 tail sequences, finer tail head split)
    "fp16_24_cores_tail_pass": {"lens": [int(n) for n in np.random.default_rng(7).integers(1, 300, 32)], "hq": 32,
                                "hkv": 8, "cores": 24},
    "bf16_24_cores_long_split_kv": {"lens": [8192, 3000], "hq": 16, "hkv": 2, "dtype": "bf16", "cores": 24},
    # one core walks every task: multi-unit tasks back to back (the pipeline runs across task boundaries), then
    # (reversed gather map) the empty sequence while a task's second unit is pending: the vectors retire that
    # task before writing the zero rows; a one-unit task between tasks in the second case
    "fp16_one_core_task_boundaries": {"lens": [1200, 700, 0], "cores": 1, "reverse_gather": True},
    # ragged batches (planner departure 10): a BN grid over two rounds of cores in the balanced gather order;
    # the split-KV grid of the widest whole-group tasks that replaces a BN grid on 24 cores (GQA) and on 8
    # (MHA, 16 KV heads per task: two K/V chunks per page)
    "fp16_ragged_bn_balanced_order": {"lens": [700, 33, 1200, 16, 513, 90, 300, 2000], "cores": 4,
                                      "strategy": "bn"},
    "fp16_ragged_balanced_split_kv_24_cores": {
        "lens": [88, 2806, 84, 991, 1518, 123, 158, 112, 28, 196, 56, 61, 42, 44, 1132, 146, 61, 352, 378, 472,
                 1886, 35, 111, 70, 17, 41, 126, 125, 403, 170, 384, 51], "hq": 32, "hkv": 8, "cores": 24},
    "bf16_ragged_mha_wide_split_kv": {"lens": [780, 791, 192, 63, 20, 101, 114, 19, 20, 1992, 373, 49], "hq": 16,
                                      "hkv": 16, "d": 64, "bs": 64, "cores": 8, "dtype": "bf16"},
    # hand-offs longer than 512 tokens (ABI v2 word 42): the vectors take a unit in 512-column pieces, twice;
    # the cube loads P in 512-column windows; ragged last windows; the chunk and the head path; a hand-off
    # longer than every task (one unit per task)
    "fp16_handoff_1024": {"lens": [1300, 3000, 5], "cores": 2, "handoff": 1024, "strategy": "bn"},
    "bf16_handoff_2048_split_kv": {"lens": [5000, 0, 2100], "dtype": "bf16", "cores": 4, "strategy": "split_kv",
                                   "handoff": 2048},
    "fp16_handoff_whole_head_path": {"lens": [2500, 700], "hq": 32, "hkv": 1, "d": 64, "bs": 64, "cores": 2,
                                     "handoff": 4096, "strategy": "bn"},
    "bf16_one_core_task_boundaries_split_kv": {"lens": [1200, 0, 2100, 5], "cores": 1, "dtype": "bf16",
                                               "strategy": "split_kv"},
    # decode features of one query token (ABI v3): a window whose first page is partly masked, its earlier pages'
    # table entries -1 (never read); sinks of each dtype joining the denominator in the output row or in the
    # combine; the lse of every row (-inf for an empty sequence), one-split and combined
    "fp16_window_sinks_fp32_lse_bn": {"lens": [1, 130, 600, 0], "window": 200, "sinks": "fp32", "lse": True,
                                      "strategy": "bn"},
    "bf16_window_sinks_bf16_lse_split_kv": {"lens": [4000, 0, 333, 5], "dtype": "bf16", "window": 2000,
                                            "sinks": "bf16", "lse": True, "strategy": "split_kv", "cores": 8},
    "fp16_sinks_fp16_lse_split_kv_mqa": {"lens": [1500, 90], "hkv": 1, "d": 64, "bs": 64, "sinks": "fp16",
                                         "lse": True, "strategy": "split_kv"},
    "fp16_window_0_small_pages": {"lens": [700, 16, 17], "d": 64, "bs": 16, "window": 0},
    "bf16_window_bs512_handoff_1024": {"lens": [2600, 1400], "dtype": "bf16", "d": 64, "bs": 512, "window": 900,
                                       "handoff": 1024, "strategy": "bn", "lse": True},
}


#: The feature cases that must reach the split-KV combine (their sinks and lse join there).
COMBINED_FEATURE_CASES = ("bf16_window_sinks_bf16_lse_split_kv", "fp16_sinks_fp16_lse_split_kv_mqa")


@needs_sim
@pytest.mark.parametrize("name", sorted(ACCURACY_CASES))
def test_sim_matches_float64_golden(name: str) -> None:
    case = {**BASE, **ACCURACY_CASES[name]}
    res = run_in_child(case)
    if name in COMBINED_FEATURE_CASES:
        assert res["kvcn"] > 1, "the case no longer reaches the combine"

    assert res["rc"] == 0, res["err"]
    assert res["finite"], "output holds NaN/inf (an unwritten row?)"
    assert res["passed"], res["summary"]
    stats = res["stats"]
    assert all(p <= c for p, c in zip(stats["peak_bytes"], stats["capacity_bytes"], strict=True)), stats
    # per unit: S ready (cube), P ready (each of the two vector sub-cores), O_tmp ready (cube)
    assert stats["handoffs"] == HANDOFFS_PER_UNIT * stats["units"], stats
    if res["kvcn"] > 1:
        assert res["key"] & abi.KEY_SPLIT_KV_BIT and stats["partial_bytes"] > 0


@needs_sim
def test_a_window_reads_only_its_pages() -> None:
    """A windowed launch reads the K/V of the pages from the window's first on, not the context's: the sim's K/V
    byte count is the unwindowed count scaled by the tokens those pages hold (one sequence, one task)."""
    case = {**BASE, "lens": [1000], "cores": 1, "strategy": "bn"}
    full, windowed = run_in_child(case), run_in_child({**case, "window": 300})
    assert full["rc"] == windowed["rc"] == 0, (full["err"], windowed["err"])
    assert windowed["passed"], windowed["summary"]
    first = int(abi.kv_first_token(1000, 1, 300, BASE["bs"]))
    assert first == 640
    assert windowed["stats"]["kv_read_bytes"] * 1000 == full["stats"]["kv_read_bytes"] * (1000 - first)


@needs_sim
def test_only_the_window_boundary_tile_is_masked() -> None:
    """Masks only where they bite: over a long context with a 128-token window, each vector sub-core masks one S
    tile (the window's first page), every other tile runs unmasked; a window whose first key starts a page masks
    none, and so does a launch without a window."""
    case = {**BASE, "lens": [6000], "cores": 1, "strategy": "bn"}
    for window, masked in ((128, 2), (None, 0)):
        res = run_in_child({**case, "window": window} if window is not None else case)
        assert res["rc"] == 0 and res["passed"], (res["err"], res.get("summary"))
        assert res["stats"]["masked_score_tiles"] == masked, res["stats"]
        assert res["stats"]["score_tiles"] >= 2, res["stats"]
    aligned = run_in_child({**case, "lens": [1 + 128 + 640], "window": 128})  # keeps keys 640.. : a page start
    assert aligned["rc"] == 0 and aligned["passed"], aligned["err"]
    assert aligned["stats"]["masked_score_tiles"] == 0 and aligned["stats"]["score_tiles"] == 2, aligned["stats"]


@needs_sim
def test_several_query_tokens_read_the_kv_once_and_a_window_only_its_pages() -> None:
    """Four query tokens of a KV group of 4 heads are 16 rows of one matmul: the launch reads exactly the K/V bytes
    of the one-token launch over the same context; with a window of 300 it reads the pages from the first token's
    window's first page on, the unwindowed count scaled by the tokens those pages hold."""
    case = {**BASE, "lens": [1000], "cores": 1, "strategy": "bn"}
    one, four = run_in_child(case), run_in_child({**case, "q_len": 4})
    windowed = run_in_child({**case, "q_len": 4, "window": 300})
    for res in (one, four, windowed):
        assert res["rc"] == 0 and res["passed"], (res["err"], res.get("summary"))
    assert four["stats"]["kv_read_bytes"] == one["stats"]["kv_read_bytes"] > 0
    first = int(abi.kv_first_token(1000, 4, 300, BASE["bs"]))
    assert first == 640
    assert windowed["stats"]["kv_read_bytes"] * 1000 == four["stats"]["kv_read_bytes"] * (1000 - first)


@needs_sim
def test_several_query_tokens_mask_only_the_boundary_pieces() -> None:
    """Masks only where they bite, per query token and vector sub-core (2 per task here): over 4096 keys in 8
    units of 512, 4 tokens mask only the last piece, and only the 3 tokens before the last (the causal edge);
    with a 600-key window over 6000 keys (units of 512 and 112 keys from page 5376 on), every token masks the
    first piece (its window's left edge) and the first 3 tokens the last (keys 5997.. of the causal edge)."""
    case = {**BASE, "lens": [4096], "q_len": 4, "cores": 1, "strategy": "bn"}
    for lens, window, tiles, masked in (([4096], None, 8 * 4 * 2, 3 * 2), ([6000], 600, 2 * 4 * 2, (4 + 3) * 2)):
        res = run_in_child({**case, "lens": lens, "window": window} if window else {**case, "lens": lens})
        assert res["rc"] == 0 and res["passed"], (res["err"], res.get("summary"))
        assert (res["stats"]["score_tiles"], res["stats"]["masked_score_tiles"]) == (tiles, masked), res["stats"]


NEGATIVE_CASES = {
    "o_core_too_small": ({"lens": [700, 1500], "strategy": "split_kv", "shrink_o_core": 16},
                         abi.ErrorCode.OUT_OF_BOUNDS, abi.ArgSlot.O_CORE),
    "bad_block_id": ({"lens": [40, 300], "bad_block_id": True}, abi.ErrorCode.BAD_BLOCK_ID, abi.ArgSlot.BLOCK_TABLES),
    "bad_gather": ({"lens": [40, 300], "bad_gather": True}, abi.ErrorCode.BAD_GATHER, abi.ArgSlot.TILING),
    "bad_key": ({"lens": [40], "force_key": 2}, abi.ErrorCode.BAD_KEY, abi.ArgSlot.TILING),
    "unbound": ({"lens": [40], "unbound": True}, abi.ErrorCode.BAD_LAUNCH, -1),
}


@needs_sim
@pytest.mark.parametrize("name", sorted(NEGATIVE_CASES))
def test_sim_reports_contract_violations(name: str) -> None:
    overrides, code, slot = NEGATIVE_CASES[name]
    res = run_in_child({**BASE, **overrides})
    assert res["rc"] == int(code), res
    assert res["err"]["code"] == int(code) and res["err"]["slot"] == int(slot), res


@needs_sim
def test_one_split_sequences_skip_the_combine() -> None:
    """Split-KV partials (written by the tasks, read by the combine) exist only for sequences of two or more
    splits: a one-split sequence's task writes its output row, and the golden still holds."""
    case = {**BASE, "lens": [1100, 0, 333], "dtype": "bf16", "strategy": "split_kv", "seed": 3}
    res = run_in_child(case)
    assert res["rc"] == 0 and res["passed"], res
    split = 384  # the plan's KVSPLIT for these lengths on 4 cores
    splits = [-(-n // split) for n in case["lens"]]
    assert res["kvcn"] == max(splits) == 3
    row_bytes = case["hq"] * (4 * case["d"] + 4)  # an fp32 partial row and its lse, per head
    assert res["stats"]["partial_bytes"] == 2 * sum(m * row_bytes for m in splits if m >= 2), (res["stats"], splits)


def combine_work(shape: Any, cores: int) -> list[dict[str, int]]:
    """Per vector sub-core of a split-KV launch, after the all-vector barrier (the combine): its scalar GM reads,
    its scalar reads of UB, its output stores and the output bytes they write."""
    from timing import trace as tr
    from timing.predictions import trace_of

    trace = trace_of(shape, cores)
    gm_read = trace.op_names.index("scalar GM read")
    ub_read = trace.op_names.index("GetValue") if "GetValue" in trace.op_names else -1  # named once issued
    found = []
    for (_, role), ev in trace.streams().items():
        barrier = np.flatnonzero(ev["kind"] == tr.EV_ALLVEC)
        if role == 0 or len(barrier) == 0:
            continue
        after = ev[barrier[0] + 1:]
        instr = after["kind"] == tr.EV_INSTR
        stores = instr & (after["pipe"] == tr.PIPE_MTE3) & (after["slot"] == int(abi.ArgSlot.O))
        found.append({"gm_reads": int(np.sum(instr & (after["op"] == gm_read))),
                      "ub_reads": int(np.sum(instr & (after["op"] == ub_read))),
                      "stores": int(np.sum(stores)), "bytes": int(after["bytes"][stores].sum())})
    return found


@needs_sim
@pytest.mark.parametrize("mla", [False, True], ids=["gqa", "mla"])
def test_the_combine_reads_a_sequences_words_once_and_combines_rows_in_steps(mla: bool) -> None:
    """A combine item is a run of one sequence's rows (``CombineRunsPerSlot``): two sequences of 32 (GQA) or 64
    (MLA) rows on 8 vector sub-cores make runs of 8 or 16 rows, one per sub-core, so each sub-core reads the
    sequence's words (gather, length, three addresses: 8 scalar GM reads) once, where reading them per row made
    9 reads a row (72 or 144).  With at most 8 splits (here 2) a run is combined in steps of several rows
    (``CombineCore::Step``: 64 rows at D 128, 16 at D 512): one output store per step and no scalar read of UB,
    where the per-row path stored each row and read its max and sum back to the scalar unit (2 reads a row)."""
    from workloads.shapes import mla_shape, uniform_shape

    shape = mla_shape(2, 2048, num_heads=64) if mla else uniform_shape(2, 4096, num_heads=32, num_kv_heads=8)
    per_sub = combine_work(shape, 4)
    rows, d, elem = (64, 512, 2) if mla else (32, 128, 2)
    steps = 1
    assert len(per_sub) == 8, f"the launch must reach the combine on all 8 sub-cores: {per_sub}"
    assert [w["bytes"] for w in per_sub] == [rows // 4 * d * elem] * 8, per_sub
    assert all(w["gm_reads"] <= 8 and w["ub_reads"] == 0 and w["stores"] == steps for w in per_sub), per_sub


@needs_sim
def test_the_combine_of_more_than_8_splits_keeps_the_per_row_path() -> None:
    """The control of the steps: a sequence cut into 24 splits (2 heads, D 32, 24 cores) is combined a row at a
    time, each row's max and sum read back to the scalar unit."""
    from workloads.shapes import uniform_shape

    shape = uniform_shape(1, 4100, num_heads=2, num_kv_heads=1, head_dim=32, block_size=16)
    busy = [w for w in combine_work(shape, 24) if w["stores"]]
    assert sum(w["stores"] for w in busy) == 2, busy
    assert all(w["ub_reads"] == 2 * w["stores"] for w in busy), busy


@needs_sim
def test_a_lost_signal_is_a_deadlock_naming_core_pipe_and_flag() -> None:
    """A lost cube->vector signal (fault injection) ends the launch at once with PA_ERR_INTERNAL, naming the
    waiting cores, their pipe and the flag; the simulation never hangs."""
    res = run_in_child({**BASE, "lens": [300, 40]}, env={"PA_SIM_DROP_SIGNAL": "0"})
    assert res["rc"] == int(abi.ErrorCode.INTERNAL), res
    message = res["err"]["message"]
    assert message.startswith("DEADLOCK") and "PA_SIM_SEED=" in message, res
    assert re.search(r"vec core \d+\.\d waits on pipe S for cross-core flag \d+", message), res


#: split-KV over more blocks than a 910B2 holds (24 clusters): the combine's all-vector barrier
RESIDENCY_CASE = {**BASE, "lens": [4100, 3000], "hq": 4, "hkv": 1, "d": 64, "bs": 64, "cores": 30,
                  "strategy": "split_kv"}


@needs_sim
def test_split_kv_with_more_blocks_than_clusters_deadlocks() -> None:
    """Blocks beyond the SoC's clusters start only when a resident block ends; the combine's barrier of every
    vector core then never completes: a DEADLOCK that says which blocks were not resident.  The launcher
    refuses such a core_count before any launch (tests/test_residency.py)."""
    res = run_in_child(RESIDENCY_CASE)
    assert res["block_dim"] > 24 and res["kvcn"] > 1, res
    assert res["rc"] == int(abi.ErrorCode.INTERNAL), res
    assert "not resident" in message_of(res), res


@needs_sim
def test_bn_with_more_blocks_than_clusters_runs_in_waves() -> None:
    """Without the barrier, excess blocks run after resident ones end, as on the device, and the result holds."""
    res = run_in_child({**RESIDENCY_CASE, "strategy": "bn", "lens": [400] * 30, "cores": 30})
    assert res["block_dim"] > 24, res
    assert res["rc"] == 0 and res["passed"], res


if __name__ == "__main__":
    print(json.dumps(run_case(json.loads(sys.argv[1]))))
