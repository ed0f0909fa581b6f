"""The listener's limit decisions and the log rate limit, table-tested (imports only proxy.limits)."""

from __future__ import annotations

import pytest

from proxy.limits import (
    IDLE_TIMEOUT,
    MAX_CONNECTIONS,
    MAX_CONNECTIONS_PER_SOURCE,
    REQUEST_TIMEOUT,
    Deadline,
    LogLimiter,
    admit,
    receive_deadline,
)


@pytest.mark.parametrize(("open_total", "from_source", "loopback", "expected"), [
    (0, 0, False, None),
    (9, 3, False, None),            # below both limits (10 total, 4 per source)
    (10, 0, False, MAX_CONNECTIONS),  # the total limit first
    (10, 0, True, MAX_CONNECTIONS),
    (5, 4, False, MAX_CONNECTIONS_PER_SOURCE),
    (5, 4, True, None),             # loopback sources: the per-source limit does not apply
    (9, 9, True, None),
])
def test_admit(open_total, from_source, loopback, expected):
    assert admit(open_total, from_source, loopback, max_connections=10, max_connections_per_source=4) == expected


@pytest.mark.parametrize(("partial_since", "last_activity", "expected"), [
    (None, 100.0, Deadline(700.0, IDLE_TIMEOUT)),      # between requests: idle 600 s from the last activity
    (105.0, 100.0, Deadline(135.0, REQUEST_TIMEOUT)),  # a request begun at 105 must be whole by 135
    (105.0, 200.0, Deadline(135.0, REQUEST_TIMEOUT)),  # trickled bytes do not move the request deadline
])
def test_receive_deadline(partial_since, last_activity, expected):
    assert receive_deadline(partial_since, last_activity, request_timeout_s=30.0, idle_timeout_s=600.0) == expected


def test_log_limiter_allows_one_line_per_key_per_interval_and_counts_the_rest():
    limiter = LogLimiter(interval_s=60.0)
    steps = [  # (key, now, expected (allowed, held back since the last line))
        (("max_connections", "10.0.0.1"), 0.0, (True, 0)),
        (("max_connections", "10.0.0.1"), 1.0, (False, 0)),
        (("max_connections", "10.0.0.1"), 59.9, (False, 0)),
        (("max_connections", "10.0.0.2"), 2.0, (True, 0)),   # another source has its own minute
        (("idle_timeout", "10.0.0.1"), 3.0, (True, 0)),      # another reason too
        (("max_connections", "10.0.0.1"), 60.0, (True, 2)),  # a minute on: logs, says 2 were held back
        (("max_connections", "10.0.0.1"), 61.0, (False, 0)),
        (("max_connections", "10.0.0.1"), 200.0, (True, 1)),
    ]
    for key, now, expected in steps:
        assert limiter.allow(key, now) == expected, (key, now)


def test_log_limiter_forgets_the_oldest_key_beyond_its_bound():
    limiter = LogLimiter(interval_s=60.0, max_keys=2)
    assert limiter.allow("a", 0.0) == (True, 0)
    assert limiter.allow("b", 0.0) == (True, 0)
    assert limiter.allow("c", 0.0) == (True, 0)  # "a" is forgotten
    assert limiter.allow("b", 1.0) == (False, 0)
    assert limiter.allow("a", 1.0) == (True, 0)  # forgotten, so it may log again
