"""The WAL range reader with a block cache (runs in each zone's agent).

Strategy: an agent is told (object key, zone byte range) by a notification and fetches
exactly that range with one ranged GET, then verifies every entry CRC before use. WAL
objects are immutable (conditional PUTs, never overwritten, keys never reused), so a
verified range can be cached by (key, offset, length) without invalidation: the block
cache is an LRU of such ranges, bounded in bytes. It keeps each range's parsed entries
(memoryview slices of the range's bytes) next to the bytes, so every range is parsed and
CRC-verified once, by the read that fetched it: a notification that follows its prefetch
starts appending without parsing again. Concurrent reads of a range that is
being fetched wait for that one GET instead of issuing their own (single flight).

A GET slower than the deadline derived from recent GETs (wal_s3/latency.py) is abandoned
and sent again after the usual backoff, within wal.max_attempts.

Accounting, per read: a *hit* is a read served without a GET (range in the cache, or
fetched by a concurrent read it waited for); a *miss* issued the GET; an *eviction* is a
range dropped to stay under the byte bound. A range larger than the whole cache is
returned but not cached.
"""

from __future__ import annotations

import collections
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio

from core.audit import AuditSink
from core.errors import SidecarError
from wal_s3 import metrics
from wal_s3._s3_http import http_transport
from wal_s3.config import WalConfig
from wal_s3.format import (
    PREFIX_BYTES,
    WalEntry,
    WalFormatError,
    header_length,
    parse_header,
    parse_zone_range,
)
from wal_s3.latency import LatencyGuard
from wal_s3.retry import with_retries
from wal_s3.s3 import Limiter, S3Client, S3Error, S3GrayError, S3NotFound, S3Store

HEADER_PROBE_BYTES = 4096  # one GET covers the header of any object with a few zones


class WalReadError(SidecarError):
    """A zone could not be read. retriable=True: trying again later may succeed."""


class WalNotFoundError(WalReadError):
    """The object does not exist (already garbage-collected, or never written)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retriable=False)


@dataclass(frozen=True)
class VerifiedRange:
    """A fetched byte range and its entries, every CRC verified (batches are slices of `data`)."""

    data: bytes
    entries: list[WalEntry]


@dataclass
class _Flight:
    # Made by the first concurrent reader that waits: most loads have none, and an
    # anyio.Event costs a backend lookup on the read's latency path.
    done: anyio.Event | None = None
    value: VerifiedRange | None = None  # set when the load succeeded


RangeKey = tuple[str, int, int]  # (object key, zone offset, zone length)


class BlockCache:
    """LRU of immutable verified byte ranges, bounded in bytes, with single-flight loading."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self._entries: collections.OrderedDict[RangeKey, VerifiedRange] = collections.OrderedDict()
        self._flights: dict[RangeKey, _Flight] = {}

    def __contains__(self, key: RangeKey) -> bool:
        return key in self._entries

    async def get_or_load(self, key: RangeKey,
                          load: Callable[[], Awaitable[VerifiedRange]]) -> tuple[VerifiedRange, bool]:
        """(range, hit). Raises whatever `load` raises (a waiter whose loader failed loads itself)."""
        while True:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
                self._count_hit()
                return value, True
            flight = self._flights.get(key)
            if flight is None:
                break
            if flight.done is None:
                flight.done = anyio.Event()
            await flight.done.wait()
            if flight.value is not None:  # served by the concurrent GET, even if not cached
                self._count_hit()
                return flight.value, True
            # The loader failed or was cancelled: loop, and load ourselves if no one else is.
        flight = _Flight()
        self._flights[key] = flight
        self.misses += 1
        metrics.CACHE_MISSES.inc()
        try:
            value = await load()
            self._insert(key, value)
            flight.value = value
            return value, False
        finally:
            del self._flights[key]
            if flight.done is not None:
                flight.done.set()

    def _count_hit(self) -> None:
        self.hits += 1
        metrics.CACHE_HITS.inc()

    def _insert(self, key: RangeKey, value: VerifiedRange) -> None:
        size = len(value.data)
        if size > self.capacity_bytes:
            return
        self._entries[key] = value
        self.bytes += size
        metrics.CACHE_BYTES.inc(size)
        while self.bytes > self.capacity_bytes:
            _, old = self._entries.popitem(last=False)
            self.bytes -= len(old.data)
            metrics.CACHE_BYTES.dec(len(old.data))
            self.evictions += 1
            metrics.CACHE_EVICTIONS.inc()


