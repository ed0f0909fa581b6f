"""What the report says (spark_audit.report_data), worked out by hand, and the page itself.

Round dollar figures on purpose: the arithmetic of each expected value is in its comment.
"""

from __future__ import annotations

import re

import pytest

from core.prices import Prices
from spark_audit import report_data as rd
from spark_audit._io import InputSummary, Table
from spark_audit.formatting import iec_bytes, usd
from spark_audit.report import render_html, summary_text

H0, H1 = "2026-01-01T00:00Z", "2026-01-01T01:00Z"


def saving(hour, source, leader, direct=0.0, avoided=0.0, put=0.0, get=0.0, wal=0, dc=0):
    return {"hour": hour, "source_zone": source, "leader_zone": leader, "direct_transfer_usd": direct,
            "transfer_avoided_usd": avoided, "s3_put_usd": put, "s3_get_usd": get,
            "net_savings_usd": avoided - put - get, "bytes_wal": wal, "bytes_direct_cross": dc}


SAVINGS = [
    saving(H0, "az1", "az2", direct=10, avoided=9, put=1, get=0.5, wal=1_000_000_000),  # net 7.5
    saving(H0, "az1", "az1"),  # local only: nothing to show
    saving(H1, "az2", "az1", direct=2, avoided=1, put=2, wal=1_000_000),  # net -1
    saving(H1, "az1", "(shared)", put=0.25, get=0.05),  # epochs, GC: net -0.3
    saving(H1, "az1", "az2", direct=10, avoided=9, put=1, get=0.5, wal=1_000_000_000),  # net 7.5
]
BREAK_EVEN = [
    {"size_bucket_bytes": 4096, "objects": 10, "mean_object_bytes": 5_000.0, "net_savings_usd": -0.2,
     "net_savings_usd_per_object": -0.02, "break_even_object_bytes": 300_000.0},
    {"size_bucket_bytes": 8_388_608, "objects": 30, "mean_object_bytes": 10_000_000.0, "net_savings_usd": 3.0,
     "net_savings_usd_per_object": 0.1, "break_even_object_bytes": 310_000.0},
]


def test_headline_totals_projection_and_break_even():
    h = rd.headline(SAVINGS, BREAK_EVEN, period_s=7200)
    assert (h.direct_transfer_usd, h.transfer_avoided_usd, h.crossed_transfer_usd) == (22, 19, 3)
    # S3: 1 + 0.5 + 2 + 0.25 + 0.05 + 1 + 0.5 = 5.3; net 7.5 - 1 - 0.3 + 7.5 = 13.7
    assert h.s3_usd == pytest.approx(5.3)
    assert h.net_savings_usd == pytest.approx(13.7)
    assert h.share_of_transfer_bill == pytest.approx(13.7 / 22)
    # two hours -> a month of 30.4375 days is 365.25 times as long, a year 4,383 times
    assert h.per_month_usd == pytest.approx(13.7 * 365.25)
    assert h.per_year_usd == pytest.approx(13.7 * 4383)
    # break-even: objects-weighted (300_000 * 10 + 310_000 * 30) / 40 = 307_500 bytes
    assert h.break_even_object_bytes == pytest.approx(307_500)
    # below it: the 10 objects of the losing class, 10 * 5_000 bytes of 50_000 + 300_000_000
    assert (h.wal_objects, h.objects_below_break_even) == (40, 10)
    assert (h.bytes_below_break_even, h.wal_object_bytes) == (50_000, 300_050_000)
    assert h.loss_below_break_even_usd == pytest.approx(-0.2)


def test_headline_without_wal_objects_or_time():
    h = rd.headline([saving(H0, "az1", "az2", direct=1, dc=10)], [], period_s=0)
    assert (h.break_even_object_bytes, h.per_month_usd, h.per_year_usd) == (None, None, None)
    assert h.share_of_transfer_bill == 0.0  # direct_cross only: it all crossed, nothing saved


@pytest.mark.parametrize(("first", "last", "hours", "seconds"), [
    (1_000, 4_600, 1, 3.6),  # first to last record
    (None, None, 3, 10_800.0),  # no timestamps: the hours seen
    (5, 5, 2, 7_200.0),  # one instant: the hours seen
])
def test_period_seconds(first, last, hours, seconds):
    assert rd.period_seconds(first, last, hours) == seconds


def test_pair_savings_sorted_by_net_with_shared_requests_last():
    pairs = rd.pair_savings(SAVINGS)
    assert [(p.label, p.direct_transfer_usd, p.transfer_avoided_usd, p.s3_usd, p.net_savings_usd, p.wal_bytes)
            for p in pairs] == [
        ("az1 → az2", 20, 18, 3, 15, 2_000_000_000),
        ("az2 → az1", 2, 1, 2, -1, 1_000_000),
        (rd.SHARED_PAIRS_LABEL, 0, 0, pytest.approx(0.3), pytest.approx(-0.3), 0),
    ]


