"""Inputs, the float64 golden, the comparison and one case's run: what the accuracy suite is made of.

The golden shares no code with the planner or the kernels: a dense gather of each sequence's pages through
the block table, then softmax attention in float64, one (sequence, KV head) at a time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from accuracy.cases import DTYPES, JUNK_IDS, TOLERANCES, Case
from launcher import PagedAttentionRunner
from launcher.backends import Backend, MockBackend, SimBackend


@dataclass(frozen=True)
class Inputs:
    query: torch.Tensor
    key_cache: torch.Tensor
    value_cache: torch.Tensor
    block_table: torch.Tensor
    lens: tuple[int, ...]


def make_inputs(case: Case) -> Inputs:
    """Random q/k/v (standard normal) and a shuffled, junk-padded block table, on the CPU."""
    gen = torch.Generator().manual_seed(case.seed)
    dtype = DTYPES[case.dtype]
    pages = [-(-n // case.block_size) for n in case.lens]
    max_pages = max(1, max(pages)) + case.extra_columns
    if case.shared_pool:
        num_blocks = case.shared_pool
        rows = [torch.randint(0, num_blocks, (n,), generator=gen) for n in pages]
    else:
        num_blocks = sum(pages) + case.spare_pages
        ids = torch.randperm(num_blocks, generator=gen)
        starts = np.cumsum([0, *pages])
        rows = [ids[starts[i]:starts[i + 1]] for i in range(len(pages))]
    table = torch.empty(len(case.lens), max_pages, dtype=torch.int32)
    for seq, row in enumerate(rows):
        junk = torch.tensor([JUNK_IDS[(seq + j) % len(JUNK_IDS)] for j in range(max_pages - row.numel())],
                            dtype=torch.int32)
        table[seq] = torch.cat([row.to(torch.int32), junk])
    cache = (num_blocks, case.block_size, case.num_kv_heads, case.head_dim)
    return Inputs(
        query=torch.randn(len(case.lens), case.num_heads, case.head_dim, generator=gen).to(dtype),
        key_cache=torch.randn(cache, generator=gen).to(dtype),
        value_cache=torch.randn(cache, generator=gen).to(dtype),
        block_table=table, lens=case.lens,
    )


def golden(inputs: Inputs, scale: float) -> torch.Tensor:
    """float64 attention, gathering each sequence's pages densely, one (sequence, KV head) at a time."""
    batch, num_heads, head_dim = inputs.query.shape
    _, block_size, num_kv_heads, _ = inputs.key_cache.shape
    group = num_heads // num_kv_heads
    out = torch.zeros(batch, num_heads, head_dim, dtype=torch.float64)
    for seq, length in enumerate(inputs.lens):
        if length == 0:
            continue
        pages = inputs.block_table[seq, :-(-length // block_size)].long()
        keys = inputs.key_cache[pages].reshape(-1, num_kv_heads, head_dim)[:length]
        values = inputs.value_cache[pages].reshape(-1, num_kv_heads, head_dim)[:length]
        for kv_head in range(num_kv_heads):
            heads = slice(kv_head * group, (kv_head + 1) * group)
            q = inputs.query[seq, heads].double()
            scores = q @ keys[:, kv_head].double().T * scale
            out[seq, heads] = torch.softmax(scores, dim=-1) @ values[:, kv_head].double()
    return out


@dataclass(frozen=True)
class Comparison:
    max_abs_error: float
    worst_index: tuple[int, int, int]
    tolerance_there: float
    worst_ratio: float
    passed: bool

    def summary(self) -> str:
        return (f"max abs error {self.max_abs_error:.3e} at [seq, head, dim] = {list(self.worst_index)}, "
                f"tolerance there {self.tolerance_there:.3e}, worst error/tolerance {self.worst_ratio:.3f}")


def compare(out: torch.Tensor, reference: torch.Tensor, dtype: str) -> Comparison:
    """Elementwise check against ``atol + rtol * |golden|``; NaN/inf anywhere fails."""
    atol, rtol = TOLERANCES[dtype]
    error = (out.detach().cpu().double() - reference).abs()
    error = torch.where(torch.isfinite(error), error, torch.full_like(error, math.inf))
    tolerance = atol + rtol * reference.abs()
    ratio = error / tolerance
    flat = int(torch.argmax(error).item()) if error.numel() else 0
    index = tuple(int(i) for i in np.unravel_index(flat, tuple(error.shape))) if error.numel() else (0, 0, 0)
    worst_ratio = float(ratio.max().item()) if ratio.numel() else 0.0
    return Comparison(
        max_abs_error=float(error.max().item()) if error.numel() else 0.0,
        worst_index=index,  # type: ignore[arg-type]
        tolerance_there=float(tolerance[index].item()) if error.numel() else atol,
        worst_ratio=worst_ratio, passed=worst_ratio <= 1.0,
    )


# ---- running a case ------------------------------------------------------------------------------------
def make_backend(name: str, num_threads: int = 0) -> Backend | str:
    if name == "mock":
        return MockBackend(num_threads=num_threads)
    if name == "sim":
        return SimBackend(num_threads=num_threads)
    return name


def device_of(backend_name: str) -> str:
    return "npu" if backend_name == "npu" else "cpu"


def build_runner(case: Case, inputs: Inputs, backend: Backend | str, device: str,
                 **options: object) -> PagedAttentionRunner:
    return PagedAttentionRunner(
        inputs.query.to(device), inputs.key_cache.to(device), inputs.value_cache.to(device),
        inputs.block_table.to(device), list(inputs.lens), backend=backend, strategy=case.strategy,
        core_count=case.core_count, **options,  # type: ignore[arg-type]
    )


def poison(runner: PagedAttentionRunner) -> None:
    """NaN in the output and in every workspace buffer: reads-before-write and unwritten rows show up."""
    runner.out.fill_(math.nan)
    for buffer in runner.workspace.values():
        buffer.fill_(math.nan)


def launch_poisoned(runner: PagedAttentionRunner) -> torch.Tensor:
    poison(runner)
    return runner().cpu()


@dataclass(frozen=True)
class Outcome:
    case: Case
    plan: str
    comparison: Comparison


def run_case(case: Case, backend_name: str, num_threads: int = 0) -> Outcome:
    inputs = make_inputs(case)
    runner = build_runner(case, inputs, make_backend(backend_name, num_threads), device_of(backend_name))
    out = launch_poisoned(runner)
    plan = runner.plan
    described = f"{plan.strategy} key {int(plan.key)} bd {plan.block_dim} kvCN {plan.kv_core_num}"
    return Outcome(case, described, compare(out, golden(inputs, runner.scale), case.dtype))
