"""`azsidecar gc`: garbage-collect WAL objects whose every zone is applied (once or periodically)."""

from __future__ import annotations

import argparse
import os
import sys

import trio
from prometheus_client import CollectorRegistry, start_http_server

from azsidecar.config import load_config, require_wal_location
from azsidecar.exposition import LabelledRegistry
from azsidecar.logs import setup_logging
from azsidecar.preflight import check_wal_store, startup_errors
from core.configload import ConfigError
from spark_audit.writer import AuditWriter
from wal_s3.gc import GcError, run_gc
from wal_s3.s3 import make_s3_client


def main(args: argparse.Namespace) -> int:
    full = load_config(args.config, {
        "wal.bucket": args.bucket, "wal.region": args.region, "wal.endpoint_url": args.endpoint_url,
        "wal.max_orphan_age_s": args.max_orphan_age_s, "wal.gc_metrics_port": args.metrics_port,
        "wal.gc_interval_s": args.interval_s, "log_format": args.log_format, "log_level": args.log_level,
    }, os.environ)
    setup_logging(full.log_format, full.log_level, component="gc", zone=full.zone)
    config = full.wal
    require_wal_location(full, "gc")  # gc deletes: never a bucket by default
    # Objects holding entries of ack_mode=wal topics are the only copy of acknowledged records.
    acked = (lambda topic: full.router.ack_mode(topic) == "wal") if "wal" in full.router.ack_modes.values() else None
    # S3 Express: every zone's directory bucket (the zones of notify.agents and this process's zone).
    buckets = [config.bucket] if config.storage_class != "express" else \
        sorted({config.bucket_for(z) for z in (*full.notify.agents, *([full.zone] if full.zone else []))})
    if not buckets:
        raise ConfigError("wal.storage_class express: gc needs the zones (notify.agents, or zone) to find their buckets")
    for bucket in buckets:
        check_wal_store(config, bucket)
    client = make_s3_client(config)
    # The GC's S3 requests are billed in the audit (s3_request records) when the zone is configured.
    audit = AuditWriter(full.audit, full.zone, "gc") if full.audit.enabled and full.zone else None
    interval_s = config.gc_interval_s
    if config.gc_metrics_port and not args.once:
        served = CollectorRegistry()  # GC deletions and orphans, labelled with the zone and component "gc"
        served.register(LabelledRegistry("gc", {"zone": full.zone or ""}))
        start_http_server(config.gc_metrics_port, addr=config.gc_metrics_host, registry=served)

    async def loop() -> int:
        while True:
            failed = False
            for bucket in buckets:
                try:
                    report = await run_gc(config, client, dry_run=args.dry_run, acked_topic=acked, bucket=bucket,
                                          audit=audit)
                    for line in report.lines():
                        print(line, flush=True)
                except GcError as exc:
                    print(f"azsidecar gc: {exc}", file=sys.stderr, flush=True)
                    failed = True
            if failed and args.once:
                return 1
            if args.once:
                return 0
            await trio.sleep(interval_s)

    try:
        with startup_errors():
            return trio.run(loop)
    finally:
        if audit is not None:
            audit.close()
