"""What the end-to-end model tests share: where the examples are, the dtypes they run in, and importing an example
model only when a test needs it."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
#: The dtypes each model decodes in, by the names the tests are parametrized with.
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def import_example(name: str) -> ModuleType:
    """``examples/<name>.py``, imported on first use: collecting an e2e file in the default run (which deselects
    it) must not pay for importing transformers.  Skips without the e2e extra, unless ``PA_KIT_REQUIRE_E2E=1``
    (CI) makes its absence a failure."""
    if os.environ.get("PA_KIT_REQUIRE_E2E") != "1":
        pytest.importorskip("transformers", reason="the e2e extra is not installed: pip install -e '.[e2e]'")
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    return importlib.import_module(name)
