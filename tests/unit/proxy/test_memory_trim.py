"""When the proxy gives memory back after a burst: proxy.memory's decisions, table-tested."""

from __future__ import annotations

import platform

import pytest

from proxy.memory import BurstTracker, burst_is_big, burst_over_since, should_trim, trim

MiB = 1024 * 1024


@pytest.mark.parametrize(("burst", "now", "open_connections", "held", "expected"), [
    # 1,024 connections over a baseline of 4; at most 4 + 1020 // 64 = 19 may be left open.
    (BurstTracker(-100.0, 4, 1024, 0), 0.0, 19, 0, 0.0),     # over from now
    (BurstTracker(-100.0, 4, 1024, 0, -3.0), 0.0, 19, 0, -3.0),  # over since before: stays
    (BurstTracker(-100.0, 4, 1024, 0, -3.0), 0.0, 20, 0, None),  # not over (again)
    (BurstTracker(-100.0, 4, 1024, 0), 0.0, 5, 4096, None),  # bytes still held for arriving requests
    (BurstTracker(-100.0, 4, 10, 64 * MiB), 0.0, 6, 0, 0.0),  # a burst of bytes: 2 above the baseline is over
    (BurstTracker(-100.0, 4, 10, 64 * MiB), 0.0, 7, 0, None),
])
def test_burst_over_since(burst, now, open_connections, held, expected):
    assert burst_over_since(burst, now, open_connections, held) == expected


@pytest.mark.parametrize(("burst", "now", "expected"), [
    (BurstTracker(-100.0, 4, 1024, 0, -1.0), 0.0, True),     # over for 1 s
    (BurstTracker(-100.0, 4, 1024, 0, -0.5), 0.0, False),    # over for only 0.5 s: its last buffers may be live
    (BurstTracker(-100.0, 4, 1024, 0, None), 0.0, False),    # not over
    (BurstTracker(-5.0, 4, 1024, 0, -2.0), 0.0, False),      # trimmed 5 s ago (at most every 10 s) ...
    (BurstTracker(-10.0, 4, 1024, 0, -7.0), 0.0, True),      # ... but trimmed once 10 s have passed
    (BurstTracker(-100.0, 4, 200, 0, -5.0), 0.0, False),     # 196 connections: no burst
    (BurstTracker(-100.0, 4, 10, 64 * MiB, -5.0), 0.0, True),  # a burst of bytes
    (BurstTracker(-100.0, 4, 10, 16 * MiB, -5.0), 0.0, False),
    (BurstTracker(), 0.0, False),                            # nothing happened since start
])
def test_should_trim(burst, now, expected):
    assert should_trim(burst, now) is expected


@pytest.mark.parametrize(("burst", "expected"), [
    (BurstTracker(-100.0, 4, 260, 0), True),         # 256 connections above the baseline
    (BurstTracker(-100.0, 4, 259, 0), False),        # 255
    (BurstTracker(-100.0, 300, 400, 0), False),      # 100 above a baseline of 300 (left open at the last trim)
    (BurstTracker(-100.0, 4, 5, 32 * MiB), True),    # 32 MiB held for arriving requests
    (BurstTracker(-100.0, 4, 5, 32 * MiB - 1), False),
    (BurstTracker(), False),                         # nothing happened since start
])
def test_burst_is_big(burst, expected):
    # The proxy's trim task sleeps until a burst is big: what it waits for.
    assert burst_is_big(burst) is expected


def test_trim_is_available_with_glibc():
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("malloc_trim is glibc's; elsewhere trim() is a no-op")
    assert trim() is True
