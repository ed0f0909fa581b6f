"""The WAL path's per-object audit records summed per interval and key (pure).

Strategy: a WAL object costs a `wal_flush`, a `notification` per zone (and a prefetch), an
`agent_read` and an `agent_apply` per zone and its share of a `checkpoint_write`: ~1,700
records per GB at the demo's object sizes, more at S3 Express object rates. Each process
instead adds those records' fields into a counter per key - what the readers group by - and
every interval the counters become one summary record per key (core/audit.py, schema v15:
wal_flush_summary, notification_summary, agent_read_summary, agent_apply_summary,
checkpoint_summary) and start again. Counts and bytes are exact integer sums; times are
float sums with a fixed-bucket histogram where a reader takes percentiles
(core.latency_histogram).

What the keys keep, and why:
- an object's size class (its bytes rounded down to a power of two, the classes of the
  savings job's break-even table) on wal_flush_summary and notification_summary, with exact
  per-class sums, so the break-even by object size stays exact per class. A notification
  names only its object's key: the size class comes from that object's wal_flush, seen
  earlier by the same proxy (`KNOWN_OBJECTS` kept; UNKNOWN_SIZE_CLASS for a recovered object);
- a notification's whole packets at `path_mtu` (the sum of ceil(bytes / MSS) per round
  trip), since the jobs bill whole packets per message and a sum of bytes cannot give them;
- a checkpoint manifest's one PUT shared equally among the objects it names, per source zone
  of those objects (read from their keys as the jobs read it), so each manifest is billed once.

Memory is bounded: at `max_keys` keys held the caller is told to flush now (`full`), so a
new key never drops or merges a record. No clock and no I/O: the caller passes the time
(core.object_summary_sink is the shell).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from core import latency_histogram
from core.audit import OBJECT_SUMMARY_KINDS, UNKNOWN_SIZE_CLASS
from core.audit_records import (
    AgentApplySummaryRecord,
    AgentReadSummaryRecord,
    CheckpointSummaryRecord,
    NotificationSummaryRecord,
    WalFlushSummaryRecord,
)
from core.framing import DEFAULT_PATH_MTU, Framing

# Keys held between flushes, all kinds together: a proxy writes a few dozen per interval
# (zone sets x reasons x size classes); beyond, it flushes early (more records, none lost).
MAX_KEYS = 10_000
# Objects whose size class a proxy remembers for their notifications: notifications follow
# their object's PUT within a round trip, so a few thousand cover any rate.
KNOWN_OBJECTS = 4_096
# <hash4>/wal/<source zone>/... in a WAL key (wal_s3.writer.object_key), as the jobs read it.
_SOURCE_ZONE_IN_KEY = re.compile(r"(?:^|/)[0-9a-f]{4}/wal/([A-Za-z0-9._-]+)/")

FlushKey = tuple[str, str, str, bool, int]  # writer_id, zones, reason, ok, size_class
NotificationKey = tuple[str, str, int]  # dest_zone, status, size_class
ReadKey = str  # source_zone
ApplyKey = tuple[str, str]  # source_zone, status
CheckpointKey = tuple[str, str]  # source_zone, status


def size_class(nbytes: int) -> int:
    """`nbytes` rounded down to a power of two (0 for 0 or less): the break-even table's classes."""
    return 1 << (nbytes.bit_length() - 1) if nbytes > 0 else 0


def source_zone_of(key: str) -> str:
    """The writer's zone named in a WAL object key ("" when the key does not name one)."""
    match = _SOURCE_ZONE_IN_KEY.search(key)
    return match.group(1) if match else ""


@dataclass
class Timing:
    """A time's exact sum, its largest value and its histogram."""

    sum_ms: float = 0.0
    max_ms: float = 0.0
    buckets: dict[int, int] = field(default_factory=dict)

    def add(self, value_ms: float) -> None:
        value_ms = max(0.0, value_ms)
        self.sum_ms += value_ms
        self.max_ms = max(self.max_ms, value_ms)
        bucket = latency_histogram.bucket_of(value_ms)
        self.buckets[bucket] = self.buckets.get(bucket, 0) + 1

    @property
    def hist(self) -> str:
        return latency_histogram.encode(self.buckets)


@dataclass
class Span:
    """When a key's first and last record of the interval were counted."""

    first_ts_ms: int = 0
    last_ts_ms: int = 0

    def at(self, now_ms: int) -> None:
        self.last_ts_ms = now_ms


