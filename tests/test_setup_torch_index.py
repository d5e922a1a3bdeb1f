"""``bash compile.sh --setup`` installs torch only from where it says, never a multi-GB build unannounced.

``setup()`` runs with a stand-in ``python`` first on PATH: it answers ``import torch`` as told and records
every ``-m pip`` command line instead of installing anything, so these tests take a fraction of a second and
touch no package index.  ``compile.sh`` sourced defines its functions without building (its last lines).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TORCH_PIN = "torch==2.13.0"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"

#: The stand-in: ``-c`` code that imports torch succeeds only if STANDIN_TORCH=1 (and prints a version);
#: ``-m pip ARGS`` appends ARGS, one per line, then a separator line, to $STANDIN_LOG.
STANDIN = """#!/usr/bin/env bash
if [[ "$1" == "-c" ]]; then
    [[ "$STANDIN_TORCH" == 1 ]] || exit 1
    echo "9.9.9+standin"
    exit 0
fi
if [[ "$1" == "-m" && "$2" == "pip" ]]; then
    shift 2
    printf '%s\\n' "$@" >>"$STANDIN_LOG"
    echo "--" >>"$STANDIN_LOG"
    exit 0
fi
echo "stand-in python: unexpected arguments $*" >&2
exit 9
"""


def run_setup(tmp_path: Path, *, torch_importable: bool, index_url: str | None) -> tuple[str, list[list[str]]]:
    """(setup's output, the argument lists of each pip command it ran)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    standin = bin_dir / "python"
    standin.write_text(STANDIN)
    standin.chmod(0o755)
    log = tmp_path / "pip.log"
    env = {k: v for k, v in os.environ.items() if k not in ("PA_KIT_TORCH_INDEX_URL", "PIP_INDEX_URL")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", STANDIN_LOG=str(log),
               STANDIN_TORCH="1" if torch_importable else "0")
    if index_url is not None:
        env["PA_KIT_TORCH_INDEX_URL"] = index_url
    done = subprocess.run(["bash", "-c", f"source {ROOT / 'compile.sh'} && setup"], env=env, capture_output=True,
                          text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    calls: list[list[str]] = [[]]
    for line in (log.read_text().splitlines() if log.exists() else []):
        if line == "--":
            calls.append([])
        else:
            calls[-1].append(line)
    return done.stdout + done.stderr, calls[:-1]


def torch_installs(calls: list[list[str]]) -> list[list[str]]:
    return [c for c in calls if TORCH_PIN in c]


def test_with_the_variable_torch_comes_from_that_index(tmp_path: Path) -> None:
    out, calls = run_setup(tmp_path, torch_importable=False, index_url=CPU_INDEX)
    assert torch_installs(calls) == [["install", "--index-url", CPU_INDEX, TORCH_PIN]], calls
    assert f"installing {TORCH_PIN} from {CPU_INDEX}" in out, out


def test_without_it_the_pin_from_pips_index_and_the_warning_first(tmp_path: Path) -> None:
    out, calls = run_setup(tmp_path, torch_importable=False, index_url=None)
    assert torch_installs(calls) == [["install", TORCH_PIN]], calls
    assert "--index-url" not in calls[0]
    assert f"installing {TORCH_PIN} from pip's configured index" in out, out
    assert "CUDA build, several GB" in out, out
    assert f"PA_KIT_TORCH_INDEX_URL={CPU_INDEX} bash compile.sh --setup" in out, out


@pytest.mark.parametrize("index_url", [None, CPU_INDEX])
def test_an_importable_torch_is_kept(tmp_path: Path, index_url: str | None) -> None:
    out, calls = run_setup(tmp_path, torch_importable=True, index_url=index_url)
    assert torch_installs(calls) == [], calls
    assert "torch 9.9.9+standin already importable, kept" in out, out
    assert "CUDA" not in out


def test_the_project_itself_is_installed_after_torch(tmp_path: Path) -> None:
    """Negative control for the recorder: setup's other pip command is seen, so an empty torch list above is
    the absence of a torch install, not of a record."""
    _, calls = run_setup(tmp_path, torch_importable=False, index_url=None)
    assert len(calls) == 2 and calls[1][:2] == ["install", "-e"] and calls[1][2].endswith("[test,bench]"), calls
