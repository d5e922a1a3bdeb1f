"""The decode loop of a continuously batching server, with pa-kit's runner as its attention.

    python examples/continuous_batching.py                  # mock device, 40 steps, 3 layers
    python examples/continuous_batching.py --backend sim --steps 12 --check

One :class:`~launcher.PagedAttentionRunner` lives for the whole loop (``for_engine``: sizes only).  Every step
some sequences join (with a prompt already in the cache), every running sequence grows by one token, and
some leave, so the batch size and the block table change from step to step.  The layers' KV caches share one
pool of pages: a page id means the same page in every layer's cache, as in vLLM.  Per step the loop calls
``runner.update`` once and ``runner.run`` once per layer; ``--check`` compares every layer's output with the
float64 golden.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from launcher import PagedAttentionRunner


@dataclass
class Sequence:
    """One request: its length so far, its pages, and how many more tokens it decodes."""

    length: int
    remaining: int
    pages: list[int] = field(default_factory=list)


class PagePool:
    """Free page ids, handed out in a scrambled order so a sequence's pages are never contiguous."""

    def __init__(self, num_blocks: int, generator: torch.Generator) -> None:
        self.free = torch.randperm(num_blocks, generator=generator).tolist()

    def take(self) -> int:
        if not self.free:
            raise RuntimeError("the page pool is exhausted: raise --blocks or lower --max-batch")
        return self.free.pop()

    def give_back(self, pages: list[int]) -> None:
        self.free.extend(pages)


@dataclass
class Engine:
    """The loop's state: sizes, caches of every layer, the pool and the running sequences."""

    layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    block_size: int
    max_batch: int
    max_pages: int
    num_blocks: int
    dtype: torch.dtype
    seed: int = 0

    def __post_init__(self) -> None:
        self.gen = torch.Generator().manual_seed(self.seed)
        shape = (self.num_blocks, self.block_size, self.num_kv_heads, self.head_dim)
        # NaN in every page no sequence has written: a read of a page that is not the sequence's shows.
        self.keys = [torch.full(shape, float("nan"), dtype=self.dtype) for _ in range(self.layers)]
        self.values = [torch.full(shape, float("nan"), dtype=self.dtype) for _ in range(self.layers)]
        self.pool = PagePool(self.num_blocks, self.gen)
        self.running: list[Sequence] = []

    def _write(self, seq: Sequence, start: int, count: int) -> None:
        """Random K/V for tokens ``start .. start + count`` of ``seq`` in every layer, taking pages as needed."""
        for position in range(start, start + count):
            if position // self.block_size >= len(seq.pages):
                seq.pages.append(self.pool.take())
            page, offset = seq.pages[position // self.block_size], position % self.block_size
            for layer in range(self.layers):
                noise = torch.randn(2, self.num_kv_heads, self.head_dim, generator=self.gen).to(self.dtype)
                self.keys[layer][page, offset], self.values[layer][page, offset] = noise[0], noise[1]

    def step_batch(self) -> None:
        """Leave, join and grow: the batch of the next step."""
        for seq in self.running:
            if seq.remaining == 0:  # finished last step, whose launches are done: its pages are free again
                self.pool.give_back(seq.pages)
        self.running = [s for s in self.running if s.remaining > 0]
        joins = int(torch.randint(0, 3, (1,), generator=self.gen))
        for _ in range(min(joins, self.max_batch - len(self.running))):
            prompt = int(torch.randint(1, min(self.max_pages * self.block_size - 8, 300), (1,), generator=self.gen))
            seq = Sequence(length=prompt, remaining=int(torch.randint(1, 8, (1,), generator=self.gen)))
            self._write(seq, 0, prompt)
            self.running.append(seq)
        for seq in self.running:
            self._write(seq, seq.length, 1)  # the token this step decodes
            seq.length += 1
            seq.remaining -= 1

    def block_table(self) -> torch.Tensor:
        width = max((len(s.pages) for s in self.running), default=1)
        table = torch.full((len(self.running), width), -1, dtype=torch.int32)
        for row, seq in enumerate(self.running):
            table[row, :len(seq.pages)] = torch.tensor(seq.pages, dtype=torch.int32)
        return table


def run_loop(engine: Engine, steps: int, backend: str = "mock", check: bool = False) -> list[int]:
    """Run ``steps`` decode steps; returns the batch size of each.  With ``check``, every layer's output is
    compared with the float64 golden (:mod:`accuracy.reference`) and a miss raises AssertionError."""
    from accuracy.reference import compare, reference

    runner = PagedAttentionRunner.for_engine(
        num_heads=engine.num_heads, num_kv_heads=engine.num_kv_heads, head_dim=engine.head_dim,
        block_size=engine.block_size, dtype=engine.dtype, max_batch=engine.max_batch,
        max_pages_per_seq=engine.max_pages, num_blocks=engine.num_blocks, backend=backend)
    sizes = []
    for step in range(steps):
        engine.step_batch()
        lens = [s.length for s in engine.running]
        table = engine.block_table()
        runner.update(lens, table)  # plan once per step
        sizes.append(len(lens))
        for layer in range(engine.layers):
            query = torch.randn(len(lens), engine.num_heads, engine.head_dim, generator=engine.gen).to(engine.dtype)
            # once per layer, into the layer's own output (the default one is shared by every layer)
            out = runner.run(query, engine.keys[layer], engine.values[layer], out=torch.empty_like(query))
            if check:
                ref = reference(query, engine.keys[layer], engine.values[layer], table, lens, runner.scale)
                result = compare(out, ref)
                assert result.passed, f"step {step} layer {layer} batch {len(lens)}: {result.summary()}"
    return sizes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("mock", "sim"), default="mock")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument("--check", action="store_true", help="compare every output with the float64 golden")
    args = parser.parse_args(argv)
    engine = Engine(layers=args.layers, num_heads=16, num_kv_heads=4, head_dim=128, block_size=128,
                    max_batch=args.max_batch, max_pages=8, num_blocks=args.max_batch * 8 + 16,
                    dtype=torch.bfloat16)
    sizes = run_loop(engine, args.steps, args.backend, args.check)
    print(f"{args.steps} steps x {args.layers} layers on {args.backend}: batch sizes {sizes}"
          + (" - every output matched the float64 golden" if args.check else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
