"""AuditWriter: the AuditSink the components use in production.

Strategy: `emit` runs on the caller's thread (a trio task, an asyncio task, plain code):
it checks the kind and field names against `records.KINDS`, stamps the common fields,
makes the JSON line with the values checked against their declared types (~6 µs,
spark_audit/_jsonline.py) and appends it to a bounded deque. It never blocks, never raises
(a full queue or a bad record is counted, logged once per kind, and later written as an
`audit_drop` record so nothing disappears silently), and while records flow it never wakes
the writer thread, which drains the deque every QUEUE_POLL_S.

Idle, the thread does not poll: after a drain that found nothing it sleeps until its next
deadline (an open file's sync or roll, at most IDLE_WAIT_MAX_S), and the next emit wakes
it, once. An idle proxy woke 5 times a second for this thread alone, most of its
wake-ups (bench/bench_idle.py); a fleet of mostly idle sidecars pays that on every host.
A burst after a quiet spell is drained as quickly as before: its first record wakes the
thread, which then polls again until a drain finds the queue empty.

Why inline and not at the event loop's next turn: deferring the encoding (asyncio
`call_soon`, trio `run_sync_soon`) was tried; on trio every deferral wakes the loop through
its wake-up socket, and on both loops the deferred work ran in the middle of the next
latency-critical step (a round trip's next hop waits one loop turn at a checkpoint). Paired
runs of the router benchmark: WAL-path overhead p50 2.99 -> 2.77 ms with the encoding
inline (docs/benchmarks.md).

Why the JSON is made by the caller: the writer thread used to encode every record itself,
holding the GIL for ~25 µs per record, a few ms per drain on a busy proxy. Each time the
event loop released the GIL for a system call meanwhile, the writer took it and kept it
for up to the switch interval, so one request could wait milliseconds (one-record Produce
round trips through the proxy: p99 2.1-3.4 ms with the audit on against ~1.0 ms with it
off). Now the thread joins ready lines and hands them to zlib, which releases the GIL.

One background thread owns all file I/O: it appends the JSON lines, one gzip write per
file and drain (in chunks of at most WRITE_CHUNK_BYTES), to files partitioned
`date=YYYY-MM-DD/hour=HH/zone=Z/`, and rolls
a file when it reaches `roll_bytes` (uncompressed) or `roll_seconds`. A file is written
under a dot-prefixed temporary name (Spark and Hadoop skip those) and renamed when
closed, so readers only ever see complete gzip members. With an `s3://bucket/prefix`
output the closed files are uploaded with boto3 from that same thread and removed locally;
they close at least every `upload_seconds`, which bounds what a lost disk can take along.

Crashes. The open file's gzip stream is sync-flushed every `flush_seconds` (a deflate
block boundary: everything written so far decompresses), and the writer holds an
exclusive flock on it. A writer killed with -9 leaves `.<name>.inprogress`; the next
writer of the same component and directory salvages it when it starts
(spark_audit/salvage.py: complete records kept under the final name, a torn tail audited
as `audit_drop` reason `torn_tail`), and with S3 output uploads whatever closed files the
dead one had not. A crash thus loses at most the last `flush_seconds` of records (plus the
queue of a writer too slow to keep up, which is bounded by `max_queue`).
"""

from __future__ import annotations

import collections
import fcntl
import gzip
import logging
import os
import secrets
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import Counter

from core.audit import COMMON_FIELDS, KINDS, SCHEMA_VERSION
from spark_audit._jsonline import LineEncoder
from spark_audit.config import AuditConfig
from spark_audit.salvage import INPROGRESS_SUFFIX, SalvageReport, salvage_orphans

log = logging.getLogger(__name__)
# The audit_drop records say the same in the audit itself; this is for alerting while it runs.
DROPPED = Counter("azsidecar_audit_dropped_records_total", "Audit records dropped, by kind and reason (queue_full, invalid)",
                  ["kind", "reason"])

