"""router/resend_order.py: which batches refused by a moved leader are sent again, and when."""

from __future__ import annotations

import pytest

from core.produce import PartitionResult
from router.resend_order import ResendOrder, Turn, refused_by_a_moved_leader

NOT_LEADER = 6
TIMED_OUT = 7
OLD = ("direct_cross", "use1-az2", 2)  # the lane that refused
NEW = ("local", "use1-az1", 1)
OTHER = ("wal", "use1-az3", 0)


@pytest.mark.parametrize(("code", "batches", "batch_codes", "expected"), [
    (NOT_LEADER, 1, None, True),  # one batch, refused: what Kafka clients send per partition
    (TIMED_OUT, 1, None, False),  # the leader may have it: never sent twice
    (0, 1, None, False),
    (NOT_LEADER, 2, None, False),  # a direct answer merges its batches: one may have been appended
    (NOT_LEADER, 2, [NOT_LEADER, NOT_LEADER], True),  # the WAL route knows each batch's code
    (NOT_LEADER, 2, [0, NOT_LEADER], False),  # the first was appended before the move
    (NOT_LEADER, 3, [NOT_LEADER, NOT_LEADER], False),  # a code missing
])
def test_only_batches_refused_whole_by_a_moved_leader_are_sent_again(code, batches, batch_codes, expected):
    assert refused_by_a_moved_leader(PartitionResult(code), batches, batch_codes) is expected


def test_a_refused_batch_waits_for_every_earlier_batch_to_be_answered():
    order = ResendOrder()
    first, second = order.issue(), order.issue()
    order.refused(second)  # answered before the first (another request's task)
    assert order.turn(second) is Turn.WAIT
    order.finished(first, ok=True)
    assert order.turn(second) is Turn.GO


def test_refused_batches_go_in_ticket_order_each_after_the_one_before_was_sent_again():
    order = ResendOrder()
    tickets = [order.issue() for _ in range(3)]
    for ticket in reversed(tickets):  # refusals may be seen in any order
        order.refused(ticket)
    assert [order.turn(t) for t in tickets] == [Turn.GO, Turn.WAIT, Turn.WAIT]
    order.resent(tickets[0], NEW)
    assert [order.turn(t) for t in tickets[1:]] == [Turn.GO, Turn.WAIT]
    assert order.clear_for(tickets[1], NEW)  # same lane as the first's re-send: its order is kept there
    order.resent(tickets[1], NEW)
    assert order.turn(tickets[2]) is Turn.GO


def test_a_re_send_to_another_lane_waits_for_the_earlier_re_sends_answers():
    order = ResendOrder()
    first, second = order.issue(), order.issue()
    order.refused(first)
    order.refused(second)
    order.resent(first, NEW)
    assert order.turn(second) is Turn.GO
    assert not order.clear_for(second, OTHER)  # the leader moved again: NEW might still take the first
    order.finished(first, ok=True)
    assert order.clear_for(second, OTHER)


def test_after_an_earlier_batch_failed_for_the_producer_later_refused_ones_give_up():
    order = ResendOrder()
    first, second, third = order.issue(), order.issue(), order.issue()
    order.refused(second)
    order.refused(third)
    order.finished(first, ok=False)  # e.g. timed out on the old lane: the producer retries it
    assert order.turn(second) is Turn.GIVE_UP  # sent now, it would overtake that retry
    order.finished(second, ok=False)
    assert order.turn(third) is Turn.GIVE_UP
    order.finished(third, ok=False)
    later = order.issue()  # handed on after the failures were known: the producer's retry, say
    order.refused(later)
    assert order.turn(later) is Turn.GO


def test_a_re_send_that_failed_dooms_the_later_refused_batches():
    order = ResendOrder()
    first, second = order.issue(), order.issue()
    order.refused(first)
    order.refused(second)
    assert order.turn(first) is Turn.GO
    order.finished(first, ok=False)  # e.g. no lookup named another leader
    assert order.turn(second) is Turn.GIVE_UP


def test_finished_tickets_leave_from_the_front_and_repeats_are_ignored():
    order = ResendOrder()
    first, second, third = order.issue(), order.issue(), order.issue()
    order.finished(second, ok=True)
    assert len(order) == 3  # the first is still open
    order.finished(first, ok=True)
    assert len(order) == 1
    order.finished(first, ok=False)  # a repeat: dooms nothing
    order.refused(third)
    assert order.turn(third) is Turn.GO
    order.finished(third, ok=True)
    assert len(order) == 0
    assert order.turn(third) is Turn.GIVE_UP  # not open any more
