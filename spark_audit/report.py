"""The audit report: a one-screen text summary and a self-contained HTML page.

Pure Python over the small tables the jobs collected (no Spark here). Charts are drawn
with matplotlib's Agg backend into PNG bytes and embedded as base64 data URIs, so the
page is one file that can be mailed or stored next to the CSV tables.
"""

from __future__ import annotations

import base64
import html
import io
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from core.prices import Prices
from spark_audit._io import InputSummary, Table


def _sum(table: Table | None, column: str) -> float:
    if table is None:
        return 0
    return sum(r[column] or 0 for r in table.dicts())


def _usd(x: float) -> str:
    return f"${x:,.2f}" if abs(x) >= 100 or x == 0 else f"${x:.4g}"


def _pct(num: float, den: float) -> str:
    return f"{100 * num / den:.1f}%" if den else "n/a"


def _bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.2f} {unit}"
        n /= 1000
    return f"{n}"


def summary_text(tables: Mapping[str, Table], summary: InputSummary, prices: Prices) -> str:
    """At most one screen (about 20 lines) of headline numbers."""
    s = tables.get("savings")
    be = tables.get("break_even")
    lines = [f"azsidecar audit of {summary.source}"]
    drops = _sum(tables.get("writer_drops"), "dropped")
    lines.append(f"records {summary.valid_records:,} from {summary.files} files; corrupt lines "
                 f"{summary.corrupt_lines:,}; unknown kind {summary.unknown_kind_lines:,}; "
                 f"dropped by writers {drops:,.0f}")
    if s is not None:
        batches = {r: _sum(s, f"batches_{r}") for r in ("local", "direct_cross", "wal")}
        moved = {r: _sum(s, f"bytes_{r}") for r in ("local", "direct_cross", "wal")}
        lines.append("produce batches  " + "  ".join(f"{r} {int(n):,} ({_bytes(moved[r])})"
                                                     for r, n in batches.items()))
        equiv, crossed = _sum(s, "direct_equivalent_bytes"), _sum(s, "crossed_bytes")
        lines.append(f"cross-zone bytes  direct produce would send {_bytes(equiv)}; crossed "
                     f"{_bytes(crossed)}; avoided {_bytes(equiv - crossed)} ({_pct(equiv - crossed, equiv)})")
        avoided = _sum(s, "transfer_avoided_usd")
        put_usd, get_usd = _sum(s, "s3_put_usd"), _sum(s, "s3_get_usd")
        net = _sum(s, "net_savings_usd")
        lines.append(f"transfer avoided {_usd(avoided)}  S3 PUT {_sum(s, 's3_put_requests'):,.0f} "
                     f"({_usd(put_usd)})  GET {_sum(s, 's3_get_requests'):,.0f} ({_usd(get_usd)})")
        lines.append(f"NET SAVINGS {_usd(net)}  = {_pct(net, _sum(s, 'direct_transfer_usd'))} of the "
                     f"cross-zone transfer bill (${2 * prices.cross_az_per_gb_each_way:.3f}/GB crossing)")
    if be is not None and be.rows:
        rows = be.dicts()
        losing = [r for r in rows if (r["net_savings_usd"] or 0) < 0]
        objects = sum(r["objects"] for r in rows)
        lost = sum(r["objects"] for r in losing)
        lines.append(f"WAL objects {objects:,}; {lost:,} in size buckets that cost more than they save"
                     + (f" (up to {_bytes(max(r['size_bucket_bytes'] for r in losing) * 2)})" if losing else ""))
    ac, mc = tables.get("cache_agent"), tables.get("cache_metadata")
    if ac is not None:
        lines.append(f"agent block cache hit rate {_pct(_sum(ac, 'cache_hits'), _sum(ac, 'lookups'))}, "
                     f"bytes from cache {_pct(_sum(ac, 'bytes_from_cache'), _sum(ac, 'bytes'))}")
    if mc is not None:
        lines.append(f"router metadata cache hit rate {_pct(_sum(mc, 'hits'), _sum(mc, 'lookups'))}")
    lat = tables.get("latency")
    if lat is not None and lat.rows:
        worst: dict[str, dict[str, Any]] = {}
        for r in lat.dicts():
            if r["p99_ms"] is not None and (r["route"] not in worst or r["p99_ms"] > worst[r["route"]]["p99_ms"]):
                worst[r["route"]] = r
        lines.append("latency (worst zone pair) " + "  ".join(
            f"{route} p50 {r['p50_ms']:.1f} / p99 {r['p99_ms']:.1f} ms" for route, r in sorted(worst.items())))
    return "\n".join(lines)


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def charts(tables: Mapping[str, Table]) -> dict[str, str]:
    """Chart title -> base64 PNG, for the tables that have rows."""
    import matplotlib  # noqa: PLC0415 - the backend must be chosen before pyplot loads, and only charts need it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    out: dict[str, str] = {}
    s = tables.get("savings")
    if s is not None and s.rows:
        pairs: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        hours: dict[str, float] = defaultdict(float)
        for r in s.dicts():
            hours[r["hour"]] += r["net_savings_usd"] or 0
            if r["source_zone"] == r["leader_zone"]:
                continue
            p = pairs[f"{r['source_zone']}\n-> {r['leader_zone']}"]
            p[0] += r["transfer_avoided_usd"] or 0
            p[1] += (r["s3_put_usd"] or 0) + (r["s3_get_usd"] or 0)
            p[2] += r["net_savings_usd"] or 0
        if pairs:
            fig, ax = plt.subplots(figsize=(8, 3.5))
            names = list(pairs)
            width = 0.27
            for i, label in enumerate(("transfer avoided", "S3 requests", "net savings")):
                ax.bar([x + (i - 1) * width for x in range(len(names))], [pairs[n][i] for n in names], width, label=label)
            ax.set_xticks(range(len(names)), names, fontsize=7)
            ax.axhline(0, color="black", linewidth=0.6)
            ax.set_ylabel("USD")
            ax.legend(fontsize=7)
            out["Savings by zone pair"] = _png(fig)
            plt.close(fig)
        fig, ax = plt.subplots(figsize=(8, 3))
        keys = sorted(hours)
        ax.plot(range(len(keys)), [hours[k] for k in keys], marker="o")
        ax.set_xticks(range(len(keys)), keys, rotation=45, ha="right", fontsize=7)
        ax.set_ylabel("net savings, USD")
        out["Net savings per hour"] = _png(fig)
        plt.close(fig)
    be = tables.get("break_even")
    if be is not None and be.rows:
        rows = be.dicts()
        fig, ax = plt.subplots(figsize=(8, 3))
        ax.plot([r["mean_object_bytes"] for r in rows], [r["net_savings_usd_per_object"] for r in rows], marker="o")
        ax.axhline(0, color="black", linewidth=0.6)
        ax.set_xscale("log")
        ax.set_xlabel("WAL object size, bytes (bucket mean)")
        ax.set_ylabel("net savings per object, USD")
        out["Break-even: object size vs savings"] = _png(fig)
        plt.close(fig)
    lat = tables.get("latency")
    if lat is not None and lat.rows:
        rows = [r for r in lat.dicts() if r["p50_ms"] is not None]
        fig, ax = plt.subplots(figsize=(8, 3.5))
        names = [f"{r['route']}\n{r['source_zone']}->{r['leader_zone']}" for r in rows]
        width = 0.27
        for i, q in enumerate(("p50_ms", "p95_ms", "p99_ms")):
            ax.bar([x + (i - 1) * width for x in range(len(rows))], [r[q] for r in rows], width, label=q)
        ax.set_xticks(range(len(names)), names, fontsize=6)
        ax.set_ylabel("ms")
        ax.legend(fontsize=7)
        out["Produce latency by route and zone pair"] = _png(fig)
        plt.close(fig)
    ac = tables.get("cache_agent")
    if ac is not None and ac.rows:
        fig, ax = plt.subplots(figsize=(8, 3))
        by_zone: dict[str, list[tuple[str, float]]] = defaultdict(list)
        for r in ac.dicts():
            if r["hit_rate"] is not None:
                by_zone[r["zone"]].append((r["hour"], r["hit_rate"]))
        hours_all = sorted({h for pts in by_zone.values() for h, _ in pts})
        index = {h: i for i, h in enumerate(hours_all)}
        for zone, pts in sorted(by_zone.items()):
            ax.plot([index[h] for h, _ in pts], [v for _, v in pts], marker="o", label=zone)
        ax.set_xticks(range(len(hours_all)), hours_all, rotation=45, ha="right", fontsize=7)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("agent block cache hit rate")
        ax.legend(fontsize=7)
        out["Agent block cache hit rate"] = _png(fig)
        plt.close(fig)
    return out


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return html.escape("" if value is None else str(value))


def render_html(tables: Mapping[str, Table], summary: InputSummary, prices: Prices) -> str:
    """The whole report as one HTML document (charts inline)."""
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>azsidecar audit</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:12px}"
        "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}pre{background:#f4f4f4;padding:1em}</style>",
        "</head><body><h1>azsidecar audit</h1>",
        f"<pre>{html.escape(summary_text(tables, summary, prices))}</pre>",
        "<h2>Input</h2>", f"<pre>{html.escape(summary.message())}</pre>",
        f"<p>Prices: PUT ${prices.s3_put_per_1000}/1000, GET ${prices.s3_get_per_1000}/1000, "
        f"cross-AZ ${prices.cross_az_per_gb_each_way}/GB each way.</p>",
    ]
    for title, png in charts(tables).items():
        parts.append(f"<h2>{html.escape(title)}</h2><img alt='{html.escape(title)}' src='data:image/png;base64,{png}'>")
    for name, table in tables.items():
        parts.append(f"<h2>{html.escape(name)}</h2><table><tr>"
                     + "".join(f"<th>{html.escape(c)}</th>" for c in table.columns) + "</tr>")
        parts.extend("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>" for row in table.rows)
        parts.append("</table>")
    parts.append("</body></html>")
    return "\n".join(parts)
