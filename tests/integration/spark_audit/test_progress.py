"""`azsidecar audit` says which job, step and Spark stage it is in while it runs.

The slow stage is made slow by its own task: it connects to this test and waits for a
byte, so the test decides when it ends (no sleeps): it releases the task only after the
reporter has printed the running stage.
"""

from __future__ import annotations

import io
import socket
import threading

from core.prices import Prices
from spark_audit.progress import ProgressReporter, StageProgress, active_stages, progress_line
from spark_audit.run import run
from tests.integration.spark_audit.conftest import rec, write_jsonl

WAIT_S = 120  # bound on every wait here: a loaded machine starts Python workers slowly


def test_progress_line_names_job_step_and_stages():
    assert progress_line("savings", "table savings", 3.25) == "[    3.2 s] audit savings: table savings"
    stages = [StageProgress(9, "collect", 8, 8, 0), StageProgress(4, "rollup", 72, 30, 2)]
    assert progress_line("report", "reading", 12.0, stages) == (
        "[   12.0 s] audit report: reading | Spark stage 4 30/72 tasks (2 running); stage 9 8/8 tasks")


class Lines(io.TextIOBase):
    """A text stream that keeps lines and signals the first one containing `needle`."""

    def __init__(self, needle: str) -> None:
        self.lines: list[str] = []
        self.needle = needle
        self.seen = threading.Event()

    def write(self, text: str) -> int:
        for line in text.splitlines():
            self.lines.append(line)
            if self.needle in line:
                self.seen.set()
        return len(text)


def _wait_for_release(port: int):
    def task(rows):
        with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as conn:
            conn.recv(1)  # the test sends a byte once it has seen the progress line
        return [sum(1 for _ in rows)]
    return task


def test_a_slow_stage_is_reported_while_it_runs(spark):
    out = Lines(needle="(1 running)")
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(WAIT_S)
    port = server.getsockname()[1]
    result: list = []
    job = threading.Thread(target=lambda: result.extend(
        spark.sparkContext.parallelize(range(10), 1).mapPartitions(_wait_for_release(port)).collect()))
    with ProgressReporter("savings", out, lambda: active_stages(spark.sparkContext), interval_s=0.05) as reporter:
        reporter.step("table savings")
        job.start()
        conn, _ = server.accept()  # the task is running and waiting
        try:
            assert out.seen.wait(WAIT_S), out.lines
        finally:
            conn.sendall(b"x")
            conn.close()
            job.join(WAIT_S)
            server.close()
    assert result == [10]
    running = [line for line in out.lines if "(1 running)" in line]
    assert running[0].startswith("[") and "audit savings: table savings | Spark stage " in running[0]
    assert "0/1 tasks (1 running)" in running[0]


def test_the_runner_names_each_step(spark, tmp_path):
    write_jsonl(tmp_path / "in" / "a.jsonl.gz", [
        rec("metadata_lookup", "az1", topic="t", partition=0, leader_zone="az1", cache="hit")])
    progress = io.StringIO()
    code = run("cache", str(tmp_path / "in"), str(tmp_path / "out"), Prices(), spark=spark, out=io.StringIO(),
               progress=progress, progress_interval_s=60)
    assert code == 0
    steps = [line.split(": ", 1)[1] for line in progress.getvalue().splitlines()]
    assert steps == [f"finding the input {tmp_path / 'in'}",
                     "reading every record once into the rollup (the long step)",
                     "table cache_agent", "table cache_metadata", "writing the tables"]
