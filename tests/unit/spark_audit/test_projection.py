"""Projections only from windows long enough to mean something (spark_audit.projection), both sides."""

from __future__ import annotations

import re

import pytest

from core.prices import Prices
from spark_audit._io import InputSummary, Table
from spark_audit.projection import project, short_duration
from spark_audit.report import render_html, summary_text
from spark_audit.report_options import ReportOptions

T0 = 1_767_225_600_000  # 2026-01-01 00:00 UTC


def test_a_ten_second_window_is_not_projected():
    p = project(2.0, 10.0)
    assert (p.per_month_usd, p.per_year_usd) == (None, None)
    assert p.refusal == "window too short to project (10 s < 1 h)"


def test_a_window_just_short_of_the_minimum_is_not_projected():
    p = project(2.0, 3599.0)
    assert p.per_month_usd is None and p.refusal is not None and p.refusal.endswith("< 1 h)")


def test_an_hour_is_projected():
    p = project(2.0, 3600.0)
    # a month of 30.4375 days is 730.5 hours, a year of 365.25 days 8,766 hours
    assert p.per_month_usd == pytest.approx(2.0 * 730.5)
    assert p.per_year_usd == pytest.approx(2.0 * 8766)
    assert (p.refusal, p.basis) == (None, "from 1 h of audited traffic")


def test_the_minimum_is_a_setting():
    assert project(2.0, 10.0, min_window_s=5.0).per_month_usd == pytest.approx(2.0 * 730.5 * 360)
    assert project(2.0, 1800.0, min_window_s=7200.0).refusal == "window too short to project (30 min < 2 h)"
    assert project(2.0, 0.0, min_window_s=0.0).refusal == "no window to project from (a single instant)"
    with pytest.raises(ValueError, match=">= 0"):
        project(2.0, 10.0, min_window_s=-1.0)


@pytest.mark.parametrize(("seconds", "text"), [(10, "10 s"), (0.4, "0.4 s"), (2700, "45 min"), (3600, "1 h"),
                                               (129_600, "36 h"), (360_000, "4.17 days")])
def test_windows_as_people_say_them(seconds, text):
    assert short_duration(seconds) == text


SAVINGS_COLUMNS = ("hour", "source_zone", "leader_zone", "direct_transfer_usd", "transfer_avoided_usd",
                   "s3_put_usd", "s3_get_usd", "net_savings_usd")


def _report(window_ms: int):
    savings = Table("savings", SAVINGS_COLUMNS, (("2026-01-01T00:00Z", "az1", "az2", 3.0, 2.5, 0.4, 0.1, 2.0),))
    summary = InputSummary("audit-out", files=1, lines=10, records_by_kind={"produce_batch": 10}, corrupt_lines=0,
                           unknown_kind_lines=0, newer_version_lines=0, versions={10: 10},
                           first_ts_ms=T0, last_ts_ms=T0 + window_ms)
    return {"savings": savings}, summary


def test_the_report_says_why_a_short_window_has_no_projection():
    tables, summary = _report(10_000)
    text = summary_text(tables, summary, Prices())
    assert "projection  window too short to project (10 s < 1 h)" in text
    assert "per month" not in text
    page = render_html(tables, summary, Prices())
    cards = re.findall(r"<div class='label'>Projected per (?:month|year)</div><div class='value [a-z]*'>([^<]*)</div>"
                       r"<div class='note'>([^<]*)</div>", page)
    assert cards == [("not projected", "window too short to project (10 s &lt; 1 h)")] * 2


def test_the_report_projects_an_hour_and_names_its_window():
    tables, summary = _report(3_600_000)
    text = summary_text(tables, summary, Prices())
    # $2 net over an hour: 2 * 730.5 = $1,461.00 a month, 2 * 8,766 = $17,532.00 a year
    assert "projection  $1,461.00 per month, $17,532.00 per year (from 1 h of audited traffic)" in text
    page = render_html(tables, summary, Prices())
    assert "$1,461.00" in page and "$17,532.00" in page
    assert "from 1 h of audited traffic (2026-01-01 00:00:00 UTC to 2026-01-01 01:00:00 UTC)" in page


def test_the_report_applies_the_minimum_it_is_given():
    tables, summary = _report(3_600_000)
    text = summary_text(tables, summary, Prices(), options=ReportOptions(min_projection_window_s=4 * 3600))
    assert "projection  window too short to project (1 h < 4 h)" in text
