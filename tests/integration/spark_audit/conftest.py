"""One local SparkSession for the whole spark_audit test package, plus input helpers.

Startup is the expensive part (~10 s of JVM), so the session is session-scoped and kept
small: 2 local cores, 2 shuffle partitions, no UI, UTC hours.
"""

from __future__ import annotations

import contextlib
import gzip
import json
from pathlib import Path

import pytest

from spark_audit._io import QUICK_JIT_JAVA_OPTIONS, stop_spark
from tests.conftest import shared_environment

H0_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
HOUR_MS = 3_600_000


@pytest.fixture
def spark(_shared_stacks, request):
    """The group's local SparkSession (one JVM for every Spark test of the group), stopped
    with its JVM when the group ends (tests/conftest.py), not at the end of the worker."""
    pyspark_sql = pytest.importorskip("pyspark.sql")

    @contextlib.contextmanager
    def start():
        session = (
            pyspark_sql.SparkSession.builder.master("local[2]")
            .appName("azsidecar-audit-tests")
            .config("spark.sql.shuffle.partitions", "1")
            .config("spark.sql.codegen.wholeStage", "false")  # tiny inputs: compiling costs more than it saves
            # Expressions interpreted and no adaptive re-planning: on these few-row inputs Janino's
            # compiling and AQE's per-stage re-optimizing were most of the CPU (a fixed 19-test
            # subset: 166 CPU-s with both, 114 without). The product's sessions compile
            # expressions (spark_audit/_io.py); the spark-submit test and the demo run that way.
            .config("spark.sql.codegen.factoryMode", "NO_CODEGEN")
            .config("spark.sql.adaptive.enabled", "false")
            .config("spark.default.parallelism", "1")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.driver.extraJavaOptions", QUICK_JIT_JAVA_OPTIONS)
            .getOrCreate()
        )
        session.sparkContext.setLogLevel("ERROR")
        try:
            yield session
        finally:
            stop_spark(session)

    return shared_environment(_shared_stacks, "spark", request.node.nodeid, start)


def write_jsonl(path: Path, records: list[dict], extra_lines: tuple[str, ...] = ()) -> Path:
    """Write records (and raw extra lines) as one gzip JSON lines file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
        for line in extra_lines:
            f.write(line + "\n")
    return path


def rec(kind: str, zone: str, ts_ms: int = H0_MS, version: int = 2, **fields) -> dict:
    return {"schema_version": version, "kind": kind, "ts_ms": ts_ms, "zone": zone, **fields}
