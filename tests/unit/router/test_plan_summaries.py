"""The planners read produce_summary records (audit v13) as the batches they sum."""

from __future__ import annotations

from leader_placement.audit_input import produce_bytes_by_zone
from planner.audit_batches import AuditedBatch, successful_batches
from planner.profile import audited_totals

SUMMARY = {"kind": "produce_summary", "ts_ms": 10_000, "zone": "az1", "proxy_id": "p1", "leader_zone": "az2",
           "topic": "t", "partition": 0, "route": "wal", "error_code": 0, "batches": 3, "bytes": 10,
           "latency_ms_sum": 30.0, "producer_wait_ms_sum": 6.0, "first_ts_ms": 1_000, "last_ts_ms": 3_000}


def test_a_summary_is_its_batches_evenly_paced_with_exact_bytes():
    # 3 batches ending at 1000, 2000, 3000 ms; 10 bytes = 4 + 3 + 3; mean latency 10 ms, wait 2 ms
    assert list(successful_batches([SUMMARY, {**SUMMARY, "error_code": 6}])) == [
        AuditedBatch(1000.0, 10.0, "p1", "az1", "az2", 4, 2.0),
        AuditedBatch(2000.0, 10.0, "p1", "az1", "az2", 3, 2.0),
        AuditedBatch(3000.0, 10.0, "p1", "az1", "az2", 3, 2.0),
    ]


def test_audited_totals_count_a_summary_like_its_batches():
    batch = {"kind": "produce_batch", "ts_ms": 5_000, "zone": "az1", "leader_zone": "az2", "route": "wal",
             "bytes": 100, "error_code": 0, "latency_ms": 1.0}
    audited = audited_totals([SUMMARY, batch])
    # direct equivalent: (10 + 3 * 41) + (100 + 41) = 274; window 1000..5000 ms
    assert (audited.direct_equivalent_bytes, audited.window_s) == (274.0, 4.0)


def test_leader_placement_sums_summary_bytes_over_its_span():
    traffic = produce_bytes_by_zone([SUMMARY, {**SUMMARY, "partition": 1, "bytes": 5, "first_ts_ms": 500,
                                               "last_ts_ms": 700}])
    assert traffic.bytes_by_zone == {("t", 0): {"az1": 10}, ("t", 1): {"az1": 5}}
    assert (traffic.wal_bytes, traffic.first_ms, traffic.last_ms) == (15, 500, 3_000)


# The WAL path's per-object records summed (audit v15): the planners read them as the objects they sum.
OBJECTS = [
    {"kind": "produce_batch", "ts_ms": 5_000, "zone": "az1", "leader_zone": "az2", "route": "wal",
     "bytes": 100, "error_code": 0, "latency_ms": 1.0},
    {"kind": "wal_flush_summary", "ts_ms": 10_000, "zone": "az1", "objects": 4, "put_requests": 5, "bytes": 9_000},
    {"kind": "notification_summary", "ts_ms": 10_000, "zone": "az1", "status": "ok", "notifications": 4,
     "request_bytes": 1_200, "response_bytes": 200},
    {"kind": "agent_read_summary", "ts_ms": 10_000, "zone": "az2", "reads": 4, "gets": 3, "bytes": 8_000,
     "bytes_from_cache": 2_000},
    {"kind": "checkpoint_summary", "ts_ms": 10_000, "zone": "az2", "manifests": 1, "manifest_puts": 0.75},
]


def test_audited_totals_count_object_summaries_like_their_objects():
    audited = audited_totals(OBJECTS)
    # 4 objects, 5 PUTs + 0.75 of a manifest, 3 GETs; notifications 1,200 + 200 bytes crossed
    assert (audited.wal_objects, audited.put_requests, audited.get_requests, audited.crossed_bytes) == (
        4, 5.75, 3.0, 1_400.0)


def test_leader_placement_counts_object_summaries_requests_and_bodies():
    traffic = produce_bytes_by_zone(OBJECTS)
    # PUTs 5 + 0.75; bodies 9,000 up, 8,000 - 2,000 from the cache down; notification bytes 1,400
    assert (traffic.put_requests, traffic.get_requests, traffic.put_body_bytes, traffic.get_body_bytes,
            traffic.notify_bytes) == (5.75, 3, 9_000, 6_000, 1_400)
