"""The report's leader placement section (spark_audit.report_data.leader_placement), worked out by hand.

Rows as jobs.leader_traffic writes them: bytes per partition, source zone and the leader
zone the batches named. A byte produced across zones costs 2e-11 USD ($0.01/GB each way).
"""

from __future__ import annotations

import pytest

from core.prices import Prices
from spark_audit import report_data as rd
from spark_audit._io import InputSummary, Table
from spark_audit.report import render_html, summary_text

MB = 1_000_000
USD_PER_BYTE = 2e-11
COLUMNS = ("topic", "partition", "source_zone", "leader_zone", "batches", "bytes", "first_ts_ms", "last_ts_ms")


def row(partition, source, leader, mb, first=0, last=3_600_000, topic="t"):
    return dict(zip(COLUMNS, (topic, partition, source, leader, 10, int(mb * MB), first, last), strict=True))


ROWS = [
    row(0, "az1", "az2", 9), row(0, "az2", "az2", 1),  # led in az2, fed from az1: move, saving 9 - 1 = 8 MB
    row(1, "az1", "az3", 2), row(1, "az2", "az3", 2), row(1, "az3", "az3", 2),  # even: nothing to gain
    # moved az2 -> az1 at 2,000,000 ms: before 3 of 4 MB crossed (75 %), after 2 of 8 MB (25 %);
    # after the move 6 MB from az1 stopped crossing and 2 MB from az2 started: saved 4 MB
    row(2, "az1", "az2", 3, 0, 1_000_000), row(2, "az2", "az2", 1, 0, 1_000_000),
    row(2, "az1", "az1", 6, 2_000_000, 3_000_000), row(2, "az2", "az1", 2, 2_000_000, 3_000_000),
    # led in az1, in az3 for a while, back in az1: not a move
    row(3, "az1", "az1", 1, 0, 1_000_000), row(3, "az1", "az3", 1, 600_000, 700_000),
]


def test_the_saving_still_available_and_the_moves_seen():
    p = rd.leader_placement(ROWS, USD_PER_BYTE, period_s=3600)
    assert p.partitions == 4
    # 10 + 6 + 12 + 2 MB produced; crossed 9 (p0) + 4 (p1) + 3 before and 2 after (p2) + 1 (p3, under az3)
    assert (p.produce_bytes, p.cross_bytes) == (30 * MB, 19 * MB)
    assert p.available == (rd.PlacementMove("t", 0, "az2", "az1", 8 * MB, pytest.approx(8 * MB * USD_PER_BYTE)),)
    assert p.balanced == p.available  # az1 would lead 3 of 4: ceil(4 / 3) + 1 = 3 allows it
    assert p.available_usd == pytest.approx(1.6e-4)
    assert p.per_month(p.available_usd) == pytest.approx(1.6e-4 * 730.5)  # an hour -> 30.4375 days
    (m,) = p.observed
    assert (m.topic, m.partition, m.from_zone, m.to_zone, m.moved_at_ms) == ("t", 2, "az2", "az1", 2_000_000)
    assert (m.cross_share_before, m.cross_share_after) == (0.75, 0.25)
    assert (m.bytes_after, m.saved_bytes) == (8 * MB, 4 * MB)
    assert p.observed_usd == pytest.approx(8e-5)
    assert p.moved_and_back == 1


def test_the_balanced_plan_keeps_a_zone_from_leading_everything():
    # three partitions led in az2, fed from az1; az3 seen too: ceil(3 / 3) + 1 = 2 per zone
    rows = [row(0, "az1", "az2", 5), row(1, "az1", "az2", 4), row(2, "az1", "az2", 3), row(2, "az3", "az2", 1)]
    p = rd.leader_placement(rows, USD_PER_BYTE, period_s=3600)
    assert [(m.partition, m.saving_bytes) for m in p.available] == [(0, 5 * MB), (1, 4 * MB), (2, 3 * MB)]
    # az1 full after two: partition 2 goes to its next-best zone, az3 (1 MB from there, none from az2)
    assert [(m.partition, m.to_zone, m.saving_bytes) for m in p.balanced] == [
        (0, "az1", 5 * MB), (1, "az1", 4 * MB), (2, "az3", 1 * MB)]
    assert (p.available_bytes, p.balanced_bytes) == (12 * MB, 10 * MB)
    assert p.observed == () and p.moved_and_back == 0


def test_producers_spread_evenly_leave_nothing_to_move():
    rows = [row(q, z, "az" + str(q % 3 + 1), 2) for q in range(3) for z in ("az1", "az2", "az3")]
    p = rd.leader_placement(rows, USD_PER_BYTE, period_s=3600)
    assert p.available == () and p.balanced == ()
    assert (p.produce_bytes, p.cross_bytes) == (18 * MB, 12 * MB)


SUMMARY = InputSummary("audit-out", files=1, lines=100, records_by_kind={"produce_batch": 100}, corrupt_lines=0,
                       unknown_kind_lines=0, newer_version_lines=0, versions={10: 100},
                       first_ts_ms=0, last_ts_ms=3_600_000)


def test_the_report_says_it_in_words():
    tables = {"leader_traffic": Table("leader_traffic", COLUMNS, tuple(tuple(r[c] for c in COLUMNS) for r in ROWS))}
    text = summary_text(tables, SUMMARY, Prices())
    # 19 of 30 MB crossed: 63.3 %; 8 MB at 2e-11 = $0.00016, x 730.5 = $0.1169 a month
    assert ("leader placement: 4 partitions, 63.3 % of their produce bytes went to a leader in another zone; "
            "leaders in their producers' zone would save 8.0 MB") in text
    assert "leader moves seen in the period: 1 partitions; they saved 4.0 MB" in text
    page = render_html(tables, SUMMARY, Prices())
    section = page.split("<h2>Leader placement</h2>")[1].split("<h2>")[0]
    assert "t-0" in section and "t-2" in section and "75.0 %" in section and "25.0 %" in section
    assert "1 partitions had their leader leave a zone and come back" in section
    assert "Leader placement" not in render_html({}, SUMMARY, Prices())  # no produce records: no section
