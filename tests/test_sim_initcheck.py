"""initcheck on the kernel (device-path sim, checked mode): its negative controls.

A load shortened by one row (``pa_sim_shorten_load``: every row-major load from one GM argument leaves the last row of
its tile unwritten) must fail the launch with an UNINIT fault: Q on the cube (the row flows through Q.K^T into a
stored S row) and S on the vectors (the row flows through the softmax into a stored P row).  With
``PA_SIM_INITCHECK=0`` the same launch is not stopped.  The unwritten Q row holds the emulator's hostile fill, which
mad's operand check faults on first (NON_FINITE, before any store), so Q's initcheck controls run with
``PA_SIM_MAD_INPUT_CHECK=0`` and one more case checks that the operand check catches the row too.  The kernel's zero
fills of a ragged tail's L1 padding are not a negative control here: mad reads only the valid k, so the bytes they
fill are never read on the device path (``test_sim_hazards.test_the_device_path_ignores_k_padding`` runs with
initcheck on).

Launches run in child processes (this file run as a script), as in test_sim_hazards.py.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
for path in (ROOT, TESTS):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from test_sim_kernel import BASE, LIB, needs_sim, run_case  # noqa: E402

from tiling import abi  # noqa: E402

#: a ragged tail, two KV heads of four query heads each (m = 4 rows per Q load), one core
CASE: dict[str, Any] = {**BASE, "lens": [37, 300], "hq": 8, "hkv": 2, "d": 64, "bs": 64, "cores": 1}


def child(slot: int) -> dict[str, Any]:
    lib = ctypes.CDLL(str(LIB))
    lib.pa_sim_shorten_load.argtypes = [ctypes.c_int32]
    lib.pa_sim_shorten_load(slot)
    res = run_case(CASE)
    lib.pa_sim_shorten_load(-1)
    return {"rc": res["rc"], "message": res["err"]["message"], "passed": res.get("passed")}


def run_child(slot: int, env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), str(slot)], capture_output=True, text=True,
                          timeout=600, check=False, env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


#: the mad operand check off: the shortened Q row reaches a store for initcheck to see
MAD_CHECK_OFF = {"PA_SIM_MAD_INPUT_CHECK": "0"}


@needs_sim
def test_a_shortened_q_load_fails_with_uninit() -> None:
    out = run_child(int(abi.ArgSlot.Q), env=MAD_CHECK_OFF)
    assert out["rc"] == int(abi.ErrorCode.INTERNAL) and "UNINIT" in out["message"], out


@needs_sim
def test_a_shortened_q_load_fails_the_mad_operand_check() -> None:
    out = run_child(int(abi.ArgSlot.Q))
    assert out["rc"] == int(abi.ErrorCode.NON_FINITE) and "non-finite element a[" in out["message"], out


@needs_sim
def test_a_shortened_s_load_fails_with_uninit() -> None:
    out = run_child(int(abi.ArgSlot.S))
    assert out["rc"] == int(abi.ErrorCode.INTERNAL) and "UNINIT" in out["message"], out


@needs_sim
def test_initcheck_off_does_not_stop_the_shortened_load() -> None:
    out = run_child(int(abi.ArgSlot.Q), env={"PA_SIM_INITCHECK": "0", **MAD_CHECK_OFF})
    assert out["rc"] == 0, out


@needs_sim
def test_the_case_passes_unshortened() -> None:
    out = run_child(-1)
    assert out["rc"] == 0 and out["passed"], out


if __name__ == "__main__":
    print(json.dumps(child(int(sys.argv[1]))))
