"""A runner's capacity and the device memory it allocates once for it.

:class:`Capacity` is what a runner is built for (sizes, dtype, device, ``max_batch``, ``max_pages_per_seq``);
:class:`DeviceState` owns every buffer the launch path touches - workspace storage for the worst plan of that
capacity, the tiling tensor with its two host staging buffers, the runner's block table, the default output
and (when the runner returns it) the default lse - and hands out views of them per step, so their data pointers
never change.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from launcher.backends import Backend
from launcher.validation import DTYPE_NAMES, DecodeShape, check_table_tensor
from tiling import PagedAttentionPlan, abi, rules
from tiling.splits import combine_split_limit
from tiling.workspace import capacity_workspace

#: Element type of each workspace slot; ``None`` means the query's dtype (P holds rounded probabilities).
WORKSPACE_DTYPES: dict[abi.ArgSlot, torch.dtype | None] = {
    abi.ArgSlot.S: torch.float32, abi.ArgSlot.P: None, abi.ArgSlot.O_TMP: torch.float32,
    abi.ArgSlot.O_CORE: torch.float32, abi.ArgSlot.L: torch.float32,
}
#: Host staging buffers for the tiling words: step n+1 is staged while step n's upload may still be queued.
STAGES = 2
#: What the runner's block table holds where no step has written (an id no cache has).
UNWRITTEN_BLOCK_ID = -1


def _require_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


@dataclass(frozen=True)
class Capacity:
    """The sizes a runner is built for; every step must fit them."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    block_size: int
    num_blocks: int
    max_batch: int
    max_pages: int
    dtype: torch.dtype
    device: torch.device
    #: query tokens per sequence, and whether queries and outputs have the token axis (4-D)
    q_len: int = 1
    token_axis: bool = False
    #: MLA's rope width (0: GQA/MQA/MHA); the caches are then the latent cache and its rope cache
    rope_dim: int = 0

    @property
    def dtype_name(self) -> str:
        return DTYPE_NAMES[self.dtype]

    def query_shape(self, batch: int) -> tuple[int, ...]:
        """A step's query and output shape: ``[batch, (q_len,) num_heads, head_dim]``."""
        return (batch, *self._tokens, self.num_heads, self.head_dim)

    def lse_shape(self, batch: int) -> tuple[int, ...]:
        """A step's lse shape: ``[batch, (q_len,) num_heads]`` (float32)."""
        return (batch, *self._tokens, self.num_heads)

    @property
    def _tokens(self) -> tuple[int, ...]:
        return (self.q_len,) if self.token_axis else ()

    @property
    def cache_shape(self) -> torch.Size:
        return torch.Size((self.num_blocks, self.block_size, self.num_kv_heads, self.head_dim))

    def step_shape(self, batch: int) -> DecodeShape:
        return DecodeShape(batch=batch, num_heads=self.num_heads, num_kv_heads=self.num_kv_heads,
                           head_dim=self.head_dim, block_size=self.block_size, num_blocks=self.num_blocks,
                           max_pages=self.max_pages, dtype=self.dtype_name, device=self.device, q_len=self.q_len,
                           token_axis=self.token_axis, rope_dim=self.rope_dim)

    def _validate(self) -> Capacity:
        rules.validate_shape(batch=self.max_batch, num_heads=self.num_heads, num_kv_heads=self.num_kv_heads,
                             head_dim=self.head_dim, block_size=self.block_size, max_pages=self.max_pages,
                             num_blocks=self.num_blocks, core_count=1, rope_dim=self.rope_dim)
        return self

    @classmethod
    def of(cls, shape: DecodeShape, dtype: torch.dtype, *, max_batch: int | None,
           max_pages_per_seq: int | None) -> Capacity:
        """The tensors' sizes, or more when ``max_batch`` / ``max_pages_per_seq`` ask for it."""
        batch = shape.batch if max_batch is None else _require_int("max_batch", max_batch, shape.batch)
        pages = shape.max_pages if max_pages_per_seq is None else \
            _require_int("max_pages_per_seq", max_pages_per_seq, shape.max_pages)
        return cls(shape.num_heads, shape.num_kv_heads, shape.head_dim, shape.block_size, shape.num_blocks,
                   batch, pages, dtype, shape.device, shape.q_len, shape.token_axis, shape.rope_dim)._validate()

    @classmethod
    def for_engine(cls, *, num_heads: int, num_kv_heads: int, head_dim: int, block_size: int, dtype: object,
                   max_batch: int, max_pages_per_seq: int, num_blocks: int, device: torch.device,
                   device_type: str, q_len: int = 1, rope_dim: int = 0) -> Capacity:
        """The sizes an engine names; ``q_len`` > 1 gives 4-D queries and outputs (1 keeps them 3-D); ``rope_dim``
        > 0 is MLA's."""
        sizes = {"num_heads": num_heads, "num_kv_heads": num_kv_heads, "head_dim": head_dim,
                 "block_size": block_size, "max_batch": max_batch, "max_pages_per_seq": max_pages_per_seq,
                 "num_blocks": num_blocks}
        for name, value in sizes.items():
            _require_int(name, value, 1)
        if dtype not in DTYPE_NAMES:
            raise TypeError(f"dtype must be torch.float16 or torch.bfloat16, got {dtype}")
        if device.type != device_type:
            raise ValueError(f"device must be a {device_type!r} device for this backend, got {device}")
        q_len = rules.validate_q_len(q_len)
        return cls(num_heads, num_kv_heads, head_dim, block_size, num_blocks, max_batch, max_pages_per_seq,
                   dtype, device, q_len, q_len > 1, rules.validate_rope_dim(rope_dim))._validate()  # type: ignore[arg-type]


