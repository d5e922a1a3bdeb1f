"""Imports run one way: tiling <- launcher; workloads <- timing <- benchmark; nothing imports the tests.

Read from the sources' syntax trees (every ``import`` and ``from ... import``, at any depth), so a lazy import
inside a function counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: package -> top-level project packages it must never import
FORBIDDEN = {
    "tiling": {"launcher", "benchmark", "timing", "workloads", "accuracy", "tests", "tools"},
    "launcher": {"benchmark", "timing", "workloads", "tests", "tools"},
    "workloads": {"launcher", "benchmark", "timing", "tests", "tools"},
    "timing": {"benchmark", "tests", "tools"},
    "accuracy": {"benchmark", "timing", "tests", "tools"},
    "benchmark": {"tests", "tools"},
}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_run_one_way(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"no sources under {package}/"
    wrong = {f"{path.relative_to(ROOT)} imports {name}" for path in files
             for name in imported_packages(path) & FORBIDDEN[package]}
    assert not wrong, sorted(wrong)


def test_benchmark_script_does_not_import_the_tests() -> None:
    assert not imported_packages(ROOT / "bench_pa_performance.py") & {"tests"}


def test_the_scan_sees_a_violation(tmp_path: Path) -> None:
    """Negative control: a lazy import inside a function is found."""
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from benchmark.suite import Suite\n    import tests.x\n")
    assert imported_packages(source) == {"benchmark", "tests"}


def test_no_c_include_runs_back_up() -> None:
    """The kernel's C and C++ sources include by path from an include root (kernel/, kernel/npu/ and pto-isa's,
    each on the builds' -I list), never with ``..``: a file can move without its includes breaking silently."""
    import re

    include = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)
    sources = [p for ext in ("*.c", "*.h", "*.cpp", "*.hpp") for p in (ROOT / "kernel").rglob(ext)
               if "third_party" not in p.parts]
    assert len(sources) > 20
    upward = [(str(p.relative_to(ROOT)), name) for p in sources for name in include.findall(p.read_text())
              if ".." in Path(name).parts]
    assert not upward, f"includes that run back up: {upward}"
