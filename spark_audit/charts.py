"""The report's charts: matplotlib (Agg backend) figures from `spark_audit.report_data`.

Every chart has its units on the axes, labels that fit (horizontal bars for zone pairs and
routes, concise dates), dollars as people write them, and a size that reads at 1,400 px
and on A4. The data comes in computed (pure functions, tested); this module only draws.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display; before pyplot is imported

import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter  # noqa: E402

from spark_audit import report_data as rd  # noqa: E402
from spark_audit.formatting import iec_bytes, usd  # noqa: E402

CHART_DPI = 150  # crisp on screen and on paper; the page scales images to its width
plt.rcParams.update({"font.size": 9, "axes.titlesize": 10})


def png_base64(draw: Callable[[], Figure]) -> str:
    """The figure `draw()` makes, as base64 PNG; the figure is closed."""
    fig = draw()
    try:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=CHART_DPI, bbox_inches="tight")
        return base64.b64encode(buf.getvalue()).decode("ascii")
    finally:
        plt.close(fig)


def _usd_axis(ax: Any, axis: str = "y") -> None:
    """Dollar ticks, few enough that the longest label fits between two of them."""
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_locator(MaxNLocator(nbins=5))
    target.set_major_formatter(FuncFormatter(lambda v, _p: usd(v)))


def _object_size_axis(ax: Any) -> None:
    """Log scale in powers of two, labelled 256 KiB, 512 KiB, 1 MiB; no minor labels."""
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(LogLocator(base=2, numticks=12))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: iec_bytes(v)))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _legend_outside(ax: Any) -> None:
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)


def chart_pairs(pairs: Sequence[rd.PairSavings]) -> Figure:
    fig, ax = plt.subplots(figsize=(9, 0.9 + 0.55 * len(pairs)))
    labels = [p.label for p in pairs][::-1]
    y = range(len(pairs))
    series = (("transfer avoided", [p.transfer_avoided_usd for p in pairs][::-1], "#4c9a2a"),
              ("S3 request cost", [-p.s3_usd for p in pairs][::-1], "#c0392b"),
              ("net savings", [p.net_savings_usd for p in pairs][::-1], "#1f4e79"))
    height = 0.26
    for i, (label, values, color) in enumerate(series):
        ax.barh([v + (1 - i) * height for v in y], values, height, label=label, color=color)
    ax.set_yticks(list(y), labels, fontsize=9)
    ax.axvline(0, color="black", linewidth=0.6)
    ax.set_xlabel("US dollars over the period (S3 cost drawn below zero)")
    _usd_axis(ax, "x")
    _legend_outside(ax)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def chart_cumulative(hours: Sequence[rd.HourSavings]) -> Figure:
    fig, ax = plt.subplots(figsize=(9, 3.2))
    when = [datetime.strptime(h.hour, "%Y-%m-%dT%H:%MZ").replace(tzinfo=UTC) for h in hours]
    # matplotlib's type hints take x as an array of numbers, while its unit converters
    # (matplotlib.dates) take datetimes; and matplotlib.dates is not annotated.
    ax.step(when, [h.cumulative_usd for h in hours], where="post", color="#1f4e79", marker="o",  # type: ignore[arg-type]
            markersize=3)
    locator = mdates.AutoDateLocator()  # type: ignore[no-untyped-call]
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))  # type: ignore[no-untyped-call]
    ax.set_xlabel("hour (UTC)")
    ax.set_ylabel("net savings so far")
    _usd_axis(ax)
    ax.axhline(0, color="black", linewidth=0.6)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def chart_break_even(classes: Sequence[rd.SizeClass], break_even_bytes: float | None) -> Figure:
    fig, ax = plt.subplots(figsize=(9, 3.2))
    xs = [c.mean_object_bytes for c in classes]
    ys = [c.net_per_object_usd for c in classes]
    ax.plot(xs, ys, color="#1f4e79", marker="o", label="size class")
    losing = [(x, y) for x, y in zip(xs, ys) if y < 0]
    if losing:
        ax.scatter(*zip(*losing), color="#c0392b", zorder=3, label="size class loses money")
    ax.axhline(0, color="black", linewidth=0.6)
    if break_even_bytes:
        ax.axvline(break_even_bytes, color="#7f7f7f", linestyle="--",
                   label=f"break-even {iec_bytes(break_even_bytes)}")
    _object_size_axis(ax)
    ax.set_xlabel("WAL object size (mean of its size class, log scale)")
    ax.set_ylabel("net savings per object")
    _usd_axis(ax)
    _legend_outside(ax)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def chart_latency(routes: Sequence[rd.RouteLatency]) -> Figure:
    fig, ax = plt.subplots(figsize=(9, 0.9 + 0.6 * len(routes)))
    labels = [f"{r.route}\n{r.pair}" for r in routes][::-1]
    height = 0.26
    for i, (q, color) in enumerate((("p50_ms", "#9ecae1"), ("p95_ms", "#4292c6"), ("p99_ms", "#08519c"))):
        ax.barh([v + (1 - i) * height for v in range(len(routes))], [getattr(r, q) for r in routes][::-1],
                height, label=q.replace("_ms", ""), color=color)
    ax.set_yticks(range(len(routes)), labels, fontsize=9)
    ax.set_xlabel("produce latency, milliseconds (worst zone pair of each route)")
    _legend_outside(ax)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig
