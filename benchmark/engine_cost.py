"""The host cost an engine pays per decode step: ``runner.update`` once per step, ``runner.run`` once per layer.

An engine's loop at the ragged b64 shape (h32/kv8, D 128, pages of 128, lengths log-uniform in 16..4K): every
step a few sequences leave, a few join (new log-uniform lengths) and every running one grows by a token, so
the batch size and the block table change each step.  One runner (``for_engine``) serves the whole loop;
launches go to the library's no-op entry, so the figures are the host's work (planning, staging, checks,
the ctypes call), not the kernel's.  Reported: mean and p99 host µs of ``update`` per step and of ``run`` per
layer.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from workloads.shapes import ENGINE_RAGGED_BATCH, ENGINE_RAGGED_MAX_TOKENS, RAGGED_MIN_TOKENS, ragged_shape

NS_PER_US = 1e3
#: Sequences that leave and join per step, at most (each drawn uniformly from 0..this).
CHURN = 3
#: Headroom of the runner's capacity over the starting batch.
BATCH_HEADROOM = 16
#: The loop's shape: the ragged set's engine batch, b64 with lengths log-uniform in 16..4K.
ENGINE_BATCH, ENGINE_MAX_TOKENS = ENGINE_RAGGED_BATCH, ENGINE_RAGGED_MAX_TOKENS


@dataclass(frozen=True)
class EngineCost:
    """Host µs per ``update`` (per step) and per ``run`` (per layer) of an engine loop."""

    shape: str
    steps: int
    layers: int
    batch_min: int
    batch_max: int
    update_mean_us: float
    update_p99_us: float
    run_mean_us: float
    run_p99_us: float
    checks: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        return (f"engine loop {self.shape}, batch {self.batch_min}-{self.batch_max} changing each step, "
                f"{self.steps} steps x {self.layers} layers ({self.checks} run() checks): update mean "
                f"{self.update_mean_us:.0f} µs, p99 {self.update_p99_us:.0f} µs per step; run mean "
                f"{self.run_mean_us:.1f} µs, p99 {self.run_p99_us:.1f} µs per layer")


def _p99(values: list[float]) -> float:
    return float(np.percentile(np.asarray(values), 99))


def engine_cost(backend: str = "mock", *, steps: int = 128, layers: int = 4, seed: int = 0,
                device: str = "cpu") -> EngineCost:
    from benchmark.suite import noop_backend
    from launcher import PagedAttentionRunner, run_check

    shape = ragged_shape(ENGINE_BATCH, high=ENGINE_MAX_TOKENS)
    rng = random.Random(seed)
    max_batch = shape.batch + BATCH_HEADROOM
    max_pages = -(-(ENGINE_MAX_TOKENS + steps) // shape.block_size)
    num_blocks = max_batch * max_pages
    runner = PagedAttentionRunner.for_engine(
        num_heads=shape.num_heads, num_kv_heads=shape.num_kv_heads, head_dim=shape.head_dim,
        block_size=shape.block_size, dtype=torch.float16, max_batch=max_batch, max_pages_per_seq=max_pages,
        num_blocks=num_blocks, backend=noop_backend(backend), checked=False, device=device)
    cache = torch.empty(num_blocks, shape.block_size, shape.num_kv_heads, shape.head_dim, dtype=torch.float16,
                        device=device)
    queries = torch.randn(max_batch, shape.num_heads, shape.head_dim).half().to(device)
    free = list(range(num_blocks))
    rng.shuffle(free)
    lens = list(shape.context_lens)
    pages = [[free.pop() for _ in range(max_pages)] for _ in lens]  # every row owns max_pages pages
    update_us: list[float] = []
    run_us: list[float] = []
    sizes: list[int] = []
    for _ in range(steps):
        leave = rng.randint(0, CHURN)
        join = max(0, leave + rng.randint(-1, 1) + (1 if len(lens) < shape.batch else -1))  # drifts to b64
        for _ in range(min(leave, len(lens) - 1)):
            gone = rng.randrange(len(lens))
            lens.pop(gone)
            free.extend(pages.pop(gone))
        for _ in range(min(join, max_batch - len(lens))):
            lens.append(round(math.exp(rng.uniform(math.log(RAGGED_MIN_TOKENS), math.log(ENGINE_MAX_TOKENS)))))
            pages.append([free.pop() for _ in range(max_pages)])
        lens = [n + 1 for n in lens]
        table = torch.tensor(pages, dtype=torch.int32).to(device)
        start = time.perf_counter_ns()
        runner.update(lens, table)
        update_us.append((time.perf_counter_ns() - start) / NS_PER_US)
        sizes.append(len(lens))
        query = queries[:len(lens)]
        out = torch.empty_like(query)  # a layer's own output, as an engine passes it
        for _ in range(layers):
            start = time.perf_counter_ns()
            runner.run(query, cache, cache, out=out)
            run_us.append((time.perf_counter_ns() - start) / NS_PER_US)
    checks = "compiled" if run_check.load() is not None else "Python"
    return EngineCost(shape.shape_id, steps, layers, min(sizes), max(sizes), float(np.mean(update_us)),
                      _p99(update_us), float(np.mean(run_us)), _p99(run_us), checks)


if __name__ == "__main__":
    print(engine_cost().summary())
