"""The router's seams to the WAL writer and the zone notifiers, as protocols.

`WalPath` (router/backend.py) is written against these, so unit tests drive it with fakes
and a reader sees what each callback receives. The real parts: `wal_s3.writer.WalWriter`
(a `WalSink`, whose `buffer` returns a `wal_s3.writer.PendingEntry`) and
`leader_notify.notifier.ZoneNotifier`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from leader_notify.notifier import AnswerCallback
from wal_s3.format import WalEntry
from wal_s3.writer import FlushedObject, WalPlacement

# The writer's answer for one buffered entry: (placement, None) once its object is durable
# and released in sequence order, or (None, error) if it never will be.
DurableCallback = Callable[[WalPlacement | None, Exception | None], None]


class PendingWal(Protocol):
    def add_done_callback(self, callback: DurableCallback) -> None:
        """Call `callback` when the entry's object is released or failed (at once if it was)."""
        ...


class WalSink(Protocol):
    """Where WAL-routed batches are buffered (wal_s3.writer.WalWriter)."""

    on_released: Callable[[FlushedObject], None] | None

    async def buffer(self, entry: WalEntry, dest_zone: str) -> PendingWal:
        """Put `entry` into the open object for `dest_zone`. Raises WalWriteError."""
        ...


class ZoneAnswers(Protocol):
    """One destination zone's notifier, as the WAL path uses it."""

    def announce(self, flushed: FlushedObject) -> None: ...

    def on_result(self, key: str, callback: AnswerCallback) -> None: ...

    async def wait_idle(self) -> None: ...
