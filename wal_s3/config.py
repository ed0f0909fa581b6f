"""WAL object settings: where objects go, when the writer flushes, how much it buffers."""

from __future__ import annotations

from dataclasses import dataclass

from core.configload import require

MiB = 1024 * 1024


@dataclass(frozen=True)
class WalConfig:
    bucket: str = "azsidecar-wal"
    prefix: str = ""  # optional key prefix inside the bucket
    endpoint_url: str | None = None  # None = AWS; moto/minio URL otherwise
    region: str = "us-east-1"
    max_bytes: int = 8 * MiB  # flush size: requests (PUT, GET, checkpoint) ~6-9% of the transfer replaced
    linger_ms: int = 250  # flush age of the oldest buffered entry
    max_buffered_bytes: int = 64 * MiB  # backpressure: append waits beyond this
    max_in_flight_puts: int = 4
    max_attempts: int = 6  # PUT attempts before entries fail with a retriable error
    cache_bytes: int = 256 * MiB  # agent block cache
    # Retries: full-jitter exponential backoff, base * 2**attempt capped at max.
    retry_base_ms: int = 50
    retry_max_ms: int = 2_000
    # Per request: connect, and each wait for progress (send or receive); an 8 MiB PUT on a slow
    # link needs tens of seconds in all.
    connect_timeout_s: float = 5.0
    request_timeout_s: float = 30.0
    # Gray S3: a WAL PUT or ranged GET slower than max(gray_factor x p99 of the last minute, gray_floor_s)
    # (at most request_timeout_s) is abandoned and counts as a failure (wal_s3/latency.py).
    gray_floor_s: float = 1.0  # the deadline never goes below this (S3's own p99 is ~0.1-0.3 s per request)
    gray_factor: float = 3.0  # the deadline in multiples of the recent p99
    max_s3_threads: int = 16  # S3 requests in flight per process (boto3 worker threads, event-loop connections)
    # WAL object PUTs and ranged GETs: "auto" (on the event loop, wal_s3/_s3_http.py; boto3 if an HTTP proxy is
    # set for the endpoint), "http" (always the event loop), "boto3" (worker threads, like every other call).
    s3_transport: str = "auto"
    # A writer lists its epoch markers this often and stops if a newer epoch exists; 0 = never.
    epoch_check_interval_s: float = 30.0
    # Checkpoints (applied (object, zone) markers) live under <prefix><checkpoint_prefix>/.
    checkpoint_prefix: str = "_checkpoints"
    epoch_prefix: str = "_epochs"
    # GC: objects with an unapplied zone are reported as orphans after orphan_report_age_s
    # (or max_orphan_age_s if smaller) and deleted after max_orphan_age_s; the bucket
    # lifecycle rule (docs/wal-format.md) is the backstop.
    gc_interval_s: float = 300.0
    orphan_report_age_s: float = 3_600.0
    max_orphan_age_s: float = 86_400.0
    gc_metrics_port: int = 0  # a looping `azsidecar gc` serves /metrics here; 0 = none
    gc_metrics_host: str = "127.0.0.1"  # where gc's /metrics listens; 0.0.0.0 to let a scraper in

    def __post_init__(self) -> None:
        require(bool(self.bucket), "wal.bucket: must be set")
        require(self.prefix == "" or self.prefix.endswith("/"), "wal.prefix: empty or ending with '/'")
        require(64 * 1024 <= self.max_bytes <= 5 * 1024 * MiB, "wal.max_bytes: 64 KiB..5 GiB")
        require(1 <= self.linger_ms <= 60_000, "wal.linger_ms: 1..60000")
        require(self.max_buffered_bytes >= self.max_bytes, "wal.max_buffered_bytes: must be >= wal.max_bytes")
        require(1 <= self.max_in_flight_puts <= 64, "wal.max_in_flight_puts: 1..64")
        require(1 <= self.max_attempts <= 20, "wal.max_attempts: 1..20")
        require(self.cache_bytes >= 0, "wal.cache_bytes: must be >= 0")
        require(1 <= self.retry_base_ms <= self.retry_max_ms <= 60_000, "wal.retry_base_ms/retry_max_ms: 1 <= base <= max <= 60000")
        require(self.connect_timeout_s > 0 and self.request_timeout_s > 0, "wal.connect_timeout_s/request_timeout_s: must be > 0")
        require(self.gray_floor_s > 0, "wal.gray_floor_s: must be > 0")
        require(self.gray_factor >= 1, "wal.gray_factor: must be >= 1")
        require(self.max_s3_threads >= self.max_in_flight_puts, "wal.max_s3_threads: must be >= wal.max_in_flight_puts")
        require(self.s3_transport in ("auto", "http", "boto3"), "wal.s3_transport: auto, http or boto3")
        require(self.epoch_check_interval_s >= 0, "wal.epoch_check_interval_s: must be >= 0")
        for name in ("checkpoint_prefix", "epoch_prefix"):
            value = getattr(self, name)
            require(bool(value) and "/" not in value, f"wal.{name}: one non-empty path segment")
        require(self.gc_interval_s > 0, "wal.gc_interval_s: must be > 0")
        require(self.orphan_report_age_s > 0 and self.max_orphan_age_s > 0, "wal.orphan_report_age_s/max_orphan_age_s: must be > 0")
        require(0 <= self.gc_metrics_port <= 65535, "wal.gc_metrics_port: 0..65535")
