"""Which decode features each peer computes, and the error that turns a shape a peer cannot compute into an
``n/a`` row (reported with the reason, not silently skipped and not timed).

Feature names are :attr:`workloads.shapes.BenchShape.features`: ``multi-token`` (more than one query token
per sequence: speculative decoding, MTP), ``window`` (sliding window), ``sinks``, ``lse``.
"""

from __future__ import annotations

from workloads.shapes import BenchShape

ALL_FEATURES = ("multi-token", "window", "sinks", "lse")
#: What each peer computes, and why it computes no more.
PEER_FEATURES: dict[str, tuple[tuple[str, ...], str]] = {
    "ifa": ((), "npu_incre_flash_attention takes one query token per sequence and has no sliding window, sinks "
                "or lse output (FIA is its successor)"),
    "fia": (("multi-token", "window", "lse"), "npu_fused_infer_attention_score has no learnable_sink; fia-v2 "
                                              "has"),
    "fia-v2": (ALL_FEATURES, ""),
    "torch-paged": (ALL_FEATURES, ""),
    "torch-dense": (ALL_FEATURES, ""),
    "sdpa": (("multi-token", "window"), "scaled_dot_product_attention has no sinks and returns no lse"),
}
#: External ATB-ABI kernels (``--external``): ATB's ABI v1 describes one-token decode only.
EXTERNAL_FEATURES: tuple[tuple[str, ...], str] = ((), "an external ATB-ABI v1 kernel computes one-token decode "
                                                      "without window, sinks or lse")


class NotApplicableError(Exception):
    """This implementation does not compute this shape's features; its row says why instead of a time."""


def missing_features(shape: BenchShape, supported: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(name for name in shape.features if name not in supported)


def require(name: str, shape: BenchShape) -> None:
    """Raise :class:`NotApplicableError` when peer ``name`` lacks a feature ``shape`` needs."""
    supported, why = PEER_FEATURES.get(name, (ALL_FEATURES, ""))
    _raise_if_missing(name, shape, supported, why)


def require_external(name: str, shape: BenchShape) -> None:
    _raise_if_missing(name, shape, *EXTERNAL_FEATURES)


def _raise_if_missing(name: str, shape: BenchShape, supported: tuple[str, ...], why: str) -> None:
    missing = missing_features(shape, supported)
    if missing:
        raise NotApplicableError(f"{name} does not compute {', '.join(missing)} ({why})")
