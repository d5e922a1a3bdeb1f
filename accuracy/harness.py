"""Inputs and one case's run: what the accuracy suite is made of.

The golden and the tolerance policy are :mod:`accuracy.reference`'s, shared with the mock and simulation
tests and the benchmark.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from accuracy.cases import DEEPSEEK_V3_SCALE, DTYPES, JUNK_IDS, Case
from accuracy.reference import Comparison, Reference, compare, mla_reference, reference
from launcher import MlaPagedAttentionRunner, PagedAttentionRunner
from launcher.backends import Backend, MockBackend, SimBackend
from tiling import abi


@dataclass(frozen=True)
class Inputs:
    query: torch.Tensor
    key_cache: torch.Tensor
    value_cache: torch.Tensor
    block_table: torch.Tensor
    lens: tuple[int, ...]
    #: MLA cases (``head_dim`` 512, one KV head): the rope parts; the key and value caches are the one latent cache
    query_rope: torch.Tensor | None = None
    kv_rope_cache: torch.Tensor | None = None


def shuffled_block_table(pages: list[int], num_blocks: int, gen: torch.Generator, columns: int,
                         fill: int = -1) -> torch.Tensor:
    """Each sequence's ``pages`` entries, a disjoint run of a random permutation of ``num_blocks`` page ids, then
    ``fill`` up to ``columns``: sequences never share a page and the ids are not in cache order."""
    ids = torch.randperm(num_blocks, generator=gen).to(torch.int32)
    table = torch.full((len(pages), columns), fill, dtype=torch.int32)
    start = 0
    for row, count in enumerate(pages):
        table[row, :count] = ids[start:start + count]
        start += count
    return table


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
        shuffled = shuffled_block_table(pages, num_blocks, gen, max(1, max(pages)))
        rows = [shuffled[i, :count] for i, count in enumerate(pages)]
    table = torch.empty(len(case.lens), max_pages, dtype=torch.int32)
    for seq, row in enumerate(rows):
        junk = torch.tensor([JUNK_IDS[(seq + j) % len(JUNK_IDS)] for j in range(max_pages - row.numel())],
                            dtype=torch.int32)
        table[seq] = torch.cat([row.to(torch.int32), junk])
    cache = (num_blocks, case.block_size, case.num_kv_heads, case.head_dim)
    query = torch.randn(len(case.lens), case.num_heads, case.head_dim, generator=gen).to(dtype)
    key_cache = torch.randn(cache, generator=gen).to(dtype)
    if case.mla:  # the latent is K and V; rope parts of DeepSeek-like size
        rope = abi.MLA_ROPE_DIM
        return Inputs(query, key_cache, key_cache, table, case.lens,
                      (2 * torch.randn(len(case.lens), case.num_heads, rope, generator=gen)).to(dtype),
                      (2 * torch.randn(*cache[:3], rope, generator=gen)).to(dtype))
    return Inputs(query, key_cache, torch.randn(cache, generator=gen).to(dtype), table, case.lens)


def golden(inputs: Inputs, scale: float) -> Reference:
    """The case's float64 golden and torch's low-precision error on it (:mod:`accuracy.reference`)."""
    if inputs.query_rope is not None and inputs.kv_rope_cache is not None:
        return mla_reference(inputs.query, inputs.query_rope, inputs.key_cache, inputs.kv_rope_cache,
                             inputs.block_table, inputs.lens, scale)
    return reference(inputs.query, inputs.key_cache, inputs.value_cache, inputs.block_table, inputs.lens, scale)


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
    if inputs.query_rope is not None and inputs.kv_rope_cache is not None:
        return MlaPagedAttentionRunner(
            inputs.query.to(device), inputs.query_rope.to(device), inputs.key_cache.to(device),
            inputs.kv_rope_cache.to(device), inputs.block_table.to(device), list(inputs.lens),
            scale=DEEPSEEK_V3_SCALE, backend=backend, strategy=case.strategy, core_count=case.core_count,
            **options,  # type: ignore[arg-type]
        )
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
    return Outcome(case, described, compare(out, golden(inputs, runner.scale)))


#: Backends whose kernel executes MLA (``pa_supported_features``); the others refuse its cases.
MLA_BACKENDS = ("mock",)


def skip_reason(case: Case, backend_name: str) -> str | None:
    """Why ``case`` does not run on ``backend_name`` (its kernel lacks the case's feature), or None."""
    if case.mla and backend_name not in MLA_BACKENDS:
        return f"the {backend_name} backend's kernel does not execute MLA yet (the mock does)"
    return None
