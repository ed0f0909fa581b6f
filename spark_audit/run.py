"""Run an audit job end to end: read, transform, write tables, print a summary.

This is the thin `main` shared by `azsidecar audit ...` and `spark-submit submit.py ...`:
it owns the SparkSession and all I/O; the metrics live in `spark_audit.jobs`.
Outputs under --output: <table>.csv per table (and/or <table>.parquet, `--tables`),
input_summary.json, and for `report` / `all` also report.html.
"""

from __future__ import annotations

import json
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import TextIO

from core.configload import ConfigError, build
from core.prices import Prices
from spark_audit import jobs
from spark_audit._io import (
    AuditJobError,
    Output,
    Table,
    load,
    read_lines,
    resolve_input,
    spark_session,
    write_csv,
    write_parquet,
)
from spark_audit.catalog import JOBS, TABLE_FORMATS, TABLES_OF_JOB
from spark_audit.report import render_html, summary_text

EXIT_INPUT = 1  # input or output unusable (message says why, with counts)


def load_prices(path: str | None) -> Prices:
    """Prices from a TOML file: top-level keys, a [prices] table, or [router.prices].

    None gives the defaults of router.config.Prices. Raises ConfigError naming the key.
    """
    if path is None:
        return Prices()
    try:
        data = tomllib.loads(Path(path).read_text())
    except FileNotFoundError as exc:
        raise ConfigError(f"prices file {path}: not found") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"prices file {path}: {exc}") from exc
    if "router" in data and isinstance(data["router"], dict) and "prices" in data["router"]:
        return build(Prices, data["router"]["prices"], "router.prices")
    if "prices" in data:
        return build(Prices, data["prices"], "prices")
    return build(Prices, data, "prices")


def run(job: str, input_uri: str, output_uri: str, prices: Prices, *, master: str | None = "local[*]",
        s3_endpoint_url: str | None = None, spark=None, out: TextIO | None = None,
        table_formats: tuple[str, ...] = ("csv",), storage_class: str = "standard") -> int:
    """Run `job`; returns the process exit code (0, or EXIT_INPUT with a message on stderr).

    `spark`: an existing session (tests); otherwise one is created for `master`
    (None: whatever spark-submit configured) and stopped at the end.
    `table_formats`: any of TABLE_FORMATS; each table is written once per format.
    `storage_class`: the WAL's (wal.storage_class), pricing its requests in savings and break_even.
    Raises ValueError for an unknown job or table format.
    """
    if job not in TABLES_OF_JOB:
        raise ValueError(f"unknown audit job {job!r} (known: {', '.join(JOBS)})")
    unknown = [f for f in table_formats if f not in TABLE_FORMATS]
    if unknown or not table_formats:
        raise ValueError(f"unknown table format {unknown or table_formats!r} (known: {', '.join(TABLE_FORMATS)})")
    out = out or sys.stdout
    own_session = spark is None
    if own_session:
        spark = spark_session(master)
    else:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
    builders = {
        "savings": lambda r: jobs.savings(r, prices, storage_class),
        "break_even": lambda r: jobs.break_even(r, prices, storage_class),
        "writer_drops": jobs.writer_drops,
        "cache_agent": jobs.agent_cache,
        "cache_metadata": jobs.metadata_cache,
    }
    rolled = None
    try:
        with tempfile.TemporaryDirectory(prefix="azsidecar-audit-in-") as stage:
            output = Output(output_uri, s3_endpoint_url)
            path = resolve_input(spark, input_uri, s3_endpoint_url, Path(stage))
            wants_latency = "latency" in TABLES_OF_JOB[job]
            rolled, summary = load(spark, path, source=input_uri,
                                   extra_columns=jobs.LATENCY_COLUMNS if wants_latency else ())
            print(summary.message(), file=sys.stderr)
            tables = {}
            for name in TABLES_OF_JOB[job]:
                if name == "latency":  # percentiles need every value: a second scan of the lines
                    lines, _ = read_lines(spark, path, jobs.LATENCY_COLUMNS, input_uri)
                    tables[name] = Table.of(name, jobs.latency(lines))
                else:
                    tables[name] = Table.of(name, builders[name](rolled))
        written = []
        for table in tables.values():
            if "csv" in table_formats:
                write_csv(table, output.dir / f"{table.name}.csv")
                written.append(f"{table.name}.csv")
            if "parquet" in table_formats:
                write_parquet(spark, table, output.dir / f"{table.name}.parquet")
                written.append(f"{table.name}.parquet")
        (output.dir / "input_summary.json").write_text(json.dumps(summary.as_dict(), indent=2) + "\n")
        if job in ("report", "all"):
            (output.dir / "report.html").write_text(render_html(tables, summary, prices))
        output.finish()
        print(summary_text(tables, summary, prices), file=out)
        print(f"tables written to {output_uri}: " + ", ".join(written)
              + (", report.html" if job in ("report", "all") else ""), file=out)
        return 0
    except AuditJobError as exc:
        print(f"azsidecar audit: {exc}", file=sys.stderr)
        return EXIT_INPUT
    finally:
        if rolled is not None:
            rolled.unpersist()
        if own_session:
            spark.stop()
