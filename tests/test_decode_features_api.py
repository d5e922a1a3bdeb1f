"""The public API of the decode features (several query tokens, a window, sinks, the lse): validation and plumbing.

* every bad feature input is a ValueError/TypeError naming what was expected and what was given, raised before
  any library is loaded (the runner is built on a backend whose library does not exist: a later check would
  surface as ``KernelLibraryNotFoundError``), and the same through every door that takes it;
* ``Library.supported_features`` reads ``pa_supported_features`` (0 without it), and a feature the library lacks
  is refused at construction, naming the backend, the feature and what to use instead;
* the shapes and pointers: on the npu backend with a fake kernel library (CPU tensors standing in), the output
  has the query's shape, the lse ``[b, (q_len,) h]`` float32, and the kernel gets the sinks and lse pointers
  with the contract's extents; a bad lse or sinks at ``run()`` raises before any launch, on both of run()'s
  check paths, and run() allocates nothing.

The numbers themselves are compared with the float64 golden in ``test_decode_features_e2e.py``.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import test_npu_backend as npu
import torch
from test_runner_engine import _OnlyInPlace

from launcher import PagedAttentionRunner, paged_attention, run_check
from launcher.backends import MockBackend, SimBackend
from launcher.errors import KernelLibraryNotFoundError
from launcher.library import load_library
from tiling import abi, plan_paged_attention

HEADS, KV_HEADS, DIM, BS, BLOCKS, PAGES = 8, 2, 64, 16, 10, 4
FEATURES_EXPORT = ("\n#ifdef FAKE_FEATURES\nuint32_t pa_supported_features(void) { return FAKE_FEATURES; }\n#endif\n"
                   "#ifdef FAKE_DEVICE_PATH\nint32_t pa_sim_device_path(void) { return FAKE_DEVICE_PATH; }\n#endif\n")


def _query(q_len: int | None, batch: int = 2) -> torch.Tensor:
    gen = torch.Generator().manual_seed(q_len or 0)
    shape = (batch, HEADS, DIM) if q_len is None else (batch, q_len, HEADS, DIM)
    return torch.randn(shape, generator=gen).half()


def _tensors(q_len: int | None = None, lens: list[int] | None = None) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(1)
    cache = torch.randn(BLOCKS, BS, KV_HEADS, DIM, generator=gen).half()
    return {"query": _query(q_len), "key_cache": cache, "value_cache": cache.clone(),
            "block_table": torch.tensor([[3, 7, -1, -1], [0, 1, 2, 9]], dtype=torch.int32),
            "context_lens": lens if lens is not None else [20, 64]}


def _unbuilt() -> MockBackend:
    return MockBackend(library="/nonexistent/pa-kit/libpa_mock.so")


def _construct(tensors: dict[str, Any], **options: Any) -> PagedAttentionRunner:
    return PagedAttentionRunner(*tensors.values(), **{"backend": _unbuilt(), **options})


def _engine(**options: Any) -> PagedAttentionRunner:
    return PagedAttentionRunner.for_engine(num_heads=HEADS, num_kv_heads=KV_HEADS, head_dim=DIM, block_size=BS,
                                           dtype=torch.float16, max_batch=4, max_pages_per_seq=PAGES,
                                           num_blocks=BLOCKS, **{"backend": _unbuilt(), **options})


# ---- validation, before any library is loaded -------------------------------------------------------------

SINKS = torch.zeros(HEADS)
# (id, constructor tensors, constructor options, exception, substrings: what is expected and what was given)
CASES: list[tuple[str, dict[str, Any], dict[str, Any], type[Exception], tuple[str, ...]]] = [
    ("window below -1", _tensors(), {"window_left": -2}, ValueError, ("-1 (no window) or >= 0", "got -2")),
    ("window float", _tensors(), {"window_left": 1.5}, TypeError, ("window_left must be an int", "float")),
    ("window bool", _tensors(), {"window_left": True}, TypeError, ("window_left must be an int", "bool")),
    ("sinks not a tensor", _tensors(), {"sinks": [0.0] * HEADS}, TypeError, ("torch.Tensor", "list")),
    ("sinks one too many", _tensors(), {"sinks": torch.zeros(HEADS + 1)}, ValueError, ("(8,)", "(9,)")),
    ("sinks 2-D", _tensors(), {"sinks": torch.zeros(1, HEADS)}, ValueError, ("[num_heads]", "(1, 8)")),
    ("sinks int32", _tensors(), {"sinks": torch.zeros(HEADS, dtype=torch.int32)}, TypeError,
     ("float32, float16 or bfloat16", "torch.int32")),
    ("sinks float64", _tensors(), {"sinks": torch.zeros(HEADS, dtype=torch.float64)}, TypeError,
     ("float32, float16 or bfloat16", "torch.float64")),
    ("sinks on meta", _tensors(), {"sinks": torch.zeros(HEADS, device="meta")}, ValueError, ("cpu", "meta")),
    ("sinks strided", _tensors(), {"sinks": torch.zeros(2 * HEADS)[::2]}, ValueError, ("contiguous", "(2,)")),
    ("q_len above 16", _tensors(q_len=17, lens=[20, 64]), {}, ValueError, ("[1, 16]", "got 17")),
    ("q_len 0", _tensors(q_len=0), {}, ValueError, ("[1, 16]", "got 0")),
    ("context shorter than q_len", _tensors(q_len=4, lens=[3, 64]), {}, ValueError,
     ("q_len=4", "0 (an empty row) or >= 4", "got 3 at index 0")),
    ("return_lse kind", _tensors(), {"return_lse": 1}, ValueError, ("return_lse", "[True, False]", "got 1")),
    ("query 5-D", {**_tensors(), "query": torch.zeros(2, 1, 1, HEADS, DIM).half()}, {}, ValueError,
     ("3-D", "4-D [batch, q_len, num_heads, head_dim]", "(2, 1, 1, 8, 64)")),
    ("3-D out for a 4-D query", _tensors(q_len=2), {"out": torch.zeros(2, HEADS, DIM).half()}, ValueError,
     ("(2, 2, 8, 64) [batch, q_len, num_heads, head_dim]", "got (2, 8, 64)")),
    ("page before the window without one", {**_tensors(), "block_table": torch.tensor(
        [[3, 7, -1, -1], [-1, -1, -1, 9]], dtype=torch.int32)}, {}, ValueError, ("block_table[1, 0] = -1",)),
]


@pytest.mark.parametrize(("name", "tensors", "options", "error", "needles"), CASES, ids=[c[0] for c in CASES])
def test_bad_feature_input_is_refused_before_any_library_loads(
        name: str, tensors: dict[str, Any], options: dict[str, Any], error: type[Exception],
        needles: tuple[str, ...]) -> None:
    with pytest.raises(error) as info:
        _construct(tensors, **options)
    for needle in needles:
        assert needle in str(info.value), f"{name}: {needle!r} not in {info.value}"


ENGINE_CASES: list[tuple[str, dict[str, Any], type[Exception], str]] = [
    ("q_len above 16", {"q_len": 17}, ValueError, r"\[1, 16\].*got 17"),
    ("q_len kind", {"q_len": "2"}, TypeError, "q_len must be an int, got str"),
    ("window below -1", {"window_left": -5}, ValueError, "got -5"),
    ("sinks_dtype int", {"sinks_dtype": torch.int32}, TypeError, "float32, float16 or bfloat16.*torch.int32"),
    ("sinks_dtype float64", {"sinks_dtype": torch.float64}, TypeError, "torch.float64"),
    ("return_lse kind", {"return_lse": "yes"}, ValueError, "return_lse must be one of"),
]


@pytest.mark.parametrize(("name", "options", "error", "match"), ENGINE_CASES, ids=[c[0] for c in ENGINE_CASES])
def test_for_engine_refuses_bad_features(name: str, options: dict[str, Any], error: type[Exception],
                                         match: str) -> None:
    with pytest.raises(error, match=match):
        _engine(**options)


@pytest.mark.parametrize("options", [
    {}, {"window_left": 3}, {"window_left": 0, "return_lse": True}, {"sinks": torch.zeros(HEADS).bfloat16()},
    {"sinks": torch.zeros(HEADS).half(), "return_lse": True}])
@pytest.mark.parametrize("q_len", [None, 1, 4, 16])
def test_good_feature_inputs_get_past_validation(options: dict[str, Any], q_len: int | None) -> None:
    """Positive controls: valid inputs reach the library load (the page before the window may hold -1)."""
    tensors = _tensors(q_len=q_len, lens=[20, 64] if q_len is None else [0, 64])
    if options.get("window_left") == 3:  # sequence 1's pages wholly before every token's window: freed
        first = abi.kv_first_token(64, q_len or 1, 3, BS) // BS
        tensors["block_table"][1, :first] = -1
    with pytest.raises(KernelLibraryNotFoundError):
        _construct(tensors, **options)
    with pytest.raises(KernelLibraryNotFoundError):
        _engine(q_len=q_len or 1, **{k: v for k, v in options.items() if k != "sinks"},
                sinks_dtype=options["sinks"].dtype if "sinks" in options else None)


def _planner(tensors: dict[str, Any], **options: Any) -> object:
    query = tensors["query"]
    return plan_paged_attention(tensors["context_lens"], num_heads=HEADS, num_kv_heads=KV_HEADS, head_dim=DIM,
                                block_size=BS, max_pages=PAGES, num_blocks=BLOCKS, scale=0.125,
                                q_len=1 if query.dim() == 3 else query.shape[1], **options)


DOORS: dict[str, Callable[[dict[str, Any], dict[str, Any]], object]] = {
    "paged_attention": lambda t, o: paged_attention(*t.values(), backend=_unbuilt(), **o),
    "constructor": lambda t, o: _construct(t, **o),
    "for_engine": lambda t, o: _engine(q_len=1 if t["query"].dim() == 3 else t["query"].shape[1], **o),
    "planner": lambda t, o: _planner(t, **o),
}


@pytest.mark.parametrize(("tensors", "options", "doors"), [
    (_tensors(), {"window_left": -2}, ("paged_attention", "constructor", "for_engine", "planner")),
    (_tensors(), {"window_left": 2.0}, ("paged_attention", "constructor", "for_engine", "planner")),
    (_tensors(q_len=17), {}, ("paged_attention", "constructor", "for_engine", "planner")),
    (_tensors(q_len=4, lens=[64, 2]), {}, ("paged_attention", "constructor", "planner")),
    (_tensors(), {"return_lse": 2}, ("paged_attention", "constructor", "for_engine", "planner")),
], ids=["window", "window kind", "q_len", "context shorter than q_len", "return_lse"])
def test_every_door_gives_the_same_feature_error(tensors: dict[str, Any], options: dict[str, Any],
                                                 doors: tuple[str, ...]) -> None:
    failures = {}
    for door in doors:
        with pytest.raises((TypeError, ValueError)) as info:
            DOORS[door](tensors, options)
        failures[door] = (info.type, str(info.value))
    assert len(set(failures.values())) == 1, failures


# ---- what a library executes ------------------------------------------------------------------------------


def _build(directory: Path, name: str, *flags: str) -> Path:
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        pytest.skip("no C compiler to build the fake kernel libraries")
    source = directory / f"{name}.c"
    source.write_text(npu.FAKE_KERNEL_C + FEATURES_EXPORT)
    target = directory / name
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", f"-DFAKE_ABI_VERSION={abi.ABI_VERSION}", *flags,
                    str(source), "-o", str(target)], check=True)
    return target


@pytest.fixture(scope="module")
def fakes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Fake kernel libraries: ours with every feature, with none (the symbol missing), with two, and ATB's; two
    that call themselves the sim library, one the device path and one not."""
    directory = tmp_path_factory.mktemp("fake_feature_kernels")
    return {"all": _build(directory, "libfake_all.so", "-DOURS", f"-DFAKE_FEATURES={abi.FEATURES_ALL}"),
            "none": _build(directory, "libfake_none.so", "-DOURS"),
            "window+lse": _build(directory, "libfake_wl.so", "-DOURS", "-DFAKE_FEATURES=10"),
            "sim none": _build(directory, "libfake_sim_none.so", "-DOURS", "-DFAKE_DEVICE_PATH=1"),
            "sim cpu": _build(directory, "libfake_sim_cpu.so", "-DOURS", "-DFAKE_DEVICE_PATH=0"),
            "external": _build(directory, "libfake_atb.so")}


