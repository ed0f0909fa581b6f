"""Request buffers used again once nothing refers to them (sans-IO).

Strategy: a large request frame is received into a buffer of its own (kafka_codec.py), and a
new bytearray is zero-filled by Python before the first byte lands in it: at 1 MB produce
requests that `memset` was ~5 % of a busy proxy's CPU. The codecs of one process share a
pool of the last few such buffers. A buffer is handed out again only when the pool's own
references are its only ones (`sys.getrefcount`): every frame, batch or memoryview still in
use (a request in flight, an answer not yet settled, bytes queued for a socket) refers to
it, directly or through a memoryview's managed buffer, so a buffer anything can still read
is never written. No zeroing is needed: a frame is handed on only once its bytes are all
received.

Memory: at most MAX_BUFFERS buffers, each under MAPPED_FRAME_MIN_BYTES (2 MiB; larger
frames get a memory mapping that goes back to the OS when dropped), so the pool keeps at
most 16 MiB that would otherwise sit free in the allocator's heap (the long-running
processes keep up to 16 MiB of free heap untrimmed anyway: azsidecar/runtime.py).
"""

from __future__ import annotations

import sys

MAX_BUFFERS = 8
MAX_BUFFER_BYTES = 2 * 1024 * 1024
# sys.getrefcount(buf) for a buffer only the pool holds: the pool's list, the local name
# the scan binds, and getrefcount's own argument.
_ONLY_THE_POOL = 3


class FramePool:
    """The last MAX_BUFFERS frame buffers offered; `take` returns one nothing else refers to."""

    def __init__(self, max_buffers: int = MAX_BUFFERS) -> None:
        self._buffers: list[bytearray] = []
        self._max_buffers = max_buffers
        self.reused = 0  # buffers handed out again (tests, benchmarks)

    def __len__(self) -> int:
        return len(self._buffers)

    def take(self, size: int) -> bytearray | None:
        """A buffer of at least `size` bytes, with old bytes in it, that nothing else refers
        to; None when there is none."""
        buffers = self._buffers
        for i in range(len(buffers)):
            buf = buffers[i]
            if len(buf) >= size and sys.getrefcount(buf) == _ONLY_THE_POOL:
                self.reused += 1
                return buf
        return None

    def offer(self, buf: bytearray) -> None:
        """Keep `buf` (still in use, most likely) for a later `take`; the oldest kept goes."""
        if len(buf) >= MAX_BUFFER_BYTES or type(buf) is not bytearray:
            return
        buffers = self._buffers
        buffers.append(buf)
        if len(buffers) > self._max_buffers:
            del buffers[0]
