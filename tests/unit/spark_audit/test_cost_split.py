"""Savings and costs per topic and per team (spark_audit.cost_split), apportioned by hand.

The input, in GiB (G) of produce bytes per (source zone -> leader zone, topic, principal):
  az1 -> az2  orders       User:orders-app  WAL 6G
  az1 -> az2  payments.eu  User:pay         WAL 2G, direct_cross 2G
  az2 -> az1  orders       User:orders-app  direct_cross 1G
  az2 -> az1  logs         (no principal)   direct_cross 1G
  az2 -> az2  logs                          local 5G
  az1 -> az1  logs                          local 10G
and dollars per zone pair (the savings table, two hours of az1 -> az2):
  az1 -> az2        direct 10, avoided 8, S3 1.2 (PUT 1.0 + GET 0.2)
  az2 -> az1        direct 2 (all sent across: nothing avoided)
  az1 -> (shared)   S3 0.3 (epochs, GC)
  az3 -> unknown    S3 0.1 (an object that named no zone: no stream's bytes there)
Compute: 2 agent zones x 1 agent x 1 h x $0.06 = $0.12; CPU at 1 s/GiB forwarded, 2 s/GiB WAL,
$3.6 a vCPU-hour ($0.001 a CPU-second).
"""

from __future__ import annotations

import pytest

from core.prices import Prices
from spark_audit import cost_split as cs
from spark_audit._io import InputSummary, Table
from spark_audit.compute_costs import GIB, ComputeModel, compute_cost
from spark_audit.report import render_html, report_tables, summary_text
from spark_audit.report_options import ReportOptions
from spark_audit.rounding import csv_text
from spark_audit.teams import TeamRule, TeamRules

G = GIB
MODEL = ComputeModel(agent_hour_usd=0.06, vcpu_hour_usd=3.6, agents_per_zone=1,
                     proxy_cpu_s_per_gib_local=1.0, proxy_cpu_s_per_gib_wal=2.0)


def traffic(source, leader, topic, principal, batches, local=0, dc=0, wal=0):
    return {"source_zone": source, "leader_zone": leader, "topic": topic, "principal": principal,
            "batches": batches, "bytes_local": local, "bytes_direct_cross": dc, "bytes_wal": wal}


def saving(hour, source, leader, direct=0.0, avoided=0.0, put=0.0, get=0.0, local=0, dc=0, wal=0):
    return {"hour": hour, "source_zone": source, "leader_zone": leader, "direct_transfer_usd": direct,
            "transfer_avoided_usd": avoided, "s3_put_usd": put, "s3_get_usd": get,
            "net_savings_usd": avoided - put - get, "bytes_local": local, "bytes_direct_cross": dc, "bytes_wal": wal}


TRAFFIC = [
    traffic("az1", "az2", "orders", "User:orders-app", 6, wal=6 * G),
    traffic("az1", "az2", "payments.eu", "User:pay", 4, dc=2 * G, wal=2 * G),
    traffic("az2", "az1", "orders", "User:orders-app", 1, dc=1 * G),
    traffic("az2", "az1", "logs", "", 3, dc=1 * G),
    traffic("az2", "az2", "logs", "", 0, local=5 * G),
    traffic("az1", "az1", "logs", None, 2, local=10 * G),  # an older record: principal null
]
H0, H1 = "2026-01-01T00:00Z", "2026-01-01T01:00Z"
SAVINGS = [
    saving(H0, "az1", "az2", direct=6, avoided=5, put=0.6, get=0.1, dc=1 * G, wal=5 * G),
    saving(H1, "az1", "az2", direct=4, avoided=3, put=0.4, get=0.1, dc=1 * G, wal=3 * G),
    saving(H0, "az2", "az1", direct=2, dc=2 * G),
    saving(H0, "az2", "az2", local=5 * G),
    saving(H0, "az1", "az1", local=10 * G),
    saving(H1, "az1", "(shared)", put=0.3),
    saving(H1, "az3", "unknown", put=0.1),
]
# forwarded: local 15G + direct_cross 4G = 19 CPU-s; WAL 8G x 2 = 16 CPU-s; 35 CPU-s = $0.035
COMPUTE = compute_cost(MODEL, ["az1", "az2"], 3600, 19 * G, 8 * G)


