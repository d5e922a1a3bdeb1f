"""Which decode features each peer computes, and the error that turns a shape a peer cannot compute into an
``n/a`` row (reported with the reason, not silently skipped and not timed).

Feature names are :attr:`workloads.shapes.BenchShape.features`: ``mla`` (absorbed multi-head latent attention:
a latent KV head read as K and V, a rope part beside it), ``multi-token`` (more than one query token per
sequence: speculative decoding, MTP), ``window`` (sliding window), ``sinks``, ``lse``.
"""

from __future__ import annotations

from workloads.shapes import BenchShape

ALL_FEATURES = ("mla", "multi-token", "window", "sinks", "lse")
#: What each peer computes, and why it computes no more.
PEER_FEATURES: dict[str, tuple[tuple[str, ...], str]] = {
    "ifa": ((), "npu_incre_flash_attention takes one query token per sequence and has no sliding window, sinks "
                "or lse output (FIA is its successor)"),
    "fia": (("mla", "multi-token", "window", "lse"), "npu_fused_infer_attention_score has no learnable_sink; "
                                                     "fia-v2 has"),
    "fia-v2": (("mla", "multi-token", "window", "sinks", "lse"), ""),
    "torch-paged": (ALL_FEATURES, ""),
    "torch-dense": (ALL_FEATURES, ""),
    "sdpa": (("mla", "multi-token", "window"), "scaled_dot_product_attention has no sinks and returns no lse"),
}
#: Why a peer that lacks ``mla`` lacks it (said instead of the peer's general reason).
NO_MLA: dict[str, str] = {
    "ifa": "npu_incre_flash_attention has no query_rope/key_rope inputs, so MLA's rope part cannot reach it; "
           "CANN's MLA decode is npu_fused_infer_attention_score's MLA mode (rows fia, fia-v2)",
}
#: Features a peer computes, but not together with MLA: peer -> (features, why).
NOT_WITH_MLA: dict[str, tuple[tuple[str, ...], str]] = {
    "fia": (("lse",), "FIA's MLA mode (query D 512) refuses softmax_lse_flag: torch_npu's "
                      "npu_fused_infer_attention_score page, MLA constraints; fia-v2 returns it"),
    "fia-v2": (("window", "sinks"), "v2's MLA mode is not called with a band by vLLM-Ascend and its learnable_sink "
                                    "needs a value head_dim <= 128"),
}
#: External ATB-ABI kernels (``--external``): ATB's ABI v1 describes one-token decode only.
EXTERNAL_FEATURES: tuple[tuple[str, ...], str] = ((), "an external ATB-ABI v1 kernel computes one-token GQA "
                                                      "decode without window, sinks or lse, and no MLA")


class NotApplicableError(Exception):
    """This implementation does not compute this shape's features; its row says why instead of a time."""


def missing_features(shape: BenchShape, supported: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(name for name in shape.features if name not in supported)


def require(name: str, shape: BenchShape) -> None:
    """Raise :class:`NotApplicableError` when peer ``name`` lacks a feature ``shape`` needs."""
    supported, why = PEER_FEATURES.get(name, (ALL_FEATURES, ""))
    if shape.is_mla and "mla" not in supported and name in NO_MLA:
        raise NotApplicableError(f"{name} does not compute mla ({NO_MLA[name]})")
    _raise_if_missing(name, shape, supported, why)
    if shape.is_mla and name in NOT_WITH_MLA:
        excluded, why_not = NOT_WITH_MLA[name]
        clash = [feature for feature in shape.features if feature in excluded]
        if clash:
            raise NotApplicableError(f"{name} does not compute mla with {', '.join(clash)} ({why_not})")


def require_external(name: str, shape: BenchShape) -> None:
    _raise_if_missing(name, shape, *EXTERNAL_FEATURES)


def _raise_if_missing(name: str, shape: BenchShape, supported: tuple[str, ...], why: str) -> None:
    missing = missing_features(shape, supported)
    if missing:
        raise NotApplicableError(f"{name} does not compute {', '.join(missing)} ({why})")
