"""A real audit writer killed with -9 mid-stream: the next writer of the same component
salvages its open file, and every record it had flushed is counted exactly once (local
directory and s3:// output)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploy.local.processes import DUMMY_CREDENTIALS
from spark_audit.config import AuditConfig
from spark_audit.salvage import salvage_gzip_lines
from spark_audit.writer import AuditWriter

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parents[3]
FLUSHED_BEFORE_KILL = 5_000  # records the child's open file must hold before we kill it
WAIT_S = 30.0

CHILD = """
import sys
from spark_audit.config import AuditConfig
from spark_audit.writer import AuditWriter
output, endpoint, spool = sys.argv[1], sys.argv[2] or None, sys.argv[3] or None
w = AuditWriter(AuditConfig(output=output, flush_seconds=0.2, s3_endpoint_url=endpoint, spool_dir=spool),
                zone="az1", component="proxy")
for i in range(3_000_000):  # ends by itself if nobody kills it (~20 s)
    w.emit("metadata_lookup", {"topic": "t", "partition": i, "cache": "hit"})
    if i % 50 == 0:
        w.stats()  # a lock round: lets the writer thread run, like a real event loop would
w.close()
"""


def run_child_until_flushed(output: str, spool: Path, endpoint: str = "") -> subprocess.Popen:
    """Start the writing child, wait until its open file holds FLUSHED_BEFORE_KILL records, kill -9 it."""
    env = {**os.environ, **DUMMY_CREDENTIALS, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, output, endpoint, str(spool) if endpoint else ""],
                             cwd=REPO, env=env, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + WAIT_S
        seen = 0
        while seen < FLUSHED_BEFORE_KILL:  # poll the open file: the event the writer exposes
            assert child.poll() is None, child.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, f"the child's open file held only {seen} records"
            files = list(spool.rglob(".proxy-*.inprogress"))
            seen = sum(len(salvage_gzip_lines(f.read_bytes()).lines) for f in files)
            time.sleep(0.05)
    finally:
        child.kill()
        child.wait(timeout=10)
    assert list(spool.rglob(".proxy-*.inprogress")), "the killed writer left no in-progress file"
    return child


def check_counted_once(records: list[dict], child_pid_files: int) -> None:
    sequence = sorted(r["partition"] for r in records if r["kind"] == "metadata_lookup")
    # Everything the dead writer flushed, exactly once, as a prefix of what it emitted: no
    # gap (records are flushed in order) and no duplicate.
    assert len(sequence) >= FLUSHED_BEFORE_KILL
    assert sequence == list(range(len(sequence)))
    drops = [r for r in records if r["kind"] == "audit_drop"]
    assert all(d["reason"] == "torn_tail" and d["salvaged"] == len(sequence) for d in drops), drops
    assert len(drops) <= child_pid_files


def test_local_output_killed_writer_is_salvaged_by_the_next(tmp_path):
    out = tmp_path / "audit"
    out.mkdir()
    run_child_until_flushed(str(out), out)

    successor = AuditWriter(AuditConfig(output=str(out)), zone="az1", component="proxy")
    assert successor.close()

    assert not list(out.rglob(".*")), "an in-progress file is left"
    assert successor.stats().salvaged_files == 1
    files = list(out.rglob("*.jsonl.gz"))
    records = [json.loads(line) for f in files for line in gzip.open(f, "rt")]
    check_counted_once(records, child_pid_files=1)
    assert successor.stats().salvaged_records == sum(r["kind"] == "metadata_lookup" for r in records)


def test_s3_output_killed_writer_is_salvaged_and_uploaded_by_the_next(tmp_path, s3_bucket, monkeypatch):
    for name, value in DUMMY_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    server, bucket = s3_bucket
    spool = tmp_path / "spool"
    spool.mkdir()
    run_child_until_flushed(f"s3://{bucket}/audit", spool, endpoint=server.endpoint_url)

    successor = AuditWriter(AuditConfig(output=f"s3://{bucket}/audit", s3_endpoint_url=server.endpoint_url,
                                        spool_dir=str(spool)), zone="az1", component="proxy")
    assert successor.close()

    assert not [p for p in spool.rglob("*") if p.is_file()], "the spool still holds files"
    s3 = server.client()
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="audit/")["Contents"]]
    records = [json.loads(line) for key in keys
               for line in gzip.decompress(s3.get_object(Bucket=bucket, Key=key)["Body"].read()).splitlines()]
    check_counted_once(records, child_pid_files=1)
