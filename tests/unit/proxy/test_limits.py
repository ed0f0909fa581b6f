"""The listener's limit decisions, table-tested (imports only proxy.limits)."""

from __future__ import annotations

import pytest

from proxy.limits import (
    IDLE_TIMEOUT,
    MAX_CONNECTIONS,
    MAX_CONNECTIONS_PER_SOURCE,
    REQUEST_TIMEOUT,
    Deadline,
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
