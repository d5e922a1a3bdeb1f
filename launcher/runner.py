"""``PagedAttentionRunner``: validate and plan once per decode step, launch many times.

The split follows the plan/run pattern: the constructor (and :meth:`PagedAttentionRunner.update` for the
next decode step) does all Python work - validation, planning, tiling upload, workspace allocation and the
ctypes argument tuple - so that ``runner()`` is the kernel call and nothing else, apart from two things the
contract requires on every launch:

* the split-KV partials (``o_core``, ``l``) carry state between the split tasks and the combine, so they
  are zeroed on the launch stream when the plan uses split-KV (no other workspace needs it: every ``s``,
  ``p`` and ``o_tmp`` region is written before it is read in the same launch);
* an external ATB-ABI kernel leaves the output rows of empty sequences unwritten, so the runner zeroes
  them after the launch (our kernels write those zero rows themselves).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np
import torch
from torch import Tensor

from launcher import run_check, validation
from launcher.backends import Backend, Launch, get_backend
from launcher.validation import DecodeShape
from tiling import PagedAttentionPlan, abi, plan_paged_attention
from tiling.splits import STRATEGIES

ArgSlot = abi.ArgSlot
#: Element type of each workspace slot; ``None`` means the query's dtype (P holds rounded probabilities).
WORKSPACE_DTYPES: Mapping[ArgSlot, torch.dtype | None] = {
    ArgSlot.S: torch.float32, ArgSlot.P: None, ArgSlot.O_TMP: torch.float32,
    ArgSlot.O_CORE: torch.float32, ArgSlot.L: torch.float32,
}
#: Workspace that carries state between tasks of one launch: zeroed per launch under split-KV.
SPLIT_KV_STATE = (ArgSlot.O_CORE, ArgSlot.L)
#: Index of the first pointer in the ``call_kernel`` argument tuple (after block_dim and stream).
FIRST_POINTER_ARG = 2


class PagedAttentionRunner:
    """Paged-attention decode for one batch of sequences, planned once and launched many times.

    Arguments (see the README for the full table):

    * ``query`` ``[batch, num_heads, head_dim]`` fp16/bf16; ``key_cache``/``value_cache``
      ``[num_blocks, block_size, num_kv_heads, head_dim]``, same dtype; query head ``h`` reads KV head
      ``h // (num_heads // num_kv_heads)``.
    * ``block_table`` int32 ``[batch, max_pages]``; entries past a sequence's last page are ignored.
    * ``context_lens`` int32 tensor or list of ints ``[batch]``; a length of 0 gives a zero output row.
    * ``scale`` (default ``1/sqrt(head_dim)``), ``backend`` (``"mock"``, ``"sim"``, ``"npu"``, a
      :class:`~launcher.backends.Backend`, or ``None`` = inferred from the query's device), ``out`` (a
      preallocated output), ``stream`` (default: the device's current stream, captured now),
      ``checked`` (mock/sim bounds checks), ``core_count`` (default: the device's cube cores; 24 on the
      mock), ``strategy`` (``"auto"``, ``"bn"`` or ``"split_kv"``), ``batch_invariant``, ``handoff_tokens``
      (the cube->vector hand-off: None = the planner's choice, or a multiple of 512; an external ATB-ABI
      kernel always gets ABI v1's scratch and 512).

    Attributes: ``plan`` (the frozen :class:`~tiling.PagedAttentionPlan`), ``out``, ``workspace``
    (slot -> tensor, exactly the plan's sizes; tests poison it), ``tiling`` (the uploaded words),
    ``launch_args`` (the cached ``call_kernel`` argument tuple), ``backend``.
    """

    def __init__(
        self,
        query: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        block_table: torch.Tensor,
        context_lens: torch.Tensor | Sequence[int],
        *,
        scale: float | None = None,
        backend: str | Backend | None = None,
        out: torch.Tensor | None = None,
        stream: Any = None,
        checked: bool = True,
        core_count: int | None = None,
        strategy: str = "auto",
        batch_invariant: bool = False,
        handoff_tokens: int | None = None,
    ) -> None:
        device = query.device if isinstance(query, torch.Tensor) else torch.device("cpu")
        self.backend = get_backend(backend, device)
        shape = validation.check_tensors(query, key_cache, value_cache, block_table,
                                         device_type=self.backend.device_type)
        self.scale = validation.check_scale(scale, shape.head_dim)
        lens = validation.check_context_lens(context_lens, shape)
        validation.check_block_ids(block_table, lens, shape)
        validation.check_option("strategy", strategy, STRATEGIES)
        validation.check_option("checked", checked, (True, False))
        validation.check_core_count(core_count)
        if not isinstance(batch_invariant, bool):
            raise TypeError(f"batch_invariant must be a bool, got {batch_invariant!r}")
        if batch_invariant and strategy != "auto":
            raise ValueError(f"batch_invariant=True pins the task grid; strategy must be 'auto', got {strategy!r}")
        inputs = {"query": query, "key_cache": key_cache, "value_cache": value_cache, "block_table": block_table}
        if out is not None:
            out = validation.check_out(out, shape, query.dtype, inputs)
        self.query, self.key_cache, self.value_cache = query, key_cache, value_cache
        self.block_table = block_table
        self.shape: DecodeShape = shape
        self.checked = checked
        self.strategy = strategy
        self.batch_invariant = batch_invariant
        self.handoff_tokens = handoff_tokens
        self.core_count = core_count if core_count is not None else self.backend.core_count(shape.device)
        self.library = self.backend.library
        self._stream, self._stream_handle = self.backend.resolve_stream(stream)
        self.out = out if out is not None else torch.empty(
            (shape.batch, shape.num_heads, shape.head_dim), dtype=query.dtype, device=shape.device)
        self._storage: dict[ArgSlot, torch.Tensor] = {}
        self._workspace: dict[ArgSlot, torch.Tensor] = {}
        self.tiling: torch.Tensor | None = None
        self.install_plan(self._plan(lens))

    # ---- planning (off the launch path) -------------------------------------------------------------
    def _plan(self, lens: np.ndarray) -> PagedAttentionPlan:
        s = self.shape
        plan = plan_paged_attention(
            lens, num_heads=s.num_heads, num_kv_heads=s.num_kv_heads, head_dim=s.head_dim,
            block_size=s.block_size, max_pages=s.max_pages, num_blocks=s.num_blocks, scale=self.scale,
            dtype=s.dtype, core_count=self.core_count, strategy=self.strategy,  # type: ignore[arg-type]
            batch_invariant=self.batch_invariant, handoff_tokens=0 if self.library.external else self.handoff_tokens,
        )
        if plan.key not in self.library.supported_keys:
            supported = sorted(int(key) for key in self.library.supported_keys)
            raise ValueError(
                f"this shape needs tiling key {int(plan.key)} ({plan.key.name}: block_size {s.block_size}, "
                f"head_dim {s.head_dim}, {plan.strategy}), but {self.library.path.name} executes only keys "
                f"{supported}"
            )
        return plan

    def update(self, context_lens: torch.Tensor | Sequence[int], block_table: torch.Tensor | None = None) -> None:
        """Re-plan for the next decode step; workspace buffers that still fit are reused, not reallocated."""
        if block_table is not None:
            shape = validation.check_tensors(self.query, self.key_cache, self.value_cache, block_table,
                                             device_type=self.backend.device_type)
        else:
            block_table, shape = self.block_table, self.shape
        lens = validation.check_context_lens(context_lens, shape)
        validation.check_block_ids(block_table, lens, shape)
        self.block_table, self.shape = block_table, shape
        self.install_plan(self._plan(lens))

    def install_plan(self, plan: PagedAttentionPlan) -> None:
        """Upload ``plan``'s tiling, size the workspace and rebuild the cached launch.

        The constructor and :meth:`update` call it with a plan they validated.  Tools and tests may install
        a hand-made plan (e.g. a corrupted tiling or an undersized workspace) to check that the device
        rejects it; such a plan is not validated here.
        """
        words = torch.from_numpy(np.ascontiguousarray(plan.tiling).view(np.int32).copy())
        if self.tiling is not None and self.tiling.numel() == words.numel():
            # On the launch stream: a launch still queued there may be reading the previous words.
            tiling = self.tiling
            self.backend.on_stream(lambda: tiling.copy_(words), self._stream)()
        else:
            self.tiling = words.to(self.shape.device)
        self._size_workspace(plan)
        self.plan = plan
        self._build_launch()

    def _size_workspace(self, plan: PagedAttentionPlan) -> None:
        """Grow a slot's storage only when this plan needs more bytes than it holds."""
        self._workspace = {}
        for slot, nbytes in plan.workspace.by_slot().items():
            if nbytes == 0:
                continue
            storage = self._storage.get(slot)
            if storage is None or storage.numel() < nbytes:
                storage = torch.empty(nbytes, dtype=torch.uint8, device=self.shape.device)
                self._storage[slot] = storage
            dtype = WORKSPACE_DTYPES[slot] or self.query.dtype
            self._workspace[slot] = storage[:nbytes].view(dtype)

    def _build_launch(self) -> None:
        plan = self.plan
        assert self.tiling is not None
        buffers: dict[ArgSlot, torch.Tensor] = {
            ArgSlot.Q: self.query, ArgSlot.K: self.key_cache, ArgSlot.V: self.value_cache,
            ArgSlot.BLOCK_TABLES: self.block_table, ArgSlot.O: self.out, ArgSlot.TILING: self.tiling,
            **self._workspace,
        }
        pointers: list[int | None] = [None] * abi.NUM_PTR_ARGS
        extents = [0] * abi.NUM_PTR_ARGS
        for slot, tensor in buffers.items():
            pointers[slot] = tensor.data_ptr()
            extents[slot] = tensor.numel() * tensor.element_size()
        self._args: tuple[Any, ...] = (plan.block_dim, self._stream_handle, *pointers)
        self._extents = tuple(extents)
        self._launch = self.backend.make_launch(
            self.library.call_kernel, self._args, self._extents, plan.num_blocks, self.checked)
        # run(): the same launch on a list whose Q/K/V/O pointers it overwrites before each call.  The
        # backends' launch closures call ``function(*args)`` on the object they were given, so the list's
        # current contents are what the kernel receives; the extents stay valid because run() accepts only
        # tensors of the bound tensors' shapes.
        self._run_args: list[Any] = list(self._args)
        self._run_launch = self.backend.make_launch(
            self.library.call_kernel, self._run_args, self._extents, plan.num_blocks,  # type: ignore[arg-type]
            self.checked)
        self._run_expect = _RunExpect.of(self)
        # The compiled checks, when built for this torch: one C call decides "all good" and writes the
        # pointers; anything else goes through the Python checks below, which name the problem.
        module = run_check.load()
        self._fast_check = None if module is None else module.check
        self._fast_expect = None if module is None else module.make_expect(
            self.query, self.key_cache, self.block_table, _Q_ARG, _K_ARG, _V_ARG, _O_ARG)
        self._zero_state: Launch | None = None
        if plan.kv_core_num > 1:
            state = tuple(self._workspace[slot] for slot in SPLIT_KV_STATE if slot in self._workspace)
            self._zero_state = self.backend.on_stream(_zeroer(state), self._stream)
        self._zero_empty: Launch | None = None
        self._empty_rows: torch.Tensor | None = None
        empty = [index for index, length in enumerate(plan.context_lens) if length == 0]
        if self.library.external and empty:
            rows = torch.tensor(empty, dtype=torch.long, device=self.shape.device)
            out = self.out
            self._empty_rows = rows
            self._zero_empty = self.backend.on_stream(lambda: out.index_fill_(0, rows, 0), self._stream)

    # ---- the launch path ----------------------------------------------------------------------------
    def __call__(self) -> torch.Tensor:
        """Launch the kernel on the cached arguments and return ``out``."""
        if self._zero_state is not None:
            self._zero_state()
        self._launch()
        if self._zero_empty is not None:
            self._zero_empty()
        return self.out

    def run(self, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
            out: torch.Tensor | None = None) -> torch.Tensor:
        """Launch the current plan on another layer's ``query`` and caches; returns ``out`` (default: ``self.out``).

        A decode step plans once (constructor or :meth:`update`) and calls ``run`` once per layer: the
        tensors must have exactly the shapes, dtype and device of those the runner was built with, be
        contiguous, and ``out`` must share no memory with the inputs or the block table.  These checks cost
        a few attribute reads; a violation raises ``TypeError``/``ValueError`` before anything is launched.
        Nothing is re-planned or allocated, and ``runner()`` keeps launching on the bound tensors.
        """
        if out is None:
            out = self.out
        fast = self._fast_check
        if fast is None or not fast(self._fast_expect, query, key_cache, value_cache, out, self._run_args):
            self._check_run(query, key_cache, value_cache, out)
        if self._zero_state is not None:
            self._zero_state()
        self._run_launch()
        if self._empty_rows is not None:
            rows = self._empty_rows
            self.backend.on_stream(lambda: out.index_fill_(0, rows, 0), self._stream)()
        return out

    def _check_run(self, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                   out: torch.Tensor) -> None:
        """run()'s checks in Python (the reference for the compiled ones); on success the pointers are set."""
        e = self._run_expect
        qs, cs, dt, dev = e.query_shape, e.cache_shape, e.dtype, e.device_index
        # Fast path: exact type, shape, dtype, device index, contiguity; anything else (a mismatch, or a
        # tensor subclass) goes through the full check, which names what is wrong.
        if not (type(query) is Tensor and query.shape == qs and query.dtype is dt and query.get_device() == dev
                and query.is_contiguous()):
            _check_run_tensor(query, "query", qs, e)
        if not (type(key_cache) is Tensor and key_cache.shape == cs and key_cache.dtype is dt
                and key_cache.get_device() == dev and key_cache.is_contiguous()):
            _check_run_tensor(key_cache, "key_cache", cs, e)
        if not (type(value_cache) is Tensor and value_cache.shape == cs and value_cache.dtype is dt
                and value_cache.get_device() == dev and value_cache.is_contiguous()):
            _check_run_tensor(value_cache, "value_cache", cs, e)
        if not (type(out) is Tensor and out.shape == qs and out.dtype is dt and out.get_device() == dev
                and out.is_contiguous()):
            _check_run_tensor(out, "out", qs, e)
        q, k, v, o = query.data_ptr(), key_cache.data_ptr(), value_cache.data_ptr(), out.data_ptr()
        o_end = o + e.query_bytes
        if (q < o_end and o < q + e.query_bytes) or (k < o_end and o < k + e.cache_bytes) or \
                (v < o_end and o < v + e.cache_bytes) or (e.table_start < o_end and o < e.table_end):
            _raise_alias(out, {"query": query, "key_cache": key_cache, "value_cache": value_cache,
                               "block_table": self.block_table})
        if not (q and k and v and o):
            raise ValueError("query, key_cache, value_cache and out must have storage (a data pointer), "
                             "got a NULL pointer (a meta or empty tensor?)")
        args = self._run_args
        args[_Q_ARG], args[_K_ARG], args[_V_ARG], args[_O_ARG] = q, k, v, o

    def noop(self) -> None:
        """Call ``call_kernel_noop`` with the cached arguments: the launch overhead without the kernel."""
        noop = self.library.call_kernel_noop
        if noop is None:
            raise RuntimeError(f"{self.library.path.name} exports no call_kernel_noop (external ATB-ABI kernel)")
        noop(*self._args)

    # ---- introspection ------------------------------------------------------------------------------
    @property
    def workspace(self) -> Mapping[ArgSlot, torch.Tensor]:
        """Workspace tensors by slot, each exactly the plan's size (slots the plan leaves NULL are absent)."""
        return MappingProxyType(self._workspace)

    @property
    def launch_args(self) -> tuple[Any, ...]:
        """The cached ``call_kernel`` arguments: block_dim, stream handle, then 23 pointers (None = NULL)."""
        return self._args

    @property
    def extents(self) -> tuple[int, ...]:
        """Bytes behind each pointer slot, as registered with the mock device (0 for NULL)."""
        return self._extents

    def __repr__(self) -> str:
        s = self.shape
        return (f"PagedAttentionRunner(batch={s.batch}, heads={s.num_heads}/{s.num_kv_heads}, "
                f"head_dim={s.head_dim}, block_size={s.block_size}, {s.dtype}, backend={self.backend!r}, "
                f"strategy={self.plan.strategy}, block_dim={self.plan.block_dim}, kvCN={self.plan.kv_core_num})")


_Q_ARG = FIRST_POINTER_ARG + ArgSlot.Q
_K_ARG = FIRST_POINTER_ARG + ArgSlot.K
_V_ARG = FIRST_POINTER_ARG + ArgSlot.V
_O_ARG = FIRST_POINTER_ARG + ArgSlot.O


@dataclass(frozen=True)
class _RunExpect:
    """What :meth:`PagedAttentionRunner.run` compares each call's tensors against (read once per plan)."""

    query_shape: torch.Size
    cache_shape: torch.Size
    dtype: torch.dtype
    device: torch.device
    device_index: int
    query_bytes: int
    cache_bytes: int
    table_start: int
    table_end: int

    @classmethod
    def of(cls, runner: PagedAttentionRunner) -> _RunExpect:
        q, k, table = runner.query, runner.key_cache, runner.block_table
        start = table.data_ptr()
        return cls(q.shape, k.shape, q.dtype, q.device, q.get_device(), q.numel() * q.element_size(),
                   k.numel() * k.element_size(), start, start + table.numel() * table.element_size())


def _check_run_tensor(tensor: object, name: str, shape: torch.Size, expect: _RunExpect) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.shape != shape:
        raise ValueError(f"{name} shape must be the planned {tuple(shape)}, got {tuple(tensor.shape)}; "
                         "a different shape needs its own runner")
    if tensor.dtype != expect.dtype:
        raise TypeError(f"{name} dtype must be the planned {expect.dtype}, got {tensor.dtype}")
    if tensor.device != expect.device:
        raise ValueError(f"{name} must be on the planned device {expect.device}, got {tensor.device}")
    if not tensor.is_contiguous():
        raise ValueError(f"{name} must be contiguous (the kernel addresses it with dense strides), got strides "
                         f"{tuple(tensor.stride())}; call .contiguous() first")


def _raise_alias(out: torch.Tensor, inputs: dict[str, torch.Tensor]) -> None:
    o = out.data_ptr()
    o_end = o + out.numel() * out.element_size()
    for name, tensor in inputs.items():
        start = tensor.data_ptr()
        end = start + tensor.numel() * tensor.element_size()
        if start < o_end and o < end:
            raise ValueError(f"out must not share memory with {name} (out bytes [{o:#x}, {o_end:#x}) overlap "
                             f"{name} bytes [{start:#x}, {end:#x}))")
    raise AssertionError("unreachable: an overlap was detected")


def _zeroer(tensors: tuple[torch.Tensor, ...]) -> Launch:
    def zero() -> None:
        for tensor in tensors:
            tensor.zero_()

    return zero