def test_supported_features_reads_the_export(fakes: dict[str, Path]) -> None:
    assert load_library(fakes["all"]).supported_features == abi.FEATURES_ALL
    assert load_library(fakes["window+lse"]).supported_features == abi.Feature.WINDOW | abi.Feature.LSE
    assert load_library(fakes["none"]).supported_features == 0  # no pa_supported_features: none
    assert load_library(fakes["external"]).supported_features == 0


@pytest.fixture
def fake_npu(monkeypatch: pytest.MonkeyPatch) -> npu.FakeNpu:
    """``torch.npu`` and ``torch_npu`` faked, as ``test_npu_backend`` does, for the npu backend on CPU tensors."""
    fake = npu.FakeNpu()
    monkeypatch.setitem(sys.modules, "torch_npu", types.ModuleType("torch_npu"))
    monkeypatch.setattr(torch, "npu", fake, raising=False)
    return fake


def _runner(library: Path, q_len: int | None = None, backend: Any = None, **options: Any) -> PagedAttentionRunner:
    tensors = _tensors(q_len=q_len, lens=[20, 64] if q_len is None else [q_len, 64])
    return PagedAttentionRunner(*tensors.values(), backend=backend or npu.CpuStandInNpuBackend(library), **options)


REFUSALS = [
    ({"window_left": 3}, "window_left"), ({"sinks": SINKS}, "sinks"), ({"return_lse": True}, "return_lse"),
    ({"q_len": 2}, "a query of q_len > 1 tokens"),
]


