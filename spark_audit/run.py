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
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from core.configload import ConfigError, build
from core.framing import Framing
from core.prices import Prices
from spark_audit import jobs
from spark_audit._io import (
    AuditJobError,
    Output,
    Table,
    load,
    quick_jit_suits,
    read_lines,
    release,
    resolve_input,
    spark_session,
    stop_spark,
    write_csv,
    write_parquet,
)
from spark_audit.catalog import JOBS, TABLE_FORMATS, TABLES_OF_JOB
from spark_audit.config import AuditConfig
from spark_audit.progress import DEFAULT_INTERVAL_S, ProgressReporter, active_stages
from spark_audit.report import render_html, report_tables, summary_text
from spark_audit.report_options import ReportOptions

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

EXIT_INPUT = 1  # input or output unusable (message says why, with counts)
# Tables computed from the lines rather than the rollup, each by a scan of its own: the
# columns it parses, the job, and why it cannot use the rollup.
LINE_SCANS = {
    "latency": (jobs.LATENCY_COLUMNS, jobs.latency, "percentiles need every value"),
    "leader_traffic": (jobs.PLACEMENT_COLUMNS, jobs.leader_traffic, "bytes per partition"),
    "topic_traffic": (jobs.TOPIC_COLUMNS, jobs.topic_traffic, "bytes per topic and principal"),
    "last_apply": (jobs.LAST_APPLY_COLUMNS, jobs.last_apply, "the moved partitions' bytes around the last apply"),
}
# Line scans that need records of a kind: without any (the rollup counted them), the table
# is built empty, with its columns and types, without reading the input again.
SCAN_ONLY_WITH_KIND = {"last_apply": "leader_move"}


def load_framing(path: str | None, path_mtu: int | None = None, link_header_bytes: int | None = None) -> Framing:
    """The network path of the bytes-on-the-wire estimate.

    From the flags when given, else `[audit] path_mtu` / `link_header_bytes` of the TOML
    file at `path` (a full config file), else the defaults (`spark_audit.config.AuditConfig`).
    Raises ConfigError naming the key.
    """
    audit: dict[str, Any] = {}  # TOML values
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text())
        except (FileNotFoundError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"prices file {path}: {exc}") from exc
        section = data.get("audit", {})
        audit = {k: section[k] for k in ("path_mtu", "link_header_bytes") if isinstance(section, dict) and k in section}
    if path_mtu is not None:
        audit["path_mtu"] = path_mtu
    if link_header_bytes is not None:
        audit["link_header_bytes"] = link_header_bytes
    return build(AuditConfig, audit, "audit").framing


