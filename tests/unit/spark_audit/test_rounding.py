"""The rounding rule of the CSV tables and the page (spark_audit.rounding), on exact text."""

from __future__ import annotations

import pytest

from spark_audit.rounding import csv_text, usd_text, whole_text


@pytest.mark.parametrize(("value", "text"), [
    (12.350000000000001, "12.35"),  # the float noise the CSVs used to carry
    (0.1 + 0.2, "0.30"),
    (0.125, "0.13"),  # a half cent rounds up, as on an invoice
    (-0.125, "-0.13"),
    (1234.5, "1234.50"),
    (0.0099996, "0.01"),  # rounds up to a cent: written as one
    (0.000034938, "0.00003494"),  # below a cent: 4 significant digits
    (0.005, "0.005"),  # trailing zeros dropped
    (-1.032404e-5, "-0.00001032"),
    (0.0, "0.00"),
])
def test_dollars_to_the_cent_and_four_significant_digits_below_it(value, text):
    assert usd_text(value) == text


@pytest.mark.parametrize(("value", "text"), [(0.5, "1"), (12.5, "13"), (2.4999, "2"), (-0.5, "-1"), (3.0, "3")])
def test_counts_to_whole_numbers_halves_away_from_zero(value, text):
    assert whole_text(value) == text


def test_a_csv_of_hand_made_rows_as_text():
    columns = ("hour", "source_zone", "batches_wal", "bytes_wal", "s3_put_requests", "mean_object_bytes",
               "transfer_avoided_usd", "s3_put_usd", "savings_ratio", "p50_ms", "cross_zone", "note")
    rows = [
        # 12.350000000000001 PUTs (shared objects) -> 12; 0.1 + 0.2 dollars -> 0.30; 2/3 -> 0.6667
        ("2026-01-01T00:00Z", "az1", 3, 4_000_000, 12.350000000000001, 1_333_333.3333333333,
         0.1 + 0.2, 6.175e-05, 2 / 3, 2.00049, True, None),
        # 0.5 PUT -> 1; a sub-cent avoided transfer keeps 4 significant digits; a null is an empty cell
        ("2026-01-01T01:00Z", "az2", 0, 0, 0.5, 512.5, 0.000034938, 2.5e-06, None, 120.0, False, "a, b"),
    ]
    assert csv_text(columns, rows) == (
        "hour,source_zone,batches_wal,bytes_wal,s3_put_requests,mean_object_bytes,transfer_avoided_usd,s3_put_usd,"
        "savings_ratio,p50_ms,cross_zone,note\r\n"
        "2026-01-01T00:00Z,az1,3,4000000,12,1333333,0.30,0.00006175,0.6667,2.000,True,\r\n"
        "2026-01-01T01:00Z,az2,0,0,1,513,0.00003494,0.0000025,,120.000,False,\"a, b\"\r\n"
    )
