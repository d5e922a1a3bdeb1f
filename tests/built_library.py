"""One rule for tests that need a library ``compile.sh`` may not have built (the sim, the emulator): skip with
the reason, except under ``PA_KIT_REQUIRE_SIM=1`` (CI), where a missing build is a failure."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from launcher.library import lib_dir

REQUIRE_ENV = "PA_KIT_REQUIRE_SIM"


def library_or_skip(name: str) -> Path:
    """``build/lib/<name>``, or a skip (a failure under ``PA_KIT_REQUIRE_SIM=1``) when it is not built."""
    path = lib_dir() / name
    if not path.is_file():
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but {path} was not built (bash compile.sh --all builds it)")
        pytest.skip(f"{path} not built (bash compile.sh --all builds it where clang-19 and the pto-isa headers are)")
    return path
