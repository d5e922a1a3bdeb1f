"""DeepSeek-V3 decodes through pa-kit's MLA: the tiny model of ``examples/paged_deepseek.py`` against transformers.

Four requests share three slots of a continuously batching loop: each is prefilled through pa-kit in one step
(``q_len`` = its prompt length), then decodes one token per step; a finished request's pages (block_size 64,
from a shuffled pool) are NaN-filled and taken by the next.  Every logit row of every request, prefill and
decode, is compared with transformers' eager forward of the same model on the same tokens.

Tolerance, as in ``tests/test_e2e_llama.py``: twice the error transformers' own forward makes in the same dtype
against its fp32 forward on the same tokens; greedy tokens must equal fp32 transformers' wherever the top-1/top-2
margin exceeds it, and at least half the rows must qualify.  Before pa-kit is involved, the absorbed decode
itself is checked: in fp32, with the float64 MLA golden (:func:`accuracy.reference.mla_reference`) in place of
pa-kit, it must equal transformers' fp32 forward to 1e-3, which no rounding excuses (a wrong absorption, scale or rotary
could not hide in a low-precision tolerance).

Measured on the mock (``-s`` prints them): bf16 transformers is 0.0364 from fp32, so the tolerance is 0.0729,
and pa-kit 0.0378; fp16 0.00498 (tolerance 0.00996), pa-kit 0.00497.  The ``q_len`` 2 verification step equals
two one-token steps bit for bit, and the fp32 absorbed decode with the float64 MLA is 3.7e-6 from transformers.

Negative controls, each of which must break the tolerance (measured, bf16): the rope part left out of the score
(1.12), the scale without YaRN's mscale**2, ``qk_head_dim ** -0.5`` (1.26), and the scale of the kernel's head
dim, ``576 ** -0.5`` (1.68).

The file runs in about 15 s on 2 cores.

Needs the ``e2e`` extra (``pip install -e ".[e2e]"``); ``PA_KIT_REQUIRE_E2E=1`` (CI) turns its absence into a
failure instead of a skip.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from functools import cache
from typing import Any

import pytest
import torch

from accuracy.reference import mla_reference
from tests.e2e_support import DTYPES, EXAMPLES, ROOT, import_example

pytestmark = pytest.mark.e2e

#: The references: transformers' forward in each dtype, and in fp32 (the exact one).
REFERENCE_DTYPES = {**DTYPES, "fp32": torch.float32}
TOLERANCE_FACTOR = 2.0
#: The fp32 absorbed decode with the float64 MLA against transformers' fp32 forward: reassociation only.
EXACT_TOLERANCE = 1e-3
#: The verification step: after this many one-token steps, each request's next two tokens in one step.
VERIFY_AFTER = 6


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    """One intra-op thread while this file runs: the model's matrices are tiny (a step is a few rows), so more
    threads only add synchronisation, and on a busy machine every op then waits for a descheduled thread
    (measured on 2 shared cores: 12 s per decode with 2 threads, 0.7 s with one)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _examples() -> Any:
    return import_example("paged_deepseek")


def mla_golden(query: torch.Tensor, query_rope: torch.Tensor, kv_cache: torch.Tensor, kv_rope_cache: torch.Tensor,
               block_table: torch.Tensor, context_lens: Sequence[int], *, scale: float) -> torch.Tensor:
    """MLA in float64 by pa-kit's one golden (:func:`accuracy.reference.mla_reference`), in the query's dtype."""
    ref = mla_reference(query, query_rope, kv_cache, kv_rope_cache, block_table, list(context_lens), scale)
    return ref.golden.to(query.dtype)


class Float64MlaRunner:
    """:func:`mla_golden` behind ``MlaPagedAttentionRunner``'s engine interface (for_engine/update/run)."""

    def __init__(self, scale: float) -> None:
        self.scale = scale
        self.lens: list[int] = []
        self.table = torch.empty(0, 0, dtype=torch.int32)

    @classmethod
    def for_engine(cls, *, scale: float, **sizes: Any) -> Float64MlaRunner:
        return cls(scale)

    def update(self, context_lens: Sequence[int], block_table: torch.Tensor | None = None) -> None:
        self.lens = [int(n) for n in context_lens]
        if block_table is not None:
            self.table = block_table.clone()

    def run(self, query: torch.Tensor, query_rope: torch.Tensor, kv_cache: torch.Tensor,
            kv_rope_cache: torch.Tensor, out: torch.Tensor | None = None, lse: torch.Tensor | None = None
            ) -> torch.Tensor:
        return mla_golden(query, query_rope, kv_cache, kv_rope_cache, self.table, self.lens, scale=self.scale)


