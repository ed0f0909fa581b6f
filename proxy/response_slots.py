"""A connection's responses, in request order: one slot per request, filled when its answer is
ready and sent by the connection's single writer task strictly in order.

Write-through: when a slot is filled while the writer task is parked waiting for exactly
that slot (plain TCP), the filler writes the answer to the socket itself, without waiting
for the writer task's next scheduler step; the writer then sends whatever the socket did
not take. Order is unchanged: only the slot the writer waits for is ever written early.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import trio


@dataclass
class ResponseSlot:
    """A response-to-be, sent by the writer when `ready` fires (`data` None = send nothing)."""

    ready: trio.Event
    data: bytes | None = None
    writer: ResponseWriter | None = None  # its connection's writer, once queued there
    broken: bool = False  # answering failed (our bug): the writer closes the connection
    mute_until: float = 0.0  # quota throttle: read nothing more from this connection before this trio time

    def fill(self, data: bytes) -> None:
        """Set the answer and mark it ready; written at once if the writer waits for this slot."""
        writer = self.writer
        if writer is not None and writer.waiting_for is self:
            data = writer.write_now(data)
        self.data = data
        self.ready.set()


class ResponseWriter:
    """What `ResponseSlot.fill` needs to write through: the socket, and the slot the
    connection's writer task is parked on (None while it sends or has nothing queued)."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd  # plain TCP only: a TLS stream must encrypt through trio
        self.waiting_for: ResponseSlot | None = None

    def write_now(self, data: bytes) -> bytes:
        """Write what the non-blocking socket takes now; returns the rest for the writer task."""
        if self.fd is None:
            return data
        try:
            written = os.write(self.fd, data)
        except BlockingIOError:
            return data
        except OSError:
            return data  # the client went away: the writer task meets the error and closes
        return data[written:]



def ready_slot(data: bytes | None) -> ResponseSlot:
    """A slot answered already (`data` None: nothing to send)."""
    slot = ResponseSlot(trio.Event(), data)
    slot.ready.set()
    return slot
