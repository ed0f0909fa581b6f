"""Where components write audit records, and how much they may queue."""

from __future__ import annotations

from dataclasses import dataclass

from core.configload import require


@dataclass(frozen=True)
class AuditConfig:
    enabled: bool = True
    output: str = "audit-out"  # local directory, or s3://bucket/prefix
    max_queue: int = 100_000  # records queued before new ones are dropped (and counted)
    roll_seconds: int = 300  # a new file at least this often
    roll_bytes: int = 64 * 1024 * 1024  # uncompressed JSON bytes per file before a new one
    # S3-compatible endpoint for s3:// output (moto, MinIO); None = AWS default endpoint.
    s3_endpoint_url: str | None = None

    def __post_init__(self) -> None:
        require(bool(self.output), "audit.output: must be set")
        require(1 <= self.max_queue <= 10_000_000, "audit.max_queue: 1..10000000")
        require(self.roll_seconds >= 1, "audit.roll_seconds: >= 1")
        require(self.roll_bytes >= 1024, "audit.roll_bytes: >= 1024")
