"""Record bytes of the Fetch answers the pass-through forwarded, per broker and partition, as
`fetch_bytes` audit records.

Strategy: `passthrough_bytes` says how many bytes each broker sent the proxy's consumers, but
not for which partitions, so the leader placement planner could not weigh consumers. Each
Fetch answer the proxy forwards is scanned (kafka_protocol.fetch_response: partition headers
and `records` lengths only, no copy) and its record bytes are added to a counter keyed by
(broker id, topic, partition, from_leader); every interval the counters become one record per
key and start again, like passthrough_bytes. `from_leader` is the proxy's metadata at the time
of the answer: did the serving broker lead the partition (None: the metadata does not know
the partition, or the request came in on the bootstrap listener, broker -1). Partitions with
no record bytes in an answer (a long poll that timed out) add nothing.

Bounded: at most MAX_KEYS keys between flushes; bytes for a key beyond it are counted under
(broker, "", OVERFLOW_PARTITION, None). An answer the scanner refuses (truncated, a version
it does not read) was forwarded untouched all the same; its whole frame is counted under
(broker, "", UNPARSED_PARTITION, None), so nothing is dropped silently. The counter and the
answer's accounting are pure; `FetchMeter.run` is the thin loop.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Final

from core.audit import AuditSink
from core.audit_records import FetchBytesRecord
from core.periodic_flush import flush_every
from kafka_protocol.fetch_response import FetchScanError, TopicId, scan_fetch_response

KIND: Final = "fetch_bytes"
MAX_KEYS: Final = 8192  # (broker, topic, partition, from_leader) per interval: ~200 B each, < 2 MiB held
OVERFLOW_PARTITION: Final = -1  # the bytes of keys beyond MAX_KEYS, per broker
UNPARSED_PARTITION: Final = -2  # whole frames of answers the scanner refused, per broker

FetchKey = tuple[int, str, int, bool | None]  # (broker id, topic, partition, from_leader)
LeaderOf = Callable[[str, int], int | None]  # (topic, partition) -> leader id, None when unknown
TopicName = Callable[[TopicId], str | None]  # Fetch v13+ topic id -> name, None when unknown


class FetchCounter:
    """Record bytes per FetchKey since the last `take` (pure)."""

    def __init__(self, max_keys: int = MAX_KEYS) -> None:
        self._max_keys = max_keys
        self._bytes: dict[FetchKey, int] = {}
        self.unparsed_answers = 0  # since start: answers the scanner refused

    def add(self, key: FetchKey, size: int) -> None:
        held = self._bytes.get(key)
        if held is None and len(self._bytes) >= self._max_keys:
            key = (key[0], "", OVERFLOW_PARTITION, None)
            held = self._bytes.get(key)
        self._bytes[key] = (held or 0) + size

    def add_unparsed(self, broker_id: int, frame_bytes: int) -> None:
        self.unparsed_answers += 1
        key = (broker_id, "", UNPARSED_PARTITION, None)
        self._bytes[key] = self._bytes.get(key, 0) + frame_bytes  # one key per broker: beyond the bound too

    def take(self) -> dict[FetchKey, int]:
        """The counts so far, sorted by (broker, topic, partition); the counter starts again from zero."""
        taken, self._bytes = self._bytes, {}
        return dict(sorted(taken.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2], str(kv[0][3]))))


def count_answer(counter: FetchCounter, broker_id: int, response: bytes | memoryview, api_version: int,
                 leader_of: LeaderOf, topic_name: TopicName) -> bool:
    """Add one Fetch answer's record bytes (`response`: the frame without its size prefix) to
    `counter`; False when the answer did not scan (then counted as unparsed). Raises nothing
    the scanner raises."""
    try:
        partitions = scan_fetch_response(response, api_version)
    except FetchScanError:
        counter.add_unparsed(broker_id, len(response) + 4)
        return False
    for topic, partition, size in partitions:
        if size <= 0:
            continue
        if isinstance(topic, bytes):  # v13+: named by id; an id the metadata lacks is named by its text
            topic = topic_name(topic) or str(uuid.UUID(bytes=topic))
        leader = leader_of(topic, partition) if broker_id >= 0 else None
        counter.add((broker_id, topic, partition, None if leader is None else leader == broker_id), size)
    return True


def records(taken: dict[FetchKey, int], proxy_id: str, zone_of: Callable[[int], str],
            interval_ms: int) -> list[FetchBytesRecord]:
    """The `fetch_bytes` records of one interval's counts (pure)."""
    out: list[FetchBytesRecord] = []
    for (broker_id, topic, partition, from_leader), size in taken.items():
        record: FetchBytesRecord = {"proxy_id": proxy_id, "broker_id": broker_id, "broker_zone": zone_of(broker_id),
                                    "topic": topic, "partition": partition, "bytes": size, "interval_ms": interval_ms}
        if from_leader is not None:  # left out: the writer writes null
            record["from_leader"] = from_leader
        out.append(record)
    return out


class FetchMeter:
    """The counter and where its records go. `add` is called for every forwarded Fetch answer."""

    def __init__(self, audit: AuditSink, proxy_id: str, zone_of: Callable[[int], str], leader_of: LeaderOf,
                 topic_name: TopicName, interval_s: float) -> None:
        """`zone_of(broker id)`: the broker's zone ("" when unknown); `leader_of` and
        `topic_name` read the proxy's metadata as it is when the answer comes."""
        self.counter = FetchCounter()
        self._audit = audit
        self._proxy_id = proxy_id
        self._zone_of = zone_of
        self._leader_of = leader_of
        self._topic_name = topic_name
        self.interval_s = interval_s
        self._since = time.monotonic()

    def add(self, broker_id: int, response: bytes, api_version: int) -> None:
        count_answer(self.counter, broker_id, response, api_version, self._leader_of, self._topic_name)

    def flush(self) -> None:
        """Emit one record per key counted since the last flush."""
        now = time.monotonic()
        interval_ms = round((now - self._since) * 1000)
        self._since = now
        for fields in records(self.counter.take(), self._proxy_id, self._zone_of, interval_ms):
            self._audit.emit(KIND, fields)

    async def run(self) -> None:
        """Flush every interval_s until cancelled, and once more then."""
        await flush_every(self.interval_s, self.flush)
