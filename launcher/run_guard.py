"""What :meth:`PagedAttentionRunner.run` checks on every call, in Python.

These functions are the reference: they name what is wrong and raise.  The compiled module
(:mod:`launcher.run_check`, ``pa_run_check.cpp``) only ever answers "all good" (and writes the pointers) or
"look again", and then these run; the tests run every ``run()`` case on both paths.

The compiled module checks the query, the caches and the output, whatever the query's rank (it compares
against the planned shape, 3-D or 4-D).  The lse buffer and the sinks, which only runners built with those
features take, are checked here on both paths (:func:`check_features`, after the compiled check said "all
good", or as the tail of :func:`check_run`), so the two paths raise the same error for the same call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from tiling.abi import ArgSlot

#: Index of the first pointer in the ``call_kernel`` argument tuple (after block_dim and stream).
FIRST_POINTER_ARG = 2
_FIRST = FIRST_POINTER_ARG


@dataclass(frozen=True)
class RunExpect:
    """What ``run`` compares each call's tensors against, fixed when a step is planned."""

    query_shape: torch.Size
    cache_shape: torch.Size
    dtype: torch.dtype
    device: torch.device
    query_bytes: int
    cache_bytes: int
    table_start: int
    table_end: int
    #: the lse buffer's shape (float32), None when the runner writes no lse
    lse_shape: torch.Size | None
    #: the sinks' element type, None when the runner was planned without sinks; their shape, [num_heads]
    sinks_dtype: torch.dtype | None
    sinks_shape: torch.Size
    #: MLA: query_rope's and kv_rope_cache's shapes (None for GQA/MQA/MHA), checked by :func:`check_rope`
    rope_query_shape: torch.Size | None = None
    rope_cache_shape: torch.Size | None = None

    @property
    def has_features(self) -> bool:
        """Whether a call takes an lse buffer or sinks, which :func:`check_features` checks."""
        return self.lse_shape is not None or self.sinks_dtype is not None

    @classmethod
    def of(cls, query_rows: torch.Tensor, cache_shape: torch.Size, block_table: torch.Tensor,
           lse_rows: torch.Tensor | None = None, sinks_dtype: torch.dtype | None = None,
           rope_shapes: tuple[tuple[int, ...], tuple[int, ...]] | None = None) -> RunExpect:
        cache_elems = 1
        for size in cache_shape:
            cache_elems *= int(size)
        start = block_table.data_ptr()
        return cls(query_rows.shape, cache_shape, query_rows.dtype, query_rows.device,
                   query_rows.numel() * query_rows.element_size(), cache_elems * query_rows.element_size(),
                   start, start + block_table.numel() * block_table.element_size(),
                   None if lse_rows is None else lse_rows.shape, sinks_dtype, query_rows.shape[-2:-1],
                   *((None, None) if rope_shapes is None else (torch.Size(rope_shapes[0]), torch.Size(rope_shapes[1]))))


def check_run_tensor(tensor: object, name: str, shape: torch.Size, expect: RunExpect,
                     dtype: torch.dtype | None = None, *, batched: bool = False) -> torch.Tensor:
    """``tensor`` has the planned ``shape``, ``dtype`` (default: the query's), device, and dense strides.

    ``batched``: the first dim is the step's batch (query, out, lse, query_rope).  A shape error suggests
    ``runner.update()`` only when that dim alone differs: for a cache, the sinks, or another dim of a batched
    tensor, a new plan would not help, and the hint would send the caller the wrong way."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.shape != shape:
        got = tuple(tensor.shape)
        batch_only = batched and len(got) == len(shape) and got[1:] == tuple(shape[1:])
        hint = (f"; this step was planned for {shape[0]} sequences: a step of {got[0]} needs runner.update() "
                f"first") if batch_only else ""
        raise ValueError(f"{name} shape must be the planned {tuple(shape)}, got {got}{hint}")
    want = expect.dtype if dtype is None else dtype
    if tensor.dtype != want:
        raise TypeError(f"{name} dtype must be the planned {want}, got {tensor.dtype}")
    if tensor.device != expect.device:
        raise ValueError(f"{name} must be on the planned device {expect.device}, got {tensor.device}")
    if not tensor.is_contiguous():
        raise ValueError(f"{name} must be contiguous (the kernel addresses it with dense strides), got strides "
                         f"{tuple(tensor.stride())}; call .contiguous() first")
    return tensor


def _refuse_overlap(written: str, start: int, nbytes: int, spans: dict[str, tuple[int, int]]) -> None:
    """A buffer the kernel writes must share no byte with anything the launch reads or writes."""
    end = start + nbytes
    for name, (other_start, other_end) in spans.items():
        if other_start < end and start < other_end:
            raise ValueError(f"{written} must not share memory with {name} ({written} bytes [{start:#x}, "
                             f"{end:#x}) overlap {name} bytes [{other_start:#x}, {other_end:#x}))")


def check_run(expect: RunExpect, args: list[Any], query: object, key_cache: object, value_cache: object,
              out: object, lse: object = None, sinks: object = None) -> None:
    """All of run()'s checks; on success the data pointers are written into ``args``."""
    q = check_run_tensor(query, "query", expect.query_shape, expect, batched=True)
    k = check_run_tensor(key_cache, "key_cache", expect.cache_shape, expect)
    v = check_run_tensor(value_cache, "value_cache", expect.cache_shape, expect)
    o = check_run_tensor(out, "out", expect.query_shape, expect, batched=True)
    pq, pk, pv, po = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()
    spans = {"query": (pq, pq + expect.query_bytes), "key_cache": (pk, pk + expect.cache_bytes),
             "value_cache": (pv, pv + expect.cache_bytes), "block_table": (expect.table_start, expect.table_end)}
    if expect.query_bytes:
        _refuse_overlap("out", po, expect.query_bytes, spans)
    if not (pk and pv) or (expect.query_bytes and not (pq and po)):
        raise ValueError("query, key_cache, value_cache and out must have storage (a data pointer), "
                         "got a NULL pointer (a meta or empty tensor?)")
    args[_FIRST + ArgSlot.Q], args[_FIRST + ArgSlot.K] = pq, pk
    args[_FIRST + ArgSlot.V], args[_FIRST + ArgSlot.O] = pv, po
    if expect.has_features or lse is not None or sinks is not None:
        check_features(expect, args, lse, sinks)


