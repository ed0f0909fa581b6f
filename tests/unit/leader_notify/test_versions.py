"""Which version a proxy offers each agent (leader_notify/sender/versions.py, pure), and a
pipeline that finds its agent speaking the previous version (fake sender above the sockets)."""

from __future__ import annotations

import types

import pytest
import trio

from leader_notify.metrics import SenderMetrics
from leader_notify.sender.pipeline import Pipeline
from leader_notify.sender.sender import NotifyError
from leader_notify.sender.versions import AgentVersions

A, B = "10.0.2.5:9400", "10.0.2.6:9400"


def test_a_new_address_is_offered_the_newest_version():
    v = AgentVersions(recheck_s=300)
    assert v.offer(A, now=0.0) == 4
    assert v.pipelining_allowed(A, now=0.0)


def test_an_agent_that_asked_for_3_is_offered_3_until_the_recheck_then_4_again():
    v = AgentVersions(recheck_s=300)
    v.answered(A, offered=4, version=3, now=100.0)  # a version-3 agent made us reconnect
    assert [v.offer(A, now=t) for t in (100.0, 399.9)] == [3, 3]
    assert not v.pipelining_allowed(A, now=200.0)
    assert v.offer(B, now=200.0) == 4  # per address
    assert v.offer(A, now=400.0) == 4  # 100 + 300: offer the newest again
    assert v.pipelining_allowed(A, now=400.0)


def test_only_an_offer_of_the_newest_version_teaches_anything():
    v = AgentVersions(recheck_s=300)
    v.answered(A, offered=4, version=3, now=0.0)
    # A connection that offered 3 is answered 3 by old and upgraded agents alike: it neither
    # extends nor ends what we know.
    v.answered(A, offered=3, version=3, now=250.0)
    assert v.offer(A, now=300.0) == 4
    v.answered(A, offered=4, version=3, now=300.0)
    v.answered(A, offered=4, version=4, now=310.0)  # upgraded (a 4 answer to a 4 offer)
    assert v.offer(A, now=310.0) == 4


class _Socket:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


class _Sender:
    """What a Pipeline needs of the sender; its connection negotiated `version`."""

    timeout_s = 5.0
    max_idle_s = 300.0
    on_gray = None

    def __init__(self, version: int) -> None:
        self.metrics = SenderMetrics()
        self.socket = _Socket()
        self.version = version
        self.sent: list[bytes] = []

    def guard(self, zone, agent=0):
        raise AssertionError("nothing is sent on a version-3 connection")

    def agent_address(self, dest_zone, agent):
        return "10.0.2.5:9400"

    def first_contact(self, address, request):
        raise AssertionError("nothing is sent on a version-3 connection")

    def answered(self, address, request, response):
        raise AssertionError("no pipelined notification was sent")

    def pipelining_allowed(self, dest_zone, agent):
        return True

    def encode_ordered(self, flushed, dest_zone, agent):
        return types.SimpleNamespace(request_id=1, key=flushed.key, entries=()), b"payload"

    async def connect(self, dest_zone, agent):
        channel = types.SimpleNamespace(version=self.version)
        return types.SimpleNamespace(channel=channel, stream=types.SimpleNamespace(socket=self.socket))

    def record(self, *args, **kwargs):
        raise AssertionError("no pipelined notification was sent")


@pytest.mark.trio
async def test_a_pipeline_to_a_version_3_agent_sends_nothing_ordered_and_says_so(caplog):
    sender = _Sender(version=3)
    got: list[object] = []
    async with trio.open_nursery() as nursery:
        pipe = Pipeline(sender, "use1-az2", 0, nursery)
        with caplog.at_level("WARNING", logger="leader_notify.sender.pipeline"):
            await pipe.send(types.SimpleNamespace(key="wal/k"), got.append)
    assert len(got) == 1 and isinstance(got[0], NotifyError)
    assert "not pipelined, the agent speaks notify protocol v3" in str(got[0])
    assert sender.socket.closed and pipe.in_flight == 0
    assert sender.metrics.registry.get_sample_value(
        "azsidecar_notify_pipelining_off_total", {"dest_zone": "use1-az2", "reason": "agent_protocol"}) == 1
    assert "notification pipelining to use1-az2/0 is off: the agent speaks notify protocol v3" in caplog.text
