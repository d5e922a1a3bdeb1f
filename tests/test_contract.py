"""Both libraries judge every corrupted launch alike: the negative-control set (``tests/contract_cases.py``).

The mock device and the simulation link the same contract checker (``kernel/contract``); this test holds them
to it from the outside.  Each library runs the whole set in a child process (a simulated launch that is not
refused could abort on an on-chip overflow, and that must fail these tests, not end the run); every case is
then its own test: the expected code and buffer, the expected coordinates, and the same record from both.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from contract_cases import CORRUPTIONS, compared_fields

from launcher.library import library_path

CASES_SCRIPT = Path(__file__).resolve().parent / "contract_cases.py"
CHILD_TIMEOUT_S = 600
BACKENDS = ("mock", "sim")


@cache
def records(backend: str) -> dict[str, dict[str, Any]]:
    """Every case's error record on ``backend``, from one child process."""
    path = library_path(backend)
    if not path.is_file():
        if backend == "sim" and os.environ.get("PA_KIT_REQUIRE_SIM") == "1":
            pytest.fail(f"PA_KIT_REQUIRE_SIM=1 but {path} was not built (see compile.sh output)")
        pytest.skip(f"{path} not built (bash compile.sh)")
    proc = subprocess.run([sys.executable, str(CASES_SCRIPT), str(path)], capture_output=True, text=True,
                          timeout=CHILD_TIMEOUT_S, check=False)
    assert proc.returncode == 0, f"{backend} child exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_corrupted_launch_is_refused(backend: str, name: str) -> None:
    corruption = CORRUPTIONS[name]
    record = records(backend)[name]
    assert record["rc"] == record["code"] == int(corruption.code), record
    if corruption.slot is not None:
        assert record["arg_slot"] == int(corruption.slot), record
    for key, value in record["expect"].items():
        assert record[key] == value, (key, record)


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_mock_and_sim_report_the_same_record(name: str) -> None:
    mock, sim = records("mock")[name], records("sim")[name]
    fields = compared_fields(name)
    assert {k: mock[k] for k in fields} == {k: sim[k] for k in fields}, (mock, sim)


def test_negative_control_a_record_difference_is_seen() -> None:
    """The comparison above is not vacuous: two different records differ on the compared fields."""
    mock = records("mock")
    first, second = mock["headsize"], mock["parasize"]
    fields = compared_fields("headsize")
    assert {k: first[k] for k in fields} != {k: second[k] for k in fields}
