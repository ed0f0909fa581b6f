"""Salvage of the audit files a crashed writer left open: the pure core on hand-made torn
tails, the file shell on a directory, and the writer's own start-up salvage."""

from __future__ import annotations

import fcntl
import gzip
import json
import os
import time
import zlib
from pathlib import Path

import pytest

from core.audit import SCHEMA_VERSION
from spark_audit.config import AuditConfig
from spark_audit.salvage import salvage_gzip_lines, salvage_orphans
from spark_audit.writer import AuditWriter
from tests.integration.spark_audit.conftest import H0_MS

L1 = b'{"kind":"metadata_lookup","ts_ms":1000}\n'
L2 = b'{"kind":"metadata_lookup","ts_ms":2000}\n'
PARTIAL = b'{"kind":"metadata_lookup","ts'  # 29 bytes, no newline: the writer died mid-record


def sync_flushed(*chunks: bytes) -> bytes:
    """A gzip stream as the writer leaves it: header, then each chunk followed by a sync flush, no trailer."""
    deflater = zlib.compressobj(6, zlib.DEFLATED, 31)
    out = b""
    for chunk in chunks:
        out += deflater.compress(chunk) + deflater.flush(zlib.Z_SYNC_FLUSH)
    return out


def test_a_closed_file_is_kept_whole():
    s = salvage_gzip_lines(gzip.compress(L1 + L2))
    assert s.lines == (L1, L2) and s.torn_lines == 0 and s.torn_bytes == 0 and not s.torn


def test_a_stream_cut_at_a_sync_point_loses_nothing():
    s = salvage_gzip_lines(sync_flushed(L1, L2))
    assert s.lines == (L1, L2) and not s.torn


def test_a_partial_last_line_is_counted_as_torn():
    s = salvage_gzip_lines(sync_flushed(L1 + L2, PARTIAL))
    assert s.lines == (L1, L2)
    assert (s.torn_lines, s.torn_bytes) == (1, 29)


def test_damaged_compressed_bytes_after_a_sync_point_are_counted():
    # 0xff starts a deflate block of the reserved type 3: zlib refuses it at once.
    s = salvage_gzip_lines(sync_flushed(L1, L2) + b"\xff" * 10)
    assert s.lines == (L1, L2)
    assert (s.torn_lines, s.torn_bytes) == (1, 10)


def test_damage_after_more_than_one_inflate_step_keeps_what_came_before():
    lines = [b'{"kind":"k","ts_ms":%d,"pad":"%s"}\n' % (i, os.urandom(40).hex().encode()) for i in range(300)]
    stream = sync_flushed(b"".join(lines))
    assert len(stream) > 3 * 4096  # random hex: several pieces of INFLATE_STEP
    s = salvage_gzip_lines(stream + b"\xff\xff\xff")
    assert s.lines == tuple(lines) and (s.torn_lines, s.torn_bytes) == (1, 3)


def test_a_stream_truncated_inside_a_block_keeps_the_complete_lines_before_it():
    whole = sync_flushed(L1, L2)
    head = sync_flushed(L1)
    s = salvage_gzip_lines(whole[:len(head) + 3])  # 3 bytes into L2's block
    assert s.lines == (L1,)
    assert s.torn_lines <= 1  # a few bytes may or may not have produced a prefix of L2


def test_concatenated_members_are_all_read():
    s = salvage_gzip_lines(gzip.compress(L1) + gzip.compress(L2))
    assert s.lines == (L1, L2) and not s.torn


def test_a_line_that_is_not_a_record_is_counted_not_kept():
    s = salvage_gzip_lines(gzip.compress(L1 + b"not json\n" + b"[1]\n" + L2))
    assert s.lines == (L1, L2) and (s.torn_lines, s.torn_bytes) == (2, 9 + 4)


@pytest.mark.parametrize("data", [b"", gzip.compress(b"")[:10]], ids=["empty", "header-only"])
def test_a_file_with_nothing_in_it_has_nothing_torn(data):
    s = salvage_gzip_lines(data)
    assert s.lines == () and not s.torn


def partition(root: Path, zone: str = "az1") -> Path:
    part = root / "date=2026-01-01" / "hour=00" / f"zone={zone}"
    part.mkdir(parents=True)
    return part


def read_records(path: Path) -> list[dict]:
    return [json.loads(line) for line in gzip.open(path, "rt")]


