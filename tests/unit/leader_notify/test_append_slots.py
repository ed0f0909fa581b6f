"""AppendSlots: the agent's append slots, handed out by callback in request order."""

from __future__ import annotations

import pytest

from leader_notify.agent.append_slots import AppendSlots


def test_free_slots_start_takers_at_once_and_the_rest_wait_in_order():
    slots = AppendSlots(2)
    started: list[str] = []

    def taker(name):
        return lambda: started.append(name) or True

    for name in "abcd":
        slots.take(taker(name))
    assert started == ["a", "b"] and slots.free == 0 and slots.waiting == 2
    slots.release()
    assert started == ["a", "b", "c"] and slots.free == 0 and slots.waiting == 1
    slots.release()
    slots.release()
    assert started == ["a", "b", "c", "d"] and slots.free == 1 and slots.waiting == 0
    slots.release()
    assert slots.free == 2


def test_a_taker_that_no_longer_wants_its_slot_passes_it_on():
    slots = AppendSlots(1)
    started: list[str] = []
    slots.take(lambda: started.append("holder") or True)
    slots.take(lambda: False)  # cancelled while waiting
    slots.take(lambda: started.append("next") or True)
    slots.release()
    assert started == ["holder", "next"] and slots.free == 0 and slots.waiting == 0


def test_a_taker_declining_a_free_slot_leaves_it_free():
    slots = AppendSlots(1)
    slots.take(lambda: False)
    assert slots.free == 1 and slots.waiting == 0


def test_a_new_taker_does_not_overtake_waiting_ones():
    """A slot released to a waiting taker is not free for a later one."""
    slots = AppendSlots(1)
    order: list[int] = []
    slots.take(lambda: order.append(1) or True)
    slots.take(lambda: order.append(2) or True)
    slots.release()  # to taker 2
    slots.take(lambda: order.append(3) or True)
    assert order == [1, 2] and slots.waiting == 1


def test_at_least_one_slot():
    with pytest.raises(ValueError, match="at least 1"):
        AppendSlots(0)