class DeviceState:
    """Every buffer of the launch path, allocated once; per-step views of them."""

    def __init__(self, capacity: Capacity, backend: Backend, stream: Any, *, core_count: int,
                 handoff_tokens: int | None, out: torch.Tensor | None, return_lse: bool = False) -> None:
        self.capacity, self.backend, self.stream = capacity, backend, stream
        dev = capacity.device
        sizes = capacity_workspace(
            core_count=core_count, elem_bytes=rules.DTYPES[capacity.dtype_name], max_batch=capacity.max_batch,
            num_heads=capacity.num_heads, head_dim=capacity.head_dim, max_pages=capacity.max_pages,
            handoff_tokens=handoff_tokens, kv_split_limit=combine_split_limit(capacity.head_dim),
            q_len=capacity.q_len, rope_dim=capacity.rope_dim)
        self._storage = {slot: torch.empty(nbytes, dtype=torch.uint8, device=dev)
                         for slot, nbytes in sizes.by_slot().items() if nbytes}
        self.workspace_bytes = sum(t.numel() for t in self._storage.values())
        self.workspace: dict[abi.ArgSlot, torch.Tensor] = {}
        words = abi.tiling_words(capacity.max_batch)
        self._tiling = torch.empty(words, dtype=torch.int32, device=dev)
        pin = backend.pins_host_memory and dev.type != "cpu"
        self._stages = [torch.empty(words, dtype=torch.int32, pin_memory=pin) for _ in range(STAGES)]
        self._events: list[Any] = [backend.make_event() for _ in range(STAGES)]
        self._next_stage = 0
        self.tiling = self._tiling[:0]
        self.table = torch.full((capacity.max_batch, capacity.max_pages), UNWRITTEN_BLOCK_ID, dtype=torch.int32,
                                device=dev)
        self._table_rows, self._table_cols = 0, capacity.max_pages
        self.out = out if out is not None else torch.empty(
            capacity.query_shape(capacity.max_batch), dtype=capacity.dtype, device=dev)
        self.lse = torch.empty(capacity.lse_shape(capacity.max_batch), dtype=torch.float32, device=dev) \
            if return_lse else None
        self._empty_index = torch.empty(capacity.max_batch, dtype=torch.long, device=dev)

    # ---- block table ---------------------------------------------------------------------------------------
    def table_rows(self, block_table: torch.Tensor | None, batch: int) -> tuple[torch.Tensor | None, int, int]:
        """(the validated table or None, its rows, its columns) for a step of ``batch`` sequences."""
        cap = self.capacity
        if batch > cap.max_batch:
            raise ValueError(f"batch {batch} exceeds the runner's capacity max_batch={cap.max_batch}")
        if block_table is None:
            if batch > self._table_rows:
                raise ValueError(f"a step of {batch} sequences needs a block_table: the last one given had "
                                 f"{self._table_rows} rows")
            return None, batch, self._table_cols
        table = check_table_tensor(block_table, cap.device)
        self._check_own_table(table)
        rows, cols = int(table.shape[0]), int(table.shape[1])
        if rows != batch:
            raise ValueError(f"block_table must have one row per sequence ({batch} rows), got {rows}")
        if cols > cap.max_pages:
            raise ValueError(f"block_table has {cols} columns, more than the runner's capacity "
                             f"max_pages_per_seq={cap.max_pages}")
        if cols < 1 and batch:
            raise ValueError(f"block_table must have at least one column, got {cols}")
        return table, rows, cols

    def _check_own_table(self, table: torch.Tensor) -> None:
        """A table in the runner's own storage is used in place, so it must address it as the kernel does: from
        its first row, with its row stride (``runner.block_table[:b, :pages]``).  Any other view of it would be
        copied over itself, rows shifted: refused."""
        own = self.table
        if table.numel() == 0 or table.untyped_storage().data_ptr() != own.untyped_storage().data_ptr():
            return
        if table.data_ptr() != own.data_ptr() or table.stride() != own.stride():
            raise ValueError(
                f"block_table is a view of the runner's own block table (runner.block_table) that starts at "
                f"element {table.storage_offset()} with strides {tuple(table.stride())}: the kernel reads that "
                f"table in place from element 0 with strides {tuple(own.stride())}, so pass "
                f"runner.block_table[:batch, :pages] itself, or a table of your own (which update() copies)")

    def stage_table(self, table: torch.Tensor | None, rows: int, cols: int) -> None:
        """Copy the step's table into the runner's, in order on the launch stream (no host read)."""
        if table is None:
            return
        if rows and table.data_ptr() != self.table.data_ptr():
            target = self.table[:rows, :cols]
            self.backend.on_stream(lambda: target.copy_(table, non_blocking=True), self.stream)()
        self._table_rows, self._table_cols = rows, cols

    # ---- tiling and workspace ------------------------------------------------------------------------------
    def install(self, plan: PagedAttentionPlan) -> None:
        words = plan.tiling.size
        if words > self._tiling.numel():
            raise ValueError(f"the plan has {words} tiling words, more than the {self._tiling.numel()} the "
                             f"runner allocated for max_batch={self.capacity.max_batch}")
        workspace: dict[abi.ArgSlot, torch.Tensor] = {}
        for slot, nbytes in plan.workspace.by_slot().items():
            if nbytes == 0:
                continue
            storage = self._storage.get(slot)
            held = 0 if storage is None else storage.numel()
            if nbytes > held:
                raise ValueError(f"the plan needs {nbytes} bytes of {slot.name} workspace, more than the {held} "
                                 f"the runner allocated for its capacity")
            assert storage is not None
            workspace[slot] = storage[:nbytes].view(WORKSPACE_DTYPES[slot] or self.capacity.dtype)
        index = self._next_stage
        self._next_stage = (index + 1) % STAGES
        event = self._events[index]
        if event is not None:
            event.synchronize()  # the upload staged from this buffer STAGES steps ago has finished
        stage = self._stages[index][:words]
        stage.numpy()[:] = plan.tiling.view(np.int32)
        target = self._tiling[:words]
        self.backend.on_stream(lambda: target.copy_(stage, non_blocking=True), self.stream)()
        if event is not None:
            event.record(self.stream)
        self.tiling = target
        self.workspace = workspace

    def empty_rows(self, rows: list[int]) -> torch.Tensor:
        """The rows an external kernel leaves unwritten, as a view of an index buffer allocated once."""
        view = self._empty_index[:len(rows)]
        view.copy_(torch.tensor(rows, dtype=torch.long))
        return view


def with_batch(shape: DecodeShape, batch: int) -> DecodeShape:
    return dataclasses.replace(shape, batch=batch)