@dataclass
class FlushSums:
    span: Span = field(default_factory=Span)
    objects: int = 0
    bytes: int = 0
    entries: int = 0
    attempts: int = 0
    put_requests: int = 0
    put: Timing = field(default_factory=Timing)
    put_wait_ms: float = 0.0
    s3_request_ms: float = 0.0


@dataclass
class NotificationSums:
    span: Span = field(default_factory=Span)
    notifications: int = 0
    entries: int = 0
    attempts: int = 0
    request_bytes: int = 0
    response_bytes: int = 0
    request_packets: int = 0
    response_packets: int = 0
    request_messages: int = 0
    response_messages: int = 0
    entries_squared: int = 0
    entries_bytes: int = 0
    rtt: Timing = field(default_factory=Timing)


@dataclass
class ReadSums:
    span: Span = field(default_factory=Span)
    reads: int = 0
    bytes: int = 0
    gets: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    bytes_from_cache: int = 0
    latency: Timing = field(default_factory=Timing)
    get_ms: float = 0.0


@dataclass
class ApplySums:
    span: Span = field(default_factory=Span)
    applies: int = 0
    entries: int = 0
    read_ms: float = 0.0
    append_ms: float = 0.0
    handle: Timing = field(default_factory=Timing)


@dataclass
class CheckpointSums:
    span: Span = field(default_factory=Span)
    manifests: int = 0
    keys: int = 0
    manifest_puts: float = 0.0
    put_ms: float = 0.0


@dataclass
class Taken:
    """One interval's summary records, per kind, in key order."""

    flushes: list[WalFlushSummaryRecord] = field(default_factory=list)
    notifications: list[NotificationSummaryRecord] = field(default_factory=list)
    reads: list[AgentReadSummaryRecord] = field(default_factory=list)
    applies: list[AgentApplySummaryRecord] = field(default_factory=list)
    checkpoints: list[CheckpointSummaryRecord] = field(default_factory=list)


def _int(fields: Mapping[str, Any], name: str) -> int:
    return int(fields.get(name) or 0)


def _ms(fields: Mapping[str, Any], name: str) -> float:
    return max(0.0, float(fields.get(name) or 0.0))


