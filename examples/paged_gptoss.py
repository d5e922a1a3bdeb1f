"""A gpt-oss model decoding through pa-kit: sliding-window and full layers, attention sinks, a speculative step.

The model is transformers' own ``GptOssForCausalLM`` built from a small ``GptOssConfig`` with random weights
(nothing is downloaded); everything but attention is its own modules (embedding, RMSNorm, YaRN rotary
embedding, biased projections, the experts, the head).  Attention is pa-kit with gpt-oss's two features:

* **sliding window**: a layer whose ``config.layer_types`` entry is ``"sliding_attention"`` attends to its
  last ``config.sliding_window`` keys, the query's own included (transformers' mask), which is pa-kit's
  ``window_left = sliding_window - 1`` (``tests/test_window_transformers.py`` proves the two equal);
* **sinks**: each layer's ``self_attn.sinks`` (one logit per query head, in the softmax denominator only) is
  passed to ``runner.run(..., sinks=...)`` as it is, in the model's dtype.

A runner's query length and window are fixed, so the decoder keeps one runner per (layer kind, query length):
sliding and full layers, one-token steps and the ``max_q_len``-token verification step of speculative
decoding.  The two kinds keep their K/V in separate page pools (:class:`KindCache`), as engines do: the sliding
pool frees every page that lies wholly before the next query token's window (and fills it with NaN, so a
kernel that read it would show it in the logits), so its pool is a few pages per sequence however long the
context grows; its block table holds -1 where the freed pages were, which pa-kit never reads.

Why every expert runs on every token (``num_experts_per_tok = num_local_experts``): with top-k routing a
rounding-sized change in attention can flip which expert a token takes, which moves the logits by far more
than the rounding (measured: bf16 transformers against its own fp32 forward, 0.43 with top-2 of 4 experts,
0.023 with all 4), so the comparison would measure the router, not attention.  The experts, their biases and
the router's softmax weighting are still gpt-oss's own code.

Accuracy (``tests/test_e2e_gptoss.py``; the tolerance is measured, as for the Llama example: twice the error
transformers' own forward makes in the same dtype against its fp32 forward on the same tokens).  On the mock,
64 steps of 3 sequences: bf16 transformers is 0.0285 from fp32 (tolerance 0.057), pa-kit 0.0279; fp16 0.0031
(tolerance 0.0061), pa-kit 0.0037.  A 4-token verification step equals four one-token steps bit for bit on the
mock and is 0.021 from fp32.  Without the window, with it one key too wide or too narrow, or without sinks the
error is 1.00, 0.22, 0.20 and 1.29 (bf16).

    python examples/paged_gptoss.py                 # mock, bf16, 40 steps; --dtype fp16, --draft 1..16
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")  # before torch: see docs/API.md, "Environment variables"
sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: paged_llama, then launcher
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

import torch
from paged_llama import BlockAllocator, random_prompts
from transformers import GptOssConfig, GptOssForCausalLM
from transformers.models.gpt_oss.modeling_gpt_oss import apply_rotary_pos_emb

from launcher import PagedAttentionRunner

__all__ = ["GptOssConfig", "KindCache", "PagedGptOssDecoder", "build_model", "decode", "random_prompts",
           "reference_logits", "tiny_gptoss_config", "verify_logits", "window_left"]

#: Weight std: larger than gpt-oss's 0.02 so that attention is far from uniform (see examples/paged_llama.py).
INIT_STD = 0.05
#: Sink std: transformers draws sinks with the weights' std, and a sink near 0 weighs about as much as one more
#: key, which would hardly show; logits of a few units make some heads give most of their weight to the sink
#: and others almost none, so dropping them moves the logits far past the tolerance (1.29 against 0.057).
SINK_STD = 2.0
#: YaRN as gpt-oss configures it (factor 32), on a small original context so that positions matter here.
ROPE = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
        "original_max_position_embeddings": 64, "rope_theta": 150000.0}


def tiny_gptoss_config(*, layers: int = 4, hidden: int = 128, heads: int = 8, kv_heads: int = 2, head_dim: int = 32,
                       vocab: int = 512, sliding_window: int = 24, experts: int = 4) -> GptOssConfig:
    """A small gpt-oss config: layers alternate sliding (even) and full (odd) attention, as gpt-oss's do."""
    return GptOssConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim, num_local_experts=experts,
        num_experts_per_tok=experts, sliding_window=sliding_window, initializer_range=INIT_STD,
        max_position_embeddings=int(ROPE["original_max_position_embeddings"] * ROPE["factor"]),
        rope_parameters=dict(ROPE), attn_implementation="eager",
    )


