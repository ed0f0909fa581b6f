"""asyncio reader of a zone's share of a WAL object: one ranged GET, verified, cached.

Why not wal_s3.WalReader: it is trio, and the agent is asyncio (aiokafka). This adapter
reuses wal_s3's pure parser (`parse_zone_range`, which verifies every CRC-32C) and runs
the blocking boto3 GET in a worker thread (`asyncio.to_thread`; the agent's read
semaphore bounds how many run at once). A small byte-bounded LRU of verified shares
answers re-sent notifications without a second GET. botocore exceptions become
ZoneReadError here.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from typing import Any

from wal_s3.format import WalEntry, WalFormatError, parse_zone_range


class ZoneReadError(Exception):
    """The share could not be fetched or did not verify (the proxy may retry)."""


class S3ZoneReader:
    """`read_zone` for the agent. Emits one `agent_read` audit record per call."""

    def __init__(self, s3_client: Any, bucket: str, *, zone: str, audit: Any, cache_bytes: int) -> None:
        self._s3 = s3_client
        self._bucket = bucket
        self._zone = zone
        self._audit = audit
        self._cache_bytes = cache_bytes
        self._cache: OrderedDict[tuple[str, int, int], bytes] = OrderedDict()
        self._cached_bytes = 0

    async def read_zone(self, key: str, zone_offset: int, zone_length: int, *,
                        source_zone: str = "", expected_entries: int | None = None) -> list[WalEntry]:
        """Entries of the range, CRCs verified. Raises ZoneReadError."""
        started = time.monotonic()
        cache_key = (key, zone_offset, zone_length)
        data = self._cache.get(cache_key)
        hit = data is not None
        if hit:
            self._cache.move_to_end(cache_key)
        else:
            if zone_length <= 0:
                raise ZoneReadError(f"empty zone range for {key}")
            data = await asyncio.to_thread(self._get, key, zone_offset, zone_length)
        try:
            entries = parse_zone_range(data, expected_entries)
        except WalFormatError as exc:
            raise ZoneReadError(f"s3://{self._bucket}/{key} [{zone_offset}+{zone_length}]: {exc}") from exc
        if not hit:
            self._remember(cache_key, data)
        self._audit.emit("agent_read", {
            "zone": self._zone, "ts_ms": int(time.time() * 1000), "source_zone": source_zone, "key": key,
            "bytes": len(data), "gets": 0 if hit else 1, "cache_hits": int(hit), "cache_misses": int(not hit),
            "bytes_from_cache": len(data) if hit else 0, "latency_ms": (time.monotonic() - started) * 1000,
        })
        return entries

    def _get(self, key: str, offset: int, length: int) -> bytes:
        from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415

        try:
            resp = self._s3.get_object(Bucket=self._bucket, Key=key, Range=f"bytes={offset}-{offset + length - 1}")
            data = resp["Body"].read()
        except (BotoCoreError, ClientError) as exc:
            raise ZoneReadError(f"GET s3://{self._bucket}/{key}: {exc}") from exc
        if len(data) != length:
            raise ZoneReadError(f"GET s3://{self._bucket}/{key}: got {len(data)} bytes, asked {length}")
        return data

    def _remember(self, cache_key: tuple[str, int, int], data: bytes) -> None:
        if len(data) > self._cache_bytes:
            return
        self._cache[cache_key] = data
        self._cached_bytes += len(data)
        while self._cached_bytes > self._cache_bytes:
            _, old = self._cache.popitem(last=False)
            self._cached_bytes -= len(old)