@pytest.mark.parametrize(("options", "feature"), REFUSALS, ids=[r[1] for r in REFUSALS])
def test_a_feature_the_library_lacks_is_refused_naming_backend_feature_and_remedy(
        fake_npu: npu.FakeNpu, fakes: dict[str, Path], options: dict[str, Any], feature: str) -> None:
    q_len, options = options.get("q_len"), {k: v for k, v in options.items() if k != "q_len"}
    expected = {
        "sim": (SimBackend(fakes["sim none"]),
                f"the sim backend's kernel does not execute {feature} yet (the NPU kernel follows in a later issue): "
                "use backend='mock'"),
        "npu": (npu.CpuStandInNpuBackend(fakes["none"]), "use backend='mock' with CPU tensors"),
        "external": (npu.CpuStandInNpuBackend(fakes["external"]), "external ATB-ABI kernel"),
        "old mock": (MockBackend(fakes["none"]), "rebuild it with `bash compile.sh`"),
    }
    for what, (backend, message) in expected.items():
        with pytest.raises(ValueError) as info:
            _runner(fakes["none"], q_len, backend=backend, **options)
        assert message in str(info.value) and feature in str(info.value), f"{what}: {info.value}"
        assert f"the {backend.name} backend's kernel" in str(info.value), what
    with pytest.raises(ValueError, match="does not execute window_left, sinks yet"):  # every missing one named
        _runner(fakes["none"], window_left=1, sinks=SINKS)
    _runner(fakes["none"])  # positive control: no feature asked, none needed