def test_salvage_orphans_writes_the_final_file_with_a_drop_record_and_removes_the_orphan(tmp_path):
    part = partition(tmp_path)
    (part / ".proxy-41-abcdef-3.jsonl.gz.inprogress").write_bytes(sync_flushed(L1 + L2, PARTIAL))
    (part / ".agent-42-abcdef-1.jsonl.gz.inprogress").write_bytes(sync_flushed(L1))  # another component

    (report,) = salvage_orphans(tmp_path, "proxy", now_ms=99)

    assert (report.records, report.torn_lines, report.torn_bytes) == (2, 1, 29)
    assert sorted(p.name for p in part.iterdir()) == [".agent-42-abcdef-1.jsonl.gz.inprogress",
                                                      "proxy-41-abcdef-3.jsonl.gz"]
    records = read_records(part / "proxy-41-abcdef-3.jsonl.gz")
    assert records[:2] == [json.loads(L1), json.loads(L2)]
    assert records[2] == {"dropped_kind": "unknown", "dropped": 1, "reason": "torn_tail", "salvaged": 2,
                          "torn_bytes": 29, "schema_version": SCHEMA_VERSION, "kind": "audit_drop",
                          "ts_ms": 2000, "zone": "az1"}  # the last complete record's time: same partition


def test_an_intact_orphan_gets_no_drop_record(tmp_path):
    part = partition(tmp_path, "az2")
    (part / ".proxy-7-000000-1.jsonl.gz.inprogress").write_bytes(sync_flushed(L1))
    (report,) = salvage_orphans(tmp_path, "proxy", now_ms=99)
    assert (report.records, report.torn_lines) == (1, 0)
    assert read_records(part / "proxy-7-000000-1.jsonl.gz") == [json.loads(L1)]


def test_a_file_whose_writer_holds_its_lock_is_left_alone(tmp_path):
    part = partition(tmp_path)
    live = part / ".proxy-1-aaaaaa-1.jsonl.gz.inprogress"
    live.write_bytes(sync_flushed(L1))
    with open(live, "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert salvage_orphans(tmp_path, "proxy", now_ms=99) == []
    assert [p.name for p in part.iterdir()] == [live.name]


def test_a_writer_salvages_at_start_and_counts_it(tmp_path):
    part = partition(tmp_path, "z")
    (part / ".proxy-5-bbbbbb-1.jsonl.gz.inprogress").write_bytes(sync_flushed(L1 + L2, PARTIAL))
    writer = AuditWriter(AuditConfig(output=str(tmp_path)), zone="z", component="proxy")
    writer.emit("metadata_lookup", {"ts_ms": H0_MS + 5, "topic": "t", "partition": 0, "cache": "hit"})
    assert writer.close()
    stats = writer.stats()
    assert (stats.salvaged_files, stats.salvaged_records) == (1, 2)
    names = sorted(p.name for p in part.iterdir())
    assert "proxy-5-bbbbbb-1.jsonl.gz" in names and len(names) == 2  # salvaged + the new writer's file
    assert not any(n.startswith(".") for n in names)


def test_the_open_file_is_readable_after_a_flush_interval_and_locked(tmp_path):
    writer = AuditWriter(AuditConfig(output=str(tmp_path), flush_seconds=0.2), zone="z", component="proxy")
    try:
        for i in range(50):
            writer.emit("metadata_lookup", {"ts_ms": H0_MS + i, "topic": "t", "partition": i, "cache": "hit"})
        part = tmp_path / "date=2026-01-01" / "hour=00" / "zone=z"
        deadline = time.monotonic() + 10  # the flush comes within ~0.4 s; 10 s for a loaded machine
        seen: tuple[bytes, ...] = ()
        while len(seen) < 50 and time.monotonic() < deadline:  # poll the file: what a reader would see
            files = list(part.glob(".proxy-*.inprogress")) if part.is_dir() else []
            seen = salvage_gzip_lines(files[0].read_bytes()).lines if files else ()
            time.sleep(0.05)
        assert len(seen) == 50, "the open file never became readable"
        assert [json.loads(x)["partition"] for x in seen] == list(range(50))
        assert salvage_orphans(tmp_path, "proxy", now_ms=1) == []  # alive: locked
    finally:
        assert writer.close()
