"""Salvage the audit files a crashed writer left open (`.<name>.inprogress`).

Strategy. A writer killed with -9 (or an OOM kill, a host crash) never renames its open
files, and the Spark jobs skip dot files by design, so those records would vanish from the
bill. The writer sync-flushes its gzip stream every `audit.flush_seconds`, so such a file
is a valid gzip stream up to the last flush, then at most a torn deflate block. The next
writer of the same component and audit directory runs `salvage_orphans` when it starts:

- `salvage_gzip_lines(data)` is the pure core: it decompresses as far as the bytes allow
  and keeps every complete JSON line; what follows (a torn line, compressed bytes that do
  not decompress) is counted, never guessed at.
- `salvage_orphans(root, component)` is the thin I/O shell: for every in-progress file of
  that component whose owner is gone (a writer holds an exclusive `flock` on its open file
  for its whole life; the kernel drops it when the process dies, so a lock we can take
  means a dead owner, in any PID namespace), it writes the complete records under the
  file's final name, adds one `audit_drop` record (reason `torn_tail`) when the tail was
  torn, and removes the in-progress file. The final name is the one the dead writer would
  have used, so a salvaged file reads like any other.
"""

from __future__ import annotations

import fcntl
import gzip
import json
import logging
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

from core.audit import SCHEMA_VERSION, fields_of
from spark_audit._jsonline import LineEncoder

log = logging.getLogger(__name__)

INPROGRESS_SUFFIX = ".inprogress"
SALVAGE_GZIP_LEVEL = 6  # as the writer's files
INFLATE_STEP = 4096  # bytes fed to zlib at once: what is lost of the output before a damaged spot
_ZONE_DIR = re.compile(r"^zone=(.*)$")
_DROP_ENCODER = LineEncoder(dict(fields_of("audit_drop")))


@dataclass(frozen=True)
class Salvaged:
    """What a (possibly torn) gzip JSON-lines file still holds.

    lines: every complete record line, newline included, in file order.
    torn_lines: records lost at the tail: a line without its newline or one that is not
    a JSON object counts 1; compressed bytes that would not decompress count 1 more (how
    many records they held is unknowable).
    torn_bytes: bytes past the last complete record: the partial line's bytes plus the
    compressed bytes that did not decompress.
    """

    lines: tuple[bytes, ...]
    torn_lines: int
    torn_bytes: int

    @property
    def torn(self) -> bool:
        return self.torn_lines > 0


def salvage_gzip_lines(data: bytes) -> Salvaged:
    """Complete JSON lines of a gzip stream (one or more members), however it ends. Never raises."""
    out, undecodable = _inflate(data)
    lines: list[bytes] = []
    torn_lines = 1 if undecodable else 0
    torn_bytes = undecodable
    start = 0
    while start < len(out):
        end = out.find(b"\n", start)
        if end < 0:
            torn_lines += 1
            torn_bytes += len(out) - start
            break
        line = bytes(out[start:end + 1])
        if _is_record(line):
            lines.append(line)
        else:
            torn_lines += 1
            torn_bytes += len(line)
        start = end + 1
    return Salvaged(tuple(lines), torn_lines, torn_bytes)


def _inflate(data: bytes) -> tuple[bytes, int]:
    """(everything that decompresses, how many input bytes did not).

    Fed in INFLATE_STEP pieces; decompress() returns nothing of a piece that hits damage,
    so such a piece is fed again byte by byte from a copy of the inflater taken before it,
    which keeps every byte of output that precedes the damage. A stream cut short is not an
    error: what it gave is kept and the caller finds the torn line."""
    out = bytearray()
    inflater = zlib.decompressobj(wbits=31)  # gzip header and trailer
    pos = 0
    while pos < len(data):
        piece = data[pos:pos + INFLATE_STEP]
        before = inflater.copy()
        try:
            out += inflater.decompress(piece)
        except zlib.error:
            good = 0
            for i in range(len(piece)):
                try:
                    out += before.decompress(piece[i:i + 1])
                except zlib.error:
                    break
                good = i + 1
                if before.eof:
                    break
            if not before.eof:
                return bytes(out), len(data) - pos - good
            inflater, piece = before, piece[:good]  # a member ended before the damage: go on after it
        pos += len(piece)
        if inflater.eof:  # one member ended: the rest is the next member (or trailing junk)
            pos -= len(inflater.unused_data)
            inflater = zlib.decompressobj(wbits=31)
    return bytes(out), 0


