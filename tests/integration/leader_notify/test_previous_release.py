"""A rolling upgrade, both ways, with the previous release's code (notify protocol N-1, from
this checkout's git history: previous_release.py) against this one's (N).

- This release's proxy (NotifySender, ZoneNotifier with pipelining on) notifies an agent of
  the previous release: it offers N, the old agent refuses it as it always did (its HELLO
  says N-1, then it closes), the proxy reconnects speaking N-1 and sends the objects one at
  a time (no ordered requests on N-1), with a log line and a metric.
- The previous release's proxy, pipelining, notifies this release's agent: the agent answers
  in N-1 and accepts its ordered requests.

Real parts: moto over HTTP, a Tansu broker, the old agent as an `azsidecar agent` process;
the topic is read back from the broker."""

from __future__ import annotations

import logging
import signal

import pytest
import trio

from core.audit import MemoryAuditSink
from leader_notify import protocol as p
from leader_notify.sender.notifier import ZoneNotifier
from leader_notify.sender.sender import NotifySender
from tests.conftest import create_topics, unique_name
from tests.integration.leader_notify.agent_process import AgentProcess
from tests.integration.leader_notify.helpers import AgentThread, config_for, consume, put_object, wal_entry
from tests.integration.leader_notify.previous_release import extract_previous_release, run_old_proxy

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180), pytest.mark.usefixtures("dummy_aws_credentials")]

ZONE = "az2"
NOTIFY_TIMEOUT_S = 60.0
OLD_AGENT_READY_S = 90.0  # the default 30 s ran out under a load average of 48 (2026-11-29); ~3 s unloaded


@pytest.fixture(scope="module")
def previous_tree(tmp_path_factory):
    return extract_previous_release(tmp_path_factory.mktemp("previous-release"))


def three_objects(s3, bucket: str, topic: str, tag: str) -> list:
    """Object 1: a, b; object 2: c; object 3: d, e (one record each, partition 0)."""
    layout = [["a", "b"], ["c"], ["d", "e"]]
    return [put_object(s3, bucket, f"wal/{tag}/obj-{n}",
                       {ZONE: [wal_entry(topic, 0, [f"{tag}-{v}".encode()]) for v in values]}, sequence=n)
            for n, values in enumerate(layout, start=1)]


@pytest.mark.trio
async def test_this_proxy_falls_back_to_the_previous_version_for_an_old_agent(previous_tree, s3_bucket, tansu,
                                                                             tmp_path, caplog):
    server, bucket = s3_bucket
    topic = unique_name("compat-new-proxy")
    create_topics(tansu.bootstrap, {topic: 1})
    old_agent = AgentProcess(tmp_path, "old-agent", ZONE, endpoint_url=server.endpoint_url, bucket=bucket,
                             bootstrap=tansu.bootstrap, source=previous_tree,
                             ready_timeout_s=OLD_AGENT_READY_S)
    objects = three_objects(server.client(), bucket, topic, "np")
    audit = MemoryAuditSink()
    try:
        old_agent.start()
        config = config_for(server.endpoint_url, bucket, tansu.bootstrap, agents={ZONE: old_agent.address},
                            **{"notify.pipeline_depth": 4})
        sender = NotifySender(config.notify, "az1", "proxy-new", 1, audit, bucket=bucket)
        got: dict[str, object] = {}
        try:
            with caplog.at_level(logging.INFO, logger="leader_notify.sender"), trio.fail_after(NOTIFY_TIMEOUT_S):
                async with trio.open_nursery() as nursery:
                    notifier = ZoneNotifier(ZONE, sender, nursery)
                    for flushed in objects:
                        notifier.announce(flushed)
                        for _ in flushed.zones[ZONE].entries:
                            notifier.on_result(flushed.key, lambda v, k=flushed.key: got.__setitem__(k, v))
                    await notifier.wait_idle()
                    nursery.cancel_scope.cancel()
        finally:
            await sender.aclose()
    finally:
        old_agent.stop(signal.SIGTERM)

    # Offsets 0..4 in object order: a, b | c | d, e.
    assert {k: [(r.error_code, r.base_offset) for r in v] for k, v in got.items()} == {
        "wal/np/obj-1": [(0, 0), (0, 1)], "wal/np/obj-2": [(0, 2)], "wal/np/obj-3": [(0, 3), (0, 4)]}
    assert consume(tansu.bootstrap, topic, 0) == [
        (0, b"np-a"), (1, b"np-b"), (2, b"np-c"), (3, b"np-d"), (4, b"np-e")]
    m = sender.metrics.registry.get_sample_value
    # The pipeline's connection and the serial path's pooled one, both in v3; no v4 connection.
    assert m("azsidecar_notify_protocol_connections_total", {"dest_zone": ZONE, "protocol_version": "3"}) == 2
    assert m("azsidecar_notify_protocol_connections_total", {"dest_zone": ZONE, "protocol_version": "4"}) is None
    assert m("azsidecar_notify_pipelining_off_total", {"dest_zone": ZONE, "reason": "agent_protocol"}) == 1
    assert "pipelining to az2/0 is off: the agent speaks notify protocol v3" in caplog.text
    # The old agent refused the v4 offer as that release does (its log line is rate-limited
    # to one a minute per source; test_sender.py shows the proxy offering 3 straight away after).
    assert old_agent.log_text().count(f"unsupported protocol version {p.PROTOCOL_VERSION}; closing") == 1
    assert [(n["key"], n["status"]) for n in audit.of("notification")] == [
        ("wal/np/obj-1", "ok"), ("wal/np/obj-2", "ok"), ("wal/np/obj-3", "ok")]


def test_a_previous_release_proxy_pipelines_to_this_agent(previous_tree, s3_bucket, tansu):
    server, bucket = s3_bucket
    topic = unique_name("compat-old-proxy")
    create_topics(tansu.bootstrap, {topic: 1})
    objects = three_objects(server.client(), bucket, topic, "op")
    agent = AgentThread(config_for(server.endpoint_url, bucket, tansu.bootstrap), ZONE, MemoryAuditSink()).start()
    try:
        report = run_old_proxy(previous_tree, zone=ZONE, agent=agent.address, bucket=bucket, objects=objects)
        metrics = agent.agent.metrics
        v3_connections = metrics.value("azsidecar_agent_protocol_connections_total", protocol_version="3")
        v4_connections = metrics.value("azsidecar_agent_protocol_connections_total", protocol_version="4")
        malformed = metrics.value("azsidecar_agent_notifications_total", outcome="malformed")
    finally:
        agent.stop()
    assert report["results"] == {"wal/op/obj-1": [[0, 0], [0, 1]], "wal/op/obj-2": [[0, 2]],
                                 "wal/op/obj-3": [[0, 3], [0, 4]]}
    # Every object went pipelined (flagged ordered) and each answer applied every entry.
    assert report["piped"] == [True, True, True]
    assert (v3_connections, v4_connections, malformed) == (1, 0, 0)
    assert consume(tansu.bootstrap, topic, 0) == [
        (0, b"op-a"), (1, b"op-b"), (2, b"op-c"), (3, b"op-d"), (4, b"op-e")]
