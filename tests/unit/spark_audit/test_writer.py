"""AuditWriter: non-blocking emit, counted drops, partitioned rolling gzip files."""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import os
import re
from pathlib import Path

import trio

from core.audit import SCHEMA_VERSION
from spark_audit.config import AuditConfig
from spark_audit.writer import AuditWriter
from tests.integration.spark_audit.conftest import H0_MS, HOUR_MS

RUN_ID = re.compile(r"-[0-9a-f]{6}-")  # the writer's run id in its file names (random per writer)


def read_all(root: Path) -> dict[str, list[dict]]:
    """Relative file path -> its records."""
    return {
        str(p.relative_to(root)): [json.loads(line) for line in gzip.open(p, "rt")]
        for p in sorted(root.rglob("*")) if p.is_file()
    }


def flat(files: dict[str, list[dict]]) -> list[dict]:
    return [r for records in files.values() for r in records]


def test_records_are_stamped_and_partitioned_by_hour_and_zone(tmp_path):
    writer = AuditWriter(AuditConfig(output=str(tmp_path)), zone="use1-az1", component="proxy")
    writer.emit("metadata_lookup", {"ts_ms": H0_MS + 5, "topic": "t", "partition": 0, "cache": "hit"})
    writer.emit("metadata_lookup", {"ts_ms": H0_MS + HOUR_MS + 7, "topic": "t", "partition": 1, "cache": "miss"})
    writer.close()
    files = {RUN_ID.sub("-RUN-", name): records for name, records in read_all(tmp_path).items()}
    pid = os.getpid()
    assert files == {
        f"date=2026-01-01/hour=00/zone=use1-az1/proxy-{pid}-RUN-1.jsonl.gz": [
            {"topic": "t", "partition": 0, "cache": "hit", "ts_ms": H0_MS + 5, "schema_version": SCHEMA_VERSION,
             "kind": "metadata_lookup", "zone": "use1-az1"}],
        f"date=2026-01-01/hour=01/zone=use1-az1/proxy-{pid}-RUN-2.jsonl.gz": [
            {"topic": "t", "partition": 1, "cache": "miss", "ts_ms": H0_MS + HOUR_MS + 7,
             "schema_version": SCHEMA_VERSION, "kind": "metadata_lookup", "zone": "use1-az1"}],
    }
    assert writer.stats().written == 2 and writer.stats().files == 2


def test_ts_ms_is_filled_when_absent(tmp_path):
    writer = AuditWriter(AuditConfig(output=str(tmp_path)), zone="z", component="agent")
    writer.emit("audit_drop", {"dropped_kind": "x", "dropped": 1, "reason": "invalid"})
    writer.close()
    (record,) = flat(read_all(tmp_path))
    assert isinstance(record["ts_ms"], int) and record["ts_ms"] > H0_MS  # after 2026-01-01


def test_full_queue_drops_are_counted_and_audited(tmp_path):
    # Thread not started: the queue (2 slots) fills and the next 3 emits are dropped.
    from prometheus_client import REGISTRY

    def exported() -> float:
        return REGISTRY.get_sample_value("azsidecar_audit_dropped_records_total",
                                         {"kind": "metadata_lookup", "reason": "queue_full"}) or 0.0

    before = exported()
    writer = AuditWriter(AuditConfig(output=str(tmp_path), max_queue=2), zone="z", component="proxy", start=False)
    for partition in range(5):
        writer.emit("metadata_lookup", {"ts_ms": H0_MS, "topic": "t", "partition": partition, "cache": "hit"})
    stats = writer.stats()
    assert (stats.emitted, stats.dropped) == (2, 3)
    assert exported() - before == 3  # also exported for alerting (AzsidecarAuditRecordsDropped)
    writer.close()
    records = flat(read_all(tmp_path))
    assert [r["partition"] for r in records if r["kind"] == "metadata_lookup"] == [0, 1]
    drops = [r for r in records if r["kind"] == "audit_drop"]
    assert [(d["dropped_kind"], d["dropped"], d["reason"], d["zone"]) for d in drops] == [
        ("metadata_lookup", 3, "queue_full", "z")]


