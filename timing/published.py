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
