"""When the proxy gives memory back after a burst: proxy.memory.should_trim, table-tested."""

from __future__ import annotations

import platform

import pytest

from proxy.memory import BurstTracker, should_trim, trim

MiB = 1024 * 1024


@pytest.mark.parametrize(("burst", "now", "open_connections", "held", "expected"), [
    # 1,024 connections over a baseline of 4; at most 4 + 1020 // 64 = 19 may be left open.
    (BurstTracker(-100.0, 4, 1024, 0), 0.0, 19, 0, True),
    (BurstTracker(-100.0, 4, 1024, 0), 0.0, 20, 0, False),   # the burst is not over yet
    (BurstTracker(-100.0, 4, 1024, 0), 0.0, 5, 4096, False),  # bytes still held for arriving requests
    (BurstTracker(-5.0, 4, 1024, 0), 0.0, 5, 0, False),      # trimmed 5 s ago (at most every 10 s)
    (BurstTracker(-100.0, 4, 200, 0), 0.0, 4, 0, False),     # 196 connections: no burst
    (BurstTracker(-100.0, 4, 10, 64 * MiB), 0.0, 6, 0, True),  # a burst of bytes: 2 above the baseline is over
    (BurstTracker(-100.0, 4, 10, 64 * MiB), 0.0, 7, 0, False),
    (BurstTracker(-100.0, 4, 10, 16 * MiB), 0.0, 4, 0, False),
    (BurstTracker(), 0.0, 0, 0, False),                      # nothing happened since start
])
def test_should_trim(burst, now, open_connections, held, expected):
    assert should_trim(burst, now, open_connections, held) is expected


def test_trim_is_available_with_glibc():
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("malloc_trim is glibc's; elsewhere trim() is a no-op")
    assert trim() is True
