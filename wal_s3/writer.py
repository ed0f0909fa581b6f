"""The batching WAL writer: entries in, durable S3 objects out. What an object holds, its
layout and the order objects are released in are wal_s3/wal_object.py's (no I/O); this
module fills, seals, encodes and PUTs.

Strategy: appends go into one open object, grouped by destination zone. The object is
sealed when its entries reach `max_bytes` (reason "size"), when its oldest entry is
`linger_ms` old ("linger"), when its requests cost at most `max_request_cost_share` of the
transfer it replaces ("cost", wal_s3/flush_policy.py), or when the writer closes ("shutdown"). Sealing assigns the
next sequence number; a task in the writer's nursery encodes the object and PUTs it with
`If-None-Match: *` (at most `max_in_flight_puts` at once), retrying retriable failures
with full-jitter backoff. `append` returns once the object holding its entry is durable;
`buffer` returns as soon as the entry is in the open object, with a PendingEntry whose done
callbacks run (synchronously, in the releasing task) when the object is released, so a
caller learns of durability without a task of its own waiting for it.
Objects complete in sequence order: the waiters of object N are released only after every
object before N is durable or failed, so a caller that acts on placements in the order
they return keeps each partition's order across objects.

Memory is bounded: appended-but-not-durable bytes never exceed `max_buffered_bytes`;
beyond that `append` waits (backpressure reaches the producer).

Fencing: before writing, the writer takes an epoch by conditionally PUTting a marker
`<prefix><epoch_prefix>/<writer_id>/<epoch>`; only one writer can win an epoch, and keys
carry the epoch, so two writers with the same id never write the same key. A writer that
sees a newer epoch marker (checked every `epoch_check_interval_s`), or whose data PUT
collides on its first attempt, is fenced: it fails every waiting entry and stops.

Ambiguous PUTs: if an attempt's response is lost (timeout, reset) the PUT may have landed;
the retry then gets 412. Because no one else can write our keys, a 412 on a retry is
checked by reading the object back and comparing bytes: equal means it was ours.

Gray S3 (it hangs instead of refusing): a PUT attempt slower than the deadline derived from
recent PUTs (wal_s3/latency.py: 3 x p99 of the last minute, at least wal.gray_floor_s, at
most wal.gray_max_s, each per unit of work: 1 per PUT plus 1 per wal.gray_unit_bytes) is
abandoned and reported at once through `on_gray_put` (the router's breakers count it);
it is retried once, and while S3 stays gray only one probe PUT is out at a time and every
other object fails at once (retriably), so the router can fall back within seconds. The
abandoned PUT may still land: like a PUT whose answer was lost, that object then stays
unannounced, and GC deletes it as an orphan.
"""

from __future__ import annotations

import collections
import functools
import json
import logging
import random
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager

import trio

from core.audit import AuditSink
from core.prices import Prices
from wal_s3 import metrics
from wal_s3._s3_http import http_transport
from wal_s3.billing import S3RequestTally
from wal_s3.config import WalConfig
from wal_s3.errors import WalFencedError, WalWriteError
from wal_s3.flush_policy import cost_seal_bytes, linger_due, seal_reason
from wal_s3.format import (
    MAX_HEADER_BYTES,
    TRAILER_BYTES,
    EncodedObject,
    WalEntry,
    encode_object,
    entry_encoded_size,
    reuse_capacity,
)
from wal_s3.latency import LatencyGuard, request_units
from wal_s3.object_keys import EPOCH_DIGITS, NAME_RE, OBJECT_KEY_RE, object_key  # noqa: F401 - OBJECT_KEY_RE: imported from here by callers
from wal_s3.retry import RetryArgs, with_retries
from wal_s3.s3 import S3Client, S3Error, S3GrayError, S3PreconditionFailed, S3Store
from wal_s3.wal_object import (  # noqa: F401 - FlushedObject, WalPlacement: imported from here by callers
    FlushedObject,
    ObjectInProgress,
    PendingEntry,
    ReleaseQueue,
    WalPlacement,
)

