"""What the fault-injecting proxies share: outcome counts written to a stats file, addresses, stopping on a signal."""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path

import trio

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
