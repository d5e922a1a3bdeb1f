"""One accuracy case in a child process, for backends where a fault can end the process.

pto-isa's CPU simulation aborts the process when a tile overflows an on-chip buffer.  Run in a child, such
an abort fails that one case (with the child's exit status and stderr) instead of the whole test run, and
every case is reported on its own.  ``python -m accuracy.isolated CASE BACKEND`` prints the case's outcome
as one JSON line; :func:`run_isolated` starts that child and reads it back.
"""

from __future__ import annotations

import os

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def outcome_record(case_name: str, backend: str) -> dict[str, Any]:
    """Run the case here and describe its outcome (JSON-ready)."""
    from accuracy.cases import CASES
    from accuracy.harness import run_case

    case = next(c for c in CASES if c.name == case_name)
    outcome = run_case(case, backend)
    c = outcome.comparison
    return {"case": case_name, "plan": outcome.plan, "passed": c.passed, "summary": c.summary()}


def run_isolated(case_name: str, backend: str, timeout_s: float) -> dict[str, Any]:
    """The case's outcome from a child process; a child that dies or hangs raises AssertionError saying how."""
    command = [sys.executable, "-m", "accuracy.isolated", case_name, backend]
    try:
        proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{case_name} on {backend}: no result within {timeout_s} s (a hang?)") from exc
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise AssertionError(f"{case_name} on {backend}: child exited {proc.returncode} "
                             f"(negative: killed by signal {-proc.returncode})\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1])


if __name__ == "__main__":
    print(json.dumps(outcome_record(sys.argv[1], sys.argv[2])))
