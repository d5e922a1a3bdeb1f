"""gpt-oss decodes through pa-kit: the tiny model of ``examples/paged_gptoss.py`` against transformers.

Sliding-window layers (``window_left = sliding_window - 1``) alternate with full ones, every layer passes its
own sinks, the sliding layers' pages behind the window are freed (NaN-filled, -1 in the table) as the
context grows, and a speculative step verifies ``DRAFT`` tokens at once (``q_len = DRAFT``).

Tolerance, as in ``tests/test_e2e_llama.py``: twice the error transformers' own forward makes in the same
dtype against its fp32 forward on the same tokens (a second low-precision implementation of the same model,
allowed as much rounding as transformers shows itself, twice); greedy tokens must equal fp32 transformers' at
every step whose top-1/top-2 margin exceeds it, and at least half the steps must qualify.  The speculative
step's logits must match the one-token steps' and fp32 transformers' within the same tolerance.  Measured on
the mock (64 steps, 3 sequences): bf16 transformers 0.0285 from fp32, so the tolerance is 0.057, and pa-kit
0.0279; fp16 0.0031 (tolerance 0.0061), pa-kit 0.0037; the 4-token speculative step equals the one-token
steps' logits bit for bit and is 0.021 from fp32.

Negative controls, each of which must break the tolerance (measured, bf16): no window on the sliding layers
(1.00), the window one key too wide (``window_left = sliding_window``: transformers' ``sliding_window`` taken
for pa-kit's ``window_left``; 0.22) or one key too narrow (0.20), and no sinks (1.29).

Needs the ``e2e`` extra (``pip install -e ".[e2e]"``); ``PA_KIT_REQUIRE_E2E=1`` (CI) turns its absence into a
failure instead of a skip.
"""

from __future__ import annotations

import subprocess
import sys
from functools import cache
from typing import Any

import pytest
import torch

from tests.e2e_support import DTYPES, EXAMPLES, ROOT, import_example

pytestmark = pytest.mark.e2e

#: Prompts of different lengths; steps enough for the 24-token window to slide over several 16-token pages.
PROMPT_LENS = (5, 12, 1)
STEPS = 64
DRAFT = 4
TOLERANCE_FACTOR = 2.0


def _examples() -> Any:
    return import_example("paged_gptoss")


def _decoder(model: Any, backend: str = "mock", **options: Any) -> Any:
    return _examples().PagedGptOssDecoder(model, batch=len(PROMPT_LENS), max_q_len=DRAFT, backend=backend,
                                          **options)


@cache
def _run(dtype: str) -> tuple[list[list[int]], torch.Tensor, Any]:
    """Greedy decoding on the mock: (streams, logits ``[STEPS, batch, vocab]``, the decoder)."""
    pg = _examples()
    config = pg.tiny_gptoss_config()
    prompts = pg.random_prompts(PROMPT_LENS, config.vocab_size, seed=1)
    decoder = _decoder(pg.build_model(config, dtype=DTYPES[dtype]))
    streams, logits = pg.decode(decoder, prompts, STEPS)
    return streams, logits, decoder


@cache
def _tolerance(dtype: str) -> tuple[float, torch.Tensor]:
    """(2 x transformers' own dtype-vs-fp32 logit error on the run's tokens, fp32 transformers' logits)."""
    pg = _examples()
    config = pg.tiny_gptoss_config()
    streams = _run(dtype)[0]
    exact = pg.reference_logits(pg.build_model(config, dtype=torch.float32), streams)
    own = pg.reference_logits(pg.build_model(config, dtype=DTYPES[dtype]), streams)
    return TOLERANCE_FACTOR * float((own - exact).abs().max()), exact


def _check_tokens(logits: torch.Tensor, exact: torch.Tensor, tolerance: float) -> None:
    error = float((logits - exact).abs().max())
    assert error <= tolerance, f"max logit error {error:.4g} > tolerance {tolerance:.4g}"
    top = exact.topk(2, dim=-1).values
    confident = (top[..., 0] - top[..., 1]) > tolerance
    agree = logits.argmax(-1) == exact.argmax(-1)
    assert bool(agree[confident].all()), f"greedy tokens differ at confident steps {confident & ~agree}"


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_paged_decode_matches_transformers(dtype: str) -> None:
    _, logits, decoder = _run(dtype)
    tolerance, exact = _tolerance(dtype)
    _check_tokens(logits, exact, tolerance)
    top = exact.topk(2, dim=-1).values
    assert ((top[..., 0] - top[..., 1]) > tolerance).float().mean() >= 0.5, "too few clear top-1 steps"
    # the sliding pool freed the pages behind the window: its table starts with -1, and it never held
    # as many pages as the full layers' pool
    sliding = decoder.caches[decoder.config.sliding_window - 1]
    assert bool((sliding.block_table[:, 0] == -1).all())
    assert sliding.peak_pages < decoder.caches[-1].peak_pages


