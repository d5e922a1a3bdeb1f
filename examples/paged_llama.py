"""A Llama-architecture model decoding with its KV cache in pa-kit pages, the way an engine drives a kernel.

Everything but attention is the ``transformers`` model's own modules (embedding, RMSNorm, rotary embedding,
projections, MLP, head), so the only thing that differs from ``model(input_ids)`` is where K/V live and who
attends:

* :class:`BlockAllocator` hands out page ids from a shuffled free list, so consecutive tokens of a sequence
  land on scattered pages of a cache larger than needed;
* :class:`PagedKVCache` holds one ``[num_blocks, block_size, kv_heads, head_dim]`` key and value cache per
  layer and the block table of every sequence;
* :class:`PagedLlamaDecoder` runs one decode step for a batch: it plans once (``runner.update``) and calls
  ``runner.run`` once per layer with that layer's query and caches.

Tensor parallelism (``tp_rank``/``tp_size``) shards query and KV heads and the MLP over ranks: each rank keeps
the cache of its own KV heads, calls pa-kit on its heads only, and the partial outputs of the attention output
projection and of the MLP down projection are summed with ``torch.distributed.all_reduce`` (in float32, which
every backend reduces, including gloo on the CPU).
"""

from __future__ import annotations

import os

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")  # before torch: see docs/API.md, "Environment variables"

from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from launcher import PagedAttentionRunner

#: Weight std of the tiny model: larger than Llama's 0.02 so that attention is far from uniform (at 0.02 a
#: wrong page would hardly change the logits, and the test would prove little).
INIT_STD = 0.05


def tiny_llama_config(*, layers: int = 2, hidden: int = 256, heads: int = 8, kv_heads: int = 2, head_dim: int = 32,
                      vocab: int = 512, max_positions: int = 1024) -> LlamaConfig:
    """A small GQA Llama config (nothing is downloaded); ``head_dim`` a multiple of 16 as pa-kit requires."""
    return LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
        max_position_embeddings=max_positions, initializer_range=INIT_STD, tie_word_embeddings=False,
        attn_implementation="eager",
    )


def build_model(config: LlamaConfig, *, seed: int = 0, dtype: torch.dtype = torch.float32) -> LlamaForCausalLM:
    """Random weights from ``seed`` (the same on every rank and for every dtype), in eval mode."""
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    return model.to(dtype)


class BlockAllocator:
    """Page ids from a shuffled free list: a sequence's pages are scattered over the whole cache."""

    def __init__(self, num_blocks: int, *, seed: int = 0) -> None:
        order = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(seed))
        self._free = [int(block) for block in order]

    def allocate(self) -> int:
        if not self._free:
            raise RuntimeError("the KV cache is full: no free page left")
        return self._free.pop()

    def release(self, blocks: list[int]) -> None:
        self._free.extend(blocks)

    @property
    def free_pages(self) -> int:
        return len(self._free)


