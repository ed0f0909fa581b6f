"""The WAL path's per-object records summed per interval (core.object_summary) and the sink
that writes them (core.object_summary_sink), driven by a virtual clock. Expected sums are
worked out by hand in the comments."""

from __future__ import annotations

import pytest

from core.audit import UNKNOWN_SIZE_CLASS, MemoryAuditSink
from core.object_summary import ObjectSummaries, size_class, source_zone_of
from core.object_summary_sink import ObjectSummarySink

KEY_A = "a1b2/wal/az1/p1/1/00000001"
KEY_B = "c3d4/wal/az1/p1/1/00000002"


class Clock:
    def __init__(self) -> None:
        self.ms = 0

    def __call__(self) -> int:
        return self.ms


def flush(**fields):
    base = {"writer_id": "p1", "epoch": 1, "sequence": 1, "key": KEY_A, "bytes": 5_000_000, "entries": 300,
            "zones": "az2,az3", "reason": "size", "put_ms": 40.0, "attempts": 1, "put_requests": 1, "ok": True,
            "put_wait_ms": 2.0, "s3_request_ms": 35.0}
    return {**base, **fields}


def notification(**fields):
    base = {"dest_zone": "az2", "key": KEY_A, "entries": 150, "request_bytes": 3_000, "response_bytes": 100,
            "rtt_ms": 8.0, "status": "ok", "attempts": 1}
    return {**base, **fields}


def test_size_classes_are_powers_of_two_rounded_down():
    assert [size_class(n) for n in (0, -5, 1, 2, 3, 4_194_303, 4_194_304, 5_000_000)] == [
        0, 0, 1, 2, 2, 2_097_152, 4_194_304, 4_194_304]


def test_source_zone_is_read_from_the_key():
    assert (source_zone_of(KEY_A), source_zone_of("x/e5f6/wal/use1-az3/p/2/7"), source_zone_of("junk")) == (
        "az1", "use1-az3", "")


def test_flushes_of_one_key_are_summed_exactly():
    summaries = ObjectSummaries()
    summaries.add("wal_flush", flush(), now_ms=1_000)
    # 4,194,304 bytes exactly: the same class as 5,000,000 (2^22)
    summaries.add("wal_flush", flush(key=KEY_B, bytes=4_194_304, entries=250, attempts=2, put_requests=2, put_ms=130.0,
                                     put_wait_ms=1.0, s3_request_ms=120.0), now_ms=3_000)
    # one byte less: the class below, its own record
    summaries.add("wal_flush", flush(key="k3", bytes=4_194_303, entries=10), now_ms=4_000)
    taken = summaries.take(now_ms=11_000)
    assert taken.flushes[1] == {
        "ts_ms": 11_000, "writer_id": "p1", "zones": "az2,az3", "reason": "size", "ok": True, "size_class": 4_194_304,
        "objects": 2, "bytes": 9_194_304, "entries": 550, "attempts": 3, "put_requests": 3,
        "put_ms_sum": 170.0, "put_wait_ms_sum": 3.0, "s3_request_ms_sum": 155.0, "put_max_ms": 130.0,
        # 40 ms -> bucket 17 (30, 40]; 130 ms -> bucket 23 (120, 150]
        "put_hist": "17:1,23:1", "first_ts_ms": 1_000, "last_ts_ms": 3_000, "interval_ms": 10_000}
    assert (taken.flushes[0]["size_class"], taken.flushes[0]["objects"], taken.flushes[0]["bytes"]) == (
        2_097_152, 1, 4_194_303)
    assert summaries.take(now_ms=12_000).flushes == []  # the counters started again


@pytest.mark.parametrize("changed", [{"writer_id": "p2"}, {"zones": "az2"}, {"reason": "linger"}, {"ok": False},
                                     {"bytes": 10}])
def test_each_flush_key_field_splits_a_summary(changed):
    summaries = ObjectSummaries()
    summaries.add("wal_flush", flush(), now_ms=1)
    summaries.add("wal_flush", flush(**changed), now_ms=2)
    assert len(summaries.take(now_ms=3).flushes) == 2


