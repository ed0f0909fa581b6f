"""The audit's size goal at a fleet's rate, through the real audit writers (gzip JSON lines on
disk): <= 1,000 records per GB of payload and <= 0.1 % of its bytes, at 16 KiB batches, with
WAL objects as small as S3 Express makes them worth writing (64 KiB). bench/audit_size.py
feeds the accounting of ~1 GB of batches and of the objects that carry them (a proxy and two
agents, one writer each) on a virtual clock; the cluster test next door checks the same
summaries come out of the real processes.
"""

from __future__ import annotations

import argparse

import pytest

from bench.audit_size import GB, measure

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

MAX_RECORDS_PER_GB = 1_000
MAX_AUDIT_SHARE = 0.001


def args(**changed) -> argparse.Namespace:
    base = {"batches": 60_000, "partitions": 12, "batch_bytes": 16 * 1024, "batches_per_s": 2_000.0,
            "interval_s": 10.0, "seed": 7, "object_bytes": 64 * 1024}
    return argparse.Namespace(**{**base, **changed})


def test_the_wal_paths_summed_audit_meets_the_goal_where_one_record_per_object_does_not():
    run = args()
    payload = run.batches * run.batch_bytes
    records, stored, wal_records, _ = measure("summary+summary", run)
    print(f"summed: {records} records ({records * GB / payload:,.0f} per GB), {stored / payload:.4%}; "
          f"WAL path {wal_records}")
    assert records * GB / payload <= MAX_RECORDS_PER_GB
    assert stored / payload <= MAX_AUDIT_SHARE
    # the default before schema v15: produce summed, the WAL path one record per object
    records, stored, wal_records, _ = measure("summary+object", run)
    print(f"per object: {records} records ({records * GB / payload:,.0f} per GB), {stored / payload:.4%}")
    assert wal_records * GB / payload > MAX_RECORDS_PER_GB
