"""ZoneNotifier's read-ahead window (fake sink above the sender): the `prefetch_depth`
objects right behind the one in flight are prefetched, the window moves on as each
notification starts, and at most `prefetch_depth` prefetches run at once."""

from __future__ import annotations

import types

import pytest
import trio
import trio.testing

from leader_notify.sender.notifier import ZoneNotifier
from leader_notify.sender.owners import AgentMap

pytestmark = pytest.mark.trio

ZONE = "az2"


def obj(n: int) -> types.SimpleNamespace:
    ref = types.SimpleNamespace(topic="t", partition=0, length=1)
    return types.SimpleNamespace(key=f"obj-{n}", zones={ZONE: types.SimpleNamespace(offset=0, length=1, entries=(ref,))})


class Sink:
    """Notifications wait for `release[key]`; prefetches for `prefetch_gate` if one is set.
    Prefetches started in one step run in trio's order, not theirs: compared sorted."""

    agents = AgentMap({ZONE: ("127.0.0.1:1",)})
    on_gray = None

    def __init__(self, depth: int, prefetch_gate: trio.Event | None = None) -> None:
        self.prefetch_depth = depth
        self.pipeline_depth = 1  # one at a time: the read-ahead window is what this file tests
        self.prefetch_gate = prefetch_gate
        self.release = {f"obj-{n}": trio.Event() for n in range(1, 10)}
        self.notified: list[str] = []
        self.prefetched: list[str] = []
        self.prefetching = 0
        self.most_prefetching = 0

    def share_of(self, zone, topic, partition):
        return zone

    def start(self, flushed, dest_zone, agent=0):
        return None

    async def prefetch(self, flushed, dest_zone, agent=0):
        self.prefetched.append(flushed.key)
        self.prefetching += 1
        self.most_prefetching = max(self.most_prefetching, self.prefetching)
        try:
            if self.prefetch_gate is not None:
                await self.prefetch_gate.wait()
        finally:
            self.prefetching -= 1
        return True

    async def notify(self, flushed, dest_zone, *, agent=None, started=None, on_answer=None):
        self.notified.append(flushed.key)
        await self.release[flushed.key].wait()
        return [types.SimpleNamespace(error_code=0, base_offset=0, duplicate=False)]


async def announce(notifier: ZoneNotifier, n: int) -> None:
    flushed = obj(n)
    notifier.announce(flushed)
    notifier.on_result(flushed.key, lambda _got: None)


async def test_the_window_moves_on_with_each_notification():
    sink = Sink(depth=2)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            notifier = ZoneNotifier(ZONE, sink, nursery)
            for n in range(1, 6):  # a queue of five at once: obj-1 in flight, four behind it
                await announce(notifier, n)
            await trio.testing.wait_all_tasks_blocked()
            assert (sink.notified, sorted(sink.prefetched)) == (["obj-1"], ["obj-2", "obj-3"])
            sink.release["obj-1"].set()
            await trio.testing.wait_all_tasks_blocked()
            # obj-2 in flight: obj-3 and obj-4 right behind it, obj-4 newly read ahead
            assert (sink.notified, sorted(sink.prefetched)) == (["obj-1", "obj-2"], ["obj-2", "obj-3", "obj-4"])
            sink.release["obj-2"].set()
            await trio.testing.wait_all_tasks_blocked()
            assert sorted(sink.prefetched) == ["obj-2", "obj-3", "obj-4", "obj-5"]
            for n in range(3, 6):
                sink.release[f"obj-{n}"].set()
            await notifier.wait_idle()
            nursery.cancel_scope.cancel()
    assert sink.notified == [f"obj-{n}" for n in range(1, 6)]
    assert sorted(sink.prefetched) == [f"obj-{n}" for n in range(2, 6)]  # every object but the first, once


async def test_at_most_depth_prefetches_run_and_the_rest_follow_as_they_end():
    gate = trio.Event()
    sink = Sink(depth=2, prefetch_gate=gate)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            notifier = ZoneNotifier(ZONE, sink, nursery)
            for n in range(1, 6):
                await announce(notifier, n)
            sink.release["obj-1"].set()
            sink.release["obj-2"].set()
            await trio.testing.wait_all_tasks_blocked()
            # obj-3 in flight; obj-2 and obj-3's prefetches still hang: obj-4, obj-5 wait their turn
            assert (sink.notified, sorted(sink.prefetched)) == (["obj-1", "obj-2", "obj-3"], ["obj-2", "obj-3"])
            gate.set()
            await trio.testing.wait_all_tasks_blocked()
            assert sorted(sink.prefetched) == ["obj-2", "obj-3", "obj-4", "obj-5"]
            for n in range(3, 6):
                sink.release[f"obj-{n}"].set()
            await notifier.wait_idle()
            nursery.cancel_scope.cancel()
    assert sink.most_prefetching == 2


async def test_depth_zero_prefetches_nothing():
    sink = Sink(depth=0)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            notifier = ZoneNotifier(ZONE, sink, nursery)
            for n in range(1, 4):
                await announce(notifier, n)
                sink.release[f"obj-{n}"].set()
            await notifier.wait_idle()
            nursery.cancel_scope.cancel()
    assert (sink.notified, sorted(sink.prefetched)) == (["obj-1", "obj-2", "obj-3"], [])