def test_notifications_keep_whole_packets_and_their_objects_size_class():
    summaries = ObjectSummaries(path_mtu=1_500)  # MSS 1,448
    summaries.add("wal_flush", flush(), now_ms=1_000)  # KEY_A: class 4,194,304
    summaries.add("notification", notification(), now_ms=1_050)
    summaries.add("notification", notification(request_bytes=1_448, response_bytes=0, entries=2, rtt_ms=12.0),
                  now_ms=1_090)
    summaries.add("notification", notification(key="not-flushed-here"), now_ms=1_100)
    taken = summaries.take(now_ms=2_000)
    known, unknown = sorted(taken.notifications, key=lambda r: r["size_class"], reverse=True)
    assert known == {
        "ts_ms": 2_000, "dest_zone": "az2", "status": "ok", "size_class": 4_194_304, "notifications": 2,
        "entries": 152, "attempts": 2, "request_bytes": 4_448, "response_bytes": 100, "path_mtu": 1_500,
        # ceil(3000/1448) = 3 and ceil(1448/1448) = 1; ceil(100/1448) = 1 and nothing for 0 bytes
        "request_packets": 4, "response_packets": 1, "request_messages": 2, "response_messages": 1,
        # 150^2 + 2^2; 150 x 3,100 + 2 x 1,448
        "entries_squared_sum": 22_504, "entries_bytes_sum": 467_896,
        # 8 ms -> bucket 10 (6, 8]; 12 ms -> bucket 12 (10, 12]
        "rtt_ms_sum": 20.0, "rtt_max_ms": 12.0, "rtt_hist": "10:1,12:1",
        "first_ts_ms": 1_050, "last_ts_ms": 1_090, "interval_ms": 1_000}
    assert (unknown["size_class"], unknown["notifications"]) == (UNKNOWN_SIZE_CLASS, 1)


def test_known_objects_are_bounded_oldest_first():
    summaries = ObjectSummaries(known_objects=1)
    summaries.add("wal_flush", flush(key=KEY_A, bytes=8), now_ms=1)
    summaries.add("wal_flush", flush(key=KEY_B, bytes=64), now_ms=2)  # KEY_A forgotten
    summaries.add("notification", notification(key=KEY_A), now_ms=3)
    summaries.add("notification", notification(key=KEY_B), now_ms=4)
    classes = sorted(r["size_class"] for r in summaries.take(now_ms=5).notifications)
    assert classes == [UNKNOWN_SIZE_CLASS, 64]


def test_agent_reads_and_applies_are_summed_per_source_zone():
    summaries = ObjectSummaries()
    summaries.add("agent_read", {"source_zone": "az1", "key": KEY_A, "bytes": 1_000, "gets": 1, "cache_hits": 0,
                                 "cache_misses": 1, "bytes_from_cache": 0, "latency_ms": 5.0, "get_ms": 4.0}, now_ms=10)
    summaries.add("agent_read", {"source_zone": "az1", "key": KEY_B, "bytes": 2_000, "gets": 0, "cache_hits": 1,
                                 "cache_misses": 0, "bytes_from_cache": 2_000, "latency_ms": 0.5, "get_ms": 0.0},
                  now_ms=20)
    for entries, status, handle_ms in ((150, "ok", 9.0), (2, "ok", 1.5), (4, "entry_errors", 3.0)):
        summaries.add("agent_apply", {"source_zone": "az1", "key": KEY_A, "entries": entries, "status": status,
                                      "read_ms": 5.0, "append_ms": 3.0, "handle_ms": handle_ms}, now_ms=30)
    taken = summaries.take(now_ms=40)
    assert taken.reads == [{
        "ts_ms": 40, "source_zone": "az1", "reads": 2, "bytes": 3_000, "gets": 1, "cache_hits": 1, "cache_misses": 1,
        "bytes_from_cache": 2_000, "latency_ms_sum": 5.5, "get_ms_sum": 4.0, "latency_max_ms": 5.0,
        # 0.5 ms -> bucket 1 (0.25, 0.5]; 5 ms -> bucket 8 (4, 5]
        "latency_hist": "1:1,8:1", "first_ts_ms": 10, "last_ts_ms": 20, "interval_ms": 30}]
    errors, ok = taken.applies
    assert ok == {"ts_ms": 40, "source_zone": "az1", "status": "ok", "applies": 2, "entries": 152,
                  "read_ms_sum": 10.0, "append_ms_sum": 6.0, "handle_ms_sum": 10.5, "handle_max_ms": 9.0,
                  # 1.5 ms -> bucket 4 (1, 1.5]; 9 ms -> bucket 11 (8, 10]
                  "handle_hist": "4:1,11:1", "first_ts_ms": 30, "last_ts_ms": 30, "interval_ms": 30}
    assert (errors["status"], errors["applies"], errors["entries"]) == ("entry_errors", 1, 4)