def test_the_sim_backend_refuses_a_library_that_is_not_the_device_path(fakes: dict[str, Path]) -> None:
    assert SimBackend(fakes["sim none"]).library.path == fakes["sim none"]  # positive control
    for name, says in (("none", "does not export pa_sim_device_path()"), ("sim cpu", "pa_sim_device_path() = 0")):
        with pytest.raises(RuntimeError) as info:
            _ = SimBackend(fakes[name]).library
        assert says in str(info.value) and str(fakes[name]) in str(info.value), info.value


def test_a_partial_library_executes_what_it_says(fake_npu: npu.FakeNpu, fakes: dict[str, Path]) -> None:
    _runner(fakes["window+lse"], window_left=5, return_lse=True)
    with pytest.raises(ValueError, match="does not execute sinks yet"):
        _runner(fakes["window+lse"], window_left=5, sinks=SINKS)
    with pytest.raises(ValueError, match="does not execute a query of q_len > 1 tokens yet"):
        _runner(fakes["window+lse"], q_len=3)
    runner = _runner(fakes["window+lse"], q_len=1)  # a 4-D query of one token is no multi-token feature
    assert runner.out.shape == (2, 1, HEADS, DIM)


# ---- shapes, pointers and run()'s checks on a fake kernel ---------------------------------------------------


def _engine_on(library: Path, **options: Any) -> PagedAttentionRunner:
    return PagedAttentionRunner.for_engine(
        num_heads=HEADS, num_kv_heads=KV_HEADS, head_dim=DIM, block_size=BS, dtype=torch.float16, max_batch=4,
        max_pages_per_seq=PAGES, num_blocks=BLOCKS, backend=npu.CpuStandInNpuBackend(library), **options)


@pytest.mark.parametrize(("q_len", "sinks_dtype"), [(None, torch.float32), (1, torch.bfloat16),
                                                     (4, torch.float16), (16, None)])
