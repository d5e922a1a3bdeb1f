"""The ABI version a message states comes from the ABI: ``kernel/pa_kernel_abi.h`` through its mirror
``tiling.abi.ABI_VERSION``, never a number typed into the message (which would stay behind when the ABI moves
on, and then name a contract the library no longer speaks).

The guard reads every message the Python side raises (the string parts of ``raise X(...)``) and refuses one
that writes an ABI version as a literal.  Naming an old version's layout as history ("ABI v1 scratch", what
``handoff_tokens=0`` plans) is not a claim about the current version and is allowed by name.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from launcher.errors import KernelContractError
from tiling import abi

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("launcher", "tiling", "accuracy", "benchmark", "workloads", "timing", "tools")
LITERAL_VERSION = re.compile(r"\bABI (?:v|version )\d+", re.IGNORECASE)
#: Old versions' layouts named as such: history, not the current version.
HISTORY = ("ABI v1 scratch",)


def literal_versions(source: str) -> list[str]:
    """The string constants of every ``raise`` statement in ``source`` that state an ABI version literally."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Raise) or node.exc is None:
            continue
        for part in ast.walk(node.exc):
            if isinstance(part, ast.Constant) and isinstance(part.value, str):
                text = part.value
                for allowed in HISTORY:
                    text = text.replace(allowed, "")
                if LITERAL_VERSION.search(text):
                    found.append(part.value)
    return found


def test_no_raised_message_states_an_abi_version_literally() -> None:
    offenders = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found = literal_versions(path.read_text())
            if found:
                offenders[str(path.relative_to(ROOT))] = found
    assert not offenders, f"state the version as tiling.abi.ABI_VERSION: {offenders}"


def test_the_guard_finds_a_literal_version() -> None:
    """Negative control: the messages the guard exists for are found, in f-strings too; history is not."""
    assert literal_versions('raise RuntimeError("the launch broke the ABI v1 contract")')
    assert literal_versions('raise ValueError(f"{path} speaks kernel ABI version 3, expected {x}")')
    assert not literal_versions('raise ValueError(f"ABI v{abi.ABI_VERSION} contract")')
    assert not literal_versions('raise ValueError("must be 0 (ABI v1 scratch) or a multiple of 512")')
    assert not literal_versions('x = "ABI v1"')  # not a raised message


def test_a_contract_error_names_the_abi_of_the_mirror() -> None:
    message = str(KernelContractError(int(abi.ErrorCode.BAD_KEY), message="key 99"))
    assert message.startswith(f"kernel contract (ABI v{abi.ABI_VERSION}) violated: BAD_KEY"), message
    assert re.findall(r"ABI v(\d+)", message) == [str(abi.ABI_VERSION)]
