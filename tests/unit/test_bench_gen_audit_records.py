"""bench/gen_audit_records.py --form summary: the WAL path summed per interval (audit v15)
carries what its per-object form (--object-detail object) carries for the same traffic.

One cycle is worked out by hand (seq 0 of zone use1-az1: batch i goes to leader
ZONES[i % 3]; i % 3 == 0 is local; of the others i = 10, 20, 40, 50, 70, 80 go direct; the
remaining 30 per other zone go through the WAL). The larger case cross-checks the two forms
of 1,000 cycles over 999 s: about three objects per zone and interval, some whose agent
reads fall in the next interval.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from bench.gen_audit_records import INTERVAL_MS, START_MS, generate_summaries
from core.latency_histogram import decode
from core.object_summary import size_class

PER_OBJECT_KINDS = {"wal_flush", "notification", "agent_read", "agent_apply", "checkpoint_write"}


def read(root: Path) -> list[tuple[str, dict]]:
    """(the zone= directory, record) for every line under `root`."""
    out = []
    for path in sorted(root.rglob("*.jsonl.gz")):
        zone_dir = path.parent.name.removeprefix("zone=")
        with gzip.open(path, "rt") as f:
            out.extend((zone_dir, json.loads(line)) for line in f)
    return out


def of(records: list[tuple[str, dict]], kind: str) -> list[dict]:
    return [r for _, r in records if r["kind"] == kind]


def test_one_cycle_by_hand(tmp_path):
    written = generate_summaries(100, tmp_path)
    records = read(tmp_path)
    assert written == len(records)
    assert not {r["kind"] for _, r in records} & PER_OBJECT_KINDS

    [flush] = of(records, "wal_flush_summary")
    assert (flush["zone"], flush["writer_id"], flush["zones"], flush["ok"]) == (
        "use1-az1", "proxy-use1-az1", "use1-az2,use1-az4", True)
    assert (flush["objects"], flush["entries"], flush["put_requests"], flush["schema_version"]) == (1, 60, 1, 15)
    # 60 batches of 100-2,000 bytes (a cycle with seq % 5 == 0) and 64 bytes of framing each
    assert 60 * 100 + 60 * 64 <= flush["bytes"] <= 60 * 2_000 + 60 * 64
    assert flush["size_class"] <= flush["bytes"] < 2 * flush["size_class"]

    notifications = sorted(of(records, "notification_summary"), key=lambda r: r["dest_zone"])
    assert [(n["zone"], n["dest_zone"], n["notifications"], n["entries"], n["request_bytes"], n["response_bytes"],
             n["size_class"]) for n in notifications] == [
        # 30 entries: request 120 + 40 x 30, response 30 + 12 x 30
        ("use1-az1", "use1-az2", 1, 30, 1_320, 390, flush["size_class"]),
        ("use1-az1", "use1-az4", 1, 30, 1_320, 390, flush["size_class"]),
    ]
    reads = sorted(of(records, "agent_read_summary"), key=lambda r: r["zone"])
    assert [(r["zone"], r["source_zone"], r["reads"], r["gets"]) for r in reads] == [
        ("use1-az2", "use1-az1", 1, 1), ("use1-az4", "use1-az1", 1, 1)]
    assert sum(r["bytes"] for r in reads) + 60 * 64 == flush["bytes"]  # the object is its zones' batches
    assert {zone_dir for zone_dir, r in records if r["kind"] == "agent_read_summary"} == {"use1-az2", "use1-az4"}


@pytest.fixture(scope="module")
def both_forms(tmp_path_factory):
    summed, per_object = tmp_path_factory.mktemp("v15"), tmp_path_factory.mktemp("per-object")
    generate_summaries(100_000, summed, seed=3, span_ms=999_000)
    generate_summaries(100_000, per_object, seed=3, object_detail="object", span_ms=999_000)
    return read(summed), read(per_object)


def interval_of(ts_ms: int) -> int:
    return (ts_ms - START_MS) // INTERVAL_MS


def test_the_input_has_dense_intervals_and_reads_in_the_next_interval(both_forms):
    _, per_object = both_forms
    flushes = of(per_object, "wal_flush")
    assert len(flushes) == 1_000
    per_interval = Counter((r["zone"], interval_of(r["ts_ms"])) for r in flushes)
    assert max(per_interval.values()) >= 3
    flushed_in = {r["key"]: interval_of(r["ts_ms"]) for r in flushes}
    assert any(interval_of(r["ts_ms"]) != flushed_in[r["key"]] for r in of(per_object, "agent_read"))


def test_same_produce_summaries_in_both_forms(both_forms):
    summed, per_object = both_forms

    def produce(records):
        return Counter(json.dumps({k: v for k, v in r.items() if k != "schema_version"}, sort_keys=True)
                       for _, r in records if r["kind"] in ("produce_summary", "metadata_summary"))

    assert produce(summed) == produce(per_object)
    assert produce(summed)


def test_objects_bytes_entries_puts_per_zone_and_size_class(both_forms):
    summed, per_object = both_forms
    expected: Counter = Counter()
    for r in of(per_object, "wal_flush"):
        k = (r["zone"], r["zones"], size_class(r["bytes"]))
        expected[(*k, "objects")] += 1
        for field in ("bytes", "entries", "put_requests", "attempts"):
            expected[(*k, field)] += r[field]
    got: Counter = Counter()
    for r in of(summed, "wal_flush_summary"):
        k = (r["zone"], r["zones"], r["size_class"])
        for field in ("objects", "bytes", "entries", "put_requests", "attempts"):
            got[(*k, field)] += r[field]
        assert sum(decode(r["put_hist"]).values()) == r["objects"]
    assert got == expected
    assert sum(v for k, v in got.items() if k[-1] == "objects") == 1_000


def test_notifications_per_zone_pair_and_size_class(both_forms):
    summed, per_object = both_forms
    class_of = {r["key"]: size_class(r["bytes"]) for r in of(per_object, "wal_flush")}
    expected: Counter = Counter()
    rtt_expected: Counter = Counter()
    for r in of(per_object, "notification"):
        k = (r["zone"], r["dest_zone"], class_of[r["key"]])
        expected[(*k, "notifications")] += 1
        for field in ("entries", "request_bytes", "response_bytes", "attempts"):
            expected[(*k, field)] += r[field]
        rtt_expected[k[:2]] += r["rtt_ms"]
    got: Counter = Counter()
    rtt_got: Counter = Counter()
    for r in of(summed, "notification_summary"):
        k = (r["zone"], r["dest_zone"], r["size_class"])
        for field in ("notifications", "entries", "request_bytes", "response_bytes", "attempts"):
            got[(*k, field)] += r[field]
        rtt_got[k[:2]] += r["rtt_ms_sum"]
        assert sum(decode(r["rtt_hist"]).values()) == r["notifications"]
    assert got == expected
    assert len({k[:2] for k in got}) == 6  # every ordered pair of the three zones
    assert rtt_got.keys() == rtt_expected.keys()
    for pair, total in rtt_expected.items():
        assert rtt_got[pair] == pytest.approx(total, rel=1e-12)


def test_agent_reads_per_zone_pair_in_the_agents_zone(both_forms):
    summed, per_object = both_forms
    fields = ("bytes", "gets", "cache_hits", "cache_misses", "bytes_from_cache")
    expected: Counter = Counter()
    for r in of(per_object, "agent_read"):
        expected[(r["zone"], r["source_zone"], "reads")] += 1
        for field in fields:
            expected[(r["zone"], r["source_zone"], field)] += r[field]
    got: Counter = Counter()
    for zone_dir, r in summed:
        if r["kind"] == "agent_read_summary":
            assert zone_dir == r["zone"]
            for field in ("reads", *fields):
                got[(r["zone"], r["source_zone"], field)] += r[field]
    assert got == expected
    assert sum(v for k, v in got.items() if k[-1] == "gets") == 2_000


def test_every_v15_record_sits_under_its_writers_zone_and_fewer_records(both_forms):
    summed, per_object = both_forms
    assert all(zone_dir == r["zone"] for zone_dir, r in summed)
    assert not {r["kind"] for _, r in summed} & PER_OBJECT_KINDS
    assert {r["schema_version"] for _, r in summed} == {15}
    wal_path = [r for _, r in summed if r["kind"].endswith("_summary") and r["kind"] not in (
        "produce_summary", "metadata_summary")]
    assert len(wal_path) < 5_000  # the per-object form has 5 per object


KEY_FIELDS = {"wal_flush_summary": ("writer_id", "zones", "reason", "ok", "size_class"),
              "notification_summary": ("dest_zone", "status", "size_class"), "agent_read_summary": ("source_zone",)}


def test_each_summary_counts_the_records_of_its_own_interval(both_forms):
    summed, _ = both_forms
    per_key_and_interval = Counter((r["kind"], r["zone"], r["ts_ms"], *(r[f] for f in KEY_FIELDS[r["kind"]]))
                                   for _, r in summed if r["kind"] in KEY_FIELDS)
    assert set(per_key_and_interval.values()) == {1}  # one record per key and interval: a process takes once
    for _, r in summed:
        if r["kind"] in ("wal_flush_summary", "notification_summary", "agent_read_summary"):
            assert (r["ts_ms"] - START_MS) % INTERVAL_MS == 0
            assert r["ts_ms"] - INTERVAL_MS <= r["first_ts_ms"] <= r["last_ts_ms"] < r["ts_ms"]
            # from the process's first record of the interval (any key) to its end
            assert r["ts_ms"] - r["first_ts_ms"] <= r["interval_ms"] <= INTERVAL_MS
