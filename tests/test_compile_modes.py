"""``compile.sh``'s build modes: a plain run on a fresh build/ leaves the clang parts out (the mock's first result
does not wait for them) and says so; ``--all``, or any clang part already built, builds them all (a stale sim
library must never be what the tests load).  ``compile.sh`` sourced defines its functions without building; the
build steps are replaced by stand-ins that only say they ran."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STAND_INS = "build_emu() { echo RAN build_emu; }; check_a2a3() { echo RAN a2a3; }"


def _clang_parts(lib_dir: Path, build_all: str = "") -> str:
    script = (f"source {ROOT / 'compile.sh'} && LIB_DIR={lib_dir} && BUILD_ALL={build_all} && {STAND_INS} && "
              "build_clang_parts")
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, check=True)
    return done.stdout


@pytest.mark.parametrize(("present", "build_all", "built"), [
    ((), "", False), ((), "1", True), (("libpa_sim.so",), "", True), (("libpa_a2a3_vec.so",), "", True),
    (("libpa_mock.so", "libpa_plan.so"), "", False),
])
def test_clang_parts_are_built_with_all_or_once_present(tmp_path: Path, present: tuple[str, ...], build_all: str,
                                                         built: bool) -> None:
    for name in present:
        (tmp_path / name).touch()
    out = _clang_parts(tmp_path, build_all)
    ran = [line for line in out.splitlines() if line.startswith("RAN ")]
    assert ran == (["RAN build_emu", "RAN a2a3"] if built else []), out
    if not built:
        assert "not built" in out and "bash compile.sh --all" in out, out
