"""SendTurn: one writer at a time, waiters served in arrival order, a turn handed straight
to the oldest waiter (nobody barges in), a cancelled waiter never gets it."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from kafka_upstream.send_turn import SendTurn


@pytest.mark.trio
async def test_writers_take_turns_in_the_order_they_asked():
    turn = SendTurn()
    order: list[str] = []

    async def writer(name: str, started: trio.Event) -> None:
        started.set()
        await turn.take()
        try:
            order.append(f"{name} in")
            await trio.sleep(0.01)
            order.append(f"{name} out")
        finally:
            turn.give_back()

    assert turn.take_nowait()  # held while the three queue up
    async with trio.open_nursery() as nursery:
        for name in ("a", "b", "c"):
            started = trio.Event()
            nursery.start_soon(writer, name, started)
            await started.wait()
            await trio.testing.wait_all_tasks_blocked()
        assert not turn.take_nowait()
        turn.give_back()
    assert order == ["a in", "a out", "b in", "b out", "c in", "c out"]
    assert not turn.taken()


@pytest.mark.trio
async def test_a_turn_given_back_with_a_writer_waiting_goes_to_it_not_to_a_newcomer():
    turn = SendTurn()
    assert turn.take_nowait()
    got: list[str] = []

    async def waiter() -> None:
        await turn.take()
        got.append("waiter")
        turn.give_back()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        turn.give_back()
        assert turn.taken()  # handed over before the waiter even ran
        assert not turn.take_nowait()  # a newcomer does not barge in
    assert got == ["waiter"] and not turn.taken()


@pytest.mark.trio
async def test_a_cancelled_waiter_does_not_get_the_turn():
    turn = SendTurn()
    assert turn.take_nowait()
    with trio.move_on_after(0.01) as scope:
        await turn.take()
    assert scope.cancelled_caught
    turn.give_back()
    assert not turn.taken()
    assert turn.take_nowait()


def test_giving_back_a_turn_not_taken_is_a_bug():
    with pytest.raises(RuntimeError, match="not taken"):
        SendTurn().give_back()


@pytest.mark.trio
async def test_async_with_takes_and_gives_back():
    turn = SendTurn()
    async with turn:
        assert turn.taken()
    assert not turn.taken()
