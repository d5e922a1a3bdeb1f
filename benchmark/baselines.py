"""Inputs, the float64 golden, and every implementation the benchmark times (pa-kit and its peers).

Each implementation turns a :class:`BenchCase` into a zero-argument callable that launches once and returns
the output in the query's layout (``[batch, num_heads, head_dim]``, or ``[batch, q_len, num_heads, head_dim]``),
or ``(out, lse)`` when the shape returns lse.  Everything a launch needs (gather buffers, dense KV, argument
lists) is built in ``prepare``, outside the timed region.  Every output is checked against the float64 golden
before the implementation is timed.  A peer that does not compute a shape's decode features raises
:class:`~benchmark.applicability.NotApplicableError` in ``prepare``: its row says ``n/a`` and why.

Peers: CANN's ``ifa``, ``fia`` and ``fia-v2`` on an NPU (:mod:`benchmark.npu_peers`); ``torch-paged``,
``torch-dense`` and ``sdpa`` on the CPU (:mod:`benchmark.torch_peers`); external ATB-ABI kernel libraries
(``--external NAME=PATH``), launched by pa-kit's own runner with that library in place of ours
(:func:`prepare_external`), rows named ``NAME``.
"""

from __future__ import annotations

from typing import Any

import torch

from accuracy.reference import Features, Reference, compare, compare_lse, reference
from benchmark.applicability import require, require_external
from benchmark.npu_peers import NPU_OPERATORS, NPU_PEERS
from benchmark.torch_peers import TORCH_PEERS, Launch
from workloads.cases import BenchCase

NPU_IMPLEMENTATIONS = tuple(NPU_OPERATORS)
TORCH_IMPLEMENTATIONS = ("torch-paged", "torch-dense", "sdpa")
BASELINES = NPU_IMPLEMENTATIONS + TORCH_IMPLEMENTATIONS


def features(case: BenchCase) -> Features:
    """The case's window and sinks in the golden's terms."""
    return Features(window_left=case.shape.window_left, sinks=case.sinks)


def golden(case: BenchCase) -> Reference:
    """The float64 golden and the case's tolerance, by the project's one policy (:mod:`accuracy.reference`)."""
    if case.shape.is_mla:
        from accuracy.reference import mla_reference

        assert case.query_rope is not None and case.kv_rope_cache is not None, "an MLA case has both rope parts"
        return mla_reference(case.query, case.query_rope, case.key_cache, case.kv_rope_cache, case.block_table,
                             case.shape.context_lens, case.scale)
    return reference(case.query, case.key_cache, case.value_cache, case.block_table, case.shape.context_lens,
                     case.scale, features(case))


def split_result(result: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A launch's ``out`` or ``(out, lse)`` as ``(out, lse or None)``."""
    if isinstance(result, tuple):
        return result[0], result[1]
    return result, None


def max_abs_error(out: torch.Tensor, ref: Reference) -> float:
    return compare(out, ref).max_abs_error


def lse_error(lse: torch.Tensor, ref: Reference) -> tuple[float, bool]:
    """The worst lse error against the golden's, and whether it is within the lse tolerance."""
    comparison = compare_lse(lse, ref)
    return comparison.max_abs_error, comparison.passed


def within_tolerance(error: float, ref: Reference) -> bool:
    """Twice torch's own low-precision error on this case (flash-attention's rule), see accuracy/reference.py."""
    return error <= ref.allowed_error


def parse_external(spec: str) -> tuple[str, str]:
    """``NAME=PATH`` of ``--external``: a row name that is not one of ours, and a library path."""
    name, sep, path = spec.partition("=")
    name, path = name.strip(), path.strip()
    if not sep or not name or not path:
        raise ValueError(f"--external takes NAME=PATH, got {spec!r}")
    if name in BASELINES or name.startswith("pa-kit"):
        raise ValueError(f"--external name {name!r} is taken by a built-in implementation; pick another")
    return name, path


def prepare_external(case: BenchCase, path: str, backend: str, name: str = "external", **options: Any) -> Any:
    """pa-kit's runner on an external ATB-ABI library at ``path``: same plan, arguments and golden check.

    On the npu backend the library is launched as an NPU kernel (an external ATB-ABI kernel gets its empty
    rows zeroed by the runner); on mock/sim it must speak the mock protocol (e.g. another build of the
    mock device), which is how the CPU tests exercise this path.  Returns the runner (its call launches).
    A shape with decode features is not applicable: ATB's ABI v1 describes one-token decode only.
    """
    require_external(name, case.shape)
    from launcher import PagedAttentionRunner
    from launcher.backends import BACKENDS

    return PagedAttentionRunner(
        case.query, case.key_cache, case.value_cache, case.block_table, case.context_lens, scale=case.scale,
        backend=BACKENDS[backend](path), out=torch.empty_like(case.query), **options,
    )


def prepare_baseline(name: str, case: BenchCase, torch_npu: Any = None) -> Launch:
    """The launch callable of baseline ``name`` (one of :data:`BASELINES`); ``NotApplicableError`` when it does
    not compute the case's decode features."""
    if name not in BASELINES:
        raise ValueError(f"baseline must be one of {', '.join(BASELINES)}, got {name!r}")
    require(name, case.shape)
    if name in NPU_PEERS:
        return NPU_PEERS[name](case, torch_npu)
    return TORCH_PEERS[name](case)
