"""End to end: a proxy's produce records and the leader_move records of `plan leaders --apply`
(both through AuditWriter) -> `audit placement` -> last_apply.csv and the line on what the last
applied placement saved. Without leader_move records the table is empty and the report says
nothing of it: tests/integration/spark_audit/test_cli.py's round trip checks that on its report."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from core.prices import Prices
from spark_audit.config import AuditConfig
from spark_audit.run import run
from spark_audit.writer import AuditWriter
from tests.integration.spark_audit.conftest import H0_MS

MINUTE_MS = 60_000
MB = 1_000_000


def write_records(output: Path, with_moves: bool) -> None:
    """t-0 led in az2 and fed from az1 (2 MB crossing in the first 20 min); moved to az1 at 00:20
    by plan p1; 2 MB from az1, now local, in the next 20 min. t-9 never moved."""
    config = AuditConfig(output=str(output))
    proxy = AuditWriter(config, zone="az1", component="proxy")

    def batch(at_min: int, leader: str, size: int, partition: int = 0) -> None:
        proxy.emit("produce_batch", {"ts_ms": H0_MS + at_min * MINUTE_MS, "leader_zone": leader, "topic": "t",
                                     "partition": partition, "route": "direct_cross" if leader != "az1" else "local",
                                     "bytes": size, "records": 1, "error_code": 0})

    batch(0, "az2", MB), batch(10, "az2", MB), batch(0, "az2", 1, partition=9)
    batch(30, "az1", MB), batch(40, "az1", MB)
    assert proxy.close(timeout_s=60)
    if with_moves:
        apply = AuditWriter(config, zone="", component="plan-leaders")
        apply.emit("leader_move", {"ts_ms": H0_MS + 20 * MINUTE_MS, "topic": "t", "partition": 0, "from_broker": 2,
                                   "from_zone": "az2", "to_broker": 1, "to_zone": "az1", "plan_id": "p1"})
        assert apply.close(timeout_s=60)


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open() as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def test_the_report_compares_the_moved_partitions_before_and_after_the_last_apply(spark, tmp_path):
    write_records(tmp_path / "audit", with_moves=True)
    out = io.StringIO()
    # The placement job writes the table and says the line; the report's HTML section is built
    # from the same table (tests/unit/spark_audit/test_report_placement.py), and the report job
    # runs every job (a minute here), so it is left to the round trip of tests/.../test_cli.py.
    assert run("placement", str(tmp_path / "audit"), str(tmp_path / "out"), Prices(), spark=spark, out=out) == 0
    _, rows = read_csv(tmp_path / "out" / "last_apply.csv")
    # produce audit 00:00 .. 00:40, the apply at 00:20: 20 min on each side
    assert [(r["plan_id"], r["window_ms"], r["topic"], r["partition"], r["window"], r["source_zone"],
             r["leader_zone"], r["bytes"]) for r in rows] == [
        ("p1", "1200000", "t", "0", "after", "az1", "az1", "2000000"),
        ("p1", "1200000", "t", "0", "before", "az1", "az2", "2000000")]
    # 2 MB crossed before at 2e-11 a byte: $0.00004; none after
    assert ("last applied leader plan p1 (1 partitions, applied 2026-01-01 00:20:00 UTC): in the 20.0 min after "
            "it 0 B of their 2.0 MB produce bytes crossed zones ($0.00), against 2.0 MB of 2.0 MB ($0.00004) in "
            "the 20.0 min before: 2.0 MB ($0.00004) less") in out.getvalue()
