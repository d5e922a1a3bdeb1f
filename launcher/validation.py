"""Every check on user input, done before anything is planned or launched.

Each failure is a ``TypeError`` (wrong kind of object or dtype) or a ``ValueError`` (wrong shape, value or
combination) whose message names the argument, what was expected and what was given.  Nothing here touches
a kernel: a bad input never reaches the device, where it would be an out-of-bounds read rather than an
error.  Every rule on sizes, lengths, block ids and options lives once, in :mod:`tiling.rules`, shared with
the planner; this module adds what only tensors have (type, rank, dtype, device, contiguity, aliasing).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from tiling import rules

#: Input dtypes the kernels execute, by the planner's dtype names.
DTYPE_NAMES: dict[torch.dtype, str] = {torch.float16: "fp16", torch.bfloat16: "bf16"}
QUERY_DIMS = 3  # [batch, num_heads, head_dim]: one query token per sequence
TOKENS_QUERY_DIMS = 4  # [batch, q_len, num_heads, head_dim]: q_len query tokens per sequence
CACHE_DIMS = 4  # [num_blocks, block_size, num_kv_heads, head_dim]
TABLE_DIMS = 2  # [batch, max_pages]


@dataclass(frozen=True)
class DecodeShape:
    """The sizes of one decode launch, read off validated tensors."""

    batch: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    block_size: int
    num_blocks: int
    max_pages: int
    dtype: str
    device: torch.device
    #: query tokens per sequence, and whether the query (and so the output) has the token axis
    q_len: int = 1
    token_axis: bool = False

    @property
    def query_shape(self) -> tuple[int, ...]:
        """The query's (and the output's) shape: ``[batch, (q_len,) num_heads, head_dim]``."""
        tokens = (self.q_len,) if self.token_axis else ()
        return (self.batch, *tokens, self.num_heads, self.head_dim)

    @property
    def query_layout(self) -> str:
        return "[batch, q_len, num_heads, head_dim]" if self.token_axis else "[batch, num_heads, head_dim]"


def _require_tensor(value: object, name: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    return value


def _require_dims(tensor: torch.Tensor, name: str, dims: int, layout: str) -> None:
    if tensor.dim() != dims:
        raise ValueError(f"{name} must be {dims}-D {layout}, got shape {tuple(tensor.shape)}")


def _require_contiguous(tensor: torch.Tensor, name: str) -> None:
    if not tensor.is_contiguous():
        raise ValueError(
            f"{name} must be contiguous (the kernel addresses it with dense strides), got strides "
            f"{tuple(tensor.stride())} for shape {tuple(tensor.shape)}; call .contiguous() first"
        )


def check_tensors(
    query: object, key_cache: object, value_cache: object, block_table: object, *, device_type: str
) -> DecodeShape:
    """Types, ranks, dtypes, devices, contiguity and mutual shapes of the four input tensors."""
    q = _require_tensor(query, "query")
    k = _require_tensor(key_cache, "key_cache")
    v = _require_tensor(value_cache, "value_cache")
    if q.dim() not in (QUERY_DIMS, TOKENS_QUERY_DIMS):
        raise ValueError(f"query must be 3-D [batch, num_heads, head_dim] (one token per sequence) or 4-D "
                         f"[batch, q_len, num_heads, head_dim], got shape {tuple(q.shape)}")
    _require_dims(k, "key_cache", CACHE_DIMS, "[num_blocks, block_size, num_kv_heads, head_dim]")
    _require_dims(v, "value_cache", CACHE_DIMS, "[num_blocks, block_size, num_kv_heads, head_dim]")
    if q.dtype not in DTYPE_NAMES:
        raise TypeError(f"query dtype must be torch.float16 or torch.bfloat16, got {q.dtype}")
    for name, tensor in (("key_cache", k), ("value_cache", v)):
        if tensor.dtype != q.dtype:
            raise TypeError(f"{name} dtype must match query ({q.dtype}), got {tensor.dtype}")
    if q.device.type != device_type:
        raise ValueError(f"query must be on a {device_type!r} device for this backend, got {q.device}")
    for name, tensor in (("key_cache", k), ("value_cache", v)):
        if tensor.device != q.device:
            raise ValueError(f"{name} must be on the query's device {q.device}, got {tensor.device}")
    for name, tensor in (("query", q), ("key_cache", k), ("value_cache", v)):
        _require_contiguous(tensor, name)
    bt = check_table_tensor(block_table, q.device)
    token_axis = q.dim() == TOKENS_QUERY_DIMS
    batch, num_heads, head_dim = q.shape[0], q.shape[-2], q.shape[-1]
    q_len = rules.validate_q_len(int(q.shape[1])) if token_axis else 1
    num_blocks, block_size, num_kv_heads, cache_dim = k.shape
    if tuple(v.shape) != tuple(k.shape):
        raise ValueError(f"value_cache shape must equal key_cache's {tuple(k.shape)}, got {tuple(v.shape)}")
    if cache_dim != head_dim:
        raise ValueError(f"key_cache head_dim (last dim) must equal query's head_dim {head_dim}, got {cache_dim}")
    if bt.shape[0] != batch:
        raise ValueError(f"block_table must have one row per sequence ({batch} rows), got {bt.shape[0]}")
    shape = DecodeShape(
        batch=int(batch), num_heads=int(num_heads), num_kv_heads=int(num_kv_heads), head_dim=int(head_dim),
        block_size=int(block_size), num_blocks=int(num_blocks), max_pages=int(bt.shape[1]),
        dtype=DTYPE_NAMES[q.dtype], device=q.device, q_len=q_len, token_axis=token_axis,
    )
    rules.validate_shape(
        batch=shape.batch, num_heads=shape.num_heads, num_kv_heads=shape.num_kv_heads, head_dim=shape.head_dim,
        block_size=shape.block_size, max_pages=shape.max_pages, num_blocks=shape.num_blocks, core_count=1,
    )
    return shape


def check_table_tensor(block_table: object, device: torch.device) -> torch.Tensor:
    """An int32 ``[batch, pages]`` contiguous tensor on ``device`` (its values are not read here)."""
    bt = _require_tensor(block_table, "block_table")
    _require_dims(bt, "block_table", TABLE_DIMS, "[batch, max_pages]")
    if bt.dtype != torch.int32:
        raise TypeError(f"block_table dtype must be torch.int32, got {bt.dtype}")
    if bt.device != device:
        raise ValueError(f"block_table must be on the query's device {device}, got {bt.device}")
    _require_contiguous(bt, "block_table")
    return bt


def lens_to_numpy(context_lens: object) -> np.ndarray:
    """``context_lens`` as a 1-D int64 array: an int32 tensor (a device tensor is copied to the host, which
    synchronises with its stream), or whatever :func:`tiling.rules.lengths_array` takes."""
    if isinstance(context_lens, torch.Tensor):
        if context_lens.dtype != torch.int32:
            raise TypeError(f"context_lens tensor dtype must be torch.int32, got {context_lens.dtype}")
        if context_lens.dim() != 1:
            raise ValueError(f"context_lens must be 1-D [batch], got shape {tuple(context_lens.shape)}")
        return context_lens.detach().cpu().numpy().astype(np.int64)
    return rules.lengths_array(context_lens)


def check_context_lens(context_lens: object, shape: DecodeShape) -> np.ndarray:
    """One length per sequence, each in ``[0, max_pages * block_size]`` (:func:`tiling.rules.validate_lengths`)
    and 0 or at least ``q_len`` (it counts the query tokens, :func:`tiling.rules.validate_query_tokens`)."""
    lens = lens_to_numpy(context_lens)
    rules.validate_lengths(lens, block_size=shape.block_size, max_pages=shape.max_pages, batch=shape.batch)
    rules.validate_query_tokens(lens, shape.q_len)
    return lens


def check_block_ids(block_table: torch.Tensor, lens: np.ndarray, shape: DecodeShape, *, window_left: int = -1) -> None:
    """The used block ids lie in ``[0, num_blocks)`` (:func:`tiling.rules.validate_block_ids`; with a window,
    pages wholly before it may hold anything); reads the table on the host, so the runner calls it only for
    backends whose tensors live on the CPU."""
    rules.validate_block_ids(block_table.detach().cpu().numpy(), lens, block_size=shape.block_size,
                             num_blocks=shape.num_blocks, q_len=shape.q_len, window_left=window_left)


def _byte_range(tensor: torch.Tensor) -> tuple[int, int]:
    start = tensor.data_ptr()
    return start, start + tensor.numel() * tensor.element_size()


def check_out(out: object, shape: DecodeShape, dtype: torch.dtype, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """A user-provided output: right shape (the query's), dtype, device, contiguous, sharing no memory with an
    input."""
    o = _require_tensor(out, "out")
    expected = shape.query_shape
    if tuple(o.shape) != expected:
        raise ValueError(f"out shape must be {expected} {shape.query_layout}, got {tuple(o.shape)}")
    if o.dtype != dtype:
        raise TypeError(f"out dtype must be the query's {dtype}, got {o.dtype}")
    if o.device != shape.device:
        raise ValueError(f"out must be on the query's device {shape.device}, got {o.device}")
    _require_contiguous(o, "out")
    out_start, out_end = _byte_range(o)
    for name, tensor in inputs.items():
        start, end = _byte_range(tensor)
        if out_start < end and start < out_end:
            raise ValueError(f"out must not share memory with {name} (out bytes [{out_start:#x}, {out_end:#x}) "
                             f"overlap {name} bytes [{start:#x}, {end:#x}))")
    return o


check_scale = rules.validate_scale
check_option = rules.validate_option
check_core_count = rules.validate_core_count
