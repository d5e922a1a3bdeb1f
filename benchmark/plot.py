"""``--plot FILE.png``: TB/s against batch and against context, one line per implementation and shape family.

matplotlib comes with the ``bench`` extra (``pip install -e ".[bench]"``) and is imported only here, lazily.
A family is the set of uniform shapes that differ only in the plotted variable; a panel draws the families
with at least two points (or every point, when none has two).  Colour = implementation, line style = family.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from benchmark.report import PA_KIT, BenchRecord, BenchReport

Series = dict[tuple[str, str], list[tuple[int, float]]]
LINESTYLES = ("-", "--", ":", "-.")


def _family(r: BenchRecord, varying: str) -> str:
    parts = {
        "batch": f"b{r.batch}",
        "context": f"ctx{r.context_tokens_max}",
    }
    fixed = [v for k, v in parts.items() if k != varying]
    return " ".join([*fixed, f"h{r.num_heads}/{r.num_kv_heads}", f"d{r.head_dim}", f"bs{r.block_size}", r.dtype])


def series(records: tuple[BenchRecord, ...], varying: str) -> Series:
    """(implementation, family) -> sorted [(x, TB/s)] for timed uniform-context records."""
    out: Series = defaultdict(list)
    for r in records:
        uniform = r.context_tokens_total == r.batch * r.context_tokens_max
        if not r.ok or r.tb_per_s is None or not uniform:
            continue
        x = r.batch if varying == "batch" else r.context_tokens_max
        out[(r.implementation, _family(r, varying))].append((x, r.tb_per_s))
    return {key: sorted(points) for key, points in out.items()}


def plot_report(report: BenchReport, path: str | Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise SystemExit(f"--plot needs matplotlib: pip install -e '.[bench]' ({exc})") from exc
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    implementations = sorted({r.implementation for r in report.records}, key=lambda n: (n != PA_KIT, n))
    colours = {name: f"C{i % 10}" for i, name in enumerate(implementations)}
    for ax, varying, label in ((axes[0], "batch", "batch"), (axes[1], "context", "context tokens")):
        found = series(report.records, varying)
        lines = {key: points for key, points in found.items() if len(points) > 1} or found
        families = sorted({family for _, family in lines})
        for (impl, family), points in sorted(lines.items()):
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, linestyle=LINESTYLES[families.index(family) % len(LINESTYLES)], marker="o",
                    color=colours[impl], linewidth=2.5 if impl == PA_KIT else 1.2, label=f"{impl}: {family}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel(label)
        ax.set_ylabel("TB/s (decimal, bytes model in the header)")
        ax.grid(True, which="both", alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
    peak = report.device.peak_gb_per_s
    peak_text = f"peak {peak / 1e3:.3g} TB/s" if peak else "peak unknown"
    fig.suptitle(f"pa-kit paged-attention decode on {report.device.name} ({peak_text}); "
                 f"{report.timing.get('statistic')}, flush={report.timing.get('l2_flush')}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
