"""The published hardware numbers the model is calibrated on and compared with (``timing/published.json``)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

PUBLISHED = Path(__file__).resolve().parent / "published.json"


@cache
def published_records() -> tuple[dict[str, Any], ...]:
    if not PUBLISHED.exists():
        return ()
    return tuple(json.loads(PUBLISHED.read_text())["records"])


def published_peers_us(shape_id: str) -> dict[str, float]:
    """Every other kernel's published time for this shape (IFA's target excluded), by kernel."""
    return {str(rec["kernel"]): float(rec["time_us"]) for rec in published_records()
            if rec.get("shape_id") == shape_id and rec.get("role") != "target"}


def published_ifa_us(shape_id: str) -> float | None:
    """IFA's published time for this shape (the target to beat), or None."""
    for rec in published_records():
        if rec.get("shape_id") == shape_id and rec.get("role") == "target":
            return float(rec["time_us"])
    return None


def ifa_harness_kept_l2(shape_id: str) -> bool:
    """Whether IFA's published time for this shape came from a harness that repeated the launch on the same tensors
    without flushing L2 (``l2_flushed`` false): a launch that fits the L2 was then read from it."""
    for rec in published_records():
        if rec.get("shape_id") == shape_id and rec.get("role") == "target":
            return rec.get("l2_flushed") is False
    return False


def versus_ifa(shape_id: str, cold_us: tuple[float, float], warm_us: tuple[float, float] | None) -> dict[str, Any]:
    """IFA's published time for this shape and how many times faster the prediction is, on the basis IFA's time
    was measured on: the warm-L2 prediction where IFA's harness kept L2 (:func:`ifa_harness_kept_l2`) and the
    launch fits it, else the cold one (docs/TIMING_MODEL.md, rule 7).  ``cold_us`` and ``warm_us``: (nominal,
    pessimistic end) of each; ``warm_us`` is None when the launch does not fit the L2
    (``ModelConstants.fits_l2``).  Empty when IFA published nothing for the shape."""
    ifa = published_ifa_us(shape_id)
    if ifa is None:
        return {}
    warm = warm_us is not None and ifa_harness_kept_l2(shape_id)
    nominal, slow = warm_us if warm and warm_us is not None else cold_us
    return {"ifa_published_us": ifa, "ifa_basis": "warm L2" if warm else "cold",
            "speedup_vs_ifa": round(ifa / nominal, 3), "speedup_vs_ifa_pessimistic": round(ifa / slow, 3),
            "speedup_vs_ifa_cold": round(ifa / cold_us[0], 3)}