@pytest.mark.parametrize("prefix", [22, STEPS - DRAFT])
def test_speculative_step_matches_one_token_steps(prefix: int) -> None:
    """``DRAFT`` tokens verified in one step (across the window's edge, and far past it) give the logits of
    ``DRAFT`` one-token steps, and fp32 transformers'."""
    pg = _examples()
    streams, logits, _ = _run("bf16")
    tolerance, exact = _tolerance("bf16")
    verified = pg.verify_logits(_decoder(pg.build_model(pg.tiny_gptoss_config(), dtype=torch.bfloat16)), streams,
                                prefix, DRAFT)
    steps = slice(prefix, prefix + DRAFT)
    error = float((verified - logits[steps]).abs().max())
    assert error <= tolerance, f"speculative step differs from one-token steps by {error:.4g} > {tolerance:.4g}"
    _check_tokens(verified, exact[steps], tolerance)


#: One-token steps the device-path check decodes: the 24-token window slides over two 16-token pages.
SIM_STEPS = 40


def test_one_token_steps_on_the_device_path_match_transformers() -> None:
    """The NPU kernel's A2/A3 code on the emulator (``backend="sim"``) decodes the same streams one token a step:
    windows and sinks on the sliding layers, sinks on the full ones, pages behind the window freed; its logits
    match fp32 transformers' within the tolerance and the mock's run."""
    pg = _examples()
    streams, mock_logits, _ = _run("bf16")
    tolerance, exact = _tolerance("bf16")
    from tests.built_library import library_or_skip

    library_or_skip("libpa_sim.so")
    decoder = pg.PagedGptOssDecoder(pg.build_model(pg.tiny_gptoss_config(), dtype=torch.bfloat16),
                                    batch=len(PROMPT_LENS), max_q_len=1, backend="sim")
    _, logits = pg.decode(decoder, streams, SIM_STEPS, forced=streams)
    _check_tokens(logits, exact[:SIM_STEPS], tolerance)
    assert float((logits - mock_logits[:SIM_STEPS]).abs().max()) <= tolerance


def test_speculative_step_on_the_device_path_matches_one_token_steps() -> None:
    """The NPU kernel's A2/A3 code verifies ``DRAFT`` tokens in one step across the window's edge (q_len = DRAFT on
    every layer, windows and sinks included): the logits of the mock's one-token steps and fp32 transformers'."""
    pg = _examples()
    streams, logits, _ = _run("bf16")
    tolerance, exact = _tolerance("bf16")
    from tests.built_library import library_or_skip

    library_or_skip("libpa_sim.so")
    prefix = 22
    verified = pg.verify_logits(_decoder(pg.build_model(pg.tiny_gptoss_config(), dtype=torch.bfloat16), backend="sim"),
                                streams, prefix, DRAFT)
    steps = slice(prefix, prefix + DRAFT)
    error = float((verified - logits[steps]).abs().max())
    assert error <= tolerance, f"speculative step on sim differs from one-token steps by {error:.4g} > {tolerance:.4g}"
    _check_tokens(verified, exact[steps], tolerance)


#: A sliding layer's window_left under each window control: transformers' sliding_window plus this (None: none).
WINDOW_CONTROLS = {"no window": None, "window one key too wide": 0, "window one key too narrow": -2}


@pytest.mark.parametrize("control", [*WINDOW_CONTROLS, "no sinks"])
def test_negative_controls_break_the_tolerance(control: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pg = _examples()
    streams, _, _ = _run("bf16")
    tolerance, exact = _tolerance("bf16")
    model = pg.build_model(pg.tiny_gptoss_config(), dtype=torch.bfloat16)
    if control in WINDOW_CONTROLS:
        shift = WINDOW_CONTROLS[control]

        def window(config: Any, layer: int) -> int:
            sliding = config.layer_types[layer] == "sliding_attention"
            return config.sliding_window + shift if sliding and shift is not None else -1

        monkeypatch.setattr(pg, "window_left", window)
    else:
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.sinks.fill_(-1e4)  # e^(sink - m) = 0: the softmax of plain attention
    _, logits = pg.decode(_decoder(model), streams, STEPS, forced=streams)
    assert float((logits - exact).abs().max()) > tolerance


def test_example_script_runs() -> None:
    done = subprocess.run([sys.executable, str(EXAMPLES / "paged_gptoss.py"), "--steps", "8"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "max |logits - fp32 transformers|" in done.stdout
