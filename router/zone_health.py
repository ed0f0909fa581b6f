"""Why a zone's WAL path fails, and the zone circuit that follows from it (pure: the caller
passes the time and what broker metadata says).

Strategy. A proxy sees a destination zone only through a few signals; each failure is
classified into a cause, and the circuit (closed -> open -> half_open -> closed) opens
after a number of consecutive failures that depends on how sure the cause is:

| signal (what the proxy saw)                              | zone's brokers in metadata | cause            | opens after |
|----------------------------------------------------------|----------------------------|------------------|-------------|
| notification abandoned at its deadline on an open connection | yes                    | agent_slow       | 3           |
| same                                                     | no                         | zone_partitioned | 1           |
| connecting to the agent refused / reset (host up, no agent) | any                     | agent_gone       | 2           |
| connecting to the agent: no answer (SYN unanswered)      | yes                        | agent_gone       | 2           |
| same                                                     | no                         | zone_partitioned | 1           |
| a WAL PUT failed or was abandoned (our zone's S3)        | any                        | s3_unreachable   | 3           |
| the agent answered NOT_LEADER / a leader error           | any                        | leader_moved: not a failure (metadata refresh) |

"The zone's brokers in metadata": KRaft fences brokers that stop heartbeating to the
controller quorum (broker.session.timeout.ms, 9 s by default) and Metadata stops listing
them; a zone cut off from the majority loses its brokers from every other zone's view,
while an agent that merely died leaves them listed. `None` (not known yet) counts as listed.

A success (an ok notification) closes the circuit and clears the count. A failure while
half-open re-opens it at once. Open lasts OPEN_S, then one round of traffic tries the WAL
path again (half_open); sooner when the monitor's probe connects to the agent again while
the cause is agent_gone or zone_partitioned (`Signal.REACHABLE`: the zone is back). Transport details become a `Signal` in `signal_of_result`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum


class Signal(str, Enum):
    OK = "ok"  # a notification answered ok
    DEADLINE = "deadline"  # connected, but no answer within the notification deadline
    REFUSED = "refused"  # the agent's address refused or reset the connection
    NO_ANSWER = "no_answer"  # connecting timed out / no route: nothing answers at that address
    S3_FAILED = "s3_failed"  # a WAL PUT failed or hung (S3 from this proxy's zone)
    LEADER_MOVED = "leader_moved"  # a leader error: the path works, the leader went elsewhere
    REACHABLE = "reachable"  # the monitor's TCP probe connected to the agent


class Cause(str, Enum):
    HEALTHY = "healthy"
    AGENT_SLOW = "agent_slow"
    AGENT_GONE = "agent_gone"
    ZONE_PARTITIONED = "zone_partitioned"
    S3_UNREACHABLE = "s3_unreachable"


CAUSES = tuple(Cause)
OPEN_AFTER = {  # consecutive failures that open the circuit, by the last failure's cause
    Cause.AGENT_SLOW: 3,  # a slow answer may be one GC pause or one hot object: wait for a pattern
    Cause.AGENT_GONE: 2,  # a refused connection is unambiguous; one more rules out a restart race
    Cause.ZONE_PARTITIONED: 1,  # the brokers are gone from metadata too: nothing will answer
    Cause.S3_UNREACHABLE: 3,  # as the WAL writer's own retries: a PUT can fail alone
}
OPEN_S = 10.0  # how long a zone is avoided before traffic tries its WAL path again


def cause_of(signal: Signal, zone_brokers_listed: bool | None) -> Cause | None:
    """The cause a failure signal points to (None: not a failure of the zone's path)."""
    listed = zone_brokers_listed is not False
    if signal in (Signal.OK, Signal.LEADER_MOVED, Signal.REACHABLE):
        return None
    if signal is Signal.S3_FAILED:
        return Cause.S3_UNREACHABLE
    if signal is Signal.REFUSED:
        return Cause.AGENT_GONE
    if not listed:
        return Cause.ZONE_PARTITIONED
    return Cause.AGENT_SLOW if signal is Signal.DEADLINE else Cause.AGENT_GONE


@dataclass(frozen=True)
class ZoneCircuit:
    state: str = "closed"  # closed | open | half_open
    cause: Cause = Cause.HEALTHY  # the last failure's cause while failures > 0 or not closed
    failures: int = 0  # consecutive failures
    opened_at: float = 0.0
    detail: str = ""  # what the last failure said (for /readyz and logs)

    def reason(self) -> str:
        """One line for /readyz: state, cause and what was seen."""
        if self.state == "closed" and not self.failures:
            return "closed"
        text = f"{self.state}: {self.cause.value} after {self.failures} failure(s)"
        return f"{text} ({self.detail})" if self.detail else text


HEALTHY = ZoneCircuit()  # closed, no failures: what every success leads to (frozen, so shared)


def at(circuit: ZoneCircuit, now: float, open_s: float = OPEN_S) -> ZoneCircuit:
    """The circuit as of `now`: an open circuit turns half_open after open_s."""
    if circuit.state == "open" and now - circuit.opened_at >= open_s:
        return replace(circuit, state="half_open")
    return circuit


def allows(circuit: ZoneCircuit) -> bool:
    """Whether the WAL path may be used (call on the result of `at`)."""
    return circuit.state != "open"


def observe(circuit: ZoneCircuit, signal: Signal, now: float, zone_brokers_listed: bool | None,
            detail: str = "") -> ZoneCircuit:
    """The circuit after one signal about the zone at `now`."""
    circuit = at(circuit, now)
    if signal is Signal.OK:
        return HEALTHY
    if signal is Signal.REACHABLE:
        # An agent that was gone (or a zone that was cut off) accepts connections again: try
        # the WAL path now rather than at the end of OPEN_S. Says nothing about a slow agent.
        if circuit.state == "open" and circuit.cause in (Cause.AGENT_GONE, Cause.ZONE_PARTITIONED):
            return replace(circuit, state="half_open")
        return circuit
    cause = cause_of(signal, zone_brokers_listed)
    if cause is None:
        return circuit  # leader moved: says nothing about the path
    failures = circuit.failures + 1
    if circuit.state == "half_open" or failures >= OPEN_AFTER[cause]:
        return ZoneCircuit("open", cause, failures, now if circuit.state != "open" else circuit.opened_at, detail)
    return ZoneCircuit(circuit.state, cause, failures, circuit.opened_at, detail)


def signal_of_result(error_message: str | None, leader_error: bool) -> Signal:
    """The signal a failed WAL-routed batch carries (its PartitionResult's error message as the
    WAL path writes it: "WAL write: ..." for the PUT, "notify: <exception>" for the notification)."""
    if leader_error:
        return Signal.LEADER_MOVED
    text = error_message or ""
    if text.startswith("WAL write"):
        return Signal.S3_FAILED
    lowered = text.lower()
    if "refused" in lowered or "reset" in lowered or "errno 111" in lowered or "errno 104" in lowered:
        return Signal.REFUSED
    if "no route" in lowered or "unreachable" in lowered or "connect" in lowered:
        return Signal.NO_ANSWER
    return Signal.DEADLINE


__all__ = ["CAUSES", "HEALTHY", "OPEN_AFTER", "OPEN_S", "Cause", "Signal", "ZoneCircuit", "allows", "at", "cause_of",
           "observe", "signal_of_result"]
