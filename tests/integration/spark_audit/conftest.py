"""One local SparkSession for the whole spark_audit test package, plus input helpers.

Startup is the expensive part (~10 s of JVM), so the session is session-scoped and kept
small: 2 local cores, 2 shuffle partitions, no UI, UTC hours.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import sys
import threading
from pathlib import Path

import pytest

from spark_audit._io import NO_CALL_SITES, QUICK_JIT_JAVA_OPTIONS, stop_spark
from tests.conftest import discard_environment, shared_environment

H0_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
HOUR_MS = 3_600_000


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Marks a test whose call ended in anything but a failed assertion (or a skip): the
    `spark` fixture then replaces the session after it."""
    yield
    if call.when == "call" and call.excinfo is not None and not call.excinfo.errisinstance(
            (AssertionError, pytest.skip.Exception)):
        item.stash[SESSION_SUSPECT] = True


SESSION_SUSPECT = pytest.StashKey[bool]()
_SUSPECT_SESSIONS: set[int] = set()  # id() of the sessions to kill rather than stop


def kill_spark() -> None:
    """End the JVM of a session whose Py4J connection cannot be trusted, and make PySpark
    forget it, so that the next builder starts a new one. Stopping it the usual way would
    send commands down that connection and read stale answers."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    gateway = SparkContext._gateway  # noqa: SLF001 - PySpark has no public call for this
    proc = getattr(gateway, "proc", None)
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)
    context = SparkContext._active_spark_context  # noqa: SLF001
    if context is not None:
        with contextlib.suppress(Exception):  # the JVM is gone: its calls fail, it forgets them
            context.stop()
    if gateway is not None:
        with contextlib.suppress(Exception):
            gateway.shutdown()
    SparkContext._gateway = None  # noqa: SLF001
    SparkContext._jvm = None  # noqa: SLF001
    SparkContext._active_spark_context = None  # noqa: SLF001
    SparkSession._instantiatedSession = None  # noqa: SLF001
    SparkSession._activeSession = None  # noqa: SLF001


def timeout_limit_s(item) -> float | None:
    """The test's pytest-timeout limit: its timeout mark, else --timeout, PYTEST_TIMEOUT or
    the ini file's (pytest-timeout's own order)."""
    marker = item.get_closest_marker("timeout")
    value = None
    if marker is not None:
        value = marker.args[0] if marker.args else marker.kwargs.get("timeout")
    if value is None:
        value = (item.config.getoption("timeout", None) or os.environ.get("PYTEST_TIMEOUT")
                 or item.config.getini("timeout"))
    return float(value) if value else None


def watchdog_s(limit_s: float) -> float:
    """When the watchdog kills the JVM: a tenth of the timeout, at least 20 s, before it (at
    the latest half way), so that the failure is reported before pytest-timeout fires: on a
    loaded host formatting Py4J's long tracebacks took more than 5 s."""
    return max(limit_s - max(0.1 * limit_s, 20.0), 0.5 * limit_s)


def start_watchdog(item) -> threading.Timer | None:
    """A timer that kills the Spark JVM `watchdog_s` after it starts: shortly before the
    test's timeout when the session was already up.

    pytest-timeout interrupts a test by raising in its main thread, which is most often waiting
    for a Py4J answer. PySpark then sends more commands down the same connection while it
    unwinds (a call site reset after collect): if the job still runs, that waits for ever; if
    its answer comes, every later command reads the answer of the one before (one timed-out
    report once failed the 34 Spark tests after it). With the JVM gone, the wait ends in a
    Py4J error, and the test's teardown replaces the session."""
    limit = timeout_limit_s(item)
    if not limit:
        return None

    def kill() -> None:
        from pyspark import SparkContext

        item.stash[SESSION_SUSPECT] = True
        proc = getattr(SparkContext._gateway, "proc", None)  # noqa: SLF001
        print(f"spark fixture: {item.nodeid} ran {after:.0f} s of its {limit:.0f} s timeout; "
              "killing its Spark JVM so that the next test starts a new one", file=sys.stderr, flush=True)
        if proc is not None and proc.poll() is None:
            proc.kill()

    after = watchdog_s(limit)
    timer = threading.Timer(after, kill)
    timer.daemon = True
    timer.start()
    return timer


@pytest.fixture
def spark(_shared_stacks, request):
    """The group's local SparkSession (one JVM for every Spark test of the group), stopped
    with its JVM when the group ends (tests/conftest.py), not at the end of the worker.

    A session is killed after a test that ends in anything but a failed assertion, and by a
    watchdog before the test's timeout (`start_watchdog`): a Py4J command left unanswered on
    its connection would make every later test read stale answers. The next test starts a
    new one."""
    pyspark_sql = pytest.importorskip("pyspark.sql")

    @contextlib.contextmanager
    def start():
        try:
            session = build()
            session.sparkContext.setLogLevel("ERROR")
        except BaseException:
            # A start cut short (pytest-timeout fires while the JVM is slow to start on a loaded
            # host) can leave a Py4J command unanswered on the gateway's connection: the next
            # test's start then read its answer ("KeyError: 'c'"). Its JVM goes, so that the
            # next start launches a new one.
            kill_spark()
            raise
        try:
            yield session
        finally:
            if id(session) in _SUSPECT_SESSIONS:
                _SUSPECT_SESSIONS.discard(id(session))
                kill_spark()
            else:
                stop_spark(session)

    def build():
        return (
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
            .config(*NO_CALL_SITES)  # as the product's sessions (spark_audit/_io.py)
            .config("spark.driver.extraJavaOptions", QUICK_JIT_JAVA_OPTIONS)
            .getOrCreate()
        )

    session = shared_environment(_shared_stacks, "spark", request.node.nodeid, start)
    # Armed once the session is up, not before: on a loaded host a JVM's start took 95 s, and
    # a watchdog counting from the setup killed the new JVM while it started. A start so slow
    # that the timeout comes first still ends: the test fails, its hook marks the session,
    # and the watchdog, firing later, ends any Py4J wait left in the unwinding.
    watchdog = start_watchdog(request.node)
    try:
        yield session
    finally:
        if watchdog is not None:
            watchdog.cancel()
    if request.node.stash.get(SESSION_SUSPECT, False):
        _SUSPECT_SESSIONS.add(id(session))
        discard_environment(_shared_stacks, "spark")


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
