"""A notification's gray deadline scales with its work (wal_s3/latency.py, "Work").

Found on Apache Kafka (three nodes, RF 3, `bench/bench_agent.py --partitions 512`): the
sender abandoned notifications at the gray deadline (3 x notify.gray_max_s = 4.5 s before
five answers, 1.5 s at most after) while the agent was still, healthily, appending an 8 MiB
object across 512 partitions.

The real NotifySender (and, pipelined, the real Pipeline under a ZoneNotifier) talks to a
fake agent over a socketpair, on trio's virtual clock: the agent answers each notification
after 6 s x entries / 512 of work (512 entries: 6 s; 1 entry: 11.7 ms), one at a time in
arrival order, or never once it hangs. Default notify settings: timeout_s 10, gray_floor_s
1.0, gray_max_s 1.5, gray_factor 3, backoff_initial_s 0.2, gray_unit_entries 64,
gray_unit_bytes 8 MiB.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

import pytest
import trio

from azsidecar.config import load_config
from core.audit import MemoryAuditSink
from leader_notify import protocol as p
from leader_notify.sender.notifier import ZoneNotifier
from leader_notify.sender.sender import NotifyError, NotifySender

pytestmark = pytest.mark.trio

KEY = "gray-work-test-key-0123456789"
ZONE = "az2"
MiB = 1024 * 1024
SECONDS_PER_ENTRY = 6.0 / 512  # a healthy agent on slow brokers: 512 partitions' batches in 6 s


@dataclass(frozen=True)
class Ref:
    partition: int
    offset: int
    length: int
    topic: str = "t"
    crc32c: int = 1
    record_count: int = 1
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1


@dataclass(frozen=True)
class Share:
    offset: int
    length: int
    entries: tuple[Ref, ...]


@dataclass(frozen=True)
class Flushed:
    key: str
    zones: dict[str, Share]
    share_runs: dict[str, tuple[tuple[int, int, int], ...]]


def wal_object(key: str, partitions: int, batch_bytes: int = 16 * 1024) -> Flushed:
    """One batch of `batch_bytes` per partition: 512 partitions make the 8 MiB object."""
    head = 64  # room for each entry's head before its batch
    refs = tuple(Ref(partition=n, offset=n * batch_bytes + head, length=batch_bytes - head) for n in range(partitions))
    return Flushed(key, {ZONE: Share(0, partitions * batch_bytes, refs)}, {})


BIG = wal_object("wal/big", 512)  # 8 MiB, 512 entries: 1 + 512/64 + 8 MiB/8 MiB = 10 units
SMALL = wal_object("wal/small", 1)  # 16 KiB, 1 entry: 1 + 1/64 + 16 KiB/8 MiB = 1.017578125 units


class FakeAgent:
    """Answers every entry OK after SECONDS_PER_ENTRY per entry, one notification at a time;
    while `hung`, reads and never answers (a SIGSTOPped agent's kernel still takes bytes)."""

    def __init__(self) -> None:
        self.hung = False
        self.requests: list[p.NotifyRequest] = []

    async def serve(self, stream: trio.SocketStream) -> None:
        channel = p.Channel(p.Keyring([KEY.encode()]), p.Role.AGENT, os.urandom(p.CHALLENGE_BYTES))
        async with stream:
            try:
                while not channel.established:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    channel.receive_data(data)
                    assert channel.next_frame() is None  # takes the proxy's HELLO in
                await stream.send_all(channel.hello())
                while data := await stream.receive_some(65536):
                    channel.receive_data(data)
                    while (frame := channel.next_frame()) is not None:
                        request = p.decode_request(frame.payload)
                        self.requests.append(request)
                        if self.hung:
                            continue
                        results = await self.append(request)
                        response = p.NotifyResponse(request.request_id, p.RequestStatus.OK, "", results)
                        await stream.send_all(channel.send(p.MessageType.RESPONSE, p.encode_response(response)))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return  # the sender closed the connection (an abandoned attempt)

    async def append(self, request: p.NotifyRequest) -> tuple[p.EntryResult, ...]:
        """The appends' work for `request` and their results (each entry OK)."""
        await trio.sleep(SECONDS_PER_ENTRY * len(request.entries))
        return tuple(p.EntryResult(0, n) for n in range(len(request.entries)))


def sender_with(agent: FakeAgent, nursery: trio.Nursery, **settings: object) -> tuple[NotifySender, list[str]]:
    """A NotifySender whose connections to the agent are socketpairs served by `agent`;
    also the zones it reported gray, in order."""
    async def open_stream(host: str, port: int) -> trio.SocketStream:
        ours, theirs = socket.socketpair()  # no network: the unit tier allows socketpairs
        nursery.start_soon(agent.serve, trio.SocketStream(trio.socket.from_stdlib_socket(theirs)))
        return trio.SocketStream(trio.socket.from_stdlib_socket(ours))

    config = load_config(None, {"wal.bucket": "bkt", "wal.region": "us-east-1", "notify.hmac_keys": [KEY],
                                "notify.agents": {ZONE: "10.0.2.5:9400"}, **settings}).notify
    reported: list[str] = []
    sender = NotifySender(config, "az1", "proxy", 1, MemoryAuditSink(), bucket="bkt", open_stream=open_stream,
                          on_gray=lambda zone, agent: reported.append(zone))
    return sender, reported


@pytest.mark.parametrize("warm_answers", [0, 20])  # cold (no deadline learnt) and warm (20 quick answers)
async def test_a_healthy_agent_taking_6_s_for_512_entries_is_not_abandoned(autojump_clock, warm_answers):
    agent = FakeAgent()
    async with trio.open_nursery() as nursery:
        sender, reported = sender_with(agent, nursery)
        for _ in range(warm_answers):
            await sender.notify(SMALL, ZONE)
        started = trio.current_time()
        results = await sender.notify(BIG, ZONE)
        # 6 s of work, one attempt: the deadline for 10 units is timeout_s (10 s), whether
        # cold (10 x 4.5 s) or warm (10 x the 1 s floor). It was 4.5 s cold, 1 s warm.
        assert trio.current_time() - started == pytest.approx(6.0, abs=0.01)
        assert len(results) == 512 and all(r.error_code == 0 for r in results)
        assert reported == [] and not sender.guard(ZONE).gray
        assert len(agent.requests) == warm_answers + 1  # no second attempt
        await sender.aclose()
        nursery.cancel_scope.cancel()


async def test_a_hung_agent_is_still_abandoned_promptly_for_a_small_notification(autojump_clock):
    agent = FakeAgent()
    async with trio.open_nursery() as nursery:
        sender, reported = sender_with(agent, nursery)
        for _ in range(20):
            await sender.notify(SMALL, ZONE)
        await sender.notify(BIG, ZONE)  # 511 partitions new to the agent: a first contact, not kept
        await sender.notify(BIG, ZONE)  # a slow, healthy answer in the history: 0.6 s per unit
        agent.hung = True
        started = trio.current_time()
        with pytest.raises(NotifyError) as info:
            await sender.notify(SMALL, ZONE)
        # Per unit: 3 x p99 (0.6 s) = 1.8 s, at most gray_max_s 1.5 s; the 1-entry notification
        # is 1.017578125 units: 1.526 s. Its attempt and its hedge, the 0.2 s backoff between.
        assert trio.current_time() - started == pytest.approx(2 * 1.5 * 1.017578125 + 0.2, abs=0.01)
        assert info.value.retriable and "gray deadline" in str(info.value)
        assert reported == [ZONE, ZONE]
        await sender.aclose()
        nursery.cancel_scope.cancel()


async def test_a_hung_agent_is_abandoned_at_timeout_s_for_a_512_entry_notification(autojump_clock):
    agent = FakeAgent()
    async with trio.open_nursery() as nursery:
        sender, reported = sender_with(agent, nursery)
        for _ in range(20):
            await sender.notify(SMALL, ZONE)
        agent.hung = True
        started = trio.current_time()
        with pytest.raises(NotifyError):
            await sender.notify(BIG, ZONE)
        # 10 units x the 1 s floor = 10 s, and timeout_s is 10 s: attempt, 0.2 s, hedge.
        assert trio.current_time() - started == pytest.approx(10.0 + 0.2 + 10.0, abs=0.01)
        assert reported == [ZONE, ZONE]
        await sender.aclose()
        nursery.cancel_scope.cancel()


async def test_pipelined_a_small_object_behind_a_512_entry_one_is_not_abandoned(autojump_clock):
    """Ordered on one connection, the agent answers the small object after the big one (6 s):
    its deadline counts the work ahead of it (1.018 + 10 units: timeout_s), so neither is
    abandoned nor re-sent serially."""
    agent = FakeAgent()
    async with trio.open_nursery() as nursery:
        sender, reported = sender_with(agent, nursery, **{"notify.pipeline_depth": 4})
        notifier = ZoneNotifier(ZONE, sender, nursery)
        answers: dict[str, object] = {}
        done = trio.Event()
        started = trio.current_time()
        for flushed in (BIG, SMALL):
            notifier.announce(flushed)
        for flushed in (BIG, SMALL):
            for _ in flushed.zones[ZONE].entries:  # every entry asks for its result once
                notifier.on_result(flushed.key, lambda value, key=flushed.key: (
                    answers.__setitem__(key, value), len(answers) == 2 and done.set()))
        with trio.fail_after(30):
            await done.wait()
        assert trio.current_time() - started == pytest.approx(6.0 + SECONDS_PER_ENTRY, abs=0.01)
        for key, entries in (("wal/big", 512), ("wal/small", 1)):
            value = answers[key]
            assert isinstance(value, list) and len(value) == entries and all(r.error_code == 0 for r in value)
        assert [(r.key, r.ordered) for r in agent.requests] == [("wal/big", True), ("wal/small", True)]
        assert reported == []
        await notifier.wait_idle()
        await sender.aclose()
        nursery.cancel_scope.cancel()
