"""Bytes the pass-through forwarded, by broker and API, as `passthrough_bytes` audit records.

Strategy: a consumer's Fetch answers are most of the bytes a sidecar moves besides
produce, and they cross zones whenever the broker they address is in another zone. Each
forwarded request adds its request and response bytes (whole frames, size prefix
included, as they go between the proxy and the broker) to a counter keyed by (broker id,
api key); every `interval_s` the counters become one record per key and start again, so
records stay few whatever the request rate. The keys are bounded (MAX_KEYS): a request
for a key beyond it is counted under OVERFLOW_API_KEY of its broker, never dropped
silently. The zone of a broker is looked up when the record is made (`zone_of`: the
configured broker_zones, else the broker's rack), so a broker learned later is still
named. The accumulator is pure (no clock, no I/O); the meter around it is the thin loop (`PassthroughMeter.run`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from core.audit import AuditSink
from core.audit_records import PassthroughBytesRecord
from core.periodic_flush import flush_every

KIND: Final = "passthrough_bytes"
DEFAULT_INTERVAL_S = 10.0  # one record per broker and API every 10 s: ~8640 a day per pair
MAX_KEYS = 1024  # (broker, api) pairs held between flushes: brokers x client APIs stays far below
OVERFLOW_API_KEY = -1  # api_key of the counts beyond MAX_KEYS


@dataclass
class Counts:
    requests: int = 0
    request_bytes: int = 0
    response_bytes: int = 0


class PassthroughCounter:
    """Request and response bytes per (broker id, api key) since the last `take` (pure)."""

    def __init__(self, max_keys: int = MAX_KEYS) -> None:
        self._max_keys = max_keys
        self._counts: dict[tuple[int, int], Counts] = {}

    def add(self, broker_id: int, api_key: int, request_bytes: int, response_bytes: int) -> None:
        key = (broker_id, api_key)
        counts = self._counts.get(key)
        if counts is None:
            if len(self._counts) >= self._max_keys:
                key = (broker_id, OVERFLOW_API_KEY)
                counts = self._counts.get(key)
            if counts is None:
                counts = self._counts[key] = Counts()
        counts.requests += 1
        counts.request_bytes += request_bytes
        counts.response_bytes += response_bytes

    def take(self) -> dict[tuple[int, int], Counts]:
        """The counts so far, sorted by key; the counter starts again from zero."""
        taken, self._counts = self._counts, {}
        return dict(sorted(taken.items()))


def records(taken: dict[tuple[int, int], Counts], proxy_id: str, zone_of: Callable[[int], str],
            interval_ms: int) -> list[PassthroughBytesRecord]:
    """The `passthrough_bytes` records of one interval's counts (pure)."""
    return [{"proxy_id": proxy_id, "broker_id": broker_id, "broker_zone": zone_of(broker_id), "api_key": api_key,
             "requests": c.requests, "request_bytes": c.request_bytes, "response_bytes": c.response_bytes,
             "interval_ms": interval_ms}
            for (broker_id, api_key), c in taken.items()]


class PassthroughMeter:
    """The counter and where its records go. `add` is called for every forwarded request."""

    def __init__(self, audit: AuditSink, proxy_id: str, zone_of: Callable[[int], str],
                 interval_s: float = DEFAULT_INTERVAL_S) -> None:
        """`zone_of(broker id)`: the broker's zone ("" when unknown)."""
        self.counter = PassthroughCounter()
        self._audit = audit
        self._proxy_id = proxy_id
        self._zone_of = zone_of
        self.interval_s = interval_s
        self._since = time.monotonic()

    def add(self, broker_id: int, api_key: int, request_bytes: int, response_bytes: int) -> None:
        self.counter.add(broker_id, api_key, request_bytes, response_bytes)

    def flush(self) -> None:
        """Emit one record per (broker, api) counted since the last flush."""
        now = time.monotonic()
        interval_ms = round((now - self._since) * 1000)
        self._since = now
        for fields in records(self.counter.take(), self._proxy_id, self._zone_of, interval_ms):
            self._audit.emit(KIND, fields)

    async def run(self) -> None:
        """Flush every interval_s until cancelled, and once more then."""
        await flush_every(self.interval_s, self.flush)
