"""A DeepSeek-V3 model decoding through pa-kit's MLA: a paged latent cache and the absorbed query.

The model is transformers' own ``DeepseekV3ForCausalLM`` built from a small ``DeepseekV3Config`` with random
weights (nothing is downloaded); everything but attention is its own modules (embedding, RMSNorms, YaRN rotary
embedding, projections, MLP, head).  Attention is pa-kit's :class:`~launcher.mla.MlaPagedAttentionRunner`, fed
the way an MLA engine feeds it:

* the cache holds, per token, what ``kv_a_proj_with_mqa`` makes of it: the compressed latent ``c`` after
  ``kv_a_layernorm`` (``kv_lora_rank`` = 512 values, which are also the value) and the rotated ``k_pe`` (64),
  one shared "head" for all query heads; transformers expands ``c`` into per-head keys and values with
  ``kv_b_proj`` at every step, an engine never does;
* ``kv_b_proj``'s weight, split per head, is ``W_UK`` (``[H, qk_nope_head_dim, 512]``) and ``W_UV``
  (``[H, v_head_dim, 512]``).  Head h's key of token j is ``W_UK[h] @ c_j``, so
  ``q_nope[h] . (W_UK[h] @ c_j) = (q_nope[h] @ W_UK[h]) . c_j``: the query moves into latent space instead
  (the *absorbed* query), and since the value is ``W_UV[h] @ c_j``, the attention output is
  ``W_UV[h] @ (softmax @ c)``: pa-kit attends in latent space, ``W_UV`` and ``o_proj`` follow;
* the rotary part and the softmax scale are transformers' own: :func:`rotary` is the function its attention
  calls (``rope_interleave`` picks it), and :func:`softmax_scale` is the layer's ``scaling``, which is
  ``qk_head_dim ** -0.5`` (``qk_nope_head_dim + qk_rope_head_dim``, 192 here, not the kernel's 576) times
  ``mscale(factor, mscale_all_dim) ** 2`` when the YaRN parameters name ``mscale_all_dim`` (1.87 here, as in
  DeepSeek-V3's own config).  Without ``mscale_all_dim`` YaRN's factor multiplies cos and sin instead, so it
  scales only the rope part of the score (squared); the rotary embedding called here carries that too.

:func:`serve` is a continuously batching loop over a few slots: a request waits for a free slot, is prefilled
in one step through pa-kit (``q_len`` = its prompt length, the other slots idle with ``context_lens`` 0), then
decodes one token per step alongside the others; a finished request's pages return to the pool (NaN-filled,
so a stale read would show in the logits) and the next request takes its slot.  Pages of ``block_size`` 64
come from a shuffled pool larger than needed.  :func:`verify_logits` checks a ``q_len`` 2 step (the
verification step of multi-token prediction) against two one-token steps.

Why every layer is dense (``first_k_dense_replace = num_hidden_layers``): with top-k routing a rounding-sized
change in attention can flip an expert and move the logits far more than the rounding, so the comparison would
measure the router, not attention (``examples/paged_gptoss.py`` measured it).

Accuracy (``tests/test_e2e_deepseek.py``; the tolerance is twice the error transformers' own forward makes in
the same dtype against its fp32 forward on the same tokens, as for the Llama and gpt-oss examples).  On the mock,
every prefill and decode row of the four requests: bf16 transformers is 0.0364 from fp32 (tolerance 0.0729),
pa-kit 0.0378; fp16 0.00498 (tolerance 0.00996), pa-kit 0.00497.  A 2-token verification step equals two
one-token steps bit for bit.  Without the rope part, with the scale lacking mscale**2, or with ``576 ** -0.5``
the error is 1.12, 1.26 and 1.68 (bf16).  In fp32 with a float64 MLA in pa-kit's place the absorbed decode is
3.7e-6 from transformers' forward: the absorption itself is exact.

    python examples/paged_deepseek.py               # mock, bf16; --dtype fp16
"""

from __future__ import annotations

import os
import sys
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")  # before torch: see docs/API.md, "Environment variables"
sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: paged_llama, then launcher
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

import torch
from paged_llama import BlockAllocator, random_prompts
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds

from launcher import MlaPagedAttentionRunner

