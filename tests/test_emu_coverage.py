"""Coverage that cannot drift, and the emulator's independence from pto-isa's CPU implementations.

* ``kernel/npu/emu/COVERAGE.txt`` equals the list a fresh build derives from the kernel objects (compiled
  against the emulator), so a kernel change that reaches a new intrinsic fails here until the list, a
  SEMANTICS.md row and a definition exist;
* every intrinsic the kernel reaches has a row in SEMANTICS.md and a definition in ``libpa_emu.so``; the kernel
  reaches no unemulated intrinsic except the listed ones (rounding-mode variants selected at run time);
* the kernel's emulator build includes no header of pto-isa's ``pto/cpu/`` tree, and nothing it builds carries
  a ``pto::cpu`` or ``pto::cpu_sim`` symbol (only the differential harness's CPU oracle does).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from emu_harness import library_or_skip

from launcher.library import lib_dir

ROOT = Path(__file__).resolve().parent.parent
EMU = ROOT / "kernel" / "npu" / "emu"
OBJ = lib_dir().parent / "obj" / "emu"


def listed(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def reached() -> set[str]:
    return {line for line in listed(EMU / "COVERAGE.txt") if " " not in line}


def test_coverage_list_matches_a_fresh_build() -> None:
    library_or_skip()
    fresh = OBJ / "coverage.txt"
    assert fresh.is_file(), f"{fresh} missing: bash compile.sh builds it"
    assert listed(fresh) == listed(EMU / "COVERAGE.txt"), (
        "the kernel reaches another set of intrinsics than kernel/npu/emu/COVERAGE.txt lists: copy "
        f"{fresh} over it after adding SEMANTICS.md rows and definitions")


def test_every_reached_intrinsic_has_a_row_and_a_definition() -> None:
    table = (EMU / "SEMANTICS.md").read_text()
    rows = set(re.findall(r"^\| `([a-z_0-9]+)`", table, flags=re.MULTILINE))
    missing_rows = reached() - rows
    assert not missing_rows, f"no SEMANTICS.md row for {sorted(missing_rows)}"
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm not found")
    symbols = subprocess.run([nm, "-DC", "--defined-only", str(library_or_skip())], capture_output=True, text=True,
                             check=True).stdout
    defined = set(re.findall(r" T ([a-z_0-9]+)\(", symbols))
    assert not reached() - defined, f"no definition for {sorted(reached() - defined)}"


def test_unemulated_forms_the_kernel_references_are_only_runtime_choices() -> None:
    """The kernel's objects reference the other rounding modes of the conversions (pto-isa's TCVT picks one
    at run time; the kernel asks for RINT) and one vector_dup operand form; anything else is a new gap."""
    others = [line for line in listed(EMU / "COVERAGE.txt") if " " in line]
    allowed = re.compile(r"^(unemulated vconv_f322(f16|bf16)[acfoz]|unemulated vconv_f322s32[acfz]|"
                         r"unemulated-form vector_dup)$")
    assert others and all(allowed.match(line) for line in others), others


def test_kernel_build_includes_no_cpu_implementation_header() -> None:
    library_or_skip()
    deps = (OBJ / "kernel.d").read_text()
    headers = deps.split()
    assert any("/pto/npu/a2a3/" in h for h in headers), "the dependency list should name the A2/A3 headers"
    assert not [h for h in headers if "/pto/cpu/" in h], "the emulator build includes pto/cpu/ headers"


@pytest.mark.parametrize("artifact", ["lib/libpa_emu.so", "obj/emu/kernel_cube.o", "obj/emu/kernel_vec.o",
                                      "lib/libpa_emu_diff_vector_dev.so", "lib/libpa_emu_diff_cube_dev.so"])
def test_no_cpu_implementation_symbol(artifact: str) -> None:
    library_or_skip()
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm not found")
    path = lib_dir().parent / artifact
    symbols = subprocess.run([nm, "-C", str(path)], capture_output=True, text=True, check=True).stdout
    assert "pto::cpu" not in symbols and "pto::cpu_sim" not in symbols


def test_the_symbol_check_sees_the_cpu_oracle() -> None:
    """Negative control: the differential harness's CPU build does carry pto::cpu symbols."""
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm not found")
    oracle = library_or_skip("libpa_emu_diff_vector_cpu.so")
    symbols = subprocess.run([nm, "-C", str(oracle)], capture_output=True, text=True, check=True).stdout
    assert "pto::" in symbols and ("NPUMemoryModel" in symbols or "pto::cpu" in symbols)