class WalReader:
    """Reads zone ranges of WAL objects for one agent zone; counters: hits, misses, evictions."""

    def __init__(self, config: WalConfig, s3_client: S3Client, audit: AuditSink, zone: str, *,
                 limiter: Limiter | None = None, rng: random.Random | None = None) -> None:
        """Runs under trio or asyncio (anyio); `limiter` as for S3Store (None: its own, of
        `max_s3_threads`)."""
        self.config = config
        self.zone = zone
        self.audit = audit
        self.cache = BlockCache(config.cache_bytes)
        self._s3_client, self._limiter = s3_client, limiter
        # One store per bucket read: wal.bucket, or with S3 Express each writer zone's directory bucket.
        self._stores: dict[str, S3Store] = {}
        self._store = self._store_of(config.bucket) if config.storage_class != "express" else None
        self._rng = rng or random.Random()
        # Gray S3: a ranged GET slower than recent ones is abandoned and sent again (a hedge).
        self._get_guard = LatencyGuard(floor_s=config.gray_floor_s, ceiling_s=config.request_timeout_s,
                                       factor=config.gray_factor, max_deadline_s=config.gray_max_s)

    def _store_of(self, bucket: str) -> S3Store:
        store = self._stores.get(bucket)
        if store is None:
            store = self._stores[bucket] = S3Store(self._s3_client, bucket, self._limiter,
                                                   default_threads=self.config.max_s3_threads,
                                                   http=http_transport(self._s3_client, self.config, bucket))
        return store

    def _store_for(self, source_zone: str) -> S3Store:
        """The store of the bucket `source_zone`'s writers write to. Raises WalReadError
        (not retriable) for a zone with no valid directory bucket name."""
        if self._store is not None:
            return self._store
        try:
            return self._store_of(self.config.bucket_for(source_zone))
        except ValueError as exc:
            raise WalReadError(f"no WAL bucket for source zone {source_zone!r}: {exc}", retriable=False) from exc

    @property
    def hits(self) -> int:
        return self.cache.hits

    @property
    def misses(self) -> int:
        return self.cache.misses

    @property
    def evictions(self) -> int:
        return self.cache.evictions

    async def read_zone(self, key: str, zone_offset: int, zone_length: int, *, source_zone: str = "",
                        expected_entries: int | None = None) -> list[WalEntry]:
        """The entries of one zone range, every CRC verified; one ranged GET unless cached.

        Raises WalNotFoundError if the object is gone, WalReadError (retriable) if S3 kept
        failing, WalFormatError if the bytes are not a valid zone range (object corrupt, or
        the range does not match an object's zone).
        """
        return await self._read_zone(key, zone_offset, zone_length, source_zone, expected_entries,
                                     extra_gets=0, started=time.perf_counter(), get_s=[])

    async def read_zone_by_name(self, key: str, zone: str, *, source_zone: str = "") -> list[WalEntry]:
        """Like read_zone, when only the zone name is known: reads the zone index first.

        Raises as read_zone, and WalReadError(retriable=False) if the object has no such zone.
        """
        started = time.perf_counter()
        gets = [0]
        get_s: list[float] = []
        store = self._store_for(source_zone)
        probe = await self._get(store, key, 0, HEADER_PROBE_BYTES, gets, get_s)
        hlen = header_length(probe[:PREFIX_BYTES])
        if hlen > len(probe):
            probe = await self._get(store, key, 0, hlen, gets, get_s)
        header = parse_header(probe)
        z = header.zones.get(zone)
        if z is None:
            raise WalReadError(f"{key} has no zone {zone!r} (zones: {', '.join(header.zones)})", retriable=False)
        if z.length == 0:
            return []
        return await self._read_zone(key, z.offset, z.length, source_zone, z.entry_count,
                                     extra_gets=gets[0], started=started, get_s=get_s)

    async def _get(self, store: S3Store, key: str, start: int, length: int, gets: list[int],
                   get_s: list[float]) -> bytes:
        async def attempt(_n: int) -> bytes:
            gets[0] += 1
            started = anyio.current_time()
            deadline_s = self._get_guard.attempt_timeout_s(started)
            with anyio.move_on_after(deadline_s) as scope:
                data = await store.get_range(key, start, length, timing=get_s)
            if scope.cancelled_caught:  # S3 hangs: abandon this GET and send another after the backoff
                metrics.GRAY_TIMEOUTS.labels("get").inc()
                raise S3GrayError(f"GET {key} [{start}+{length}]: no answer within {deadline_s:.2f} s (gray deadline)")
            self._get_guard.observe(anyio.current_time(), anyio.current_time() - started)
            return data
        try:
            return await with_retries(attempt, max_attempts=self.config.max_attempts,
                                      base_ms=self.config.retry_base_ms, max_ms=self.config.retry_max_ms,
                                      rng=self._rng)
        except S3NotFound as exc:
            raise WalNotFoundError(f"{key}: {exc}") from exc
        except S3Error as exc:
            raise WalReadError(f"{key} [{start}+{length}]: {exc}", retriable=exc.retriable) from exc

    async def _read_zone(self, key: str, zone_offset: int, zone_length: int, source_zone: str,
                         expected_entries: int | None, *, extra_gets: int, started: float,
                         get_s: list[float]) -> list[WalEntry]:
        if zone_offset < 0 or zone_length <= 0:
            raise ValueError(f"bad zone range {zone_offset}+{zone_length}")
        gets = [0]
        store = self._store_for(source_zone)

        async def load() -> VerifiedRange:
            data = await self._get(store, key, zone_offset, zone_length, gets, get_s)
            if len(data) != zone_length:
                raise WalFormatError(f"{key}: range {zone_offset}+{zone_length} returned {len(data)} bytes: "
                                     "object shorter than the notified range")
            # Never cache bytes that do not verify; a cached range is never parsed again.
            return VerifiedRange(data, parse_zone_range(data, expected_entries))

        verified, hit = await self.cache.get_or_load((key, zone_offset, zone_length), load)
        entries = verified.entries
        if expected_entries is not None and len(entries) != expected_entries:  # a hit checks the count too
            raise WalFormatError(f"zone range holds {len(entries)} entries, index says {expected_entries}")
        self.audit.emit("agent_read", {
            "ts_ms": int(time.time() * 1000), "zone": self.zone,
            "source_zone": source_zone, "key": key, "bytes": zone_length, "gets": gets[0] + extra_gets,
            "cache_hits": int(hit), "cache_misses": int(not hit),
            "bytes_from_cache": zone_length if hit else 0,
            "latency_ms": (time.perf_counter() - started) * 1000.0,
            "get_ms": sum(get_s) * 1000.0,
        })
        return list(entries)  # the caller's own list: the cached one stays as verified
