"""Which refused batches the router sends again after a leader moved, and in what order (pure).

Strategy. A leader that moved refuses what reaches it afterwards: the old leader answers
NOT_LEADER_OR_FOLLOWER on the direct routes, and the old zone's agent refuses the same way
once the leader left its zone (leader_notify/agent/appender.py). Every batch of the partition
already on that lane comes back refused, in order. Instead of passing the refusal to the
producer (a retry, an error in its metrics, and for an idempotent producer with several
requests in flight a reordering risk), the Produce round sends the batch again, unchanged
(producer id, epoch and sequence as received), by the new leader's route - once.

Order: each batch of a partition the router hands on gets a ticket, in submission order.
A refused batch may be sent again only when every earlier ticket of its partition has its
final result or was itself sent again (`turn`); and it goes onto the lane the earlier
re-sent batches took, or waits for them to be answered (`clear_for`), so the new leader sees
the partition's batches in the order the producer sent them. If an earlier batch ended in an
error the producer will see, the later refused batches are not sent again either (the
producer retries them after it; sent now they would overtake it): `turn` says GIVE_UP.

No I/O, no clock: the partition book (router/partition_book.py) keeps one `ResendOrder` per
partition and wakes waiters when it changes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from core import errors
from core.produce import PartitionResult

# (path, leader's zone, agent index on the WAL route / leader broker id on the direct routes):
# where a batch went. A refused batch is sent again only on another lane.
Lane = tuple[str, str, int]


def refused_by_a_moved_leader(result: PartitionResult, batches: int, batch_codes: Sequence[int] | None) -> bool:
    """Whether a partition's batches of one request were refused whole because the leader moved.

    Every batch must have been refused (NOT_LEADER_OR_FOLLOWER): sending again a request's
    batches after one of them was appended would write that one twice for a producer
    without idempotence. With one batch (what Kafka clients send per partition and request)
    the merged result says it; with several, only `batch_codes` (each batch's code, which the
    WAL route knows) can: a direct answer merges them, so it is passed on as before.
    """
    if result.error_code != errors.NOT_LEADER_OR_FOLLOWER:
        return False
    if batches == 1:
        return True
    return batch_codes is not None and len(batch_codes) == batches and \
        all(code == errors.NOT_LEADER_OR_FOLLOWER for code in batch_codes)


class Turn(Enum):
    WAIT = "wait"  # an earlier batch of the partition has no final result yet and was not sent again
    GO = "go"  # look the leader up and send it again
    GIVE_UP = "give_up"  # an earlier batch failed for the producer: pass the refusal on


class _State(Enum):
    SENT = "sent"  # on its first lane, no answer yet
    REFUSED = "refused"  # refused by a moved leader, waiting for its turn
    RESENT = "resent"  # handed on again, on `lane`
    DONE = "done"  # final result known


@dataclass
class _Ticket:
    state: _State = _State.SENT
    lane: Lane | None = None
    doomed: bool = False  # an earlier ticket failed for the producer while this one was open


class ResendOrder:
    """One partition's open tickets, oldest first. Tickets with their final result leave
    from the front, so it holds about the partition's batches in flight."""

    def __init__(self) -> None:
        self._next = 0
        self._open: OrderedDict[int, _Ticket] = OrderedDict()

    def __len__(self) -> int:
        return len(self._open)

    def issue(self) -> int:
        """A batch of the partition is handed on: its ticket."""
        ticket = self._next
        self._next += 1
        self._open[ticket] = _Ticket()
        return ticket

    def refused(self, ticket: int) -> None:
        """The ticket's first lane refused it because the leader moved: it waits for its turn."""
        entry = self._open.get(ticket)
        if entry is not None and entry.state is _State.SENT:
            entry.state = _State.REFUSED

    def turn(self, ticket: int) -> Turn:
        """May the refused `ticket` be sent again now? (GIVE_UP also for a ticket not open.)"""
        entry = self._open.get(ticket)
        if entry is None or entry.doomed:
            return Turn.GIVE_UP
        for earlier, other in self._open.items():
            if earlier == ticket:
                break
            if other.state in (_State.SENT, _State.REFUSED):
                return Turn.WAIT
        return Turn.GO

    def clear_for(self, ticket: int, lane: Lane) -> bool:
        """True if no earlier batch sent again is still unanswered on a lane other than `lane`."""
        for earlier, other in self._open.items():
            if earlier == ticket:
                break
            if other.state is _State.RESENT and other.lane != lane:
                return False
        return True

    def resent(self, ticket: int, lane: Lane) -> None:
        """The ticket was handed on again, on `lane`: later refused tickets may follow it."""
        entry = self._open.get(ticket)
        if entry is not None:
            entry.state, entry.lane = _State.RESENT, lane

    def finished(self, ticket: int, ok: bool) -> None:
        """The ticket has its final result (`ok`: the producer hears success). A failure dooms
        the tickets open after it: sent again, they would overtake the producer's retry."""
        entry = self._open.get(ticket)
        if entry is None or entry.state is _State.DONE:
            return
        entry.state = _State.DONE
        if not ok:
            later = False
            for other_ticket, other in self._open.items():
                if later:
                    other.doomed = True
                later = later or other_ticket == ticket
        while self._open and next(iter(self._open.values())).state is _State.DONE:
            self._open.popitem(last=False)
