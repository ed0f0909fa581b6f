"""The audit report for the people who pay: a one-screen text summary and one HTML page.

Pure Python over the small tables the jobs collected (no Spark here). What the report
says is computed by `spark_audit.report_data` (pure, tested by hand); this module words
it, `spark_audit.charts` draws it. Charts are PNGs embedded as base64 data URIs, so the
page is one file that can be mailed, stored next to the CSV tables, opened offline and
printed (A4 or Letter: print CSS keeps figures and table rows whole).
"""

from __future__ import annotations

import dataclasses
import html
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from core.framing import Framing
from core.prices import Prices
from spark_audit import charts as ch
from spark_audit import cost_split as cs
from spark_audit import report_data as rd
from spark_audit._io import InputSummary, Table
from spark_audit.applied_placement import LastApply, last_apply
from spark_audit.compute_costs import NO_COMPUTE, compute_cost
from spark_audit.formatting import duration, iec_bytes, pct, si_bytes, usd
from spark_audit.net_savings import NET_SAVINGS_COLUMNS, NetSavingsLine, net_savings_lines
from spark_audit.projection import Projection, short_duration
from spark_audit.report_options import ReportOptions

# -- words and numbers -------------------------------------------------------------------

def _utc(ms: int | None) -> str:
    return "?" if ms is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + " UTC"


def _rows(tables: Mapping[str, Table], name: str) -> list[dict[str, Any]]:
    table = tables.get(name)
    return table.dicts() if table is not None else []


def _passthrough_line(rows: Sequence[Mapping[str, Any]]) -> str:
    """One line on what consumers and admin clients moved through the sidecars."""
    cross = [r for r in rows if r["cross_zone"]]
    wire = sum(r["wire_bytes"] or 0 for r in rows)
    cross_wire = sum(r["wire_bytes"] or 0 for r in cross)
    return (f"consumer/admin traffic through the sidecars {si_bytes(wire)} on the wire; across zones "
            f"{si_bytes(cross_wire)} costing {usd(sum(r['transfer_usd'] or 0.0 for r in cross))}")


def _fetch_line(rows: Sequence[Mapping[str, Any]]) -> str:
    """One line on the record bytes consumers fetched through the sidecars, and the share a
    leader move could change (served by a leader in another zone)."""
    total = sum(r["bytes"] or 0 for r in rows)
    leader_cross = sum(r["bytes"] or 0 for r in rows if r["served_by"] == "leader" and r["cross_zone"])
    follower = sum(r["bytes"] or 0 for r in rows if r["served_by"] == "follower")
    return (f"consumer fetches through the sidecars {si_bytes(total)} of records; {si_bytes(leader_cross)} "
            f"served by a leader in another zone (what `azsidecar plan leaders` weighs), {si_bytes(follower)} "
            "by followers")


def _total(rows: Sequence[Mapping[str, Any]], *columns: str) -> float:
    return sum(float(r.get(c) or 0) for r in rows for c in columns)


def report_headline(tables: Mapping[str, Table], summary: InputSummary,
                    options: ReportOptions | None = None) -> rd.Headline | None:
    """The headline of the savings table; with the `agents` table (jobs report and all) less
    the sidecar's compute at `options`' rates."""
    options = options or ReportOptions()
    savings = _rows(tables, "savings")
    if "savings" not in tables:
        return None
    hours = len({r["hour"] for r in savings})
    period = rd.period_seconds(summary.first_ts_ms, summary.last_ts_ms, hours)
    compute = None
    if "agents" in tables:
        compute = compute_cost(options.compute, (str(r["zone"] or "") for r in _rows(tables, "agents")), period,
                               _total(savings, "bytes_local", "bytes_direct_cross"), _total(savings, "bytes_wal"))
    return rd.headline(savings, _rows(tables, "break_even"), period, compute, options.min_projection_window_s)


def stream_shares(tables: Mapping[str, Table], headline: rd.Headline) -> list[cs.StreamShare] | None:
    """Every (topic, principal)'s share of the headline's figures; None without `topic_traffic`."""
    if "topic_traffic" not in tables:
        return None
    compute = headline.compute or compute_cost(NO_COMPUTE, (), headline.period_s, 0, 0)
    return cs.split_by_stream(_rows(tables, "savings"), _rows(tables, "topic_traffic"), compute)


def _projection_text(p: Projection) -> str:
    """"$12.00 per month, $146.10 per year (from 36 h of audited traffic)" or why there is none."""
    if p.refusal is not None:
        return p.refusal
    return f"{usd(p.per_month_usd)} per month, {usd(p.per_year_usd)} per year ({p.basis})"


def placement_section(tables: Mapping[str, Table], summary: InputSummary, prices: Prices,
                      options: ReportOptions | None = None) -> rd.LeaderPlacementSection | None:
    rows = _rows(tables, "leader_traffic")
    if not rows:
        return None
    period = rd.period_seconds(summary.first_ts_ms, summary.last_ts_ms, 0)
    usd_per_byte = 2 * prices.cross_az_per_gb_each_way / rd.BYTES_PER_GB
    section = rd.leader_placement(rows, usd_per_byte, period, (options or ReportOptions()).min_projection_window_s)
    return dataclasses.replace(section, last_apply=last_apply(_rows(tables, "last_apply"), usd_per_byte))


