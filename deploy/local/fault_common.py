"""What the fault-injecting proxies share: outcome counts written to a stats file, addresses, stopping on a signal."""

from __future__ import annotations

import contextlib
import json
import select
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import trio

from deploy.local.processes import STARTUP_TIMEOUT_S

STATS_EVERY_S = 1.0  # how often a stats file is rewritten


def write_counts(counts: Counter[str], path: Path) -> None:
    """Replace `path` with the counts as JSON (atomically: readers never see half a file)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(dict(counts), sort_keys=True))
    tmp.replace(path)


async def keep_writing_counts(counts: Counter[str], path: Path) -> None:
    """Rewrite `path` every STATS_EVERY_S until cancelled, and once more on the way out."""
    try:
        while True:
            write_counts(counts, path)
            await trio.sleep(STATS_EVERY_S)
    finally:
        write_counts(counts, path)


@contextlib.contextmanager
def running_listener(argv: Sequence[str], log_path: Path, what: str, timeout_s: float = STARTUP_TIMEOUT_S,
                     started: list[subprocess.Popen[bytes]] | None = None) -> Iterator[str]:
    """Run one of these injectors as a process; yield the HOST:PORT of its `listening=` line
    and stop it (SIGTERM, then kill) on exit. Raises RuntimeError if it does not come up
    within `timeout_s` (its stderr is in `log_path`). `started`, if given, gets the process
    (a benchmark reads its CPU time)."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=log, start_new_session=True)
    if started is not None:
        started.append(proc)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        line = b""
        while not line.startswith(b"listening="):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([proc.stdout], [], [], remaining)[0]:
                raise RuntimeError(f"{what} did not start within {timeout_s:g} s (see {log_path})")
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{what} exited with {proc.wait()} (see {log_path})")
        yield line.decode().strip().removeprefix("listening=")
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def hostport(text: str) -> tuple[str, int]:
    """"HOST:PORT" -> (host, port); raises ValueError for anything else."""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{text!r}: expected HOST:PORT")
    return host, int(port)


async def until_sigint_or_sigterm(nursery: trio.Nursery) -> None:
    """Wait for SIGINT or SIGTERM, then cancel `nursery` (its finally blocks write the stats)."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            nursery.cancel_scope.cancel()
            return