def check_features(expect: RunExpect, args: list[Any], lse: object, sinks: object) -> None:
    """The lse buffer and the sinks of a call whose query, caches and output passed (their pointers are in
    ``args``); on success their pointers are written into ``args`` too.

    ``lse`` and ``sinks`` are what the caller resolved: ``run()`` passes its defaults (the runner's lse view and
    sinks) for what the user left out, so a given one where the runner has none is a user's.
    """
    if expect.lse_shape is None and lse is not None:
        raise ValueError("lse= is for a runner built with return_lse=True; this one writes no lse")
    if expect.sinks_dtype is None and sinks is not None:
        raise ValueError("sinks= is for a runner planned with sinks (built with sinks= or for_engine(sinks_dtype=)); "
                         "this one was planned without")
    if expect.sinks_dtype is not None and sinks is None:
        raise ValueError(f"this runner was planned with {expect.sinks_dtype} sinks and holds none: pass sinks= "
                         f"(a [num_heads] tensor) to run()")
    query_ptr, out_ptr = args[_FIRST + ArgSlot.Q], args[_FIRST + ArgSlot.O]
    key_ptr, value_ptr = args[_FIRST + ArgSlot.K], args[_FIRST + ArgSlot.V]
    spans = {"query": (query_ptr, query_ptr + expect.query_bytes), "key_cache": (key_ptr, key_ptr + expect.cache_bytes),
             "value_cache": (value_ptr, value_ptr + expect.cache_bytes),
             "block_table": (expect.table_start, expect.table_end)}
    if expect.sinks_dtype is not None:
        s = check_run_tensor(sinks, "sinks", expect.sinks_shape, expect, expect.sinks_dtype)
        ps = s.data_ptr()
        if not ps:
            raise ValueError("sinks must have storage (a data pointer), got a NULL pointer (a meta tensor?)")
        sinks_span = (ps, ps + s.numel() * s.element_size())
        if expect.query_bytes:
            _refuse_overlap("out", out_ptr, expect.query_bytes, {"sinks": sinks_span})
        spans["sinks"] = sinks_span
        args[_FIRST + ArgSlot.SINKS] = ps
    if expect.lse_shape is not None:
        lse_tensor = check_run_tensor(lse, "lse", expect.lse_shape, expect, torch.float32, batched=True)
        pl, lse_bytes = lse_tensor.data_ptr(), lse_tensor.numel() * lse_tensor.element_size()
        if lse_bytes:
            if not pl:
                raise ValueError("lse must have storage (a data pointer), got a NULL pointer (a meta tensor?)")
            spans["out"] = (out_ptr, out_ptr + expect.query_bytes)
            _refuse_overlap("lse", pl, lse_bytes, spans)
        args[_FIRST + ArgSlot.LSE] = pl


def check_rope(expect: RunExpect, args: list[Any], query_rope: object, kv_rope_cache: object) -> None:
    """MLA's rope parts of a call whose other tensors passed (their pointers are in ``args``): the planned shapes,
    the query's dtype and device, dense, and no byte shared with the buffers the kernel writes; on success their
    pointers are written into ``args``."""
    assert expect.rope_query_shape is not None and expect.rope_cache_shape is not None
    qr = check_run_tensor(query_rope, "query_rope", expect.rope_query_shape, expect, batched=True)
    kr = check_run_tensor(kv_rope_cache, "kv_rope_cache", expect.rope_cache_shape, expect)
    pqr, pkr = qr.data_ptr(), kr.data_ptr()
    if not pkr or (qr.numel() and not pqr):
        raise ValueError("query_rope and kv_rope_cache must have storage (a data pointer), got a NULL pointer "
                         "(a meta or empty tensor?)")
    spans = {"query_rope": (pqr, pqr + qr.numel() * qr.element_size()),
             "kv_rope_cache": (pkr, pkr + kr.numel() * kr.element_size())}
    if expect.query_bytes:
        _refuse_overlap("out", args[_FIRST + ArgSlot.O], expect.query_bytes, spans)
    lse_ptr = args[_FIRST + ArgSlot.LSE]
    if expect.lse_shape is not None and lse_ptr:
        lse_bytes = 4 * int(torch.Size(expect.lse_shape).numel())
        _refuse_overlap("lse", lse_ptr, lse_bytes, spans)
    args[_FIRST + ArgSlot.Q_ROPE], args[_FIRST + ArgSlot.K_ROPE] = pqr, pkr
