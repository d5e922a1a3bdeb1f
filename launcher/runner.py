"""``PagedAttentionRunner``: one object for a server's life; plan once per decode step, launch once per layer.

Everything the launch path touches is allocated when the runner is built, for its capacity (``max_batch``
sequences of at most ``max_pages_per_seq`` pages): the tiling tensor, the workspace of the worst plan that
capacity allows, the runner's own block table and the default output.  :meth:`PagedAttentionRunner.update`
plans a step of any batch size up to the capacity and stages its tiling words in one of two host buffers,
uploaded in order on the launch stream (so the next step's update may overlap this step's launches);
:meth:`PagedAttentionRunner.run` checks the layer's tensors and launches, and allocates nothing.  Apart from
the launch, two things happen on the launch path because the contract requires them: the split-KV partials
are zeroed when the plan splits the KV range, and an external ATB-ABI kernel's empty rows are zeroed after it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import torch

from launcher import run_check, validation
from launcher.backends import Backend, Launch, get_backend
from launcher.run_guard import FIRST_POINTER_ARG, RunExpect, check_run
from launcher.staging import Capacity, DeviceState, with_batch
from launcher.validation import DecodeShape
from tiling import PagedAttentionPlan, abi, plan_paged_attention, rules

ArgSlot = abi.ArgSlot
#: Workspace that carries state between tasks of one launch.  Zeroed per launch under split-KV only for an
#: external ATB-ABI kernel, whose needs are not ours to prove; the mock and pa-kit's NPU kernel write every
#: partial and log-sum-exp their combine reads (``docs/CONTRACT.md``, "Split-KV combine"; the tests poison
#: the workspace), so a memset of up to B x Hq x kvCN x D floats per layer would only hide a missed write.
SPLIT_KV_STATE = (ArgSlot.O_CORE, ArgSlot.L)
_Q_ARG, _K_ARG = FIRST_POINTER_ARG + ArgSlot.Q, FIRST_POINTER_ARG + ArgSlot.K
_V_ARG, _O_ARG = FIRST_POINTER_ARG + ArgSlot.V, FIRST_POINTER_ARG + ArgSlot.O


class PagedAttentionRunner:
    """Paged-attention decode, planned once per step and launched once per layer (see the README's table).

    Two ways in.  ``PagedAttentionRunner(query, key_cache, value_cache, block_table, context_lens, ...)`` binds
    one batch's tensors (``runner()`` launches on them) and takes its capacity from them unless ``max_batch=``
    / ``max_pages_per_seq=`` ask for more.  :meth:`for_engine` builds a runner from sizes alone, before any
    batch exists.  Either way :meth:`update` plans each step and :meth:`run` launches each layer.

    Options: ``scale`` (default ``1/sqrt(head_dim)``), ``backend`` (``"mock"``, ``"sim"``, ``"npu"``, a
    :class:`~launcher.backends.Backend`, or ``None`` = from the device), ``out`` (the default output; its rows
    are the capacity's), ``stream`` (default: the device's current stream, captured now), ``checked``
    (mock/sim bounds checks), ``core_count`` (default: the device's cube cores; 24 on the mock), ``strategy``
    (``"auto"``, ``"bn"``, ``"split_kv"``), ``batch_invariant``, ``handoff_tokens`` (None = the planner's
    choice, or a multiple of 512; an external ATB-ABI kernel always gets ABI v1's scratch and 512).

    Attributes: ``plan``, ``out`` (this step's rows of the default output), ``workspace`` (slot -> tensor,
    exactly the plan's sizes, views of storage allocated once; tests poison it), ``workspace_bytes``,
    ``tiling`` (this step's words on the device), ``block_table`` (this step's rows of the runner's table),
    ``launch_args``, ``backend``, ``capacity``.
    """

    def __init__(
        self, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, block_table: torch.Tensor,
        context_lens: torch.Tensor | Sequence[int], *, scale: float | None = None,
        backend: str | Backend | None = None, out: torch.Tensor | None = None, stream: Any = None,
        checked: bool = True, core_count: int | None = None, strategy: str = "auto", batch_invariant: bool = False,
        handoff_tokens: int | None = None, max_batch: int | None = None, max_pages_per_seq: int | None = None,
    ) -> None:
        device = query.device if isinstance(query, torch.Tensor) else torch.device("cpu")
        resolved = get_backend(backend, device)
        shape = validation.check_tensors(query, key_cache, value_cache, block_table,
                                         device_type=resolved.device_type)
        capacity = Capacity.of(shape, query.dtype, max_batch=max_batch, max_pages_per_seq=max_pages_per_seq)
        if out is not None:
            out = validation.check_out(out, with_batch(shape, capacity.max_batch), query.dtype,
                                       {"query": query, "key_cache": key_cache, "value_cache": value_cache,
                                        "block_table": block_table})
        lens = validation.check_context_lens(context_lens, shape)  # before any library is loaded
        if resolved.device_type == "cpu":
            validation.check_block_ids(block_table, lens, shape)
        self._setup(capacity, resolved, scale=scale, out=out, stream=stream, checked=checked,
                    core_count=core_count, strategy=strategy, batch_invariant=batch_invariant,
                    handoff_tokens=handoff_tokens)
        self.query, self.key_cache, self.value_cache = query, key_cache, value_cache
        self.update(context_lens, block_table)

    @classmethod
    def for_engine(
        cls, *, num_heads: int, num_kv_heads: int, head_dim: int, block_size: int, dtype: torch.dtype,
        max_batch: int, max_pages_per_seq: int, num_blocks: int, device: str | torch.device = "cpu",
        scale: float | None = None, backend: str | Backend | None = None, core_count: int | None = None,
        strategy: str = "auto", batch_invariant: bool = False, stream: Any = None, checked: bool = True,
        handoff_tokens: int | None = None,
    ) -> PagedAttentionRunner:
        """A runner for an engine's decode loop, from sizes alone: call :meth:`update` per step, :meth:`run`
        per layer.  Everything the launches need is allocated here; ``workspace_bytes`` says how much."""
        dev = torch.device(device)
        resolved = get_backend(backend, dev)
        capacity = Capacity.for_engine(num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
                                       block_size=block_size, dtype=dtype, max_batch=max_batch,
                                       max_pages_per_seq=max_pages_per_seq, num_blocks=num_blocks, device=dev,
                                       device_type=resolved.device_type)
        runner = cls.__new__(cls)
        runner._setup(capacity, resolved, scale=scale, out=None, stream=stream, checked=checked,
                      core_count=core_count, strategy=strategy, batch_invariant=batch_invariant,
                      handoff_tokens=handoff_tokens)
        runner.query = runner.key_cache = runner.value_cache = None
        runner.update([])
        return runner

    def _setup(self, capacity: Capacity, backend: Backend, *, scale: float | None, out: torch.Tensor | None,
               stream: Any, checked: bool, core_count: int | None, strategy: str, batch_invariant: bool,
               handoff_tokens: int | None) -> None:
        self.scale = rules.validate_scale(scale, capacity.head_dim)
        rules.validate_option("checked", checked, (True, False))
        rules.validate_core_count(core_count)
        rules.validate_plan_options(strategy=strategy, batch_invariant=batch_invariant,
                                    handoff_tokens=handoff_tokens)
        self.backend, self.capacity = backend, capacity
        self.library = backend.library
        self.checked, self.strategy, self.batch_invariant = checked, strategy, batch_invariant
        self.handoff_tokens = 0 if self.library.external else handoff_tokens
        self.core_count = core_count if core_count is not None else backend.core_count(capacity.device)
        clusters = backend.max_clusters(capacity.device)
        if clusters is not None and self.core_count > clusters:
            raise ValueError(
                f"core_count={self.core_count} exceeds the {clusters} AI-core clusters the {backend.name} backend's "
                f"SoC holds at once: the split-KV combine waits at a barrier of every launched block, which never "
                f"completes while excess blocks wait for a free cluster; pass core_count <= {clusters}")
        self._stream, self._stream_handle = backend.resolve_stream(stream)
        self._device = DeviceState(capacity, backend, self._stream, core_count=self.core_count,
                                   handoff_tokens=self.handoff_tokens, out=out)
        self.plan: PagedAttentionPlan | None = None
        self._fast = run_check.load()

    # ---- planning (once per decode step, off the launch path) ----------------------------------------------
    def update(self, context_lens: torch.Tensor | Sequence[int], block_table: torch.Tensor | None = None) -> None:
        """Plan the next decode step: ``context_lens`` for ``b`` sequences (``0 <= b <= max_batch``) and their
        block table ``[b, <= max_pages_per_seq]`` int32 (None: keep the rows of the last table given).

        The block table is **copied** into the runner's own table, in order on the launch stream: the caller may
        reuse or change its tensor afterwards, and a later change reaches the kernel only through another
        ``update``.  On a CPU backend the used block ids are checked on the host; on a device no table value is
        read on the host (a device tensor for ``context_lens`` is copied to the host, which synchronises).
        """
        cap = self.capacity
        lens = validation.lens_to_numpy(context_lens)
        table, rows, cols = self._device.table_rows(block_table, lens.size)
        rules.validate_lengths(lens, block_size=cap.block_size, max_pages=cols, batch=rows)
        if self.backend.device_type == "cpu":
            host = table if table is not None else self._device.table[:rows, :cols]
            rules.validate_block_ids(host.detach().cpu().numpy(), lens, block_size=cap.block_size,
                                     num_blocks=cap.num_blocks)
        if lens.size == 0:  # an empty step: run() returns an empty output and launches nothing
            self._device.stage_table(table, rows, cols)
            self.plan = None
            self._step_rows(0)
            self._args = (0, self._stream_handle, *[None] * abi.NUM_PTR_ARGS)
            self._run_args, self._extents = list(self._args), (0,) * abi.NUM_PTR_ARGS
            self._launch = self._zero_state = None
            self._empty_rows = None
            return
        plan = plan_paged_attention(
            lens, num_heads=cap.num_heads, num_kv_heads=cap.num_kv_heads, head_dim=cap.head_dim,
            block_size=cap.block_size, max_pages=cap.max_pages, num_blocks=cap.num_blocks, scale=self.scale,
            dtype=cap.dtype_name, core_count=self.core_count, strategy=self.strategy,  # type: ignore[arg-type]
            batch_invariant=self.batch_invariant, handoff_tokens=self.handoff_tokens,
        )
        if plan.key not in self.library.supported_keys:
            supported = sorted(int(key) for key in self.library.supported_keys)
            raise ValueError(
                f"this shape needs tiling key {int(plan.key)} ({plan.key.name}: block_size {cap.block_size}, "
                f"head_dim {cap.head_dim}, {plan.strategy}), but {self.library.path.name} executes only keys "
                f"{supported}")
        self._device.stage_table(table, rows, cols)
        self.install_plan(plan)

    def install_plan(self, plan: PagedAttentionPlan) -> None:
        """Stage ``plan``'s tiling, take its workspace views and rebuild the cached launch.

        :meth:`update` calls it with a plan it validated.  Tools and tests may install a hand-made plan (a
        corrupted tiling, an undersized workspace) to check that the device rejects it; such a plan is not
        validated here, except that it must fit the capacity the runner allocated.
        """
        self._device.install(plan)
        self.plan = plan
        self._step_rows(plan.batch)
        self._build_launch(plan)

    def _step_rows(self, batch: int) -> None:
        self.batch = batch
        full = self._device.out
        self.out = full if batch == full.shape[0] else full[:batch]
        self.block_table = self._device.table[:batch]
        self._expect = RunExpect.of(self.out, self.capacity.cache_shape, self._device.table)
        self._fast_expect = None if self._fast is None else self._fast.make_expect(
            self.out, tuple(self.capacity.cache_shape), self._device.table, _Q_ARG, _K_ARG, _V_ARG, _O_ARG)

    def _build_launch(self, plan: PagedAttentionPlan) -> None:
        dev = self._device
        buffers: dict[ArgSlot, torch.Tensor] = {ArgSlot.BLOCK_TABLES: self.block_table, ArgSlot.O: self.out,
                                                ArgSlot.TILING: dev.tiling, **dev.workspace}
        pointers: list[int | None] = [None] * abi.NUM_PTR_ARGS
        extents = [0] * abi.NUM_PTR_ARGS
        for slot, tensor in buffers.items():
            pointers[slot] = tensor.data_ptr()
            extents[slot] = tensor.numel() * tensor.element_size()
        extents[ArgSlot.Q] = extents[ArgSlot.O]
        extents[ArgSlot.K] = extents[ArgSlot.V] = self._expect.cache_bytes
        bound = self.query is not None and self.query.shape[0] == plan.batch
        if bound:
            assert self.key_cache is not None and self.value_cache is not None
            pointers[ArgSlot.Q] = self.query.data_ptr()
            pointers[ArgSlot.K], pointers[ArgSlot.V] = self.key_cache.data_ptr(), self.value_cache.data_ptr()
        self._args: tuple[Any, ...] = (plan.block_dim, self._stream_handle, *pointers)
        self._extents = tuple(extents)
        make = self.backend.make_launch
        self._launch: Launch | None = make(self.library.call_kernel, self._args, self._extents, plan.num_blocks,
                                           self.checked) if bound else None
        # run(): the same launch on a list whose Q/K/V/O pointers run() overwrites before each call.
        self._run_args: list[Any] = list(self._args)
        self._run_launch = make(self.library.call_kernel, self._run_args, self._extents,  # type: ignore[arg-type]
                                plan.num_blocks, self.checked)
        self._zero_state: Launch | None = None
        if plan.kv_core_num > 1 and self.library.external:
            state = tuple(dev.workspace[slot] for slot in SPLIT_KV_STATE if slot in dev.workspace)
            self._zero_state = self.backend.on_stream(_zeroer(state), self._stream)
        self._empty_rows: torch.Tensor | None = None
        empty = [index for index, length in enumerate(plan.context_lens) if length == 0]
        if self.library.external and empty:
            self._empty_rows = dev.empty_rows(empty)

    # ---- the launch path ------------------------------------------------------------------------------------
    def __call__(self) -> torch.Tensor:
        """Launch the current plan on the tensors the runner was built with; returns ``out``."""
        if self.plan is None:
            return self.out
        if self._launch is None:
            raise ValueError(f"runner() launches on the tensors the runner was built with (batch "
                             f"{'none' if self.query is None else self.query.shape[0]}); this step has batch "
                             f"{self.plan.batch}: call run(query, key_cache, value_cache)")
        if self._zero_state is not None:
            self._zero_state()
        self._launch()
        self._zero_empty(self.out)
        return self.out

    def run(self, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
            out: torch.Tensor | None = None) -> torch.Tensor:
        """Launch this step's plan on one layer's ``query`` ``[b, num_heads, head_dim]`` and caches; returns
        ``out`` (default: this step's rows of the runner's output, ``runner.out``).

        The tensors must have the step's shapes, the runner's dtype and device, be contiguous, and ``out`` must
        share no memory with the inputs or the block table; a violation raises ``TypeError``/``ValueError``
        before anything is launched.  Nothing is planned, allocated or copied to the host here.
        """
        if out is None:
            out = self.out
        fast = self._fast
        if fast is None or not fast.check(self._fast_expect, query, key_cache, value_cache, out, self._run_args):
            check_run(self._expect, self._run_args, query, key_cache, value_cache, out)
        if self.plan is None:
            return out
        if self._zero_state is not None:
            self._zero_state()
        self._run_launch()
        self._zero_empty(out)
        return out

    def _zero_empty(self, out: torch.Tensor) -> None:
        rows = self._empty_rows
        if rows is not None:
            self.backend.on_stream(lambda: out.index_fill_(0, rows, 0), self._stream)()

    def noop(self) -> None:
        """Call ``call_kernel_noop`` with the cached arguments: the launch overhead without the kernel."""
        noop = self.library.call_kernel_noop
        if noop is None:
            raise RuntimeError(f"{self.library.path.name} exports no call_kernel_noop (external ATB-ABI kernel)")
        noop(*self._args)

    # ---- introspection --------------------------------------------------------------------------------------
    @property
    def workspace(self) -> Mapping[ArgSlot, torch.Tensor]:
        """Workspace tensors by slot, each exactly the plan's size (slots the plan leaves NULL are absent)."""
        return MappingProxyType(self._device.workspace)

    @property
    def workspace_bytes(self) -> int:
        """Device bytes of workspace allocated at construction for the worst plan of the capacity."""
        return self._device.workspace_bytes

    @property
    def tiling(self) -> torch.Tensor:
        """This step's tiling words on the device (a view of the buffer allocated at construction)."""
        return self._device.tiling

    @property
    def shape(self) -> DecodeShape:
        return self.capacity.step_shape(self.batch)

    @property
    def launch_args(self) -> tuple[Any, ...]:
        """The cached ``call_kernel`` arguments: block_dim, stream handle, then 23 pointers (None = NULL)."""
        return self._args

    @property
    def extents(self) -> tuple[int, ...]:
        """Bytes behind each pointer slot, as registered with the mock device (0 for NULL)."""
        return self._extents

    def __repr__(self) -> str:
        c, plan = self.capacity, self.plan
        grid = "no plan (empty step)" if plan is None else (
            f"strategy={plan.strategy}, block_dim={plan.block_dim}, kvCN={plan.kv_core_num}")
        return (f"PagedAttentionRunner(batch={self.batch}/{c.max_batch}, heads={c.num_heads}/{c.num_kv_heads}, "
                f"head_dim={c.head_dim}, block_size={c.block_size}, {c.dtype_name}, backend={self.backend!r}, "
                f"{grid})")


def _zeroer(tensors: tuple[torch.Tensor, ...]) -> Launch:
    def zero() -> None:
        for tensor in tensors:
            tensor.zero_()

    return zero
