"""A captured notification is useless anywhere else (protocol v2, issue 17): replayed on a new
connection, to another agent of the zone, and to the same agent after SIGTERM and after
kill -9, it is refused and nothing is appended. Real parts: moto over HTTP, a Tansu
broker, agents as `azsidecar agent` processes; the topic is read back from the broker."""

from __future__ import annotations

import signal

import pytest

from leader_notify import protocol as p
from tests.conftest import create_topics, unique_name
from tests.integration.leader_notify.agent_process import AgentProcess, notify_recording, replay
from tests.integration.leader_notify.helpers import consume, put_object, wal_entry

pytestmark = [pytest.mark.integration]


def request_for(obj, bucket: str) -> p.NotifyRequest:
    share = obj.zones["az2"]
    return p.NotifyRequest(7, "az1", "az2", "proxy-a", 1, bucket, obj.key, share.offset, share.length,
                           tuple(p.NotifyEntry(e.topic, e.partition, e.offset, e.length, e.crc32c, e.record_count,
                                               e.producer_id, e.producer_epoch, e.base_sequence)
                                 for e in share.entries))


@pytest.fixture
def agents(s3_bucket, tansu, tmp_path):
    server, bucket = s3_bucket
    made: list[AgentProcess] = []

    def make(name: str) -> AgentProcess:
        a = AgentProcess(tmp_path, name, "az2", endpoint_url=server.endpoint_url, bucket=bucket,
                         bootstrap=tansu.bootstrap)
        made.append(a)
        return a.start()

    try:
        yield server.client(), bucket, make
    finally:
        for a in made:
            a.stop(signal.SIGKILL)


def test_captured_frame_refused_elsewhere_and_after_restarts_nothing_appended(agents, tansu):
    s3, bucket, make = agents
    topic = unique_name("replay")
    create_topics(tansu.bootstrap, {topic: 1})
    # Not idempotent: only the agent can keep a replay from appending it twice.
    obj = put_object(s3, bucket, "wal/rp/obj-1", {"az2": [wal_entry(topic, 0, [b"once"])]})
    first, second = make("agent-1"), make("agent-2")

    response, captured = notify_recording(first.address, request_for(obj, bucket))
    assert response.status == p.RequestStatus.OK and [(r.error_code, r.base_offset) for r in response.results] == [
        (0, 0)]

    # The same bytes on a new connection to the same agent, and to the zone's other agent.
    for target in (first, second):
        answered, _ = replay(target.address, captured)
        assert not answered, f"{target.name} answered a replayed frame"

    # The same agent after a graceful restart, then after kill -9 (the captured frame is resent
    # to the address it was sent to; the new process draws new challenges).
    for sig in (signal.SIGTERM, signal.SIGKILL):
        first.stop(sig)
        first.start()
        answered, _ = replay(first.address, captured)
        assert not answered, f"the agent restarted after {sig.name} answered a replayed frame"

    for target in (first, second):
        assert "bad MAC, replayed frame or unknown key id" in target.log_text()
    assert consume(tansu.bootstrap, topic, 0) == [(0, b"once")]