def _serve(dtype: torch.dtype, forced: list[list[int]] | None = None, **options: Any
           ) -> tuple[list[list[int]], list[torch.Tensor], Any]:
    """The demo requests through :func:`paged_deepseek.serve`: (streams, logits per request, the decoder)."""
    pd = _examples()
    config = pd.tiny_deepseek_config()
    decoder = pd.PagedDeepseekDecoder(pd.build_model(config, dtype=dtype), **options)
    streams, logits = pd.serve(decoder, pd.demo_requests(config.vocab_size), forced=forced)
    return streams, logits, decoder


@cache
def _run(dtype: str) -> tuple[list[list[int]], list[torch.Tensor], Any]:
    """Greedy continuous-batching decode on the mock."""
    return _serve(DTYPES[dtype], backend="mock")


@cache
def _reference(dtype: str, streams: tuple[tuple[int, ...], ...]) -> list[torch.Tensor]:
    """transformers' forward in ``dtype`` on ``streams`` (a tuple, to be cached: several tests compare with it)."""
    pd = _examples()
    model = pd.build_model(pd.tiny_deepseek_config(), dtype=REFERENCE_DTYPES[dtype])
    return pd.reference_logits(model, [list(stream) for stream in streams])


def _tolerance(dtype: str, streams: list[list[int]]) -> tuple[float, list[torch.Tensor]]:
    """(2 x transformers' own dtype-vs-fp32 logit error on these tokens, fp32 transformers' logits)."""
    key = tuple(tuple(stream) for stream in streams)
    exact = _reference("fp32", key)
    return TOLERANCE_FACTOR * _examples().max_error(_reference(dtype, key), exact), exact


def _check_tokens(logits: list[torch.Tensor], exact: list[torch.Tensor], tolerance: float) -> float:
    """The logit error within ``tolerance`` and greedy agreement at confident rows; returns the error."""
    error = _examples().max_error(logits, exact)
    assert error <= tolerance, f"max logit error {error:.4g} > tolerance {tolerance:.4g}"
    got, want = torch.cat(logits), torch.cat(exact)
    top = want.topk(2, dim=-1).values
    confident = (top[:, 0] - top[:, 1]) > tolerance
    assert bool((got.argmax(-1) == want.argmax(-1))[confident].all()), "greedy tokens differ at a confident row"
    assert confident.float().mean() >= 0.5, "too few rows with a clear top-1 for the token check to mean much"
    return error


def test_absorbed_decode_is_exact_with_a_float64_mla(monkeypatch: pytest.MonkeyPatch) -> None:
    """The model side alone (absorption, latent cache, rotary, scale, batching) in fp32 against transformers."""
    pd = _examples()
    monkeypatch.setattr(pd, "MlaPagedAttentionRunner", Float64MlaRunner)
    streams, logits, _ = _serve(torch.float32)
    error = pd.max_error(logits, _reference("fp32", tuple(tuple(stream) for stream in streams)))
    print(f"\nfp32 absorbed decode, float64 MLA: max |logits - fp32 transformers| {error:.3g}")
    assert error <= EXACT_TOLERANCE


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_paged_decode_matches_transformers(dtype: str) -> None:
    streams, logits, decoder = _run(dtype)
    tolerance, exact = _tolerance(dtype, streams)
    error = _check_tokens(logits, exact, tolerance)
    print(f"\n{dtype}: pa-kit max |logits - fp32 transformers| {error:.4g}, tolerance {tolerance:.4g}")
    # a request crossed a page, and every request gave its pages back NaN-filled (the fourth took a freed slot)
    cache = decoder.cache
    assert max(len(stream) for stream in streams) > cache.block_size
    assert cache.allocator.free_pages == cache.num_blocks and bool((cache.block_table == -1).all())
    assert all(bool(pages.isnan().all()) for pages in cache.latent + cache.rope)


