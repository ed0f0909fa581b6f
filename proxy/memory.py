"""Giving memory back to the operating system after a burst (glibc only; elsewhere a no-op).

Freed Python objects and buffers go back to the C allocator, which keeps most of them: a
flood of connections leaves the heap fragmented by the few objects that outlive it, and
RSS stays at the flood's peak (measured: +80 MiB after 1,100 connections had closed).
glibc's malloc_trim(0) returns every free page inside the heap with madvise. The proxy
calls it when a burst is over (`should_trim`, a pure decision), at most once per interval.

Once a burst is big enough (`burst_is_big`) the proxy checks every TRIM_CHECK_INTERVAL_S
until it has trimmed, not only when a connection closes: a burst that ends within
TRIM_MIN_INTERVAL_S of the last trim is then trimmed once the interval has passed, instead
of never (no connection may close after it). Before that it does not look at all: an idle
proxy that checked twice a second for nothing woke its core for it (bench/bench_idle.py). And the burst must have been
over for QUIET_S first: the last of its connections (those draining what the kernel still
held for them) free their buffers after the count of open connections is already back,
and a trim before that left up to +54 MiB of free heap resident (docs/reliability.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from core.c_library import libc_function

TRIM_MIN_INTERVAL_S = 10.0  # a trim walks the heap (ms for hundreds of MiB): rarely, and only after a burst
BURST_CONNECTIONS = 256  # a burst: this many more connections open at once than at the last trim ...
BURST_BYTES = 32 * 1024 * 1024  # ... or this many bytes held for requests still arriving
QUIET_S = 1.0  # a burst must have been over this long before its trim
TRIM_CHECK_INTERVAL_S = 0.5  # how often the proxy asks should_trim after a big burst


@dataclass
class BurstTracker:
    """What happened since the last trim (high-water marks), and when that was."""

    last_trim_at: float = float("-inf")
    baseline_connections: int = 0  # open when the last trim ran (or at start)
    peak_connections: int = 0
    peak_held_bytes: int = 0
    over_since: float | None = None  # when the burst was last seen over (None: not over, or not seen)


def burst_over_since(burst: BurstTracker, now: float, open_connections: int, held_bytes: int) -> float | None:
    """The new `over_since`: since when the burst is over (nothing held, and open
    connections back within 1/64 of the burst above the baseline, at least 2), or None."""
    burst_size = burst.peak_connections - burst.baseline_connections
    over = held_bytes == 0 and open_connections <= burst.baseline_connections + max(2, max(burst_size, 0) // 64)
    if not over:
        return None
    return now if burst.over_since is None else burst.over_since


def burst_is_big(burst: BurstTracker) -> bool:
    """A burst worth a trim once over: BURST_CONNECTIONS more connections open at once than at
    the last trim, or BURST_BYTES held for requests still arriving."""
    burst_size = burst.peak_connections - burst.baseline_connections
    return burst_size >= BURST_CONNECTIONS or burst.peak_held_bytes >= BURST_BYTES


def should_trim(burst: BurstTracker, now: float) -> bool:
    """Trim when a burst happened (`burst_is_big`), it has been over for QUIET_S
    (`burst.over_since`), and the last trim was at least TRIM_MIN_INTERVAL_S ago."""
    quiet = burst.over_since is not None and now - burst.over_since >= QUIET_S
    return burst_is_big(burst) and quiet and now - burst.last_trim_at >= TRIM_MIN_INTERVAL_S


_TRIM = libc_function("malloc_trim")


def trim() -> bool:
    """Return free heap memory to the OS; False where the C library has no malloc_trim."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True
