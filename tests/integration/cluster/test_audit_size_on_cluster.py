"""How big the audit is next to the bytes it carries, at 16 KiB batches: the proxy's
produce records, and the whole WAL path's (proxy, agents, S3 on moto).

The goal: audit records <= 1,000 per GB of payload and stored audit bytes <= 0.1 % of it,
with the product's default audit settings. One record per batch (and one leader lookup per
batch) is ~2 records per 16 KiB, ~122,000 per GB; on the WAL path every object adds a
wal_flush, a notification per zone, an agent_read and agent_apply per zone and a share of a
manifest. Summed per interval and key the records grow with keys and time, not with
batches or objects.
"""

from __future__ import annotations

import gzip
import json

import pytest

from core.audit import OBJECT_SUMMARY_KINDS
from tests.conftest import unique_name
from tests.integration.cluster.conftest import producer, proxy_on, spread_leaders, wal_sidecars

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

BATCH_BYTES = 16 * 1024
BATCHES = 1_000  # 16 MiB: ~2,000 records one per batch and lookup, a handful summed
GB = 10**9
MAX_RECORDS_PER_GB = 1_000
MAX_AUDIT_SHARE = 0.001
WAL_BATCHES = 1_000  # 16 MiB through the WAL to two zones: ~300 objects at the harness's 20 ms linger
# A fleet's proxy moves a GB in minutes, this test's host well under a MB/s through moto and
# the mock cluster: summaries, one per key and interval, would count this host's slowness per
# GB. So the test holds the run in one interval and checks that the records grow with the keys,
# not the objects; bench/audit_size.py (tests/integration/test_audit_size_bench.py) checks the
# goal per GB at a fleet's rate.
WAL_AUDIT_INTERVAL_S = 600.0
# One record per object is ~6 (flush, 2 notifications, 2 reads, 2 applies): 600+ records for the
# run's 100+ objects. Summed, the records are one per key (kind, zones, reason, size class...):
# 21-32 here, whatever the object count. A loaded host makes fewer, larger objects of more
# size classes (157 objects and 32 records in one CI run at load ~15), so the bound leaves room:
# at most one record per two objects, a twelfth of what one record per object writes.
OBJECTS_PER_WAL_RECORD = 2
WAL_KINDS = frozenset(OBJECT_SUMMARY_KINDS) | frozenset(OBJECT_SUMMARY_KINDS.values())


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


@pytest.mark.timeout(360)
def test_wal_path_audit_stays_small_at_16_kib_batches(cluster, moto_server, tmp_path):
    """Every record the proxy and both agents write, at the product's default audit detail,
    for 16 KiB batches all taking the WAL to leaders in the two other zones."""
    bucket = unique_name("wal")
    moto_server.create_bucket(bucket)
    spread_leaders(cluster, "walsized", 3)  # partition 1 led in use1-az2, 2 in use1-az3
    value = b"x" * (BATCH_BYTES - 100)
    acked: list[int] = []
    failed: list[str] = []
    defaults = {"audit": {"produce_detail": "summary", "object_detail": "summary",  # the product's own
                          "interval_s": WAL_AUDIT_INTERVAL_S}}
    with wal_sidecars(cluster, moto_server, bucket, tmp_path, settings=defaults) as sidecars:
        p = producer(sidecars.proxy, **{"linger.ms": 0, "batch.size": BATCH_BYTES, "message.timeout.ms": 240_000})
        for i in range(WAL_BATCHES):
            p.produce("walsized", value, partition=1 + i % 2,
                      on_delivery=lambda err, msg: failed.append(str(err)) if err else acked.append(len(msg.value())))
            p.poll(0)
        assert p.flush(240) == 0
    assert not failed, failed[:3]
    assert len(acked) == WAL_BATCHES
    files = sorted(sidecars.audit_dir.rglob("*.jsonl.gz"))
    lines = [line for path in files for line in gzip.open(path, "rt")]
    records = [json.loads(line) for line in lines]
    flushed = [r for r in records if r["kind"] in ("wal_flush", "wal_flush_summary")]
    reads = [r for r in records if r["kind"] in ("agent_read", "agent_read_summary")]
    # every object and byte is accounted, whatever the form: the objects hold every batch,
    # and the agents read every batch's bytes (each zone its share)
    assert sum(r["bytes"] for r in flushed) >= WAL_BATCHES * len(value)
    assert sum(r.get("entries", 0) for r in flushed) >= WAL_BATCHES
    assert sum(r["bytes"] for r in reads) >= WAL_BATCHES * len(value)
    objects = sum(r.get("objects", 1) for r in flushed)
    payload = sum(acked)
    stored = sum(path.stat().st_size for path in files)
    wal = [line for line, r in zip(lines, records) if r["kind"] in WAL_KINDS]
    wal_stored = stored * sum(map(len, wal)) / sum(map(len, lines))  # the WAL kinds' share of the gzip bytes
    print(f"WAL path: {objects} objects, audit {len(records)} records ({len(records) * GB / payload:,.0f} per GB), "
          f"{stored} bytes ({stored / payload:.4%} of payload); the WAL kinds {len(wal)} records "
          f"({len(wal) * GB / payload:,.0f} per GB, {wal_stored / payload:.4%})")
    assert objects >= 100  # enough objects that one record each would be 600 records
    assert len(wal) * OBJECTS_PER_WAL_RECORD <= objects  # summed: keys, not objects
