"""Decode context parallelism over ``torch.distributed``: every rank holds a shard of every sequence's KV pages,
attends over it with pa-kit (``return_lse=True``), and the ranks merge their partial outputs by the lse.

    python examples/decode_cp.py --ranks 3          # gloo on the CPU (mock device); every layer checked

What an engine does (vLLM-Ascend's and SGLang's decode context parallelism, with pages as the unit):

* **Pages.** Page ``j`` of a sequence lives on rank ``j % world``; rank ``r``'s cache holds only its own pages
  (global page id ``g`` is local page ``g // world`` of rank ``g % world``) and NaN elsewhere, so a read of a
  page the rank does not own would show.  A rank's shard of a sequence is its pages in order, and its length
  the tokens in them: ``0`` for a sequence shorter than ``r + 1`` pages (an empty shard: pa-kit writes out 0,
  lse ``-inf``).
* **Per step, per rank:** one ``update`` per layer kind with the rank's shard lengths (a torch int64 tensor)
  and a column slice of the rank's persistent block table; per layer one ``run`` into that layer's own
  ``out=``/``lse=``; an all-gather of ``(out, lse)``; :func:`launcher.merge_by_lse`.
* **Sinks** join the softmax denominator once overall: the runners have none and the merge adds them.
* **Sliding window.** pa-kit's ``window_left`` applies to a launch's own token positions.  A shard that is the
  sequence's pages ``0, w, 2w, ..`` has other positions than the sequence, so it cannot express the global
  window; the window's keys are the last ``W + 1`` tokens, a handful of pages, so a window layer's pages are
  not spread: all of a sequence's pages of a window layer live on one rank (its owner, sequences dealt round
  robin), which runs the window on positions that are the sequence's own, and every other rank's shard is
  empty.  That is a limitation of this example's sharding: its window layers balance sequences, not context.
* **q_len 1** only: a shard that does not hold the sequence's last tokens would mask causally by its own
  positions.  MTP / speculative steps are not sharded here.

Each layer's merged output and lse are compared on rank 0 with the float64 golden of the whole context
(:mod:`accuracy.reference`), for GQA with sinks, with window and sinks, without either, and for MLA, with head
counts that are not powers of two, while sequences join, grow and leave.  On an NPU the same worker would run
with the ``hccl`` backend (not tried here).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from accuracy.cases import DEEPSEEK_V3_SCALE
from accuracy.reference import Features, compare, compare_lse, mla_reference, reference
from launcher import MlaPagedAttentionRunner, PagedAttentionRunner, merge_by_lse

BLOCK_SIZE = 16
MAX_BATCH = 6
MAX_PAGES = 12  # per sequence, globally
MLA_LATENT, MLA_ROPE = 512, 64


@dataclass(frozen=True)
class LayerKind:
    """One kind of attention layer: its runner's sizes and features (layers of one kind share a runner)."""

    name: str
    num_heads: int
    num_kv_heads: int = 1
    head_dim: int = 128
    window_left: int = -1
    sinks: bool = False
    mla: bool = False
    dtype: torch.dtype = torch.bfloat16

    @property
    def owned(self) -> bool:
        """A window layer's pages live on one rank per sequence (module docstring, "Sliding window")."""
        return self.window_left >= 0


#: Head counts that are not powers of two (12, 20, 40), the decode features, and MLA.
LAYER_KINDS = (
    LayerKind("gqa12_sinks", num_heads=12, num_kv_heads=4, sinks=True),
    LayerKind("gqa20_window37_sinks", num_heads=20, num_kv_heads=4, head_dim=64, window_left=37, sinks=True),
    LayerKind("gqa40", num_heads=40, num_kv_heads=8, dtype=torch.float16),
    LayerKind("mla12", num_heads=12, head_dim=MLA_LATENT, mla=True, dtype=torch.float16),
    LayerKind("mla20", num_heads=20, head_dim=MLA_LATENT, mla=True),
    LayerKind("mla40", num_heads=40, head_dim=MLA_LATENT, mla=True, dtype=torch.float16),
)


