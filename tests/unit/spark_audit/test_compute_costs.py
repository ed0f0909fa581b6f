"""The sidecar's own compute in the net savings (spark_audit.compute_costs, net_savings), by hand."""

from __future__ import annotations

import pytest

from core.prices import Prices
from spark_audit import report_data as rd
from spark_audit._io import InputSummary, Table
from spark_audit.compute_costs import GIB, ComputeModel, compute_cost
from spark_audit.net_savings import net_savings_lines
from spark_audit.report import report_tables, summary_text
from spark_audit.report_options import ReportOptions

# Round rates so the arithmetic is in the comments: $0.05 an agent-hour, two agents per zone,
# $0.036 a vCPU-hour (= $0.00001 a CPU-second), 5 CPU-s per GiB forwarded, 8 per GiB on the WAL route.
MODEL = ComputeModel(agent_hour_usd=0.05, vcpu_hour_usd=0.036, agents_per_zone=2,
                     proxy_cpu_s_per_gib_local=5.0, proxy_cpu_s_per_gib_wal=8.0)


def test_agents_are_the_zones_with_agent_records_times_agents_per_zone():
    c = compute_cost(MODEL, ["az2", "az1", "az3", "az2", ""], window_s=7200, forwarded_bytes=2 * GIB,
                     wal_bytes=3 * GIB)
    assert (c.agent_zones, c.agents, c.agent_hours) == (("az1", "az2", "az3"), 6, 12.0)
    assert c.agent_usd == pytest.approx(0.60)  # 6 agents x 2 h x $0.05
    assert c.cpu_seconds == pytest.approx(34.0)  # 2 GiB x 5 s + 3 GiB x 8 s
    assert c.cpu_usd == pytest.approx(0.00034)  # 34 s x $0.036 / 3600 s
    assert c.total_usd == pytest.approx(0.60034)


def test_default_rates_are_the_documented_ones():
    m = ComputeModel()
    assert m.agent_hour_usd == pytest.approx(0.04937)  # Fargate 1 vCPU $0.04048 + 2 GB x $0.004445
    assert m.vcpu_hour_usd == 0.04048
    # docs/benchmarks.md: 3.77 + 1.05 ms and 4.06 + 1.21 ms of proxy CPU per MiB, x 1024 MiB per GiB
    assert m.proxy_cpu_s_per_gib_local == pytest.approx(4.93568)
    assert m.proxy_cpu_s_per_gib_wal == pytest.approx(5.39648)


SAVINGS = [
    {"hour": "2026-01-01T00:00Z", "source_zone": "az1", "leader_zone": "az2", "direct_transfer_usd": 10.0,
     "transfer_avoided_usd": 9.0, "s3_put_usd": 1.2, "s3_get_usd": 0.3, "net_savings_usd": 7.5,
     "cross_bytes_avoided": 450_000_000_000, "s3_put_requests": 240_000.0, "s3_get_requests": 750_000.0,
     "bytes_local": 2 * GIB, "bytes_direct_cross": 0, "bytes_wal": 3 * GIB},
]


def test_net_savings_take_off_s3_agents_and_cpu_as_separate_lines():
    c = compute_cost(MODEL, ["az1", "az2", "az3"], 7200, 2 * GIB, 3 * GIB)
    h = rd.headline(SAVINGS, [], period_s=7200, compute=c)
    # 9 avoided - 1.5 S3 - 0.60 agents - 0.00034 CPU
    assert h.net_savings_usd == pytest.approx(6.89966)
    assert h.share_of_transfer_bill == pytest.approx(0.689966)
    lines = {x.line: x for x in net_savings_lines(h, SAVINGS, Prices())}
    assert [(k, pytest.approx(x.usd) if x.usd is not None else None) for k, x in lines.items()] == [
        ("transfer_avoided", 9.0), ("s3_requests", -1.5), ("agent_tasks", -0.60), ("proxy_cpu", -0.00034),
        ("net_savings", 6.89966),
        ("projected_per_month", 6.89966 * 365.25),  # two hours -> 730.5 / 2 per month
        ("projected_per_year", 6.89966 * 4383),  # 8,766 / 2 per year
        ("direct_produce_transfer", 10.0),
    ]
    assert lines["agent_tasks"].detail == "6 agents (3 zones with agent records x 2) x 2 h at $0.05 per agent-hour"
    assert lines["proxy_cpu"].detail == ("34 CPU-s: 2 GiB local and direct_cross x 5 s/GiB + 3 GiB WAL x 8 s/GiB, "
                                         "at $0.036 per vCPU-hour")
    assert lines["transfer_avoided"].detail.startswith("450.0 GB on the wire that did not cross zones, at $0.02")
    assert lines["s3_requests"].detail.startswith("240,000 PUT and LIST, 750,000 GET and HEAD requests")
    # the four lines above net savings add up to it
    assert sum(lines[k].usd or 0 for k in ("transfer_avoided", "s3_requests", "agent_tasks", "proxy_cpu")) == \
        pytest.approx(lines["net_savings"].usd)


def _tables() -> dict[str, Table]:
    columns = tuple(SAVINGS[0])
    return {"savings": Table("savings", columns, tuple(tuple(r[c] for c in columns) for r in SAVINGS)),
            "agents": Table("agents", ("zone", "records", "first_ts_ms", "last_ts_ms"),
                            (("az1", 5, 0, 1), ("az2", 7, 0, 1), ("az3", 1, 0, 1)))}


SUMMARY = InputSummary("audit-out", files=1, lines=10, records_by_kind={"produce_batch": 10}, corrupt_lines=0,
                       unknown_kind_lines=0, newer_version_lines=0, versions={10: 10},
                       first_ts_ms=1_767_225_600_000, last_ts_ms=1_767_225_600_000 + 7_200_000)


def test_the_report_counts_compute_from_the_agents_table():
    options = ReportOptions(compute=MODEL)
    text = summary_text(_tables(), SUMMARY, Prices(), options=options)
    assert ("NET SAVINGS $6.90 = transfer avoided $9.00 - S3 $1.50 - agent tasks $0.60 - proxy CPU $0.00034; "
            "69.0 % of the cross-zone transfer bill") in text
    (net,) = report_tables(_tables(), SUMMARY, Prices(), options).values()  # no topic_traffic: no split
    assert net.columns == ("line", "usd", "detail")
    assert [(r[0], pytest.approx(r[1]) if r[1] is not None else None) for r in net.rows][:5] == [
        ("transfer_avoided", 9.0), ("s3_requests", -1.5), ("agent_tasks", -0.60), ("proxy_cpu", -0.00034),
        ("net_savings", 6.89966)]


def test_without_the_agents_table_compute_is_not_counted():
    tables = {"savings": _tables()["savings"]}
    h = rd.headline(SAVINGS, [], period_s=7200)
    assert (h.agent_usd, h.cpu_usd, h.net_savings_usd) == (0.0, 0.0, 7.5)
    assert "compute not counted" in summary_text(tables, SUMMARY, Prices(), options=ReportOptions(compute=MODEL))
