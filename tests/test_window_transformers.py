"""``window_left = W`` is transformers' ``sliding_window = W + 1``: proved against transformers' own mask.

gpt-oss's sliding layers in transformers attend through ``create_sliding_window_causal_mask`` (the model maps
``"sliding_attention"`` to it), whose mask keeps ``q - sliding_window < kv <= q``: ``sliding_window`` keys,
the query's own included.  pa-kit (with FlashInfer) counts the keys *left* of the query instead, so
``sliding_window = 128`` is ``window_left = 127``.  An off-by-one here would pass every test that builds its
expectation from pa-kit's own words, so the expectation comes from transformers itself, two ways:

* the key sets: every row of the mask transformers builds for a prefill (no cache), and for steps of 1..16
  query tokens after a cache that has already dropped keys beyond the window (transformers' sliding cache
  keeps ``sliding_window - 1`` past tokens), against the keys the float64 golden of ``accuracy/reference.py``
  attends to with ``Features(window_left=127)`` (read off its weights with one-hot values);
* the attention: transformers' gpt-oss eager attention (its mask, its sinks, its truncated cache) against the
  golden's output on the whole history in pages, and the golden's lse (natural log, sink included) against
  the one transformers' own probabilities imply (the sink's probability is ``e^(sink - lse)``).

Negative controls: ``window_left`` 126 and 128 select other keys and give other outputs.  Needs the ``e2e``
extra; ``PA_KIT_REQUIRE_E2E=1`` (CI) turns its absence into a failure instead of a skip.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch

from accuracy.reference import Features, attention_lse

pytestmark = pytest.mark.e2e

SLIDING_WINDOW = 128
WINDOW_LEFT = SLIDING_WINDOW - 1
BLOCK_SIZE = 16
HEADS, KV_HEADS, HEAD_DIM = 4, 2, 16
#: (tokens already in transformers' cache, query tokens of the step): below, at and past the window's edge.
STEPS = [(0, 1), (60, 1), (126, 1), (127, 1), (128, 1), (129, 1), (300, 1),
         (124, 4), (126, 4), (200, 4), (112, 16), (127, 16), (250, 16)]


def _transformers() -> Any:
    """The gpt-oss modules of the installed transformers (imported on first use, as test_e2e_llama.py does)."""
    if os.environ.get("PA_KIT_REQUIRE_E2E") != "1":
        pytest.importorskip("transformers", reason="the e2e extra is not installed: pip install -e '.[e2e]'")
    from transformers.models.gpt_oss import modeling_gpt_oss

    return modeling_gpt_oss


def _config() -> Any:
    mg = _transformers()
    return mg.GptOssConfig(
        vocab_size=32, hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, num_local_experts=2, num_experts_per_tok=1,
        sliding_window=SLIDING_WINDOW, attn_implementation="eager")


def _sliding_mask(q_len: int, cache: Any = None) -> tuple[torch.Tensor, int]:
    """transformers' float64 mask for a step of ``q_len`` tokens after what ``cache`` holds, as gpt-oss builds it
    for its sliding layers: (``[1, 1, q_len, kv_length]``, 0 = kept; absolute position of column 0)."""
    config = _config()
    mask = _transformers().create_sliding_window_causal_mask(
        config=config, inputs_embeds=torch.zeros(1, q_len, config.hidden_size, dtype=torch.float64),
        attention_mask=None, past_key_values=cache)
    offset = cache.get_mask_sizes(q_len, 0)[1] if cache is not None else 0
    return mask, offset


def _paged(keys: torch.Tensor, values: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``[n, kv_heads, d]`` keys/values in shuffled pages of BLOCK_SIZE tokens: (key cache, value cache, table)."""
    n = keys.shape[0]
    pages = -(-n // BLOCK_SIZE)
    order = torch.randperm(pages + 3, generator=torch.Generator().manual_seed(seed))[:pages]
    shape = (pages + 3, BLOCK_SIZE, *keys.shape[1:])
    key_cache, value_cache = torch.zeros(shape, dtype=keys.dtype), torch.zeros(shape, dtype=keys.dtype)
    for token in range(n):
        key_cache[order[token // BLOCK_SIZE], token % BLOCK_SIZE] = keys[token]
        value_cache[order[token // BLOCK_SIZE], token % BLOCK_SIZE] = values[token]
    return key_cache, value_cache, order.to(torch.int32).unsqueeze(0)


def _golden_keys(length: int, q_len: int, window_left: int) -> torch.Tensor:
    """The keys the golden attends to, read off its weights: zero queries weigh every kept key equally and
    one-hot values put key j's weight in output column j.  ``[q_len, length]`` bool."""
    values = torch.eye(length, dtype=torch.float64).unsqueeze(1)  # [length, 1 kv head, d = length]
    key_cache, value_cache, table = _paged(torch.zeros_like(values), values, seed=length)
    query = torch.zeros(1, q_len, 1, length, dtype=torch.float64)
    out, _ = attention_lse(query, key_cache, value_cache, table, [length], 1.0, torch.float64,
                           Features(window_left=window_left))
    return out[0, :, 0] > 0


def test_gptoss_sliding_layers_use_this_mask() -> None:
    """The mask function tested below is the one gpt-oss's sliding layers get, with the config's window."""
    mg = _transformers()
    config = _config()
    from transformers import masking_utils

    assert mg.create_sliding_window_causal_mask is masking_utils.create_sliding_window_causal_mask
    assert config.layer_types == ["sliding_attention", "full_attention"]
    assert mg.GptOssAttention(config, 0).sliding_window == SLIDING_WINDOW
    assert mg.GptOssAttention(config, 1).sliding_window is None


def test_window_left_127_keeps_the_prefill_mask_rows() -> None:
    """Every query position 0..299 of a 300-token prefill: the same keys, the first 128 rows unwindowed."""
    mask, offset = _sliding_mask(300)
    kept = mask[0, 0] == 0
    assert offset == 0
    assert torch.equal(_golden_keys(300, 300, WINDOW_LEFT), kept)
    assert int(kept.sum(dim=1).max()) == SLIDING_WINDOW


def _filled_cache(past: int, generator: torch.Generator) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """A gpt-oss DynamicCache that has seen ``past`` tokens on both layers, and the full history it was fed."""
    cache = _transformers().DynamicCache(config=_config())
    keys = torch.randn(past, KV_HEADS, HEAD_DIM, generator=generator, dtype=torch.float64)
    values = torch.randn(past, KV_HEADS, HEAD_DIM, generator=generator, dtype=torch.float64)
    if past:
        for layer in range(2):
            cache.update(keys.transpose(0, 1)[None], values.transpose(0, 1)[None], layer)
    return cache, keys, values


@pytest.mark.parametrize(("past", "q_len"), STEPS)
def test_window_left_127_keeps_the_cached_step_mask(past: int, q_len: int) -> None:
    """A step after a cache: transformers' columns (offset by what its sliding cache dropped) are the
    golden's keys for each of the step's query tokens."""
    cache, _, _ = _filled_cache(past, torch.Generator().manual_seed(past))
    mask, offset = _sliding_mask(q_len, cache)
    kept = mask[0, 0] == 0
    expected = torch.zeros(q_len, past + q_len, dtype=torch.bool)
    expected[:, offset:offset + kept.shape[1]] = kept
    assert torch.equal(_golden_keys(past + q_len, q_len, WINDOW_LEFT), expected)


@pytest.mark.parametrize("window_left", [WINDOW_LEFT - 1, WINDOW_LEFT + 1])
def test_other_windows_keep_other_keys(window_left: int) -> None:
    """Negative control: one key more or fewer than transformers' window is caught by the same comparison."""
    kept = _sliding_mask(300)[0][0, 0] == 0
    differs = (_golden_keys(300, 300, window_left) != kept).sum(dim=1)
    assert torch.equal(differs[:WINDOW_LEFT].clamp(max=1), torch.zeros(WINDOW_LEFT, dtype=torch.long))
    assert bool((differs[SLIDING_WINDOW:] == 1).all())


def _attention_step(past: int, q_len: int, window_left: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One sliding-layer step both ways, float64: (transformers' eager output ``[q_len, heads, d]``, the golden's
    output, and the golden's lse minus the lse implied by transformers' probabilities ``[q_len, heads]``)."""
    mg = _transformers()
    generator = torch.Generator().manual_seed(1000 + past + q_len)
    cache, past_keys, past_values = _filled_cache(past, generator)
    module = mg.GptOssAttention(_config(), 0).double().eval()
    with torch.no_grad():
        module.sinks.copy_(torch.randn(HEADS, generator=generator, dtype=torch.float64) * 2)
    mask, _ = _sliding_mask(q_len, cache)
    query = torch.randn(q_len, HEADS, HEAD_DIM, generator=generator, dtype=torch.float64) * 2
    new_keys = torch.randn(q_len, KV_HEADS, HEAD_DIM, generator=generator, dtype=torch.float64)
    new_values = torch.randn(q_len, KV_HEADS, HEAD_DIM, generator=generator, dtype=torch.float64)
    # the keys transformers attends over: what its sliding cache kept, plus the step's own
    keys, values = cache.update(new_keys.transpose(0, 1)[None], new_values.transpose(0, 1)[None], 0)
    with torch.no_grad():
        out, probs = mg.eager_attention_forward(module, query.transpose(0, 1)[None], keys, values, mask,
                                                scaling=module.scaling)
    implied_lse = module.sinks.detach()[:, None] - torch.log1p(-probs[0].sum(dim=-1))  # [heads, q_len]
    key_cache, value_cache, table = _paged(torch.cat([past_keys, new_keys]), torch.cat([past_values, new_values]),
                                           seed=past)
    golden, lse = attention_lse(query[None], key_cache, value_cache, table, [past + q_len], module.scaling,
                                torch.float64, Features(window_left=window_left, sinks=module.sinks.detach()))
    return out[0], golden[0], lse[0] - implied_lse.T


@pytest.mark.parametrize(("past", "q_len"), STEPS)
def test_golden_with_window_left_127_is_transformers_attention(past: int, q_len: int) -> None:
    """gpt-oss's eager attention (sinks, sliding mask, truncated cache) equals the golden on the whole history."""
    theirs, golden, lse_error = _attention_step(past, q_len, WINDOW_LEFT)
    assert float((theirs - golden).abs().max()) < 1e-12
    assert float(lse_error.abs().max()) < 1e-9


@pytest.mark.parametrize("window_left", [WINDOW_LEFT - 1, WINDOW_LEFT + 1])
def test_other_windows_give_other_attention(window_left: int) -> None:
    """Negative control at the attention level: past the window's edge the output moves far above 1e-12."""
    theirs, golden, _ = _attention_step(200, 4, window_left)
    assert float((theirs - golden).abs().max()) > 1e-4
