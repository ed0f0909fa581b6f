"""What an agent's answer means for the sender's attempt loop (pure; no sockets, no trio).

`NotifySender.notify` sends, reads one answer, and asks `classify_answer` whether to return
the results, try again, or give up; the loop itself only sends, sleeps and counts.
"""

from __future__ import annotations

from dataclasses import dataclass

from leader_notify import protocol as p


@dataclass(frozen=True)
class Answered:
    """Return these results (all applied, or the entries' errors after the last attempt)."""

    results: tuple[p.EntryResult, ...]
    status: str  # "ok" or "entry_errors", the notification's audit status


@dataclass(frozen=True)
class TryAgain:
    """Worth another attempt, if any are left."""

    problem: str


@dataclass(frozen=True)
class Refused:
    """The agent refused the request for good (keys, foreign object, bad request)."""

    status: str  # the RequestStatus name, lower case, for the audit
    message: str


Verdict = Answered | TryAgain | Refused

# Entry errors the sender asks the same agent about again. Not NOT_LEADER_OR_FOLLOWER: the
# agent answers it only once it has retried the leaders of its own zone (a leader elected
# within the zone is found there) or found the leader in another zone, where asking the
# same agent again costs ~0.4 s of attempts and backoff for the same answer; the router
# re-routes such a batch to the new leader's zone at once (docs/routing.md, "Following a
# leader that moved").
SENDER_RETRIED_ENTRY_CODES = p.RETRIABLE_ENTRY_CODES - {6}


def classify_answer(response: p.NotifyResponse, entries: int, last_attempt: bool) -> Verdict:
    """The meaning of `response` to a request of `entries` entries.

    Entries with retriable Kafka errors (but NOT_LEADER_OR_FOLLOWER, see
    SENDER_RETRIED_ENTRY_CODES) are retried as a whole request unless this was the last
    attempt; then the caller gets them as they are, each with its own error code.
    """
    if response.status == p.RequestStatus.OK:
        if len(response.results) != entries:
            return TryAgain(f"{len(response.results)} results for {entries} entries")
        retriable = sum(1 for r in response.results if r.error_code in SENDER_RETRIED_ENTRY_CODES)
        if retriable and not last_attempt:
            return TryAgain(f"{retriable} entries with retriable errors")
        return Answered(response.results, "ok" if p.results_all_ok(response.results) else "entry_errors")
    if response.status in p.RETRIABLE_STATUSES:
        return TryAgain(f"agent answered {response.status.name}: {response.message}")
    return Refused(response.status.name.lower(), f"{response.status.name} {response.message}")