def _packets(nbytes: int, mss: int) -> int:
    return -(-nbytes // mss) if nbytes > 0 else 0


class ObjectSummaries:
    """The per-object records of one interval (OBJECT_SUMMARY_KINDS), summed per key."""

    def __init__(self, max_keys: int = MAX_KEYS, path_mtu: int = DEFAULT_PATH_MTU,
                 known_objects: int = KNOWN_OBJECTS) -> None:
        """`path_mtu`: the MTU notification packets are counted at (audit.path_mtu). Raises
        ValueError for max_keys or known_objects below 1 or an MTU core.framing refuses."""
        if max_keys < 1 or known_objects < 1:
            raise ValueError("max_keys and known_objects must be >= 1")
        self._max_keys = max_keys
        self.path_mtu = path_mtu
        self._mss = Framing(path_mtu).mss
        self._known_limit = known_objects
        self._known: OrderedDict[str, int] = OrderedDict()  # object key -> size class, oldest first
        self._flushes: dict[FlushKey, FlushSums] = {}
        self._notifications: dict[NotificationKey, NotificationSums] = {}
        self._reads: dict[ReadKey, ReadSums] = {}
        self._applies: dict[ApplyKey, ApplySums] = {}
        self._checkpoints: dict[CheckpointKey, CheckpointSums] = {}
        self._since_ms: int | None = None

    def _held(self) -> int:
        return (len(self._flushes) + len(self._notifications) + len(self._reads) + len(self._applies)
                + len(self._checkpoints))

    @property
    def full(self) -> bool:
        """True when the keys held reached max_keys: take() before adding more."""
        return self._held() >= self._max_keys

    @property
    def empty(self) -> bool:
        return self._held() == 0

    def add(self, kind: str, fields: Mapping[str, Any], now_ms: int) -> bool:
        """Count one record of `kind` (core/audit.py fields) made at `now_ms`; False (and
        nothing counted) when `kind` is not one this class sums."""
        if kind not in OBJECT_SUMMARY_KINDS:
            return False
        if self._since_ms is None:
            self._since_ms = now_ms
        if kind == "wal_flush":
            self._add_flush(fields, now_ms)
        elif kind == "notification":
            self._add_notification(fields, now_ms)
        elif kind == "agent_read":
            self._add_read(fields, now_ms)
        elif kind == "agent_apply":
            self._add_apply(fields, now_ms)
        else:
            self._add_checkpoint(fields, now_ms)
        return True

    def _add_flush(self, fields: Mapping[str, Any], now_ms: int) -> None:
        nbytes = _int(fields, "bytes")
        cls = size_class(nbytes)
        object_key = str(fields.get("key") or "")
        if object_key:
            self._known[object_key] = cls
            self._known.move_to_end(object_key)
            while len(self._known) > self._known_limit:
                self._known.popitem(last=False)
        key = (str(fields.get("writer_id") or ""), str(fields.get("zones") or ""), str(fields.get("reason") or ""),
               bool(fields.get("ok")), cls)
        sums = self._flushes.get(key)
        if sums is None:
            sums = self._flushes[key] = FlushSums(Span(now_ms, now_ms))
        sums.span.at(now_ms)
        sums.objects += 1
        sums.bytes += nbytes
        sums.entries += _int(fields, "entries")
        sums.attempts += _int(fields, "attempts")
        sums.put_requests += _int(fields, "put_requests")
        sums.put.add(_ms(fields, "put_ms"))
        sums.put_wait_ms += _ms(fields, "put_wait_ms")
        sums.s3_request_ms += _ms(fields, "s3_request_ms")

    def _add_notification(self, fields: Mapping[str, Any], now_ms: int) -> None:
        cls = self._known.get(str(fields.get("key") or ""), UNKNOWN_SIZE_CLASS)
        key = (str(fields.get("dest_zone") or ""), str(fields.get("status") or ""), cls)
        sums = self._notifications.get(key)
        if sums is None:
            sums = self._notifications[key] = NotificationSums(Span(now_ms, now_ms))
        request, response, entries = _int(fields, "request_bytes"), _int(fields, "response_bytes"), _int(fields, "entries")
        sums.span.at(now_ms)
        sums.notifications += 1
        sums.entries += entries
        sums.attempts += _int(fields, "attempts")
        sums.request_bytes += request
        sums.response_bytes += response
        sums.request_packets += _packets(request, self._mss)
        sums.response_packets += _packets(response, self._mss)
        sums.request_messages += int(request > 0)
        sums.response_messages += int(response > 0)
        sums.entries_squared += entries * entries
        sums.entries_bytes += entries * (request + response)
        sums.rtt.add(_ms(fields, "rtt_ms"))

    def _add_read(self, fields: Mapping[str, Any], now_ms: int) -> None:
        key = str(fields.get("source_zone") or "")
        sums = self._reads.get(key)
        if sums is None:
            sums = self._reads[key] = ReadSums(Span(now_ms, now_ms))
        sums.span.at(now_ms)
        sums.reads += 1
        sums.bytes += _int(fields, "bytes")
        sums.gets += _int(fields, "gets")
        sums.cache_hits += _int(fields, "cache_hits")
        sums.cache_misses += _int(fields, "cache_misses")
        sums.bytes_from_cache += _int(fields, "bytes_from_cache")
        sums.latency.add(_ms(fields, "latency_ms"))
        sums.get_ms += _ms(fields, "get_ms")

    def _add_apply(self, fields: Mapping[str, Any], now_ms: int) -> None:
        key = (str(fields.get("source_zone") or ""), str(fields.get("status") or ""))
        sums = self._applies.get(key)
        if sums is None:
            sums = self._applies[key] = ApplySums(Span(now_ms, now_ms))
        sums.span.at(now_ms)
        sums.applies += 1
        sums.entries += _int(fields, "entries")
        sums.read_ms += _ms(fields, "read_ms")
        sums.append_ms += _ms(fields, "append_ms")
        sums.handle.add(_ms(fields, "handle_ms"))

    def _add_checkpoint(self, fields: Mapping[str, Any], now_ms: int) -> None:
        named = [k for k in str(fields.get("wal_keys") or "").split(",") if k]
        per_zone: dict[str, int] = {}
        for object_key in named:
            zone = source_zone_of(object_key)
            per_zone[zone] = per_zone.get(zone, 0) + 1
        if not per_zone:  # a manifest naming no key we can read: billed once, under no zone
            per_zone = {"": _int(fields, "keys")}
        total = sum(per_zone.values())
        status = str(fields.get("status") or "")
        for zone, count in per_zone.items():
            sums = self._checkpoints.get((zone, status))
            if sums is None:
                sums = self._checkpoints[(zone, status)] = CheckpointSums(Span(now_ms, now_ms))
            sums.span.at(now_ms)
            sums.manifests += 1
            sums.keys += count
            sums.manifest_puts += count / total if total else 1.0
            sums.put_ms += _ms(fields, "put_ms")

    def take(self, now_ms: int) -> Taken:
        """The records of everything added since the last take, ts_ms = `now_ms` and
        interval_ms = from the first add to `now_ms`, in key order; the counters start again
        (the objects known for their notifications are kept)."""
        interval_ms = max(0, now_ms - self._since_ms) if self._since_ms is not None else 0
        self._since_ms = None
        flushes, self._flushes = self._flushes, {}
        notifications, self._notifications = self._notifications, {}
        reads, self._reads = self._reads, {}
        applies, self._applies = self._applies, {}
        checkpoints, self._checkpoints = self._checkpoints, {}
        taken = Taken()
        for (writer_id, zones, reason, ok, cls), f in sorted(flushes.items()):
            taken.flushes.append({
                "ts_ms": now_ms, "writer_id": writer_id, "zones": zones, "reason": reason, "ok": ok, "size_class": cls,
                "objects": f.objects, "bytes": f.bytes, "entries": f.entries, "attempts": f.attempts,
                "put_requests": f.put_requests, "put_ms_sum": f.put.sum_ms, "put_wait_ms_sum": f.put_wait_ms,
                "s3_request_ms_sum": f.s3_request_ms, "put_max_ms": f.put.max_ms, "put_hist": f.put.hist,
                "first_ts_ms": f.span.first_ts_ms, "last_ts_ms": f.span.last_ts_ms, "interval_ms": interval_ms})
        for (dest_zone, status, cls), n in sorted(notifications.items()):
            taken.notifications.append({
                "ts_ms": now_ms, "dest_zone": dest_zone, "status": status, "size_class": cls,
                "notifications": n.notifications, "entries": n.entries, "attempts": n.attempts,
                "request_bytes": n.request_bytes, "response_bytes": n.response_bytes, "path_mtu": self.path_mtu,
                "request_packets": n.request_packets, "response_packets": n.response_packets,
                "request_messages": n.request_messages, "response_messages": n.response_messages,
                "entries_squared_sum": n.entries_squared, "entries_bytes_sum": n.entries_bytes,
                "rtt_ms_sum": n.rtt.sum_ms, "rtt_max_ms": n.rtt.max_ms, "rtt_hist": n.rtt.hist,
                "first_ts_ms": n.span.first_ts_ms, "last_ts_ms": n.span.last_ts_ms, "interval_ms": interval_ms})
        for source_zone, r in sorted(reads.items()):
            taken.reads.append({
                "ts_ms": now_ms, "source_zone": source_zone, "reads": r.reads, "bytes": r.bytes, "gets": r.gets,
                "cache_hits": r.cache_hits, "cache_misses": r.cache_misses, "bytes_from_cache": r.bytes_from_cache,
                "latency_ms_sum": r.latency.sum_ms, "get_ms_sum": r.get_ms, "latency_max_ms": r.latency.max_ms,
                "latency_hist": r.latency.hist, "first_ts_ms": r.span.first_ts_ms, "last_ts_ms": r.span.last_ts_ms,
                "interval_ms": interval_ms})
        for (source_zone, status), a in sorted(applies.items()):
            taken.applies.append({
                "ts_ms": now_ms, "source_zone": source_zone, "status": status, "applies": a.applies,
                "entries": a.entries, "read_ms_sum": a.read_ms, "append_ms_sum": a.append_ms,
                "handle_ms_sum": a.handle.sum_ms, "handle_max_ms": a.handle.max_ms, "handle_hist": a.handle.hist,
                "first_ts_ms": a.span.first_ts_ms, "last_ts_ms": a.span.last_ts_ms, "interval_ms": interval_ms})
        for (source_zone, status), c in sorted(checkpoints.items()):
            taken.checkpoints.append({
                "ts_ms": now_ms, "source_zone": source_zone, "status": status, "manifests": c.manifests,
                "keys": c.keys, "manifest_puts": c.manifest_puts, "put_ms_sum": c.put_ms,
                "first_ts_ms": c.span.first_ts_ms, "last_ts_ms": c.span.last_ts_ms, "interval_ms": interval_ms})
        return taken
