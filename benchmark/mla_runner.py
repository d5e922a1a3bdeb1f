"""pa-kit's absorbed-MLA decode as the benchmark times it: an engine's runner, planned once, launched per call.

The benchmark builds it the way an engine does (``MlaPagedAttentionRunner.for_engine`` from sizes, ``update``
with the step's lengths and block table), so what a timed call costs is ``run``: the per-layer path of a
decode step.  :class:`MlaLaunch` gives it the face the suite expects of a runner: a call that launches, the
plan, the library, ``update``.
"""

from __future__ import annotations

from typing import Any

import torch

from workloads.cases import BenchCase


class MlaLaunch:
    """One MLA runner bound to one case's tensors; calling it launches and returns ``out`` or ``(out, lse)``."""

    def __init__(self, runner: Any, case: BenchCase) -> None:
        assert case.query_rope is not None and case.kv_rope_cache is not None, "an MLA case has both rope parts"
        self.runner = runner
        self.tensors = (case.query, case.query_rope, case.key_cache, case.kv_rope_cache)
        #: the output a launch writes: allocated and touched here, outside any timed region
        self.out = torch.zeros_like(case.query)

    def __call__(self) -> Any:
        return self.runner.run(*self.tensors, out=self.out)

    def update(self, context_lens: Any, block_table: torch.Tensor | None = None) -> None:
        self.runner.update(context_lens, block_table)

    @property
    def plan(self) -> Any:
        return self.runner.plan

    @property
    def library(self) -> Any:
        return self.runner.library


def make_mla_runner(case: BenchCase, *, backend: Any, checked: bool, core_count: int | None = None,
                    strategy: str = "auto", mla_rescale: str = "plain") -> MlaLaunch:
    """pa-kit's MLA runner for ``case`` on ``backend`` (a name or a backend object), planned for its lengths."""
    from launcher.mla import MlaPagedAttentionRunner

    s = case.shape
    runner = MlaPagedAttentionRunner.for_engine(
        num_heads=s.num_heads, block_size=s.block_size, dtype=case.query.dtype, max_batch=s.batch,
        max_pages_per_seq=int(case.block_table.shape[1]), num_blocks=int(case.key_cache.shape[0]), scale=case.scale,
        device=case.device, backend=backend, q_len=s.q_len, return_lse=s.lse, core_count=core_count,
        strategy=strategy, checked=checked, mla_rescale=mla_rescale)
    launch = MlaLaunch(runner, case)
    launch.update(case.context_lens, case.block_table)
    return launch
