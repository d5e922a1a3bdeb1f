"""``--plot FILE.png``: one group of bars per shape, one bar per implementation, on a scale people read.

The first thing a reader wants is "which implementation moves the most bytes on this shape"; grouped bars
answer that at a glance.  The unit follows the device: TB/s on an NPU, GB/s on the CPU (the mock moves
tens of GB/s, which as TB/s reads as thousandths).  A dashed line marks the header's peak and the right axis
gives % of it.  Each bar carries the spread of its per-launch times as an error bar (the rate at the p80 time
up to the rate at the p20 time), so two bars closer than their spread read as a tie.  Each group is labelled
by its shape id, the key the table and the JSON use, over a short description.  The legend names
implementations only (shapes are the x labels), so it stays short however many shapes were run.

matplotlib comes with the ``bench`` extra (``pip install -e ".[bench]"``) and is imported only here, lazily.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.report import PA_KIT, BenchRecord, BenchReport

#: Bars narrower than this fraction of a group would be unreadable: past it the figure widens instead.
GROUP_WIDTH = 0.8
INCHES_PER_BAR = 0.22
#: y range above the tallest bar or the peak, for the legend.
HEADROOM = 1.3
MIN_WIDTH_IN, MAX_WIDTH_IN = 7.0, 40.0


@dataclass(frozen=True)
class Bars:
    """What the figure draws: shape labels, implementations in legend order, values[impl][shape] or None."""

    unit: str
    scale: float  # multiplies TB/s into the unit
    shapes: tuple[str, ...]
    labels: tuple[str, ...]
    implementations: tuple[str, ...]
    values: dict[str, list[float | None]]
    peak: float | None  # in the unit
    #: spread[impl][shape]: (rate at the p80 time, rate at the p20 time) in the unit, or None (no percentiles)
    spread: dict[str, list[tuple[float, float] | None]]


def shape_label(r: BenchRecord) -> str:
    """Short x label: batch, heads, context (max for ragged shapes), dtype; page size and D only if unusual; the
    decode features (``mla`` first for an MLA shape), then the roofline's verdict (``mem``/``compute``) when the
    record has one: whether bandwidth is even the right yardstick for the bar."""
    ctx = r.context_tokens_max
    ctx_text = f"{ctx // 1024}K" if ctx % 1024 == 0 else str(ctx)
    ragged = r.context_tokens_total != r.batch * ctx
    parts = [f"b{r.batch}", f"{r.num_heads}/{r.num_kv_heads}", f"{'≤' if ragged else ''}{ctx_text}", r.dtype]
    if r.head_dim != 128:
        parts.insert(2, f"d{r.head_dim}")
    if r.block_size != 128:
        parts.append(f"bs{r.block_size}")
    if r.features:
        parts.append(r.features)
    if r.bound:
        parts.append(f"[{r.bound.split('-')[0].replace('memory', 'mem')}]")
    return " ".join(parts)


def tick_label(r: BenchRecord) -> str:
    """A group's x label: the shape id (what the table and the JSON call it) over :func:`shape_label`."""
    return f"{r.shape_id}\n{shape_label(r)}"


def rate_spread(r: BenchRecord, scale: float) -> tuple[float, float] | None:
    """(the rate at the p80 time, the rate at the p20 time) in the unit: a rate is bytes over time, so the slow
    percentile gives the low end.  None for a record without percentiles (the back-to-back mean)."""
    if r.tb_per_s is None or r.time_ms is None or not r.p20_ms or not r.p80_ms:
        return None
    rate = r.tb_per_s * scale
    return rate * r.time_ms / r.p80_ms, rate * r.time_ms / r.p20_ms


