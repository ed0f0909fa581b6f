"""Reading audit records into Spark and writing result tables: the jobs' I/O shell.

Input: a local directory/file or an `s3://bucket/prefix` URI. When the Spark runtime has
no filesystem for the `s3` scheme (plain pyspark from PyPI has none; EMR has EMRFS), the
objects are staged into a local temporary directory with boto3 first. Every line is read
with the union schema in PERMISSIVE mode: a line that is not JSON or has a value of the
wrong type lands in `_corrupt_record` and is counted, never silently dropped.

Output: result tables are small (hours x zones), so they are collected to the driver and
written as CSV with the standard library and, when asked, as one Parquet file per table
(Spark writes it from the collected rows with the table's own schema); an `s3://` output
is written locally and uploaded with boto3. This keeps output independent of the
cluster's Hadoop setup.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError
from pyspark import SparkContext, StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from core.audit import KINDS, SCHEMA_VERSION
from core.errors import SidecarError
from core.framing import Framing
from spark_audit import jobs
from spark_audit.jobs import STATUS_COLUMN
from spark_audit.rounding import csv_text
from spark_audit.schemas import CORRUPT_COLUMN, input_schema

log = logging.getLogger(__name__)

INPUT_PARTITIONS_PER_CORE = 4  # local mode: input tasks per core, so no core idles at the end
CORRUPT_SAMPLES = 3  # corrupt lines quoted in the input report
SAMPLE_CHARS = 120  # each quoted line cut to this length


class AuditJobError(SidecarError):
    """An audit job cannot go on; the message is meant for the user (who fixes the input or
    the output: running it again as it is fails the same way)."""

    retriable = False


class InputError(AuditJobError):
    """The input cannot be used (missing, empty, nothing readable); message has counts."""


class OutputError(AuditJobError):
    """The results could not be written where asked."""


@dataclass(frozen=True)
class Table:
    """A small result table collected to the driver."""

    name: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    schema: StructType | None = None  # the Spark types, for typed (Parquet) output

    @classmethod
    def of(cls, name: str, df: DataFrame) -> Table:
        return cls(name, tuple(df.columns), tuple(tuple(r) for r in df.collect()), df.schema)

    def dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, r)) for r in self.rows]


@dataclass(frozen=True)
class InputSummary:
    """What the reader found; `message()` is the text shown to the user."""

    source: str
    files: int
    lines: int
    records_by_kind: dict[str, int]
    corrupt_lines: int
    unknown_kind_lines: int
    newer_version_lines: int
    versions: dict[int, int]
    corrupt_samples: tuple[str, ...] = field(default=())
    first_ts_ms: int | None = None  # the earliest and latest ts_ms of a valid record
    last_ts_ms: int | None = None

    @property
    def valid_records(self) -> int:
        return sum(self.records_by_kind.values())

    def message(self) -> str:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.records_by_kind.items())) or "none"
        versions = ", ".join(f"v{v}: {n}" for v, n in sorted(self.versions.items())) or "none"
        text = [
            f"input {self.source}: {self.files} files, {self.lines} lines, {self.valid_records} records ({kinds})",
            f"  schema versions: {versions} (this reader: v{SCHEMA_VERSION})",
            f"  corrupt lines (not JSON, or a value of the wrong type): {self.corrupt_lines}",
            f"  lines without a known kind: {self.unknown_kind_lines}",
        ]
        if self.newer_version_lines:
            text.append(f"  WARNING: {self.newer_version_lines} records are from a newer schema than "
                        f"v{SCHEMA_VERSION}; fields this reader does not know are ignored")
        text.extend(f"  corrupt: {s}" for s in self.corrupt_samples)
        return "\n".join(text)

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source, "files": self.files, "lines": self.lines,
            "records_by_kind": self.records_by_kind, "corrupt_lines": self.corrupt_lines,
            "unknown_kind_lines": self.unknown_kind_lines, "newer_version_lines": self.newer_version_lines,
            "versions": {str(k): v for k, v in self.versions.items()},
            "corrupt_samples": list(self.corrupt_samples),
            "first_ts_ms": self.first_ts_ms, "last_ts_ms": self.last_ts_ms,
        }


# Local mode runs the demo's and a host's audits. On small inputs the JVM's JIT compiling
# Spark's planner costs more CPU than the code it compiles saves: C1 only (and the serial
# collector on a small heap) halved the wall time of the audit job tests (15 jobs: 241 s ->
# 132 s, 2026-11-29, 2 cores at load 7-11). On large inputs it is the other way round: the
# savings job over 10 M records took 198.7 s with C1 only against 22.1 s with the JVM's
# defaults (`bench/bench_audit.py`, 2026-11-30 and 2026-11-26). So local sessions use it only
# for inputs under QUICK_JIT_MAX_INPUT_BYTES (stored, compressed); spark-submit on a cluster
# keeps the JVM defaults.
# PySpark 4 records the Python call site of every DataFrame and Column function in the JVM
# (for error messages that point at the user's line): several more Py4J round trips per
# call, half of a report's 26,000 round trips. The jobs are this package's fixed code, so
# the call sites name nothing a user wrote. Without them a report over the audit of 20,000
# produce batches took 0.88x the time in a started local[*] Spark session
# (bench/bench_audit_plans.py --compare call_sites, 2026-12-01).
# PySpark reads the setting once per process, from the first session.
NO_CALL_SITES = ("spark.python.sql.dataFrameDebugging.enabled", "false")
QUICK_JIT_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
QUICK_JIT_MAX_INPUT_BYTES = 32 * 1024 * 1024
# The same small inputs: with few rows, planning dominates, and three things Spark does for
# large data only cost. Whole-stage code generation compiles every stage with Janino; adaptive
# execution re-plans after every shuffle; eight shuffle partitions mean eight tasks per stage
# for a few hundred rows. Each job in a fresh process, as `azsidecar audit` runs: over a 12 MB
# demo's audit the savings job took 0.959x the JVM CPU-s of Spark's defaults (33.8 against
# 35.3, of which ~12 start and stop the session) and the report 0.961x (44.7 against 46.5);
# over the audit of 20,000 produce batches 0.955x and 0.956x (`bench/bench_audit_small.py`,
# 2026-12-01, load 1.0-1.8). Results do not change: all three only choose how a plan runs.
SMALL_INPUT_CONFIGS = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
}


def quick_jit_suits(input_path: str) -> bool:
    """Whether a local session for `input_path` should start with QUICK_JIT_JAVA_OPTIONS: a
    local directory holding less than QUICK_JIT_MAX_INPUT_BYTES (an S3 input: no, its size is
    not looked up)."""
    if "://" in input_path and not input_path.startswith("file://"):
        return False
    root = input_path.removeprefix("file://")
    total = 0
    for directory, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(directory, name))
            except OSError:
                continue
            if total >= QUICK_JIT_MAX_INPUT_BYTES:
                return False
    return True


# Local mode's JVM heap (the driver is the executor) for inputs too large for the quick JIT:
# a quarter of the machine's memory, between LOCAL_DRIVER_MEMORY_MIN_MIB (what every local
# session had, and small inputs keep) and LOCAL_DRIVER_MEMORY_MAX_MIB. With 2 GiB the savings
# job over the audit of 100 M produced batches (5.6 M records, a 5 M-row rollup) ran with the
# heap full (2,065 of 2,147 MB used, 288 collections in 196 s, 2026-11-30, JFR). With 6 GiB
# (both runs at once on the same input, cold JVMs, load 3-7) it used 0.90x the JVM CPU
# seconds (305.7 against 338.7 s) and half the tasks' GC time (12.4 against 23.0 s). The
# JVM commits the heap as it grows.
LOCAL_DRIVER_MEMORY_MIN_MIB = 2048
LOCAL_DRIVER_MEMORY_MAX_MIB = 6144


def local_driver_memory_mib(physical_bytes: int) -> int:
    """The local session's heap in MiB for a machine with `physical_bytes` of memory."""
    quarter = physical_bytes // 4 // (1024 * 1024)
    return max(LOCAL_DRIVER_MEMORY_MIN_MIB, min(LOCAL_DRIVER_MEMORY_MAX_MIB, quarter))


