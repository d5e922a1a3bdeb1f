"""Absorbed MLA decode (DeepSeek-V2/V3/R1, Kimi K2): ``mla_paged_attention`` and ``MlaPagedAttentionRunner``.

Multi-head latent attention caches one compressed latent per token (``kv_lora_rank`` = 512 wide, after
``kv_a_layernorm``) and one rotary key part (``qk_rope_head_dim`` = 64 wide), shared by every query head.  An
engine decodes it "absorbed": it multiplies each head's no-position query by that head's ``W_UK`` slice, so the
query lives in the latent space, attends there, and multiplies the latent output by ``W_UV`` afterwards::

    score_j = scale * (query . kv_j + query_rope . rope_j)        out = softmax(score) @ kv     (512 wide)

That is multi-query attention with one 576-wide key head and one 512-wide value head that is the key's first
512 columns: the kernel ABI's MLA launch (``kernel/pa_kernel_abi.h``, "MLA"), planned and checked by the same
code as GQA.  :class:`MlaPagedAttentionRunner` is a :class:`~launcher.runner.PagedAttentionRunner` whose caches
are the latent cache (read as K and V) and whose launches also take the two rope parts; its life cycle, its
planner, its validation and ``q_len`` / ``return_lse`` mean exactly what they mean there.  ``scale`` has no
default: DeepSeek-V3's is ``1/sqrt(qk_nope_head_dim + qk_rope_head_dim)`` times the square of YaRN's mscale,
and no value pa-kit could guess is right.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, overload

import torch

from launcher import validation
from launcher.backends import Backend, get_backend
from launcher.features import decode_features
from launcher.runner import PagedAttentionRunner
from tiling import abi, rules


def _require_scale(scale: object) -> float:
    """MLA's softmax scale: required (there is no right default, see the module docstring), then the planner's
    rule for any scale (:func:`tiling.rules.validate_scale`)."""
    if scale is None:
        raise TypeError("scale is required for MLA: pass the model's softmax scale (DeepSeek-V3: "
                        "1/sqrt(qk_nope_head_dim + qk_rope_head_dim) x YaRN mscale^2, about 0.1352 for the "
                        "released config); 1/sqrt(512) would be wrong")
    return rules.validate_scale(scale, abi.MLA_LATENT_DIM)


class MlaPagedAttentionRunner(PagedAttentionRunner):
    """Absorbed-MLA decode, planned once per step and launched once per layer.

    ``MlaPagedAttentionRunner(query, query_rope, kv_cache, kv_rope_cache, block_table, context_lens, scale=...)``
    binds one batch's tensors (``runner()`` launches on them); :meth:`for_engine` builds one from sizes.  Then
    :meth:`update` per step and :meth:`run` per layer, as for :class:`PagedAttentionRunner`.

    Shapes: ``query`` ``[b, H, 512]`` or ``[b, q_len, H, 512]`` (absorbed), ``query_rope`` the same with 64 last,
    ``kv_cache`` ``[num_blocks, block_size, 1, 512]``, ``kv_rope_cache`` ``[num_blocks, block_size, 1, 64]``,
    fp16 or bf16; ``1 <= H <= 128``.  The output has the query's shape; with ``return_lse`` launches return
    ``(out, lse)``, lse float32 ``[b, (q_len,) H]``.  ``context_lens`` counts each sequence's ``q_len`` query
    tokens (token t sits at position ``len - q_len + t`` and attends causally); 0 gives a zero row.
    ``mla_rescale`` picks how the NPU kernel rescales a task's output accumulator between hand-offs: 'plain' (the
    exact running max; read, multiply, write back) or 'pow2' (AMLA: the max on the ln 2 grid, the rescale an
    integer add to the fp32 exponent, write-only; exact unless an accumulator element is 0, e.g. a latent column
    that is 0 in every token).  Results agree within the golden's tolerance; the mock computes both alike.
    """

    def __init__(
        self, query: torch.Tensor, query_rope: torch.Tensor, kv_cache: torch.Tensor, kv_rope_cache: torch.Tensor,
        block_table: torch.Tensor, context_lens: torch.Tensor | Sequence[int], *, scale: float,
        backend: str | Backend | None = None, out: torch.Tensor | None = None, stream: Any = None,
        checked: bool = True, core_count: int | None = None, strategy: str = "auto", return_lse: bool = False,
        max_batch: int | None = None, max_pages_per_seq: int | None = None, mla_rescale: str = "plain",
    ) -> None:
        scale = _require_scale(scale)
        resolved = get_backend(backend, query.device if isinstance(query, torch.Tensor) else torch.device("cpu"))
        shape = validation.check_mla_tensors(query, query_rope, kv_cache, kv_rope_cache, block_table,
                                             device_type=resolved.device_type)
        features = decode_features(q_len=shape.q_len, return_lse=return_lse, rope_dim=shape.rope_dim,
                                   mla_rescale=mla_rescale)
        inputs = {"query": query, "query_rope": query_rope, "kv_cache": kv_cache, "kv_rope_cache": kv_rope_cache,
                  "block_table": block_table}
        self._bind(resolved, shape, features, inputs, context_lens, sinks=None, out=out, max_batch=max_batch,
                   max_pages_per_seq=max_pages_per_seq, scale=scale, stream=stream, checked=checked,
                   core_count=core_count, strategy=strategy, batch_invariant=False, handoff_tokens=None)

    @classmethod
    def for_engine(  # type: ignore[override]
        cls, *, num_heads: int, block_size: int, dtype: torch.dtype, max_batch: int, max_pages_per_seq: int,
        num_blocks: int, scale: float, device: str | torch.device = "cpu", backend: str | Backend | None = None,
        q_len: int = 1, return_lse: bool = False, core_count: int | None = None, strategy: str = "auto",
        stream: Any = None, checked: bool = True, mla_rescale: str = "plain",
    ) -> MlaPagedAttentionRunner:
        """A runner for an engine's MLA decode loop, from sizes alone (the latent and rope widths are MLA's, 512
        and 64; one latent head): :meth:`update` per step, :meth:`run` per layer.  ``q_len`` > 1 (MTP verify
        steps) makes queries and outputs ``[b, q_len, num_heads, 512]``."""
        runner: MlaPagedAttentionRunner = cls._unbound(
            device=device, backend=backend, sizes={
                "num_heads": num_heads, "num_kv_heads": 1, "head_dim": abi.MLA_LATENT_DIM, "block_size": block_size,
                "dtype": dtype, "max_batch": max_batch, "max_pages_per_seq": max_pages_per_seq,
                "num_blocks": num_blocks, "q_len": q_len, "rope_dim": abi.MLA_ROPE_DIM},
            features={"return_lse": return_lse, "mla_rescale": mla_rescale}, scale=_require_scale(scale), stream=stream,
            checked=checked,
            core_count=core_count, strategy=strategy, batch_invariant=False, handoff_tokens=None)
        return runner

    def run(  # type: ignore[override]
        self, query: torch.Tensor, query_rope: torch.Tensor, kv_cache: torch.Tensor, kv_rope_cache: torch.Tensor,
        out: torch.Tensor | None = None, lse: torch.Tensor | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Launch this step's plan on one layer's absorbed query, its rope part and the layer's two caches;
        returns ``out`` or ``(out, lse)`` with ``return_lse``.  Pass ``out=`` (and ``lse=``) per layer: without
        them every layer writes the runner's one default output (``runner.out``), as
        :meth:`PagedAttentionRunner.run` says, and a second such run in one step warns.
        Checked as :meth:`PagedAttentionRunner.run` checks its tensors, before anything is launched; nothing is
        planned, allocated or copied to the host here."""
        return self._run(query, kv_cache, kv_cache, out, lse, None, (query_rope, kv_rope_cache))


