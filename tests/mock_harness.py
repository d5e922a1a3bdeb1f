"""Drive the mock NPU device (``build/lib/libpa_mock.so``) through ctypes directly, without the launcher.

Used by ``tests/test_mock_device.py`` and ``tests/bench_mock.py``: random paged inputs with shuffled block
tables, the planner's tiling, poisoned workspaces, one launch, and the project's float64 golden.
"""

from __future__ import annotations

import ctypes
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from accuracy.reference import Reference, reference
from launcher import mock_api
from tiling import PagedAttentionPlan, abi, plan_paged_attention

LIBRARY = Path(os.environ.get("PA_KIT_LIB_DIR", Path(__file__).resolve().parent.parent / "build" / "lib"))
MOCK_LIBRARY = LIBRARY / "libpa_mock.so"
JUNK_BLOCK_ID = -1
FP16_NAN = 0x7E00
BF16_NAN = 0x7FC0


def load_mock() -> ctypes.CDLL:
    handle = ctypes.CDLL(str(MOCK_LIBRARY))
    mock_api.declare(handle)
    return handle


def to_bits(values: np.ndarray, dtype: str) -> np.ndarray:
    """float array -> uint16 bit patterns of fp16 / bf16 (torch's round-to-nearest-even)."""
    tensor = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32))
    narrow = tensor.to(torch.float16 if dtype == "fp16" else torch.bfloat16)
    return narrow.view(torch.int16).numpy().view(np.uint16)


def from_bits(bits: np.ndarray, dtype: str) -> np.ndarray:
    """uint16 bit patterns of fp16 / bf16 -> float64, exactly."""
    if dtype == "fp16":
        return bits.view(np.float16).astype(np.float64)
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


@dataclass
class Case:
    """One decode step's inputs, in the layouts of the kernel ABI."""

    lens: list[int]
    num_heads: int
    num_kv_heads: int
    head_dim: int
    block_size: int
    dtype: str
    q: np.ndarray             # uint16 [B, Hq, D]
    k: np.ndarray             # uint16 [num_blocks, bs, Hkv, D]
    v: np.ndarray
    block_table: np.ndarray   # int32 [B, max_pages]
    scale: float
    plan: PagedAttentionPlan
    buffers: dict[int, np.ndarray] = field(default_factory=dict)


def make_case(
    rng: np.random.Generator, lens: list[int], *, num_heads: int, num_kv_heads: int, head_dim: int,
    block_size: int, dtype: str = "fp16", strategy: str = "auto", extra_pages: int = 3, spare_columns: int = 2,
    value_scale: float = 1.0, scale: float | None = None, core_count: int = 24,
) -> Case:
    pages = [math.ceil(n / block_size) for n in lens]
    max_pages = max(max(pages), 1) + spare_columns
    num_blocks = sum(pages) + extra_pages
    order = rng.permutation(num_blocks).astype(np.int32)
    table = np.full((len(lens), max_pages), JUNK_BLOCK_ID, dtype=np.int32)
    used = 0
    for b, n in enumerate(pages):
        table[b, :n] = order[used:used + n]
        used += n
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    q = to_bits(rng.standard_normal((len(lens), num_heads, head_dim)) * value_scale, dtype)
    k = to_bits(rng.standard_normal(shape) * value_scale, dtype)
    v = to_bits(rng.standard_normal(shape), dtype)
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    plan = plan_paged_attention(
        lens, num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim, block_size=block_size,
        max_pages=max_pages, num_blocks=num_blocks, scale=scale, dtype=dtype, strategy=strategy,
        core_count=core_count,
    )
    return Case(list(lens), num_heads, num_kv_heads, head_dim, block_size, dtype, q, k, v, table, scale, plan)


def as_tensor(bits: np.ndarray, dtype: str) -> torch.Tensor:
    """uint16 bit patterns -> the fp16 / bf16 tensor they encode (no copy of the values' meaning)."""
    narrow = torch.float16 if dtype == "fp16" else torch.bfloat16
    return torch.from_numpy(np.ascontiguousarray(bits).view(np.int16)).view(narrow)


def golden(case: Case) -> Reference:
    """The case's float64 golden and tolerance, by the one policy of :mod:`accuracy.reference`."""
    return reference(as_tensor(case.q, case.dtype), as_tensor(case.k, case.dtype), as_tensor(case.v, case.dtype),
                     torch.from_numpy(case.block_table), case.lens, case.scale)


def workspace(case: Case, *, poison: bool = True) -> dict[int, np.ndarray]:
    """Output and workspace buffers of the plan's sizes, NaN-poisoned (or zeroed)."""
    sizes = case.plan.workspace
    nan16 = FP16_NAN if case.dtype == "fp16" else BF16_NAN
    fill32 = np.float32(np.nan) if poison else np.float32(0)
    fill16 = nan16 if poison else 0
    slot = abi.ArgSlot
    return {
        slot.O: np.full(case.q.shape, fill16, dtype=np.uint16),
        slot.S: np.full(sizes.s_bytes // 4, fill32, dtype=np.float32),
        slot.P: np.full(sizes.p_bytes // 2, fill16, dtype=np.uint16),
        slot.O_TMP: np.full(sizes.o_tmp_bytes // 4, fill32, dtype=np.float32),
        slot.O_CORE: np.full(sizes.o_core_bytes // 4, fill32, dtype=np.float32),
        slot.L: np.full(sizes.l_bytes // 4, fill32, dtype=np.float32),
    }


@dataclass
class Launch:
    code: int
    error: mock_api.MockError
    out: np.ndarray           # uint16 [B, Hq, D]
    buffers: dict[int, np.ndarray]


def launch(
    lib: ctypes.CDLL, case: Case, *, checked: bool = True, threads: int = 0, isa: int = 0, gang_cores: int = 0,
    tiling: np.ndarray | None = None, buffers: dict[int, np.ndarray] | None = None,
    extents: dict[int, int] | None = None, pointers: dict[int, int | None] | None = None,
    block_dim: int | None = None, num_blocks: int | None = None,
) -> Launch:
    """One call_kernel with the case's tensors; overrides corrupt one piece at a time for negative controls."""
    slot = abi.ArgSlot
    buffers = workspace(case) if buffers is None else buffers
    words = np.ascontiguousarray(case.plan.tiling if tiling is None else tiling, dtype=np.uint32)
    arrays: dict[int, np.ndarray] = {
        slot.Q: case.q, slot.K: case.k, slot.V: case.v, slot.BLOCK_TABLES: case.block_table,
        slot.TILING: words, **buffers,
    }
    ptrs: list[int | None] = [None] * abi.NUM_PTR_ARGS
    config = mock_api.MockConfig()
    for index, array in arrays.items():
        if array.size:
            ptrs[index] = array.ctypes.data
            config.extent_bytes[index] = array.nbytes
    for index, value in (pointers or {}).items():
        ptrs[index] = value
    for index, value in (extents or {}).items():
        config.extent_bytes[index] = value
    config.num_blocks = case.k.shape[0] if num_blocks is None else num_blocks
    config.checked = int(checked)
    config.num_threads = threads
    config.isa = isa
    config.gang_cores = gang_cores
    assert lib.pa_mock_bind(ctypes.byref(config)) == 0
    dim = case.plan.block_dim if block_dim is None else block_dim
    code = lib.call_kernel(dim, None, *ptrs)
    return Launch(code, mock_api.last_error(lib), buffers[slot.O], buffers)
