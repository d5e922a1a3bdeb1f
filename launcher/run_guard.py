"""What :meth:`PagedAttentionRunner.run` checks on every call, in Python.

These functions are the reference: they name what is wrong and raise.  The compiled module
(:mod:`launcher.run_check`, ``pa_run_check.cpp``) only ever answers "all good" (and writes the pointers) or
"look again", and then these run; the tests run every ``run()`` case on both paths.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from tiling.abi import ArgSlot

#: Index of the first pointer in the ``call_kernel`` argument tuple (after block_dim and stream).
FIRST_POINTER_ARG = 2


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

    @classmethod
    def of(cls, query_rows: torch.Tensor, cache_shape: torch.Size, block_table: torch.Tensor) -> RunExpect:
        cache_elems = 1
        for size in cache_shape:
            cache_elems *= int(size)
        start = block_table.data_ptr()
        return cls(query_rows.shape, cache_shape, query_rows.dtype, query_rows.device,
                   query_rows.numel() * query_rows.element_size(), cache_elems * query_rows.element_size(),
                   start, start + block_table.numel() * block_table.element_size())


def check_run_tensor(tensor: object, name: str, shape: torch.Size, expect: RunExpect) -> torch.Tensor:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.shape != shape:
        raise ValueError(f"{name} shape must be the planned {tuple(shape)}, got {tuple(tensor.shape)}; "
                         "a new batch size needs runner.update() first")
    if tensor.dtype != expect.dtype:
        raise TypeError(f"{name} dtype must be the planned {expect.dtype}, got {tensor.dtype}")
    if tensor.device != expect.device:
        raise ValueError(f"{name} must be on the planned device {expect.device}, got {tensor.device}")
    if not tensor.is_contiguous():
        raise ValueError(f"{name} must be contiguous (the kernel addresses it with dense strides), got strides "
                         f"{tuple(tensor.stride())}; call .contiguous() first")
    return tensor


def check_run(expect: RunExpect, args: list[Any], query: object, key_cache: object, value_cache: object,
              out: object) -> None:
    """All of run()'s checks; on success the four data pointers are written into ``args``."""
    q = check_run_tensor(query, "query", expect.query_shape, expect)
    k = check_run_tensor(key_cache, "key_cache", expect.cache_shape, expect)
    v = check_run_tensor(value_cache, "value_cache", expect.cache_shape, expect)
    o = check_run_tensor(out, "out", expect.query_shape, expect)
    pq, pk, pv, po = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()
    o_end = po + expect.query_bytes
    spans = {"query": (pq, pq + expect.query_bytes), "key_cache": (pk, pk + expect.cache_bytes),
             "value_cache": (pv, pv + expect.cache_bytes), "block_table": (expect.table_start, expect.table_end)}
    if expect.query_bytes:
        for name, (start, end) in spans.items():
            if start < o_end and po < end:
                raise ValueError(f"out must not share memory with {name} (out bytes [{po:#x}, {o_end:#x}) "
                                 f"overlap {name} bytes [{start:#x}, {end:#x}))")
    if not (pk and pv) or (expect.query_bytes and not (pq and po)):
        raise ValueError("query, key_cache, value_cache and out must have storage (a data pointer), "
                         "got a NULL pointer (a meta or empty tensor?)")
    first = FIRST_POINTER_ARG
    args[first + ArgSlot.Q], args[first + ArgSlot.K] = pq, pk
    args[first + ArgSlot.V], args[first + ArgSlot.O] = pv, po
