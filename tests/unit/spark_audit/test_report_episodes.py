"""The report's zone episodes (spark_audit.report_data.zone_episodes), worked out by hand.

Rows as jobs.zone_trouble writes them: one per minute x source zone x destination zone in
which the WAL path was in trouble.
"""

from __future__ import annotations

import pytest

from core.prices import Prices
from spark_audit import report_data as rd
from spark_audit._io import InputSummary, Table
from spark_audit.report import render_html, summary_text

COLUMNS = ("minute", "minute_ms", "source_zone", "dest_zone", "fallback_batches", "fallback_bytes",
           "fallback_wire_bytes", "failed_wal_batches", "unread_objects", "unread_put_requests",
           "fallback_transfer_usd", "unread_put_usd", "cost_usd")
MIN = 60_000


def row(minute, source, dest, fallback=0, fallback_bytes=0, failed=0, unread=0, transfer_usd=0.0, put_usd=0.0):
    return dict(zip(COLUMNS, (f"m{minute}", minute * MIN, source, dest, fallback, fallback_bytes,
                              fallback_bytes * 105 // 100, failed, unread, unread / 2, transfer_usd, put_usd,
                              transfer_usd + put_usd), strict=True))


ROWS = [
    # az1 -> az2: minutes 10, 11 and 13 (one quiet minute between: one episode), then 20 (another)
    row(10, "az1", "az2", fallback=5, fallback_bytes=5_000_000, failed=2, unread=3, transfer_usd=1e-4, put_usd=7.5e-6),
    row(11, "az1", "az2", fallback=4, fallback_bytes=4_000_000, transfer_usd=8e-5),
    row(13, "az1", "az2", fallback=1, fallback_bytes=1_000_000, transfer_usd=2e-5),
    row(20, "az1", "az2", unread=1, put_usd=2.5e-6),
    # az3 -> az2 at the same time as the first: a pair of its own
    row(11, "az3", "az2", failed=1, unread=2, put_usd=5e-6),
]


def test_minutes_of_a_zone_pair_close_together_are_one_episode():
    episodes = rd.zone_episodes(ROWS, window_end_ms=30 * MIN)
    assert [(e.source_zone, e.dest_zone, e.start_ms // MIN, e.end_ms // MIN) for e in episodes] == [
        ("az1", "az2", 10, 14),  # $1e-4 + 7.5e-6 + 8e-5 + 2e-5 = $2.075e-4: the costliest first
        ("az3", "az2", 11, 12),  # $5e-6
        ("az1", "az2", 20, 21),  # $2.5e-6
    ]
    first = episodes[0]
    assert (first.minutes, first.fallback_batches, first.fallback_bytes, first.failed_wal_batches,
            first.unread_objects) == (4, 10, 10_000_000, 2, 3)
    assert first.fallback_wire_bytes == 5_250_000 + 4_200_000 + 1_050_000
    assert first.cost_usd == pytest.approx(2.075e-4) and first.unread_put_usd == pytest.approx(7.5e-6)
    assert not any(e.open_at_end for e in episodes)


def test_a_longer_gap_splits_and_the_windows_last_minute_leaves_an_episode_open():
    rows = [row(0, "az1", "az2", fallback=1, fallback_bytes=10, transfer_usd=1e-9),
            row(3, "az1", "az2", fallback=1, fallback_bytes=10, transfer_usd=1e-9)]  # two quiet minutes between
    episodes = rd.zone_episodes(rows, window_end_ms=3 * MIN + 30_000)
    assert [(e.start_ms // MIN, e.open_at_end) for e in episodes] == [(0, False), (3, True)]
    assert rd.zone_episodes([], window_end_ms=0) == []


SUMMARY = InputSummary("audit-out", files=1, lines=100, records_by_kind={"produce_batch": 100}, corrupt_lines=0,
                       unknown_kind_lines=0, newer_version_lines=0, versions={10: 100},
                       first_ts_ms=0, last_ts_ms=30 * MIN)


def test_the_report_names_the_costliest_episode():
    tables = {"zone_trouble": Table("zone_trouble", COLUMNS, tuple(tuple(r[c] for c in COLUMNS) for r in ROWS))}
    text = summary_text(tables, SUMMARY, Prices())
    # three episodes, $2.075e-4 + 5e-6 + 2.5e-6 = $2.15e-4
    assert "zone episodes: 3 (the WAL path to a zone unhealthy or its objects unread)" in text
    assert "costing $0.000215 in fallback transfer and unread objects' PUTs" in text
    assert ("the costliest az1 -> az2 1970-01-01 00:10:00 UTC to 1970-01-01 00:14:00 UTC (4 min): 10 batches "
            "(10.0 MB) sent across, 2 failed on the WAL route, 3 objects unread, $0.0002075") in text  # 1e-4 + 7.5e-6 + 8e-5 + 2e-5
    page = render_html(tables, SUMMARY, Prices())
    section = page.split("<h2>Zone episodes</h2>")[1].split("<h2>")[0]
    assert section.count("<tr>") == 4  # header and three episodes
    assert "Zone episodes" not in render_html({}, SUMMARY, Prices())  # no trouble: no section