def test_verify_step_of_two_tokens_matches_one_token_steps() -> None:
    """The ``q_len`` 2 step of multi-token prediction gives the logits of two one-token steps."""
    pd = _examples()
    streams, logits, _ = _run("bf16")
    tolerance, exact = _tolerance("bf16", streams)
    requests = pd.demo_requests(pd.tiny_deepseek_config().vocab_size)[:3]
    decoder = pd.PagedDeepseekDecoder(pd.build_model(pd.tiny_deepseek_config(), dtype=torch.bfloat16),
                                      backend="mock")
    lens = [len(request.prompt) for request in requests]
    verified = pd.verify_logits(decoder, streams[:3], lens, VERIFY_AFTER)
    rows = [slice(n + VERIFY_AFTER, n + VERIFY_AFTER + 2) for n in lens]
    error = max(float((v - logits[i][r]).abs().max()) for i, (v, r) in enumerate(zip(verified, rows, strict=True)))
    print(f"\nq_len 2 step: max |logits - one-token steps| {error:.3g}")
    assert error <= tolerance, f"the verification step differs from one-token steps by {error:.4g}"
    assert pd.max_error(verified, [exact[i][r] for i, r in enumerate(rows)]) <= tolerance


def _without_rope(runner_class: Any) -> Any:
    """``runner_class`` whose runners leave the rope part out of the score (``query_rope`` zeroed)."""

    class NoRope:
        @classmethod
        def for_engine(cls, **options: Any) -> Any:
            runner = runner_class.for_engine(**options)
            run = runner.run

            def without_rope(query: torch.Tensor, query_rope: torch.Tensor, *caches: torch.Tensor) -> torch.Tensor:
                return run(query, torch.zeros_like(query_rope), *caches)

            runner.run = without_rope
            return runner

    return NoRope


#: Each control's scale from the layer (None: the layer's own scale, the rope part dropped instead).
CONTROLS = {
    "rope part dropped": None,
    "scale without mscale": lambda attn: attn.qk_head_dim ** -0.5,
    "scale of the kernel's head dim": lambda attn: (attn.kv_lora_rank + attn.qk_rope_head_dim) ** -0.5,
}


@pytest.mark.parametrize("control", list(CONTROLS))
def test_negative_controls_break_the_tolerance(control: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pd = _examples()
    streams, _, _ = _run("bf16")
    tolerance, exact = _tolerance("bf16", streams)
    scale = CONTROLS[control]
    if scale is None:
        monkeypatch.setattr(pd, "MlaPagedAttentionRunner", _without_rope(pd.MlaPagedAttentionRunner))
    else:
        monkeypatch.setattr(pd, "softmax_scale", scale)
    _, logits, _ = _serve(torch.bfloat16, forced=streams, backend="mock")
    error = pd.max_error(logits, exact)
    print(f"\n{control}: max |logits - fp32 transformers| {error:.3g} (tolerance {tolerance:.3g})")
    assert error > tolerance


def test_example_script_runs() -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # as _one_thread, for the same reason
    done = subprocess.run([sys.executable, str(EXAMPLES / "paged_deepseek.py")], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, check=False, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "max |logits - fp32 transformers|" in done.stdout


@pytest.mark.parametrize("rescale", ["plain", "pow2"])
def test_decode_and_verify_step_on_the_device_path(rescale: str) -> None:
    """The bf16 decode and the ``q_len`` 2 verification step on ``sim`` (the NPU kernel's MLA path) under each
    ``mla_rescale``, with the mock test's tolerance: the device path serves a real model, not only synthetic cases."""
    pd = _examples()
    streams, logits, _ = _serve(torch.bfloat16, backend="sim", mla_rescale=rescale)
    tolerance, exact = _tolerance("bf16", streams)
    error = _check_tokens(logits, exact, tolerance)
    requests = pd.demo_requests(pd.tiny_deepseek_config().vocab_size)[:3]
    decoder = pd.PagedDeepseekDecoder(pd.build_model(pd.tiny_deepseek_config(), dtype=torch.bfloat16),
                                      backend="sim", mla_rescale=rescale)
    lens = [len(request.prompt) for request in requests]
    verified = pd.verify_logits(decoder, streams[:3], lens, VERIFY_AFTER)
    rows = [slice(n + VERIFY_AFTER, n + VERIFY_AFTER + 2) for n in lens]
    step_error = max(float((v - logits[i][r]).abs().max())
                     for i, (v, r) in enumerate(zip(verified, rows, strict=True)))
    print(f"\nsim {rescale}: max |logits - fp32 transformers| {error:.4g}, q_len 2 step vs one-token steps "
          f"{step_error:.3g}, tolerance {tolerance:.4g}")
    assert step_error <= tolerance, f"the verification step differs from one-token steps by {step_error:.4g}"
    assert pd.max_error(verified, [exact[i][r] for i, r in enumerate(rows)]) <= tolerance