log = logging.getLogger(__name__)

MAX_EPOCH_RACES = 8  # concurrent starts of the same writer id that lose the marker race
# Objects up to this size are encoded on the event loop: that takes ~0.1 ms, less than a
# worker-thread round trip, and pure-Python encoding holds the GIL in a thread anyway.
# Larger ones go to a thread so the CRCs of big batches do not stall the loop.
INLINE_ENCODE_MAX_BYTES = 64 * 1024
# trio sleeps in epoll, whose timeout is whole milliseconds rounded up: a loop that waited
# for exactly opened_at + linger woke up to 1 ms late, so entries waited linger + a tick.
# An object is due within this much of its linger, so it waits at most linger_ms.
LINGER_TIMER_SLACK_S = 0.001



def take_reusable(spares: list[bytearray]) -> bytearray | None:
    """Pop a spare buffer nothing else has a view of; drop those still viewed. None if none.

    A PUT abandoned at its gray deadline (S3 hangs) can leave a memoryview of its body alive
    for a while (the cancelled send's frames). Writing the next object into that buffer
    would resize it under the view (BufferError, which stopped the writer) or change bytes
    an abandoned request may still be sending. A bytearray refuses any resize while a view
    exists, which is the check: append one byte and take it off again.
    """
    while spares:
        buffer = spares.pop()
        try:
            buffer.append(0)
        except BufferError:
            continue  # still viewed: let it go; the garbage collector frees it with the view
        del buffer[-1]
        return buffer
    return None

def epoch_marker_prefix(config: WalConfig, writer_id: str) -> str:
    return f"{config.prefix}{config.epoch_prefix}/{writer_id}/"