def run(job: str, input_uri: str, output_uri: str, prices: Prices, *, master: str | None = "local[*]",
        s3_endpoint_url: str | None = None, spark: SparkSession | None = None, out: TextIO | None = None,
        table_formats: tuple[str, ...] = ("csv",), storage_class: str = "standard", framing: Framing | None = None,
        progress: TextIO | None = None, progress_interval_s: float = DEFAULT_INTERVAL_S,
        report_options: ReportOptions | None = None) -> int:
    """Run `job`; returns the process exit code (0, or EXIT_INPUT with a message on stderr).

    `spark`: an existing session (tests); otherwise one is created for `master`
    (None: whatever spark-submit configured) and stopped at the end.
    `table_formats`: any of TABLE_FORMATS; each table is written once per format.
    `storage_class`: the WAL's (wal.storage_class), pricing its requests in savings and break_even.
    `framing`: the network path bytes on the wire are estimated for (default `Framing()`:
    path MTU 9001, IP bytes as AWS bills them).
    `progress` (default stderr) gets a line per step and, every `progress_interval_s`
    while one runs, the step and Spark's active stages (spark_audit.progress).
    `report_options`: the report's projection rule, compute rates and team rules (defaults:
    `ReportOptions()`); `report` and `all` also write the tables computed from them
    (catalog.REPORT_TABLES) as CSV.
    Raises ValueError for an unknown job or table format.
    """
    if job not in TABLES_OF_JOB:
        raise ValueError(f"unknown audit job {job!r} (known: {', '.join(JOBS)})")
    unknown = [f for f in table_formats if f not in TABLE_FORMATS]
    if unknown or not table_formats:
        raise ValueError(f"unknown table format {unknown or table_formats!r} (known: {', '.join(TABLE_FORMATS)})")
    out = out or sys.stdout
    progress = progress or sys.stderr
    framing = framing or Framing()
    options = report_options or ReportOptions()
    own_session = spark is None
    if spark is None:
        print(f"audit {job}: starting Spark ({master or 'spark-submit master'})", file=progress, flush=True)
        spark = spark_session(master, quick_jit=bool(master) and quick_jit_suits(input_uri))
    else:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
    builders: dict[str, Callable[[DataFrame], DataFrame]] = {
        "savings": lambda r: jobs.savings(r, prices, framing, storage_class),
        "break_even": lambda r: jobs.break_even(r, prices, framing, storage_class),
        "writer_drops": jobs.writer_drops,
        "cache_agent": jobs.agent_cache,
        "cache_metadata": jobs.metadata_cache,
        "passthrough_bytes": lambda r: jobs.passthrough_bytes(r, prices, framing),
        "fetch_bytes": jobs.fetch_bytes,
        "zone_trouble": lambda r: jobs.zone_trouble(r, prices, framing, storage_class),
        "agents": jobs.agent_zones,
    }
    rolled = None
    reporter = ProgressReporter(job, progress, lambda: active_stages(spark.sparkContext), progress_interval_s)
    try:
        with reporter, tempfile.TemporaryDirectory(prefix="azsidecar-audit-in-") as stage:
            output = Output(output_uri, s3_endpoint_url)
            reporter.step(f"finding the input {input_uri}")
            path = resolve_input(spark, input_uri, s3_endpoint_url, Path(stage))
            scans = [name for name in TABLES_OF_JOB[job] if name in LINE_SCANS]
            reporter.step("reading every record once into the rollup (the long step)")
            rolled, summary = load(spark, path, source=input_uri,
                                   extra_columns=tuple(c for name in scans for c in LINE_SCANS[name][0]),
                                   framing=framing)
            print(summary.message(), file=sys.stderr)
            tables = {}
            for name in TABLES_OF_JOB[job]:
                if name in LINE_SCANS:
                    columns, build, why = LINE_SCANS[name]
                    needed = SCAN_ONLY_WITH_KIND.get(name)
                    lines, _ = read_lines(spark, path, columns, input_uri)
                    if needed is not None and not summary.records_by_kind.get(needed):
                        reporter.step(f"table {name}: empty, no {needed} records")
                        lines = lines.limit(0)  # Spark plans an empty relation: no file is read
                    else:
                        reporter.step(f"table {name}: reading the records again ({why})")
                    tables[name] = Table.of(name, build(lines))
                else:
                    reporter.step(f"table {name}")
                    tables[name] = Table.of(name, builders[name](rolled))
            reporter.step("writing the tables" + (" and report.html" if job in ("report", "all") else ""))
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
                # the report's own tables are computed on the driver from the collected ones: CSV only
                for table in report_tables(tables, summary, prices, options).values():
                    write_csv(table, output.dir / f"{table.name}.csv")
                    written.append(f"{table.name}.csv")
                (output.dir / "report.html").write_text(render_html(tables, summary, prices, framing, options))
        output.finish()
        print(summary_text(tables, summary, prices, framing, options), file=out)
        print(f"tables written to {output_uri}: " + ", ".join(written)
              + (", report.html" if job in ("report", "all") else ""), file=out)
        return 0
    except AuditJobError as exc:
        print(f"azsidecar audit: {exc}", file=sys.stderr)
        return EXIT_INPUT
    finally:
        if rolled is not None:
            release(rolled)
        if own_session:
            stop_spark(spark)