def test_a_manifest_is_billed_once_shared_among_the_source_zones_of_its_objects():
    summaries = ObjectSummaries()
    summaries.add("checkpoint_write", {"keys": 3, "wal_keys": f"{KEY_A},{KEY_B},e5f6/wal/az3/p3/1/9",
                                       "put_ms": 20.0, "status": "ok"}, now_ms=5)
    summaries.add("checkpoint_write", {"keys": 1, "wal_keys": "0a0b/wal/az1/p1/1/3", "put_ms": 10.0, "status": "ok"},
                  now_ms=6)
    az1, az3 = summaries.take(now_ms=7).checkpoints
    # manifest 1: 2 of its 3 objects from az1, 1 from az3; manifest 2: 1 of 1 from az1
    assert (az1["source_zone"], az1["manifests"], az1["keys"], az1["put_ms_sum"]) == ("az1", 2, 3, 30.0)
    assert az1["manifest_puts"] == pytest.approx(2 / 3 + 1)
    assert (az3["source_zone"], az3["manifests"], az3["keys"], az3["put_ms_sum"]) == ("az3", 1, 1, 20.0)
    assert az3["manifest_puts"] == pytest.approx(1 / 3)
    assert az1["manifest_puts"] + az3["manifest_puts"] == pytest.approx(2.0)  # two manifests, two PUTs


def test_other_kinds_are_not_counted():
    summaries = ObjectSummaries()
    assert not summaries.add("produce_batch", {"bytes": 1}, now_ms=1)
    assert summaries.empty


def test_the_sink_writes_summaries_when_flushed_and_passes_other_kinds_through():
    inner, clock = MemoryAuditSink(), Clock()
    sink = ObjectSummarySink(inner, clock_ms=clock)
    clock.ms = 1_000
    sink.emit("wal_flush", flush())
    sink.emit("s3_request", {"operation": "LIST", "purpose": "epoch", "requests": 1})
    sink.emit("agent_read", {"source_zone": "az1", "key": KEY_A, "bytes": 5, "gets": 1})
    assert [k for k, _ in inner.records] == ["s3_request"]  # objects wait for the interval
    clock.ms = 11_000
    sink.flush()
    assert [k for k, _ in inner.records] == ["s3_request", "wal_flush_summary", "agent_read_summary"]
    assert inner.of("wal_flush_summary")[0]["interval_ms"] == 10_000
    sink.flush()  # nothing new: no empty records
    assert len(inner.records) == 3


def test_a_full_key_table_flushes_early_and_loses_no_object():
    inner = MemoryAuditSink()
    sink = ObjectSummarySink(inner, max_keys=2, clock_ms=Clock())
    for zone in ("a", "b", "c", "d", "e"):
        sink.emit("agent_read", {"source_zone": zone, "bytes": 1})
    # keys a, b -> full -> written; c, d -> written; e waits for the close
    assert [r["source_zone"] for r in inner.of("agent_read_summary")] == ["a", "b", "c", "d"]
    sink.close()
    assert [r["source_zone"] for r in inner.of("agent_read_summary")] == ["a", "b", "c", "d", "e"]


def test_after_close_each_record_is_written_at_once():
    inner, clock = MemoryAuditSink(), Clock()
    sink = ObjectSummarySink(inner, clock_ms=clock)
    sink.close()
    clock.ms = 7
    sink.emit("notification", notification())
    (summary,) = inner.of("notification_summary")
    assert (summary["notifications"], summary["request_bytes"], summary["ts_ms"]) == (1, 3_000, 7)
