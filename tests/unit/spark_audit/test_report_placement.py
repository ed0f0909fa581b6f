"""The report's leader placement section (spark_audit.report_data.leader_placement, and what the
last apply saved: spark_audit.applied_placement), worked out by hand.

Rows as jobs.leader_traffic writes them: bytes per partition, source zone and the leader
zone the batches named. A byte produced across zones costs 2e-11 USD ($0.01/GB each way).
"""

from __future__ import annotations

import pytest

from core.prices import Prices
from spark_audit import report_data as rd
from spark_audit._io import InputSummary, Table
from spark_audit.applied_placement import AppliedPartition, last_apply
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


# -- what the last applied placement saved (spark_audit.applied_placement) -------------------

H2_MS = 1_767_232_800_000  # 2026-01-01T02:00:00Z
APPLY_COLUMNS = ("plan_id", "applied_from_ms", "applied_to_ms", "window_ms", "topic", "partition", "from_zone",
                 "to_zone", "window", "source_zone", "leader_zone", "batches", "bytes")


def applied(partition, moved, window, source, leader, mb):
    """A row as jobs.last_apply writes it: plan p2 applied 02:00:00 to 02:01:00, 59 min windows."""
    values = ("p2", H2_MS, H2_MS + 60_000, 3_540_000, "t", partition, *moved, window, source, leader,
              None if window is None else 1, None if window is None else int(mb * MB))
    return dict(zip(APPLY_COLUMNS, values, strict=True))


APPLY_ROWS = [
    # t-0 az2 -> az1: before, 400 MB from az1 crossed to az2 and 100 local; after, 510 local and 50 from az2 crossed
    applied(0, ("az2", "az1"), "after", "az1", "az1", 510), applied(0, ("az2", "az1"), "after", "az2", "az1", 50),
    applied(0, ("az2", "az1"), "before", "az1", "az2", 400), applied(0, ("az2", "az1"), "before", "az2", "az2", 100),
    # t-1 az3 -> az1: 300 MB from az1 crossed before; after, 280 local and 20 to a leader zone unknown (not counted)
    applied(1, ("az3", "az1"), "after", "az1", "az1", 280), applied(1, ("az3", "az1"), "after", "az3", "", 20),
    applied(1, ("az3", "az1"), "before", "az1", "az3", 300),
    applied(2, ("az2", "az1"), None, None, None, 0),  # moved, no traffic in either window
]


def test_the_last_apply_compares_cross_zone_bytes_in_the_windows_before_and_after():
    a = last_apply(APPLY_ROWS, USD_PER_BYTE)
    assert (a.plan_id, a.applied_from_ms, a.applied_to_ms, a.window_ms) == ("p2", H2_MS, H2_MS + 60_000, 3_540_000)
    assert a.partitions == (AppliedPartition("t", 0, "az2", "az1", 500 * MB, 400 * MB, 560 * MB, 50 * MB),
                            AppliedPartition("t", 1, "az3", "az1", 300 * MB, 300 * MB, 300 * MB, 0),
                            AppliedPartition("t", 2, "az2", "az1", 0, 0, 0, 0))
    # 800 MB produced before, 700 crossed; 860 after, 50 crossed: 650 MB less, 650e6 x 2e-11 = $0.013
    assert (a.before_bytes, a.before_cross_bytes, a.after_bytes, a.after_cross_bytes) == (
        800 * MB, 700 * MB, 860 * MB, 50 * MB)
    assert a.saved_bytes == 650 * MB and a.usd(a.saved_bytes) == pytest.approx(0.013)
    assert last_apply([], USD_PER_BYTE) is None


def test_the_report_says_what_the_last_apply_saved():
    def table(name, columns, rows):
        return Table(name, columns, tuple(tuple(r[c] for c in columns) for r in rows))

    tables = {"leader_traffic": table("leader_traffic", COLUMNS, ROWS),
              "last_apply": table("last_apply", APPLY_COLUMNS, APPLY_ROWS)}
    text = summary_text(tables, SUMMARY, Prices())
    # 700 MB x 2e-11 = $0.014 before, 50 MB = $0.001 after, 650 MB = $0.013 less (to the cent, below a
    # cent to 4 significant digits); windows of 59 min
    assert ("last applied leader plan p2 (3 partitions, applied 2026-01-01 02:00:00 UTC to 2026-01-01 02:01:00 UTC): "
            "in the 59.0 min after it 50.0 MB of their 860.0 MB produce bytes crossed zones ($0.001), against "
            "700.0 MB of 800.0 MB ($0.01) in the 59.0 min before: 650.0 MB ($0.01) less") in text
    section = render_html(tables, SUMMARY, Prices()).split("<h2>Leader placement</h2>")[1].split("<h2>")[0]
    assert "<h3>What the last applied placement saved</h3>" in section
    assert ("<tr><td class='text'>t-0</td><td class='text'>az2 → az1</td><td>400.0 MB</td><td>500.0 MB</td>"
            "<td>50.0 MB</td><td>560.0 MB</td><td>350.0 MB</td><td>$0.007</td></tr>")  # 350 MB x 2e-11 in section
    no_traffic_after = [dict(r, window_ms=0, window=None, bytes=None, batches=None) for r in APPLY_ROWS[-1:]]
    tables["last_apply"] = table("last_apply", APPLY_COLUMNS, no_traffic_after)
    assert ("last applied leader plan p2 (1 partitions, applied 2026-01-01 02:00:00 UTC to 2026-01-01 02:01:00 UTC): "
            "the audit has no produce traffic on both sides of it to compare") in summary_text(tables, SUMMARY, Prices())
    tables["last_apply"] = table("last_apply", APPLY_COLUMNS, [])  # no leader_move records: no such line
    assert "last applied" not in summary_text(tables, SUMMARY, Prices())
