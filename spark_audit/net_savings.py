"""Net savings as separate lines, each with what it is made of: the page's bill and net_savings.csv.

    transfer avoided - S3 requests - agent tasks - proxy CPU = net savings
    projected per month and per year (or why not: spark_audit.projection)
    the transfer a direct produce would have cost (the base of the "share saved")

Costs are negative amounts, so the four lines above net savings add up to it. Pure: the
headline (`report_data.headline`), the savings rows and the prices in, lines out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.prices import Prices
from spark_audit.compute_costs import GIB
from spark_audit.formatting import si_bytes
from spark_audit.projection import short_duration
from spark_audit.report_data import Headline

NET_SAVINGS_COLUMNS = ("line", "usd", "detail")


@dataclass(frozen=True)
class NetSavingsLine:
    line: str  # its name in net_savings.csv
    label: str  # its name on the page
    usd: float | None  # None: not projected (the detail says why)
    detail: str


def _sum(rows: Sequence[Mapping[str, Any]], column: str) -> float:
    return sum(float(r.get(column) or 0) for r in rows)


def _gib(n: float) -> str:
    return f"{n / GIB:,.3g} GiB"


def net_savings_lines(h: Headline, savings: Sequence[Mapping[str, Any]], prices: Prices,
                      window_text: str = "") -> list[NetSavingsLine]:
    """The lines of `h`; `savings`: the savings rows it was made from (for the quantities);
    `window_text`: the window's dates, quoted beside the projection."""
    avoided_bytes = _sum(savings, "cross_bytes_avoided")
    puts, gets = _sum(savings, "s3_put_requests"), _sum(savings, "s3_get_requests")
    lines = [
        NetSavingsLine("transfer_avoided", "Transfer avoided", h.transfer_avoided_usd,
                       f"{si_bytes(avoided_bytes)} on the wire that did not cross zones, at "
                       f"${2 * prices.cross_az_per_gb_each_way:g} per GB (${prices.cross_az_per_gb_each_way:g} "
                       "on each side)"),
        NetSavingsLine("s3_requests", "S3 requests", -h.s3_usd,
                       f"{puts:,.0f} PUT and LIST, {gets:,.0f} GET and HEAD requests (WAL objects, checkpoints, "
                       "epochs, GC)"),
    ]
    c = h.compute
    if c is not None:
        m = c.model
        lines.append(NetSavingsLine(
            "agent_tasks", "Agent tasks", -c.agent_usd,
            f"{c.agents} agents ({len(c.agent_zones)} zones with agent records x {m.agents_per_zone}) x "
            f"{c.window_s / 3600:,.3g} h at ${m.agent_hour_usd:g} per agent-hour"))
        lines.append(NetSavingsLine(
            "proxy_cpu", "Proxy CPU", -c.cpu_usd,
            f"{c.cpu_seconds:,.3g} CPU-s: {_gib(c.forwarded_bytes)} local and direct_cross x "
            f"{m.proxy_cpu_s_per_gib_local:.3g} s/GiB + {_gib(c.wal_bytes)} WAL x {m.proxy_cpu_s_per_gib_wal:.3g} "
            f"s/GiB, at ${m.vcpu_hour_usd:g} per vCPU-hour"))
    lines.append(NetSavingsLine("net_savings", "Net savings", h.net_savings_usd,
                                "transfer avoided - S3 requests" + (" - agent tasks - proxy CPU" if c else "")
                                + f", over {short_duration(h.period_s)} of audited traffic"))
    p = h.projection
    basis = p.refusal or (p.basis + (f" ({window_text})" if window_text else ""))
    rule = f"; projections need {short_duration(p.min_window_s)} of audited traffic or more"
    lines.append(NetSavingsLine("projected_per_month", "Projected per month", p.per_month_usd, basis + rule))
    lines.append(NetSavingsLine("projected_per_year", "Projected per year", p.per_year_usd, basis + rule))
    lines.append(NetSavingsLine("direct_produce_transfer", "Transfer a direct produce would cost",
                                h.direct_transfer_usd, "not part of the sum: the bill the share saved is of"))
    return lines