def test_pairs_beyond_top_are_summed():
    pairs = rd.pair_savings(SAVINGS, top=1)
    # both pairs in one entry: direct 22, avoided 19, S3 5, net 14; the shared requests stay apart
    assert [(p.label, p.direct_transfer_usd, p.transfer_avoided_usd, p.s3_usd, p.net_savings_usd)
            for p in pairs[:1]] == [("other pairs (2)", 22, 19, 5, 14)]
    assert pairs[1].label == rd.SHARED_PAIRS_LABEL and len(pairs) == 2


def test_savings_by_hour_runs_a_total():
    # H0: 7.5 (+ 0 local); H1: -1 - 0.3 + 7.5 = 6.2, total 13.7
    assert [(x.hour, x.net_savings_usd, x.cumulative_usd, x.direct_transfer_usd)
            for x in rd.savings_by_hour(SAVINGS)] == [
        (H0, 7.5, 7.5, 10), (H1, pytest.approx(6.2), pytest.approx(13.7), 12)]


def test_latency_by_route_takes_the_worst_pair_and_all_batches():
    rows = [
        {"route": "wal", "source_zone": "az1", "leader_zone": "az2", "batches": 20, "p50_ms": 100.0,
         "p95_ms": 250.0, "p99_ms": 300.0},
        {"route": "wal", "source_zone": "az2", "leader_zone": "az1", "batches": 4, "p50_ms": None,
         "p95_ms": None, "p99_ms": None},  # every batch failed
        {"route": "local", "source_zone": "az1", "leader_zone": "az1", "batches": 10, "p50_ms": 1.0,
         "p95_ms": 4.0, "p99_ms": 5.0},
        {"route": "local", "source_zone": "az2", "leader_zone": "az2", "batches": 5, "p50_ms": 2.0,
         "p95_ms": 8.0, "p99_ms": 9.0},
    ]
    assert rd.latency_by_route(rows) == [rd.RouteLatency("local", "az2 → az2", 15, 2.0, 8.0, 9.0),
                                         rd.RouteLatency("wal", "az1 → az2", 24, 100.0, 250.0, 300.0)]


def test_cache_by_zone_over_the_period():
    rows = [{"zone": "az1", "reads": 2, "cache_hits": 3, "lookups": 4, "bytes_from_cache": 10, "bytes": 40},
            {"zone": "az1", "reads": 1, "cache_hits": 1, "lookups": 4, "bytes_from_cache": 0, "bytes": 10},
            {"zone": "az2", "reads": 1, "cache_hits": 0, "lookups": 0, "bytes_from_cache": 0, "bytes": 0}]
    # az1: hits 4 of 8 lookups, 10 of 50 bytes from the cache; az2: no lookups at all
    assert rd.cache_by_zone(rows) == [rd.ZoneCache("az1", 3, 0.5, 0.2), rd.ZoneCache("az2", 1, None, None)]


@pytest.mark.parametrize(("value", "text"), [
    # a cent or more: to the cent, halves up; below a cent: 4 significant digits, trailing zeros dropped
    (1234.567, "$1,234.57"), (0.5, "$0.50"), (0.0123, "$0.01"), (0.125, "$0.13"), (0.000034938, "$0.00003494"),
    (-1.032404e-5, "-$0.00001032"), (0.005, "$0.005"), (0.0099996, "$0.01"), (0, "$0.00"), (None, "n/a"),
])
def test_dollars_as_written_by_people(value, text):
    assert usd(value) == text


@pytest.mark.parametrize(("value", "text"), [(100, "100 B"), (512 * 1024, "512 KiB"), (1.5 * 2**20, "1.5 MiB")])
def test_object_sizes_in_binary_units(value, text):
    assert iec_bytes(value) == text


def _tables(hours: int) -> dict[str, Table]:
    columns = tuple(SAVINGS[0])
    rows = [saving(f"2026-01-{1 + h // 24:02d}T{h % 24:02d}:00Z", "az1", "az2", direct=10, avoided=9, put=1)
            for h in range(hours)]
    savings = Table("savings", columns, tuple(tuple(r[c] for c in columns) for r in rows))
    be_columns = tuple(BREAK_EVEN[0])
    return {"savings": savings,
            "break_even": Table("break_even", be_columns, tuple(tuple(r[c] for c in be_columns) for r in BREAK_EVEN))}