QUEUE_POLL_S = 0.2  # the writer thread drains the queue this often (and rolls files, writes drop counts)
IDLE_WAIT_MAX_S = 60.0  # an idle writer thread looks at least this often, whatever its deadlines
CLOSE_TIMEOUT_S = 30.0  # close() waits this long for the queue to drain and uploads to finish
UPLOAD_ATTEMPTS = 3  # S3 upload tries per closed file before it is left on local disk
GZIP_LEVEL = 6  # zlib default: ~5x on audit JSON at a fraction of level 9's CPU
WRITE_CHUNK_BYTES = 1024 * 1024  # lines handed to one gzip write at most (bounds the join's copy)

_FIELD_TYPES: dict[str, dict[str, str]] = {
    kind: dict(COMMON_FIELDS + fields) for kind, fields in KINDS.items()
}
_ALLOWED: dict[str, frozenset[str]] = {kind: frozenset(types) for kind, types in _FIELD_TYPES.items()}
_ENCODERS: dict[str, LineEncoder] = {kind: LineEncoder(types) for kind, types in _FIELD_TYPES.items()}


@dataclass(frozen=True)
class WriterStats:
    """Counters since start; `dropped`/`rejected` include records not yet audited as drops."""

    emitted: int
    written: int
    dropped: int  # queue full, or emitted after close()
    rejected: int  # unknown kind, unknown field, or a value of the wrong type
    files: int
    upload_errors: int
    salvaged_files: int = 0  # in-progress files of dead writers salvaged at start
    salvaged_records: int = 0  # complete records found in them


