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

from tiling import abi, rules

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
    #: MLA's rope width (query_rope's and kv_rope_cache's last dim), 0 for GQA/MQA/MHA
    rope_dim: int = 0

    @property
    def query_shape(self) -> tuple[int, ...]:
        """The query's (and the output's) shape: ``[batch, (q_len,) num_heads, head_dim]``."""
        tokens = (self.q_len,) if self.token_axis else ()
        return (self.batch, *tokens, self.num_heads, self.head_dim)

    @property
    def rope_query_shape(self) -> tuple[int, ...]:
        """MLA: query_rope's shape, the query's with ``rope_dim`` last."""
        return (*self.query_shape[:-1], self.rope_dim)

    @property
    def rope_cache_shape(self) -> tuple[int, ...]:
        """MLA: kv_rope_cache's shape ``[num_blocks, block_size, 1, rope_dim]``."""
        return (self.num_blocks, self.block_size, self.num_kv_heads, self.rope_dim)

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


#: The caches' argument names: GQA's two, and MLA's one latent cache (read as K and V).
GQA_CACHES = ("key_cache", "value_cache")
MLA_CACHES = ("kv_cache", "kv_cache")


def check_tensors(
    query: object, key_cache: object, value_cache: object, block_table: object, *, device_type: str,
    rope_dim: int = 0,
) -> DecodeShape:
    """Types, ranks, dtypes, devices, contiguity and mutual shapes of the four input tensors; with ``rope_dim``
    (MLA) the caches are the one latent cache and the shape rules are MLA's (:func:`check_mla_tensors`)."""
    k_name, v_name = MLA_CACHES if rope_dim else GQA_CACHES
    layout = "[num_blocks, block_size, 1, kv_lora_rank]" if rope_dim else \
        "[num_blocks, block_size, num_kv_heads, head_dim]"
    q = _require_tensor(query, "query")
    k = _require_tensor(key_cache, k_name)
    v = _require_tensor(value_cache, v_name)
    if q.dim() not in (QUERY_DIMS, TOKENS_QUERY_DIMS):
        raise ValueError(f"query must be 3-D [batch, num_heads, head_dim] (one token per sequence) or 4-D "
                         f"[batch, q_len, num_heads, head_dim], got shape {tuple(q.shape)}")
    _require_dims(k, k_name, CACHE_DIMS, layout)
    _require_dims(v, v_name, CACHE_DIMS, layout)
    if q.dtype not in DTYPE_NAMES:
        raise TypeError(f"query dtype must be torch.float16 or torch.bfloat16, got {q.dtype}")
    for name, tensor in ((k_name, k), (v_name, v)):
        if tensor.dtype != q.dtype:
            raise TypeError(f"{name} dtype must match query ({q.dtype}), got {tensor.dtype}")
    if q.device.type != device_type:
        raise ValueError(f"query must be on a {device_type!r} device for this backend, got {q.device}")
    for name, tensor in ((k_name, k), (v_name, v)):
        if tensor.device != q.device:
            raise ValueError(f"{name} must be on the query's device {q.device}, got {tensor.device}")
    for name, tensor in (("query", q), (k_name, k), (v_name, v)):
        _require_contiguous(tensor, name)
    bt = check_table_tensor(block_table, q.device)
    token_axis = q.dim() == TOKENS_QUERY_DIMS
    batch, num_heads, head_dim = q.shape[0], q.shape[-2], q.shape[-1]
    q_len = rules.validate_q_len(int(q.shape[1])) if token_axis else 1
    num_blocks, block_size, num_kv_heads, cache_dim = k.shape
    if tuple(v.shape) != tuple(k.shape):
        raise ValueError(f"{v_name} shape must equal {k_name}'s {tuple(k.shape)}, got {tuple(v.shape)}")
    if cache_dim != head_dim:
        raise ValueError(f"{k_name} head_dim (last dim) must equal query's head_dim {head_dim}, got {cache_dim}")
    if bt.shape[0] != batch:
        raise ValueError(f"block_table must have one row per sequence ({batch} rows), got {bt.shape[0]}")
    shape = DecodeShape(
        batch=int(batch), num_heads=int(num_heads), num_kv_heads=int(num_kv_heads), head_dim=int(head_dim),
        block_size=int(block_size), num_blocks=int(num_blocks), max_pages=int(bt.shape[1]),
        dtype=DTYPE_NAMES[q.dtype], device=q.device, q_len=q_len, token_axis=token_axis, rope_dim=rope_dim,
    )
    rules.validate_shape(
        batch=shape.batch, num_heads=shape.num_heads, num_kv_heads=shape.num_kv_heads, head_dim=shape.head_dim,
        block_size=shape.block_size, max_pages=shape.max_pages, num_blocks=shape.num_blocks, core_count=1,
        rope_dim=rope_dim,
    )
    return shape