@dataclass
class PagedKVCache:
    """Per-layer paged K/V caches and the pages of each sequence (allocated on demand, one page at a time)."""

    layers: int
    num_blocks: int
    block_size: int
    kv_heads: int
    head_dim: int
    dtype: torch.dtype
    batch: int
    max_pages: int
    seed: int = 0
    keys: list[torch.Tensor] = field(init=False)
    values: list[torch.Tensor] = field(init=False)
    pages: list[list[int]] = field(init=False)
    lengths: list[int] = field(init=False)
    block_table: torch.Tensor = field(init=False)

    def __post_init__(self) -> None:
        shape = (self.num_blocks, self.block_size, self.kv_heads, self.head_dim)
        # NaN in every page: a read of a slot nobody wrote shows up in the logits.
        self.keys = [torch.full(shape, float("nan"), dtype=self.dtype) for _ in range(self.layers)]
        self.values = [torch.full(shape, float("nan"), dtype=self.dtype) for _ in range(self.layers)]
        self.allocator = BlockAllocator(self.num_blocks, seed=self.seed)
        self.pages = [[] for _ in range(self.batch)]
        self.lengths = [0] * self.batch
        self.block_table = torch.full((self.batch, self.max_pages), -1, dtype=torch.int32)

    def append_slots(self) -> list[tuple[int, int]]:
        """Reserve the next token of every sequence: (page, offset) each; grows the block table as needed."""
        slots = []
        for seq in range(self.batch):
            position = self.lengths[seq]
            if position % self.block_size == 0:
                if len(self.pages[seq]) == self.max_pages:
                    raise RuntimeError(f"sequence {seq} would exceed {self.max_pages} pages")
                page = self.allocator.allocate()
                self.block_table[seq, len(self.pages[seq])] = page
                self.pages[seq].append(page)
            slots.append((self.pages[seq][position // self.block_size], position % self.block_size))
            self.lengths[seq] = position + 1
        return slots

    def write(self, layer: int, slots: list[tuple[int, int]], key: torch.Tensor, value: torch.Tensor) -> None:
        """``key``/``value`` ``[batch, kv_heads, head_dim]`` into each sequence's reserved slot."""
        pages = torch.tensor([page for page, _ in slots])
        offsets = torch.tensor([offset for _, offset in slots])
        self.keys[layer][pages, offsets] = key
        self.values[layer][pages, offsets] = value


def _shard(total: int, rank: int, size: int, what: str) -> slice:
    if total % size:
        raise ValueError(f"{what} ({total}) must be a multiple of the tensor-parallel size {size}")
    part = total // size
    return slice(rank * part, (rank + 1) * part)


class PagedLlamaDecoder:
    """One decode step at a time for a batch, attention through pa-kit on the paged cache.

    ``tp_rank``/``tp_size`` > 1 needs an initialised ``torch.distributed`` process group.  ``runner_options``
    go to :class:`~launcher.PagedAttentionRunner` (e.g. ``backend``, ``batch_invariant``).
    """

    def __init__(self, model: LlamaForCausalLM, *, batch: int, block_size: int = 16, max_context: int = 256,
                 spare_pages: int = 7, tp_rank: int = 0, tp_size: int = 1, seed: int = 0,
                 **runner_options: Any) -> None:
        config = model.config
        self.model, self.tp_rank, self.tp_size = model, tp_rank, tp_size
        self.dtype = next(model.parameters()).dtype
        self.head_dim = config.head_dim
        self.heads = _shard(config.num_attention_heads, tp_rank, tp_size, "num_attention_heads")
        self.kv_heads = _shard(config.num_key_value_heads, tp_rank, tp_size, "num_key_value_heads")
        self.mlp = _shard(config.intermediate_size, tp_rank, tp_size, "intermediate_size")
        self.num_heads = self.heads.stop - self.heads.start
        self.num_kv_heads = self.kv_heads.stop - self.kv_heads.start
        max_pages = -(-max_context // block_size)
        self.cache = PagedKVCache(config.num_hidden_layers, batch * max_pages + spare_pages, block_size,
                                  self.num_kv_heads, self.head_dim, self.dtype, batch, max_pages, seed=seed)
        self.runner_options = runner_options
        self.runner: PagedAttentionRunner | None = None
        self.attn_out = torch.empty(batch, self.num_heads, self.head_dim, dtype=self.dtype)

    def _rows(self, weight: torch.Tensor, heads: slice) -> torch.Tensor:
        return weight[heads.start * self.head_dim:heads.stop * self.head_dim]

    def _reduce(self, partial: torch.Tensor) -> torch.Tensor:
        if self.tp_size == 1:
            return partial
        total = partial.float()
        torch.distributed.all_reduce(total)
        return total.to(partial.dtype)

    @torch.no_grad()
    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Feed one token per sequence (``[batch]`` int64); returns the next-token logits ``[batch, vocab]``."""
        model, cache = self.model.model, self.cache
        positions = torch.tensor(cache.lengths).unsqueeze(1)
        slots = cache.append_slots()
        lens = list(cache.lengths)
        hidden = model.embed_tokens(tokens.unsqueeze(1))  # [B, 1, hidden]
        cos, sin = model.rotary_emb(hidden, positions)
        batch = tokens.shape[0]
        if self.runner is None:  # the first step plans from layer 0's tensors; later steps re-plan only
            query = torch.empty(batch, self.num_heads, self.head_dim, dtype=self.dtype)
            self.runner = PagedAttentionRunner(query, cache.keys[0], cache.values[0], cache.block_table, lens,
                                               out=self.attn_out, **self.runner_options)
        else:
            self.runner.update(lens, block_table=cache.block_table)  # plan once per step, for every layer
        for index, layer in enumerate(model.layers):
            attn = layer.self_attn
            x = layer.input_layernorm(hidden)
            q = torch.nn.functional.linear(x, self._rows(attn.q_proj.weight, self.heads))
            k = torch.nn.functional.linear(x, self._rows(attn.k_proj.weight, self.kv_heads))
            v = torch.nn.functional.linear(x, self._rows(attn.v_proj.weight, self.kv_heads))
            q = q.view(batch, 1, self.num_heads, self.head_dim).transpose(1, 2)
            k = k.view(batch, 1, self.num_kv_heads, self.head_dim).transpose(1, 2)
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            cache.write(index, slots, k[:, :, 0], v.view(batch, self.num_kv_heads, self.head_dim))
            out = self.runner.run(q[:, :, 0].contiguous(), cache.keys[index], cache.values[index], self.attn_out)
            o_weight = attn.o_proj.weight[:, self.heads.start * self.head_dim:self.heads.stop * self.head_dim]
            hidden = hidden + self._reduce(torch.nn.functional.linear(out.reshape(batch, 1, -1), o_weight))
            x = layer.post_attention_layernorm(hidden)
            mlp = layer.mlp
            gate = torch.nn.functional.linear(x, mlp.gate_proj.weight[self.mlp])
            up = torch.nn.functional.linear(x, mlp.up_proj.weight[self.mlp])
            down = torch.nn.functional.linear(mlp.act_fn(gate) * up, mlp.down_proj.weight[:, self.mlp])
            hidden = hidden + self._reduce(down)
        return self.model.lm_head(model.norm(hidden))[:, 0].float()


def decode(decoder: PagedLlamaDecoder, prompts: list[list[int]], steps: int,
           forced: list[list[int]] | None = None) -> tuple[list[list[int]], torch.Tensor]:
    """``steps`` decode steps: each sequence reads its prompt one token per step, then its own greedy tokens
    (or, with ``forced``, those token streams: to compare two runs on the same inputs).

    Returns every sequence's token stream (``steps`` tokens fed) and the logits ``[steps, batch, vocab]``
    after each step; the logits at step ``t`` predict token ``t + 1``.
    """
    streams = [list(prompt[:1]) for prompt in prompts]
    all_logits = []
    for t in range(steps):
        logits = decoder.step(torch.tensor([stream[t] for stream in streams]))
        all_logits.append(logits)
        if t + 1 < steps:
            for seq, prompt in enumerate(prompts):
                if forced is not None:
                    streams[seq].append(forced[seq][t + 1])
                else:
                    streams[seq].append(prompt[t + 1] if t + 1 < len(prompt) else int(logits[seq].argmax()))
    return streams, torch.stack(all_logits)


def random_prompts(lengths: tuple[int, ...], vocab: int, seed: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in lengths]


@torch.no_grad()
def reference_logits(model: LlamaForCausalLM, streams: list[list[int]]) -> torch.Tensor:
    """transformers' own forward (its attention, its cache-free causal pass) on each token stream:
    ``[steps, batch, vocab]`` float32, the same layout as :func:`decode`'s."""
    rows = [model(torch.tensor([stream])).logits[0].float() for stream in streams]
    return torch.stack(rows, dim=1)