def _is_record(line: bytes) -> bool:
    try:
        value = json.loads(line)
    except ValueError:
        return False
    return isinstance(value, dict) and isinstance(value.get("kind"), str)


def torn_tail_record(ts_ms: int, zone: str, salvaged: Salvaged) -> bytes:
    """The audit_drop line that reports a torn tail (schema v9: reason torn_tail, salvaged)."""
    record = {"dropped_kind": "unknown", "dropped": salvaged.torn_lines, "reason": "torn_tail",
              "salvaged": len(salvaged.lines), "torn_bytes": salvaged.torn_bytes,
              "schema_version": SCHEMA_VERSION, "kind": "audit_drop", "ts_ms": ts_ms, "zone": zone}
    return _DROP_ENCODER.encode(record)


@dataclass(frozen=True)
class SalvageReport:
    """One in-progress file salvaged: where its records went and what was torn."""

    orphan: Path
    final_path: Path
    records: int
    torn_lines: int
    torn_bytes: int


def orphan_candidates(root: Path, component: str) -> list[Path]:
    """In-progress files of `component` under root (any partition), oldest name first."""
    if not root.is_dir():
        return []
    return sorted(root.rglob(f".{component}-*{INPROGRESS_SUFFIX}"))


def salvage_orphans(root: Path, component: str, now_ms: int) -> list[SalvageReport]:
    """Salvage every in-progress file of `component` under root whose writer is gone.

    Files whose lock is held belong to a live writer and are left alone. Errors on one file
    are logged and the file is left for the next start; this never raises for I/O errors.
    """
    reports: list[SalvageReport] = []
    for orphan in orphan_candidates(root, component):
        try:
            report = _salvage_one(orphan, now_ms)
        except OSError as exc:
            log.error("audit salvage of %s failed, left for the next start: %s", orphan, exc)
            continue
        if report is not None:
            reports.append(report)
    return reports


def _salvage_one(orphan: Path, now_ms: int) -> SalvageReport | None:
    try:
        fd = os.open(orphan, os.O_RDONLY)
    except FileNotFoundError:
        return None  # its writer closed it meanwhile
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None  # a live writer holds it
        if not orphan.exists():
            return None  # closed and renamed between our open and our lock
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read()
        salvaged = salvage_gzip_lines(data)
        final_name = orphan.name[1:-len(INPROGRESS_SUFFIX)]
        final_path = orphan.with_name(final_name)
        zone_match = _ZONE_DIR.match(orphan.parent.name)
        zone = zone_match.group(1) if zone_match else ""
        lines = list(salvaged.lines)
        if salvaged.torn:
            last_ts = _last_ts_ms(lines)
            lines.append(torn_tail_record(last_ts if last_ts is not None else now_ms, zone, salvaged))
        if lines:
            staging = orphan.with_name(f".{final_name}.salvage")
            with gzip.open(staging, "wb", compresslevel=SALVAGE_GZIP_LEVEL) as out:
                out.write(b"".join(lines))
            os.replace(staging, final_path)
        orphan.unlink()
    finally:
        os.close(fd)
    log.warning("audit: salvaged %s from a writer that did not close it: %d records kept, tail %s",
                orphan, len(salvaged.lines),
                f"torn ({salvaged.torn_lines} record(s), {salvaged.torn_bytes} bytes; audited as audit_drop)"
                if salvaged.torn else "intact")
    return SalvageReport(orphan, final_path if lines else orphan, len(salvaged.lines),
                         salvaged.torn_lines, salvaged.torn_bytes)


def _last_ts_ms(lines: list[bytes]) -> int | None:
    for line in reversed(lines):
        ts = json.loads(line).get("ts_ms")
        if isinstance(ts, int):
            return ts
    return None


__all__ = ["INPROGRESS_SUFFIX", "SalvageReport", "Salvaged", "orphan_candidates", "salvage_gzip_lines",
           "salvage_orphans", "torn_tail_record"]
