"""The benchmark's MLA side: the ``mla`` shapes, their roofline on an A2, the peers that compute absorbed MLA, and
CANN's FIA in its MLA mode as the fake ``torch_npu`` models it (``fake_fia_mla.py``).

The fake computes what the real operator would from the arguments it receives, so a call vLLM-Ascend's way
passes the float64 golden (``accuracy.reference.mla_reference``) and a call that means something else fails it;
each documented limit, broken alone, is refused.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch
from fake_fia_mla import V2, check_fia_mla
from fake_torch_npu import fake_torch_npu

from accuracy.reference import compare
from benchmark import report
from benchmark.applicability import NotApplicableError
from benchmark.baselines import golden, lse_error, prepare_baseline, split_result
from benchmark.npu_peers import (
    fia_mla_arguments,
    fia_mla_result,
    fia_v2_mla_arguments,
    prepare_fia,
    prepare_fia_v2,
    prepare_ifa,
)
from benchmark.plot import shape_label
from benchmark.roofline import A2, COMPUTE_BOUND, MEMORY_BOUND, roofline
from benchmark.suite import SuiteOptions, make_runner
from benchmark.timing import TimingPolicy
from workloads import bytes_model, shapes
from workloads.cases import BenchCase, build_case

REPO = Path(__file__).resolve().parent.parent
Calls = list[tuple[str, tuple[Any, ...], dict[str, Any]]]
QUICK = TimingPolicy(warmup=0, min_iters=1, max_iters=2, budget_ms=20.0, l2_flush=False)


def _case(heads: int = 16, q_len: int = 1, lens: tuple[int, ...] = (300, 129, 5), dtype: str = "bf16",
          block_size: int = 16, lse: bool = False) -> BenchCase:
    shape = shapes.mla_shape(len(lens), max(lens), num_heads=heads, q_len=q_len, dtype=dtype,
                             block_size=block_size, lse=lse, seed=3)
    return build_case(dataclasses.replace(shape, context_lens=lens))


def _passes(out: torch.Tensor, case: BenchCase) -> bool:
    return compare(out.reshape(case.query.shape), golden(case)).passed


def _fia(kw: dict[str, Any]) -> torch.Tensor:
    return fake_torch_npu([]).npu_fused_infer_attention_score(**kw)[0]


def _fia_in_query_layout(kw: dict[str, Any], case: BenchCase) -> torch.Tensor:
    """A vLLM-Ascend-layout call's output (NBSD or NTD) in the query's layout."""
    return fia_mla_result(case, fake_torch_npu([]).npu_fused_infer_attention_score(**kw))


# ---- FIA's MLA mode, called as vLLM-Ascend calls it --------------------------------------------------------


@pytest.mark.parametrize(("heads", "q_len", "lens", "dtype"), [
    (16, 1, (300, 129, 5), "bf16"), (128, 1, (300, 0, 17), "fp16"), (32, 2, (300, 129, 5), "bf16"),
    (128, 2, (64, 2), "fp16"),
])
def test_fake_fia_mla_as_vllm_ascend_calls_it_passes_the_golden(heads: int, q_len: int, lens: tuple[int, ...],
                                                                 dtype: str) -> None:
    case = _case(heads, q_len, lens, dtype)
    calls: Calls = []
    out = prepare_fia(case, fake_torch_npu(calls))()
    (name, args, kw), = calls
    assert name == "fia" and args == () and kw["num_key_value_heads"] == 1 and kw["antiquant_mode"] == 0
    assert kw["input_layout"] == ("BNSD_NBSD" if q_len == 1 else "TND_NTD")
    assert kw["sparse_mode"] == (0 if q_len == 1 else 3) and kw["actual_seq_lengths_kv"] == list(lens)
    assert kw["key"] is kw["value"] and kw["key"].data_ptr() == case.key_cache.data_ptr()  # views, no copy
    assert tuple(out.shape) == tuple(case.query.shape) and _passes(out, case)


@pytest.mark.parametrize("layout", ["BSH", "BSND", "BNSD", "BSH_NBSD", "BSND_NBSD", "TND"])
def test_fake_fia_mla_lays_out_every_documented_layout(layout: str) -> None:
    """One token per sequence in each other layout the MLA section lists: the output, read back in that layout,
    passes the golden (so the fake's layout handling is not one the vLLM call alone exercises)."""
    case = _case(16)
    kw = fia_mla_arguments(case)
    b, n = case.shape.batch, case.shape.num_heads
    query_in = layout.split("_")[0]
    shaped = {"BSH": (b, 1, -1), "BSND": (b, 1, n, -1), "BNSD": (b, n, 1, -1), "TND": (b, n, -1)}[query_in]
    kw.update(input_layout=layout, query=case.query.view(shaped), query_rope=case.query_rope.view(shaped))
    if query_in in ("BSH", "BSND"):  # these query layouts take the cache as [num_blocks, block_size, H] only
        kw.update(key=case.key_cache.flatten(2), value=case.key_cache.flatten(2),
                  key_rope=case.kv_rope_cache.flatten(2))
    if query_in == "TND":
        kw["actual_seq_lengths"] = list(range(1, b + 1))
    out = _fia(kw)
    back = {"BSH": lambda t: t.view(b, n, -1), "BSND": lambda t: t.view(b, n, -1),
            "BNSD": lambda t: t.view(b, n, -1), "NBSD": lambda t: t.squeeze(2).transpose(0, 1),
            "TND": lambda t: t}[layout.split("_")[-1]]
    assert _passes(back(out), case)


def test_fake_fia_mla_computes_what_it_is_given() -> None:
    """Calls that pass the rules but mean something else fail the golden: KV lengths without the query tokens,
    another scale, the rope pages shuffled, the rope cache left out of the score."""
    case = _case(32, q_len=2)
    kw = fia_mla_arguments(case)
    assert _passes(_fia_in_query_layout(kw, case), case)
    wrong = {
        "KV lengths without the query tokens": {"actual_seq_lengths_kv": [n - 2 for n in case.shape.context_lens]},
        "1/sqrt(512) scale": {"scale": 512 ** -0.5},
        "rope pages of other blocks": {"key_rope": kw["key_rope"].roll(1, dims=0)},
        "zero rope": {"key_rope": torch.zeros_like(kw["key_rope"])},
    }
    for what, change in wrong.items():
        assert not _passes(_fia_in_query_layout({**kw, **change}, case), case), what


def _refused(kw: dict[str, Any], case: BenchCase) -> dict[str, tuple[dict[str, Any], str]]:
    """Each documented limit of the MLA mode broken alone: (change, words of the refusal)."""
    b, n = case.shape.batch, case.shape.num_heads
    zeros = {"dtype": torch.bfloat16}
    tnd_q = torch.zeros(b * 2, n, 512, **zeros)
    tnd_r = torch.zeros(b * 2, n, 64, **zeros)
    return {
        "query_rope alone": ({"key_rope": None}, "together"),
        "fp32 query_rope": ({"query_rope": kw["query_rope"].float()}, "dtype"),
        "non-contiguous query": ({"query": torch.zeros(b, n, 1, 1024, **zeros)[..., ::2]}, "contiguous"),
        "softmax_lse": ({"softmax_lse_flag": True}, "softmax_lse"),
        "pseudo-quantisation": ({"antiquant_scale": torch.ones(2, 1, 512)}, "pseudo-quantisation"),
        "pse": ({"pse_shift": torch.zeros(1)}, "pse"),
        "left padding": ({"kv_padding_size": torch.zeros(1, dtype=torch.int64)}, "left padding"),
        "prefix": ({"key_shared_prefix": torch.zeros(1)}, "prefix"),
        "post-quantisation": ({"quant_scale2": torch.ones(1)}, "post-quantisation"),
        "sparse_mode 1": ({"sparse_mode": 1}, "sparse_mode must be one of"),
        "causal without its mask": ({"sparse_mode": 3}, "causal atten_mask"),
        "two KV heads": ({"num_key_value_heads": 2}, "num_key_value_heads"),
        "24 heads": ({"query": torch.zeros(b, 24, 1, 512, **zeros), "query_rope": torch.zeros(b, 24, 1, 64, **zeros),
                      "num_heads": 24}, "num_heads must be one of"),
        "num_heads not the query's": ({"num_heads": 2 * n}, "N = num_heads"),
        "NTD_TND": ({"input_layout": "NTD_TND"}, "input_layout"),
        "query D 256": ({"query": torch.zeros(b, n, 1, 256, **zeros)}, "query D"),
        "rope D 32": ({"query_rope": torch.zeros(b, n, 1, 32, **zeros)}, "N = num_heads = 16 and D = 64"),
        "no block table": ({"block_table": None}, "PageAttention"),
        "int64 block table": ({"block_table": kw["block_table"].long()}, "PageAttention"),
        "block_size not the cache's": ({"block_size": 32}, "block_size=32"),
        "pages of 24": ({"key": torch.zeros(40, 1, 24, 512, **zeros), "value": torch.zeros(40, 1, 24, 512, **zeros),
                         "key_rope": torch.zeros(40, 1, 24, 64, **zeros), "block_size": 24}, "multiple of 16"),
        "BSND query with a BnNBsD cache": ({"input_layout": "BSND", "query": kw["query"].view(b, 1, n, 512),
                                            "query_rope": kw["query_rope"].view(b, 1, n, 64)}, "BSND query"),
        "lengths as a tensor": ({"actual_seq_lengths_kv": torch.tensor(case.shape.context_lens)}, "list"),
        "a KV length short": ({"actual_seq_lengths_kv": list(case.shape.context_lens)[:-1]}, "one length per"),
        "KV beyond the table": ({"actual_seq_lengths_kv": [10**6] * b}, "block_table must be"),
        "17 query tokens": ({"query": torch.zeros(b, n, 17, 512, **zeros),
                             "query_rope": torch.zeros(b, n, 17, 64, **zeros)}, "query tokens per sequence"),
        "MTP outside TND with query lengths": ({"query": torch.zeros(b, n, 2, 512, **zeros),
                                                "query_rope": torch.zeros(b, n, 2, 64, **zeros),
                                                "actual_seq_lengths": [2 * (i + 1) for i in range(b)]}, "only TND"),
        "TND per-sequence query lengths": ({"input_layout": "TND_NTD", "query": tnd_q, "query_rope": tnd_r,
                                            "actual_seq_lengths": [2] * b}, "cumulative"),
        "inner_precise 2 for one token": ({"inner_precise": 2}, "0 or 1"),
        "antiquant_mode 2 for one token": ({"antiquant_mode": 2}, "0 or 1"),
    }


def test_fake_fia_mla_refuses_what_cann_documents_it_refuses() -> None:
    case = _case(16)
    kw = fia_mla_arguments(case)
    check_fia_mla(kw)  # positive control
    for what, (change, words) in _refused(kw, case).items():
        with pytest.raises((ValueError, TypeError), match=words):
            check_fia_mla({**kw, **change})
            pytest.fail(f"{what}: accepted")


def test_fake_fia_mla_does_not_guess_what_it_does_not_model() -> None:
    one, two = fia_mla_arguments(_case(16)), fia_mla_arguments(_case(16, q_len=2))
    mask = two["atten_mask"]
    for what, kw in {"band": {**two, "sparse_mode": 4}, "several tokens, no mask": {**two, "sparse_mode": 0,
                                                                                     "atten_mask": None},
                     "custom mask": {**one, "atten_mask": mask}, "NZ cache": {**one, "key": one["key"].view(
                         one["key"].shape[0], 1, 32, 16, 16)}}.items():
        with pytest.raises(NotImplementedError):
            check_fia_mla(kw)
            pytest.fail(f"{what}: modelled")


# ---- FIA v2's MLA mode, as vLLM-Ascend's MLA decode calls it today ------------------------------------------


def _fia_v2(positional: tuple[torch.Tensor, ...], kw: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    return fake_torch_npu([]).npu_fused_infer_attention_score_v2(*positional, **kw)


@pytest.mark.parametrize(("heads", "q_len", "lens", "dtype", "lse"), [
    (16, 1, (300, 129, 5), "bf16", False), (128, 1, (300, 0, 17), "fp16", False), (32, 2, (300, 129, 5), "bf16", True),
    (64, 1, (64, 2, 513), "fp16", True),
])
def test_fake_fia_v2_mla_as_vllm_ascend_calls_it_passes_the_golden(heads: int, q_len: int, lens: tuple[int, ...],
                                                                    dtype: str, lse: bool) -> None:
    case = _case(heads, q_len, lens, dtype, lse=lse)
    calls: Calls = []
    result = prepare_fia_v2(case, fake_torch_npu(calls))()
    (name, args, kw), = calls
    assert name == "fia-v2" and len(args) == 3 and args[1] is args[2]  # query, key, value by position; V is K
    assert args[1].data_ptr() == case.key_cache.data_ptr() and kw["num_key_value_heads"] == 1
    assert kw["num_query_heads"] == heads and kw["softmax_scale"] == case.scale and kw["actual_seq_kvlen"] == list(lens)
    assert not {"num_heads", "scale", "antiquant_mode", "antiquant_scale", "actual_seq_lengths_kv"} & set(kw)
    assert kw["input_layout"] == ("BNSD_NBSD" if q_len == 1 else "TND_NTD")
    assert kw.get("return_softmax_lse", False) == lse
    out, got_lse = split_result(result)
    assert tuple(out.shape) == tuple(case.query.shape) and _passes(out, case)
    assert (got_lse is not None) == lse and (got_lse is None or lse_error(got_lse, golden(case))[1])


def test_fake_fia_v2_mla_lse_is_laid_out_as_the_source_says() -> None:
    """fp32 ``[B, N, S, 1]`` for BNSD_NBSD, ``[T, N, 1]`` for TND_NTD, ``[0]`` when not asked for; a wrong lse (of
    another row) fails the golden."""
    for q_len, shape in ((1, (3, 16, 1, 1)), (2, (6, 16, 1))):
        case = _case(16, q_len, lse=True)
        positional, kw = fia_v2_mla_arguments(case)
        _, lse = _fia_v2(positional, kw)
        assert lse.dtype == torch.float32 and tuple(lse.shape) == shape
        assert tuple(_fia_v2(positional, {**kw, "return_softmax_lse": False})[1].shape) == (0,)
        exact = lse.view(case.query.shape[:-1])
        assert lse_error(exact, golden(case))[1] and not lse_error(exact.roll(1, dims=-1), golden(case))[1]


def test_fake_fia_v2_mla_refuses_what_cann_documents_it_refuses() -> None:
    """v2's names, its own refusals (sinks, post-quantisation, pse), and v1's names refused by the signature."""
    case = _case(16)
    positional, kw = fia_v2_mla_arguments(case)
    b, n = case.shape.batch, case.shape.num_heads
    zeros = {"dtype": torch.bfloat16}
    _fia_v2(positional, kw)  # positive control
    refused = {
        "query_rope alone": ({"key_rope": None}, "together"),
        "fp32 query_rope": ({"query_rope": kw["query_rope"].float()}, "dtype"),
        "learnable_sink": ({"learnable_sink": torch.zeros(n, **zeros)}, "sinks"),
        "pse": ({"pse_shift": torch.zeros(1)}, "pse"),
        "post-quantisation": ({"quant_scale_out": torch.ones(1)}, "post-quantisation"),
        "sparse_mode 1": ({"sparse_mode": 1}, "sparse_mode must be one of"),
        "two KV heads": ({"num_key_value_heads": 2}, "num_key_value_heads"),
        "24 heads": ({"query_rope": torch.zeros(b, 24, 1, 64, **zeros), "num_query_heads": 24},
                     "num_query_heads must be one of"),
        "lengths as a tensor": ({"actual_seq_kvlen": torch.tensor(case.shape.context_lens)}, "list"),
        "a KV length short": ({"actual_seq_kvlen": list(case.shape.context_lens)[:-1]}, "one length per"),
        "v1's num_heads": ({"num_heads": n}, "unexpected keyword"),
        "v1's antiquant_mode": ({"antiquant_mode": 0}, "unexpected keyword"),
        "v1's softmax_lse_flag": ({"softmax_lse_flag": True}, "unexpected keyword"),
    }
    for what, (change, words) in refused.items():
        query = torch.zeros(b, 24, 1, 512, **zeros) if what == "24 heads" else positional[0]
        with pytest.raises((ValueError, TypeError), match=words):
            _fia_v2((query, *positional[1:]), {**kw, **change})
            pytest.fail(f"{what}: accepted")
    with pytest.raises(ValueError, match="FIA v2 MLA: sparse_mode"):
        check_fia_mla({"query": positional[0], "key": positional[1], "value": positional[2], **kw,
                       "sparse_mode": 2}, V2)
    mtp = fia_v2_mla_arguments(_case(16, q_len=2))
    not_modelled = {
        "tree mask (sparse 9)": (mtp, {"sparse_mode": 9}),
        "full quantisation": (mtp, {"query_quant_mode": 3}),
        "lse of a sequence without keys": ((positional, kw), {"return_softmax_lse": True,
                                                              "actual_seq_kvlen": [300, 0, 5]}),
    }
    for what, ((args, base), change) in not_modelled.items():
        with pytest.raises(NotImplementedError):
            _fia_v2(args, {**base, **change})
            pytest.fail(f"{what}: modelled")


# ---- applicability and the other peers ---------------------------------------------------------------------


def test_ifa_and_fia_v1_lse_rows_say_why_they_do_not_compute_mla() -> None:
    case = _case(16)
    calls: Calls = []
    with pytest.raises(NotApplicableError, match=r"ifa does not compute mla .*no query_rope/key_rope"):
        prepare_ifa(case, fake_torch_npu(calls))
    with pytest.raises(NotApplicableError, match=r"fia does not compute mla with lse .*softmax_lse"):
        prepare_fia(_case(16, lse=True), fake_torch_npu(calls))
    assert not calls


@pytest.mark.parametrize("name", ["torch-paged", "torch-dense", "sdpa"])
@pytest.mark.parametrize(("q_len", "lse"), [(1, False), (2, True)])
def test_torch_peers_compute_absorbed_mla(name: str, q_len: int, lse: bool) -> None:
    case = _case(16, q_len, (300, 0, 17), lse=lse)
    if name == "sdpa" and lse:
        with pytest.raises(NotApplicableError, match="sdpa does not compute lse"):
            prepare_baseline(name, case)
        return
    out, got_lse = split_result(prepare_baseline(name, case)())
    assert _passes(out, case)
    assert (got_lse is not None) == lse and (got_lse is None or lse_error(got_lse, golden(case))[1])


def test_pa_kit_mla_runner_on_the_mock_passes_the_golden() -> None:
    case = _case(128, q_len=2, lens=(300, 0, 129), block_size=128, lse=True)
    runner = make_runner(case, SuiteOptions("mock", (), QUICK), checked=True)
    out, lse = split_result(runner())
    assert _passes(out, case) and lse is not None and lse_error(lse, golden(case))[1]
    with pytest.raises(NotApplicableError, match="batch_invariant"):
        make_runner(case, SuiteOptions("mock", (), QUICK), checked=False, batch_invariant=True)


# ---- shapes, bytes, roofline --------------------------------------------------------------------------------


def test_mla_set_is_deepseek_v3_per_rank_at_tp_1_4_8_and_one_mtp_step() -> None:
    mla = shapes.shape_set("mla")
    expected = [f"b{b}_h{h}kv1_d512r64_ctx4k_bs128_bf16" for h in (128, 32, 16) for b in (1, 8, 32, 64, 128)]
    assert [s.shape_id for s in mla] == [*expected, "b32_h128kv1_d512r64_ctx4k_bs128_bf16_q2"]
    assert all((s.rope_dim, s.head_dim, s.num_kv_heads, s.block_size, s.dtype, s.max_context) ==
               (64, 512, 1, 128, "bf16", 4096) and s.uniform for s in mla)
    assert mla[-1].q_len == 2 and mla[-1].features_label == "mla q2" and mla[0].features == ("mla",)
    with pytest.raises(ValueError, match="--mla takes no"):
        shapes.uniform_shape(1, 64, num_kv_heads=1, head_dim=512, rope_dim=64, window_left=7)


def test_bytes_model_of_an_mla_shape_by_hand() -> None:
    """1152 bytes per token (latent 512 + rope 64, bf16) read once; FLOPs 2 x H x keys x (576 + 512)."""
    shape = shapes.mla_shape(2, 4096, num_heads=16)
    t = bytes_model.traffic(shape)
    assert t.kv_bytes == 2 * 4096 * 1152
    assert (t.q_bytes, t.o_bytes, t.block_table_bytes) == (2 * 16 * 576 * 2, 2 * 16 * 512 * 2, 2 * 32 * 4)
    assert t.flops == 2 * 16 * 2 * 4096 * (576 + 512)
    mtp = bytes_model.traffic(shapes.mla_shape(1, 4096, num_heads=16, q_len=2))
    assert mtp.flops == 2 * 16 * (4095 + 4096) * (576 + 512)  # the first draft token sees one key less


def test_a2_roofs_are_the_timing_models() -> None:
    assert A2.hbm_bytes_per_s == 1.6e12
    assert A2.cube_flops_per_s == pytest.approx(24 * 4096 * 2 * 1.85e9) and A2.ridge == pytest.approx(227.3, abs=0.1)
    try:
        from timing.costs import load_cost_tables

        tables = load_cost_tables()
    except FileNotFoundError:
        pytest.skip("pto-isa's cost tables are not fetched (bash compile.sh)")
    assert tables.frequency_hz == 1.85e9
    assert tables.matmul_cycles(16, 16, 16, "fp16") == tables.mad.head + 1  # one 16x16x16 fractal per cycle


def test_roofline_puts_128_heads_at_the_ridge_and_16_heads_far_below() -> None:
    tp1, tp8 = roofline(shapes.mla_shape(8, 4096)), roofline(shapes.mla_shape(8, 4096, num_heads=16))
    per_sequence = 4096 * 1152 + 32 * 4 + 16 * (576 + 512) * 2  # K/V once, its 32 table entries, Q and O
    by_hand = 2 * 16 * 4096 * 1088 / per_sequence
    assert tp8.intensity == pytest.approx(by_hand, rel=1e-9) and round(tp8.intensity) == 30
    assert tp8.bound == MEMORY_BOUND and tp8.kv_reads == 1
    assert tp1.intensity / A2.ridge == pytest.approx(1.0, abs=0.02) and tp1.bound == COMPUTE_BOUND
    assert tp1.kv_reads == 1 and tp1.plan_bound == COMPUTE_BOUND  # a task holds all 128 heads: the latent read once
    mtp = roofline(shapes.shape_set("mla")[-1])
    assert mtp.intensity > 1.8 * A2.ridge and mtp.bound == COMPUTE_BOUND
    assert roofline(shapes.uniform_shape(8, 4096)).bound == MEMORY_BOUND  # GQA decode: 4 FLOP/B


def test_prediction_gives_the_roofline_bound_and_the_percent_of_its_peak() -> None:
    from benchmark.predict import render_predictions, roofline_share
    mla = roofline(shapes.mla_shape(8, 4096))
    assert (mla.plan_bound or mla.bound) == COMPUTE_BOUND
    # by hand: the shape's FLOPs over 50 us, as a % of the cube's fp16 peak
    by_hand = round(100 * mla.flops / (50e-6 * mla.machine.cube_flops_per_s), 1)
    assert roofline_share(12.0, 50.0, mla) == {"roofline_bound": "cube", "predicted_percent_of_bound": by_hand}
    gqa = roofline(shapes.uniform_shape(8, 4096))
    assert roofline_share(12.0, 50.0, gqa) == {"roofline_bound": "HBM", "predicted_percent_of_bound": 12.0}
    assert roofline_share(12.0, 50.0, None) == {}
    figures = {"predicted_us": 50.0, "band_us": [49.0, 60.0], "predicted_tb_per_s": 0.2,
               "predicted_percent_of_hbm": 12.0, "bound": "hand-off latency",
               **roofline_share(12.0, 50.0, mla)}
    row = types.SimpleNamespace(shape_id="mla-b8", prediction=figures)
    text = render_predictions([row])
    assert f"| cube | {by_hand:.0f} | hand-off latency |" in text, text


def test_plot_label_names_mla_and_the_bound() -> None:
    rec = report.BenchRecord("x", "pa-kit", 8, 16, 1, 512, 128, "bf16", 4096, 8 * 4096, 1, 1, 1, "ok",
                             features="mla", bound=MEMORY_BOUND)
    assert shape_label(rec) == "b8 16/1 d512 4K bf16 mla [mem]"


# ---- the script, end to end on the mock --------------------------------------------------------------------


def test_script_lists_the_mla_set_with_its_bounds() -> None:
    done = subprocess.run([sys.executable, str(REPO / "bench_pa_performance.py"), "--shapes", "mla",
                           "--list-shapes"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 16 and "b1_h128kv1_d512r64_ctx4k_bs128_bf16" in lines[0] and "compute-bound" in lines[0]
    assert "b128_h16kv1_d512r64" in lines[14] and "30 FLOP/B: memory-bound" in lines[14]


def test_script_runs_an_mla_shape_on_the_mock(tmp_path: Path) -> None:
    out, png = tmp_path / "run.json", tmp_path / "run.png"
    command = [sys.executable, str(REPO / "bench_pa_performance.py"), "--backend", "mock", "--mla", "--heads", "16",
               "--batch", "2", "--ctx", "300", "--warmup", "1", "--iters", "2", "--min-iters", "1", "--budget-ms",
               "20", "--bandwidth-mib", "16", "--flush-mib", "8", "--engine-steps", "0", "--json", str(out)]
    plot = ["--plot", str(png)] if _has_matplotlib() else []
    done = subprocess.run([*command, *plot], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    sid = "b2_h16kv1_d512r64_ctx300_bs128_bf16"
    assert f"{sid}: " in done.stdout and "memory-bound" in done.stdout and "ridge 227 FLOP/B" in done.stdout
    rows = {r.implementation: r for r in report.read_json(out).records}
    assert rows["pa-kit"].ok and rows["torch-paged"].ok and rows["torch-dense"].ok and rows["sdpa"].ok
    assert rows["pa-kit"].bound == MEMORY_BOUND and rows["pa-kit"].roofline is not None
    assert rows["pa-kit"].roofline["flops"] == 2 * 16 * 600 * 1088 and rows["pa-kit"].features == "mla"
    assert not plot or png.read_bytes()[:4] == b"\x89PNG"


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True
