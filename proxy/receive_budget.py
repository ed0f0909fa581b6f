"""A process-wide bound on the bytes the listener holds for requests still arriving (trio).

Strategy: each connection's codec reports what it holds (`ServerCodec.held_bytes`: chunks
received, and the room a large frame's buffer has grown to); the budget sums them. A large
frame's buffer grows only within the room left; a chunk read is counted once its bytes
arrived, so the bound is soft by one read (256 KiB) per connection reading at that moment.
When less than a minimum is left, connections stop reading: TCP backpressure reaches their
clients instead of memory growing.

Progress: if every holder waited for room only the others could free, no request would
ever complete. So one connection with a request half received may overdraw (the overdraft
is held by one connection at a time, until that request is complete): it finishes its
request, which frees its bytes for the others. The total is thus at most the budget plus
one frame. A client that takes the overdraft and stops sending is closed by its request
deadline (proxy.request_receive_timeout_s), which hands the overdraft on.
"""

from __future__ import annotations

import trio

from proxy import metrics


class ReceiveBudget:
    """Bytes held by all connections' codecs, at most `max_bytes` (see the module docstring)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.used = 0
        self.overdraft_holder: object | None = None
        self._freed = trio.Event()
        self._waiting = 0  # tasks in wait_for_room: freed bytes wake them, and only then cost an event
        # Read when scraped, not set per request (a gauge update per add was ~1 % of a busy proxy).
        metrics.RECEIVE_BUFFERED_BYTES.set_function(lambda: self.used)

    @property
    def room(self) -> int:
        return max(0, self.max_bytes - self.used)

    async def wait_for_room(self, at_least: int, owner: object | None = None) -> bool:
        """Return once `at_least` bytes are free, or at once if `owner` (a connection with a
        request half received) holds or takes the overdraft; True when reading on overdraft."""
        if self.room >= at_least and self.overdraft_holder is not owner:
            return False
        counted = False
        while True:
            if owner is not None and self.overdraft_holder in (None, owner):
                self.overdraft_holder = owner
                return True
            if self.room >= at_least:
                return False
            if not counted:
                metrics.RECEIVE_BUDGET_WAITS.inc()
                counted = True
            self._waiting += 1
            try:
                await self._freed.wait()
            finally:
                self._waiting -= 1

    def end_overdraft(self, owner: object) -> None:
        """`owner`'s request is complete (or its connection closed): the overdraft is free again."""
        if self.overdraft_holder is owner:
            self.overdraft_holder = None
            self._wake()

    def add(self, delta: int) -> None:
        """Count `delta` more bytes held (negative: freed, which wakes waiting readers)."""
        if not delta:
            return
        self.used += delta
        if delta < 0 and self._waiting:
            self._wake()

    def _wake(self) -> None:
        if not self._waiting:
            return
        self._freed.set()
        self._freed = trio.Event()
