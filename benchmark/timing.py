"""Timers: NPU events per launch with an L2 flush between launches, and the host wall clock for the mock.

Two methods, chosen by :class:`TimingPolicy`:

* **per launch** (default): one measurement around each launch, the cache flushed before it (outside the
  measurement), median with p20/p80 over the samples;
* **back to back** (``statistic="mean"`` without a flush): one measurement around N launches issued
  back to back, divided by N.  This is the published method: launch cost and a warm L2 are inside it.

The number of launches is set by a time budget between ``min_iters`` and ``max_iters``, estimated from the
warm-up, so that slow CPU baselines do not dominate the run.  All buffers a timed call touches must be
allocated and written before timing starts: first touch of fresh memory is slow on these machines.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

Statistic = Literal["median", "mean"]
STATISTICS: tuple[str, ...] = ("median", "mean")
LOW_PERCENTILE = 20
HIGH_PERCENTILE = 80
NS_PER_MS = 1e6
NS_PER_US = 1e3


@dataclass(frozen=True)
class TimingPolicy:
    statistic: Statistic = "median"
    l2_flush: bool = True
    warmup: int = 2
    min_iters: int = 3
    max_iters: int = 50
    budget_ms: float = 1000.0
    flush_bytes: int = 64 << 20

    @property
    def back_to_back(self) -> bool:
        """The published method: no flush, mean of launches issued back to back."""
        return self.statistic == "mean" and not self.l2_flush

    def describe(self) -> str:
        if self.back_to_back:
            return (f"mean of back-to-back launches in one timed window (the published method), "
                    f"{self.warmup} warm-up, no cache flush")
        flush = f"cache flushed before each launch ({self.flush_bytes / (1 << 20):.0f} MiB touched)" \
            if self.l2_flush else "no cache flush"
        return (f"{self.statistic} of per-launch times with p{LOW_PERCENTILE}/p{HIGH_PERCENTILE}, "
                f"{self.warmup} warm-up, {self.min_iters}-{self.max_iters} launches within "
                f"{self.budget_ms:.0f} ms, {flush}")


@dataclass(frozen=True)
class TimingStats:
    statistic: str
    center_ms: float
    p20_ms: float | None
    p80_ms: float | None
    samples: int


def percentile(values: list[float], pct: float) -> float:
    """Linear-interpolated percentile of a non-empty list."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * pct / 100.0
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def summarize(samples_ms: list[float], statistic: Statistic) -> TimingStats:
    """Centre (median or mean) and p20/p80 of per-launch samples."""
    if not samples_ms:
        raise ValueError("no timing samples")
    center = statistics.median(samples_ms) if statistic == "median" else statistics.fmean(samples_ms)
    return TimingStats(statistic, center, percentile(samples_ms, LOW_PERCENTILE),
                       percentile(samples_ms, HIGH_PERCENTILE), len(samples_ms))


def launches_for_budget(policy: TimingPolicy, estimate_ms: float) -> int:
    """How many launches fit the budget, between min_iters and max_iters."""
    if estimate_ms <= 0:
        return policy.max_iters
    return max(policy.min_iters, min(policy.max_iters, int(policy.budget_ms / estimate_ms)))


class HostTimer:
    """Wall clock around launches on the host (mock backend, CPU baselines)."""

    def __init__(self, policy: TimingPolicy, flush: Callable[[], None] | None = None) -> None:
        self.policy = policy
        self._flush = flush

    def measure(self, fn: Callable[[], Any]) -> TimingStats:
        policy = self.policy
        warm_ns = []
        for _ in range(max(1, policy.warmup)):
            self._maybe_flush()
            start = time.perf_counter_ns()
            fn()
            warm_ns.append(time.perf_counter_ns() - start)
        count = launches_for_budget(policy, min(warm_ns) / NS_PER_MS)
        if policy.back_to_back:
            start = time.perf_counter_ns()
            for _ in range(count):
                fn()
            mean_ms = (time.perf_counter_ns() - start) / NS_PER_MS / count
            return TimingStats("mean", mean_ms, None, None, count)
        samples = []
        for _ in range(count):
            self._maybe_flush()
            start = time.perf_counter_ns()
            fn()
            samples.append((time.perf_counter_ns() - start) / NS_PER_MS)
        return summarize(samples, policy.statistic)

    def _maybe_flush(self) -> None:
        if self.policy.l2_flush and self._flush is not None:
            self._flush()


class NpuEventTimer:
    """``torch.npu.Event`` pairs on the current stream; ``device_api`` is ``torch.npu`` (a fake in tests)."""

    def __init__(self, policy: TimingPolicy, device_api: Any, flush: Callable[[], None] | None = None) -> None:
        self.policy = policy
        self._api = device_api
        self._flush = flush

    def _event(self) -> Any:
        return self._api.Event(enable_timing=True)

    def measure(self, fn: Callable[[], Any]) -> TimingStats:
        policy = self.policy
        warm_start, warm_end = self._event(), self._event()
        warm_start.record()
        for _ in range(max(1, policy.warmup)):
            fn()
        warm_end.record()
        self._api.synchronize()
        count = launches_for_budget(policy, warm_start.elapsed_time(warm_end) / max(1, policy.warmup))
        if policy.back_to_back:
            start, end = self._event(), self._event()
            start.record()
            for _ in range(count):
                fn()
            end.record()
            self._api.synchronize()
            return TimingStats("mean", start.elapsed_time(end) / count, None, None, count)
        pairs = [(self._event(), self._event()) for _ in range(count)]
        for start, end in pairs:
            if policy.l2_flush and self._flush is not None:
                self._flush()  # enqueued on the stream before the start event: outside the measurement
            start.record()
            fn()
            end.record()
        self._api.synchronize()
        return summarize([start.elapsed_time(end) for start, end in pairs], policy.statistic)


def host_us_per_call(fn: Callable[[], Any], calls: int = 2000, repeats: int = 5) -> float:
    """Best-of-``repeats`` host microseconds per call of ``fn`` in a tight loop (launch overhead probe)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter_ns() - start) / NS_PER_US / calls)
    return best


#: Bytes per host cache line: the read flush touches one byte of each.
HOST_CACHE_LINE_BYTES = 64


def make_flush(nbytes: int, device: str) -> Callable[[], None]:
    """A callable that evicts the cache by touching ``nbytes``; the buffer is written here, once.

    On the host it *reads* one byte of every cache line, single-threaded: a write would leave the cache full
    of dirty lines whose write-back then lands inside the timed launch (about a third of the mock's rate on
    a host with a 480 MiB last-level cache), and torch's multi-threaded ops would leave OpenMP workers
    spinning on the cores the launch needs.  On an NPU it is a ``zero_()`` queued on the current stream,
    before the launch's start event (the L2 is written back by the device, not the host).
    """
    if device == "cpu":
        import numpy as np

        host = np.ones(nbytes, dtype=np.uint8)
        lines = host[::HOST_CACHE_LINE_BYTES]

        def flush_host() -> None:
            lines.sum(dtype=np.uint64)

        return flush_host
    import torch

    buffer = torch.empty(nbytes, dtype=torch.uint8, device=device)
    buffer.zero_()

    def flush() -> None:
        buffer.zero_()

    return flush
