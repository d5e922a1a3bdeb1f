"""FIA v1/v2 as the benchmark calls them for the decode features, against the float64 golden.

The fake ``torch_npu`` (``fake_torch_npu.py``) converts each call into pa-kit's terms and computes; these tests
pin that conversion to CANN's documented rules and show that each way of getting a feature wrong fails: a window
one key wide of the model's (the value vLLM-Ascend passes), query lengths that are not cumulative, KV lengths
without the query tokens, sinks dropped or on the wrong heads, an lse without the sink.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from fake_torch_npu import V2, check_fia_tnd, check_learnable_sink, fake_torch_npu, window_left_of

from accuracy.reference import compare_lse
from benchmark.baselines import golden, max_abs_error, within_tolerance
from benchmark.npu_peers import fia_arguments, fia_v2_arguments, fia_window, prepare_fia, prepare_fia_v2
from workloads import shapes
from workloads.cases import BenchCase, build_case

Calls = list[tuple[str, tuple[Any, ...], dict[str, Any]]]
#: vLLM-Ascend passes the model's sliding_window itself as pre_tokens (attention_v1.py, gpt-oss path).
VLLM_ASCEND_PRE_TOKENS = shapes.GPT_OSS_SLIDING_WINDOW


def _case(*, q_len: int = 1, window_left: int = -1, sinks: bool = False, lse: bool = False, ctx: int = 300,
          batch: int = 3, dtype: str = "bf16") -> BenchCase:
    """gpt-oss's head layout scaled down (8 query / 2 KV heads of 64), pages of 16."""
    return build_case(shapes.uniform_shape(batch, ctx, num_heads=8, num_kv_heads=2, head_dim=64, block_size=16,
                                           dtype=dtype, q_len=q_len, window_left=window_left, sinks=sinks, lse=lse,
                                           seed=11))