def _placement_lines(p: rd.LeaderPlacementSection) -> list[str]:
    month = p.projection(p.available_usd)
    lines = [f"leader placement: {p.partitions:,} partitions, {pct(p.cross_bytes / p.produce_bytes if p.produce_bytes else None)}"
             f" of their produce bytes went to a leader in another zone; leaders in their producers' zone would save "
             f"{si_bytes(p.available_bytes)} ({usd(p.available_usd)}; "
             f"{month.refusal or f'{usd(month.per_month_usd)} a month'}) "
             f"in {len(p.available):,} moves, {si_bytes(p.balanced_bytes)} ({usd(p.balanced_usd)}) with leaders "
             f"balanced over the zones"]
    if p.observed:
        lines.append(f"leader moves seen in the period: {len(p.observed):,} partitions; they saved "
                     f"{si_bytes(p.observed_bytes)} ({usd(p.observed_usd)}) after the move against their leader before")
    if p.last_apply is not None:
        lines.append(_last_apply_line(p.last_apply))
    return lines


def _last_apply_line(a: LastApply) -> str:
    head = (f"last applied leader plan {a.plan_id} ({len(a.partitions):,} partitions, applied "
            f"{_utc(a.applied_from_ms)}" + ("" if a.applied_to_ms == a.applied_from_ms
                                              else f" to {_utc(a.applied_to_ms)}") + ")")
    if a.window_ms <= 0:
        return f"{head}: the audit has no produce traffic on both sides of it to compare"
    window = duration(a.window_ms / 1000)
    return (f"{head}: in the {window} after it {si_bytes(a.after_cross_bytes)} of their "
            f"{si_bytes(a.after_bytes)} produce bytes crossed zones ({usd(a.usd(a.after_cross_bytes))}), against "
            f"{si_bytes(a.before_cross_bytes)} of {si_bytes(a.before_bytes)} ({usd(a.usd(a.before_cross_bytes))}) "
            f"in the {window} before: {si_bytes(a.saved_bytes)} ({usd(a.usd(a.saved_bytes))}) less")


def episodes_section(tables: Mapping[str, Table], summary: InputSummary) -> list[rd.ZoneEpisode]:
    return rd.zone_episodes(_rows(tables, "zone_trouble"), summary.last_ts_ms)


def _episode_span(e: rd.ZoneEpisode) -> str:
    return (f"{_utc(e.start_ms)} to {_utc(e.end_ms)} ({e.minutes} min"
            + (", open at the end of the period" if e.open_at_end else "") + ")")


def _episodes_line(episodes: Sequence[rd.ZoneEpisode]) -> str:
    worst = episodes[0]
    return (f"zone episodes: {len(episodes):,} (the WAL path to a zone unhealthy or its objects unread), costing "
            f"{usd(sum(e.cost_usd for e in episodes))} in fallback transfer and unread objects' PUTs; the costliest "
            f"{worst.source_zone} -> {worst.dest_zone} {_episode_span(worst)}: {worst.fallback_batches:,} batches "
            f"({si_bytes(worst.fallback_bytes)}) sent across, {worst.failed_wal_batches:,} failed on the WAL route, "
            f"{worst.unread_objects:,} objects unread, {usd(worst.cost_usd)}")


def _episodes_html(episodes: Sequence[rd.ZoneEpisode]) -> list[str]:
    parts = ["<h2>Zone episodes</h2>",
             f"<p>{html.escape(_episodes_line(episodes)[0].upper() + _episodes_line(episodes)[1:])}. An episode is a "
             "run of minutes in which a proxy's WAL path to another zone was in trouble: batches sent across because "
             "the path was unhealthy (<code>router.fallback = \"direct\"</code>, paid at the transfer price), batches "
             "that failed on the WAL route (their producers retried them), or WAL objects that no agent of that zone "
             "read (their PUTs bought nothing). zone_trouble.csv has every minute.</p>",
             _table(["From", "To", "When (UTC)", "Sent across", "Their transfer", "Failed on the WAL route",
                     "Objects unread", "Their PUTs", "Cost"],
                    [[e.source_zone, e.dest_zone, _episode_span(e), f"{e.fallback_batches:,} ({si_bytes(e.fallback_bytes)})",
                      usd(e.fallback_transfer_usd), f"{e.failed_wal_batches:,}", f"{e.unread_objects:,}",
                      usd(e.unread_put_usd), usd(e.cost_usd)] for e in episodes[:rd.MAX_EPISODE_ROWS]],
                    text_columns=3)]
    if len(episodes) > rd.MAX_EPISODE_ROWS:
        parts.append(f"<p class='small'>The {rd.MAX_EPISODE_ROWS} costliest of {len(episodes):,} episodes.</p>")
    return parts


