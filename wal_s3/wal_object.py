"""A WAL object from its first entry to its release, without I/O: the entries it holds by
zone and share, their layout and the object's S3 metadata, the outcome each entry's
producer learns (`PendingEntry`, `WalPlacement`), and the order objects are released in.

The writer (wal_s3/writer.py) fills one `ObjectInProgress` at a time, seals it, encodes and
PUTs it; `ReleaseQueue` then releases finished objects strictly in sequence order, so a
caller that acts on placements in the order they return keeps each partition's order across
objects.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import trio

from wal_s3.agent_shares import encode_share_entries, share_runs
from wal_s3.errors import WalFencedError, WalWriteError  # noqa: F401 - raised here, imported from here by callers
from wal_s3.format import WalEntry, ZoneShare
from wal_s3.object_keys import OBJECT_KEY_RE, object_key  # noqa: F401 - imported from here by callers

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FlushedObject:
    """A durable WAL object: the proxy sends one notification per (object, zone)."""

    key: str
    writer_id: str
    epoch: int
    sequence: int
    zones: Mapping[str, ZoneShare]
    bytes: int
    reason: str
    # time.perf_counter() when the object was sealed: an entry waited from its append until
    # then for the flush trigger (linger or size); the latency audit splits on it.
    sealed_at: float = 0.0
    # zone -> (agent index, first entry, end entry) of each agent's run, for zones with several
    # agents: who owns an entry was decided when it was written (it may follow its leader).
    share_runs: Mapping[str, tuple[tuple[int, int, int], ...]] = field(default_factory=dict)


class WalPlacement(NamedTuple):
    """Where an appended entry landed. entry_offset/entry_length cover its raw batch bytes.

    A NamedTuple (one per append; see WalEntry for why not a frozen dataclass).
    """

    key: str
    dest_zone: str
    zone_offset: int
    zone_length: int
    entry_offset: int
    entry_length: int
    entry_index_in_zone: int
    flushed: FlushedObject


class ObjectInProgress:
    """An object being filled, then PUT; its waiters wait on `done`, its PendingEntries'
    callbacks run when it is released."""

    def __init__(self, opened_at: float, due_at: float) -> None:
        self.opened_at = opened_at
        self.due_at = due_at  # sealed for "linger" at this trio time: the earliest entry's linger_due
        # zone -> share name -> entries in arrival order (one share per zone unless the zone
        # has several agents: wal_s3/agent_shares.py); laid out share after share at encode.
        self.shares: dict[str, dict[str, list[WalEntry]]] = {}
        self.entries_by_zone: dict[str, list[WalEntry]] = {}  # the layout, filled by lay_out()
        self.share_start: dict[tuple[str, str], int] = {}  # (zone, share) -> its first entry's index in the zone
        self.share_names: list[str] = []  # the object's `zones` metadata: what GC waits for
        self.share_counts: list[int] = []  # entries of each share, in share_names order
        # zone -> (agent index, first entry, end entry) per share, for zones with several
        self.share_runs: dict[str, tuple[tuple[int, int, int], ...]] = {}
        self.nbytes = 0
        self.count = 0
        self.sequence = -1
        self.reason = ""
        self.sealed_at = 0.0  # time.perf_counter()
        self.done = trio.Event()
        self.result: FlushedObject | None = None
        self.error: WalWriteError | None = None
        self.callbacks: list[tuple[PendingEntry, DoneCallback]] = []

    def lay_out(self) -> None:
        """Each zone's entries share after share (share names sorted), so each agent's are
        one contiguous run; per-partition order is kept (a partition has one share)."""
        for zone, by_share in self.shares.items():
            if len(by_share) == 1:
                [(name, entries)] = by_share.items()
                self.entries_by_zone[zone] = entries
                self.share_start[(zone, name)] = 0
                self.share_names.append(name)
                self.share_counts.append(len(entries))
                if name != zone:  # one agent's share of a several-agent zone
                    self.share_runs[zone] = share_runs((name,), (len(entries),))
                continue
            flat: list[WalEntry] = []
            names = sorted(by_share)
            for name in names:
                self.share_start[(zone, name)] = len(flat)
                self.share_names.append(name)
                self.share_counts.append(len(by_share[name]))
                flat.extend(by_share[name])
            self.entries_by_zone[zone] = flat
            self.share_runs[zone] = share_runs(names, [len(by_share[n]) for n in names])

    def metadata(self) -> dict[str, str]:
        """The object's S3 user metadata: its share names (GC) and, when a zone has several
        agents, each share's entry count (a restarted proxy's recovery)."""
        meta = {"zones": ",".join(self.share_names)}
        if self.share_runs:
            meta["share-entries"] = encode_share_entries(self.share_counts)
        return meta

    def complete(self, result: FlushedObject | None, error: WalWriteError | None) -> None:
        """Record the outcome (first one wins); waiters wake when the object is released."""
        if self.result is None and self.error is None:
            self.result, self.error = result, error

    def release(self) -> None:
        """Wake the waiters and run the done callbacks (the outcome is recorded by now)."""
        self.done.set()
        callbacks, self.callbacks = self.callbacks, []
        for pending, callback in callbacks:
            try:
                callback(*pending.outcome())
            except Exception:  # a caller's bug must not stop the writer releasing other objects
                log.exception("a WAL entry's done callback failed")


DoneCallback = Callable[["WalPlacement | None", "WalWriteError | None"], None]


class PendingEntry:
    """An entry in an object not yet released. `add_done_callback(fn)`: fn(placement, None)
    once the object is durable and released in sequence order, or fn(None, error)."""

    __slots__ = ("_obj", "_index", "_zone", "_share")

    def __init__(self, obj: ObjectInProgress, index: int, zone: str, share: str) -> None:
        self._obj, self._index, self._zone, self._share = obj, index, zone, share

    def add_done_callback(self, callback: DoneCallback) -> None:
        """Run `callback` when the object is released (at once if it already was)."""
        if self._obj.done.is_set():
            callback(*self.outcome())
        else:
            self._obj.callbacks.append((self, callback))

    async def placement(self) -> WalPlacement:
        """Wait for the object's release; raises its WalWriteError (or WalFencedError)."""
        await self._obj.done.wait()
        placement, error = self.outcome()
        if error is not None:
            raise error
        assert placement is not None
        return placement

    def outcome(self) -> tuple[WalPlacement | None, WalWriteError | None]:
        obj = self._obj
        if obj.error is not None:
            return None, obj.error
        assert obj.result is not None, "a released object has a result or an error"
        share = obj.result.zones[self._zone]
        index = obj.share_start[(self._zone, self._share)] + self._index
        ref = share.entries[index]
        return WalPlacement(obj.result.key, self._zone, share.offset, share.length, ref.offset, ref.length,
                            index, obj.result), None




class ReleaseQueue:
    """Sealed objects not yet released, by sequence number: each is released once it and
    every object before it has an outcome (durable or failed)."""

    def __init__(self) -> None:
        self._unreleased: dict[int, ObjectInProgress] = {}
        self._next = 0

    def sealed(self, obj: ObjectInProgress) -> None:
        self._unreleased[obj.sequence] = obj

    def ready(self) -> Iterator[ObjectInProgress]:
        """The objects releasable now, in sequence order, each taken off the queue."""
        while True:
            obj = self._unreleased.get(self._next)
            if obj is None or (obj.result is None and obj.error is None):
                return
            del self._unreleased[self._next]
            self._next += 1
            yield obj

    def take_all(self) -> list[ObjectInProgress]:
        """Every object not released, taken off the queue (the writer stopped)."""
        taken = list(self._unreleased.values())
        self._unreleased.clear()
        return taken
