"""The audit jobs' arguments, shared by `azsidecar audit` and the spark-submit entry script."""

from __future__ import annotations

import argparse

from spark_audit.catalog import JOBS, TABLE_FORMATS


def table_formats(text: str) -> tuple[str, ...]:
    """`csv`, `parquet` or `csv,parquet` -> the formats; argparse turns ValueError into a usage error."""
    formats = tuple(dict.fromkeys(f.strip() for f in text.split(",") if f.strip()))
    bad = [f for f in formats if f not in TABLE_FORMATS]
    if bad or not formats:
        raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(TABLE_FORMATS)}, comma-separated")
    return formats


def add_job_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments shared by the CLI and the spark-submit entry script."""
    parser.add_argument("job", choices=JOBS, help="which tables to compute (report/all: every table + HTML)")
    parser.add_argument("--input", required=True, metavar="URI", help="audit records: a local path or s3://bucket/prefix")
    parser.add_argument("--output", required=True, metavar="URI", help="where tables go: a local directory or s3://bucket/prefix")
    parser.add_argument("--prices", metavar="FILE", help="TOML with s3_put_per_1000, s3_get_per_1000, cross_az_per_gb_each_way")
    parser.add_argument("--storage-class", choices=("standard", "express"), default="standard",
                        help="the WAL's S3 storage class (wal.storage_class): which prices apply to its requests")
    parser.add_argument("--s3-endpoint-url", metavar="URL", help="S3-compatible endpoint (moto, MinIO) for s3:// input/output")
    parser.add_argument("--path-mtu", type=int, metavar="BYTES",
                        help="path MTU of the cross-zone links, for TCP/IP framing (default audit.path_mtu of the "
                             "--prices config file, else 9001; 1500 for peered or transit paths)")
    parser.add_argument("--link-header-bytes", type=int, metavar="BYTES",
                        help="link-layer header per packet to count (default 0: IP bytes, as AWS bills; 14: Ethernet)")
    parser.add_argument("--tables", type=table_formats, default=("csv",), metavar="FORMATS",
                        help="table file formats: csv (default), parquet, or csv,parquet")
    report = parser.add_argument_group("report (report, all)")
    report.add_argument("--min-projection-hours", type=non_negative, metavar="HOURS",
                        help="project per month and year only from a window of at least this many hours of "
                             "audited traffic (default 1)")
    report.add_argument("--teams", metavar="FILE",
                        help="TOML rules mapping a Kafka principal and/or a topic prefix to a team: a split by team")
    for flag, key, what in COMPUTE_FLAGS:
        report.add_argument(flag, dest=f"compute_{key}", type=int if key == "agents_per_zone" else non_negative,
                            metavar="N" if key == "agents_per_zone" else "X", help=what)


# The compute rates' flags: each overrides the key of the --prices file's [compute] table.
COMPUTE_FLAGS = (
    ("--agent-hour-usd", "agent_hour_usd", "USD per agent task-hour (default 0.04937: Fargate 1 vCPU + 2 GB, us-east-1)"),
    ("--agents-per-zone", "agents_per_zone", "agents counted per zone seen in agent records (default 1)"),
    ("--vcpu-hour-usd", "vcpu_hour_usd", "USD per vCPU-hour of the proxies' CPU (default 0.04048: Fargate, us-east-1)"),
    ("--proxy-cpu-s-per-gib-local", "proxy_cpu_s_per_gib_local",
     "proxy CPU seconds per GiB on the local and direct_cross routes (default 4.94, docs/benchmarks.md)"),
    ("--proxy-cpu-s-per-gib-wal", "proxy_cpu_s_per_gib_wal",
     "proxy CPU seconds per GiB on the WAL route (default 5.40, docs/benchmarks.md)"),
)


def non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: not a number") from exc
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be >= 0")
    return value


def compute_overrides(args: argparse.Namespace) -> dict[str, float | int | None]:
    """The compute flags given (None where not), by [compute] key."""
    return {key: getattr(args, f"compute_{key}") for _, key, _ in COMPUTE_FLAGS}