def _fia_v2(kw: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    return fake_torch_npu([]).npu_fused_infer_attention_score_v2(**kw)


def _passes(out: torch.Tensor, case: BenchCase) -> bool:
    ref = golden(case)
    return within_tolerance(max_abs_error(out.view(case.query.shape), ref), ref)


# ---- the window: CANN's band rule is pa-kit's window_left ------------------------------------------------


def cann_band_keeps(q_len: int, kv_len: int, pre_tokens: int, next_tokens: int) -> list[set[int]]:
    """Keys each query row keeps under ``sparse_mode=4``, from the reference mask CANN's tools build: masked
    where ``j - i >= next + 1 + (S2 - S1)`` (triu) or ``j - i <= -pre - 1 + (S2 - S1)`` (tril)."""
    ones = torch.ones(q_len, kv_len)
    masked = torch.triu(ones, diagonal=next_tokens + 1 + kv_len - q_len) + \
        torch.tril(ones, diagonal=-pre_tokens - 1 + kv_len - q_len)
    return [{j for j in range(kv_len) if masked[i, j] == 0} for i in range(q_len)]


def pa_kit_keeps(q_len: int, kv_len: int, window_left: int) -> list[set[int]]:
    """pa-kit's rule: token s at p = kv_len - q_len + s keeps keys max(0, p - W) .. p."""
    return [set(range(max(0, kv_len - q_len + s - window_left), kv_len - q_len + s + 1)) for s in range(q_len)]


def test_band_rule_reproduces_canns_own_split_example() -> None:
    """CANN's sparse-mode page splits a 4 x 6 right-down causal mask over two cards; card 1's rows become a band
    with pre_tokens=6, next_tokens=-2 on 2 query rows and 6 keys, which must keep exactly the causal rows."""
    assert cann_band_keeps(2, 6, 6, -2) == [set(range(3)), set(range(4))]  # rows at p = 2, 3 of the 4 x 6 causal


@pytest.mark.parametrize(("q_len", "kv_len", "window_left"), [(1, 40, 7), (4, 40, 7), (2, 300, 127), (3, 5, 9)])
def test_cann_band_with_pre_tokens_w_and_next_tokens_0_is_window_left_w(q_len: int, kv_len: int,
                                                                       window_left: int) -> None:
    args = fia_window(window_left)
    assert args == {"sparse_mode": 4, "pre_tokens": window_left, "next_tokens": 0}
    assert cann_band_keeps(q_len, kv_len, args["pre_tokens"], 0) == pa_kit_keeps(q_len, kv_len, window_left)
    # negative control: one more pre_token keeps one key too many wherever the window is inside the context
    wider = cann_band_keeps(q_len, kv_len, window_left + 1, 0)
    assert wider != pa_kit_keeps(q_len, kv_len, window_left) or kv_len <= window_left + 1
    assert window_left_of({**args, "atten_mask": None}, [q_len]) == window_left


def test_model_config_window_gives_the_same_keys_to_pa_kit_and_to_fia() -> None:
    """gpt-oss's sliding_window=128 keeps 128 keys: pa-kit's window_left 127 and FIA's pre_tokens 127."""
    window = shapes.window_left_of(shapes.GPT_OSS_SLIDING_WINDOW)
    assert window == 127
    for q_len in (1, 2, 4):
        keeps = pa_kit_keeps(q_len, 1000, window)
        assert all(len(keys) == shapes.GPT_OSS_SLIDING_WINDOW for keys in keeps)
        assert cann_band_keeps(q_len, 1000, fia_window(window)["pre_tokens"], 0) == keeps
        assert all(len(keys) == 129 for keys in cann_band_keeps(q_len, 1000, VLLM_ASCEND_PRE_TOKENS, 0))


def _plant_outside_window(case: BenchCase) -> None:
    """A large value at the key just before the first query token's window, in every sequence: whatever sees it
    is far from the golden."""
    s = case.shape
    position = s.max_context - s.q_len - s.window_left - 1
    for seq in range(s.batch):
        page = int(case.block_table[seq, position // s.block_size])
        case.value_cache[page, position % s.block_size] = 64.0


@pytest.mark.parametrize("q_len", [1, 2])
def test_fake_fia_v2_window_is_pa_kit_window_left_and_vllm_ascend_value_fails(q_len: int) -> None:
    case = _case(q_len=q_len, window_left=shapes.window_left_of(128), sinks=True)
    _plant_outside_window(case)
    kw = fia_v2_arguments(case)
    assert (kw["sparse_mode"], kw["pre_tokens"], kw["next_tokens"]) == (4, 127, 0)
    assert _passes(_fia_v2(kw)[0], case)
    assert not _passes(_fia_v2({**kw, "pre_tokens": VLLM_ASCEND_PRE_TOKENS})[0], case)  # one key too many
    assert not _passes(_fia_v2({**kw, "pre_tokens": 126})[0], case)  # one key too few


def test_fake_fia_v1_window_and_its_off_by_one() -> None:
    case = _case(q_len=4, window_left=7)
    _plant_outside_window(case)
    kw = fia_arguments(case)
    fia = fake_torch_npu([]).npu_fused_infer_attention_score
    assert _passes(fia(**kw)[0], case)
    assert not _passes(fia(**{**kw, "pre_tokens": 8})[0], case)
    assert not _passes(fia(**{**kw, "sparse_mode": 3})[0], case)  # causal without the window


# ---- several query tokens (speculative decoding, MTP) ---------------------------------------------------


@pytest.mark.parametrize("q_len", [2, 4])
@pytest.mark.parametrize("version", ["v1", "v2"])
def test_multi_token_call_is_vllm_ascends_and_passes_the_golden(q_len: int, version: str) -> None:
    case = _case(q_len=q_len, dtype="fp16")
    calls: Calls = []
    prepare = prepare_fia if version == "v1" else prepare_fia_v2
    out = prepare(case, fake_torch_npu(calls))()
    (_, _, kw), = calls
    lengths = (kw["actual_seq_lengths"], kw["actual_seq_lengths_kv"]) if version == "v1" else \
        (kw["actual_seq_qlen"], kw["actual_seq_kvlen"])
    assert lengths == ([q_len, 2 * q_len, 3 * q_len], [300, 300, 300])  # cumulative; KV lengths count the queries
    assert tuple(kw["query"].shape) == (3 * q_len, 8, 64) and kw["sparse_mode"] == 3
    assert tuple(out.shape) == tuple(case.query.shape) and _passes(out, case)


def test_multi_token_mistakes_are_refused_or_fail_the_golden() -> None:
    case = _case(q_len=2)
    kw = fia_v2_arguments(case)
    with pytest.raises(ValueError, match="cumulative"):
        check_fia_tnd({**kw, "actual_seq_qlen": [2, 2, 2]}, V2)  # per-sequence lengths
    excluding_queries = {**kw, "actual_seq_kvlen": [298, 298, 298]}  # KV lengths without the query tokens
    assert not _passes(_fia_v2(excluding_queries)[0], case)
    with pytest.raises(NotImplementedError):
        _fia_v2({**kw, "sparse_mode": 0, "atten_mask": None})  # several tokens, no mask: not causal


# ---- sinks and lse ---------------------------------------------------------------------------------------


def test_fia_v2_sinks_pass_and_dropped_or_moved_sinks_fail() -> None:
    case = _case(window_left=31, sinks=True)
    kw = fia_v2_arguments(case)
    assert kw["learnable_sink"] is case.sinks
    assert _passes(_fia_v2(kw)[0], case)
    assert not _passes(_fia_v2({k: v for k, v in kw.items() if k != "learnable_sink"})[0], case)
    assert not _passes(_fia_v2({**kw, "learnable_sink": case.sinks.roll(1)})[0], case)  # other heads' sinks


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_lse_is_natural_log_with_the_sink_and_a_sinkless_lse_fails(version: str) -> None:
    case = _case(q_len=2, window_left=15, sinks=version == "v2", lse=True)
    ref = golden(case)
    out, lse = (prepare_fia if version == "v1" else prepare_fia_v2)(case, fake_torch_npu([]))()
    assert lse.dtype == torch.float32 and tuple(lse.shape) == (3, 2, 8)
    assert compare_lse(lse, ref).passed and _passes(out, case)
    assert not compare_lse(lse / torch.log(torch.tensor(2.0)), ref).passed  # base 2 (FlashInfer's) is not ours
    if version == "v2":
        kw = fia_v2_arguments(case)
        sinkless = _fia_v2({k: v for k, v in kw.items() if k != "learnable_sink"})[1].view(lse.shape)
        assert not compare_lse(sinkless, ref).passed


def test_lse_is_a_placeholder_unless_asked() -> None:
    case = _case(q_len=2)
    _, lse = _fia_v2(fia_v2_arguments(case))
    assert tuple(lse.shape) == (1,) and float(lse[0]) == 0.0


# ---- v2's documented rules, each broken alone ------------------------------------------------------------


def test_fia_v2_refuses_what_its_page_rules_out() -> None:
    case = _case(q_len=2, window_left=7, sinks=True)
    kw = fia_v2_arguments(case)
    check_learnable_sink(kw)
    check_fia_tnd(kw, V2)  # positive controls
    sink_broken = {
        "fp32 sink": {"learnable_sink": case.sinks.float()},
        "sink per KV head": {"learnable_sink": case.sinks[:2].contiguous()},
        "sink outside TND": {"input_layout": "BSND"},
    }
    for what, change in sink_broken.items():
        with pytest.raises(ValueError):
            check_learnable_sink({**kw, **change})
            pytest.fail(f"{what}: accepted")
    bf16 = torch.bfloat16
    tnd_broken = {  # what, the change, the rule that must refuse it
        "sparse_mode 5": ({"sparse_mode": 5}, "sparse_mode must be one of"),
        "lower-triangular mask": ({"atten_mask": kw["atten_mask"].logical_not()}, "above the diagonal"),
        "band without a mask": ({"atten_mask": None}, "needs a 2048x2048"),
        "65 query heads per KV head": ({"query": torch.zeros(6, 130, 64, dtype=bf16), "num_query_heads": 130},
                                       "at most 64"),
        "pages of 2048": ({"key": torch.zeros(1, 2048, 128, dtype=bf16), "value": torch.zeros(1, 2048, 128,
                                                                                               dtype=bf16),
                           "block_size": 2048}, "up to 1024"),
        "4097 sequences": ({"actual_seq_qlen": list(range(1, 4098)), "actual_seq_kvlen": [1] * 4097},
                           "one entry per sequence"),
    }
    for what, (change, rule) in tnd_broken.items():
        with pytest.raises(ValueError, match=rule):
            check_fia_tnd({**kw, **change}, V2)
            pytest.fail(f"{what}: accepted")
    with pytest.raises(TypeError):  # v1's names are not v2's
        _fia_v2({**{k: v for k, v in kw.items() if k != "num_query_heads"}, "num_heads": 8})
    with pytest.raises(NotImplementedError):  # a band that reaches forward is not a decode
        _fia_v2({**kw, "next_tokens": 1})
