"""An audit sink that writes the router's produce batches and lookups as interval summaries.

Strategy: the router emits one produce_batch and one metadata_lookup per partition batch as
before; this sink, between the router and the audit writer, adds them into
`router.produce_summary.ProduceSummaries` and writes produce_summary / metadata_summary
records every `interval_s` (the `run` task), early when the keys held reach the cap, and
once more when `run` ends (shutdown). A batch accounted after that (a round settling late
in a draining proxy) is written at once as a summary of its own: nothing is lost. Every
other kind passes through unchanged. The clock is a constructor argument (tests pass a
virtual one); `flush` is the one place records leave.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from core.audit import AuditSink
from core.periodic_flush import flush_every
from router.produce_summary import MAX_KEYS, ProduceSummaries

DEFAULT_INTERVAL_S = 10.0  # one record per key every 10 s: ~6 per partition and route a minute


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class SummarizingAuditSink:
    """produce_batch and metadata_lookup in, produce_summary and metadata_summary out."""

    def __init__(self, inner: AuditSink, interval_s: float = DEFAULT_INTERVAL_S, *, max_keys: int = MAX_KEYS,
                 clock_ms: Callable[[], int] = wall_clock_ms) -> None:
        self._inner = inner
        self.interval_s = interval_s
        self._clock_ms = clock_ms
        self._summaries = ProduceSummaries(max_keys)
        self._closed = False

    def emit(self, kind: str, fields: Mapping[str, Any]) -> None:
        if kind == "produce_batch":
            self._summaries.add_batch(fields, self._clock_ms())
        elif kind == "metadata_lookup":
            self._summaries.add_lookup(fields, self._clock_ms())
        else:
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
        produce, lookups = self._summaries.take(self._clock_ms())
        for record in produce:
            self._inner.emit("produce_summary", record)
        for lookup in lookups:
            self._inner.emit("metadata_summary", lookup)

    def close(self) -> None:
        """Flush, and from now on write each batch as it comes (nothing waits for a next interval)."""
        self._closed = True
        self.flush()

    async def run(self) -> None:
        """Flush every interval_s until cancelled; then close."""
        await flush_every(self.interval_s, self.flush, self.close)