class _OpenFile:
    def __init__(self, tmp_path: Path, final_path: Path, relative: str, opened_s: float) -> None:
        self.tmp_path = tmp_path
        self.final_path = final_path
        self.relative = relative  # partition path + file name, the S3 key suffix
        self.opened_s = opened_s
        self.raw_bytes = 0  # written or pending
        self.pending: list[bytes] = []  # lines not yet handed to the gzip stream
        self.pending_bytes = 0
        self.raw = open(tmp_path, "wb")  # noqa: SIM115 - closed in close()
        # Held for the file's life; the kernel drops it if we die: salvage_orphans takes
        # only files whose lock it can get.
        fcntl.flock(self.raw.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        self.stream = gzip.GzipFile(filename=tmp_path.name, mode="wb", compresslevel=GZIP_LEVEL, fileobj=self.raw)
        self.synced_s = opened_s
        self.unsynced = False  # lines handed to gzip since the last sync flush

    def flush_pending(self) -> int:
        """Hand the pending lines to the gzip stream; returns how many there were."""
        count = len(self.pending)
        if count:
            self.stream.write(b"".join(self.pending))
            self.pending = []
            self.pending_bytes = 0
            self.unsynced = True
        return count

    def sync(self, now_s: float) -> None:
        """Make everything written so far decompressible from the file (Z_SYNC_FLUSH + write)."""
        self.stream.flush()
        self.synced_s = now_s
        self.unsynced = False

    def close(self) -> None:
        self.stream.close()
        self.raw.close()


class AuditWriter:
    """Non-blocking AuditSink writing rolling gzip JSON lines files (local or S3).

    `zone` is this component's AZ id (every record's `zone` and its partition);
    `component` names the files (`proxy`, `agent`, ...). `start=False` leaves the writer
    thread stopped until `start()`; records queue up (and overflow) meanwhile.
    Raises ValueError for an s3:// output without a bucket.
    """

    def __init__(self, config: AuditConfig, zone: str, component: str, *, start: bool = True) -> None:
        self._config = config
        self._zone = zone
        self._component = component
        self._pid = os.getpid()
        # In a container every restart is PID 1: the run id keeps a new writer's names (and S3
        # keys) from replacing the files of the one before, salvaged or uploaded.
        self._run_id = secrets.token_hex(3)
        # A deque, not a queue.Queue: emit() on the data path must not wake the writer thread
        # for every record (a thread switch and a GIL hand-off each, ~1 ms on the proxy's
        # event loop). The thread drains it every QUEUE_POLL_S instead, and only an idle
        # thread (`_sleeping`) is woken, by the first record after it. append/popleft are
        # atomic; the bound is checked before append (it may overshoot by a few records
        # under concurrent emitters, never grow without bound).
        self._queue: collections.deque[tuple[int, bytes]] = collections.deque()  # (ts_ms, JSON line)
        self._lock = threading.Lock()  # guards the counters below; held for increments only
        self._emitted = 0
        self._written = 0
        self._dropped_total = 0
        self._rejected_total = 0
        self._pending_drops: dict[tuple[str, str], int] = {}  # (kind, reason) -> not yet audited
        self._logged_once: set[tuple[str, str]] = set()
        self._files_done = 0
        self._upload_errors = 0
        self._salvaged: list[SalvageReport] = []
        self._file_seq = 0
        self._open: dict[str, _OpenFile] = {}
        self._wake = threading.Event()  # set by close() and by the first record for an idle thread
        self._sleeping = False  # the thread waits for a record (or a deadline), not for its next poll
        self._closed = False
        self._s3_bucket: str | None = None
        self._s3_prefix = ""
        self._s3: Any = None  # a boto3 S3 client (boto3 is untyped), made on the first upload
        if config.output.startswith("s3://"):
            bucket, _, prefix = config.output[len("s3://"):].partition("/")
            if not bucket:
                raise ValueError(f"audit.output {config.output!r}: no bucket")
            self._s3_bucket, self._s3_prefix = bucket, prefix.strip("/")
            self._root = Path(config.spool_dir) if config.spool_dir else (
                Path(tempfile.gettempdir()) / "azsidecar-audit-spool" / bucket / (self._s3_prefix or "_"))
        else:
            self._root = Path(config.output)
        self._roll_seconds = (min(config.roll_seconds, config.upload_seconds) if self._s3_bucket is not None
                              else config.roll_seconds)
        self._thread = threading.Thread(target=self._run, name=f"audit-writer-{component}", daemon=True)
        self._started = False
        if start:
            self.start()

    # -- caller side -------------------------------------------------------------

    def emit(self, kind: str, fields: Mapping[str, Any]) -> None:
        """Queue one record; never blocks, never raises (problems are counted and audited)."""
        allowed = _ALLOWED.get(kind)
        if allowed is None:
            self._reject(kind, f"unknown audit record kind {kind!r}")
            return
        unknown = fields.keys() - allowed
        if unknown:
            self._reject(kind, f"unknown field(s) {sorted(unknown)} for kind {kind!r}")
            return
        record = dict(fields)
        record["schema_version"] = SCHEMA_VERSION
        record["kind"] = kind
        record["zone"] = self._zone
        if record.get("ts_ms") is None:
            record["ts_ms"] = int(time.time() * 1000)
        if self._closed:
            self._count_drop(kind, "queue_full", "audit writer is closed; dropping records")
            return
        if len(self._queue) >= self._config.max_queue:
            self._count_drop(kind, "queue_full", f"audit queue full ({self._config.max_queue}); dropping records")
            return
        try:
            line = _json_line(kind, record)
        except (TypeError, ValueError) as exc:
            self._reject(kind, f"bad value in {kind} record: {exc}")
            return
        self._queue.append((record["ts_ms"], line))
        with self._lock:
            self._emitted += 1
        self._wake_if_idle()

    def stats(self) -> WriterStats:
        with self._lock:
            return WriterStats(self._emitted, self._written, self._dropped_total, self._rejected_total,
                               self._files_done, self._upload_errors, len(self._salvaged),
                               sum(r.records for r in self._salvaged))

    def salvaged(self) -> list[SalvageReport]:
        """The dead writers' files this one salvaged at start (empty until its thread ran)."""
        with self._lock:
            return list(self._salvaged)

    def start(self) -> None:
        """Start the writer thread (idempotent)."""
        if not self._started:
            self._started = True
            self._thread.start()

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> bool:
        """Write everything queued, the pending drop counts, close (and upload) all files.

        Returns True when done, False after `timeout_s` (the thread is a daemon; what it
        has not written by then is lost, and logged). Safe to call twice.
        """
        if not self._closed:
            self._closed = True
            self.start()
            self._wake.set()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            log.error("audit writer %s did not finish within %.0f s; %d records still queued",
                      self._component, timeout_s, len(self._queue))
            return False
        return True

    def _wake_if_idle(self) -> None:
        # Read after the append (or count) it follows: the thread sets _sleeping before it
        # looks at the queue one last time, so either it sees the record or we see it asleep.
        if self._sleeping:
            self._sleeping = False
            self._wake.set()

    # -- counters ----------------------------------------------------------------

    def _reject(self, kind: str, message: str) -> None:
        DROPPED.labels(kind, "invalid").inc()
        with self._lock:
            self._rejected_total += 1
            key = (kind, "invalid")
            self._pending_drops[key] = self._pending_drops.get(key, 0) + 1
            first = key not in self._logged_once
            self._logged_once.add(key)
        self._wake_if_idle()
        if first:
            log.error("audit record rejected: %s (logged once per kind; counted as audit_drop)", message)

    def _count_drop(self, kind: str, reason: str, message: str) -> None:
        DROPPED.labels(kind, reason).inc()
        with self._lock:
            self._dropped_total += 1
            key = (kind, reason)
            self._pending_drops[key] = self._pending_drops.get(key, 0) + 1
            first = key not in self._logged_once
            self._logged_once.add(key)
        self._wake_if_idle()
        if first:
            log.warning("%s (kind %s; logged once, counted as audit_drop)", message, kind)

    # -- writer thread -----------------------------------------------------------

    def _run(self) -> None:
        try:
            self._recover()
            wait_s = QUEUE_POLL_S
            while True:
                if self._wake.wait(wait_s):  # close() and, when idle, the next record wake it at once
                    self._wake.clear()
                self._sleeping = False
                closing = self._closed
                written = self._drain()
                written += self._write_drop_records()
                now_s = time.monotonic()
                self._roll(now_s, force=False)
                if closing and not self._queue:
                    break
                wait_s = QUEUE_POLL_S
                if not written:
                    wait_s = self._idle_wait(now_s)
        except Exception:  # the thread must not die silently; the data path is unaffected
            log.exception("audit writer %s failed; audit records are being lost", self._component)
        finally:
            try:
                self._drain()  # an emit that raced with close() still gets written
                self._write_drop_records()
            except Exception:  # same failure as above, most likely: still close the files
                log.exception("audit writer %s could not write its last records", self._component)
            self._roll(time.monotonic(), force=True)

    def _idle_wait(self, now_s: float) -> float:
        """Mark the thread idle and return how long it may sleep (0 if a record came meanwhile)."""
        self._sleeping = True
        if self._queue or self._pending_drops:  # emitted before it could see _sleeping
            self._sleeping = False
            return 0.0
        return idle_wait_s(now_s, [(h.opened_s, h.synced_s if h.unsynced else None) for h in self._open.values()],
                           self._roll_seconds, self._config.flush_seconds)

    def _drain(self) -> int:
        """Write every queued line: per file, one gzip write per WRITE_CHUNK_BYTES of lines.
        Returns how many lines were queued."""
        drained = 0
        while self._queue:
            ts_ms, line = self._queue.popleft()
            self._add_line(_partition(ts_ms, self._zone), line)
            drained += 1
        now_s = time.monotonic()
        for handle in self._open.values():
            self._flush(handle)
            if handle.unsynced and now_s - handle.synced_s >= self._config.flush_seconds:
                handle.sync(now_s)
        return drained

    def _recover(self) -> None:
        """Salvage what dead writers of this component left open; with S3 output, upload
        the closed files they (or an earlier failed upload) left in the spool."""
        reports = salvage_orphans(self._root, self._component, int(time.time() * 1000))
        with self._lock:
            self._salvaged.extend(reports)
        if self._s3_bucket is None or not self._root.is_dir():
            return
        for path in sorted(self._root.rglob(f"{self._component}-*.jsonl.gz")):
            relative = str(path.relative_to(self._root))
            if path.name.endswith(INPROGRESS_SUFFIX) or relative.count("/") != 3:
                continue
            self._upload_path(path, relative)

    def _add_line(self, partition: str, line: bytes) -> None:
        handle = self._open.get(partition)
        if handle is None:
            handle = self._open_file(partition)
        handle.pending.append(line)
        handle.pending_bytes += len(line)
        handle.raw_bytes += len(line)
        if handle.raw_bytes >= self._config.roll_bytes:
            self._close_file(partition)
        elif handle.pending_bytes >= WRITE_CHUNK_BYTES:
            self._flush(handle)

    def _flush(self, handle: _OpenFile) -> None:
        written = handle.flush_pending()
        if written:
            with self._lock:
                self._written += written

    def _write_drop_records(self) -> int:
        """Write the drop counts gathered since the last call; returns how many records."""
        with self._lock:
            pending, self._pending_drops = self._pending_drops, {}
        now_ms = int(time.time() * 1000)
        for (kind, reason), count in sorted(pending.items()):
            # Written directly, not queued: a drop record must not itself be dropped.
            record = {"schema_version": SCHEMA_VERSION, "kind": "audit_drop", "ts_ms": now_ms,
                      "zone": self._zone, "dropped_kind": kind, "dropped": count, "reason": reason}
            self._add_line(_partition(now_ms, self._zone), _json_line("audit_drop", record))
        for handle in self._open.values():
            self._flush(handle)
        return len(pending)

    def _open_file(self, partition: str) -> _OpenFile:
        self._file_seq += 1
        name = f"{self._component}-{self._pid}-{self._run_id}-{self._file_seq}.jsonl.gz"
        directory = self._root / partition
        directory.mkdir(parents=True, exist_ok=True)
        handle = _OpenFile(directory / f".{name}.inprogress", directory / name, f"{partition}/{name}",
                           time.monotonic())
        self._open[partition] = handle
        return handle

    def _roll(self, now_s: float, force: bool) -> None:
        for partition, handle in list(self._open.items()):
            if force or now_s - handle.opened_s >= self._roll_seconds:
                self._close_file(partition)

    def _close_file(self, partition: str) -> None:
        handle = self._open.pop(partition)
        self._flush(handle)
        os.replace(handle.tmp_path, handle.final_path)  # before close: our lock keeps salvage off it till then
        handle.close()
        with self._lock:
            self._files_done += 1
        if self._s3_bucket is not None:
            self._upload_path(handle.final_path, handle.relative)

    def _upload_path(self, path: Path, relative: str) -> None:
        key = f"{self._s3_prefix}/{relative}" if self._s3_prefix else relative
        if self._s3 is None:
            import boto3  # noqa: PLC0415 - only S3 output needs it; the CLI and local writers skip ~0.3 CPU-s

            self._s3 = boto3.client("s3", endpoint_url=self._config.s3_endpoint_url)
        last_error: Exception | None = None
        for _ in range(UPLOAD_ATTEMPTS):
            try:
                self._s3.upload_file(str(path), self._s3_bucket, key)
            except FileNotFoundError:
                return  # another writer's start-up uploaded and removed it (same key, same bytes)
            except Exception as exc:  # noqa: BLE001 - botocore raises many types; all mean "not uploaded"
                last_error = exc
                continue
            path.unlink(missing_ok=True)
            return
        with self._lock:
            self._upload_errors += 1
        log.error("audit upload of %s to s3://%s/%s failed after %d attempts, kept locally: %s",
                  path, self._s3_bucket, key, UPLOAD_ATTEMPTS, last_error)


def idle_wait_s(now_s: float, files: list[tuple[float, float | None]], roll_seconds: float,
                flush_seconds: float) -> float:
    """How long an idle writer thread may sleep at `now_s` (monotonic): until the first of its
    open files must roll (`roll_seconds` after it opened) or be sync-flushed (`flush_seconds`
    after its last sync, for a file with lines written since: its second element, else
    None), and never longer than IDLE_WAIT_MAX_S. `files`: (opened_s, synced_s or None)."""
    deadline = now_s + IDLE_WAIT_MAX_S
    for opened_s, unsynced_since in files:
        deadline = min(deadline, opened_s + roll_seconds)
        if unsynced_since is not None:
            deadline = min(deadline, unsynced_since + flush_seconds)
    return max(deadline - now_s, 0.0)


def _partition(ts_ms: int, zone: str) -> str:
    t = time.gmtime(ts_ms / 1000)
    return f"date={t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}/hour={t.tm_hour:02d}/zone={zone}"


def _json_line(kind: str, record: dict[str, Any]) -> bytes:
    """One JSON line of the record; raises TypeError/ValueError for a value that does not fit
    its declared type (an integral float in a `long` field is written as an integer: Spark's
    JSON reader would reject the whole line for a float there)."""
    return _ENCODERS[kind].encode(record)


__all__ = ["AuditWriter", "WriterStats"]
