"""Every bad input is rejected before any launch, with a message naming what was expected and what was given.

The runner is built on a backend whose library path does not exist: a check that ran *after* the library
was loaded (let alone after a launch) would surface as ``KernelLibraryNotFoundError`` instead of the
expected ``ValueError``/``TypeError``, and the test would fail.  The positive controls show the same
inputs, uncorrupted, get past validation (to exactly that library error).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest
import torch

from launcher import PagedAttentionRunner, paged_attention, validation
from launcher.backends import MockBackend
from launcher.errors import KernelLibraryNotFoundError

BATCH, HEADS, KV_HEADS, DIM, BS, BLOCKS, PAGES = 2, 8, 2, 64, 16, 10, 4


@dataclass(frozen=True)
class Inputs:
    query: Any
    key_cache: Any
    value_cache: Any
    block_table: Any
    context_lens: Any
    kwargs: dict[str, Any]


def good(dtype: torch.dtype = torch.float16) -> Inputs:
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(BATCH, HEADS, DIM, generator=gen).to(dtype)
    k = torch.randn(BLOCKS, BS, KV_HEADS, DIM, generator=gen).to(dtype)
    v = torch.randn(BLOCKS, BS, KV_HEADS, DIM, generator=gen).to(dtype)
    table = torch.tensor([[3, 7, -1, -1], [0, 1, 2, 9]], dtype=torch.int32)
    return Inputs(q, k, v, table, [20, 64], {})


def unbuilt_backend() -> MockBackend:
    return MockBackend(library="/nonexistent/pa-kit/libpa_mock.so")


def run(inputs: Inputs) -> None:
    kwargs = {"backend": unbuilt_backend(), **inputs.kwargs}
    PagedAttentionRunner(inputs.query, inputs.key_cache, inputs.value_cache, inputs.block_table,
                         inputs.context_lens, **kwargs)


def shaped(batch: int = BATCH, heads: int = HEADS, kv_heads: int = KV_HEADS, dim: int = DIM, bs: int = BS,
           lens: list[int] | None = None) -> Inputs:
    q = torch.ones(batch, heads, dim, dtype=torch.float16)
    k = torch.ones(BLOCKS, bs, kv_heads, dim, dtype=torch.float16)
    table = torch.zeros(batch, PAGES, dtype=torch.int32)
    return Inputs(q, k, k.clone(), table, lens if lens is not None else [1] * batch, {})


def with_out(make: Callable[[Inputs], torch.Tensor]) -> Callable[[], Inputs]:
    def build() -> Inputs:
        inputs = good()
        return replace(inputs, kwargs={"out": make(inputs)})
    return build


# (id, inputs factory, exception type, substrings the message must contain: what is expected and what was given)
CASES: list[tuple[str, Callable[[], Inputs], type[Exception], tuple[str, ...]]] = [
    ("query-not-tensor", lambda: replace(good(), query=[[1.0]]), TypeError, ("torch.Tensor", "list")),
    ("query-rank", lambda: replace(good(), query=torch.ones(2, 64, dtype=torch.float16)), ValueError,
     ("3-D", "(2, 64)")),
    ("key-rank", lambda: replace(good(), key_cache=torch.ones(10, 16, 128, dtype=torch.float16)), ValueError,
     ("4-D", "(10, 16, 128)")),
    ("query-fp32", lambda: replace(good(), query=good().query.float()), TypeError,
     ("torch.float16 or torch.bfloat16", "torch.float32")),
    ("key-dtype-mismatch", lambda: replace(good(), key_cache=good().key_cache.bfloat16()), TypeError,
     ("torch.float16", "torch.bfloat16")),
    ("value-dtype-mismatch", lambda: replace(good(), value_cache=good().value_cache.bfloat16()), TypeError,
     ("value_cache", "torch.float16", "torch.bfloat16")),
    ("table-int64", lambda: replace(good(), block_table=good().block_table.long()), TypeError,
     ("torch.int32", "torch.int64")),
    ("table-rank", lambda: replace(good(), block_table=good().block_table.flatten()), ValueError,
     ("2-D", "(8,)")),
    ("table-rows", lambda: replace(good(), block_table=good().block_table[:1].contiguous()), ValueError,
     ("2 rows", "got 1")),
    ("value-shape", lambda: replace(good(), value_cache=good().value_cache[:5].contiguous()), ValueError,
     ("(10, 16, 2, 64)", "(5, 16, 2, 64)")),
    ("head-dim-mismatch", lambda: replace(good(), key_cache=torch.ones(10, 16, 2, 32, dtype=torch.float16),
                                          value_cache=torch.ones(10, 16, 2, 32, dtype=torch.float16)),
     ValueError, ("64", "got 32")),
    ("query-non-contiguous",
     lambda: replace(good(), query=torch.ones(2, 64, 8, dtype=torch.float16).transpose(1, 2)), ValueError,
     ("contiguous", "(512, 1, 8)")),
    ("key-non-contiguous", lambda: replace(good(), key_cache=torch.ones(
        10, 2, 16, 64, dtype=torch.float16).transpose(1, 2)), ValueError, ("key_cache must be contiguous",)),
    ("wrong-device-for-backend", lambda: replace(good(), kwargs={"backend": "npu"}), ValueError,
     ("'npu'", "cpu")),
    ("key-on-other-device", lambda: replace(good(), key_cache=good().key_cache.to("meta")), ValueError,
     ("cpu", "meta")),
    ("lens-float-tensor", lambda: replace(good(), context_lens=torch.tensor([1.0, 2.0])), TypeError,
     ("integer dtype", "torch.int64", "torch.float32")),
    ("lens-float-item", lambda: replace(good(), context_lens=[1, 2.5]), TypeError, ("ints", "float 2.5")),
    ("lens-kind", lambda: replace(good(), context_lens="12"), TypeError, ("list of ints", "str")),
    ("lens-count", lambda: replace(good(), context_lens=[1, 2, 3]), ValueError, ("(2)", "got 3")),
    ("lens-negative", lambda: replace(good(), context_lens=[5, -3]), ValueError, (">= 0", "-3", "index 1")),
    ("lens-too-long", lambda: replace(good(), context_lens=[20, 65]), ValueError, ("= 64", "got 65")),
    ("block-id-too-big", lambda: replace(good(), block_table=torch.tensor([[3, 10, -1, -1], [0, 1, 2, 9]],
                                                                          dtype=torch.int32)),
     ValueError, ("[0, 10)", "block_table[0, 1] = 10")),
    ("block-id-negative-in-use", lambda: replace(good(), context_lens=[40, 64]), ValueError,
     ("[0, 10)", "block_table[0, 2] = -1")),
    ("head-dim-unaligned", lambda: shaped(dim=72), ValueError, ("multiple of 16", "got 72")),
    ("head-dim-too-big", lambda: shaped(dim=272), ValueError, ("256]", "got 272")),
    ("block-size", lambda: shaped(bs=48), ValueError, ("(16, 32, 64, 128, 256, 512)", "got 48")),
    ("heads-not-multiple", lambda: shaped(heads=12, kv_heads=8), ValueError, ("multiple", "12 and 8")),
    ("ratio-too-big", lambda: shaped(heads=128, kv_heads=1, dim=16), ValueError, ("<= 64", "128 / 1")),
    ("too-many-heads", lambda: shaped(heads=264, kv_heads=66, dim=16), ValueError, ("[1, 256]", "got 264")),
    ("batch-too-big", lambda: shaped(batch=65536, heads=1, kv_heads=1, dim=16), ValueError,
     ("[0, 65535]", "got 65536")),
    ("out-shape", with_out(lambda i: torch.empty(2, 8, 32, dtype=torch.float16)), ValueError,
     ("(2, 8, 64)", "(2, 8, 32)")),
    ("out-dtype", with_out(lambda i: torch.empty(2, 8, 64, dtype=torch.float32)), TypeError,
     ("torch.float16", "torch.float32")),
    ("out-non-contiguous", with_out(lambda i: torch.empty(2, 64, 8, dtype=torch.float16).transpose(1, 2)),
     ValueError, ("out must be contiguous",)),
    ("out-aliases-query", with_out(lambda i: i.query), ValueError, ("share memory", "query")),
    ("out-aliases-key-cache", with_out(lambda i: i.key_cache.view(-1)[:BATCH * HEADS * DIM].view(
        BATCH, HEADS, DIM)), ValueError, ("share memory", "key_cache")),
    ("out-not-tensor", with_out(lambda i: 3), TypeError, ("torch.Tensor", "int")),
    ("scale-nan", lambda: replace(good(), kwargs={"scale": float("nan")}), ValueError, ("finite", "nan")),
    ("scale-type", lambda: replace(good(), kwargs={"scale": "0.1"}), TypeError, ("float", "str")),
    ("strategy", lambda: replace(good(), kwargs={"strategy": "fast"}), ValueError, ("'split_kv'", "'fast'")),
    ("core-count", lambda: replace(good(), kwargs={"core_count": 0}), ValueError, (">= 1", "got 0")),
    ("checked", lambda: replace(good(), kwargs={"checked": "yes"}), ValueError, ("True", "'yes'")),
    ("backend-name", lambda: replace(good(), kwargs={"backend": "tpu"}), ValueError, ("'mock'", "'tpu'")),
]


@pytest.mark.parametrize(("make", "error", "fragments"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_rejected_before_launch(make: Callable[[], Inputs], error: type[Exception],
                                             fragments: tuple[str, ...]) -> None:
    with pytest.raises(error) as raised:
        run(make())
    message = str(raised.value)
    missing = [fragment for fragment in fragments if fragment not in message]
    assert not missing, f"message {message!r} lacks {missing}"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_positive_control_good_inputs_pass_validation(dtype: torch.dtype) -> None:
    """Junk (-1) past a sequence's last page is fine; validation passes and only the library is missing."""
    with pytest.raises(KernelLibraryNotFoundError, match=r"compile\.sh"):
        run(good(dtype))