def test_shapes_plan_and_pointers(fake_npu: npu.FakeNpu, fakes: dict[str, Path], q_len: int | None,
                                  sinks_dtype: torch.dtype | None) -> None:
    sinks = None if sinks_dtype is None else torch.randn(HEADS).to(sinks_dtype)
    runner = _runner(fakes["all"], q_len, window_left=7, sinks=sinks, return_lse=True)
    tokens = () if q_len is None else (q_len,)
    out, lse = runner()
    assert out is runner.out and lse is runner.lse
    assert out.shape == (2, *tokens, HEADS, DIM) and lse.shape == (2, *tokens, HEADS) and lse.dtype == torch.float32
    plan = runner.plan
    assert plan is not None
    assert (plan.q_len, plan.window_left, plan.return_lse) == (q_len or 1, 7, True)
    assert plan.sinks_dtype == {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", None: None}[
        sinks_dtype]
    rows = 2 * (q_len or 1) * HEADS
    extents = runner.extents
    assert extents[abi.ArgSlot.Q] == extents[abi.ArgSlot.O] == rows * DIM * 2
    assert extents[abi.ArgSlot.LSE] == rows * 4
    assert extents[abi.ArgSlot.SINKS] == (0 if sinks is None else HEADS * sinks.element_size())
    lib = npu.handle(fakes["all"])
    assert lib.fake_ptr(int(abi.ArgSlot.LSE)) == lse.data_ptr()
    assert lib.fake_ptr(int(abi.ArgSlot.SINKS)) == (None if sinks is None else sinks.data_ptr())


def test_run_takes_lse_and_sinks_per_layer(fake_npu: npu.FakeNpu, fakes: dict[str, Path], check_path: str) -> None:
    runner = _engine_on(fakes["all"], q_len=4, window_left=7, sinks_dtype=torch.bfloat16, return_lse=True)
    assert runner.out.shape == (0, 4, HEADS, DIM) and runner.lse is not None and runner.lse.shape == (0, 4, HEADS)
    assert runner.capacity.query_shape(4) == (4, 4, HEADS, DIM)
    tensors = _tensors(q_len=4, lens=[0, 64])
    with pytest.raises(ValueError, match="q_len=4"):
        runner.update([3, 64], tensors["block_table"])
    runner.update([64], tensors["block_table"][1:])
    lse_storage = runner.lse.data_ptr()
    runner.update([0, 64], tensors["block_table"])
    assert runner.lse.shape == (2, 4, HEADS) and runner.lse.data_ptr() == lse_storage  # a view, never moved
    q, k, v = tensors["query"], tensors["key_cache"], tensors["value_cache"]
    lib = npu.handle(fakes["all"])
    for layer in range(2):
        sinks = torch.full((HEADS,), float(layer)).bfloat16()
        out, lse = torch.empty_like(q), torch.empty(2, 4, HEADS)
        assert runner.run(q, k, v, out=out, lse=lse, sinks=sinks) == (out, lse)
        assert lib.fake_ptr(int(abi.ArgSlot.SINKS)) == sinks.data_ptr()
        assert lib.fake_ptr(int(abi.ArgSlot.LSE)) == lse.data_ptr()
        assert lib.fake_ptr(int(abi.ArgSlot.O)) == out.data_ptr()
    result = runner.run(q, k, v, sinks=sinks)
    assert result[0] is runner.out and result[1] is runner.lse
    with _OnlyInPlace():  # the launch path allocates nothing, lse and sinks included
        runner.run(q, k, v, sinks=sinks)
    runner.update([])
    empty = runner.run(q[:0], k, v, sinks=sinks)
    assert empty[0].shape == (0, 4, HEADS, DIM) and empty[1].shape == (0, 4, HEADS)