def test_each_figure_is_apportioned_by_its_own_bytes():
    topics = {s.name: s for s in cs.by_topic(cs.split_by_stream(SAVINGS, TRAFFIC, COMPUTE))}
    orders, payments, logs = topics["orders"], topics["payments.eu"], topics["logs"]
    # direct: az1 -> az2 $10 by cross-zone bytes 6G : 4G; az2 -> az1 $2 by 1G : 1G
    assert (orders.direct_transfer_usd, payments.direct_transfer_usd, logs.direct_transfer_usd) == \
        pytest.approx((6 + 1, 4, 1))
    # avoided: az1 -> az2 $8 by WAL bytes 6G : 2G
    assert (orders.transfer_avoided_usd, payments.transfer_avoided_usd, logs.transfer_avoided_usd) == \
        pytest.approx((6, 2, 0))
    # S3: az1 -> az2 $1.2 by WAL 6 : 2 (0.9, 0.3); the pool of (shared) 0.3 + unknown 0.1 = 0.4 over the
    # window's WAL bytes 6 : 2 (0.3, 0.1)
    assert (orders.s3_usd, payments.s3_usd, logs.s3_usd) == pytest.approx((1.2, 0.4, 0))
    # agents $0.12 by WAL bytes over the window 6 : 2
    assert (orders.agent_usd, payments.agent_usd, logs.agent_usd) == pytest.approx((0.09, 0.03, 0))
    # CPU-s: orders 1G x 1 + 6G x 2 = 13; payments 2 + 2 x 2 = 6; logs (1 + 5 + 10) x 1 = 16; $0.001 each
    assert (orders.cpu_usd, payments.cpu_usd, logs.cpu_usd) == pytest.approx((0.013, 0.006, 0.016))
    # net: 6 - 1.2 - 0.09 - 0.013 = 4.697; 2 - 0.4 - 0.03 - 0.006 = 1.564; -0.016
    assert [(s.name, pytest.approx(s.net_savings_usd)) for s in topics.values()] == [
        ("orders", 4.697), ("payments.eu", 1.564), ("logs", -0.016)]
    assert (orders.batches, orders.bytes_wal, orders.bytes_direct_cross, logs.bytes_local) == (7, 6 * G, G, 15 * G)


def test_the_split_adds_up_to_the_totals():
    t = cs.total(cs.by_topic(cs.split_by_stream(SAVINGS, TRAFFIC, COMPUTE)))
    # direct 10 + 2; avoided 8; S3 1.2 + 0.3 + 0.1; agents 0.12; CPU 0.035
    assert (t.direct_transfer_usd, t.transfer_avoided_usd, t.s3_usd, t.agent_usd, t.cpu_usd) == \
        pytest.approx((12, 8, 1.6, 0.12, 0.035))


RULES = TeamRules((TeamRule("orders", principal="User:orders-app"),
                   TeamRule("never", principal="User:pay", topic_prefix="x."),  # both must match: it never does
                   TeamRule("payments", topic_prefix="payments.")))


def test_teams_by_first_matching_rule_and_unassigned():
    teams = cs.by_team(cs.split_by_stream(SAVINGS, TRAFFIC, COMPUTE), RULES)
    assert [(s.name, pytest.approx(s.net_savings_usd)) for s in teams] == [
        ("orders", 4.697), ("payments", 1.564), ("unassigned", -0.016)]


def test_costs_no_stream_can_carry_are_one_entry_of_their_own():
    only_local = [traffic("az1", "az1", "logs", "", 2, local=10 * G)]
    savings = [saving(H0, "az1", "az1", local=10 * G), saving(H0, "az1", "(shared)", put=0.3)]
    compute = compute_cost(MODEL, ["az1", "az2"], 3600, 10 * G, 0)
    topics = cs.by_topic(cs.split_by_stream(savings, only_local, compute))
    # nothing went the WAL route: the epochs' $0.3 and the agents' $0.12 have no WAL bytes to follow
    assert [(s.name, pytest.approx(s.s3_usd), pytest.approx(s.agent_usd), pytest.approx(s.cpu_usd))
            for s in topics] == [("logs", 0, 0, 0.010), (cs.NOT_TIED, 0.3, 0.12, 0)]


