"""How big the proxy's audit is next to the bytes it carries, at 16 KiB batches.

The goal: audit records <= 1,000 per GB of payload and stored audit bytes <= 0.1 % of it,
with the product's default audit settings. One record per batch (and one leader lookup per
batch) is ~2 records per 16 KiB, ~122,000 per GB; summed per interval and key the records
grow with partitions and time, not with batches.
"""

from __future__ import annotations

import gzip
import json

import pytest

from tests.integration.cluster.conftest import producer, proxy_on, spread_leaders

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

BATCH_BYTES = 16 * 1024
BATCHES = 1_000  # 16 MiB: ~2,000 records one per batch and lookup, a handful summed
GB = 10**9
MAX_RECORDS_PER_GB = 1_000
MAX_AUDIT_SHARE = 0.001


def test_audit_stays_small_at_16_kib_batches(cluster, tmp_path):
    spread_leaders(cluster, "sized", 2)
    value = b"x" * (BATCH_BYTES - 100)  # a record of ~16 KiB: one per batch (linger 0, batch.size 16 KiB)
    acked: list[int] = []
    with proxy_on(cluster, tmp_path, produce_detail=None) as proxy:
        p = producer(proxy.bootstrap, **{"linger.ms": 0, "batch.size": BATCH_BYTES})
        for i in range(BATCHES):
            p.produce("sized", value, partition=i % 2,
                      on_delivery=lambda err, msg: acked.append(len(msg.value())) if err is None else None)
            p.poll(0)
        assert p.flush(60) == 0
    assert len(acked) == BATCHES
    files = sorted((tmp_path / "audit").rglob("*.jsonl.gz"))
    records = [r for path in files for r in map(json.loads, gzip.open(path, "rt"))]
    produced = [r for r in records if r["kind"] in ("produce_batch", "produce_summary")]
    # every byte and batch is accounted, whatever the form
    assert sum(r["bytes"] for r in produced) >= BATCHES * len(value)
    assert sum(r.get("batches", 1) for r in produced) >= BATCHES
    payload = sum(acked)
    stored = sum(path.stat().st_size for path in files)
    records_per_gb = len(records) * GB / payload
    share = stored / payload
    print(f"audit: {len(records)} records ({records_per_gb:,.0f} per GB), {stored} bytes ({share:.4%} of payload)")
    assert records_per_gb <= MAX_RECORDS_PER_GB
    assert share <= MAX_AUDIT_SHARE