def _bad_runs(q: torch.Tensor, k: torch.Tensor, out: torch.Tensor,
              lse: torch.Tensor) -> list[tuple[str, dict[str, Any], type[Exception], str]]:
    sinks_in_out = out.view(-1)[:HEADS].view(torch.bfloat16)
    sinks_in_lse = lse.view(-1)[:HEADS // 2].view(torch.bfloat16)
    return [
        ("3-D query", {"query": q[:, 0].contiguous()}, ValueError, "query shape must be the planned"),
        ("out of another q_len", {"out": out[:, :2].contiguous()}, ValueError, "out shape must be the planned"),
        ("out over the key cache", {"out": k.view(-1)[:out.numel()].view(out.shape)}, ValueError,
         "out must not share memory with key_cache"),
        ("lse shape", {"lse": lse[:, :2].contiguous()}, ValueError, r"lse shape must be the planned \(2, 4, 8\)"),
        ("lse dtype", {"lse": lse.half()}, TypeError, "lse dtype must be the planned torch.float32, got torch.float16"),
        ("lse device", {"lse": lse.to("meta")}, ValueError, "lse must be on the planned device"),
        ("lse strided", {"lse": lse.transpose(1, 2).contiguous().transpose(1, 2)}, ValueError, "lse must be contig"),
        ("lse not a tensor", {"lse": lse.tolist()}, TypeError, "lse must be a torch.Tensor"),
        ("lse inside out", {"lse": out.view(-1).view(torch.float32)[:lse.numel()].view(lse.shape)}, ValueError,
         "lse must not share memory with out"),
        ("lse inside the query", {"lse": q.view(-1).view(torch.float32)[:lse.numel()].view(lse.shape)},
         ValueError, "lse must not share memory with query"),
        ("sinks inside out", {"sinks": sinks_in_out}, ValueError, "out must not share memory with sinks"),
        ("sinks inside lse", {"sinks": sinks_in_lse}, ValueError, "lse must not share memory with sinks"),
        ("sinks dtype", {"sinks": torch.zeros(HEADS)}, TypeError, "sinks dtype must be the planned torch.bfloat16"),
        ("sinks shape", {"sinks": torch.zeros(HEADS + 1).bfloat16()}, ValueError, r"sinks shape .* \(8,\)"),
        ("sinks missing", {"sinks": None}, ValueError, "planned with torch.bfloat16 sinks .* pass sinks="),
    ]


def test_bad_lse_or_sinks_raise_before_any_launch(fake_npu: npu.FakeNpu, fakes: dict[str, Path],
                                                  check_path: str) -> None:
    runner = _engine_on(fakes["all"], q_len=4, sinks_dtype=torch.bfloat16, return_lse=True)
    tensors = _tensors(q_len=4, lens=[4, 64])
    runner.update(tensors["context_lens"], tensors["block_table"])
    q, k, v = tensors["query"], tensors["key_cache"], tensors["value_cache"]
    out, lse, sinks = torch.full_like(q, math.nan), torch.full((2, 4, HEADS), math.nan), torch.zeros(HEADS).bfloat16()
    lib = npu.handle(fakes["all"])
    calls = lib.fake_calls()
    for what, change, error, message in _bad_runs(q, k, out, lse):
        call: dict[str, Any] = {"query": q, "key_cache": k, "value_cache": v, "out": out, "lse": lse,
                                "sinks": sinks, **change}
        with pytest.raises(error, match=message):
            runner.run(**call)
        assert lib.fake_calls() == calls, f"{what}: launched"
    assert torch.isnan(out.float()).all() and torch.isnan(lse).all()
    runner.run(q, k, v, out=out, lse=lse, sinks=sinks)  # positive control: the counter counts
    assert lib.fake_calls() == calls + 1


def test_lse_and_sinks_are_refused_where_the_runner_has_none(fake_npu: npu.FakeNpu, fakes: dict[str, Path],
                                                              check_path: str) -> None:
    runner = _runner(fakes["all"], 2)
    q, k, v = runner.query, runner.key_cache, runner.value_cache
    assert runner.lse is None and isinstance(runner(), torch.Tensor)
    with pytest.raises(ValueError, match="lse= is for a runner built with return_lse=True"):
        runner.run(q, k, v, lse=torch.empty(2, 2, HEADS))
    with pytest.raises(ValueError, match="sinks= is for a runner planned with sinks"):
        runner.run(q, k, v, sinks=torch.zeros(HEADS))
    assert runner.run(q, k, v) is runner.out


def test_compiled_check_covers_4d_queries(fake_npu: npu.FakeNpu, fakes: dict[str, Path], check_path: str) -> None:
    """The compiled check compares with the planned shape whatever its rank: "look again" on a bad 4-D call."""
    module = run_check.load()
    if module is None:
        pytest.skip("the Python-checks run of this test has nothing to check")
    runner = _runner(fakes["all"], 4)
    q, k, v = runner.query, runner.key_cache, runner.value_cache
    args = runner._run_args
    strided = q.transpose(1, 2).contiguous().transpose(1, 2)
    bad = [(q[:, 0].contiguous(), runner.out), (q, runner.out[:, :3].contiguous()), (q[:, :3].contiguous(), runner.out),
           (strided, runner.out)]
    for query, out in bad:
        assert module.check(runner._fast_expect, query, k, v, out, args) is False
    assert module.check(runner._fast_expect, q, k, v, torch.empty_like(q), args) is True