__all__ = ["DeepseekV3Config", "LatentCache", "PagedDeepseekDecoder", "Request", "absorb", "build_model",
           "demo_requests", "max_error", "random_prompts", "reference_logits", "rotary", "serve", "softmax_scale",
           "tiny_deepseek_config", "verify_logits"]

#: Weight std: larger than DeepSeek's 0.02 so that attention is far from uniform (see examples/paged_llama.py).
INIT_STD = 0.05
#: YaRN as DeepSeek-V3 configures it (factor 40, mscale = mscale_all_dim = 1), on a small original context so that
#: positions matter here.  ``mscale_all_dim`` is what puts mscale**2 into the softmax scale.
ROPE = {"rope_type": "yarn", "factor": 40.0, "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0,
        "mscale_all_dim": 1.0, "original_max_position_embeddings": 64, "rope_theta": 10000.0}


def tiny_deepseek_config(*, layers: int = 3, hidden: int = 256, heads: int = 16, q_lora_rank: int | None = 128,
                         qk_nope_head_dim: int = 128, v_head_dim: int = 128, vocab: int = 512) -> DeepseekV3Config:
    """A small DeepSeek-V3 config with the real model's latent sizes (kv_lora_rank 512, rope 64), all dense."""
    return DeepseekV3Config(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads, q_lora_rank=q_lora_rank, kv_lora_rank=512,
        qk_rope_head_dim=64, qk_nope_head_dim=qk_nope_head_dim, v_head_dim=v_head_dim,
        first_k_dense_replace=layers, num_mtp_layers=0, initializer_range=INIT_STD,
        max_position_embeddings=int(ROPE["original_max_position_embeddings"] * ROPE["factor"]),
        rope_parameters=dict(ROPE), attn_implementation="eager",
    )


def build_model(config: DeepseekV3Config, *, seed: int = 0,
                dtype: torch.dtype = torch.float32) -> DeepseekV3ForCausalLM:
    """Random fp32 weights from ``seed`` (the same for every dtype), cast to ``dtype``, eval mode."""
    torch.manual_seed(seed)
    return DeepseekV3ForCausalLM(config).eval().to(dtype)


def softmax_scale(attn: ds.DeepseekV3Attention) -> float:
    """The layer's softmax scale as transformers computes it (``qk_head_dim ** -0.5``, times the YaRN mscale**2
    when ``mscale_all_dim`` is set); a module-level function so that a test can substitute a wrong one."""
    return float(attn.scaling)


def rotary(config: DeepseekV3Config, q_pe: torch.Tensor, k_pe: torch.Tensor, cos: torch.Tensor,
           sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate ``q_pe`` ``[b, t, H, 64]`` and ``k_pe`` ``[b, t, 1, 64]`` as transformers' attention does.

    With ``rope_interleave`` (DeepSeek's default) transformers rotates the pairs ``(x0, x1), (x2, x3), ...``
    and returns them de-interleaved (the rotated even lanes, then the odd ones).  The cache keeps that layout:
    the score only needs ``q_pe`` and ``k_pe`` permuted alike."""
    rotate = ds.apply_rotary_pos_emb_interleave if config.rope_interleave else ds.apply_rotary_pos_emb
    return rotate(q_pe, k_pe, cos, sin, unsqueeze_dim=2)


def absorb(attn: ds.DeepseekV3Attention) -> tuple[torch.Tensor, torch.Tensor]:
    """``kv_b_proj``'s weight split per head: (``W_UK`` ``[H, qk_nope_head_dim, R]``, ``W_UV`` ``[H, v_head_dim,
    R]``), R = kv_lora_rank; transformers' ``expand_kv`` splits its output the same way."""
    weight = attn.kv_b_proj.weight.view(attn.num_heads, attn.qk_nope_head_dim + attn.v_head_dim, attn.kv_lora_rank)
    return weight[:, :attn.qk_nope_head_dim], weight[:, attn.qk_nope_head_dim:]


