"""Connection limits of the agent's listener: admission decisions and read deadlines.

Pure and clock-free: the agent passes counts, times and the peer's address in, and acts on
what comes back (its log lines are rate-limited by `core.log_limit.LogLimiter`). Limits
(agent.* settings, docs/configuration.md): connections in total,
per source address (not for loopback, where every local proxy shares 127.0.0.1), and
connections whose peer has not yet proved it holds a key (its HELLO has not verified);
a deadline for a started frame (or the HELLO, from accept) to arrive whole, and an idle
timeout between frames of an authenticated connection.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Refusal(enum.Enum):
    MAX_CONNECTIONS = "max_connections"
    MAX_PER_SOURCE = "max_per_source"
    MAX_UNAUTHENTICATED = "max_unauthenticated"


@dataclass(frozen=True)
class ListenerLimits:
    max_connections: int = 1024
    max_connections_per_source: int = 256
    max_unauthenticated_connections: int = 64
    request_timeout_s: float = 10.0
    idle_timeout_s: float = 900.0



def admit(limits: ListenerLimits, *, total: int, from_source: int, unauthenticated: int,
          loopback: bool) -> Refusal | None:
    """None to accept a new connection, else why not. Counts are those before this one."""
    if total >= limits.max_connections:
        return Refusal.MAX_CONNECTIONS
    if not loopback and from_source >= limits.max_connections_per_source:
        return Refusal.MAX_PER_SOURCE
    if unauthenticated >= limits.max_unauthenticated_connections:
        return Refusal.MAX_UNAUTHENTICATED
    return None


def read_deadline(limits: ListenerLimits, *, now: float, accepted_at: float, established: bool,
                  frame_started_at: float | None) -> tuple[float, str]:
    """When the read in progress must have given bytes, and the reason to close if not.

    Before the peer's HELLO: request_timeout_s from accept. A frame begun (bytes of it
    buffered): request_timeout_s from its first byte. Between frames: idle_timeout_s.
    """
    if not established:
        return accepted_at + limits.request_timeout_s, "request_deadline"
    if frame_started_at is not None:
        return frame_started_at + limits.request_timeout_s, "request_deadline"
    return now + limits.idle_timeout_s, "idle"
