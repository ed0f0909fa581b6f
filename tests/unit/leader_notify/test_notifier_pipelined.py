"""ZoneNotifier with pipelining (fake sender and pipe above the sockets): up to
`pipeline_depth` objects in flight, answers that are all applied handed on at once, and a
failure turned into serial re-sends in object order only after every ordered request in
flight was answered, with nothing new sent meanwhile."""

from __future__ import annotations

import types

import pytest
import trio
import trio.testing

from leader_notify.protocol import EntryResult
from leader_notify.sender.notifier import ZoneNotifier
from leader_notify.sender.owners import AgentMap

pytestmark = pytest.mark.trio

ZONE = "az2"
OK = [EntryResult(0, 7)]


def obj(n: int) -> types.SimpleNamespace:
    ref = types.SimpleNamespace(topic="t", partition=0, length=1)
    return types.SimpleNamespace(key=f"obj-{n}", zones={ZONE: types.SimpleNamespace(offset=0, length=1, entries=(ref,))})


class Guard:
    gray = False


class Sink:
    """The sender: `notify` is the serial path (answers OK at once, logs the key)."""

    agents = AgentMap({ZONE: ("127.0.0.1:1",)})
    on_gray = None
    prefetch_depth = 2
    timeout_s = 1.0
    max_idle_s = 300.0

    def __init__(self, depth: int) -> None:
        self.pipeline_depth = depth
        self.agent_pipelines = True
        self.events: list[str] = []  # "pipe obj-1", "serial obj-1", in the order they happened
        self._guard = Guard()

    def guard(self, zone, agent=0):
        return self._guard

    def pipelining_allowed(self, dest_zone, agent):
        return self.agent_pipelines  # False: the agent speaks a protocol version without ordered requests

    def share_of(self, zone, topic, partition):
        return zone

    def start(self, flushed, dest_zone, agent=0):
        raise AssertionError("a pipelined notifier writes nothing ahead on the serial path")

    async def prefetch(self, flushed, dest_zone, agent=0):
        raise AssertionError("a pipelined notifier prefetches nothing")

    async def notify(self, flushed, dest_zone, *, agent=None, started=None, on_answer=None, hedge=False):
        self.events.append(f"serial {flushed.key}" + (" as a hedge" if hedge else ""))
        if on_answer is not None:
            on_answer(OK)
        return OK


