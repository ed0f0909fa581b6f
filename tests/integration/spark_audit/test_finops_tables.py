"""The Spark side of the FinOps split: bytes per topic and principal, the agents' zones; the
report's tables end to end on hand-made records (expected values worked out in comments)."""

from __future__ import annotations

import csv
import io

from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual

from core.prices import Prices
from spark_audit import jobs
from spark_audit._io import load, read_lines, release
from spark_audit.compute_costs import ComputeModel
from spark_audit.report_options import ReportOptions
from spark_audit.run import run
from spark_audit.teams import TeamRule, TeamRules
from tests.integration.spark_audit.conftest import H0_MS, HOUR_MS, rec, write_jsonl


def records() -> list[dict]:
    """az1 produces orders (User:orders-app, v11) and payments (User:pay) to az2 through the
    WAL, one orders batch across directly, a local batch of a v10 record (no principal),
    a failed WAL batch (it counts, as in `savings`); agents write in az2 and az3."""
    return [
        rec("produce_batch", "az1", version=11, leader_zone="az2", route="wal", bytes=3_000, topic="orders",
            principal="User:orders-app", partition=0, error_code=0),
        rec("produce_batch", "az1", H0_MS + 1, version=11, leader_zone="az2", route="wal", bytes=1_000,
            topic="orders", principal="User:orders-app", partition=1, error_code=0),
        rec("produce_batch", "az1", version=11, leader_zone="az2", route="direct_cross", bytes=500, topic="orders",
            principal="User:orders-app", partition=2, error_code=0),
        rec("produce_batch", "az1", version=11, leader_zone="az2", route="wal", bytes=2_000, topic="payments",
            principal="User:pay", partition=0, error_code=87),
        rec("produce_batch", "az1", version=10, leader_zone="az1", route="local", bytes=700, topic="logs",
            partition=0, error_code=0),
        rec("agent_read", "az2", H0_MS + 10, version=11, source_zone="az1", key="k", gets=1, bytes=4_000),
        rec("agent_apply", "az2", H0_MS + 20, version=11, source_zone="az1", key="k", entries=2, status="ok"),
        rec("checkpoint_write", "az3", H0_MS + 30, version=11, keys=1, wal_keys="", status="ok"),
    ]


def test_topic_traffic_per_zone_pair_topic_and_principal(spark, tmp_path):
    write_jsonl(tmp_path / "a.jsonl.gz", records())
    actual = jobs.topic_traffic(read_lines(spark, str(tmp_path), jobs.TOPIC_COLUMNS)[0])
    columns = ["source_zone", "leader_zone", "topic", "principal", "batches", "bytes_local", "bytes_direct_cross",
               "bytes_wal"]
    assert actual.columns == columns
    expected = [Row(**dict(zip(columns, values))) for values in [
        ("az1", "az1", "logs", "", 1, 700, 0, 0),  # v10: no principal
        ("az1", "az2", "orders", "User:orders-app", 3, 0, 500, 4_000),  # 3_000 + 1_000 on the WAL route
        ("az1", "az2", "payments", "User:pay", 1, 0, 0, 2_000),  # failed, counted as savings counts it
    ]]
    assertDataFrameEqual(actual, expected, checkRowOrder=True)


def test_agent_zones_are_the_zones_of_agent_records(spark, tmp_path):
    write_jsonl(tmp_path / "a.jsonl.gz", records())
    rolled, _ = load(spark, str(tmp_path))
    try:
        actual = jobs.agent_zones(rolled)
        expected = [Row(zone="az2", records=2, first_ts_ms=H0_MS + 10, last_ts_ms=H0_MS + 20),
                    Row(zone="az3", records=1, first_ts_ms=H0_MS + 30, last_ts_ms=H0_MS + 30)]
        assertDataFrameEqual(actual, expected, checkRowOrder=True)
    finally:
        release(rolled)


def read_csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_the_report_writes_the_net_savings_and_the_split(spark, tmp_path):
    # the same records and a last one an hour and a half after the first: a window long enough to project
    write_jsonl(tmp_path / "audit" / "a.jsonl.gz",
                [*records(), rec("metadata_lookup", "az1", H0_MS + HOUR_MS * 3 // 2, version=11, topic="orders",
                                 partition=0, leader_zone="az2", cache="hit")])
    model = ComputeModel(agent_hour_usd=1.0, vcpu_hour_usd=0.0)
    options = ReportOptions(compute=model, teams=TeamRules((TeamRule("orders", principal="User:orders-app"),)),
                            teams_source="teams.toml")
    out = io.StringIO()
    assert run("report", str(tmp_path / "audit"), str(tmp_path / "out"), Prices(), spark=spark, out=out,
               report_options=options) == 0
    net = {r["line"]: r for r in read_csv((tmp_path / "out" / "net_savings.csv").read_text())}
    # two agent zones x 1 agent x 1.5 h x $1 = $3.00
    assert net["agent_tasks"]["usd"] == "-3.00"
    assert net["projected_per_month"]["usd"] != "" and "from 1.5 h of audited traffic" in \
        net["projected_per_month"]["detail"]
    topics = [r["topic"] for r in read_csv((tmp_path / "out" / "topic_savings.csv").read_text())]
    # the agents follow WAL bytes: orders 4_000 of 6_000 -> $2.00, payments $1.00, logs nothing
    rows = {r["topic"]: r for r in read_csv((tmp_path / "out" / "topic_savings.csv").read_text())}
    assert sorted(topics) == ["logs", "orders", "payments"]
    assert (rows["orders"]["agent_usd"], rows["payments"]["agent_usd"], rows["logs"]["agent_usd"]) == \
        ("2.00", "1.00", "0.00")
    teams = {r["team"]: r for r in read_csv((tmp_path / "out" / "team_savings.csv").read_text())}
    assert sorted(teams) == ["orders", "unassigned"] and teams["unassigned"]["bytes_local"] == "700"
    assert "- agent tasks $3.00 - proxy CPU $0.00;" in out.getvalue()