def check_rope_tensor(tensor: object, name: str, want: tuple[int, ...], like: torch.Tensor, layout: str) -> None:
    """An MLA rope tensor: ``want``'s shape (its last dim the rope width), ``like``'s dtype and device, dense."""
    t = _require_tensor(tensor, name)
    if t.dim() != len(want) or tuple(t.shape[:-1]) != want[:-1]:
        raise ValueError(f"{name} must be {layout} = {want}, got shape {tuple(t.shape)}")
    if t.shape[-1] != want[-1]:
        raise ValueError(f"{name}'s last dim is MLA's rope width (qk_rope_head_dim), which must be {want[-1]}, got "
                         f"{t.shape[-1]}")
    if t.dtype != like.dtype:
        raise TypeError(f"{name} dtype must match query ({like.dtype}), got {t.dtype}")
    if t.device != like.device:
        raise ValueError(f"{name} must be on the query's device {like.device}, got {t.device}")
    _require_contiguous(t, name)


def check_mla_tensors(query: object, query_rope: object, kv_cache: object, kv_rope_cache: object,
                      block_table: object, *, device_type: str) -> DecodeShape:
    """MLA's inputs: ``query`` ``[b, (q_len,) H, 512]`` and ``kv_cache`` ``[num_blocks, block_size, 1, 512]`` by
    :func:`check_tensors`' rules (the latent cache is K and V), then their rope parts, 64 wide."""
    shape = check_tensors(query, kv_cache, kv_cache, block_table, device_type=device_type,
                          rope_dim=abi.MLA_ROPE_DIM)
    assert isinstance(query, torch.Tensor)
    check_rope_tensor(query_rope, "query_rope", shape.rope_query_shape, query,
                      "[batch, (q_len,) num_heads, rope_dim] (query's shape with the rope width last)")
    check_rope_tensor(kv_rope_cache, "kv_rope_cache", shape.rope_cache_shape, query,
                      "[num_blocks, block_size, 1, rope_dim] (kv_cache's pages with the rope width last)")
    return shape


def check_table_tensor(block_table: object, device: torch.device) -> torch.Tensor:
    """An int32 ``[batch, pages]`` tensor on ``device`` (its values are not read here).

    Any strides: every runner copies the table into its own before a launch reads it (``update``), so a
    column slice of an engine's persistent ``[max_batch, max_pages]`` table is taken as it is.  The one table
    the kernel addresses in place, the runner's own, is checked where it is recognised
    (:meth:`launcher.staging.DeviceState.table_rows`)."""
    bt = _require_tensor(block_table, "block_table")
    _require_dims(bt, "block_table", TABLE_DIMS, "[batch, max_pages]")
    if bt.dtype != torch.int32:
        raise TypeError(f"block_table dtype must be torch.int32, got {bt.dtype}")
    if bt.device != device:
        raise ValueError(f"block_table must be on the query's device {device}, got {bt.device}")
    return bt


#: Tensor dtypes ``context_lens`` may have: what numpy holds as int64 without loss (``torch.tensor([...])`` is int64).
LENS_DTYPES = (torch.int32, torch.int64, torch.int16, torch.int8, torch.uint8)


def lens_to_numpy(context_lens: object) -> np.ndarray:
    """``context_lens`` as a 1-D int64 array: an integer tensor (int32, int64, ...; a device tensor is copied to
    the host, which synchronises with its stream, and only ``update`` and the one-call functions take lengths,
    never ``run``), or whatever :func:`tiling.rules.lengths_array` takes.  The values' rules are the caller's
    (:func:`tiling.rules.validate_lengths`)."""
    if isinstance(context_lens, torch.Tensor):
        if context_lens.dtype not in LENS_DTYPES:
            names = ", ".join(str(dtype) for dtype in LENS_DTYPES)
            raise TypeError(f"context_lens tensor must have an integer dtype ({names}), got {context_lens.dtype}")
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

