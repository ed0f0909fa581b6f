"""Where components write audit records, and how much they may queue."""

from __future__ import annotations

from dataclasses import dataclass

from core.configload import require
from core.framing import DEFAULT_PATH_MTU, Framing

PRODUCE_DETAILS = ("summary", "batch")
OBJECT_DETAILS = ("summary", "object")


@dataclass(frozen=True)
class AuditConfig:
    enabled: bool = True  # write audit records (the report's and the planner's input)
    output: str = "audit-out"  # local directory, or s3://bucket/prefix
    max_queue: int = 100_000  # records queued before new ones are dropped (and counted)
    roll_seconds: int = 300  # a new file at least this often
    roll_bytes: int = 64 * 1024 * 1024  # uncompressed JSON bytes per file before a new one
    flush_seconds: float = 1.0  # the open file is made readable (gzip sync flush) this often: what a crash can lose
    upload_seconds: int = 60  # with s3:// output, a file is closed and uploaded at least this often
    #: with s3:// output, where files wait for their upload; None = <tmp>/azsidecar-audit-spool/<bucket>/<prefix>.
    #: Keep it stable across restarts: the next writer salvages and uploads what a crashed one left there
    spool_dir: str | None = None
    #: S3-compatible endpoint for s3:// output (moto, MinIO); None = AWS default endpoint
    s3_endpoint_url: str | None = None
    path_mtu: int = DEFAULT_PATH_MTU  # the jobs count TCP/IP headers per packet of this MTU: 9001 in a VPC, 1500 peered/transit
    link_header_bytes: int = 0  # link-layer bytes per packet the jobs add: 0 as AWS bills, 14 for an Ethernet meter
    #: the proxy's produce batches and leader lookups: "summary" = one produce_summary / metadata_summary record
    #: per key every interval_s (exact sums, latency histogram); "batch" = one record per batch (debugging)
    produce_detail: str = "summary"
    interval_s: float = 10.0  # with produce_detail or object_detail "summary": how often summaries are written
    #: the WAL path's per-object records (wal_flush, notification, agent_read, agent_apply, checkpoint_write):
    #: "summary" = their *_summary records per key every interval_s (exact sums, object size classes);
    #: "object" = one record per object (debugging single objects)
    object_detail: str = "summary"

    @property
    def framing(self) -> Framing:
        return Framing(self.path_mtu, self.link_header_bytes)

    def __post_init__(self) -> None:
        require(bool(self.output), "audit.output: must be set")
        require(1 <= self.max_queue <= 10_000_000, "audit.max_queue: 1..10000000")
        require(self.roll_seconds >= 1, "audit.roll_seconds: >= 1")
        require(self.roll_bytes >= 1024, "audit.roll_bytes: >= 1024")
        require(0.2 <= self.flush_seconds <= 3600, "audit.flush_seconds: 0.2..3600 (a busy writer drains every 0.2 s)")
        require(self.upload_seconds >= 1, "audit.upload_seconds: >= 1")
        require(self.spool_dir is None or bool(self.spool_dir), "audit.spool_dir: a directory, or unset")
        Framing(self.path_mtu, self.link_header_bytes)  # validates both
        require(self.produce_detail in PRODUCE_DETAILS, f"audit.produce_detail: one of {', '.join(PRODUCE_DETAILS)}")
        require(self.object_detail in OBJECT_DETAILS, f"audit.object_detail: one of {', '.join(OBJECT_DETAILS)}")
        require(0.1 <= self.interval_s <= 3600, "audit.interval_s: 0.1..3600")
