"""Connection limits of the client listener, as pure decisions (the caller passes the time).

Strategy: the listener asks `admit()` before serving a connection and `receive_deadline()`
before each read; both are plain functions of counts and times, so they are table-tested
without sockets. `core.log_limit.LogLimiter` keeps a refusal or timeout from filling the
log: one line per (reason, source address) per interval, with the count held back since.
"""

from __future__ import annotations

from dataclasses import dataclass

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
