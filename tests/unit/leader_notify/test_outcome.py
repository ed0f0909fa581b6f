"""The sender's reading of an agent's answer, table by table (pure)."""

from __future__ import annotations

import pytest

from leader_notify import protocol as p
from leader_notify.sender.outcome import Answered, Refused, TryAgain, classify_answer

OK = p.EntryResult(0, 100)
DUP = p.EntryResult(0, 99, duplicate=True)  # the agent had it already: applied
NOT_LEADER = p.EntryResult(6)  # retriable, but by the router's re-route, not by asking the same agent again
TIMED_OUT = p.EntryResult(7)  # retriable: the same agent again
TOO_LARGE = p.EntryResult(10)  # not retriable


def answer(status: p.RequestStatus, *results: p.EntryResult, message: str = "") -> p.NotifyResponse:
    return p.NotifyResponse(7, status, message, tuple(results))


@pytest.mark.parametrize(("response", "entries", "last", "expected"), [
    (answer(p.RequestStatus.OK, OK, OK), 2, False, Answered((OK, OK), "ok")),
    (answer(p.RequestStatus.OK, OK, DUP), 2, False, Answered((OK, DUP), "ok")),
    (answer(p.RequestStatus.OK, OK, TOO_LARGE), 2, False, Answered((OK, TOO_LARGE), "entry_errors")),
    (answer(p.RequestStatus.OK, OK, TIMED_OUT), 2, False, TryAgain("1 entries with retriable errors")),
    (answer(p.RequestStatus.OK, OK, TIMED_OUT), 2, True, Answered((OK, TIMED_OUT), "entry_errors")),
    (answer(p.RequestStatus.OK, OK, NOT_LEADER), 2, False, Answered((OK, NOT_LEADER), "entry_errors")),
    (answer(p.RequestStatus.OK, NOT_LEADER, TIMED_OUT), 2, False, TryAgain("1 entries with retriable errors")),
    (answer(p.RequestStatus.OK, OK), 2, False, TryAgain("1 results for 2 entries")),
    (answer(p.RequestStatus.OK, OK), 2, True, TryAgain("1 results for 2 entries")),
    (answer(p.RequestStatus.OVERLOADED, message="busy"), 2, False, TryAgain("agent answered OVERLOADED: busy")),
    (answer(p.RequestStatus.REPLAYED, message="seen"), 2, True, TryAgain("agent answered REPLAYED: seen")),
    (answer(p.RequestStatus.FORBIDDEN_KEY, message="not ours"), 2, False,
     Refused("forbidden_key", "FORBIDDEN_KEY not ours")),
    (answer(p.RequestStatus.WRONG_ZONE, message="az9"), 2, True, Refused("wrong_zone", "WRONG_ZONE az9")),
])
def test_classify_answer(response, entries, last, expected):
    assert classify_answer(response, entries, last) == expected
