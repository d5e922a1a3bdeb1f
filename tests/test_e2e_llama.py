"""A real model decodes through pa-kit: the tiny Llama of ``examples/paged_llama.py`` against transformers.

Tolerance, justified by the dtype rather than picked: transformers' own forward in fp16/bf16 differs from
its fp32 forward by ``err_ref`` (measured here, on the same tokens).  pa-kit's logits may differ from the
fp32 forward by at most ``2 * err_ref``: a second low-precision implementation of the same model, allowed
as much rounding as transformers shows itself, twice.  Greedy tokens must equal fp32 transformers' at every
step whose top-1/top-2 margin exceeds that tolerance, and at least half the steps must qualify so the token
check is not empty.  Negative control: dropping each sequence's newest token from attention (an off-by-one
in ``context_lens``) breaks the tolerance.

Needs the ``e2e`` extra (``pip install -e ".[e2e]"``); ``PA_KIT_REQUIRE_E2E=1`` (CI) turns its absence into a
failure instead of a skip.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import torch
from built_library import library_or_skip

from launcher import PagedAttentionRunner
from launcher.library import library_path
from tests.e2e_support import DTYPES, EXAMPLES, ROOT, import_example

pytestmark = pytest.mark.e2e


def _examples() -> Any:
    return import_example("paged_llama")


#: Prompts of different lengths (ragged batch), and steps enough for several 16-token pages per sequence.
PROMPT_LENS = (5, 12, 1)
STEPS = 40
TOLERANCE_FACTOR = 2.0


def _backend_available(backend: str) -> None:
    if backend == "sim":
        library_or_skip(library_path("sim").name)


def _run(dtype: str, backend: str, **options: Any) -> tuple[list[list[int]], torch.Tensor, Any]:
    pl = _examples()
    config = pl.tiny_llama_config()
    model = pl.build_model(config, dtype=DTYPES[dtype])
    prompts = pl.random_prompts(PROMPT_LENS, config.vocab_size, seed=1)
    decoder = pl.PagedLlamaDecoder(model, batch=len(prompts), backend=backend, **options)
    streams, logits = pl.decode(decoder, prompts, STEPS)
    return streams, logits, decoder


def _tolerance(dtype: str, streams: list[list[int]]) -> tuple[float, torch.Tensor]:
    """(2 x transformers' own dtype-vs-fp32 logit error on these tokens, fp32 transformers' logits)."""
    pl = _examples()
    config = pl.tiny_llama_config()
    exact = pl.reference_logits(pl.build_model(config, dtype=torch.float32), streams)
    own = pl.reference_logits(pl.build_model(config, dtype=DTYPES[dtype]), streams)
    return TOLERANCE_FACTOR * float((own - exact).abs().max()), exact


@pytest.mark.parametrize(("backend", "dtype"), [("mock", "bf16"), ("mock", "fp16"), ("sim", "bf16")])
def test_paged_decode_matches_transformers(backend: str, dtype: str) -> None:
    _backend_available(backend)
    streams, logits, decoder = _run(dtype, backend)
    tolerance, exact = _tolerance(dtype, streams)
    error = (logits - exact).abs().amax(dim=-1)  # [steps, batch]
    assert float(error.max()) <= tolerance, f"max logit error {float(error.max()):.4g} > tolerance {tolerance:.4g}"
    top = exact.topk(2, dim=-1).values
    confident = (top[..., 0] - top[..., 1]) > tolerance
    assert confident.float().mean() >= 0.5, "too few steps with a clear top-1 for the token check to mean much"
    agree = logits.argmax(-1) == exact.argmax(-1)
    assert bool(agree[confident].all()), f"greedy tokens differ at confident steps {confident & ~agree}"
    # The pages really were scattered: some sequence's consecutive pages are not neighbours.
    assert any(p[i + 1] != p[i] + 1 for p in decoder.cache.pages for i in range(len(p) - 1))


class _ShortRunner(PagedAttentionRunner):
    """Attends to every sequence's context but its newest token (at least one token)."""

    def __init__(self, query: Any, key_cache: Any, value_cache: Any, block_table: Any, lens: list[int],
                 **options: Any) -> None:
        super().__init__(query, key_cache, value_cache, block_table, [max(n - 1, 1) for n in lens], **options)

    def update(self, context_lens: Any, block_table: Any = None) -> None:
        super().update([max(n - 1, 1) for n in context_lens], block_table=block_table)


def test_off_by_one_context_breaks_the_tolerance(monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: attention that misses each sequence's newest token fails the same check."""
    monkeypatch.setattr(_examples(), "PagedAttentionRunner", _ShortRunner)
    streams, logits, _ = _run("bf16", "mock")
    tolerance, exact = _tolerance("bf16", streams)
    assert float((logits - exact).abs().max()) > tolerance


def test_tensor_parallel_two_ranks_match_one_process() -> None:
    _examples()
    from llama_tp import run_tensor_parallel

    streams, logits, _ = _run("bf16", "mock")
    tolerance, _ = _tolerance("bf16", streams)
    shards = run_tensor_parallel(2, "bf16", STEPS, PROMPT_LENS, forced=streams)
    assert shards["streams"] == streams
    error = float((shards["logits"] - logits).abs().max())  # type: ignore[operator]
    assert error <= tolerance, f"tensor-parallel logits differ by {error:.4g} > {tolerance:.4g}"


def test_example_script_runs() -> None:
    done = subprocess.run([sys.executable, str(EXAMPLES / "llama_decode.py"), "--steps", "6"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "max |logits - fp32 transformers|" in done.stdout