def _physical_memory_bytes() -> int:
    """The machine's memory (0 when the OS does not say: the minimum heap is used)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 0


def stop_spark(spark: SparkSession, timeout_s: float = 30.0) -> None:
    """Stop the session and the JVM PySpark started for it.

    `SparkSession.stop()` ends the SparkContext but leaves its gateway JVM running for the
    rest of the Python process, idling at ~10 % of a core (2026-11-29): a process that
    runs a job and goes on (the demo, a test) would carry it to the end."""
    spark.stop()
    # PySpark has no public call for this: the gateway is a class attribute it sets on the
    # first context and reuses (a later session launches a new JVM when it is None).
    gateway = SparkContext._gateway  # noqa: SLF001
    if gateway is None:
        return
    proc = getattr(gateway, "proc", None)  # set by pyspark's launch_gateway for a JVM it started
    gateway.shutdown()
    SparkContext._gateway = None  # noqa: SLF001
    SparkContext._jvm = None  # noqa: SLF001
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout_s)


def spark_session(master: str | None = "local[*]", app_name: str = "azsidecar-audit",
                  quick_jit: bool = False) -> SparkSession:
    """Get or create the session; `master=None` leaves it to spark-submit. `quick_jit`: a
    local JVM with C1 only, for small inputs (QUICK_JIT_JAVA_OPTIONS, `quick_jit_suits`).

    Forces the session time zone to UTC: hours in the tables are UTC hours.
    """
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
        # Local mode only: a small shuffle (tables are tiny) and no UI port to collide on.
        heap_mib = LOCAL_DRIVER_MEMORY_MIN_MIB if quick_jit else local_driver_memory_mib(_physical_memory_bytes())
        builder = (builder.config("spark.sql.shuffle.partitions", "8")
                   .config("spark.ui.enabled", "false")
                   .config("spark.driver.memory", f"{heap_mib}m"))
        # The cached rollup stays compressed (Spark's default): choosing each column's encoding
        # was 17 % of the JVM's samples over the audit of 100 M produced batches, but
        # uncompressed its reads took 20 % and the collections grew (2026-11-30, JFR).
        if quick_jit:
            builder = builder.config("spark.driver.extraJavaOptions", QUICK_JIT_JAVA_OPTIONS)
            for key, value in SMALL_INPUT_CONFIGS.items():
                builder = builder.config(key, value)
    builder = (builder.config("spark.ui.showConsoleProgress", "false")
               .config(*NO_CALL_SITES))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    if master:
        # gzip files cannot be split, and Spark packs small files together into ~ one input
        # partition per core: the last, longest one then runs alone (10 M records: 5 tasks on
        # 2 cores, one core idle for the last fifth). Four input partitions per core at least
        # keep both cores busy to the end.
        spark.conf.set("spark.sql.files.minPartitionNum", str(INPUT_PARTITIONS_PER_CORE
                                                              * spark.sparkContext.defaultParallelism))
    return spark


def spark_has_filesystem(spark: SparkSession, scheme: str) -> bool:
    """True when the JVM side has a Hadoop FileSystem registered for `scheme`."""
    jvm = spark.sparkContext._jvm  # noqa: SLF001 - py4j gateway is the only way to ask Hadoop
    assert jvm is not None  # set while a SparkContext runs (pyspark asserts the same)
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # noqa: SLF001
    try:
        jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(scheme, conf)
    except Exception:  # noqa: BLE001 - py4j wraps UnsupportedFileSystemException / ClassNotFoundException
        return False
    return True


def _split_s3(uri: str) -> tuple[str, str]:
    bucket, _, prefix = uri[len("s3://"):].partition("/")
    if not bucket:
        raise InputError(f"{uri}: no bucket in s3 URI")
    return bucket, prefix


def stage_s3(uri: str, dest: Path, endpoint_url: str | None) -> int:
    """Download every object under `uri` into `dest`, keeping relative paths.

    Returns the number of files. Raises InputError if nothing is there or S3 refuses.
    """
    bucket, prefix = _split_s3(uri)
    s3 = boto3.client("s3", endpoint_url=endpoint_url)
    count = 0
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                key = obj["Key"]
                rel = key[len(prefix):].lstrip("/") or Path(key).name
                if any(part.startswith((".", "_")) for part in Path(rel).parts):
                    continue  # in-progress or marker files: Spark would skip them too
                target = dest / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                s3.download_file(bucket, key, str(target))
                count += 1
    except (BotoCoreError, ClientError) as exc:
        raise InputError(f"{uri}: cannot read from S3: {exc}") from exc
    if count == 0:
        raise InputError(f"{uri}: no audit files under this S3 prefix")
    return count


def resolve_input(spark: SparkSession, uri: str, endpoint_url: str | None, stage_dir: Path) -> str:
    """The path Spark should read: `uri` itself, or a local staging copy of s3:// input.

    Raises InputError for a missing local path.
    """
    if uri.startswith("s3://"):
        if endpoint_url is None and spark_has_filesystem(spark, "s3"):
            return uri
        files = stage_s3(uri, stage_dir, endpoint_url)
        log.info("staged %d files from %s into %s", files, uri, stage_dir)
        return str(stage_dir)
    if "://" in uri and not uri.startswith("file://"):
        return uri  # hdfs://, s3a:// ...: whatever the cluster's Hadoop can read
    local = Path(uri.removeprefix("file://"))
    if not local.exists():
        raise InputError(f"input {uri}: no such file or directory")
    return str(local)


def read_lines(spark: SparkSession, path: str, columns: Iterable[str] | None = None,
               source: str | None = None) -> tuple[DataFrame, int]:
    """Every audit line under `path` (lazily) with a `_status` column, and the file count.

    `_status` is ok, corrupt (not JSON, or a wrong-typed value in a parsed field) or
    unknown_kind. `columns`: the record fields to parse (None: all); the JSON parser
    skips the others, so a wrong-typed value in a field nobody reads does not make its
    line corrupt. Raises InputError when there are no files.
    """
    schema = input_schema()
    if columns is not None:
        wanted = set(columns) | {"kind", "schema_version", CORRUPT_COLUMN}
        schema = StructType([f for f in schema.fields if f.name in wanted])
    raw = (spark.read.schema(schema)
           .option("mode", "PERMISSIVE")
           .option("columnNameOfCorruptRecord", CORRUPT_COLUMN)
           .option("recursiveFileLookup", "true")
           .json(path))
    files = len(raw.inputFiles())
    if files == 0:
        raise InputError(f"input {source or path}: no audit files found")
    status = (F.when(F.col(CORRUPT_COLUMN).isNotNull(), "corrupt")
              .when(F.col("kind").isin(list(KINDS)), "ok").otherwise("unknown_kind"))
    return raw.withColumn(STATUS_COLUMN, status), files


def keep(spark: SparkSession, rolled: DataFrame) -> DataFrame:
    """The rollup computed once and kept for the tables' queries.

    In local mode it is checkpointed: the frame the tables are built on is then a leaf over
    the kept rows, not the plan that read, parsed and grouped the input. Spark analyses the
    whole plan under every step a table takes (each select, join and union), and that
    analysis was most of a report on a small input. In one started local session, as shipped
    against cached (bench/bench_audit_plans.py, 2026-12-01): over the audit of 20,000 produce
    batches savings 0.80x the time and report 0.92x; over that of 100 M batches 1.00x and
    0.96x. A local checkpoint is not recomputed if its blocks are lost, which in local mode only
    the driver's own end can do; on a cluster an executor lost would fail the job, so there
    the rollup is cached (compressed, recomputed from the input if need be)."""
    if (spark.sparkContext.master or "").startswith("local"):
        return rolled.localCheckpoint(eager=True, storageLevel=StorageLevel.MEMORY_AND_DISK)
    return rolled.persist(StorageLevel.MEMORY_AND_DISK)


def release(rolled: DataFrame) -> None:
    """Free what `keep` kept, before returning. A checkpointed frame's `unpersist()` leaves
    its blocks in place (they belong to the RDD under its plan's leaf), so that RDD is
    unpersisted too."""
    rolled.unpersist(blocking=True)
    leaf = rolled._jdf.queryExecution().logical()  # noqa: SLF001 - no public handle on the checkpoint's RDD
    if leaf.getClass().getSimpleName() == "LogicalRDD":
        leaf.rdd().unpersist(True)


def load(spark: SparkSession, path: str, source: str | None = None,
         extra_columns: Iterable[str] = (), framing: Framing | None = None) -> tuple[DataFrame, InputSummary]:
    """Read the input once into the kept rollup (`jobs.rollup`, `keep`); returns it and the summary.

    `framing`: the path the notification bytes on the wire are counted for (`jobs.rollup`).
    `extra_columns` are parsed too, so that lines a later pass would find corrupt (the
    latency pass reads latency_ms) are already counted here. Call `release(rolled)` when
    done. Raises InputError when there are no files or no valid record at
    all (the message carries the counts).
    """
    source = source or path
    lines, files = read_lines(spark, path, tuple(jobs.ROLLUP_COLUMNS) + tuple(extra_columns), source)
    # A cached plan keeps its partitioning (AQE does not coalesce it): without this, every
    # query over the small rollup would run spark.sql.shuffle.partitions (200) tasks.
    partitions = max(2, spark.sparkContext.defaultParallelism)
    rolled = keep(spark, jobs.rollup(lines, framing).coalesce(partitions))
    counts = rolled.groupBy(STATUS_COLUMN, "kind", "schema_version").agg(
        F.sum("n").alias("n"), F.min("first_ts_ms").alias("first"), F.max("last_ts_ms").alias("last")).collect()
    first_ts: list[int] = []
    last_ts: list[int] = []
    by_kind: dict[str, int] = {}
    versions: dict[int, int] = {}
    corrupt = unknown = newer = total = 0
    for row in counts:
        n = row["n"]
        total += n
        if row[STATUS_COLUMN] == "corrupt":
            corrupt += n
        elif row[STATUS_COLUMN] == "unknown_kind":
            unknown += n
        else:
            by_kind[row["kind"]] = by_kind.get(row["kind"], 0) + n
            version = row["schema_version"] if row["schema_version"] is not None else 0
            versions[version] = versions.get(version, 0) + n
            if version > SCHEMA_VERSION:
                newer += n
            if row["first"] is not None:
                first_ts.append(row["first"])
                last_ts.append(row["last"])
    samples: tuple[str, ...] = ()
    if corrupt:  # a second, short scan that stops after a few lines
        samples = tuple(
            (r[CORRUPT_COLUMN] or "")[:SAMPLE_CHARS]
            for r in lines.filter(F.col(STATUS_COLUMN) == "corrupt")
            .select(CORRUPT_COLUMN, STATUS_COLUMN).limit(CORRUPT_SAMPLES).collect()
        )
    summary = InputSummary(source, files, total, by_kind, corrupt, unknown, newer, versions, samples,
                           min(first_ts, default=None), max(last_ts, default=None))
    if summary.valid_records == 0:
        release(rolled)
        raise InputError(f"no valid audit records\n{summary.message()}")
    return rolled, summary


def write_csv(table: Table, path: Path) -> None:
    """`table` as CSV, its floats rounded for a reader (`spark_audit.rounding`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        f.write(csv_text(table.columns, table.rows))


def write_parquet(spark: SparkSession, table: Table, path: Path) -> None:
    """`path` becomes one Parquet file holding the table with its Spark schema.

    Spark writes a directory of part files; a table is small, so it is coalesced to one
    part, which is moved to `path` (a plain file, as easy to hand on as the CSV).
    """
    if table.schema is None:
        raise ValueError(f"table {table.name} has no schema: build it with Table.of")
    staging = path.with_name(path.name + ".spark")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        df = spark.createDataFrame(list(table.rows), schema=table.schema)
        df.coalesce(1).write.mode("overwrite").parquet(str(staging))
        (part,) = staging.glob("part-*.parquet")
        path.unlink(missing_ok=True)
        part.replace(path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


class Output:
    """A local directory that is uploaded to S3 on `finish()` when the URI is s3://."""

    def __init__(self, uri: str, endpoint_url: str | None) -> None:
        self.uri = uri
        self._endpoint_url = endpoint_url
        if uri.startswith("s3://"):
            if not uri[len("s3://"):].partition("/")[0]:
                raise OutputError(f"{uri}: no bucket in s3 URI")
            self.dir = Path(tempfile.mkdtemp(prefix="azsidecar-audit-out-"))
        else:
            self.dir = Path(uri.removeprefix("file://"))
            self.dir.mkdir(parents=True, exist_ok=True)

    def finish(self) -> None:
        """Upload (s3://) and remove the local copy. Raises OutputError if S3 refuses."""
        if not self.uri.startswith("s3://"):
            return
        bucket, prefix = _split_s3(self.uri)
        s3 = boto3.client("s3", endpoint_url=self._endpoint_url)
        try:
            for path in sorted(p for p in self.dir.rglob("*") if p.is_file()):
                key = "/".join(filter(None, [prefix.strip("/"), str(path.relative_to(self.dir))]))
                s3.upload_file(str(path), bucket, key)
        except (BotoCoreError, ClientError) as exc:
            raise OutputError(f"{self.uri}: cannot write results to S3 (kept in {self.dir}): {exc}") from exc
        shutil.rmtree(self.dir, ignore_errors=True)