class Pipe:
    """Records sends; the test answers them with `answer(key, value)`."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.handlers: dict[str, object] = {}
        self.sent = trio.Event()

    async def send(self, flushed, on_answer):
        self.sink.events.append(f"pipe {flushed.key}")
        self.handlers[flushed.key] = on_answer
        self.sent.set()

    def answer(self, key, value):
        self.handlers.pop(key)(value)


async def wait_for(predicate) -> None:
    with trio.fail_after(5):
        while not predicate():
            await trio.sleep(0.001)  # polls a condition the code exposes; no fixed wait


def start(nursery, depth: int):
    sink = Sink(depth)
    pipes: list[Pipe] = []

    def open_pipe(sender, zone, agent, nursery_):
        pipes.append(Pipe(sink))
        return pipes[-1]

    notifier = ZoneNotifier(ZONE, sink, nursery, open_pipe=open_pipe)
    got: dict[str, object] = {}
    for n in range(1, 6):
        flushed = obj(n)
        notifier.announce(flushed)
        notifier.on_result(flushed.key, lambda value, key=flushed.key: got.__setitem__(key, value))
    return sink, pipes[0], notifier, got


async def test_up_to_depth_objects_are_in_flight_and_answers_are_handed_on_at_once():
    async with trio.open_nursery() as nursery:
        sink, pipe, notifier, got = start(nursery, depth=3)
        await wait_for(lambda: len(pipe.handlers) == 3)
        assert sink.events == ["pipe obj-1", "pipe obj-2", "pipe obj-3"]  # the window: 3 of 5
        pipe.answer("obj-2", OK)  # out of order: handed on, but obj-4 waits for obj-1 to settle
        assert got == {"obj-2": OK}
        await trio.testing.wait_all_tasks_blocked()
        assert "pipe obj-4" not in sink.events
        pipe.answer("obj-1", OK)
        await wait_for(lambda: len(pipe.handlers) == 3)
        assert sink.events[3:] == ["pipe obj-4", "pipe obj-5"]
        for key in ("obj-3", "obj-4", "obj-5"):
            pipe.answer(key, OK)
        with trio.fail_after(5):
            await notifier.wait_idle()
        assert sorted(got) == ["obj-1", "obj-2", "obj-3", "obj-4", "obj-5"]
        nursery.cancel_scope.cancel()


async def test_a_failure_stops_sending_and_re_sends_serially_in_order_after_every_answer():
    failed = [EntryResult(6)]
    async with trio.open_nursery() as nursery:
        sink, pipe, notifier, got = start(nursery, depth=3)
        await wait_for(lambda: len(pipe.handlers) == 3)
        pipe.answer("obj-1", failed)  # NOT_LEADER_OR_FOLLOWER: obj-1 is not settled
        assert "obj-1" not in got
        await trio.testing.wait_all_tasks_blocked()
        assert sink.events == ["pipe obj-1", "pipe obj-2", "pipe obj-3"]  # nothing new, nothing serial yet
        pipe.answer("obj-2", failed)  # held by the agent behind obj-1
        await trio.testing.wait_all_tasks_blocked()
        assert sink.events == ["pipe obj-1", "pipe obj-2", "pipe obj-3"]  # obj-3 still in flight
        pipe.answer("obj-3", OK)  # another partition: its answer stands
        with trio.fail_after(5):
            await wait_for(lambda: len(pipe.handlers) == 2)
        assert sink.events == ["pipe obj-1", "pipe obj-2", "pipe obj-3",
                               "serial obj-1", "serial obj-2", "pipe obj-4", "pipe obj-5"]
        pipe.answer("obj-4", OK)
        pipe.answer("obj-5", OK)
        with trio.fail_after(5):
            await notifier.wait_idle()
        assert all(got[f"obj-{n}"] == OK for n in range(1, 6))  # the re-sends' answers, not the failures
        nursery.cancel_scope.cancel()


async def test_a_broken_pipe_fails_every_request_in_flight_and_each_is_re_sent_serially():
    async with trio.open_nursery() as nursery:
        sink, pipe, notifier, got = start(nursery, depth=2)
        await wait_for(lambda: len(pipe.handlers) == 2)
        broken = ConnectionResetError("agent went away")
        pipe.answer("obj-1", broken)
        pipe.answer("obj-2", broken)
        with trio.fail_after(5):
            await wait_for(lambda: len(pipe.handlers) == 2)
        assert sink.events == ["pipe obj-1", "pipe obj-2", "serial obj-1", "serial obj-2", "pipe obj-3", "pipe obj-4"]
        for key in ("obj-3", "obj-4"):
            pipe.answer(key, OK)
        await wait_for(lambda: len(pipe.handlers) == 1)
        pipe.answer("obj-5", OK)
        with trio.fail_after(5):
            await notifier.wait_idle()
        assert sorted(got) == [f"obj-{n}" for n in range(1, 6)]
        nursery.cancel_scope.cancel()


async def test_objects_for_a_gray_agent_go_serially_and_nothing_ordered_passes_them():
    async with trio.open_nursery() as nursery:
        sink = Sink(depth=4)
        sink._guard.gray = True  # noqa: SLF001 - the fake's own state
        pipes: list[Pipe] = []
        notifier = ZoneNotifier(ZONE, sink, nursery, open_pipe=lambda *a: pipes.append(Pipe(sink)) or pipes[-1])
        for n in (1, 2):
            flushed = obj(n)
            notifier.announce(flushed)
            notifier.on_result(flushed.key, lambda _v: None)
        with trio.fail_after(5):
            await notifier.wait_idle()
        assert sink.events == ["serial obj-1", "serial obj-2"]
        nursery.cancel_scope.cancel()


async def test_objects_for_an_agent_of_the_previous_protocol_version_go_serially_in_order():
    async with trio.open_nursery() as nursery:
        sink = Sink(depth=4)
        sink.agent_pipelines = False  # the sender learnt the agent speaks v3
        pipes: list[Pipe] = []
        notifier = ZoneNotifier(ZONE, sink, nursery, open_pipe=lambda *a: pipes.append(Pipe(sink)) or pipes[-1])
        got: dict[str, object] = {}
        for n in (1, 2, 3):
            flushed = obj(n)
            notifier.announce(flushed)
            notifier.on_result(flushed.key, lambda value, key=flushed.key: got.__setitem__(key, value))
        with trio.fail_after(5):
            await notifier.wait_idle()
        assert sink.events == ["serial obj-1", "serial obj-2", "serial obj-3"]
        assert got == {"obj-1": OK, "obj-2": OK, "obj-3": OK}
        nursery.cancel_scope.cancel()


async def test_the_re_send_of_a_timed_out_pipelined_notification_is_its_hedge():
    """A timeout made the agent gray: the serial re-send goes with the plain deadline (a
    hedge), as a serial attempt's retry does, not as a probe with twice the deadline."""
    async with trio.open_nursery() as nursery:
        sink, pipe, notifier, got = start(nursery, depth=2)
        await wait_for(lambda: len(pipe.handlers) == 2)
        pipe.answer("obj-1", trio.TooSlowError("no answer within 1.50 s"))
        pipe.answer("obj-2", trio.TooSlowError("no answer within 1.50 s"))
        await wait_for(lambda: len(pipe.handlers) == 2)
        assert sink.events[2:4] == ["serial obj-1 as a hedge", "serial obj-2 as a hedge"]
        for key in ("obj-3", "obj-4"):
            pipe.answer(key, OK)
        await wait_for(lambda: len(pipe.handlers) == 1)
        pipe.answer("obj-5", OK)
        with trio.fail_after(5):
            await notifier.wait_idle()
        assert "as a hedge" not in " ".join(sink.events[4:])
        nursery.cancel_scope.cancel()
