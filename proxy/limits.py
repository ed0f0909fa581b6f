"""Connection limits of the client listener, as pure decisions (the caller passes the time).

Strategy: the listener asks `admit()` before serving a connection and `receive_deadline()`
before each read; both are plain functions of counts and times, so they are table-tested
without sockets. `LogLimiter` keeps a refusal or timeout from filling the log: one line per
(reason, source address) per interval, with the count of lines it held back since.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

LOG_INTERVAL_S = 60.0  # at most one line per reason and source address per minute
LOG_MAX_KEYS = 4096  # sources remembered; the oldest is forgotten first (then it may log again)

# Reasons a connection is refused or closed by a limit: the `reason` label of
# azsidecar_proxy_connections_limited_total.
MAX_CONNECTIONS = "max_connections"
MAX_CONNECTIONS_PER_SOURCE = "max_connections_per_source"
REQUEST_TIMEOUT = "request_timeout"
IDLE_TIMEOUT = "idle_timeout"



def admit(open_total: int, open_from_source: int, loopback_source: bool, max_connections: int,
          max_connections_per_source: int) -> str | None:
    """None to serve a new connection, or the reason to refuse it.

    Counts are of connections already open. The per-source limit applies to non-loopback
    sources only: on loopback every client is the same host, which the total limit covers.
    """
    if open_total >= max_connections:
        return MAX_CONNECTIONS
    if not loopback_source and open_from_source >= max_connections_per_source:
        return MAX_CONNECTIONS_PER_SOURCE
    return None


@dataclass(frozen=True, slots=True)
class Deadline:
    at: float  # when the wait for bytes ends
    reason: str  # REQUEST_TIMEOUT or IDLE_TIMEOUT


def receive_deadline(partial_since: float | None, last_activity: float, request_timeout_s: float,
                     idle_timeout_s: float) -> Deadline:
    """How long a connection may wait for its next bytes.

    `partial_since`: when the first bytes of a request not yet complete arrived (None
    between requests); then the rest must come within request_timeout_s of them (a
    slowloris client is closed). Between requests the connection is idle from
    `last_activity` (its last bytes in or out) for at most idle_timeout_s.
    """
    if partial_since is not None:
        return Deadline(partial_since + request_timeout_s, REQUEST_TIMEOUT)
    return Deadline(last_activity + idle_timeout_s, IDLE_TIMEOUT)


class LogLimiter:
    """At most one log line per key per interval; counts what it held back."""

    def __init__(self, interval_s: float = LOG_INTERVAL_S, max_keys: int = LOG_MAX_KEYS) -> None:
        self.interval_s = interval_s
        self.max_keys = max_keys
        self._keys: OrderedDict[object, tuple[float, int]] = OrderedDict()  # key -> (logged at, held back since)

    def allow(self, key: object, now: float) -> tuple[bool, int]:
        """(whether to log now, how many lines for `key` were held back since its last line)."""
        known = self._keys.get(key)
        if known is not None and now - known[0] < self.interval_s:
            self._keys[key] = (known[0], known[1] + 1)
            return False, 0
        self._keys[key] = (now, 0)
        self._keys.move_to_end(key)
        while len(self._keys) > self.max_keys:
            self._keys.popitem(last=False)
        return True, known[1] if known is not None else 0