class LatentCache:
    """Every layer's paged latent (``[num_blocks, block_size, 1, R]``) and rotated ``k_pe``
    (``[num_blocks, block_size, 1, 64]``), one pool of pages and one block-table row per slot."""

    def __init__(self, layers: int, *, slots: int, num_blocks: int, block_size: int, max_pages: int, rank: int,
                 rope_dim: int, dtype: torch.dtype, seed: int = 0) -> None:
        self.num_blocks, self.block_size = num_blocks, block_size
        # NaN in every page: a read of a slot nobody wrote (or of a released page) shows up in the logits.
        self.latent = [torch.full((num_blocks, block_size, 1, rank), float("nan"), dtype=dtype) for _ in range(layers)]
        self.rope = [torch.full((num_blocks, block_size, 1, rope_dim), float("nan"), dtype=dtype)
                     for _ in range(layers)]
        self.allocator = BlockAllocator(num_blocks, seed=seed)
        self.lengths = [0] * slots
        self.block_table = torch.full((slots, max_pages), -1, dtype=torch.int32)
        self.peak_pages = 0

    def append(self, slot: int, tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Reserve the next ``tokens`` positions of ``slot``: (pages, offsets), each ``[tokens]``."""
        start = self.lengths[slot]
        pages = torch.empty(tokens, dtype=torch.long)
        offsets = torch.empty_like(pages)
        for t in range(tokens):
            page, offset = divmod(start + t, self.block_size)
            if page >= self.block_table.shape[1]:
                raise RuntimeError(f"slot {slot} would exceed {self.block_table.shape[1]} pages")
            if offset == 0:
                self.block_table[slot, page] = self.allocator.allocate()
            pages[t], offsets[t] = int(self.block_table[slot, page]), offset
        self.lengths[slot] = start + tokens
        self.peak_pages = max(self.peak_pages, self.num_blocks - self.allocator.free_pages)
        return pages, offsets

    def release(self, slot: int) -> None:
        """Return ``slot``'s pages to the pool, NaN-filled, and empty its table row."""
        blocks = [int(block) for block in self.block_table[slot] if block >= 0]
        for layer in range(len(self.latent)):
            self.latent[layer][blocks] = float("nan")
            self.rope[layer][blocks] = float("nan")
        self.allocator.release(blocks)
        self.block_table[slot] = -1
        self.lengths[slot] = 0


class PagedDeepseekDecoder:
    """Steps of ``q_len`` tokens for any subset of ``slots`` sequences, MLA through pa-kit on a latent cache.

    A runner's ``q_len`` is fixed, so there is one per query length used (prefills of each prompt length, the
    one-token steps, the verification step), all on the same cache.  ``runner_options`` go to
    :meth:`~launcher.mla.MlaPagedAttentionRunner.for_engine` (e.g. ``backend``).
    """

    def __init__(self, model: DeepseekV3ForCausalLM, *, slots: int = 3, block_size: int = 64,
                 max_context: int = 192, spare_pages: int = 5, seed: int = 0, **runner_options: Any) -> None:
        self.model, self.config, self.slots = model, model.config, slots
        self.dtype = next(model.parameters()).dtype
        self.max_pages = -(-max_context // block_size)
        self.cache = LatentCache(self.config.num_hidden_layers, slots=slots, num_blocks=slots * self.max_pages +
                                 spare_pages, block_size=block_size, max_pages=self.max_pages,
                                 rank=self.config.kv_lora_rank, rope_dim=self.config.qk_rope_head_dim,
                                 dtype=self.dtype, seed=seed)
        self.scale = softmax_scale(model.model.layers[0].self_attn)  # one per model: every layer's is the same
        self.absorbed = [absorb(layer.self_attn) for layer in model.model.layers]
        self.runner_options = runner_options
        self.runners: dict[int, Any] = {}

    def _runner(self, q_len: int) -> Any:
        """The runner of one query length, built on first use."""
        if q_len not in self.runners:
            self.runners[q_len] = MlaPagedAttentionRunner.for_engine(
                num_heads=self.config.num_attention_heads, block_size=self.cache.block_size, dtype=self.dtype,
                max_batch=self.slots, max_pages_per_seq=self.max_pages, num_blocks=self.cache.num_blocks,
                scale=self.scale, q_len=q_len, **self.runner_options)
        return self.runners[q_len]

    def release(self, slot: int) -> None:
        """A finished sequence leaves: its pages go back to the pool and ``slot`` is free for the next one."""
        self.cache.release(slot)

    @torch.no_grad()
    def step(self, feeds: dict[int, list[int]]) -> dict[int, torch.Tensor]:
        """Feed ``q_len`` tokens to each slot in ``feeds`` (the same count for all; the other slots idle with
        ``context_lens`` 0).  Returns each fed slot's logits after each of its tokens, ``[q_len, vocab]`` fp32."""
        rows = sorted(feeds)
        q_len = len(feeds[rows[0]])
        if any(len(feeds[slot]) != q_len for slot in rows):
            raise ValueError("every slot of a step feeds the same number of tokens (a runner's q_len is fixed)")
        model, config, cache = self.model.model, self.config, self.cache
        heads, nope, rank = config.num_attention_heads, config.qk_nope_head_dim, config.kv_lora_rank
        positions = torch.tensor([[cache.lengths[slot] + t for t in range(q_len)] for slot in rows])
        where = [cache.append(slot, q_len) for slot in rows]
        pages, offsets = torch.stack([p for p, _ in where]), torch.stack([o for _, o in where])  # [n, q_len]
        runner = self._runner(q_len)
        runner.update([cache.lengths[slot] if slot in feeds else 0 for slot in range(self.slots)], cache.block_table)
        hidden = model.embed_tokens(torch.tensor([feeds[slot] for slot in rows]))  # [n, q_len, hidden]
        cos, sin = model.rotary_emb(hidden, positions)
        query = torch.zeros(self.slots, q_len, heads, rank, dtype=self.dtype)  # idle slots: zeros, unread
        query_rope = torch.zeros(self.slots, q_len, heads, config.qk_rope_head_dim, dtype=self.dtype)
        # the runner's query layout: one token [b, H, D], several [b, q_len, H, D] (views of the buffers)
        q_in, q_rope_in = (query[:, 0], query_rope[:, 0]) if q_len == 1 else (query, query_rope)
        for index, layer in enumerate(model.layers):
            attn = layer.self_attn
            x = layer.input_layernorm(hidden)
            q = attn.q_proj(x) if attn.q_lora_rank is None else attn.q_b_proj(attn.q_a_layernorm(attn.q_a_proj(x)))
            q_nope, q_pe = q.view(len(rows), q_len, heads, attn.qk_head_dim).split([nope, attn.qk_rope_head_dim], -1)
            latent, k_pe = attn.kv_a_proj_with_mqa(x).split([rank, attn.qk_rope_head_dim], dim=-1)
            q_pe, k_pe = rotary(config, q_pe, k_pe.unsqueeze(2), cos, sin)
            cache.latent[index][pages, offsets] = attn.kv_a_layernorm(latent).unsqueeze(2)
            cache.rope[index][pages, offsets] = k_pe
            w_uk, w_uv = self.absorbed[index]
            # q_nope . (W_UK c) = (q_nope W_UK) . c: the absorbed query scores the cached latent c directly
            query[rows] = torch.einsum("bthn,hnr->bthr", q_nope, w_uk)
            query_rope[rows] = q_pe
            latent_out = runner.run(q_in, q_rope_in, cache.latent[index], cache.rope[index])
            # the value is W_UV c, so softmax @ (W_UV c) = W_UV (softmax @ c): back to v_head_dim per head
            out = torch.einsum("bthr,hvr->bthv", latent_out.view(self.slots, q_len, heads, rank)[rows], w_uv)
            hidden = hidden + attn.o_proj(out.reshape(len(rows), q_len, heads * attn.v_head_dim))
            hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        logits = self.model.lm_head(model.norm(hidden)).float()
        return {slot: logits[i] for i, slot in enumerate(rows)}


@dataclass(frozen=True)
class Request:
    """A prompt (at most 16 tokens: it is prefilled in one step) and how many tokens to decode after it."""

    prompt: list[int]
    new_tokens: int


def serve(decoder: PagedDeepseekDecoder, requests: list[Request],
          forced: list[list[int]] | None = None) -> tuple[list[list[int]], list[torch.Tensor]]:
    """Continuous batching: a waiting request takes the first free slot and is prefilled in one step (before
    any decode step), every running request decodes one greedy token per step (or, with ``forced``, the next
    token of that stream), and a request that has fed ``prompt + new_tokens`` tokens leaves.

    Returns every request's token stream and its logits ``[len(stream), vocab]`` (row t predicts token t + 1).
    """
    waiting = deque(range(len(requests)))
    running: dict[int, int] = {}  # slot -> request
    streams = [list(request.prompt) for request in requests]
    logits: list[list[torch.Tensor]] = [[] for _ in requests]
    while waiting or running:
        free = [slot for slot in range(decoder.slots) if slot not in running]
        if waiting and free:
            req = waiting.popleft()
            running[free[0]] = req
            logits[req].append(decoder.step({free[0]: streams[req]})[free[0]])
        else:
            feeds = {}
            for slot, req in running.items():
                t = len(streams[req])
                streams[req].append(forced[req][t] if forced is not None else int(logits[req][-1][-1].argmax()))
                feeds[slot] = streams[req][-1:]
            for slot, rows in decoder.step(feeds).items():
                logits[running[slot]].append(rows)
        for slot, req in list(running.items()):
            if len(streams[req]) == len(requests[req].prompt) + requests[req].new_tokens:
                decoder.release(slot)
                del running[slot]
    return streams, [torch.cat(rows) for rows in logits]


def verify_logits(decoder: PagedDeepseekDecoder, streams: list[list[int]], prompt_lens: list[int],
                  extra: int, draft: int = 2) -> list[torch.Tensor]:
    """Multi-token prediction's verification step: one request per slot is prefilled, decodes ``extra``
    one-token steps of its stream, then feeds its next ``draft`` tokens in one step.  Returns that step's logits
    per request, ``[draft, vocab]``, which must equal those of ``draft`` one-token steps."""
    slots = list(enumerate(zip(streams, prompt_lens, strict=True)))
    for slot, (stream, n) in slots:
        decoder.step({slot: stream[:n]})
    for t in range(extra):
        decoder.step({slot: [stream[n + t]] for slot, (stream, n) in slots})
    last = decoder.step({slot: stream[n + extra:n + extra + draft] for slot, (stream, n) in slots})
    return [last[slot] for slot, _ in slots]


@torch.no_grad()
def reference_logits(model: DeepseekV3ForCausalLM, streams: list[list[int]]) -> list[torch.Tensor]:
    """transformers' own forward (eager attention, no cache) on each stream: ``[len(stream), vocab]`` fp32."""
    return [model(torch.tensor([stream]), use_cache=False).logits[0].float() for stream in streams]


def max_error(logits: list[torch.Tensor], exact: list[torch.Tensor]) -> float:
    """The largest logit difference over every request and position."""
    return max(float((a - b).abs().max()) for a, b in zip(logits, exact, strict=True))


#: The demo's requests: (prompt length, tokens to decode); four requests over three slots, the first crossing a
#: 64-token page.
REQUESTS = ((11, 60), (16, 14), (5, 40), (9, 24))


def demo_requests(vocab: int, seed: int = 1) -> list[Request]:
    """:data:`REQUESTS` with random prompts (the same for every dtype, so that runs compare token for token)."""
    prompts = random_prompts(tuple(n for n, _ in REQUESTS), vocab, seed=seed)
    return [Request(prompt, new) for prompt, (_, new) in zip(prompts, REQUESTS, strict=True)]


def main(argv: list[str] | None = None) -> int:
    """Continuous-batching greedy decode on a backend, then the logits against transformers' forward."""
    import argparse

    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16}
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("mock", "sim", "npu"), default="mock")
    parser.add_argument("--dtype", choices=sorted(dtypes), default="bf16")
    args = parser.parse_args(argv)
    config = tiny_deepseek_config()
    model = build_model(config, dtype=dtypes[args.dtype])
    requests = demo_requests(config.vocab_size)
    decoder = PagedDeepseekDecoder(model, backend=args.backend)
    streams, logits = serve(decoder, requests)
    exact = reference_logits(build_model(config), streams)
    own = reference_logits(model, streams)
    attn = model.model.layers[0].self_attn
    print(f"softmax scale {decoder.scale:.5g} = {attn.qk_head_dim}**-0.5 x mscale**2 "
          f"({decoder.scale * attn.qk_head_dim ** 0.5:.4g}); pool {decoder.cache.num_blocks} pages of "
          f"{decoder.cache.block_size}, peak {decoder.cache.peak_pages} in use")
    for req, stream in zip(requests, streams, strict=True):
        print(f"prompt {req.prompt}\n  generated {stream[len(req.prompt):]}")
    print(f"max |logits - fp32 transformers|: pa-kit {max_error(logits, exact):.3g}, transformers in "
          f"{args.dtype} {max_error(own, exact):.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