SUMMARY = InputSummary("audit-out", files=3, lines=1000, records_by_kind={"produce_batch": 1000}, corrupt_lines=0,
                       unknown_kind_lines=0, newer_version_lines=0, versions={5: 1000},
                       first_ts_ms=1_767_225_600_000, last_ts_ms=1_767_225_600_000 + 100 * 3_600_000)


def test_html_is_one_printable_file_in_words_a_reader_uses():
    page = render_html(_tables(100), SUMMARY, Prices())
    # self-contained: images inline, no link to anything outside
    assert not re.search(r"(src|href)=['\"](?!data:)", page)
    assert page.count("src='data:image/png;base64,") == 3  # pairs, over time, break-even
    assert "@page{size:A4" in page and "break-inside:avoid" in page
    # the headline: 100 hours of 8 net (9 - 1) = $800, per month 800 * 730.5 / 100 = $5,844.00
    assert "$800.00" in page and "$5,844.00" in page
    # human column names, no snake_case
    headers = re.findall(r"<th>([^<]*)</th>", page)
    assert "Net savings" in headers and not [h for h in headers if "_" in h]
    # 100 hours: the hour table lists the last 48 and says where the rest is
    assert "The last 48 of 100 hours" in page
    hour_table = page.split("<h2>Savings by hour</h2>")[1].split("</table>")[0]
    assert hour_table.count("<tr>") == 1 + 48
    # one price per unit, said once: $0.01 each way is $0.02 per GB that crosses
    assert "$0.01 per GB in each direction, so $0.02 per GB that crosses" in page


def test_text_summary_fits_one_screen_and_leads_with_the_money():
    text = summary_text(_tables(100), SUMMARY, Prices())
    assert len(text.splitlines()) <= 20
    # 100 hours of avoided 9 and S3 1: $900 - $100 = $800 of $1,000; no agents table: no compute line
    assert ("NET SAVINGS $800.00 = transfer avoided $900.00 - S3 $100.00 (compute not counted: jobs report and "
            "all count it); 80.0 % of the cross-zone transfer bill") in text
    # 800 * 730.5 / 100 = 5,844 a month; 800 * 8,766 / 100 = 70,128 a year; 100 h = 4.17 days
    assert "projection  $5,844.00 per month, $70,128.00 per year (from 4.17 days of audited traffic)" in text


def test_consumer_traffic_is_reported_per_zone_pair_with_its_cost():
    columns = ("zone", "broker_zone", "api_key", "api", "requests", "request_bytes", "response_bytes", "wire_bytes",
               "cross_zone", "transfer_usd")
    rows = (("az1", "az1", 1, "Fetch", 10, 1_000, 2_000_000, 2_000_000, False, 0.0),
            ("az1", "az2", 1, "Fetch", 20, 2_000, 5_000_000_000, 5_000_000_000, True, 0.1),
            ("az1", "", 2, "ListOffsets", 1, 40, 60, 100, None, None))
    tables = {**_tables(2), "passthrough_bytes": Table("passthrough_bytes", columns, rows)}
    # 2 MB + 5 GB + 100 B on the wire (5.0 GB); 5 GB of it across zones, $0.10
    line = "consumer/admin traffic through the sidecars 5.0 GB on the wire; across zones 5.0 GB costing $0.10"
    assert line in summary_text(tables, SUMMARY, Prices())
    page = render_html(tables, SUMMARY, Prices())
    section = page.split("<h2>Consumers and admin clients through the sidecars</h2>")[1].split("</table>")[0]
    assert section.count("<tr>") == 1 + 3 and "unknown" in section and "$0.10" in section


def test_consumer_fetches_are_reported_by_who_served_them():
    columns = ("zone", "broker_zone", "served_by", "bytes", "cross_zone")
    rows = (("az1", "az1", "follower", 3_000_000_000, False),
            ("az1", "az2", "leader", 2_000_000_000, True),
            ("az1", "az1", "leader", 500_000_000, False),
            ("az3", "", "unknown", 1_000_000, None))
    tables = {**_tables(2), "fetch_bytes": Table("fetch_bytes", columns, rows)}
    # 3 GB + 2 GB + 0.5 GB + 1 MB = 5.5 GB; 2 GB from a leader in another zone; 3 GB by followers
    line = ("consumer fetches through the sidecars 5.5 GB of records; 2.0 GB served by a leader in another zone "
            "(what `azsidecar plan leaders` weighs), 3.0 GB by followers")
    assert line in summary_text(tables, SUMMARY, Prices())
    page = render_html(tables, SUMMARY, Prices())
    section = page.split("<h2>Consumer fetches by who served them</h2>")[1].split("</table>")[0]
    assert section.count("<tr>") == 1 + 4 and "unknown" in section and "follower" in section