def test_positive_control_tensor_lens_and_empty_sequences() -> None:
    inputs = replace(good(), context_lens=torch.tensor([0, 64], dtype=torch.int32),
                     block_table=torch.tensor([[-1, -1, -1, -1], [0, 1, 2, 9]], dtype=torch.int32))
    with pytest.raises(KernelLibraryNotFoundError):
        run(inputs)


def test_functional_validates_too() -> None:
    inputs = good()
    with pytest.raises(ValueError, match=r"got -1 at index 0"):
        paged_attention(inputs.query, inputs.key_cache, inputs.value_cache, inputs.block_table, [-1, 3],
                        backend=unbuilt_backend())


def test_block_ids_past_last_page_are_ignored() -> None:
    inputs = good()
    shape = validation.check_tensors(inputs.query, inputs.key_cache, inputs.value_cache, inputs.block_table,
                                     device_type="cpu")
    junk = torch.tensor([[3, 2**31 - 1, -7, -1], [0, 1, 2, 9]], dtype=torch.int32)
    lens = validation.check_context_lens([16, 64], shape)
    validation.check_block_ids(junk, lens, shape)  # page 1 of sequence 0 is never read
    with pytest.raises(ValueError, match=r"block_table\[0, 1\] = 2147483647"):
        validation.check_block_ids(junk, validation.check_context_lens([17, 64], shape), shape)


def test_missing_library_names_the_build_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    from launcher.library import library_path, load_library

    monkeypatch.setenv("PA_KIT_LIB_DIR", str(tmp_path))
    assert library_path("mock") == tmp_path / "libpa_mock.so"
    with pytest.raises(KernelLibraryNotFoundError) as raised:
        load_library(library_path("mock"))
    assert "bash compile.sh" in str(raised.value) and "PA_KIT_LIB_DIR" in str(raised.value)