def prices_text(prices: Prices, framing: Framing | None = None) -> str:
    text = (f"Cross-zone transfer ${prices.cross_az_per_gb_each_way:g} per GB in each direction, so "
            f"${2 * prices.cross_az_per_gb_each_way:g} per GB that crosses (both sides are billed); "
            f"S3 PUT, LIST ${prices.s3_put_per_1000:g} and GET, HEAD ${prices.s3_get_per_1000:g} per 1,000 "
            f"requests, DELETE free; 1 GB = 10^9 bytes.")
    if framing is not None:
        text += (f" Bytes on the wire include TCP/IP headers for a path MTU of {framing.path_mtu:,} bytes"
                 + (f" and {framing.link_header_bytes}-byte link headers" if framing.link_header_bytes else "")
                 + "; a direct produce's estimate counts no pure ACKs (a lower bound), the notifications' counts"
                 " one per message (an upper bound).")
    return text


SPLIT_IN_SUMMARY = 3  # topics or teams named in the one-screen summary


def _split_line(what: str, shares: Sequence[cs.CostShare]) -> str:
    """"by topic (net savings): orders $1.20, payments $0.40, 3 more" """
    named = [f"{s.name} {usd(s.net_savings_usd)}" for s in shares[:SPLIT_IN_SUMMARY]]
    more = f", {len(shares) - SPLIT_IN_SUMMARY} more" if len(shares) > SPLIT_IN_SUMMARY else ""
    return f"{what} (net savings): " + ", ".join(named) + more


def compute_text(options: ReportOptions) -> str:
    m = options.compute
    return (f"Compute: ${m.agent_hour_usd:g} per agent-hour for {m.agents_per_zone} agent(s) per zone with agent "
            f"records; the proxies' CPU at {m.proxy_cpu_s_per_gib_local:.3g} s per GiB (local, direct_cross) and "
            f"{m.proxy_cpu_s_per_gib_wal:.3g} s per GiB (WAL), ${m.vcpu_hour_usd:g} per vCPU-hour.")


def summary_text(tables: Mapping[str, Table], summary: InputSummary, prices: Prices,
                 framing: Framing | None = None, options: ReportOptions | None = None) -> str:
    """At most one screen (about 20 lines) of headline numbers."""
    options = options or ReportOptions()
    lines = [f"azsidecar audit of {summary.source}"]
    drops = sum(r["dropped"] or 0 for r in _rows(tables, "writer_drops"))
    lines.append(f"records {summary.valid_records:,} from {summary.files} files; corrupt lines "
                 f"{summary.corrupt_lines:,}; unknown kind {summary.unknown_kind_lines:,}; "
                 f"dropped by writers {drops:,.0f}")
    h = report_headline(tables, summary, options)
    if h is not None:
        s = _rows(tables, "savings")
        lines.append(f"window {_utc(summary.first_ts_ms)} to {_utc(summary.last_ts_ms)} ({duration(h.period_s)})")
        batches = {r: sum(x.get(f"batches_{r}") or 0 for x in s) for r in ("local", "direct_cross", "wal")}
        moved = {r: sum(x.get(f"bytes_{r}") or 0 for x in s) for r in ("local", "direct_cross", "wal")}
        lines.append("produce batches  " + "  ".join(f"{r} {int(n):,} ({si_bytes(moved[r])})"
                                                     for r, n in batches.items()))
        equiv = sum(x.get("direct_equivalent_bytes") or 0 for x in s)
        crossed = sum(x.get("crossed_bytes") or 0 for x in s)
        lines.append(f"cross-zone bytes on the wire  direct produce {si_bytes(equiv)}; crossed {si_bytes(crossed)}; "
                     f"avoided {si_bytes(equiv - crossed)} ({pct((equiv - crossed) / equiv if equiv else None)})")
        lines.append(f"transfer bill  direct produce {usd(h.direct_transfer_usd)}; with azsidecar "
                     f"{usd(h.crossed_transfer_usd)} + S3 requests {usd(h.s3_usd)}")
        compute = (f" - agent tasks {usd(h.agent_usd)} - proxy CPU {usd(h.cpu_usd)}" if h.compute is not None
                   else " (compute not counted: jobs report and all count it)")
        lines.append(f"NET SAVINGS {usd(h.net_savings_usd)} = transfer avoided {usd(h.transfer_avoided_usd)} - S3 "
                     f"{usd(h.s3_usd)}{compute}; {pct(h.share_of_transfer_bill)} of the cross-zone transfer bill")
        lines.append(f"projection  {_projection_text(h.projection)}")
        if h.break_even_object_bytes is not None:
            lines.append(f"break-even WAL object size {iec_bytes(h.break_even_object_bytes)}; "
                         f"{h.objects_below_break_even:,} of {h.wal_objects:,} objects "
                         f"({si_bytes(h.bytes_below_break_even)}) sat in size classes that lost money "
                         f"({usd(h.loss_below_break_even_usd)})")
        streams = stream_shares(tables, h)
        if streams:
            lines.append(_split_line("by topic", cs.by_topic(streams)))
            if options.teams is not None:
                lines.append(_split_line("by team", cs.by_team(streams, options.teams)))
    caches = rd.cache_by_zone(_rows(tables, "cache_agent"))
    if caches:
        lines.append("agent block cache hit rate " + ", ".join(f"{c.zone} {pct(c.hit_rate)}" for c in caches))
    mc = _rows(tables, "cache_metadata")
    if mc:
        hits, lookups = sum(r["hits"] or 0 for r in mc), sum(r["lookups"] or 0 for r in mc)
        lines.append(f"router metadata cache hit rate {pct(hits / lookups if lookups else None)}")
    passed = _rows(tables, "passthrough_bytes")
    if passed:
        lines.append(_passthrough_line(passed))
    fetched = _rows(tables, "fetch_bytes")
    if fetched:
        lines.append(_fetch_line(fetched))
    for lat in rd.latency_by_route(_rows(tables, "latency")):
        lines.append(f"latency {lat.route:12s} worst pair {lat.pair}: p50 {lat.p50_ms:.1f} ms, "
                     f"p99 {lat.p99_ms:.1f} ms")
    placement = placement_section(tables, summary, prices, options)
    if placement is not None:
        lines += _placement_lines(placement)
    episodes = episodes_section(tables, summary)
    if episodes:
        lines.append(_episodes_line(episodes))
    if h is not None and h.compute is not None:
        lines.append(compute_text(options))
    lines.append(prices_text(prices, framing))
    return "\n".join(lines)


