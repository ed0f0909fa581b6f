"""A connection's responses, in request order: one slot per request, filled when its answer is
ready, written strictly in request order.

Strategy: the answers are written by whoever completes them, not by a task woken for each.
When the slot at the head of the connection's queue is done (filled, finished with nothing
to send, or failed), the queue writes it and every done slot after it to the non-blocking
socket at once, in the step that completed it (the upstream reader's, or the request
reader's for an answer known at once). The connection's writer task wakes only for what that
cannot do: the rest of an answer the socket did not take, every answer on a stream that
must encrypt through trio (TLS), a failed slot (it closes the connection), and the end.
At 1 MB produce requests a writer woken per answer cost a tenth of the proxy's CPU, in trips
through trio's scheduler.

Order is unchanged: only the head slot is ever written, and nothing is written past an
answer still partly unsent. The reader queues at most `capacity` slots
(proxy.max_in_flight_per_connection) and waits for room beyond that (TCP backpressure).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable

import trio


class ResponseSlot:
    """A response-to-be: done once filled (`data`), finished with nothing to send, or failed."""

    __slots__ = ("data", "done", "broken", "mute_until", "queue")

    def __init__(self, data: bytes | None = None, *, done: bool = False) -> None:
        self.data = data  # None or b"": nothing to send
        self.done = done
        self.broken = False  # answering failed (our bug): the connection is closed
        self.mute_until = 0.0  # quota throttle: read nothing more from this connection before this trio time
        self.queue: ResponseQueue | None = None  # its connection's queue, once queued there

    def fill(self, data: bytes) -> None:
        """The answer: written now if every earlier answer is out and the socket takes it."""
        self.data = data
        self._complete()

    def finish(self) -> None:
        """Done with nothing to send (acks=0)."""
        self._complete()

    def fail(self) -> None:
        """Answering failed (our bug, logged where it happened): its connection is closed once
        the answers before it are out."""
        self.broken = True
        self._complete()

    def _complete(self) -> None:
        self.done = True
        if self.queue is not None:
            self.queue.slot_done(self)


def ready_slot(data: bytes | None) -> ResponseSlot:
    """A slot answered already (`data` None: nothing to send)."""
    return ResponseSlot(data, done=True)


class ResponseQueue:
    """One connection's slots in request order, written as they become done (module docstring).

    `fd`: the plain TCP socket's descriptor (None: a TLS stream, every answer is sent by the
    writer task). `on_answered`: called once per slot taken off the queue (the connection's
    bookkeeping: outstanding requests, activity).
    """

    def __init__(self, fd: int | None, capacity: int, on_answered: Callable[[], None]) -> None:
        self.fd = fd
        self.capacity = capacity
        self._on_answered = on_answered
        self._slots: deque[ResponseSlot] = deque()
        self._unsent: bytes | memoryview | None = None  # an answer's rest, for the writer task to send
        self._failed = False  # a failed slot reached the head: the writer closes the connection
        self._closed = False  # no more slots will come
        self._writer_wake = trio.Event()
        self._room = trio.Event()

    def __len__(self) -> int:
        return len(self._slots)

    async def put(self, slot: ResponseSlot) -> None:
        """Queue `slot` (the request reader, in request order); waits while `capacity` slots are
        queued, yielding there: one connection reads at most that many requests per turn of
        the event loop."""
        while len(self._slots) >= self.capacity:
            if self._room.is_set():
                self._room = trio.Event()
            await self._room.wait()
        slot.queue = self
        self._slots.append(slot)
        if slot.done and len(self._slots) == 1:
            self._advance()

    def close(self) -> None:
        """No more slots: the writer task returns once the queued ones are out."""
        self._closed = True
        self._writer_wake.set()

    def slot_done(self, slot: ResponseSlot) -> None:
        if self._slots and self._slots[0] is slot:
            self._advance()

    def _advance(self) -> None:
        """Write the done slots at the head, in order, while the socket takes them whole."""
        if self._unsent is not None or self._failed:
            return  # the writer task owns the head until it has sent the rest or closed
        slots = self._slots
        taken = False
        while slots and slots[0].done:
            slot = slots[0]
            if slot.broken:
                self._failed = True
                self._writer_wake.set()
                break
            slots.popleft()
            taken = True
            self._on_answered()
            data = slot.data
            if data:
                rest = self._write_now(data)
                if rest:
                    self._unsent = rest
                    self._writer_wake.set()
                    break
        if taken:
            self._room.set()
            if self._closed and not slots:
                self._writer_wake.set()

    def _write_now(self, data: bytes) -> bytes | memoryview:
        """Write what the non-blocking socket takes now; the rest (all of it on TLS)."""
        if self.fd is None:
            return data
        try:
            written = os.write(self.fd, data)
        except OSError:  # BlockingIOError: no room; any other error: the writer task meets it and closes
            return data
        return memoryview(data)[written:] if written < len(data) else b""

    async def run_writer(self, stream: trio.abc.Stream, connection_scope: trio.CancelScope,
                         on_broken: Callable[[], None]) -> None:
        """The connection's writer task: sends what the socket did not take, closes the
        connection (`connection_scope`) after a failed slot (`on_broken` counts it) or when
        the client is gone; returns once closed and every slot is out."""
        while True:
            if self._unsent is not None:
                try:  # _unsent stays set meanwhile: no answer may be written past this one's rest
                    await stream.send_all(self._unsent)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    connection_scope.cancel()  # client vanished: drop the rest of its work
                    return
                self._unsent = None
                self._advance()
                continue
            if self._failed:
                on_broken()
                connection_scope.cancel()  # the failure is logged where it happened
                return
            if self._closed and not self._slots:
                return
            await self._writer_wake.wait()
            self._writer_wake = trio.Event()