def test_top_sums_the_rest_and_keeps_the_untied_last():
    shares = [cs.CostShare("a", transfer_avoided_usd=3), cs.CostShare("b", transfer_avoided_usd=2),
              cs.CostShare("c", transfer_avoided_usd=1), cs.CostShare(cs.NOT_TIED, agent_usd=1)]
    assert [(s.name, s.transfer_avoided_usd) for s in cs.top(shares, 2, "other topics")] == [
        ("a", 3), ("other topics (2)", 3), (cs.NOT_TIED, 0)]


def _table(name, rows):
    columns = tuple(rows[0])
    return Table(name, columns, tuple(tuple(r.get(c) for c in columns) for r in rows))


TABLES = {"savings": _table("savings", SAVINGS), "topic_traffic": _table("topic_traffic", TRAFFIC),
          "agents": Table("agents", ("zone", "records", "first_ts_ms", "last_ts_ms"), (("az1", 1, 0, 0),
                                                                                        ("az2", 1, 0, 0)))}
SUMMARY = InputSummary("audit-out", files=1, lines=10, records_by_kind={"produce_batch": 10}, corrupt_lines=0,
                       unknown_kind_lines=0, newer_version_lines=0, versions={10: 5, 11: 5},
                       first_ts_ms=1_767_225_600_000, last_ts_ms=1_767_225_600_000 + 3_600_000)
OPTIONS = ReportOptions(compute=MODEL, teams=RULES, teams_source="teams.toml")


def test_topic_savings_csv_as_text():
    tables = report_tables(TABLES, SUMMARY, Prices(), OPTIONS)
    assert sorted(tables) == ["net_savings", "team_savings", "topic_savings"]
    topic = tables["topic_savings"]
    # dollars to the cent (0.09 agents; 0.013 CPU -> 0.01), below a cent to 4 digits (0.006); bytes whole
    assert csv_text(topic.columns, topic.rows) == (
        "topic,batches,bytes_local,bytes_direct_cross,bytes_wal,direct_transfer_usd,transfer_avoided_usd,s3_usd,"
        "agent_usd,cpu_usd,net_savings_usd\r\n"
        "orders,7,0,1073741824,6442450944,7.00,6.00,1.20,0.09,0.01,4.70\r\n"
        "payments.eu,4,0,2147483648,2147483648,4.00,2.00,0.40,0.03,0.006,1.56\r\n"
        "logs,5,16106127360,1073741824,0,1.00,0.00,0.00,0.00,0.02,-0.02\r\n")
    assert [r[0] for r in tables["team_savings"].rows] == ["orders", "payments", "unassigned"]


def test_the_page_and_the_summary_show_the_split():
    text = summary_text(TABLES, SUMMARY, Prices(), options=OPTIONS)
    assert "by topic (net savings): orders $4.70, payments.eu $1.56, logs -$0.02" in text
    assert "by team (net savings): orders $4.70, payments $1.56, unassigned -$0.02" in text
    page = render_html(TABLES, SUMMARY, Prices(), options=OPTIONS)
    topic_section = page.split("<h2>By topic</h2>")[1].split("</table>")[0]
    assert topic_section.count("<tr>") == 1 + 3 and "Apportioned by bytes" in topic_section
    team_section = page.split("<h2>By team</h2>")[1].split("</table>")[0]
    # logs: 16G of the 27G produced carry no principal (the null one and the "" ones)
    assert "Teams by the rules of teams.toml" in team_section and "59.3 % of the produce bytes carry" in team_section
    assert "By team" not in render_html(TABLES, SUMMARY, Prices(), options=ReportOptions(compute=MODEL))