SHARE_COLUMNS = ("batches", "bytes_local", "bytes_direct_cross", "bytes_wal", "direct_transfer_usd",
                 "transfer_avoided_usd", "s3_usd", "agent_usd", "cpu_usd", "net_savings_usd")


def _share_table(name: str, first_column: str, shares: Sequence[cs.CostShare]) -> Table:
    return Table(name, (first_column, *SHARE_COLUMNS),
                 tuple((x.name, *(getattr(x, c) for c in SHARE_COLUMNS)) for x in shares))


def report_tables(tables: Mapping[str, Table], summary: InputSummary, prices: Prices,
                  options: ReportOptions | None = None) -> dict[str, Table]:
    """The tables the report adds to the jobs' (catalog.REPORT_TABLES): net_savings (the lines of
    the net savings with their projection), topic_savings and, with team rules, team_savings
    (costs as positive amounts, net_savings_usd = transfer_avoided_usd - the four costs)."""
    options = options or ReportOptions()
    h = report_headline(tables, summary, options)
    if h is None:
        return {}
    out = {"net_savings": Table("net_savings", NET_SAVINGS_COLUMNS,
                                tuple((x.line, x.usd, x.detail) for x in report_lines(tables, summary, prices, h)))}
    streams = stream_shares(tables, h)
    if streams is not None:
        out["topic_savings"] = _share_table("topic_savings", "topic", cs.by_topic(streams))
        if options.teams is not None:
            out["team_savings"] = _share_table("team_savings", "team", cs.by_team(streams, options.teams))
    return out


def charts(tables: Mapping[str, Table], headline: rd.Headline | None = None) -> dict[str, str]:
    """Chart title -> base64 PNG, for the tables that have rows."""
    drawings: list[tuple[str, Callable[[], Any]]] = []
    pairs = rd.pair_savings(_rows(tables, "savings"))
    if pairs:
        drawings.append(("Savings by zone pair", lambda: ch.chart_pairs(pairs)))
    hours = rd.savings_by_hour(_rows(tables, "savings"))
    if len(hours) > 1:
        drawings.append(("Net savings over time", lambda: ch.chart_cumulative(hours)))
    classes = rd.size_classes(_rows(tables, "break_even"))
    if classes:
        be = headline.break_even_object_bytes if headline else None
        drawings.append(("Net savings per WAL object by object size", lambda: ch.chart_break_even(classes, be)))
    routes = rd.latency_by_route(_rows(tables, "latency"))
    if routes:
        drawings.append(("Produce latency by route", lambda: ch.chart_latency(routes)))
    return {title: ch.png_base64(draw) for title, draw in drawings}


# -- HTML --------------------------------------------------------------------------------

