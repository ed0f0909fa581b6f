"""Progress of a running audit job: which job, which step, which Spark stages, how far.

A long job must not look hung (a 200k-record run once printed nothing for 108 s). The
runner names its steps (`ProgressReporter.step`), which prints a line at once; a
background thread prints the step and Spark's active stages, read from the
SparkContext's status tracker, every `interval_s` while anything runs. Formatting is the
pure `progress_line`; no pyspark import here (the tracker comes in through the context).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

DEFAULT_INTERVAL_S = 2.0  # "at least every few seconds"


@dataclass(frozen=True)
class StageProgress:
    """One active Spark stage, as the status tracker reports it."""

    stage_id: int
    name: str
    tasks: int
    completed: int
    running: int


def progress_line(job: str, step: str, elapsed_s: float, stages: Sequence[StageProgress] = ()) -> str:
    """`[  12.3 s] audit savings: building the rollup | Spark stage 4 30/72 tasks (2 running)`."""
    line = f"[{elapsed_s:7.1f} s] audit {job}: {step}"
    if stages:
        line += " | Spark " + "; ".join(
            f"stage {s.stage_id} {s.completed}/{s.tasks} tasks" + (f" ({s.running} running)" if s.running else "")
            for s in sorted(stages, key=lambda s: s.stage_id))
    return line


def active_stages(spark_context: Any) -> list[StageProgress]:
    """The active stages of `spark_context` (a pyspark SparkContext); [] once it has stopped."""
    tracker = spark_context.statusTracker()
    out = []
    for stage_id in tracker.getActiveStageIds():
        info = tracker.getStageInfo(stage_id)
        if info is not None:
            out.append(StageProgress(info.stageId, info.name, info.numTasks, info.numCompletedTasks,
                                     info.numActiveTasks))
    return out


class ProgressReporter:
    """Prints progress lines to `out` while a job runs; use as a context manager.

    `stages()` is called from the reporter's thread (default: the context's active stages).
    """

    def __init__(self, job: str, out: TextIO, stages: Callable[[], Sequence[StageProgress]],
                 interval_s: float = DEFAULT_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._job, self._out, self._stages = job, out, stages
        self._interval_s = interval_s
        self._clock = clock
        self._started = clock()
        self._step = "starting"
        self._lock = threading.Lock()  # one line at a time, from either thread
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="audit-progress", daemon=True)

    def __enter__(self) -> ProgressReporter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def step(self, step: str) -> None:
        """Enter a new step of the job and say so at once."""
        self._step = step
        self._print(())

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):  # the period of the report, not a synchronization
            try:
                stages = self._stages()
            except Exception:  # noqa: BLE001 - a stopped context or a py4j hiccup must not end the job
                stages = []
            self._print(stages)

    def _print(self, stages: Sequence[StageProgress]) -> None:
        with self._lock:
            print(progress_line(self._job, self._step, self._clock() - self._started, stages),
                  file=self._out, flush=True)
