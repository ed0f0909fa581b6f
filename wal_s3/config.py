"""WAL object settings: where objects go, when the writer flushes, how much it buffers.

`storage_class` "standard" keeps every zone's objects in one general purpose bucket
(`bucket`); "express" keeps them in S3 Express One Zone directory buckets, one per zone,
named `<bucket>--<zone AZ id>--x-s3` (`bucket_for(zone)`): a proxy writes into its own
zone's bucket, an agent reads from the writer's zone's bucket (the notification names it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.configload import require
from core.msk_iam import REGION_RE
from core.prices import STORAGE_CLASSES

MiB = 1024 * 1024
# Flush age when wal.linger_ms is not set: a Standard PUT takes tens of ms, so a longer linger
# buys bigger, cheaper objects; an Express PUT takes single-digit ms, so latency is the point.
DEFAULT_LINGER_MS = {"standard": 250, "express": 20}
# wal.linger_counts_producer_wait when not set: Express is chosen for latency, Standard for cost.
DEFAULT_LINGER_COUNTS_PRODUCER_WAIT = {"standard": False, "express": True}
DIRECTORY_BUCKET_SUFFIX = "--x-s3"
# A directory bucket's base name: lowercase letters, digits and hyphens (the full name, with
# `--<az-id>--x-s3`, is at most 63 characters and may not contain "--" elsewhere).
_BASE_NAME_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$")
_ENDPOINT_URL_RE = re.compile(r"^https?://[^/\s?#]+(/\S*)?$")  # botocore refuses anything else
_ACCOUNT_ID_RE = re.compile(r"^[0-9]{12}$")
_AZ_ID_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")  # use1-az4, usw2-lax1-az1: no "--", no upper case


@dataclass(frozen=True)
class WalConfig:
    bucket: str = ""  # required wherever the WAL is used (proxy with agents, agent, gc, recover): no default, a shared name could be anyone's
    prefix: str = ""  # optional key prefix inside the bucket
    endpoint_url: str | None = None  # None = AWS; moto/minio URL otherwise
    region: str = ""  # the bucket's AWS region, e.g. us-east-1; required wherever the WAL is used (as wal.bucket): no default, since it decides where records are kept
    # The AWS account id that must own the bucket: sent as x-amz-expected-bucket-owner on every
    # S3 request (both transports), so a bucket of that name in another account is refused
    # with 403 instead of receiving the records.
    expected_bucket_owner: str = ""  # AWS account id (12 digits) that must own wal.bucket, sent on every S3 request; "" = not checked
    max_bytes: int = 8 * MiB  # flush size: requests (PUT, GET, checkpoint) ~6-9% of the transfer replaced
    # "standard": one general purpose bucket; "express": S3 Express One Zone, one directory
    # bucket per zone named <bucket>--<az-id>--x-s3 (zone names are AZ ids then).
    storage_class: str = "standard"  # "standard" (one bucket) or "express" (S3 Express One Zone, <bucket>--<zone>--x-s3 per zone)
    linger_ms: int | None = None  # flush age of the oldest buffered entry; unset: 250 standard, 20 express
    # Count linger from when the oldest record was made (its batch's timestamp), as far as the
    # proxy can trust it (never more than since the partition's previous request), not from
    # when the proxy got it: a producer with one request in flight per partition keeps records
    # while the previous request is answered, so otherwise they wait ~1.5 x linger at p50.
    # It costs PUTs (2-2.5x on the demo's and bench_latency's workloads: docs/latency-and-cost.md),
    # so it is on by default where latency is the point (express), off for standard.
    linger_counts_producer_wait: bool | None = None  # linger from when the oldest record was made (bounded by the partition's previous request), not from its arrival; unset: on for express, off for standard
    # Seal an object as soon as its requests (PUT, per zone a GET and a checkpoint PUT) cost at
    # most this share of the cross-zone transfer it replaces; 0 = only size and linger.
    max_request_cost_share: float = 0.05  # seal once an object's requests cost at most this share of the transfer it replaces; 0 = off
    max_buffered_bytes: int = 64 * MiB  # backpressure: append waits beyond this
    max_in_flight_puts: int = 4  # WAL object PUTs in flight per writer; sealed objects wait beyond this
    max_attempts: int = 6  # PUT attempts before entries fail with a retriable error
    cache_bytes: int = 256 * MiB  # agent block cache
    # Retries: full-jitter exponential backoff, base * 2**attempt capped at max.
    retry_base_ms: int = 50  # PUT retries back off with full jitter from this, doubling per attempt
    retry_max_ms: int = 2_000  # the longest backoff between PUT retries
    # Per request: connect, and each wait for progress (send or receive); an 8 MiB PUT on a slow
    # link needs tens of seconds in all.
    connect_timeout_s: float = 5.0  # per S3 request: the TCP and TLS connect
    request_timeout_s: float = 30.0  # per S3 request: each wait for progress (sending or receiving), not the whole request
    # Gray S3: a WAL PUT or ranged GET slower than max(gray_factor x p99 of the last minute, gray_floor_s)
    # (at most request_timeout_s) is abandoned and counts as a failure (wal_s3/latency.py).
    gray_floor_s: float = 1.0  # the deadline never goes below this (S3's own p99 is ~0.1-0.3 s per request)
    gray_factor: float = 3.0  # the deadline in multiples of the recent p99
    #: the deadline never goes above this (per unit of work: gray_unit_bytes), however slow the
    #: recent requests: a hung S3 is abandoned within it and a batch waiting on a PUT falls back within about two of it (attempt and hedge);
    #: S3 whose requests all take longer is treated as failing. Before 5 successes the deadline is
    #: 3 x this (at most request_timeout_s). At least `gray_floor_s`
    gray_max_s: float = 5.0
    #: a PUT's deadlines above (floor, maximum, the cold start's 3 x maximum) are per unit of
    #: work: 1 for the request, plus 1 per this many bytes; at most request_timeout_s. A
    #: 100 KiB PUT is 1.01 units, 8 MiB 2, 16 MiB 3
    gray_unit_bytes: int = 8 * MiB
    max_s3_threads: int = 16  # S3 requests in flight per process (boto3 worker threads, event-loop connections)
    #: WAL object PUTs and ranged GETs: "auto" (on the event loop, wal_s3/_s3_http.py; boto3 if an HTTP proxy is
    #: set for the endpoint), "http" (always the event loop), "boto3" (worker threads, like every other call)
    s3_transport: str = "auto"
    # The kernel's receive buffer of each event-loop S3 connection (SO_RCVBUF), so a ranged GET of
    # a few MiB arrives in a few large reads: with the OS default an 8 MiB GET cost the agent 9 ms
    # of kernel CPU on loopback, with 4 MiB 1-2 ms (docs/benchmarks.md). Capped by the kernel at
    # net.core.rmem_max; 0 leaves it to the OS (autotuning).
    receive_buffer_bytes: int = 4 * MiB  # SO_RCVBUF of the event-loop S3 connections (capped at net.core.rmem_max); 0 = the OS default
    #: a writer lists its epoch markers this often and stops if a newer epoch exists (another
    #: process with the same proxy_id); 0 = never
    epoch_check_interval_s: float = 30.0
    # Checkpoints (applied (object, zone) markers) live under <prefix><checkpoint_prefix>/.
    checkpoint_prefix: str = "_checkpoints"  # checkpoints (applied object and zone markers) live under `<prefix><checkpoint_prefix>/`
    epoch_prefix: str = "_epochs"  # writers' epoch markers live under `<prefix><epoch_prefix>/`
    # GC: objects with an unapplied zone are reported as orphans after orphan_report_age_s
    # (or max_orphan_age_s if smaller) and deleted after max_orphan_age_s; the bucket
    # lifecycle rule (docs/wal-format.md) is the backstop.
    gc_interval_s: float = 300.0  # `azsidecar gc` (without --once) runs a pass this often
    orphan_report_age_s: float = 3_600.0  # an object with an unapplied zone is reported as an orphan (azsidecar_wal_gc_orphans) after this, or max_orphan_age_s if smaller
    max_orphan_age_s: float = 86_400.0  # an object with an unapplied zone is deleted after this; the bucket lifecycle rule (docs/wal-format.md) is the backstop
    gc_metrics_port: int = 0  # a looping `azsidecar gc` serves /metrics here; 0 = none
    gc_metrics_host: str = "127.0.0.1"  # where gc's /metrics listens; 0.0.0.0 to let a scraper in

    def __post_init__(self) -> None:
        require(bool(_ACCOUNT_ID_RE.match(self.expected_bucket_owner)) or self.expected_bucket_owner == "",
                f"wal.expected_bucket_owner: {self.expected_bucket_owner!r} is not an AWS account id (12 digits)")
        # An S3-compatible store of its own (endpoint_url: moto, MinIO) may name its region freely.
        require(not self.region or self.endpoint_url is not None or bool(REGION_RE.match(self.region)),
                f"wal.region: {self.region!r} is not an AWS region (e.g. us-east-1)")
        require(self.prefix == "" or self.prefix.endswith("/"), "wal.prefix: empty or ending with '/'")
        require(64 * 1024 <= self.max_bytes <= 5 * 1024 * MiB, "wal.max_bytes: 64 KiB..5 GiB")
        require(self.storage_class in STORAGE_CLASSES, f"wal.storage_class: one of {', '.join(STORAGE_CLASSES)}")
        linger_ms = self.linger_ms
        if linger_ms is None:  # resolved once here, so every reader sees an int
            linger_ms = DEFAULT_LINGER_MS[self.storage_class]
            object.__setattr__(self, "linger_ms", linger_ms)
        require(1 <= linger_ms <= 60_000, "wal.linger_ms: 1..60000")
        if self.linger_counts_producer_wait is None:
            object.__setattr__(self, "linger_counts_producer_wait",
                               DEFAULT_LINGER_COUNTS_PRODUCER_WAIT[self.storage_class])
        require(0 <= self.max_request_cost_share <= 1, "wal.max_request_cost_share: 0..1")
        if self.storage_class == "express" and self.bucket:
            require(bool(_BASE_NAME_RE.match(self.bucket)) and "--" not in self.bucket,
                    "wal.bucket: with storage_class express, the base name of the directory buckets "
                    "(lowercase letters, digits, single hyphens; <bucket>--<az-id>--x-s3 is added per zone)")
        require(self.max_buffered_bytes >= self.max_bytes, "wal.max_buffered_bytes: must be >= wal.max_bytes")
        require(1 <= self.max_in_flight_puts <= 64, "wal.max_in_flight_puts: 1..64")
        require(1 <= self.max_attempts <= 20, "wal.max_attempts: 1..20")
        require(self.cache_bytes >= 0, "wal.cache_bytes: must be >= 0")
        require(1 <= self.retry_base_ms <= self.retry_max_ms <= 60_000, "wal.retry_base_ms/retry_max_ms: 1 <= base <= max <= 60000")
        require(self.connect_timeout_s > 0 and self.request_timeout_s > 0, "wal.connect_timeout_s/request_timeout_s: must be > 0")
        require(self.gray_floor_s > 0, "wal.gray_floor_s: must be > 0")
        require(self.gray_factor >= 1, "wal.gray_factor: must be >= 1")
        require(self.gray_floor_s <= self.gray_max_s, "wal.gray_max_s: must be >= wal.gray_floor_s")
        require(64 * 1024 <= self.gray_unit_bytes <= 5 * 1024 * MiB, "wal.gray_unit_bytes: 64 KiB..5 GiB")
        require(self.max_s3_threads >= self.max_in_flight_puts, "wal.max_s3_threads: must be >= wal.max_in_flight_puts")
        require(self.s3_transport in ("auto", "http", "boto3"), "wal.s3_transport: auto, http or boto3")
        require(self.receive_buffer_bytes == 0 or 64 * 1024 <= self.receive_buffer_bytes <= 256 * MiB,
                "wal.receive_buffer_bytes: 0 (the OS default) or 64 KiB..256 MiB")
        require(self.epoch_check_interval_s >= 0, "wal.epoch_check_interval_s: must be >= 0")
        for name in ("checkpoint_prefix", "epoch_prefix"):
            value = getattr(self, name)
            require(bool(value) and "/" not in value, f"wal.{name}: one non-empty path segment")
        require(self.endpoint_url is None or bool(_ENDPOINT_URL_RE.match(self.endpoint_url)),
                f"wal.endpoint_url: {self.endpoint_url!r} is not an http:// or https:// URL with a host")
        require(self.gc_interval_s > 0, "wal.gc_interval_s: must be > 0")
        require(self.orphan_report_age_s > 0 and self.max_orphan_age_s > 0, "wal.orphan_report_age_s/max_orphan_age_s: must be > 0")
        require(0 <= self.gc_metrics_port <= 65535, "wal.gc_metrics_port: 0..65535")

    def bucket_for(self, zone: str) -> str:
        """The bucket holding objects written in `zone`: `bucket` (standard), or the zone's
        directory bucket `<bucket>--<zone>--x-s3` (express). Raises ValueError if `zone` is not
        an AZ id or the name exceeds 63 characters."""
        if self.storage_class != "express":
            return self.bucket
        return directory_bucket_name(self.bucket, zone)

    def owns_bucket(self, bucket: str, zone: str) -> bool:
        """Whether `bucket` is where this configuration keeps objects written in `zone`."""
        try:
            return bucket == self.bucket_for(zone)
        except ValueError:
            return False


def directory_bucket_name(base: str, az_id: str) -> str:
    """`<base>--<az_id>--x-s3`, the name S3 requires of a directory bucket in an Availability Zone.

    Raises ValueError naming the rule a part breaks (base: lowercase letters, digits, single
    hyphens; az_id like use1-az4; 3..63 characters in all)."""
    if not _BASE_NAME_RE.match(base) or "--" in base:
        raise ValueError(f"directory bucket base name {base!r}: lowercase letters, digits and single hyphens")
    if not _AZ_ID_RE.match(az_id):
        raise ValueError(f"directory bucket zone {az_id!r}: an AZ id like use1-az4 (lowercase, single hyphens)")
    name = f"{base}--{az_id}{DIRECTORY_BUCKET_SUFFIX}"
    if not 3 <= len(name) <= 63:
        raise ValueError(f"directory bucket name {name!r}: 3..63 characters")
    return name
