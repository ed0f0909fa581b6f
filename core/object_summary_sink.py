"""An audit sink that writes the WAL path's per-object records as interval summaries.

Strategy: the WAL writer, the notification sender and the agent's reader, applier and
checkpoints emit one record per object as before; this sink, between them and the audit
writer, adds those records into `core.object_summary.ObjectSummaries` and writes the
summary kinds every interval (its flush loop: `core.periodic_flush.flush_every`), early
when the keys held reach the cap, and once more on `close` (shutdown). A record accounted
after that (a notification finishing in a draining proxy) is written at once as a summary
of its own: nothing is lost. Every other kind passes through unchanged, so the sink can sit
under the router's produce summaries too. The clock is a constructor argument (tests pass a
virtual one); `flush` is the one place records leave.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from core.audit import AuditSink
from core.framing import DEFAULT_PATH_MTU
from core.object_summary import MAX_KEYS, ObjectSummaries


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class ObjectSummarySink:
    """wal_flush, notification, agent_read, agent_apply, checkpoint_write in; their summaries out."""

    def __init__(self, inner: AuditSink, *, path_mtu: int = DEFAULT_PATH_MTU, max_keys: int = MAX_KEYS,
                 clock_ms: Callable[[], int] = wall_clock_ms) -> None:
        self._inner = inner
        self._clock_ms = clock_ms
        self._summaries = ObjectSummaries(max_keys, path_mtu)
        self._closed = False

    def emit(self, kind: str, fields: Mapping[str, Any]) -> None:
        if not self._summaries.add(kind, fields, self._clock_ms()):
            # A pass-through of any kind: its fields were type-checked where it was emitted
            # (against this sink's AuditSink overloads), so the overload check adds nothing here.
            self._inner.emit(kind, fields)  # type: ignore[call-overload]
            return
        if self._closed or self._summaries.full:
            self.flush()

    def flush(self) -> None:
        """Write the summaries of everything counted since the last flush."""
        if self._summaries.empty:
            return
        taken = self._summaries.take(self._clock_ms())
        for flush in taken.flushes:
            self._inner.emit("wal_flush_summary", flush)
        for notification in taken.notifications:
            self._inner.emit("notification_summary", notification)
        for read in taken.reads:
            self._inner.emit("agent_read_summary", read)
        for apply in taken.applies:
            self._inner.emit("agent_apply_summary", apply)
        for checkpoint in taken.checkpoints:
            self._inner.emit("checkpoint_summary", checkpoint)

    def close(self) -> None:
        """Flush, and from now on write each record as it comes (nothing waits for a next interval)."""
        self._closed = True
        self.flush()
