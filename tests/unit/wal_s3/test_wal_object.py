"""A WAL object without I/O (wal_s3/wal_object.py): the layout of its entries by zone and
share, its S3 metadata, and the order objects are released in, worked out by hand."""

from __future__ import annotations

from wal_s3.format import WalEntry
from wal_s3.wal_object import FlushedObject, ObjectInProgress, ReleaseQueue, WalWriteError, object_key


def entry(topic: str, partition: int) -> WalEntry:
    return WalEntry(topic, partition, -1, -1, -1, 1, b"x")


def filled(shares: dict[str, dict[str, list[WalEntry]]], sequence: int = 0) -> ObjectInProgress:
    obj = ObjectInProgress(opened_at=0.0, due_at=0.005)
    obj.shares = shares
    obj.sequence = sequence
    return obj


def test_one_agent_zones_keep_arrival_order_and_name_only_their_zone():
    a0, a1, b0 = entry("t", 0), entry("t", 1), entry("u", 0)
    obj = filled({"az2": {"az2": [a0, a1]}, "az3": {"az3": [b0]}})
    obj.lay_out()
    assert obj.entries_by_zone == {"az2": [a0, a1], "az3": [b0]}
    assert obj.share_start == {("az2", "az2"): 0, ("az3", "az3"): 0}
    assert obj.share_runs == {}
    assert obj.metadata() == {"zones": "az2,az3"}


def test_a_zone_with_several_agents_is_laid_out_share_after_share_with_each_agents_run():
    p0, p1, p2 = entry("t", 0), entry("t", 1), entry("t", 2)
    # arrival: agent 2's share first; the layout sorts shares by name
    obj = filled({"az2": {"az2.2of2": [p1], "az2.1of2": [p0, p2]}})
    obj.lay_out()
    assert obj.entries_by_zone == {"az2": [p0, p2, p1]}
    assert obj.share_start == {("az2", "az2.1of2"): 0, ("az2", "az2.2of2"): 2}
    assert obj.share_runs == {"az2": ((0, 0, 2), (1, 2, 3))}
    assert obj.metadata() == {"zones": "az2.1of2,az2.2of2", "share-entries": "2,1"}


def test_one_agents_share_of_a_several_agent_zone_names_its_run():
    p1 = entry("t", 1)
    obj = filled({"az2": {"az2.2of2": [p1]}})
    obj.lay_out()
    assert obj.share_runs == {"az2": ((1, 0, 1),)}
    assert obj.metadata() == {"zones": "az2.2of2", "share-entries": "1"}


def flushed(sequence: int) -> FlushedObject:
    return FlushedObject(f"k{sequence}", "w", 1, sequence, {}, 10, "linger")


def test_objects_are_released_in_sequence_order_only():
    queue = ReleaseQueue()
    objs = [filled({}, sequence=n) for n in range(3)]
    for obj in objs:
        queue.sealed(obj)
    objs[1].complete(flushed(1), None)
    objs[2].complete(None, WalWriteError("PUT failed", retriable=True))
    assert list(queue.ready()) == []  # object 0 still in flight holds back 1 and 2
    objs[0].complete(flushed(0), None)
    assert [o.sequence for o in queue.ready()] == [0, 1, 2]  # a failed object is released in its turn too
    assert list(queue.ready()) == []


def test_the_first_outcome_wins_and_a_stopped_writer_takes_every_unreleased_object():
    queue = ReleaseQueue()
    obj = filled({}, sequence=0)
    obj.complete(flushed(0), None)
    obj.complete(None, WalWriteError("late", retriable=True))
    assert obj.error is None and obj.result == flushed(0)
    later = filled({}, sequence=1)
    queue.sealed(later)
    assert queue.take_all() == [later]
    assert list(queue.ready()) == []


def test_object_keys_spread_by_a_hash_of_their_tail():
    key = object_key("pfx/", "use1-az1", "proxy-a", 3, 17)
    tail = "wal/use1-az1/proxy-a/0000000003/000000000017"
    assert key.endswith(tail) and key.startswith("pfx/") and len(key) == len("pfx/") + 4 + 1 + len(tail)