def test_unknown_fields_and_kinds_are_rejected_counted_and_logged_once(tmp_path, caplog):
    writer = AuditWriter(AuditConfig(output=str(tmp_path)), zone="z", component="proxy")
    with caplog.at_level(logging.ERROR, logger="spark_audit.writer"):
        writer.emit("produce_batch", {"ts_ms": H0_MS, "bytez": 10})  # typo: unknown field
        writer.emit("produce_batch", {"ts_ms": H0_MS, "bytez": 11})
        writer.emit("no_such_kind", {"ts_ms": H0_MS})
        writer.emit("produce_batch", {"ts_ms": H0_MS, "bytes": 12.0, "latency_ms": 3})  # coerced: 12, 3.0
        writer.emit("produce_batch", {"ts_ms": H0_MS, "bytes": 12.5})  # a fraction in a long: rejected
        writer.close()
    records = flat(read_all(tmp_path))
    good = [r for r in records if r["kind"] == "produce_batch"]
    assert [(r["bytes"], r["latency_ms"]) for r in good] == [(12, 3.0)]
    assert isinstance(good[0]["bytes"], int)
    drops = sorted((r["dropped_kind"], r["dropped"], r["reason"]) for r in records if r["kind"] == "audit_drop")
    # 2 unknown-field emits + the fractional one (refused by emit's coercion); drop records
    # may be split over the writer's drains, so sum per kind.
    per_kind: dict[str, int] = {}
    for kind, count, reason in drops:
        assert reason == "invalid"
        per_kind[kind] = per_kind.get(kind, 0) + count
    assert per_kind == {"produce_batch": 3, "no_such_kind": 1}
    assert writer.stats().rejected == 4
    messages = [r.getMessage() for r in caplog.records]
    assert sum("bytez" in m for m in messages) == 1  # logged once, not per record
    assert sum("no_such_kind" in m for m in messages) == 1


def test_files_roll_on_size_and_are_never_visible_half_written(tmp_path):
    writer = AuditWriter(AuditConfig(output=str(tmp_path), roll_bytes=1024), zone="z", component="proxy")
    for i in range(40):  # ~130 bytes per line: 40 lines ~ 5 KB -> at least 4 files
        writer.emit("metadata_lookup", {"ts_ms": H0_MS + i, "topic": "t" * 40, "partition": i, "cache": "hit"})
    writer.close()
    files = read_all(tmp_path)
    assert len(files) >= 4
    assert not [p for p in tmp_path.rglob(".*")]  # no in-progress files left behind
    assert sorted(r["partition"] for r in flat(files)) == list(range(40))


def test_emit_from_trio_and_asyncio(tmp_path):
    writer = AuditWriter(AuditConfig(output=str(tmp_path)), zone="z", component="proxy")

    async def trio_main():
        writer.emit("metadata_lookup", {"ts_ms": H0_MS, "topic": "trio", "partition": 0, "cache": "hit"})
        await trio.sleep(0)

    async def asyncio_main():
        writer.emit("metadata_lookup", {"ts_ms": H0_MS, "topic": "asyncio", "partition": 0, "cache": "hit"})
        await asyncio.sleep(0)

    trio.run(trio_main)
    asyncio.run(asyncio_main())
    writer.close()
    assert sorted(r["topic"] for r in flat(read_all(tmp_path))) == ["asyncio", "trio"]


def test_emit_after_close_is_counted_not_raised(tmp_path):
    writer = AuditWriter(AuditConfig(output=str(tmp_path)), zone="z", component="proxy")
    writer.close()
    writer.emit("metadata_lookup", {"ts_ms": H0_MS, "topic": "t", "partition": 0, "cache": "hit"})
    assert writer.stats().dropped == 1


def test_records_are_encoded_as_they_are_emitted_in_order_on_either_loop(tmp_path):
    writer = AuditWriter(AuditConfig(output=str(tmp_path)), zone="z", component="proxy", start=False)
    seen: dict[str, tuple[int, int]] = {}

    def emit_three(topic: str) -> int:
        before = writer.stats().emitted
        for partition in range(3):
            writer.emit("metadata_lookup", {"ts_ms": H0_MS, "topic": topic, "partition": partition, "cache": "hit"})
        return before

    async def trio_main():
        seen["trio"] = (emit_three("trio"), writer.stats().emitted)  # no loop turn in between

    async def asyncio_main():
        seen["asyncio"] = (emit_three("asyncio"), writer.stats().emitted)

    trio.run(trio_main)
    asyncio.run(asyncio_main())
    assert seen == {"trio": (0, 3), "asyncio": (3, 6)}  # encoded during emit, before any loop turn
    writer.close()
    records = flat(read_all(tmp_path))
    assert [(r["topic"], r["partition"]) for r in records] == [
        ("trio", 0), ("trio", 1), ("trio", 2), ("asyncio", 0), ("asyncio", 1), ("asyncio", 2)]


def test_a_bad_value_is_rejected_when_emitted(tmp_path):
    writer = AuditWriter(AuditConfig(output=str(tmp_path)), zone="z", component="proxy")

    async def main():
        writer.emit("metadata_lookup", {"ts_ms": H0_MS, "topic": "t", "partition": "not a number", "cache": "hit"})
        assert writer.stats().rejected == 1  # at once, not at a later loop turn
        writer.emit("metadata_lookup", {"ts_ms": H0_MS, "topic": "t", "partition": 1.5, "cache": "hit"})
        await asyncio.sleep(0)

    asyncio.run(main())
    writer.close()
    assert writer.stats().rejected == 2
    drops = flat(read_all(tmp_path))
    assert [(r["kind"], r["reason"], r["dropped"]) for r in drops] == [("audit_drop", "invalid", 2)]  # audited
