"""The A2/A3 compile check (kernel/npu/check_a2a3.sh) and the kernel run through pto-isa's A2/A3 code paths.

The CPU simulation compiles pto-isa's CPU implementations, which accept what the device rejects.  The check
compiles the kernel against the A2/A3 implementations (-D__COSTMODEL); these tests prove it can fail
(a column tile in an element-wise op, a C++20 construct) and run a few launches through its -D_DEBUG
libraries, where the A2/A3 implementations' run-time asserts execute (the cost model moves no data, so only
the asserts are judged, and an assert aborts the process: every launch runs in a child).
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tiling import abi, plan_paged_attention  # noqa: E402

LIB_DIR = Path(os.environ.get("PA_KIT_LIB_DIR", ROOT / "build" / "lib"))
ROLES = ("cube", "vec")
CHILD_TIMEOUT_S = 300
needs_check = pytest.mark.skipif(
    not all((LIB_DIR / f"libpa_a2a3_{r}.so").exists() for r in ROLES),
    reason="A2/A3 check libraries not built (bash compile.sh)",
)

CASES = {
    "fp16_bn_d128_ragged": {"lens": [300, 37, 0], "hq": 8, "hkv": 2, "d": 128, "bs": 128, "dtype": "fp16", "cores": 2},
    "bf16_split_kv_d64": {"lens": [3000, 700], "hq": 4, "hkv": 1, "d": 64, "bs": 64, "dtype": "bf16", "cores": 8,
                          "strategy": "split_kv"},
    "fp16_d256_bs64_tail": {"lens": [37, 300], "hq": 4, "hkv": 2, "d": 256, "bs": 64, "dtype": "fp16", "cores": 1},
}


def launch(case: dict[str, Any]) -> None:
    """Child body: plan, then run core 0 of both roles through the _DEBUG cost-model libraries."""
    lens, hq, hkv, d, bs = case["lens"], case["hq"], case["hkv"], case["d"], case["bs"]
    batch, max_pages = len(lens), max(-(-n // bs) for n in lens) + 1
    num_blocks = sum(-(-n // bs) for n in lens) + 3
    plan = plan_paged_attention(
        np.array(lens, np.int32), num_heads=hq, num_kv_heads=hkv, head_dim=d, block_size=bs, max_pages=max_pages,
        num_blocks=num_blocks, scale=1.0 / np.sqrt(d), dtype=case["dtype"], core_count=case["cores"],
        strategy=case.get("strategy", "auto"),
    )
    ws = plan.workspace
    rng = np.random.default_rng(0)
    table = rng.permutation(np.arange(batch * max_pages) % num_blocks).astype(np.int32).reshape(batch, max_pages)
    bufs = {
        abi.ArgSlot.Q: np.ones((batch, hq, d), np.float16), abi.ArgSlot.O: np.zeros((batch, hq, d), np.float16),
        abi.ArgSlot.K: np.ones((num_blocks, bs, hkv, d), np.float16),
        abi.ArgSlot.V: np.ones((num_blocks, bs, hkv, d), np.float16), abi.ArgSlot.BLOCK_TABLES: table,
        abi.ArgSlot.S: np.zeros(ws.s_bytes // 4, np.float32), abi.ArgSlot.P: np.zeros(ws.p_bytes // 2, np.uint16),
        abi.ArgSlot.O_TMP: np.zeros(ws.o_tmp_bytes // 4, np.float32),
        abi.ArgSlot.O_CORE: np.zeros(max(ws.o_core_bytes, 4) // 4, np.float32),
        abi.ArgSlot.L: np.zeros(max(ws.l_bytes, 4) // 4, np.float32),
        abi.ArgSlot.TILING: np.array(plan.tiling, np.uint32),
    }
    for word, value in case.get("corrupt", {}).items():
        bufs[abi.ArgSlot.TILING][abi.TilingWord[word]] = value
    ptrs = [ctypes.c_void_p(None)] * abi.NUM_PTR_ARGS
    for slot, arr in bufs.items():
        ptrs[int(slot)] = ctypes.c_void_p(arr.ctypes.data)
    for role in ROLES:
        lib = ctypes.CDLL(str(LIB_DIR / f"libpa_a2a3_{role}.so"))
        lib.pa_decode_kernel(*ptrs, ctypes.c_uint32(plan.block_dim), ctypes.c_uint64(0))
    print(json.dumps({"ok": True, "kvcn": plan.kv_core_num}))


def run_child(case: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(Path(__file__).resolve()), json.dumps(case)], capture_output=True,
                          text=True, timeout=CHILD_TIMEOUT_S, check=False)


@needs_check
@pytest.mark.parametrize("name", sorted(CASES))
def test_launch_passes_the_a2a3_run_time_asserts(name: str) -> None:
    proc = run_child(CASES[name])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["ok"]


@needs_check
def test_a2a3_run_time_assert_fires_on_a_bad_shape() -> None:
    """Negative control: a zero head_dim gives zero-width tiles, which an A2/A3 implementation asserts on."""
    proc = run_child({**CASES["fp16_bn_d128_ragged"], "corrupt": {"HEADDIM": 0}})
    assert proc.returncode != 0
    assert "[PTO][ASSERT]" in proc.stderr, proc.stderr[-3000:]


def _check_copy(tmp_path: Path, edit: tuple[str, str, str]) -> subprocess.CompletedProcess[str]:
    """check_a2a3.sh on a copy of kernel/ with one edit (file, old, new), syntax passes only."""
    shutil.copytree(ROOT / "kernel", tmp_path / "kernel")
    path = tmp_path / "kernel" / "npu" / edit[0]
    text = path.read_text()
    assert edit[1] in text
    path.write_text(text.replace(edit[1], edit[2], 1))
    env = {**os.environ, "PA_A2A3_SYNTAX_ONLY": "1"}
    return subprocess.run(["bash", str(tmp_path / "kernel" / "npu" / "check_a2a3.sh"), str(ROOT / "build")],
                          capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False, env=env)


@needs_check
def test_check_rejects_a_column_tile_in_an_element_wise_op(tmp_path: Path) -> None:
    proc = _check_copy(tmp_path, ("pa_vector.hpp", "Max(hmRow, gmRow, lmRow);",
                                  "Col hmCol = ColAt(kColHm, r);\n                Max(hmCol, gmRow, lmRow);"))
    assert proc.returncode == 1, proc.stdout
    assert "NPU kernel A2/A3 check: FAILED" in proc.stdout and "row major" in proc.stdout, proc.stdout


@needs_check
def test_check_rejects_a_cxx20_construct(tmp_path: Path) -> None:
    proc = _check_copy(tmp_path, ("pa_tiling.hpp", "struct Tiling {", "template <class X> concept AnyType = true;\n"
                                                                      "struct Tiling {"))
    assert proc.returncode == 1, proc.stdout
    assert "not C++17" in proc.stdout, proc.stdout


if __name__ == "__main__":
    launch(json.loads(sys.argv[1]))
