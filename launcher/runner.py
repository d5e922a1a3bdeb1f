"""``PagedAttentionRunner``: one object for a server's life; plan once per decode step, launch once per layer.

Everything the launch path touches is allocated when the runner is built, for its capacity (``max_batch``
sequences of at most ``max_pages_per_seq`` pages): the tiling tensor, the workspace of the worst plan that
capacity allows, the runner's own block table and the default output.  :meth:`PagedAttentionRunner.update`
plans a step of any batch size up to the capacity and stages its tiling words in one of two host buffers,
uploaded in order on the launch stream (so the next step's update may overlap this step's launches);
:meth:`PagedAttentionRunner.run` checks the layer's tensors and launches, and allocates nothing (the default lse,
when the runner returns one, is a view of a buffer allocated with the output).  Apart from the checks and
the launch, two things happen on the launch path, both for an external ATB-ABI kernel only: its split-KV
partials are zeroed before a split-KV launch, and its empty sequences' rows after it (pa-kit's kernels write
both themselves).

Over 400 lines because it is one class whose planning and launch halves share the cached launch state; the
buffers (``staging``), the checks (``run_guard``, ``validation``) and MLA (``mla``) already live apart.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import torch

from launcher import run_check, validation
from launcher.backends import Backend, Launch, get_backend
from launcher.errors import DefaultOutputReusedWarning
from launcher.features import DecodeFeatures, check_sinks, check_supported, decode_features
from launcher.run_guard import FIRST_POINTER_ARG, RunExpect, check_features, check_rope, check_run
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
    """Paged-attention decode, planned once per step and launched once per layer (docs/API.md).

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

    Decode features (docs/API.md, "Decode features"): ``q_len`` query tokens per sequence (from a 4-D query
    ``[b, q_len, h, d]``, or ``for_engine(q_len=)``; the output has the query's shape), ``window_left`` (-1: no
    window, W >= 0: keys ``p - W .. p``), ``sinks`` (a ``[num_heads]`` float32/float16/bfloat16 tensor;
    ``for_engine`` takes ``sinks_dtype`` and each ``run`` its layer's ``sinks=``) and ``return_lse`` (launches
    return ``(out, lse)``, lse float32 ``[b, (q_len,) h]``).  They are fixed for the runner's life: they size the
    output, the lse buffer and the workspace, and every plan carries them, so an engine whose layers differ (a
    sliding-window layer and a full one, say) keeps one runner per layer kind and updates each per step.  A
    feature the backend's library does not execute (``pa_supported_features``) is refused when the runner is
    built, with a ValueError naming the backend and what to use instead.

    Attributes: ``plan``, ``out`` (this step's rows of the default output), ``lse`` (this step's rows of the
    default lse, or None without ``return_lse``), ``sinks`` (the default sinks, or None), ``features``,
    ``workspace`` (slot -> tensor,
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
        window_left: int = -1, sinks: torch.Tensor | None = None, return_lse: bool = False,
    ) -> None:
        resolved = get_backend(backend, query.device if isinstance(query, torch.Tensor) else torch.device("cpu"))
        shape = validation.check_tensors(query, key_cache, value_cache, block_table,
                                         device_type=resolved.device_type)
        features = decode_features(q_len=shape.q_len, window_left=window_left, return_lse=return_lse,
                                   sinks_dtype=None if sinks is None else check_sinks(
                                       sinks, num_heads=shape.num_heads, device=shape.device).dtype)
        self._bind(resolved, shape, features, {"query": query, "key_cache": key_cache, "value_cache": value_cache,
                                               "block_table": block_table}, context_lens, sinks=sinks, out=out,
                   max_batch=max_batch, max_pages_per_seq=max_pages_per_seq, scale=scale, stream=stream,
                   checked=checked, core_count=core_count, strategy=strategy, batch_invariant=batch_invariant,
                   handoff_tokens=handoff_tokens)

    def _bind(self, backend: Backend, shape: DecodeShape, features: DecodeFeatures, inputs: dict[str, torch.Tensor],
              context_lens: torch.Tensor | Sequence[int], *, sinks: torch.Tensor | None, out: torch.Tensor | None,
              max_batch: int | None, max_pages_per_seq: int | None, **options: Any) -> None:
        """The constructor's work once the tensors are checked: capacity, output, lengths and block ids (before
        any library is loaded), the buffers, and the first step's plan.  ``inputs`` are the checked tensors by
        argument name (``query``, the caches, ``block_table``, and MLA's rope parts)."""
        query, block_table = inputs["query"], inputs["block_table"]
        capacity = Capacity.of(shape, query.dtype, max_batch=max_batch, max_pages_per_seq=max_pages_per_seq)
        if out is not None:
            out = validation.check_out(out, with_batch(shape, capacity.max_batch), query.dtype, inputs)
        lens = validation.check_context_lens(context_lens, shape)
        if backend.device_type == "cpu":
            validation.check_block_ids(block_table, lens, shape, window_left=features.window_left)
        self._setup(capacity, backend, features, out=out, **options)
        self.query = query
        self.key_cache = inputs.get("key_cache", inputs.get("kv_cache"))
        self.value_cache = inputs.get("value_cache", inputs.get("kv_cache"))
        self.query_rope, self.kv_rope_cache = inputs.get("query_rope"), inputs.get("kv_rope_cache")
        self.sinks = sinks
        self.update(context_lens, block_table)

    @classmethod
    def for_engine(
        cls, *, num_heads: int, num_kv_heads: int, head_dim: int, block_size: int, dtype: torch.dtype,
        max_batch: int, max_pages_per_seq: int, num_blocks: int, device: str | torch.device = "cpu",
        scale: float | None = None, backend: str | Backend | None = None, core_count: int | None = None,
        strategy: str = "auto", batch_invariant: bool = False, stream: Any = None, checked: bool = True,
        handoff_tokens: int | None = None, q_len: int = 1, window_left: int = -1,
        sinks_dtype: torch.dtype | None = None, return_lse: bool = False,
    ) -> PagedAttentionRunner:
        """A runner for an engine's decode loop, from sizes alone: call :meth:`update` per step, :meth:`run`
        per layer.  Everything the launches need is allocated here; ``workspace_bytes`` says how much.

        ``q_len`` > 1 makes queries and outputs ``[b, q_len, num_heads, head_dim]`` (1 keeps them 3-D);
        ``sinks_dtype`` (a torch dtype) plans sinks of that type, which each :meth:`run` then takes as
        ``sinks=`` (a layer's own).  These and ``window_left``/``return_lse`` are fixed for the runner's life:
        keep one runner per layer kind (a sliding-window layer and a full one, say)."""
        return cls._unbound(
            device=device, backend=backend, sizes={
                "num_heads": num_heads, "num_kv_heads": num_kv_heads, "head_dim": head_dim, "block_size": block_size,
                "dtype": dtype, "max_batch": max_batch, "max_pages_per_seq": max_pages_per_seq,
                "num_blocks": num_blocks, "q_len": q_len},
            features={"window_left": window_left, "sinks_dtype": sinks_dtype, "return_lse": return_lse},
            scale=scale, stream=stream, checked=checked, core_count=core_count, strategy=strategy,
            batch_invariant=batch_invariant, handoff_tokens=handoff_tokens)

    @classmethod
    def _unbound(cls, *, device: str | torch.device, backend: str | Backend | None, sizes: dict[str, Any],
                 features: dict[str, Any], **options: Any) -> Any:
        """A runner from sizes (``Capacity.for_engine``'s keywords) and feature options, bound to no tensors."""
        dev = torch.device(device)
        resolved = get_backend(backend, dev)
        capacity = Capacity.for_engine(**sizes, device=dev, device_type=resolved.device_type)
        decode = decode_features(q_len=capacity.q_len, rope_dim=capacity.rope_dim, **features)
        runner = cls.__new__(cls)
        runner._setup(capacity, resolved, decode, out=None, **options)
        runner.query = runner.key_cache = runner.value_cache = None
        runner.update([])
        return runner

    def _setup(self, capacity: Capacity, backend: Backend, features: DecodeFeatures, *, scale: float | None,
               out: torch.Tensor | None, stream: Any, checked: bool, core_count: int | None, strategy: str,
               batch_invariant: bool, handoff_tokens: int | None) -> None:
        self.scale = rules.validate_scale(scale, capacity.head_dim)
        rules.validate_option("checked", checked, (True, False))
        rules.validate_core_count(core_count)
        rules.validate_plan_options(strategy=strategy, batch_invariant=batch_invariant,
                                    handoff_tokens=handoff_tokens)
        self.backend, self.capacity, self.features = backend, capacity, features
        self.sinks: torch.Tensor | None = None
        self.library = backend.library
        check_supported(features, self.library, backend.name)
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
                                   handoff_tokens=self.handoff_tokens, out=out, return_lse=features.return_lse)
        self.query_rope: torch.Tensor | None = None
        self.kv_rope_cache: torch.Tensor | None = None
        self.plan: PagedAttentionPlan | None = None
        self._fast = run_check.load()
        self._default_out_warned = False

    # ---- planning (once per decode step, off the launch path) ----------------------------------------------
    def update(self, context_lens: torch.Tensor | Sequence[int], block_table: torch.Tensor | None = None) -> None:
        """Plan the next decode step: ``context_lens`` for ``b`` sequences (``0 <= b <= max_batch``) and their
        block table ``[b, <= max_pages_per_seq]`` int32 (None: keep the rows of the last table given).

        The block table is **copied** into the runner's own table, in order on the launch stream: the caller may
        reuse or change its tensor afterwards, and a later change reaches the kernel only through another
        ``update``.  On a CPU backend the used block ids are checked on the host; on a device no table value is
        read on the host (a device tensor for ``context_lens`` is copied to the host, which synchronises).
        The step is planned with the runner's features: ``context_lens`` counts each sequence's ``q_len`` query
        tokens (0 or at least ``q_len``), and with a window the pages wholly before it may hold any id.
        """
        cap, features = self.capacity, self.features
        lens = validation.lens_to_numpy(context_lens)
        table, rows, cols = self._device.table_rows(block_table, lens.size)
        rules.validate_lengths(lens, block_size=cap.block_size, max_pages=cols, batch=rows)
        rules.validate_query_tokens(lens, features.q_len)
        if self.backend.device_type == "cpu":
            host = table if table is not None else self._device.table[:rows, :cols]
            rules.validate_block_ids(host.detach().cpu().numpy(), lens, block_size=cap.block_size,
                                     num_blocks=cap.num_blocks, q_len=features.q_len,
                                     window_left=features.window_left)
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
            batch_invariant=self.batch_invariant, handoff_tokens=self.handoff_tokens, **features.plan_options(),
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
        self._default_out_taken = False  # whether a run() of this step has written the default output
        full = self._device.out
        self.out = full if batch == full.shape[0] else full[:batch]
        lse = self._device.lse
        self.lse: torch.Tensor | None = lse if lse is None or batch == lse.shape[0] else lse[:batch]
        self.block_table = self._device.table[:batch]
        cap, step = self.capacity, self.capacity.step_shape(batch)
        self._expect = RunExpect.of(self.out, cap.cache_shape, self._device.table, self.lse,
                                    self.features.sinks_torch_dtype,
                                    (step.rope_query_shape, step.rope_cache_shape) if cap.rope_dim else None)
        self._fast_expect = None if self._fast is None else self._fast.make_expect(
            self.out, tuple(self.capacity.cache_shape), self._device.table, _Q_ARG, _K_ARG, _V_ARG, _O_ARG)

    def _build_launch(self, plan: PagedAttentionPlan) -> None:
        dev = self._device
        buffers: dict[ArgSlot, torch.Tensor] = {ArgSlot.BLOCK_TABLES: self.block_table, ArgSlot.O: self.out,
                                                ArgSlot.TILING: dev.tiling, **dev.workspace}
        if self.lse is not None:
            buffers[ArgSlot.LSE] = self.lse
        if self.sinks is not None:
            buffers[ArgSlot.SINKS] = self.sinks
        pointers: list[int | None] = [None] * abi.NUM_PTR_ARGS
        extents = [0] * abi.NUM_PTR_ARGS
        for slot, tensor in buffers.items():
            pointers[slot] = tensor.data_ptr()
            extents[slot] = tensor.numel() * tensor.element_size()
        extents[ArgSlot.Q] = extents[ArgSlot.O]
        sinks_dtype = self.features.sinks_torch_dtype
        if sinks_dtype is not None:  # each run() passes its layer's sinks: the same shape and type
            extents[ArgSlot.SINKS] = self.capacity.num_heads * sinks_dtype.itemsize
        extents[ArgSlot.K] = extents[ArgSlot.V] = self._expect.cache_bytes
        cap = self.capacity
        if cap.rope_dim:  # MLA: the rope parts, R-wide rows beside q's and the latent cache's
            extents[ArgSlot.Q_ROPE] = extents[ArgSlot.O] // cap.head_dim * cap.rope_dim
            extents[ArgSlot.K_ROPE] = self._expect.cache_bytes // cap.head_dim * cap.rope_dim
        bound = self.query is not None and self.query.shape[0] == plan.batch
        if bound:
            assert self.key_cache is not None and self.value_cache is not None
            pointers[ArgSlot.Q] = self.query.data_ptr()
            pointers[ArgSlot.K], pointers[ArgSlot.V] = self.key_cache.data_ptr(), self.value_cache.data_ptr()
            if self.query_rope is not None and self.kv_rope_cache is not None:
                pointers[ArgSlot.Q_ROPE] = self.query_rope.data_ptr()
                pointers[ArgSlot.K_ROPE] = self.kv_rope_cache.data_ptr()
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
    def __call__(self) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Launch the current plan on the tensors the runner was built with; returns ``out``, or ``(out, lse)``
        with ``return_lse``."""
        result = self.out if self.lse is None else (self.out, self.lse)
        if self.plan is None:
            return result
        if self._launch is None:
            raise ValueError(f"runner() launches on the tensors the runner was built with (batch "
                             f"{'none' if self.query is None else self.query.shape[0]}); this step has batch "
                             f"{self.plan.batch}: call run(query, key_cache, value_cache)")
        if self._zero_state is not None:
            self._zero_state()
        self._launch()
        self._zero_empty(self.out)
        return result

    def run(self, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
            out: torch.Tensor | None = None, lse: torch.Tensor | None = None,
            sinks: torch.Tensor | None = None) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Launch this step's plan on one layer's ``query`` ``[b, (q_len,) num_heads, head_dim]`` and caches;
        returns ``out``, or ``(out, lse)`` with ``return_lse`` (a given ``lse`` is float32
        ``[b, (q_len,) num_heads]``).  ``sinks`` (default: the runner's) must have the planned dtype.

        **Pass ``out=`` (and ``lse=``) per layer.**  Without them the result is written into the runner's one
        default output (this step's rows of ``runner.out`` / ``runner.lse``), shared by every layer: the next
        ``run`` overwrites it.  A second such ``run`` in one step warns (:class:`DefaultOutputReusedWarning`,
        once per runner).

        The tensors must have the step's shapes, the runner's dtype and device, be contiguous, and ``out`` and
        ``lse`` must share no memory with the inputs, the block table or each other; a violation raises
        ``TypeError``/``ValueError`` before anything is launched.  Nothing is planned, allocated or copied to
        the host here.
        """
        return self._run(query, key_cache, value_cache, out, lse, sinks, None)

    def _run(self, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, out: torch.Tensor | None,
             lse: torch.Tensor | None, sinks: torch.Tensor | None,
             rope: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """run()'s checks and launch; ``rope`` is MLA's (query_rope, kv_rope_cache), None otherwise."""
        default_out = out is None
        if out is None:
            out = self.out
        if lse is None:
            lse = self.lse
        if sinks is None:
            sinks = self.sinks
        expect, fast = self._expect, self._fast
        if fast is None or not fast.check(self._fast_expect, query, key_cache, value_cache, out, self._run_args):
            check_run(expect, self._run_args, query, key_cache, value_cache, out, lse, sinks)
        elif expect.has_features or lse is not None or sinks is not None:  # the compiled check covers q, k, v, o
            check_features(expect, self._run_args, lse, sinks)
        if rope is not None:
            check_rope(expect, self._run_args, *rope)
        result = out if lse is None else (out, lse)
        if self.plan is None:
            return result
        if default_out:  # counted only for a launch: a refused call wrote nothing
            if self._default_out_taken:
                self._warn_default_out_reused()
            self._default_out_taken = True
        if self._zero_state is not None:
            self._zero_state()
        self._run_launch()
        self._zero_empty(out)
        return result

    def _warn_default_out_reused(self) -> None:
        """Once per runner: a second run() of this step wrote the default output over the first's result (the
        tensor the first returned).  A warning, not an error: a loop that consumes each result before the next
        run() is correct, but one that keeps a list of per-layer outputs would hold N copies of the last."""
        if self._default_out_warned:
            return
        self._default_out_warned = True
        warnings.warn(
            "run() without out= wrote the runner's default output a second time this step: the tensor the previous "
            "run() returned now holds this call's result.  Pass out= (and lse=) per layer, e.g. "
            "runner.run(query, key_cache, value_cache, out=attn_out[layer]); warned once per runner",
            DefaultOutputReusedWarning, stacklevel=4)

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
        heads = f"heads={c.num_heads}, latent={c.head_dim}+rope={c.rope_dim}" if c.rope_dim else \
            f"heads={c.num_heads}/{c.num_kv_heads}, head_dim={c.head_dim}"
        return (f"{type(self).__name__}(batch={self.batch}/{c.max_batch}, {heads}, block_size={c.block_size}, "
                f"{c.dtype_name}, backend={self.backend!r}, {grid})")


def _zeroer(tensors: tuple[torch.Tensor, ...]) -> Launch:
    def zero() -> None:
        for tensor in tensors:
            tensor.zero_()

    return zero