def shard(pages: list[int], length: int, rank: int, world: int, owner: int | None = None) -> tuple[list[int], int]:
    """Rank ``rank``'s shard of a sequence of ``length`` tokens on global ``pages``: (its pages as local ids, its
    token count).  ``owner`` None: page ``j`` is rank ``j % world``'s; else every page is ``owner``'s."""
    mine = [j for j in range(len(pages)) if (owner if owner is not None else j % world) == rank]
    tokens = sum(min(BLOCK_SIZE, length - j * BLOCK_SIZE) for j in mine)
    return [pages[j] // world for j in mine], tokens


@dataclass
class Sequence:
    uid: int
    length: int
    remaining: int
    #: global page ids per page group: "spread" (page j on rank j % world) and "owned" (all on one rank)
    pages: dict[str, list[int]] = field(default_factory=lambda: {"spread": [], "owned": []})


class Caches:
    """One layer's caches: the rank's own pages (NaN elsewhere) and, on rank 0, every page for the golden."""

    def __init__(self, kind: LayerKind, num_blocks: int, world: int, rank: int) -> None:
        self.kind, self.world, self.rank = kind, world, rank
        width = (MLA_LATENT + MLA_ROPE) if kind.mla else kind.head_dim
        heads, parts = (1, 1) if kind.mla else (kind.num_kv_heads, 2)
        # MLA: the latent and its rope part side by side in one tensor, split into views below
        self.local = torch.full((parts, num_blocks // world, BLOCK_SIZE, heads, width), float("nan"),
                                dtype=kind.dtype)
        self.full = torch.full((parts, num_blocks, BLOCK_SIZE, heads, width), float("nan"), dtype=kind.dtype) \
            if rank == 0 else None

    def write(self, page: int, offset: int, values: torch.Tensor) -> None:
        if page % self.world == self.rank:
            self.local[:, page // self.world, offset] = values
        if self.full is not None:
            self.full[:, page, offset] = values

    def tensors(self, full: bool = False) -> tuple[torch.Tensor, ...]:
        """GQA: (key_cache, value_cache); MLA: (kv_cache, kv_rope_cache), each contiguous."""
        held = self.full if full else self.local
        assert held is not None
        if self.kind.mla:
            return held[0, ..., :MLA_LATENT].contiguous(), held[0, ..., MLA_LATENT:].contiguous()
        return held[0], held[1]


class Engine:
    """The state every rank keeps identically (same seed): sequences, the page pools, every layer's caches."""

    def __init__(self, kinds: tuple[LayerKind, ...], layers_per_kind: int, world: int, rank: int, seed: int) -> None:
        self.kinds, self.world, self.rank = kinds, world, rank
        self.gen = torch.Generator().manual_seed(seed)
        self.num_blocks = world * 2 * MAX_BATCH * MAX_PAGES  # a rank's pool holds its owned and spread pages
        ids = torch.randperm(self.num_blocks, generator=self.gen).tolist()
        self.pools = [[g for g in ids if g % world == r] for r in range(world)]  # rank r's free global ids
        self.layers = [(kind, Caches(kind, self.num_blocks, world, rank)) for kind in kinds
                       for _ in range(layers_per_kind)]
        self.running: list[Sequence] = []
        self.next_uid = 0
        self.empty_shards = 0

    def owner(self, seq: Sequence) -> int:
        return seq.uid % self.world

    def _write(self, seq: Sequence, start: int, count: int) -> None:
        for position in range(start, start + count):
            page, offset = divmod(position, BLOCK_SIZE)
            for group, pages in seq.pages.items():
                if page >= len(pages):
                    pages.append(self.pools[page % self.world if group == "spread" else self.owner(seq)].pop())
            for kind, caches in self.layers:
                width = (MLA_LATENT + MLA_ROPE) if kind.mla else kind.head_dim
                heads, parts = (1, 1) if kind.mla else (kind.num_kv_heads, 2)
                values = torch.randn(parts, heads, width, generator=self.gen).to(kind.dtype)
                caches.write(seq.pages["owned" if kind.owned else "spread"][page], offset, values)

    def step_batch(self) -> None:
        """Leave, join (short prompts give empty shards) and grow by one token."""
        for seq in self.running:
            if seq.remaining == 0:
                for pages in seq.pages.values():
                    for g in pages:
                        self.pools[g % self.world].append(g)
                    pages.clear()
        self.running = [s for s in self.running if s.remaining > 0]
        joins = int(torch.randint(1, 3, (1,), generator=self.gen))
        for _ in range(min(joins, MAX_BATCH - len(self.running))):
            prompt = int(torch.randint(1, (MAX_PAGES - 2) * BLOCK_SIZE, (1,), generator=self.gen))
            if torch.rand(1, generator=self.gen).item() < 0.4:
                prompt = int(torch.randint(1, BLOCK_SIZE + 3, (1,), generator=self.gen))  # one or two pages
            seq = Sequence(self.next_uid, prompt, int(torch.randint(1, 6, (1,), generator=self.gen)))
            self.next_uid += 1
            self._write(seq, 0, prompt)
            self.running.append(seq)
        for seq in self.running:
            self._write(seq, seq.length, 1)
            seq.length += 1
            seq.remaining -= 1

    def shards(self, kind: LayerKind) -> tuple[list[list[int]], list[int]]:
        """This rank's (local page ids, token count) of every running sequence for a layer kind."""
        tables, lens = [], []
        for seq in self.running:
            owner = self.owner(seq) if kind.owned else None
            pages, tokens = shard(seq.pages["owned" if kind.owned else "spread"], seq.length, self.rank, self.world,
                                  owner)
            tables.append(pages)
            lens.append(tokens)
            self.empty_shards += tokens == 0
        return tables, lens

    def global_table(self, kind: LayerKind) -> torch.Tensor:
        group = "owned" if kind.owned else "spread"
        width = max(len(s.pages[group]) for s in self.running)
        table = torch.full((len(self.running), width), -1, dtype=torch.int32)
        for row, seq in enumerate(self.running):
            table[row, :len(seq.pages[group])] = torch.tensor(seq.pages[group], dtype=torch.int32)
        return table


def make_runner(kind: LayerKind, local_blocks: int) -> PagedAttentionRunner:
    """The rank's runner for a layer kind: the rank's capacity, the lse on, no sinks (the merge adds them)."""
    sizes: dict[str, Any] = {"block_size": BLOCK_SIZE, "dtype": kind.dtype, "max_batch": MAX_BATCH,
                             "max_pages_per_seq": MAX_PAGES, "num_blocks": local_blocks, "return_lse": True}
    if kind.mla:
        return MlaPagedAttentionRunner.for_engine(num_heads=kind.num_heads, scale=DEEPSEEK_V3_SCALE, **sizes)
    return PagedAttentionRunner.for_engine(num_heads=kind.num_heads, num_kv_heads=kind.num_kv_heads,
                                           head_dim=kind.head_dim, window_left=kind.window_left, **sizes)


def all_gather(tensor: torch.Tensor, world: int) -> list[torch.Tensor]:
    """Every rank's ``tensor``; fp16/bf16 travel as float32 (exact), which every gloo build reduces and gathers."""
    wire = tensor.float() if tensor.element_size() == 2 else tensor
    parts = [torch.empty_like(wire) for _ in range(world)]
    dist.all_gather(parts, wire)
    return [part.to(tensor.dtype) for part in parts]


def cp_worker(rank: int, world: int, init_file: str, result: str, steps: int, layers_per_kind: int, seed: int,
              dist_backend: str = "gloo") -> None:
    """One rank: decode ``steps`` steps; rank 0 checks every merged layer and saves a summary to ``result``."""
    dist.init_process_group(dist_backend, init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)  # ranks share the host's cores
        engine = Engine(LAYER_KINDS, layers_per_kind, world, rank, seed)
        local_blocks = engine.num_blocks // world
        runners = {kind.name: make_runner(kind, local_blocks) for kind in LAYER_KINDS}
        # the engine's persistent tables (one per kind, rank-local ids) and each layer's own output and lse
        tables = {kind.name: torch.full((MAX_BATCH, MAX_PAGES), -1, dtype=torch.int32) for kind in LAYER_KINDS}
        outs = [torch.empty(MAX_BATCH, kind.num_heads, kind.head_dim, dtype=kind.dtype) for kind, _ in engine.layers]
        lses = [torch.empty(MAX_BATCH, kind.num_heads) for kind, _ in engine.layers]
        sinks = {kind.name: torch.randn(kind.num_heads, generator=engine.gen) * 2 for kind in LAYER_KINDS
                 if kind.sinks}
        worst: dict[str, float] = {kind.name: 0.0 for kind in LAYER_KINDS}
        batches = []
        for step in range(steps):
            engine.step_batch()
            batch = len(engine.running)
            batches.append(batch)
            for kind in LAYER_KINDS:  # plan the step: one update per layer kind
                pages, lens = engine.shards(kind)
                table = tables[kind.name]
                table.fill_(-1)
                for row, ids in enumerate(pages):
                    table[row, :len(ids)] = torch.tensor(ids, dtype=torch.int32)
                width = max([1, *(len(ids) for ids in pages)])
                runners[kind.name].update(torch.tensor(lens), table[:batch, :width])  # a strided view: copied
            for index, (kind, caches) in enumerate(engine.layers):
                query = torch.randn(batch, kind.num_heads, kind.head_dim + (MLA_ROPE if kind.mla else 0),
                                    generator=engine.gen).to(kind.dtype)  # the same on every rank (same seed)
                out, lse = outs[index][:batch], lses[index][:batch]
                runner = runners[kind.name]
                if kind.mla:
                    runner.run(query[..., :MLA_LATENT].contiguous(), query[..., MLA_LATENT:].contiguous(),
                               *caches.tensors(), out=out, lse=lse)
                else:
                    runner.run(query, *caches.tensors(), out=out, lse=lse)
                merged, merged_lse = merge_by_lse(all_gather(out, world), all_gather(lse, world),
                                                  sinks=sinks.get(kind.name))
                if rank == 0:
                    ratio = check_layer(engine, kind, caches, query, merged, merged_lse, sinks.get(kind.name),
                                        f"step {step} {kind.name} layer {index}")
                    worst[kind.name] = max(worst[kind.name], ratio)
        empty = torch.tensor([engine.empty_shards])
        dist.all_reduce(empty)
        if rank == 0:
            torch.save({"worst_ratio": worst, "batches": batches, "empty_shards": int(empty)}, result)
    finally:
        dist.destroy_process_group()


def check_layer(engine: Engine, kind: LayerKind, caches: Caches, query: torch.Tensor, merged: torch.Tensor,
                merged_lse: torch.Tensor, sinks: torch.Tensor | None, where: str) -> float:
    """The merged output and lse against the float64 golden of the whole context; returns the worst ratio."""
    table, lens = engine.global_table(kind), [s.length for s in engine.running]
    first, second = caches.tensors(full=True)
    if kind.mla:
        ref = mla_reference(query[..., :MLA_LATENT], query[..., MLA_LATENT:], first, second, table, lens,
                            DEEPSEEK_V3_SCALE)
    else:
        ref = reference(query, first, second, table, lens, kind.head_dim ** -0.5,
                        Features(window_left=kind.window_left, sinks=sinks))
    out_check, lse_check = compare(merged, ref), compare_lse(merged_lse, ref)
    assert out_check.passed, f"{where}: output {out_check.summary()}"
    assert lse_check.passed, f"{where}: lse {lse_check.summary()}"
    return max(out_check.worst_ratio, lse_check.worst_ratio)


def run_context_parallel(world: int, steps: int, layers_per_kind: int = 2, seed: int = 0) -> dict[str, Any]:
    """Spawn ``world`` ranks on this host (gloo) and return rank 0's summary: the worst error ratio per layer
    kind (1.0 = the tolerance), the batch size of every step, and how many shards were empty."""
    with tempfile.TemporaryDirectory() as tmp:
        init_file, result = os.path.join(tmp, "init"), os.path.join(tmp, "result.pt")
        mp.spawn(cp_worker, args=(world, init_file, result, steps, layers_per_kind, seed), nprocs=world)
        return torch.load(result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    summary = run_context_parallel(args.ranks, args.steps, seed=args.seed)
    print(f"{args.ranks} ranks, {args.steps} steps, batch sizes {summary['batches']}, "
          f"{summary['empty_shards']} empty shards: every merged layer matched the float64 golden")
    for name, ratio in summary["worst_ratio"].items():
        print(f"  {name}: worst error / tolerance {ratio:.3f}")


if __name__ == "__main__":
    main()
