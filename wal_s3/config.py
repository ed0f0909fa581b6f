"""WAL object settings: where objects go, when the writer flushes, how much it buffers."""

from __future__ import annotations

from dataclasses import dataclass

from azsidecar._configload import require

MiB = 1024 * 1024


@dataclass(frozen=True)
class WalConfig:
    bucket: str = "azsidecar-wal"
    prefix: str = ""  # optional key prefix inside the bucket
    endpoint_url: str | None = None  # None = AWS; moto/minio URL otherwise
    region: str = "us-east-1"
    max_bytes: int = 8 * MiB  # flush size; ARCHITECTURE.md: request cost ~3% of the transfer it replaces
    linger_ms: int = 250  # flush age of the oldest buffered entry
    max_buffered_bytes: int = 64 * MiB  # backpressure: append waits beyond this
    max_in_flight_puts: int = 4
    max_attempts: int = 6  # PUT attempts before entries fail with a retriable error
    cache_bytes: int = 256 * MiB  # agent block cache

    def __post_init__(self) -> None:
        require(bool(self.bucket), "wal.bucket: must be set")
        require(64 * 1024 <= self.max_bytes <= 5 * 1024 * MiB, "wal.max_bytes: 64 KiB..5 GiB")
        require(1 <= self.linger_ms <= 60_000, "wal.linger_ms: 1..60000")
        require(self.max_buffered_bytes >= self.max_bytes, "wal.max_buffered_bytes: must be >= wal.max_bytes")
        require(1 <= self.max_in_flight_puts <= 64, "wal.max_in_flight_puts: 1..64")
        require(1 <= self.max_attempts <= 20, "wal.max_attempts: 1..20")
        require(self.cache_bytes >= 0, "wal.cache_bytes: must be >= 0")