@overload
def mla_paged_attention(
    query: torch.Tensor, query_rope: torch.Tensor, kv_cache: torch.Tensor, kv_rope_cache: torch.Tensor,
    block_table: torch.Tensor, context_lens: torch.Tensor | Sequence[int], *, scale: float,
    return_lse: Literal[False] = False, backend: str | Backend | None = None, mla_rescale: str = "plain",
) -> torch.Tensor: ...


@overload
def mla_paged_attention(
    query: torch.Tensor, query_rope: torch.Tensor, kv_cache: torch.Tensor, kv_rope_cache: torch.Tensor,
    block_table: torch.Tensor, context_lens: torch.Tensor | Sequence[int], *, scale: float,
    return_lse: Literal[True], backend: str | Backend | None = None, mla_rescale: str = "plain",
) -> tuple[torch.Tensor, torch.Tensor]: ...


def mla_paged_attention(
    query: torch.Tensor, query_rope: torch.Tensor, kv_cache: torch.Tensor, kv_rope_cache: torch.Tensor,
    block_table: torch.Tensor, context_lens: torch.Tensor | Sequence[int], *, scale: float,
    return_lse: bool = False, backend: str | Backend | None = None, mla_rescale: str = "plain",
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Absorbed-MLA paged decode: a new tensor of the query's shape (latent space; apply ``W_UV`` after), or
    ``(out, lse)`` with ``return_lse=True``.  Arguments as :class:`MlaPagedAttentionRunner` takes them.

    Every call validates and plans; a decode loop should keep a runner and call ``update`` instead.
    """
    runner = MlaPagedAttentionRunner(query, query_rope, kv_cache, kv_rope_cache, block_table, context_lens,
                                     scale=scale, return_lse=return_lse, backend=backend, mla_rescale=mla_rescale)
    return runner()
