"""Test configuration shared by ``tests/`` and ``test_pa_accuracy.py``.

``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` is set before anything imports torch: with torch_npu installed but no
CANN, torch's backend auto-load makes ``import torch`` fail for the whole process.

``--backend mock|sim|npu`` (default ``mock``) picks where the accuracy cases run.  ``sim`` is skipped with
a reason when ``build/lib/libpa_sim.so`` has not been built, ``npu`` when no usable NPU is found.  A missing
mock library is *not* skipped: it is a build failure and the tests say how to fix it.
"""

from __future__ import annotations

import os

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

import importlib.util

import pytest

BACKEND_CHOICES = ("mock", "sim", "npu")
#: Tensor device type each backend launches on.
BACKEND_DEVICES = {"mock": "cpu", "sim": "cpu", "npu": "npu"}


def pytest_report_header(config: pytest.Config) -> str:
    """Which seeds the device-path simulation's launches use: replay a failure with the PA_SIM_SEED it names."""
    seed = os.environ.get("PA_SIM_SEED")
    if seed:
        return f"sim: every launch with PA_SIM_SEED={seed}"
    return "sim: a fresh seed per launch (each failure names its PA_SIM_SEED; set it to replay)"


@pytest.fixture(params=["compiled checks", "python checks"])
def check_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test on both of run()'s check paths (the compiled one only where it is built)."""
    from launcher import run_check  # not at import time: torch must see the environment set above

    if request.param == "python checks":
        monkeypatch.setattr(run_check, "load", lambda: None)
    elif run_check.load() is None:
        pytest.skip("launcher/run_check is not built (bash compile.sh)")
    return str(request.param)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--backend", action="store", default="mock", choices=BACKEND_CHOICES,
        help="where accuracy cases launch: the C mock device (default), the pto-isa simulation, or an NPU",
    )


def npu_unavailable_reason() -> str | None:
    """Why the npu backend cannot run here, or None.  Never lets a broken torch_npu break this process."""
    if importlib.util.find_spec("torch_npu") is None:
        return "torch_npu is not installed"
    try:
        import torch
        import torch_npu  # noqa: F401

        if not torch.npu.is_available():  # type: ignore[attr-defined]
            return "torch_npu reports no NPU"
    except (ImportError, RuntimeError, OSError) as error:
        return f"torch_npu is unusable: {type(error).__name__}: {error}"
    return None


def backend_skip_reason(name: str) -> str | None:
    """Why ``--backend name`` cannot run here (sim library absent, no NPU), or None."""
    if name == "sim":
        from launcher.library import library_path

        path = library_path("sim")
        if not path.is_file():
            return f"sim backend: {path} not built (it needs clang-19 and the pto-isa headers; see compile.sh)"
    if name == "npu":
        return npu_unavailable_reason()
    return None


@pytest.fixture(scope="session")
def backend_name(request: pytest.FixtureRequest) -> str:
    """The ``--backend`` chosen for this run; skips the requesting tests when it cannot run here."""
    name = str(request.config.getoption("--backend"))
    reason = backend_skip_reason(name)
    if reason:
        pytest.skip(reason)
    return name


@pytest.fixture(scope="session")
def device(backend_name: str) -> str:
    """Device type the chosen backend's tensors live on."""
    return BACKEND_DEVICES[backend_name]
