"""`azsidecar gc`: garbage-collect WAL objects whose every zone is applied (once or periodically)."""

from __future__ import annotations

import argparse
import sys

from spark_audit.writer import AuditWriter


def register(subparsers) -> None:
    p = subparsers.add_parser("gc", help="delete applied WAL objects and old orphans",
                              description="Delete WAL objects every zone has applied; report orphans and "
                                          "delete them after --max-orphan-age-s, except those holding "
                                          "unapplied entries of router.ack_modes 'wal' topics (held).")
    p.add_argument("--config", metavar="FILE", help="TOML configuration file ([wal] section)")
    p.add_argument("--bucket", help="WAL bucket (overrides wal.bucket)")
    p.add_argument("--endpoint-url", help="S3 endpoint URL (overrides wal.endpoint_url)")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--once", action="store_true", help="one pass, then exit")
    when.add_argument("--interval-s", type=float, help="seconds between passes (default wal.gc_interval_s)")
    p.add_argument("--max-orphan-age-s", type=float, help="delete orphans older than this (overrides wal.max_orphan_age_s)")
    p.add_argument("--dry-run", action="store_true", help="report what would be deleted, delete nothing")
    p.add_argument("--metrics-port", type=int,
                   help="when looping, serve Prometheus /metrics on this port (overrides wal.gc_metrics_port; 0 = off)")
    p.add_argument("--log-format", choices=("text", "json"), default=None)
    p.add_argument("--log-level", default=None)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    import trio  # noqa: PLC0415 - keep `azsidecar --help` light

    from azsidecar.config import load_config  # noqa: PLC0415
    from wal_s3._s3 import make_s3_client  # noqa: PLC0415
    from wal_s3.gc import GcError, run_gc  # noqa: PLC0415

    full = load_config(args.config, {
        "wal.bucket": args.bucket, "wal.endpoint_url": args.endpoint_url,
        "wal.max_orphan_age_s": args.max_orphan_age_s, "wal.gc_metrics_port": args.metrics_port,
    })
    config = full.wal
    # Objects holding entries of ack_mode=wal topics are the only copy of acknowledged records.
    acked = (lambda topic: full.router.ack_mode(topic) == "wal") if "wal" in full.router.ack_modes.values() else None
    client = make_s3_client(config)
    # The GC's S3 requests are billed in the audit (s3_request records) when the zone is configured.
    audit = AuditWriter(full.audit, full.zone, "gc") if full.audit.enabled and full.zone else None
    interval_s = args.interval_s if args.interval_s is not None else config.gc_interval_s
    if config.gc_metrics_port and not args.once:
        from prometheus_client import start_http_server  # noqa: PLC0415

        start_http_server(config.gc_metrics_port, addr=config.gc_metrics_host)  # GC deletions and orphans

    async def loop() -> int:
        while True:
            try:
                report = await run_gc(config, client, dry_run=args.dry_run, acked_topic=acked, audit=audit)
                for line in report.lines():
                    print(line, flush=True)
            except GcError as exc:
                print(f"azsidecar gc: {exc}", file=sys.stderr, flush=True)
                if args.once:
                    return 1
            if args.once:
                return 0
            await trio.sleep(interval_s)

    try:
        return trio.run(loop)
    finally:
        if audit is not None:
            audit.close()
