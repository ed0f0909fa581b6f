"""Prometheus collectors of wal_s3 (module level: one set per process, summed over writers/readers)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

_MiB = 1024 * 1024

FLUSH_BYTES = Histogram(
    "azsidecar_wal_flush_bytes", "Size of each WAL object PUT",
    buckets=(64 * 1024, 256 * 1024, 1 * _MiB, 2 * _MiB, 4 * _MiB, 8 * _MiB, 16 * _MiB, 64 * _MiB))
FLUSHES = Counter("azsidecar_wal_flushes_total", "WAL objects flushed, by reason", ["reason"])
PUT_SECONDS = Histogram(
    "azsidecar_wal_put_seconds", "Latency of successful WAL object PUTs, retries included",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
PUT_RETRIES = Counter("azsidecar_wal_put_retries_total", "WAL PUT attempts that failed and were retried")
PUT_FAILURES = Counter("azsidecar_wal_put_failures_total", "WAL objects given up after all attempts")
BUFFERED_BYTES = Gauge("azsidecar_wal_buffered_bytes", "Bytes appended to writers and not yet durable")
CACHE_HITS = Counter("azsidecar_wal_cache_hits_total", "Zone reads served without a GET")
CACHE_MISSES = Counter("azsidecar_wal_cache_misses_total", "Zone reads that issued a GET")
CACHE_EVICTIONS = Counter("azsidecar_wal_cache_evictions_total", "Zone ranges evicted from the block cache")
CACHE_BYTES = Gauge("azsidecar_wal_cache_bytes", "Bytes held in reader block caches")
GC_DELETED = Counter("azsidecar_wal_gc_deleted_total", "WAL objects deleted by GC, by reason (applied, orphan)",
                     ["reason"])
GC_ORPHANS = Gauge("azsidecar_wal_gc_orphans", "Objects with an unapplied zone older than orphan_report_age_s at the last GC pass")
GRAY_TIMEOUTS = Counter("azsidecar_wal_gray_timeouts_total",
                        "S3 requests abandoned at their gray deadline (3 x recent p99, at least gray_floor_s)",
                        ["operation"])
