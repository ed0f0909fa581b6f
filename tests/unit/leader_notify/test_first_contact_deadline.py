"""A notification naming a partition new to its agent is not a gray failure (first_contact.py).

Found on Apache Kafka (deploy/local's cluster, replica.fetch.wait.max.ms 5000): the agent's
first append to a topic created a moment before took 4.85 s, because the leader answered
acks=all only once its followers had started fetching the new partition; the sender, warm on
another topic (deadline: the 1 s floor), abandoned it as gray and the zone's traffic went direct.

The real NotifySender (and, pipelined, the real Pipeline under a ZoneNotifier) talks to a
fake agent over a socketpair, on trio's virtual clock: each entry takes 10 ms, but the first
append of a partition takes 5 s; or the agent never answers once it hangs. Default notify
settings: timeout_s 10, gray_floor_s 1.0, gray_max_s 1.5, backoff_initial_s 0.2.
"""

from __future__ import annotations

import pytest
import trio

from leader_notify import protocol as p
from leader_notify.sender.notifier import ZoneNotifier
from leader_notify.sender.sender import NotifyError
from tests.unit.leader_notify.test_gray_deadline_by_work import ZONE, FakeAgent, Flushed, Ref, Share, sender_with

pytestmark = pytest.mark.trio

WARM_S = 0.01  # an append to a partition the leader's followers already fetch
FIRST_APPEND_S = 5.0  # the first append of a partition: the followers' fetch wait


def notification(key: str, topic: str, partition: int = 0) -> Flushed:
    return Flushed(key, {ZONE: Share(0, 1024, (Ref(partition=partition, offset=64, length=960, topic=topic),))}, {})


class FirstAppendAgent(FakeAgent):
    """Answers each notification's entries OK, one notification at a time: WARM_S per entry,
    FIRST_APPEND_S for a partition it has not appended before; nothing while `hung`."""

    def __init__(self) -> None:
        super().__init__()
        self._appended: set[tuple[str, int]] = set()

    async def append(self, request: p.NotifyRequest) -> tuple[p.EntryResult, ...]:
        for entry in request.entries:
            tp = (entry.topic, entry.partition)
            await trio.sleep(WARM_S if tp in self._appended else FIRST_APPEND_S)
            self._appended.add(tp)
        return tuple(p.EntryResult(0, 0) for _ in request.entries)


async def warm_up(sender, agent: FirstAppendAgent) -> None:
    """Twenty answers for topic "warm": the deadline is the 1 s floor from then on."""
    for n in range(20):
        await sender.notify(notification(f"wal/warm-{n}", "warm"), ZONE)
    assert sender.guard(ZONE).attempt_timeout_s(trio.current_time()) == 1.0


async def test_a_new_topics_first_notification_waits_for_its_first_append(autojump_clock):
    agent = FirstAppendAgent()
    async with trio.open_nursery() as nursery:
        sender, reported = sender_with(agent, nursery)
        await warm_up(sender, agent)
        started = trio.current_time()
        results = await sender.notify(notification("wal/fresh-0", "fresh"), ZONE)
        assert trio.current_time() - started == pytest.approx(FIRST_APPEND_S, abs=0.01)  # one attempt
        assert [r.error_code for r in results] == [0]
        assert reported == [] and not sender.guard(ZONE).gray
        assert len(agent.requests) == 21
        # known now, and the 5 s were not kept: the deadline is still the floor
        assert sender.guard(ZONE).attempt_timeout_s(trio.current_time()) == 1.0
        agent.hung = True
        started = trio.current_time()
        with pytest.raises(NotifyError):
            await sender.notify(notification("wal/fresh-1", "fresh"), ZONE)
        # attempt and hedge at the floor x 1.0176 units (1 + 1/64 entries + 1 KiB/8 MiB), 0.2 s between
        units = 1 + 1 / 64 + 1024 / (8 * 1024 * 1024)
        assert trio.current_time() - started == pytest.approx(2 * 1.0 * units + 0.2, abs=0.01)
        assert reported == [ZONE, ZONE]
        await sender.aclose()
        nursery.cancel_scope.cancel()


async def test_a_hung_agent_is_abandoned_at_timeout_s_on_a_first_contact_then_at_the_gray_deadline(autojump_clock):
    """The price: a hang first met by a notification of a new partition costs it timeout_s
    (10 s); its hedge, a gray place's, the plain deadline; the next one is refused at once."""
    agent = FirstAppendAgent()
    async with trio.open_nursery() as nursery:
        sender, reported = sender_with(agent, nursery)
        await warm_up(sender, agent)
        agent.hung = True
        started = trio.current_time()
        with pytest.raises(NotifyError):
            await sender.notify(notification("wal/fresh-0", "fresh"), ZONE)
        units = 1 + 1 / 64 + 1024 / (8 * 1024 * 1024)
        assert trio.current_time() - started == pytest.approx(10.0 + 0.2 + 1.0 * units, abs=0.01)
        assert reported == [ZONE, ZONE]
        started = trio.current_time()
        with pytest.raises(NotifyError) as info:
            await sender.notify(notification("wal/fresh-1", "other"), ZONE)  # a probe went out just now
        assert trio.current_time() - started == pytest.approx(0.0, abs=0.01)
        assert "not sent" in str(info.value)
        await sender.aclose()
        nursery.cancel_scope.cancel()


async def test_pipelined_a_notification_behind_a_first_contact_is_not_abandoned(autojump_clock):
    """Ordered on one connection, the agent answers the warm topic's object after the new
    topic's first append (5 s): it waits for that one, so it is a first contact too."""
    agent = FirstAppendAgent()
    async with trio.open_nursery() as nursery:
        sender, reported = sender_with(agent, nursery, **{"notify.pipeline_depth": 4})
        await warm_up(sender, agent)
        notifier = ZoneNotifier(ZONE, sender, nursery)
        answers: dict[str, object] = {}
        done = trio.Event()
        started = trio.current_time()
        objects = (notification("wal/fresh-0", "fresh"), notification("wal/warm-20", "warm"))
        for flushed in objects:
            notifier.announce(flushed)
        for flushed in objects:
            notifier.on_result(flushed.key, lambda value, key=flushed.key: (
                answers.__setitem__(key, value), len(answers) == 2 and done.set()))
        with trio.fail_after(30):
            await done.wait()
        assert trio.current_time() - started == pytest.approx(FIRST_APPEND_S + WARM_S, abs=0.01)
        for key in ("wal/fresh-0", "wal/warm-20"):
            value = answers[key]
            assert isinstance(value, list) and [r.error_code for r in value] == [0]
        assert [(r.key, r.ordered) for r in agent.requests[20:]] == [("wal/fresh-0", True), ("wal/warm-20", True)]
        assert reported == []
        await notifier.wait_idle()
        await sender.aclose()
        nursery.cancel_scope.cancel()
