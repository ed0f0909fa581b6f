"""A connection's response queue (proxy/response_slots.py) over a socket pair: answers leave
in request order whoever completes them, what a full socket does not take is sent by the
writer task before anything after it, a failed answer closes the connection after the
answers before it, and the reader waits for room beyond the queue's capacity."""

from __future__ import annotations

import socket

import pytest
import trio
import trio.testing

from proxy.response_slots import ResponseQueue, ResponseSlot, ready_slot

pytestmark = [pytest.mark.integration, pytest.mark.trio]

TIMEOUT_S = 10


@pytest.fixture
def pair():
    ours, peer = socket.socketpair()
    ours.setblocking(False)
    peer.setblocking(False)
    yield ours, peer
    ours.close()
    peer.close()


def nothing_arrived(peer: socket.socket) -> bool:
    try:
        peer.recv(100)
    except BlockingIOError:
        return True
    return False


async def test_answers_leave_in_request_order_whoever_completes_them(pair):
    ours, peer = pair
    answered = []
    queue = ResponseQueue(ours.fileno(), 8, lambda: answered.append(1))
    first, second, third = ResponseSlot(), ResponseSlot(), ResponseSlot()
    for slot in (first, second, third):
        await queue.put(slot)
    third.fill(b"three")
    second.finish()  # acks=0: nothing to send
    assert nothing_arrived(peer)  # the first answer is not in: nothing may pass it
    assert answered == []
    first.fill(b"one")
    assert peer.recv(100) == b"onethree"  # written in the step that completed the first
    assert len(answered) == 3 and len(queue) == 0


async def test_an_answer_known_at_once_is_written_when_queued_behind_nothing(pair):
    ours, peer = pair
    queue = ResponseQueue(ours.fileno(), 8, lambda: None)
    await queue.put(ready_slot(b"versions"))
    await queue.put(ready_slot(None))
    assert peer.recv(100) == b"versions"
    assert len(queue) == 0


async def test_what_a_full_socket_did_not_take_goes_before_anything_after_it(pair):
    ours, peer = pair
    stuffed = 0
    while True:  # fill the socket's buffers
        try:
            stuffed += ours.send(b"x" * 65536)
        except BlockingIOError:
            break
    stream = trio.SocketStream(trio.socket.from_stdlib_socket(ours))
    queue = ResponseQueue(ours.fileno(), 8, lambda: None)
    first, second = ResponseSlot(), ResponseSlot()
    await queue.put(first)
    await queue.put(second)
    first.fill(b"A" * 300_000)
    second.fill(b"B" * 10)  # completes while the first's rest is still unsent
    received = bytearray()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(queue.run_writer, stream, nursery.cancel_scope, lambda: None)
        with trio.fail_after(TIMEOUT_S):
            while len(received) < stuffed + 300_010:
                await trio.lowlevel.wait_readable(peer)
                received += peer.recv(1 << 20)
        queue.close()
    assert bytes(received[stuffed:]) == b"A" * 300_000 + b"B" * 10


async def test_a_failed_answer_closes_the_connection_after_the_answers_before_it(pair):
    ours, peer = pair
    stream = trio.SocketStream(trio.socket.from_stdlib_socket(ours))
    broken = []
    queue = ResponseQueue(ours.fileno(), 8, lambda: None)
    first, failed, later = ResponseSlot(), ResponseSlot(), ResponseSlot()
    for slot in (first, failed, later):
        await queue.put(slot)
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(queue.run_writer, stream, nursery.cancel_scope, lambda: broken.append(1))
            later.fill(b"never")
            failed.fail()
            assert broken == []  # the first answer is still owed
            first.fill(b"first")
            await trio.sleep_forever()  # the writer cancels the connection's scope
    assert broken == [1]
    assert peer.recv(100) == b"first"
    assert nothing_arrived(peer)


async def test_the_reader_waits_for_room_beyond_the_capacity(pair):
    ours, peer = pair
    queue = ResponseQueue(ours.fileno(), 2, lambda: None)
    first, second, third = ResponseSlot(), ResponseSlot(), ResponseSlot()
    await queue.put(first)
    await queue.put(second)
    queued = trio.Event()

    async def put_third() -> None:
        await queue.put(third)
        queued.set()

    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(put_third)
            await trio.testing.wait_all_tasks_blocked()
            assert not queued.is_set() and len(queue) == 2
            first.fill(b"1")
            await queued.wait()
    assert len(queue) == 2
    assert peer.recv(100) == b"1"


async def test_the_writer_returns_once_closed_and_every_answer_is_out(pair):
    ours, peer = pair
    stream = trio.SocketStream(trio.socket.from_stdlib_socket(ours))
    queue = ResponseQueue(ours.fileno(), 8, lambda: None)
    slot = ResponseSlot()
    await queue.put(slot)
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(queue.run_writer, stream, nursery.cancel_scope, lambda: None)
            queue.close()
            await trio.testing.wait_all_tasks_blocked()
            slot.fill(b"last")  # the writer still waits for it
    assert peer.recv(100) == b"last"