CSS = """
:root{--ink:#1b1b1b;--muted:#5f6368;--line:#d0d4da;--good:#2e7d32;--bad:#c0392b;--accent:#1f4e79}
*{box-sizing:border-box}
body{font-family:"Liberation Sans",Arial,Helvetica,sans-serif;color:var(--ink);margin:0 auto;
     max-width:1100px;padding:24px 32px;line-height:1.4;font-size:14px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid var(--line);
   padding-bottom:4px}
p.sub{color:var(--muted);margin:0 0 16px}
.cards{display:grid;grid-template-columns:repeat(3,1fr);gap:12px;margin:16px 0}
.card{border:1px solid var(--line);border-radius:6px;padding:10px 14px}
.card .label{color:var(--muted);font-size:12px}.card .value{font-size:22px;font-weight:bold}
.card .note{color:var(--muted);font-size:12px}
.good{color:var(--good)}.bad{color:var(--bad)}
table{border-collapse:collapse;width:100%;font-size:12.5px;margin:6px 0 4px}
th,td{border-bottom:1px solid var(--line);padding:4px 8px;text-align:right;vertical-align:top}
th{background:#f3f5f7;font-weight:bold}th:first-child,td:first-child{text-align:left}
td.text,th.text{text-align:left}
figure{margin:8px 0 16px}figure img{width:100%;height:auto}
figcaption{color:var(--muted);font-size:12px}
.small{color:var(--muted);font-size:12px}
@media print{
  @page{size:A4;margin:14mm 12mm}
  body{max-width:none;padding:0;font-size:10pt}
  .cards{grid-template-columns:repeat(3,1fr)}
  h2{break-after:avoid}
  figure,.card,tr{break-inside:avoid}
  thead{display:table-header-group}
}
"""


