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
    parser.add_argument("--tables", type=table_formats, default=("csv",), metavar="FORMATS",
                        help="table file formats: csv (default), parquet, or csv,parquet")
