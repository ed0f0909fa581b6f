"""The router's seams to the WAL writer and the zone notifiers, as protocols.

`WalPath` and `ObjectAnnouncer` (router/wal_path.py) are written against these, so unit
tests drive them with fakes and a reader sees what each callback receives. The real parts:
`wal_s3.writer.WalWriter` (a `WalSink`, whose `buffer` returns a
`wal_s3.writer.PendingEntry`; its hooks are constructor arguments, wired in
azsidecar/sidecar.py) and `leader_notify.sender.notifier.ZoneNotifier`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from leader_notify.sender.notifier import AnswerCallback
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

    async def buffer(self, entry: WalEntry, dest_zone: str, waited_s: float = 0.0) -> PendingWal:
        """Put `entry` into the open object for `dest_zone`; its linger counts from `waited_s`
        before now (what its records had waited in the producer). Raises WalWriteError."""
        ...


class ZoneAnswers(Protocol):
    """One destination agent's notifier, as the WAL path uses it."""

    def announce(self, flushed: FlushedObject, first: int = 0, end: int | None = None) -> None: ...

    def first_index(self, key: str) -> int: ...

    def on_result(self, key: str, callback: AnswerCallback) -> None: ...

    async def wait_idle(self) -> None: ...