def _table(columns: Sequence[str], rows: Sequence[Sequence[str]], text_columns: int = 1) -> str:
    head = "".join(f"<th class='text'>{html.escape(c)}</th>" if 0 < i < text_columns else f"<th>{html.escape(c)}</th>"
                   for i, c in enumerate(columns))
    body = "".join("<tr>" + "".join(
        f"<td class='text'>{html.escape(v)}</td>" if i < text_columns else f"<td>{html.escape(v)}</td>"
        for i, v in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _card(label: str, value: str, note: str = "", tone: str = "") -> str:
    return (f"<div class='card'><div class='label'>{html.escape(label)}</div>"
            f"<div class='value {tone}'>{html.escape(value)}</div><div class='note'>{html.escape(note)}</div></div>")


def _tone(x: float | None) -> str:
    return "" if x is None else ("good" if x >= 0 else "bad")


def _projection_card(label: str, value: float | None, p: Projection) -> str:
    if p.refusal is not None:
        return _card(label, "not projected", p.refusal)
    return _card(label, usd(value), f"{p.basis}, at its rate", _tone(value))


def _headline_html(h: rd.Headline, lines: Sequence[NetSavingsLine]) -> list[str]:
    p = h.projection
    parts = [
        "<div class='cards'>",
        _card("Net savings in the window", usd(h.net_savings_usd),
              f"over {duration(h.period_s)}, after S3" + (" and compute" if h.compute is not None else ""),
              _tone(h.net_savings_usd)),
        _projection_card("Projected per month", p.per_month_usd, p),
        _projection_card("Projected per year", p.per_year_usd, p),
        _card("Share of the transfer bill saved", pct(h.share_of_transfer_bill),
              f"of {usd(h.direct_transfer_usd)} a direct produce would cost", _tone(h.share_of_transfer_bill)),
        _card("S3 request cost", usd(h.s3_usd), "every PUT, LIST, GET, HEAD the product made"),
        _card("Break-even WAL object size",
              iec_bytes(h.break_even_object_bytes) if h.break_even_object_bytes is not None else "no WAL objects",
              "smaller objects cost more in requests than they save"),
        "</div>",
    ]
    if h.wal_objects:
        share = h.objects_below_break_even / h.wal_objects
        byte_share = h.bytes_below_break_even / h.wal_object_bytes if h.wal_object_bytes else None
        parts.append(f"<p>Below break-even: <b>{h.objects_below_break_even:,}</b> of {h.wal_objects:,} WAL objects "
                     f"({pct(share)}), {si_bytes(h.bytes_below_break_even)} ({pct(byte_share)} of WAL bytes), sat "
                     f"in size classes that lost money: {usd(h.loss_below_break_even_usd)} in the window.</p>")
    compute = h.agent_usd + h.cpu_usd
    parts.append(_table(
        ["Cross-zone bill", "Transfer", "S3 requests", "Compute (agents, proxy CPU)", "Total"],
        [["Direct produce (no azsidecar)", usd(h.direct_transfer_usd), usd(0), usd(0), usd(h.direct_transfer_usd)],
         ["With azsidecar", usd(h.crossed_transfer_usd), usd(h.s3_usd), usd(compute),
          usd(h.crossed_transfer_usd + h.s3_usd + compute)],
         ["Saved", usd(h.transfer_avoided_usd), usd(-h.s3_usd), usd(-compute), usd(h.net_savings_usd)]]))
    parts.append("<h2>Net savings, line by line</h2>")
    parts.append(_table(["Line", "Made of", "Amount"],
                        [[x.label, x.detail, usd(x.usd) if x.usd is not None else "not projected"] for x in lines],
                        text_columns=2))
    parts.append("<p class='small'>Costs are negative: the lines above net savings add up to it (net_savings.csv "
                 "has them). Dollars of a cent or more are rounded to the cent, smaller ones to 4 significant "
                 "digits, in the page and the CSV tables alike.</p>")
    return parts


def _pair_rows(pairs: Sequence[rd.PairSavings]) -> list[list[str]]:
    return [[p.label, si_bytes(p.wal_bytes), si_bytes(p.direct_cross_bytes), usd(p.direct_transfer_usd),
             usd(p.transfer_avoided_usd), usd(p.s3_usd), usd(p.net_savings_usd),
             pct(p.net_savings_usd / p.direct_transfer_usd if p.direct_transfer_usd else None)] for p in pairs]


def _placement_html(p: rd.LeaderPlacementSection) -> list[str]:
    parts = ["<h2>Leader placement</h2>",
             f"<p>{html.escape(_placement_lines(p)[0][0].upper() + _placement_lines(p)[0][1:])}. A byte produced to "
             "a leader in its own zone crosses nothing and needs no S3 request: moving a partition's leader to the "
             "zone most of its bytes come from (<code>azsidecar plan leaders</code>) saves it. The planner ran on "
             "this period's bytes per partition and producer zone, assuming a replica of every partition in every "
             "zone; the balanced figure keeps each zone leading at most ceil(partitions / zones) + 1 of them. "
             "Payload bytes at the transfer price; producers spread evenly over the zones leave nothing to gain.</p>"]
    if p.balanced:
        parts.append(_table(["Partition", "Leader zone now", "Move to", "Saving in the period", "Saving"],
                            [[f"{m.topic}-{m.partition}", m.from_zone, m.to_zone, si_bytes(m.saving_bytes),
                              usd(m.saving_usd)] for m in p.balanced[:rd.MAX_PLACEMENT_ROWS]], text_columns=3))
        if len(p.balanced) > rd.MAX_PLACEMENT_ROWS:
            parts.append(f"<p class='small'>The {rd.MAX_PLACEMENT_ROWS} largest of {len(p.balanced):,} balanced "
                         "moves; leader_traffic.csv has every partition's bytes.</p>")
    if p.observed:
        parts.append(f"<p>Leaders moved within the period: {len(p.observed):,} partitions. What the traffic after "
                     "each move would have crossed under the leader before, less what it crossed: "
                     f"<b>{si_bytes(p.observed_bytes)}</b> ({usd(p.observed_usd)}).</p>")
        parts.append(_table(["Partition", "Moved", "At", "Cross-zone share before", "After", "Saved", "Saved $"],
                            [[f"{m.topic}-{m.partition}", f"{m.from_zone} → {m.to_zone}", _utc(m.moved_at_ms),
                              pct(m.cross_share_before), pct(m.cross_share_after), si_bytes(m.saved_bytes),
                              usd(m.saved_usd)] for m in p.observed[:rd.MAX_PLACEMENT_ROWS]], text_columns=3))
    if p.moved_and_back:
        parts.append(f"<p class='small'>{p.moved_and_back:,} partitions had their leader leave a zone and come back "
                     "within the period (a broker restart, an election): not counted as moves.</p>")
    if p.last_apply is not None:
        parts += _last_apply_html(p.last_apply)
    return parts


def _last_apply_html(a: LastApply) -> list[str]:
    line = _last_apply_line(a)
    parts = ["<h3>What the last applied placement saved</h3>",
             f"<p>{html.escape(line[0].upper() + line[1:])}. From the <code>leader_move</code> records "
             "<code>azsidecar plan leaders --apply</code> wrote: the moved partitions' produce bytes in the window "
             "after the apply against the same-length window before it (as long as the audit holds both; the "
             "batches during the apply are in neither). Measured, not modelled: traffic that changed between the "
             "windows changes the comparison, so the bytes produced are shown beside those that crossed.</p>"]
    if a.window_ms > 0:
        parts.append(_table(["Partition", "Moved", "Crossed before", "Produced before", "Crossed after",
                             "Produced after", "Less crossed", "Less crossed $"],
                            [[f"{m.topic}-{m.partition}", f"{m.from_zone} → {m.to_zone}",
                              si_bytes(m.before_cross_bytes), si_bytes(m.before_bytes), si_bytes(m.after_cross_bytes),
                              si_bytes(m.after_bytes), si_bytes(m.saved_bytes), usd(a.usd(m.saved_bytes))]
                             for m in a.partitions[:rd.MAX_PLACEMENT_ROWS]], text_columns=2))
        if len(a.partitions) > rd.MAX_PLACEMENT_ROWS:
            parts.append(f"<p class='small'>The first {rd.MAX_PLACEMENT_ROWS} of {len(a.partitions):,} moved "
                         "partitions; last_apply.csv has every one.</p>")
    return parts


MAX_SPLIT_ROWS = 20  # topics or teams listed on the page (topic_savings.csv and team_savings.csv have all)
APPORTIONED = ("Apportioned by bytes, not measured per topic: the transfer a direct produce would cost by the "
               "topic's cross-zone bytes in each zone pair; the transfer avoided and the S3 requests by its WAL "
               "bytes in each zone pair, since a WAL object, its PUT, GETs and notifications carry many topics' "
               "batches; the S3 requests of no zone pair (epochs, GC) and the agent tasks by its WAL bytes over "
               "the window; the proxy CPU by its bytes per route at the CPU rates. The rows add up to the totals "
               "above.")


def _split_html(title: str, first_column: str, rest_label: str, shares: Sequence[cs.CostShare],
                note: str) -> list[str]:
    rows = cs.top(shares, MAX_SPLIT_ROWS, rest_label)
    parts = [f"<h2>{html.escape(title)}</h2>", f"<p class='small'>{html.escape(note)}</p>",
             _table([first_column, "Via S3 (WAL)", "Sent across directly", "Direct-produce transfer",
                     "Transfer avoided", "S3 requests", "Agent tasks", "Proxy CPU", "Net savings"],
                    [[x.name, si_bytes(x.bytes_wal), si_bytes(x.bytes_direct_cross), usd(x.direct_transfer_usd),
                      usd(x.transfer_avoided_usd), usd(-x.s3_usd), usd(-x.agent_usd), usd(-x.cpu_usd),
                      usd(x.net_savings_usd)] for x in rows])]
    if len(shares) > len(rows):
        parts.append(f"<p class='small'>The {MAX_SPLIT_ROWS - 1} largest of {len(shares):,}, the rest summed.</p>")
    return parts


def _team_note(options: ReportOptions, streams: Sequence[cs.StreamShare]) -> str:
    produced = sum(s.share.bytes_local + s.share.bytes_direct_cross + s.share.bytes_wal for s in streams)
    unknown = sum(s.share.bytes_local + s.share.bytes_direct_cross + s.share.bytes_wal
                  for s in streams if not s.principal and s.topic != cs.NOT_TIED)
    return (f"Teams by the rules of {options.teams_source}: the first rule whose principal and/or topic prefix "
            f"matches a stream (its topic and the client's Kafka principal) names the team; streams no rule "
            f"matches are \"unassigned\". {pct(unknown / produced if produced else None)} of the produce bytes carry "
            "no principal (records before audit schema v11): only topic rules match them. " + APPORTIONED.replace("topic's", "stream's").replace("topics'", "streams'"))


def window_text(summary: InputSummary) -> str:
    return f"{_utc(summary.first_ts_ms)} to {_utc(summary.last_ts_ms)}"


def report_lines(tables: Mapping[str, Table], summary: InputSummary, prices: Prices, h: rd.Headline) -> list[NetSavingsLine]:
    return net_savings_lines(h, _rows(tables, "savings"), prices, window_text(summary))


def render_html(tables: Mapping[str, Table], summary: InputSummary, prices: Prices,
                framing: Framing | None = None, options: ReportOptions | None = None) -> str:
    """The whole report as one HTML document (charts inline, print styles included)."""
    options = options or ReportOptions()
    h = report_headline(tables, summary, options)
    period = window_text(summary)
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        "<title>azsidecar: cross-zone savings report</title>",
        f"<style>{CSS}</style></head><body>",
        "<h1>Cross-zone transfer savings</h1>",
        f"<p class='sub'>{html.escape(period)} &middot; {summary.valid_records:,} audit records from "
        f"{summary.files:,} files &middot; {html.escape(summary.source)}</p>",
    ]
    if h is not None:
        parts += _headline_html(h, report_lines(tables, summary, prices, h))
    images = charts(tables, h)
    captions = {
        "Savings by zone pair": "Per producer zone → partition-leader zone over the period. Net = transfer "
                                "avoided − S3 request cost.",
        "Net savings over time": "Running total of the transfer avoided less S3 requests, hour by hour (UTC); "
                                 "the compute lines are over the whole window, not per hour.",
        "Net savings per WAL object by object size": "WAL objects grouped by size (powers of two). Objects "
                                                     "smaller than the break-even size lose money.",
        "Produce latency by route": "Time from receiving a batch to having its result, successful batches; "
                                    "for each route the zone pair with the highest p99.",
    }

    def figure(title: str) -> None:
        if title in images:
            parts.append(f"<figure><img alt='{html.escape(title)}' src='data:image/png;base64,{images[title]}'>"
                         f"<figcaption>{html.escape(captions[title])}</figcaption></figure>")

    savings = _rows(tables, "savings")
    if savings:
        parts.append("<h2>Where the savings come from</h2>")
        figure("Savings by zone pair")
        parts.append(_table(["Zone pair", "Via S3 (WAL)", "Sent across directly", "Direct-produce transfer",
                             "Transfer avoided", "S3 requests", "Net of S3", "Share saved"],
                            _pair_rows(rd.pair_savings(savings))))
        hours = rd.savings_by_hour(savings)
        figure("Net savings over time")
        shown = hours[-rd.MAX_HOURS_LISTED:]
        parts.append("<h2>Savings by hour</h2>")
        if len(hours) > len(shown):
            parts.append(f"<p class='small'>The last {len(shown)} of {len(hours)} hours; every hour and zone "
                         "pair is in savings.csv.</p>")
        parts.append(_table(["Hour (UTC)", "Direct-produce transfer", "Net of S3", "Net of S3 so far"],
                            [[x.hour.replace("T", " ").replace("Z", ""), usd(x.direct_transfer_usd),
                              usd(x.net_savings_usd), usd(x.cumulative_usd)] for x in shown]))
        streams = stream_shares(tables, h) if h is not None else None
        if streams:
            parts += _split_html("By topic", "Topic", "other topics", cs.by_topic(streams), APPORTIONED)
            if options.teams is not None:
                parts += _split_html("By team", "Team", "other teams", cs.by_team(streams, options.teams),
                                     _team_note(options, streams))
    classes = rd.size_classes(_rows(tables, "break_even"))
    if classes:
        parts.append("<h2>WAL object size and break-even</h2>")
        figure("Net savings per WAL object by object size")
        parts.append(_table(["Object size class", "Objects", "Average object", "Net savings per object",
                             "Net savings"],
                            [[f"{iec_bytes(c.lower_bytes)} – {iec_bytes(2 * c.lower_bytes)}", f"{c.objects:,}",
                              iec_bytes(c.mean_object_bytes), usd(c.net_per_object_usd), usd(c.net_savings_usd)]
                             for c in classes]))
    routes = rd.latency_by_route(_rows(tables, "latency"))
    if routes:
        parts.append("<h2>Produce latency</h2>")
        figure("Produce latency by route")
        parts.append(_table(["Route", "Worst zone pair", "Batches", "p50", "p95", "p99"],
                            [[r.route, r.pair, f"{r.batches:,}", f"{r.p50_ms:.1f} ms", f"{r.p95_ms:.1f} ms",
                              f"{r.p99_ms:.1f} ms"] for r in routes], text_columns=2))
    caches = rd.cache_by_zone(_rows(tables, "cache_agent"))
    if caches:
        parts.append("<h2>Agents' block cache</h2>")
        parts.append(_table(["Agent zone", "Reads", "Lookups hit", "Bytes from cache"],
                            [[c.zone, f"{c.reads:,}", pct(c.hit_rate), pct(c.byte_hit_rate)] for c in caches]))
    passed = _rows(tables, "passthrough_bytes")
    if passed:
        parts.append("<h2>Consumers and admin clients through the sidecars</h2>")
        parts.append(f"<p class='small'>{html.escape(_passthrough_line(passed))}.</p>")
        parts.append(_table(["Client zone", "Broker zone", "API", "Requests", "Bytes on the wire", "Transfer cost"],
                            [[r["zone"], r["broker_zone"] or "unknown", r["api"], f"{r['requests']:,}",
                              si_bytes(r["wire_bytes"]), usd(r["transfer_usd"]) if r["transfer_usd"] is not None
                              else "unknown"] for r in passed], text_columns=3))
    fetched = _rows(tables, "fetch_bytes")
    if fetched:
        parts.append("<h2>Consumer fetches by who served them</h2>")
        parts.append(f"<p class='small'>{html.escape(_fetch_line(fetched))}; part of the Fetch bytes above, "
                     "not more.</p>")
        parts.append(_table(["Consumer zone", "Broker zone", "Served by", "Record bytes"],
                            [[r["zone"], r["broker_zone"] or "unknown", r["served_by"], si_bytes(r["bytes"])]
                             for r in fetched], text_columns=3))
    placement = placement_section(tables, summary, prices, options)
    if placement is not None:
        parts += _placement_html(placement)
    episodes = episodes_section(tables, summary)
    if episodes:
        parts += _episodes_html(episodes)
    parts.append("<h2>Data quality and method</h2>")
    drops = _rows(tables, "writer_drops")
    quality = [["Records read", f"{summary.valid_records:,}"], ["Files", f"{summary.files:,}"],
               ["Corrupt lines (counted, left out)", f"{summary.corrupt_lines:,}"],
               ["Lines of an unknown kind", f"{summary.unknown_kind_lines:,}"],
               ["Records the writers dropped", f"{sum(r['dropped'] or 0 for r in drops):,}"],
               ["Schema versions", ", ".join(f"v{v}: {n:,}" for v, n in sorted(summary.versions.items()))]]
    parts.append(_table(["Check", "Count"], quality))
    parts.append(f"<p class='small'>{html.escape(prices_text(prices, framing))} "
                 f"{html.escape(compute_text(options))} The projections scale the window's net savings to a month "
                 f"(30.4 days) and a year (365.25 days) at the observed rate, and only from a window of "
                 f"{html.escape(short_duration(options.min_projection_window_s))} of audited traffic or more "
                 "(<code>--min-projection-hours</code>). Method: docs/audit-records.md; checking the figures against "
                 "the AWS Cost and Usage Report: docs/cost-reconciliation.md. Every table in full: the CSV files "
                 "next to this page.</p>")
    parts.append("</body></html>")
    return "\n".join(parts)