def build_model(config: GptOssConfig, *, seed: int = 0, dtype: torch.dtype = torch.float32) -> GptOssForCausalLM:
    """Random weights from ``seed`` (the same for every dtype), sinks drawn with :data:`SINK_STD`, eval mode."""
    torch.manual_seed(seed)
    model = GptOssForCausalLM(config).eval()
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.sinks.normal_(0.0, SINK_STD, generator=generator)
    return model.to(dtype)


def window_left(config: GptOssConfig, layer: int) -> int:
    """pa-kit's ``window_left`` for ``layer``: transformers keeps ``sliding_window`` keys, the query's own
    included, so ``sliding_window - 1`` keys to its left; -1 (no window) for a full-attention layer."""
    return config.sliding_window - 1 if config.layer_types[layer] == "sliding_attention" else -1


class KindCache:
    """The paged K/V of every layer of one attention kind, in one pool of pages with one block table.

    With a window (``window_left = W >= 0``) the pages that lie wholly before ``length - W`` are freed after
    each step: the next step's first query token sits at ``length`` and reads keys from ``length - W`` on, and
    later tokens read no further back.  A freed page is filled with NaN and its table entry set to -1.
    """

    def __init__(self, layers: list[int], window: int, *, num_blocks: int, block_size: int, kv_heads: int,
                 head_dim: int, dtype: torch.dtype, batch: int, max_pages: int, seed: int = 0) -> None:
        self.layers, self.window, self.num_blocks, self.block_size = layers, window, num_blocks, block_size
        shape = (num_blocks, block_size, kv_heads, head_dim)
        # NaN in every page: a read of a slot nobody wrote (or of a freed page) shows up in the logits.
        self.keys = {layer: torch.full(shape, float("nan"), dtype=dtype) for layer in layers}
        self.values = {layer: torch.full(shape, float("nan"), dtype=dtype) for layer in layers}
        self.allocator = BlockAllocator(num_blocks, seed=seed)
        self.lengths = [0] * batch
        self.block_table = torch.full((batch, max_pages), -1, dtype=torch.int32)
        self.peak_pages = 0

    def append(self, tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Reserve the next ``tokens`` slots of every sequence: (pages, offsets), each ``[batch, tokens]``."""
        pages = torch.empty(len(self.lengths), tokens, dtype=torch.long)
        offsets = torch.empty_like(pages)
        for seq, length in enumerate(self.lengths):
            for t in range(tokens):
                page, offset = divmod(length + t, self.block_size)
                if page >= self.block_table.shape[1]:
                    raise RuntimeError(f"sequence {seq} would exceed {self.block_table.shape[1]} pages")
                if offset == 0:
                    self.block_table[seq, page] = self.allocator.allocate()
                pages[seq, t], offsets[seq, t] = int(self.block_table[seq, page]), offset
            self.lengths[seq] = length + tokens
        self.peak_pages = max(self.peak_pages, self.num_blocks - self.allocator.free_pages)
        return pages, offsets

    def write(self, layer: int, slots: tuple[torch.Tensor, torch.Tensor], key: torch.Tensor,
              value: torch.Tensor) -> None:
        """``key``/``value`` ``[batch, tokens, kv_heads, head_dim]`` into the slots :meth:`append` reserved."""
        self.keys[layer][slots] = key
        self.values[layer][slots] = value

    def release_behind_window(self) -> None:
        """Free every page no later step can read (none without a window); see the class docstring."""
        if self.window < 0:
            return
        for seq, length in enumerate(self.lengths):
            for page in range(max(0, length - self.window) // self.block_size):
                block = int(self.block_table[seq, page])
                if block >= 0:
                    for layer in self.layers:
                        self.keys[layer][block] = float("nan")
                        self.values[layer][block] = float("nan")
                    self.allocator.release([block])
                    self.block_table[seq, page] = -1


class PagedGptOssDecoder:
    """Steps of 1..``max_q_len`` tokens per sequence for a batch, attention through pa-kit on paged caches.

    ``runner_options`` go to :meth:`~launcher.PagedAttentionRunner.for_engine` (e.g. ``backend``).
    """

    def __init__(self, model: GptOssForCausalLM, *, batch: int, block_size: int = 16, max_context: int = 256,
                 max_q_len: int = 4, spare_pages: int = 3, seed: int = 0, **runner_options: Any) -> None:
        config = model.config
        self.model, self.config, self.batch = model, config, batch
        self.dtype = next(model.parameters()).dtype
        self.max_pages = -(-max_context // block_size)
        self.caches: dict[int, KindCache] = {}  # by window_left: -1 (full) and sliding_window - 1
        for index in range(config.num_hidden_layers):
            window = window_left(config, index)
            if window not in self.caches:
                layers = [i for i in range(config.num_hidden_layers) if window_left(config, i) == window]
                # a window needs its last W + max_q_len tokens' pages (+1: the window may start mid-page)
                per_seq = self.max_pages if window < 0 else min(self.max_pages,
                                                                (window + max_q_len - 1) // block_size + 2)
                self.caches[window] = KindCache(
                    layers, window, num_blocks=batch * per_seq + spare_pages, block_size=block_size,
                    kv_heads=config.num_key_value_heads, head_dim=config.head_dim, dtype=self.dtype, batch=batch,
                    max_pages=self.max_pages, seed=seed + len(self.caches))
        self.max_q_len = max_q_len
        self.runner_options = runner_options
        self.runners: dict[tuple[int, int], PagedAttentionRunner] = {}

    def _runner(self, window: int, q_len: int) -> PagedAttentionRunner:
        """The runner of one layer kind and query length, built on first use (its q_len and window are fixed)."""
        key = (window, q_len)
        if key not in self.runners:
            config, cache = self.config, self.caches[window]
            self.runners[key] = PagedAttentionRunner.for_engine(
                num_heads=config.num_attention_heads, num_kv_heads=config.num_key_value_heads,
                head_dim=config.head_dim, block_size=cache.block_size, dtype=self.dtype, max_batch=self.batch,
                max_pages_per_seq=self.max_pages, num_blocks=cache.num_blocks, q_len=q_len, window_left=window,
                sinks_dtype=self.model.model.layers[0].self_attn.sinks.dtype, **self.runner_options)
        return self.runners[key]

    @torch.no_grad()
    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Feed ``tokens`` ``[batch, q_len]`` (q_len 1..max_q_len; ``[batch]`` is one token); returns the logits
        after each fed token, ``[batch, q_len, vocab]`` float32."""
        tokens = tokens.reshape(self.batch, -1)
        batch, q_len = tokens.shape
        if not 1 <= q_len <= self.max_q_len:
            raise ValueError(f"a step feeds 1..{self.max_q_len} tokens per sequence, got {q_len}")
        model, config = self.model.model, self.config
        heads, kv_heads, head_dim = config.num_attention_heads, config.num_key_value_heads, config.head_dim
        positions = torch.tensor(next(iter(self.caches.values())).lengths).unsqueeze(1) + torch.arange(q_len)
        slots = {window: cache.append(q_len) for window, cache in self.caches.items()}
        for window, cache in self.caches.items():  # plan once per step and kind, for all its layers
            self._runner(window, q_len).update(cache.lengths, cache.block_table)
        hidden = model.embed_tokens(tokens)  # [B, q_len, hidden]
        cos, sin = model.rotary_emb(hidden, positions)
        for index, layer in enumerate(model.layers):
            attn, window = layer.self_attn, window_left(config, index)
            x = layer.input_layernorm(hidden)
            q = attn.q_proj(x).view(batch, q_len, heads, head_dim).transpose(1, 2)
            k = attn.k_proj(x).view(batch, q_len, kv_heads, head_dim).transpose(1, 2)
            v = attn.v_proj(x).view(batch, q_len, kv_heads, head_dim)
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            self.caches[window].write(index, slots[window], k.transpose(1, 2), v)
            query = q.transpose(1, 2)  # [B, q_len, heads, D]; one token: [B, heads, D]
            query = query[:, 0] if q_len == 1 else query
            out = self._runner(window, q_len).run(query.contiguous(), self.caches[window].keys[index],
                                                  self.caches[window].values[index], sinks=attn.sinks.detach())
            hidden = hidden + attn.o_proj(out.reshape(batch, q_len, heads * head_dim))
            mlp_out, _ = layer.mlp(layer.post_attention_layernorm(hidden))
            hidden = hidden + mlp_out
        for cache in self.caches.values():
            cache.release_behind_window()
        return self.model.lm_head(model.norm(hidden)).float()


def decode(decoder: PagedGptOssDecoder, prompts: list[list[int]], steps: int,
           forced: list[list[int]] | None = None) -> tuple[list[list[int]], torch.Tensor]:
    """``steps`` one-token steps: each sequence reads its prompt, then its own greedy tokens (or, with
    ``forced``, those streams).  Returns the streams and the logits ``[steps, batch, vocab]`` after each step."""
    streams = [list(prompt[:1]) for prompt in prompts]
    all_logits = []
    for t in range(steps):
        logits = decoder.step(torch.tensor([stream[t] for stream in streams]))[:, 0]
        all_logits.append(logits)
        if t + 1 < steps:
            for seq, prompt in enumerate(prompts):
                source = forced[seq] if forced is not None else prompt
                streams[seq].append(source[t + 1] if t + 1 < len(source) else int(logits[seq].argmax()))
    return streams, torch.stack(all_logits)


def verify_logits(decoder: PagedGptOssDecoder, streams: list[list[int]], prefix: int, draft: int) -> torch.Tensor:
    """Speculative decoding's verification: ``prefix`` one-token steps, then the next ``draft`` tokens of every
    stream in one step (``q_len = draft``).  Returns that step's logits ``[draft, batch, vocab]``, which must
    equal what ``draft`` more one-token steps give."""
    for t in range(prefix):
        decoder.step(torch.tensor([stream[t] for stream in streams]))
    return decoder.step(torch.tensor([stream[prefix:prefix + draft] for stream in streams])).transpose(0, 1)


@torch.no_grad()
def reference_logits(model: GptOssForCausalLM, streams: list[list[int]]) -> torch.Tensor:
    """transformers' own forward (eager attention: its sliding mask, its sinks) on each token stream, no cache:
    ``[steps, batch, vocab]`` float32, :func:`decode`'s layout."""
    rows = [model(torch.tensor([stream]), use_cache=False).logits[0].float() for stream in streams]
    return torch.stack(rows, dim=1)


def main(argv: list[str] | None = None) -> int:
    """Greedy decoding on a backend, then the logits against transformers' and a speculative step's check."""
    import argparse

    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16}
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("mock", "sim", "npu"), default="mock")
    parser.add_argument("--dtype", choices=sorted(dtypes), default="bf16")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--draft", type=int, default=4, help="tokens the speculative step verifies at once")
    args = parser.parse_args(argv)
    config = tiny_gptoss_config()
    model = build_model(config, dtype=dtypes[args.dtype])
    prompts = random_prompts((5, 12, 1), config.vocab_size, seed=1)
    decoder = PagedGptOssDecoder(model, batch=len(prompts), max_q_len=args.draft, backend=args.backend)
    streams, logits = decode(decoder, prompts, args.steps)
    exact = reference_logits(build_model(config, dtype=torch.float32), streams)
    own = reference_logits(model, streams)
    prefix = args.steps - args.draft
    verified = verify_logits(PagedGptOssDecoder(model, batch=len(prompts), max_q_len=args.draft,
                                                backend=args.backend), streams, prefix, args.draft)
    for seq, (prompt, stream) in enumerate(zip(prompts, streams, strict=True)):
        print(f"sequence {seq}: prompt {prompt}\n            generated {stream[len(prompt):]}")
    sliding = decoder.caches[config.sliding_window - 1]
    print(f"layers {config.layer_types}; window_left {config.sliding_window - 1} on the sliding ones; sliding pool "
          f"{sliding.num_blocks} pages (peak {sliding.peak_pages} in use), full pool peak "
          f"{decoder.caches[-1].peak_pages}")
    print(f"max |logits - fp32 transformers|: pa-kit {(logits - exact).abs().max():.3g}, transformers in "
          f"{args.dtype} {(own - exact).abs().max():.3g}")
    print(f"speculative step of {args.draft} tokens after {prefix}: max |logits - one-token steps| "
          f"{(verified - logits[prefix:]).abs().max():.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