class _SpaceWaiter:
    """An append waiting for room; `granted` means its bytes are already counted."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.granted = False
        self.event = trio.Event()


class _Collision(Exception):
    """A conditional PUT found the key taken by someone else."""


class WalWriter:
    """Batching WAL writer for one proxy. Run it with `running()` or `nursery.start(run)`."""

    def __init__(self, config: WalConfig, zone: str, writer_id: str, s3_client: S3Client, audit: AuditSink, *,
                 limiter: trio.CapacityLimiter | None = None, rng: random.Random | None = None,
                 prices: Prices | None = None, epoch: int | None = None,
                 on_released: Callable[[FlushedObject], None] | None = None,
                 share_of: Callable[[str, str, int], str] | None = None,
                 on_gray_put: Callable[[tuple[str, ...]], None] | None = None) -> None:
        """`epoch`: one won beforehand (`win_epoch`); None: `run` registers one.
        The hooks, called synchronously: `on_released(object)` with each durable object, in
        sequence order (the router announces it to the agents); `share_of(zone, topic,
        partition)` -> share name, for zones with several agents (None: one share per zone);
        `on_gray_put(zones of the object)` for each PUT attempt abandoned at its gray
        deadline (the router's circuits count it at once)."""
        if not NAME_RE.match(zone) or not NAME_RE.match(writer_id):
            raise ValueError(f"zone {zone!r} and writer_id {writer_id!r} must match {NAME_RE.pattern}")
        self.config = config
        self.zone = zone
        self.writer_id = writer_id
        self.audit = audit
        self.epoch: int | None = epoch
        self.bucket = config.bucket_for(zone)  # express: this zone's directory bucket
        self._prices = prices or Prices()
        self._seal_bytes: dict[int, float] = {}  # cost-bound object size by number of zones
        self._store = S3Store(s3_client, self.bucket, limiter or trio.CapacityLimiter(config.max_s3_threads),
                              http=http_transport(s3_client, config, self.bucket))
        self._put_limiter = trio.CapacityLimiter(config.max_in_flight_puts)
        self._rng = rng or random.Random()
        self._state = "new"  # new -> running -> closing -> closed, or -> fenced
        self._fence_error: WalFencedError | None = None
        self._open: ObjectInProgress | None = None
        self._sealed: collections.deque[ObjectInProgress] = collections.deque()
        self._release = ReleaseQueue()  # sealed objects whose waiters are not released
        self._puts_running = 0  # PUT tasks started and not finished (waiting for a slot or PUTting)
        self._next_sequence = 0
        self.buffered_bytes = 0
        self._buffered_reported = 0  # what the process-wide gauge holds for this writer
        self._valid_zones: set[str] = set()
        self._space_waiters: collections.deque[_SpaceWaiter] = collections.deque()
        self._wakeup = trio.Event()
        self._next_epoch_check = 0.0
        self._epoch_check_running = False
        # Buffers of finished objects, reused by the next encodes (_recycle says why).
        self._spare_buffers: list[bytearray] = []
        self.on_released = on_released
        self.share_of = share_of
        # Gray S3: PUT attempts slower than recent ones are abandoned (on_gray_put).
        self.put_guard = LatencyGuard(floor_s=config.gray_floor_s, ceiling_s=config.request_timeout_s,
                                      factor=config.gray_factor, max_deadline_s=config.gray_max_s)
        self.on_gray_put = on_gray_put

    # ---- lifecycle -------------------------------------------------------------------

    @asynccontextmanager
    async def running(self) -> AsyncIterator[WalWriter]:
        """Register an epoch, run the flush loop; on exit flush what is buffered and wait for it."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.run)
            try:
                yield self
            finally:
                self.close()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Flush loop. Returns after close() once every sealed object is done.

        Raises WalWriteError if the epoch cannot be registered, WalFencedError if fenced.
        """
        if self.epoch is None:
            await self.register_epoch()
        if self._state == "new":  # close() before run() leaves "closing": flush nothing, return
            self._state = "running"
        self._next_epoch_check = trio.current_time() + self.config.epoch_check_interval_s
        try:
            async with trio.open_nursery() as nursery:
                task_status.started()
                await self._flush_loop(nursery)
        finally:
            if self._state != "fenced":
                self._state = "closed"
            self._fail_all(WalWriteError(f"WAL writer {self.writer_id} stopped", retriable=True))
            with trio.CancelScope(shield=True):
                await self._store.aclose()
        if self._fence_error is not None:
            raise self._fence_error

    def close(self) -> None:
        """Stop accepting appends; the loop flushes the open object and run() returns."""
        if self._state in ("new", "running"):
            self._state = "closing"
        self._wakeup.set()

    @classmethod
    async def win_epoch(cls, config: WalConfig, zone: str, writer_id: str, s3_client: S3Client,
                        audit: AuditSink) -> int:
        """Win a fresh epoch for `writer_id` before its writer is built (the notification sender
        stamps it on every notification, and the writer's hooks reach the sender). Raises as
        `register_epoch`."""
        return await cls(config, zone, writer_id, s3_client, audit).register_epoch()

    async def register_epoch(self) -> int:
        """Win a fresh epoch with a conditional PUT of a marker; returns it.

        Raises WalWriteError (retriable) on S3 failure, WalFencedError after MAX_EPOCH_RACES lost races.
        """
        prefix = epoch_marker_prefix(self.config, self.writer_id)
        tally = S3RequestTally()  # billed as s3_request records (purpose epoch)
        try:
            for _ in range(MAX_EPOCH_RACES):
                candidate = max(await self._list_epochs(tally), default=0) + 1
                body = json.dumps({"writer_id": self.writer_id, "zone": self.zone, "epoch": candidate,
                                   "created_ms": int(time.time() * 1000), "nonce": uuid.uuid4().hex}).encode()
                attempts = [0]
                try:
                    await self._put_conditional(f"{prefix}{candidate:0{EPOCH_DIGITS}d}", body, None, attempts)
                except _Collision:
                    continue
                finally:
                    tally.add("PUT", attempts[0])
                self.epoch = candidate
                log.info("WAL writer %s registered epoch %d", self.writer_id, candidate)
                return candidate
        except S3Error as exc:
            raise WalWriteError(f"registering an epoch for {self.writer_id}: {exc}", retriable=True) from exc
        finally:
            tally.emit(self.audit, "epoch")
        raise WalFencedError(f"{self.writer_id}: lost the epoch marker race {MAX_EPOCH_RACES} times")

    async def _list_epochs(self, tally: S3RequestTally) -> list[int]:
        prefix = epoch_marker_prefix(self.config, self.writer_id)
        listed = await with_retries(tally.each_attempt("LIST", lambda _n: self._store.list_objects(prefix)),
                                    **self._retry_args())
        tally.listed(len(listed))
        return [int(o.key[len(prefix):]) for o in listed
                if len(o.key) == len(prefix) + EPOCH_DIGITS and o.key[len(prefix):].isdigit()]

    def _retry_args(self) -> RetryArgs:
        return {"max_attempts": self.config.max_attempts, "base_ms": self.config.retry_base_ms,
                "max_ms": self.config.retry_max_ms, "rng": self._rng}

    # ---- appending -------------------------------------------------------------------

    async def append(self, entry: WalEntry, dest_zone: str, *,
                     task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> WalPlacement:
        """Buffer entry for dest_zone; return once the object holding it is durable in S3.

        `task_status.started()` is called the moment the entry is in the open object, so a
        caller can `await nursery.start(...)` to keep its own order of appends.
        Waits while `max_buffered_bytes` are buffered. Cancelling the wait does not withdraw
        the entry. Raises WalWriteError (retriable) if the object could not be written or the
        writer is not running, WalFencedError if the writer is fenced, ValueError if the
        entry alone exceeds max_buffered_bytes or dest_zone is not a valid name.
        """
        pending = await self.buffer(entry, dest_zone)
        task_status.started()
        return await pending.placement()

    async def buffer(self, entry: WalEntry, dest_zone: str, waited_s: float = 0.0) -> PendingEntry:
        """Put entry for dest_zone into the open object and return its PendingEntry.

        `waited_s`: how long the entry's oldest record had already waited in its producer
        (flush_policy.producer_wait_s); the linger is counted from then.

        Returns without a checkpoint when there is room; otherwise waits first-come
        first-served while `max_buffered_bytes` are buffered (backpressure). Raises like
        `append` (except for the object's own outcome, which the PendingEntry reports).
        """
        if dest_zone not in self._valid_zones:
            if not NAME_RE.match(dest_zone):
                raise ValueError(f"dest_zone {dest_zone!r} must match {NAME_RE.pattern}")
            self._valid_zones.add(dest_zone)
        size = entry_encoded_size(entry)
        if size > self.config.max_buffered_bytes:
            raise ValueError(f"entry of {size} bytes exceeds wal.max_buffered_bytes={self.config.max_buffered_bytes}")
        self._check_accepting()
        await self._reserve(size)
        if self._open is not None and self._open.nbytes + size > self.config.max_bytes:
            self._seal("size")  # keep objects at or under max_bytes unless one entry is larger
        now = trio.current_time()
        linger_ms = self.config.linger_ms
        assert linger_ms is not None  # WalConfig.__post_init__ resolved an unset one
        due = linger_due(now, linger_ms / 1000.0, waited_s)
        if self._open is None:
            self._open = ObjectInProgress(now, due)
            self._wakeup.set()  # the loop starts this object's linger timer
        elif due < self._open.due_at:
            self._open.due_at = due
            self._wakeup.set()  # the loop moves the timer earlier
        obj = self._open
        share = dest_zone if self.share_of is None else self.share_of(dest_zone, entry.topic, entry.partition)
        zone_shares = obj.shares.get(dest_zone)
        if zone_shares is None:  # not setdefault: that builds a throwaway dict per append
            zone_shares = obj.shares[dest_zone] = {}
        zone_entries = zone_shares.get(share)
        if zone_entries is None:
            zone_entries = zone_shares[share] = []
        index = len(zone_entries)
        zone_entries.append(entry)
        obj.nbytes += size
        obj.count += 1
        # age 0: linger is the flush loop's (it also waits for a free PUT slot)
        # each share (a zone's, or with several agents in a zone each owner's) is one GET and one checkpoint
        shares = sum(len(by_share) for by_share in obj.shares.values())
        reason = seal_reason(obj.nbytes, 0.0, max_bytes=self.config.max_bytes, linger_s=float("inf"),
                             cost_bound_bytes=self._cost_seal_bytes(shares))
        if reason is not None:
            self._seal(reason)
        return PendingEntry(obj, index, dest_zone, share)

    def _cost_seal_bytes(self, zones: int) -> float:
        bound = self._seal_bytes.get(zones)
        if bound is None:
            bound = self._seal_bytes[zones] = cost_seal_bytes(
                zones, self.config.max_request_cost_share, self._prices.store(self.config.storage_class),
                self._prices.cross_az_per_gb_each_way)
        return bound

    async def _reserve(self, size: int) -> None:
        """Count size into buffered_bytes, waiting first-come first-served for room.

        Raises like _check_accepting if the writer stops accepting while we wait; a
        cancelled waiter gives back room it was already granted.
        """
        if not self._space_waiters and self.buffered_bytes + size <= self.config.max_buffered_bytes:
            self._add_buffered(size)
            return
        waiter = _SpaceWaiter(size)
        self._space_waiters.append(waiter)
        self._grant_space()
        try:
            await waiter.event.wait()
        except BaseException:
            if waiter.granted:
                self._release_space(size)
            else:
                self._space_waiters.remove(waiter)
            raise
        if not waiter.granted:  # woken by _fail_all: the writer stopped
            self._check_accepting()
            raise WalWriteError(f"WAL writer {self.writer_id} stopped while waiting for buffer space")
        try:
            self._check_accepting()
        except WalWriteError:
            self._release_space(size)
            raise

    def _add_buffered(self, size: int) -> None:
        self.buffered_bytes += size  # the gauge follows at seal and PUT end (a per-append lock costs ~10 %)

    def _report_buffered(self) -> None:
        metrics.BUFFERED_BYTES.inc(self.buffered_bytes - self._buffered_reported)
        self._buffered_reported = self.buffered_bytes

    def _release_space(self, size: int) -> None:
        self.buffered_bytes -= size
        self._report_buffered()
        self._grant_space()

    def _grant_space(self) -> None:
        """Wake waiting appenders in order while their entries fit (no thundering herd)."""
        while self._space_waiters:
            waiter = self._space_waiters[0]
            if self.buffered_bytes + waiter.size > self.config.max_buffered_bytes:
                if self._open is not None and self._open.nbytes == self.buffered_bytes:
                    # Only the open object holds buffered bytes, so no PUT will free space:
                    # seal it now instead of waiting for linger. Otherwise in-flight PUTs
                    # free space soon, and sealing early would only make small objects.
                    self._seal("size")
                return
            self._space_waiters.popleft()
            self._add_buffered(waiter.size)
            waiter.granted = True
            waiter.event.set()

    def _check_accepting(self) -> None:
        if self._fence_error is not None:
            raise self._fence_error
        if self._state != "running":
            raise WalWriteError(f"WAL writer {self.writer_id} is {self._state}, not running", retriable=True)

    def _seal(self, reason: str) -> None:
        obj = self._open
        if obj is None:
            return
        self._open = None
        obj.sequence = self._next_sequence
        self._next_sequence += 1
        obj.reason = reason
        obj.sealed_at = time.perf_counter()
        self._report_buffered()
        self._sealed.append(obj)
        self._release.sealed(obj)
        self._wakeup.set()

    # ---- flush loop and PUTs -----------------------------------------------------------

    async def _flush_loop(self, nursery: trio.Nursery) -> None:
        check_s = self.config.epoch_check_interval_s
        while True:
            self._wakeup = trio.Event()
            if self._state == "fenced":
                return
            now = trio.current_time()
            if self._state == "closing":
                self._seal("shutdown")
            elif (self._open is not None and now >= self._open.due_at - LINGER_TIMER_SLACK_S
                  and self._puts_running < self.config.max_in_flight_puts):
                # With every PUT slot busy a sealed object would only queue; letting the open
                # object keep filling until a slot frees costs no latency and saves PUTs.
                self._seal("linger")
            while self._sealed:
                self._puts_running += 1
                nursery.start_soon(self._put_object, self._sealed.popleft())
            if self._state == "closing":
                return
            deadline = float("inf")
            if self._open is not None and self._puts_running < self.config.max_in_flight_puts:
                deadline = self._open.due_at - LINGER_TIMER_SLACK_S  # else a finishing PUT wakes us
            if check_s > 0:
                if now >= self._next_epoch_check and not self._epoch_check_running:
                    self._epoch_check_running = True
                    nursery.start_soon(self._check_epoch)
                deadline = min(deadline, self._next_epoch_check)
            with trio.move_on_at(deadline):
                await self._wakeup.wait()

    async def check_epoch(self) -> bool:
        """List this writer id's epoch markers; fence the writer if a newer epoch exists.

        Returns True if the writer is (now) fenced. The flush loop calls this every
        epoch_check_interval_s; S3 errors are logged and leave the writer running.
        """
        tally = S3RequestTally()
        try:
            newest = max(await self._list_epochs(tally), default=0)
        except S3Error as exc:
            log.warning("WAL writer %s: epoch check failed, will retry: %s", self.writer_id, exc)
            newest = 0
        finally:
            tally.emit(self.audit, "epoch_check")
        if self.epoch is not None and newest > self.epoch and self._fence_error is None:
            self._fence(f"{self.writer_id}: epoch {self.epoch} superseded by epoch {newest}")
        return self._fence_error is not None

    async def _check_epoch(self) -> None:
        try:
            await self.check_epoch()
        finally:
            self._epoch_check_running = False
            self._next_epoch_check = trio.current_time() + self.config.epoch_check_interval_s

    def _fence(self, reason: str) -> None:
        log.error("WAL writer fenced: %s", reason)
        self._fence_error = WalFencedError(reason)
        self._state = "fenced"
        self._fail_all(self._fence_error)
        self._wakeup.set()

    def _fail_all(self, error: WalWriteError) -> None:
        pending = self._release.take_all()
        never_put = list(self._sealed)
        if self._open is not None:
            pending.append(self._open)
            never_put.append(self._open)
            self._open = None
        for obj in never_put:  # in-flight objects give their bytes back when their PUT ends
            self.buffered_bytes -= obj.nbytes
        self._report_buffered()
        for obj in pending:
            # Even one whose PUT succeeded: it waits for an earlier object, so it was never
            # announced and no notification will follow; its waiters fail (retriably) too.
            obj.result, obj.error = None, error
            obj.release()
        self._sealed.clear()
        while self._space_waiters:  # they see the writer stopped and raise
            self._space_waiters.popleft().event.set()

    async def _put_conditional(self, key: str, body: bytes | bytearray | memoryview, metadata: Mapping[str, str] | None,
                               attempts: list[int] | None = None, timing: list[float] | None = None,
                               zones: tuple[str, ...] = (), body_crc32c: int | None = None) -> None:
        """PUT If-None-Match with retries; a 412 on a retry is ours if the stored bytes equal body.
        `timing` gets each PUT request's own seconds (S3Store._run). Attempts are bounded by
        the gray deadline (module docstring); `zones` are reported with a gray timeout;
        `body_crc32c` is the body's CRC-32C if known (the PUT's checksum, not computed again).

        Raises _Collision if the key holds someone else's object, S3Error when retries run out
        (S3GrayError when S3 is gray).
        """
        guard = self.put_guard
        timed_out = [False]  # the last attempt was abandoned at its deadline: the next is its hedge
        # A 16 MiB PUT takes longer than a 100 KiB one: its deadline is in proportion (latency.py, "Work").
        units = request_units(nbytes=len(body), bytes_per_unit=self.config.gray_unit_bytes)

        async def attempt(n: int) -> None:
            if attempts is not None:
                attempts[0] = n
            started = guard.start(trio.current_time(), hedge=timed_out[0], units=units)
            if started is None:
                raise S3GrayError(f"PUT {key}: not sent, S3 is not answering in time (a probe PUT is out)",
                                  retriable=False)
            deadline_s = guard.attempt_timeout_s(started.started_at, started)
            try:
                with trio.move_on_after(deadline_s) as scope:
                    await self._store.put_if_absent(key, body, metadata, body_crc32c=body_crc32c, timing=timing)
            except S3PreconditionFailed:
                guard.succeeded(started, trio.current_time())  # S3 answered
                if n > 1 and await self._store.get(key) == body:
                    return  # an earlier attempt landed; only its response was lost
                raise _Collision(key) from None
            except S3Error:
                guard.failed(started, trio.current_time(), timed_out=False)
                raise
            except BaseException:  # cancelled from outside: the attempt says nothing about S3
                guard.failed(started, trio.current_time(), timed_out=False)
                raise
            if scope.cancelled_caught:
                timed_out[0] = True
                give_up = guard.failed(started, trio.current_time(), timed_out=True)
                metrics.GRAY_TIMEOUTS.labels("put").inc()
                if self.on_gray_put is not None:
                    self.on_gray_put(zones)
                raise S3GrayError(f"PUT {key}: no answer within {deadline_s:.2f} s (gray deadline)",
                                  retriable=not give_up)
            guard.succeeded(started, trio.current_time())

        def on_retry(n: int, exc: S3Error) -> None:
            metrics.PUT_RETRIES.inc()
            log.warning("WAL PUT %s attempt %d failed, retrying: %s", key, n, exc)

        await with_retries(attempt, on_retry=on_retry, **self._retry_args())

    async def _put_object(self, obj: ObjectInProgress) -> None:
        assert self.epoch is not None, "run() registers the epoch before any PUT"
        key = object_key(self.config.prefix, self.zone, self.writer_id, self.epoch, obj.sequence)
        result: FlushedObject | None = None
        error: WalWriteError | None = None
        attempts = [0]
        nbytes = 0
        put_s = 0.0
        put_wait_s = 0.0  # sealed -> PUT slot taken: encoding and waiting for a slot
        request_s: list[float] = []
        encoded: EncodedObject | None = None
        try:
            # Encode before taking a PUT slot so slots only ever wait on S3 (costs at most one
            # encoded copy per sealed object, bounded by max_buffered_bytes).
            obj.lay_out()
            encode = functools.partial(
                encode_object, writer_id=self.writer_id, epoch=self.epoch, sequence=obj.sequence,
                created_ms=int(time.time() * 1000), entries_by_zone=obj.entries_by_zone)
            if obj.nbytes <= INLINE_ENCODE_MAX_BYTES:
                encoded = encode()
            else:
                encoded = await trio.to_thread.run_sync(functools.partial(encode, into=self._encode_buffer(obj.nbytes)))
            nbytes = len(encoded.data)
            try:
                self._put_limiter.acquire_nowait()  # no checkpoint when a slot is free: the PUT leaves now
            except trio.WouldBlock:
                await self._put_limiter.acquire()
            try:
                put_wait_s = time.perf_counter() - obj.sealed_at
                started = trio.current_time()
                try:
                    await self._put_conditional(key, encoded.data, obj.metadata(), attempts,
                                                request_s, tuple(obj.entries_by_zone), encoded.crc32c)
                    put_s = trio.current_time() - started
                    result = FlushedObject(key, self.writer_id, self.epoch, obj.sequence, encoded.zones,
                                           nbytes, obj.reason, obj.sealed_at, obj.share_runs)
                except _Collision:
                    put_s = trio.current_time() - started
                    self._fence(f"{key} already exists: another writer uses epoch {self.epoch}")
                    error = self._fence_error
                except S3Error as exc:
                    put_s = trio.current_time() - started
                    metrics.PUT_FAILURES.inc()
                    error = WalWriteError(f"PUT {key} failed after {attempts[0]} attempts: {exc}", retriable=True)
            finally:
                self._put_limiter.release()
        finally:
            self._puts_running -= 1
            if result is None and error is None:
                error = WalWriteError(f"PUT {key} abandoned: writer stopped", retriable=True)
            # Waiters and notifications first: they are the produce latency path, and what
            # follows (metrics, audit) would delay them by its run time in this same step.
            obj.complete(result, error)
            self._release_in_order()
            if self._open is not None:
                self._wakeup.set()  # a PUT slot is free: the open object may be waiting for one
            self._release_space(obj.nbytes)
            ok = result is not None
            if ok:
                metrics.FLUSH_BYTES.observe(nbytes)
                metrics.FLUSHES.labels(obj.reason).inc()
                metrics.PUT_SECONDS.observe(put_s)
            self.audit.emit("wal_flush", {
                "ts_ms": int(time.time() * 1000), "zone": self.zone,
                "writer_id": self.writer_id, "epoch": self.epoch, "sequence": obj.sequence, "key": key,
                "bytes": nbytes, "entries": obj.count, "zones": ",".join(obj.shares),
                "reason": obj.reason, "put_ms": put_s * 1000.0, "attempts": attempts[0],
                "put_requests": attempts[0], "ok": ok,
                "put_wait_ms": put_wait_s * 1000.0, "s3_request_ms": sum(request_s) * 1000.0,
            })
            if encoded is not None:
                self._recycle(encoded.data)

    def _encode_buffer(self, entry_bytes: int) -> bytearray:
        """A buffer to encode an object of `entry_bytes` of entries into: a spare long enough,
        else a new one of the length a spare for it keeps (a short spare is dropped, not grown:
        growing copies it and zeroes the new part in a temporary)."""
        needed = entry_bytes + MAX_HEADER_BYTES + TRAILER_BYTES
        spare = take_reusable(self._spare_buffers)
        if spare is not None and len(spare) >= needed:
            return spare
        return bytearray(reuse_capacity(needed))

    def _recycle(self, data: bytearray | memoryview) -> None:
        """Keep a finished object's buffer for a later encode.

        A fresh 8 MiB buffer costs ~2,000 page faults and the kernel zeroing the pages, and a
        resized one as many (format.REUSE_GROWTH_BYTES says why buffers only grow). A PUT
        abandoned at its gray deadline may still hold a view of the bytes (its cancelled
        send), so `take_reusable` checks a buffer is free before an encode writes into it. At
        most max_in_flight_puts buffers of at most one full object's reuse capacity are kept
        (objects small enough to encode on the loop neither take nor give one).
        """
        if not isinstance(data, memoryview):
            return  # encoded on the loop into a buffer of its own size
        buffer = data.obj
        try:
            data.release()  # our view; a view an abandoned PUT still holds keeps the buffer viewed
        except BufferError:  # something still reads through this very view: leave the buffer to it
            return
        if (isinstance(buffer, bytearray) and len(self._spare_buffers) < self.config.max_in_flight_puts
                and len(buffer) <= reuse_capacity(self.config.max_bytes + MAX_HEADER_BYTES + TRAILER_BYTES)):
            self._spare_buffers.append(buffer)

    def _release_in_order(self) -> None:
        """Wake waiters of finished objects in sequence order (see the module docstring)."""
        for obj in self._release.ready():
            if obj.result is not None and self.on_released is not None:
                self.on_released(obj.result)  # in sequence order: callers order notifications by it
            obj.release()
