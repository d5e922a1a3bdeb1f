"""``compile.sh`` on an aarch64 host: the mock builds (its x86 SIMD files compile to nothing there) and the summary
says that the x86 SIMD paths were skipped; the x86-64-only cross build is skipped with its reason, never a failure.

``compile.sh`` sourced defines its functions without building; ``host_arch`` is redefined to play the host, and a
stand-in compiler writes its ``-o`` file, so these take a fraction of a second.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: ``--version`` prints a line; otherwise the argument after ``-o`` is created.
STANDIN_CC = """#!/usr/bin/env bash
if [[ "$1" == "--version" ]]; then echo "standin-cc 1.0"; exit 0; fi
while [[ $# -gt 0 ]]; do
    if [[ "$1" == "-o" ]]; then : >"$2"; exit 0; fi
    shift
done
exit 9
"""


def summary(tmp_path: Path, arch: str, steps: str) -> tuple[int, list[str]]:
    cc = tmp_path / "cc"
    cc.write_text(STANDIN_CC)
    cc.chmod(0o755)
    script = (f"source {ROOT / 'compile.sh'}; CC={cc}; BUILD_DIR={tmp_path}; LIB_DIR={tmp_path / 'lib'}; "
              f"host_arch() {{ echo {arch}; }}; {steps}; printf 'STATUS %s\\n' $STATUS")
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line.removeprefix("compile.sh: ") for line in done.stdout.splitlines()]
    return int(lines[-1].split()[1]), lines[:-1]


def test_an_aarch64_host_builds_the_mock_and_skips_the_x86_parts(tmp_path: Path) -> None:
    status, lines = summary(tmp_path, "aarch64", "build_mock; build_aarch64_cross")
    assert status == 0, lines
    assert any(line.startswith("mock device: built") for line in lines), lines
    assert any("aarch64 host: the x86 SIMD paths" in line and "skipped" in line for line in lines), lines
    assert any(line.startswith("aarch64 cross build: skipped (this host is aarch64") for line in lines), lines


def test_an_x86_host_says_nothing_of_skipped_simd_paths(tmp_path: Path) -> None:
    """Negative control: the line is the aarch64 host's, not printed everywhere."""
    status, lines = summary(tmp_path, "x86_64", "build_mock")
    assert status == 0 and any(line.startswith("mock device: built") for line in lines), lines
    assert not any("skipped" in line for line in lines), lines
