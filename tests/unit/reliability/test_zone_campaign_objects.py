"""tests/system/reliability/zone_faults.py: the WAL objects written for a zone while it was out,
read from hand-made audit records, and the summary of a gc pass."""

import pytest

from tests.system.reliability.zone_faults import gc_summary, objects_for_zone

DOWN, UP = 1_000_000, 1_012_000  # the zone was out from DOWN to UP (wall-clock ms)


def flush(zone, zones, ts_ms, key, ok=True, put_requests=1):
    return {"kind": "wal_flush", "zone": zone, "zones": zones, "ts_ms": ts_ms, "key": key, "ok": ok,
            "put_requests": put_requests}


def read(zone, key):
    return {"kind": "agent_read", "zone": zone, "key": key, "ts_ms": 0}


def test_objects_written_for_the_zone_out_while_it_was_out():
    records = [
        flush("az1", "az2", DOWN - 10, "before"),  # before the fault: not counted
        flush("az1", "az2,az3", DOWN + 400, "k1", put_requests=2),  # for az2 (and az3)
        flush("az3", "az2", DOWN + 2_750, "k2"),  # the last one for az2: 2.75 s after the fault
        flush("az1", "az3", DOWN + 5_000, "k3"),  # not for az2
        flush("az3", "az2", DOWN + 6_000, "k4", ok=False),  # never durable: not an object
        flush("az2", "az1", DOWN + 1_000, "k5"),  # az2's own proxy writing for az1: not for az2
        flush("az1", "az2", UP + 1, "after"),  # after the return: not counted
        read("az3", "k1"),  # az3's agent read k1: az2's share still unread
        read("az2", "k2"),  # az2's agent read k2 (late, after the heal)
    ]
    assert objects_for_zone(records, "az2", DOWN, UP) == {"objects": 2, "put_requests": 3, "last_put_s": 2.75,
                                                           "unread": 1}


def test_objects_the_zone_out_wrote_for_the_others():
    records = [
        flush("az2", "az1,az3", DOWN + 300, "k1"),  # read by az1 only: one share unread
        flush("az2", "az1", DOWN + 1_500, "k2"),  # read by az1
        flush("az2", "az3", DOWN + 4_200, "k3"),  # never read
        flush("az1", "az2", DOWN + 100, "k4"),  # another proxy: not counted
        read("az1", "k1"), read("az1", "k2"),
    ]
    assert objects_for_zone(records, "az2", DOWN, UP, from_zone=True) == {
        "objects": 3, "put_requests": 3, "last_put_s": 4.2, "unread": 2}


def test_no_object_for_the_zone_out():
    records = [flush("az1", "az3", DOWN + 1, "k1")]
    assert objects_for_zone(records, "az2", DOWN, UP) == {"objects": 0, "put_requests": 0, "last_put_s": None,
                                                           "unread": 0}


def test_gc_summary_counts():
    output = ("deleted wal/a (all zones applied)\norphan wal/b age 9s unapplied az2\ndeleted orphan wal/b\n"
              "HELD wal/c: unapplied acknowledged (ack_mode wal) entries; run `azsidecar recover`\n"
              "gc: scanned 7 objects, deleted 4 applied and 2 orphans, 1 orphans, 0 pending, deleted 3 checkpoints\n")
    assert gc_summary(output) == {"scanned": 7, "deleted": 4, "orphans_deleted": 2, "orphans": 1, "pending": 0,
                                  "held": 1, "left": 1}


def test_gc_summary_missing_is_an_error():
    with pytest.raises(ValueError, match="no gc summary line"):
        gc_summary("azsidecar gc: S3 said no\n")
