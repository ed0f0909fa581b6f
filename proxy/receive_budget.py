"""A process-wide bound on the bytes the listener holds for requests still arriving (trio).

Strategy: before each read a connection reserves room for what the read may allocate (a
chunk, or growth of a large frame's buffer) and afterwards keeps only what its codec holds
(`ServerCodec.held_bytes`), giving the rest back. When the budget is spent, a connection
waits before reading: TCP backpressure reaches its client instead of memory growing. A
connection stuck waiting with half a request is closed by its request deadline, which
frees its share (so waiting cannot deadlock for longer than proxy.request_receive_timeout_s).
"""

from __future__ import annotations

import trio

from proxy import metrics


class ReceiveBudget:
    """Bytes held by all connections' codecs, at most `max_bytes` (plus one reservation's rounding)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.used = 0
        self._freed = trio.Event()

    @property
    def room(self) -> int:
        return max(0, self.max_bytes - self.used)

    async def reserve(self, want: int, at_least: int) -> int:
        """Take min(want, room) bytes once at least `at_least` are free (waiting until then).

        Returns the bytes taken; give back what is not kept with `add(-n)`.
        """
        if self.room < at_least:
            metrics.RECEIVE_BUDGET_WAITS.inc()
            while self.room < at_least:
                await self._freed.wait()
        taken = min(want, self.room)
        self.add(taken)
        return taken

    def add(self, delta: int) -> None:
        """Count `delta` more bytes held (negative: freed, which wakes waiting readers)."""
        if not delta:
            return
        self.used += delta
        metrics.RECEIVE_BUFFERED_BYTES.set(self.used)
        if delta < 0:
            self._freed.set()
            self._freed = trio.Event()