def bars(report: BenchReport) -> Bars:
    """The bar data of ``report``: timed records only, pa-kit first, shapes in run order."""
    npu = report.device.backend == "npu"
    unit, scale = ("TB/s", 1.0) if npu else ("GB/s", 1e3)
    shapes: list[str] = []
    labels: list[str] = []
    for r in report.records:
        if r.shape_id not in shapes:
            shapes.append(r.shape_id)
            labels.append(tick_label(r))
    timed = [r for r in report.records if r.ok and r.tb_per_s is not None]
    names = sorted({r.implementation for r in timed}, key=lambda n: (not n.startswith(PA_KIT), n))
    values: dict[str, list[float | None]] = {name: [None] * len(shapes) for name in names}
    spread: dict[str, list[tuple[float, float] | None]] = {name: [None] * len(shapes) for name in names}
    for r in timed:
        values[r.implementation][shapes.index(r.shape_id)] = r.tb_per_s * scale  # type: ignore[operator]
        spread[r.implementation][shapes.index(r.shape_id)] = rate_spread(r, scale)
    peak = report.device.peak_gb_per_s
    return Bars(unit, scale, tuple(shapes), tuple(labels), tuple(names), values,
                None if peak is None else peak / 1e3 * scale, spread)


def error_bars(values: list[float | None], spread: list[tuple[float, float] | None]) -> list[list[float]]:
    """matplotlib's ``yerr`` (distances below and above each bar); 0 where a bar has no spread or no value."""
    below, above = [], []
    for value, span in zip(values, spread, strict=True):
        if value is None or span is None:
            below.append(0.0)
            above.append(0.0)
        else:
            below.append(max(0.0, value - span[0]))
            above.append(max(0.0, span[1] - value))
    return [below, above]


def plot_report(report: BenchReport, path: str | Path) -> None:
    import matplotlib.pyplot as plt

    fig = figure(report)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def figure(report: BenchReport) -> Any:
    """The figure of ``report`` (a matplotlib ``Figure`` on the Agg backend; the caller saves and closes it)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise SystemExit(f"--plot needs matplotlib: pip install -e '.[bench]' ({exc})") from exc
    data = bars(report)
    count = max(1, len(data.implementations))
    width = GROUP_WIDTH / count
    figure_width = min(MAX_WIDTH_IN, max(MIN_WIDTH_IN, INCHES_PER_BAR * count * len(data.shapes) + 2))
    fig, ax = plt.subplots(figsize=(figure_width, 5))
    positions = range(len(data.shapes))
    for i, name in enumerate(data.implementations):
        xs = [p - GROUP_WIDTH / 2 + (i + 0.5) * width for p in positions]
        ys = [v if v is not None else 0.0 for v in data.values[name]]
        drawn = ax.bar(xs, ys, width, label=name, color=f"C{i % 10}",
                       edgecolor="black" if name == PA_KIT else None, linewidth=1.2 if name == PA_KIT else 0,
                       yerr=error_bars(data.values[name], data.spread[name]), capsize=2,
                       error_kw={"elinewidth": 0.8, "ecolor": "black"})
        for bar, value in zip(drawn, data.values[name], strict=True):
            if value is None:  # failed or not timed on this shape: say so rather than draw a zero bar
                ax.annotate("n/a", (bar.get_x() + width / 2, 0), ha="center", va="bottom", fontsize=6, rotation=90)
    ax.set_xticks(list(positions), data.labels, rotation=30 if len(data.shapes) > 4 else 0, ha="right"
                  if len(data.shapes) > 4 else "center", fontsize=8)
    ax.set_ylabel(f"{data.unit} (bytes model / time)")
    ax.grid(True, axis="y", alpha=0.3)
    if data.peak:
        ax.axhline(data.peak, color="grey", linestyle="--", linewidth=1)
        ax.annotate(f"peak {data.peak:.3g} {data.unit}", (0.995, data.peak), xycoords=("axes fraction", "data"),
                    ha="right", va="bottom", fontsize=8, color="grey")
        right = ax.secondary_yaxis("right", functions=(lambda v: 100 * v / data.peak,
                                                       lambda p: p * data.peak / 100))
        right.set_ylabel("% of peak")
    tallest = max([v for vs in data.values.values() for v in vs if v is not None] + [data.peak or 0.0]
                  + [span[1] for spans in data.spread.values() for span in spans if span is not None])
    if tallest > 0:
        ax.set_ylim(0, tallest * HEADROOM)  # room above the peak line for the legend
    if data.implementations:
        ax.legend(fontsize=8, ncol=min(count, 4), loc="upper left")
    fig.suptitle(f"paged-attention decode on {report.device.name}: {report.timing.get('statistic')}, "
                 f"flush={report.timing.get('l2_flush')}\nerror bars: p20-p80 of per-launch times", fontsize=9)
    fig.tight_layout()
    return fig
