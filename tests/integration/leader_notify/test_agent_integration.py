"""The agent against real moto (S3 over HTTP) and a real Tansu broker, driven by the real sender."""

from __future__ import annotations

import pytest
import trio

from core.audit import MemoryAuditSink
from leader_notify import protocol as p
from leader_notify.sender.sender import NotifySender
from tests.conftest import create_topics, unique_name
from tests.integration.leader_notify.helpers import (
    AgentThread,
    config_for,
    consume,
    new_producer_id,
    put_object,
    wal_entry,
)
from wal_s3.checkpoint_manifest import decode_manifest

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("dummy_aws_credentials")]


@pytest.fixture
def env(s3_bucket, tansu):
    server, bucket = s3_bucket
    topic = unique_name("t")
    create_topics(tansu.bootstrap, {topic: 2})
    audit = MemoryAuditSink()
    # Checkpoint manifests are written when the agent stops (the interval never runs out here).
    base = config_for(server.endpoint_url, bucket, tansu.bootstrap, **{"agent.checkpoint_interval_ms": 600_000})
    agent = AgentThread(base, "az2", audit).start()
    config = config_for(server.endpoint_url, bucket, tansu.bootstrap, agents={"az2": agent.address})
    try:
        yield server.client(), bucket, topic, config, agent, audit
    finally:
        agent.stop()


def values(tag: str, n: int) -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(n)]


@pytest.mark.trio
async def test_many_producers_exactly_once_in_order_offsets_match_consumer(env, tansu):
    s3, bucket, topic, config, agent, audit = env
    pid_a, ep_a = new_producer_id(tansu.bootstrap)
    pid_b, ep_b = new_producer_id(tansu.bootstrap)
    # Object 1: partition 0 gets idempotent A(seq 0,1) and plain P1; partition 1 gets B(seq 0) and plain P2.
    # The az3 share sits before az2's in the object, so az2's range does not start at the header.
    obj1 = put_object(s3, bucket, "wal/aa/obj-1", {
        "az3": [wal_entry(topic, 0, values("other-zone", 2))],
        "az2": [wal_entry(topic, 0, values("a0", 3), pid_a, ep_a, 0),
                wal_entry(topic, 1, values("b0", 2), pid_b, ep_b, 0),
                wal_entry(topic, 0, values("p1", 1)),
                wal_entry(topic, 0, values("a1", 2), pid_a, ep_a, 3),
                wal_entry(topic, 1, values("p2", 4))],
    }, sequence=1)
    obj2 = put_object(s3, bucket, "wal/bb/obj-2", {
        "az2": [wal_entry(topic, 1, values("b1", 1), pid_b, ep_b, 2),
                wal_entry(topic, 0, values("p3", 2))],
    }, sequence=2)
    sender = NotifySender(config.notify, "az1", "proxy-a", 1, audit, bucket=bucket)
    try:
        r1 = await sender.notify(obj1, "az2")
        r2 = await sender.notify(obj2, "az2")
        # Re-sent notifications (the proxy's retry after a lost response) append nothing.
        r1_again = await sender.notify(obj1, "az2")
        r2_again = await sender.notify(obj2, "az2")
    finally:
        await sender.aclose()

    # Partition 0 log: a0 (3 records) @0, p1 @3, a1 @4..5, p3 @6..7. Partition 1: b0 @0..1, p2 @2..5, b1 @6.
    assert [(r.error_code, r.base_offset, r.duplicate) for r in r1] == [
        (0, 0, False), (0, 0, False), (0, 3, False), (0, 4, False), (0, 2, False)]
    assert [(r.error_code, r.base_offset, r.duplicate) for r in r2] == [(0, 6, False), (0, 6, False)]
    assert [(r.error_code, r.base_offset, r.duplicate) for r in r1_again] == [
        (0, 0, True), (0, 0, True), (0, 3, True), (0, 4, True), (0, 2, True)]
    assert [(r.error_code, r.base_offset, r.duplicate) for r in r2_again] == [(0, 6, True), (0, 6, True)]

    assert consume(tansu.bootstrap, topic, 0) == [
        (0, b"a0-0"), (1, b"a0-1"), (2, b"a0-2"), (3, b"p1-0"), (4, b"a1-0"), (5, b"a1-1"),
        (6, b"p3-0"), (7, b"p3-1")]
    assert consume(tansu.bootstrap, topic, 1) == [
        (0, b"b0-0"), (1, b"b0-1"), (2, b"p2-0"), (3, b"p2-1"), (4, b"p2-2"), (5, b"p2-3"), (6, b"b1-0")]

    m = agent.agent.metrics
    assert m.value("azsidecar_agent_entries_appended_total") == 7
    # Both of this release: every connection agreed on the newest protocol version.
    assert m.value("azsidecar_agent_protocol_connections_total", protocol_version=str(p.PROTOCOL_VERSION)) >= 1
    assert m.value("azsidecar_agent_protocol_connections_total", protocol_version=str(p.OLDEST_VERSION)) == 0
    assert m.value("azsidecar_agent_duplicates_total", source="agent") == 7
    notes = audit.of("notification")
    assert [(n["key"], n["entries"], n["status"], n["attempts"]) for n in notes] == [
        ("wal/aa/obj-1", 5, "ok", 1), ("wal/bb/obj-2", 2, "ok", 1),
        ("wal/aa/obj-1", 5, "ok", 1), ("wal/bb/obj-2", 2, "ok", 1)]
    reads = audit.of("agent_read")
    # One GET per object; the re-sent notifications were answered from the applied map (no read).
    assert [(r["key"], r["gets"]) for r in reads] == [("wal/aa/obj-1", 1), ("wal/bb/obj-2", 1)]
    # GC checkpoints: one manifest says az2 applied its share of both objects, each named once
    # although each was notified twice (wal_s3/checkpoint_manifest.py layout).
    agent.stop()  # writes the waiting manifest
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="wal/_checkpoints/").get("Contents", [])]
    assert len(listed) == 1 and listed[0].startswith("wal/_checkpoints/manifests/az2/")
    body = s3.get_object(Bucket=bucket, Key=listed[0])["Body"].read()
    assert decode_manifest(body) == ("az2", ("aa/obj-1", "bb/obj-2"))
    assert [(c["keys"], c["wal_keys"], c["status"]) for c in audit.of("checkpoint_write")] == [
        (2, "wal/aa/obj-1,wal/bb/obj-2", "ok")]


@pytest.mark.trio
async def test_idempotent_resend_after_agent_forgot_is_deduplicated_by_leader(env, tansu):
    s3, bucket, topic, config, agent, audit = env
    pid, ep = new_producer_id(tansu.bootstrap)
    obj = put_object(s3, bucket, "wal/cc/obj-3", {"az2": [wal_entry(topic, 0, values("x", 2), pid, ep, 0)]})
    sender = NotifySender(config.notify, "az1", "proxy-a", 1, audit, bucket=bucket)
    try:
        first = await sender.notify(obj, "az2")
        # Restart the agent: its applied map is gone; the leader must recognise the batch.
        agent.stop()
        agent.start()
        again = await sender.notify(obj, "az2")
    finally:
        await sender.aclose()
    assert [(r.error_code, r.base_offset, r.duplicate) for r in first] == [(0, 0, False)]
    # The leader answered DUPLICATE_SEQUENCE_NUMBER; the agent found the batch in its log at 0.
    assert [(r.error_code, r.base_offset, r.duplicate) for r in again] == [(0, 0, True)]
    assert consume(tansu.bootstrap, topic, 0) == [(0, b"x-0"), (1, b"x-1")]


def _raw_request(obj, bucket: str, request_id: int = 99):
    from leader_notify import protocol as p

    share = obj.zones["az2"]
    return p.NotifyRequest(request_id, "az1", "az2", "proxy-a", 1, bucket, obj.key, share.offset, share.length,
                           tuple(p.NotifyEntry(e.topic, e.partition, e.offset, e.length, e.crc32c, e.record_count,
                                               e.producer_id, e.producer_epoch, e.base_sequence)
                                 for e in share.entries))


@pytest.mark.trio
async def test_wrong_hmac_replay_and_foreign_key_refused_nothing_appended(env, tansu):
    from leader_notify import protocol as p
    from leader_notify.sender.sender import NotifyError
    from tests.integration.leader_notify.agent_process import notify_recording, replay

    s3, bucket, topic, config, agent, audit = env
    obj = put_object(s3, bucket, "wal/dd/obj-4", {"az2": [wal_entry(topic, 0, values("never", 1))]})
    outside = put_object(s3, bucket, "elsewhere/obj-5", {"az2": [wal_entry(topic, 0, values("never", 1))]})
    m = agent.agent.metrics

    # Wrong key: the agent closes the connection at the HELLO; the sender gives up retriably.
    wrong = config.notify.__class__(**{**config.notify.__dict__, "hmac_keys": ("another-key-0123456789",),
                                      "max_attempts": 2})
    bad_sender = NotifySender(wrong, "az1", "proxy-a", 1, audit, bucket=bucket)
    with pytest.raises(NotifyError) as info:
        await bad_sender.notify(obj, "az2")
    assert info.value.retriable
    await bad_sender.aclose()
    # The sender may give up on an attempt (its deadline) before the agent has read that HELLO:
    # wait, bounded, for the agent to have refused both.
    with trio.move_on_after(10):
        while m.value("azsidecar_agent_auth_failures_total", reason="bad_mac") < 2:
            await trio.sleep(0.01)  # polling the agent's counter for a condition, bounded above
    assert m.value("azsidecar_agent_auth_failures_total", reason="bad_mac") == 2

    # Unauthenticated garbage announcing a frame larger than a HELLO: closed before buffering it.
    answered, _ = await trio.to_thread.run_sync(replay, agent.address, b"\x00\x00\x00\x40" + b"\x00" * 64)
    assert not answered
    assert m.value("azsidecar_agent_auth_failures_total", reason="bad_frame") == 1

    # Object outside the configured prefix, and a foreign bucket: refused, not retriable.
    good = NotifySender(config.notify, "az1", "proxy-a", 1, audit, bucket=bucket)
    with pytest.raises(NotifyError) as info:
        await good.notify(outside, "az2")
    assert not info.value.retriable and "FORBIDDEN_KEY" in str(info.value)
    foreign = NotifySender(config.notify, "az1", "proxy-a", 1, audit, bucket="someone-elses-bucket")
    with pytest.raises(NotifyError):
        await foreign.notify(obj, "az2")
    await good.aclose()
    await foreign.aclose()
    assert m.value("azsidecar_agent_auth_failures_total", reason="foreign_key") == 2
    assert m.value("azsidecar_agent_entries_appended_total") == 0
    assert consume(tansu.bootstrap, topic, 0) == []

    # A valid frame is applied once; the same bytes played again on a new connection are refused.
    first, captured = await trio.to_thread.run_sync(notify_recording, agent.address, _raw_request(obj, bucket))
    assert first.status == p.RequestStatus.OK and [r.base_offset for r in first.results] == [0]
    answered, _ = await trio.to_thread.run_sync(replay, agent.address, captured)
    assert not answered
    assert m.value("azsidecar_agent_auth_failures_total", reason="bad_mac") == 3
    assert consume(tansu.bootstrap, topic, 0) == [(0, b"never-0")]


@pytest.mark.trio
async def test_agent_restarted_mid_stream_sender_retries_nothing_lost(env, tansu):
    s3, bucket, topic, config, agent, audit = env
    pid, ep = new_producer_id(tansu.bootstrap)
    objs = [put_object(s3, bucket, f"wal/ee/obj-{i}", {"az2": [
        wal_entry(topic, 0, [f"i{i}".encode()], pid, ep, i), wal_entry(topic, 1, [f"n{i}".encode()])]}, sequence=i)
        for i in range(4)]
    patient = config.notify.__class__(**{**config.notify.__dict__, "max_attempts": 8})
    sender = NotifySender(patient, "az1", "proxy-a", 1, audit, bucket=bucket)
    try:
        results = [await sender.notify(objs[0], "az2"), await sender.notify(objs[1], "az2")]
        agent.stop()  # the pooled connection now leads nowhere

        async def restart_when_sender_retried():
            # Restart only after the sender has seen the agent gone (its attempt counter moved).
            with trio.fail_after(20):
                while sender.metrics.value("azsidecar_notify_attempts_total", dest_zone="az2") < 4:
                    await trio.sleep(0.01)
            await trio.to_thread.run_sync(agent.start)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(restart_when_sender_retried)
            results.append(await sender.notify(objs[2], "az2"))
        results.append(await sender.notify(objs[3], "az2"))
    finally:
        await sender.aclose()
    assert [[(r.error_code, r.base_offset) for r in rs] for rs in results] == [
        [(0, 0), (0, 0)], [(0, 1), (0, 1)], [(0, 2), (0, 2)], [(0, 3), (0, 3)]]
    assert audit.of("notification")[2]["attempts"] >= 2
    assert consume(tansu.bootstrap, topic, 0) == [(i, f"i{i}".encode()) for i in range(4)]
    assert consume(tansu.bootstrap, topic, 1) == [(i, f"n{i}".encode()) for i in range(4)]


@pytest.mark.slow
@pytest.mark.trio
async def test_tansu_restarted_mid_stream_sender_retries_nothing_lost(s3_bucket, tansu_shared_bucket):
    server, bucket = s3_bucket
    (broker,) = tansu_shared_bucket(1)  # S3-backed: the log survives the restart
    topic = unique_name("r")
    create_topics(broker.bootstrap, {topic: 1})
    pid, ep = new_producer_id(broker.bootstrap)
    audit = MemoryAuditSink()
    agent = AgentThread(config_for(server.endpoint_url, bucket, broker.bootstrap), "az2", audit).start()
    config = config_for(server.endpoint_url, bucket, broker.bootstrap, agents={"az2": agent.address},
                        **{"notify.max_attempts": 10})
    s3 = server.client()
    objs = [put_object(s3, bucket, f"wal/ff/obj-{i}", {"az2": [
        wal_entry(topic, 0, [f"i{i}".encode()], pid, ep, i), wal_entry(topic, 0, [f"n{i}".encode()])]}, sequence=i)
        for i in range(4)]
    sender = NotifySender(config.notify, "az1", "proxy-a", 1, audit, bucket=bucket)
    try:
        results = [await sender.notify(objs[0], "az2"), await sender.notify(objs[1], "az2")]
        await trio.to_thread.run_sync(broker.stop)

        async def restart_when_agent_gave_up():
            # The sender re-sends only after the agent answered with retriable entry errors.
            with trio.fail_after(60):
                while sender.metrics.value("azsidecar_notify_attempts_total", dest_zone="az2") < 4:
                    await trio.sleep(0.05)
            await trio.to_thread.run_sync(broker.start)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(restart_when_agent_gave_up)
            results.append(await sender.notify(objs[2], "az2"))
        results.append(await sender.notify(objs[3], "az2"))
    finally:
        await sender.aclose()
        agent.stop()
    assert [[(r.error_code, r.base_offset) for r in rs] for rs in results] == [
        [(0, 0), (0, 1)], [(0, 2), (0, 3)], [(0, 4), (0, 5)], [(0, 6), (0, 7)]]
    assert agent.agent.metrics.value("azsidecar_agent_append_errors_total", error_code="13") >= 1
    assert consume(broker.bootstrap, topic, 0) == [
        (0, b"i0"), (1, b"n0"), (2, b"i1"), (3, b"n1"), (4, b"i2"), (5, b"n2"), (6, b"i3"), (7, b"n3")]


@pytest.mark.trio
async def test_objects_from_real_wal_writer_are_applied_with_matching_offsets(env, tansu):
    from wal_s3.s3 import make_s3_client
    from wal_s3.writer import WalWriter

    s3, bucket, topic, config, agent, audit = env
    pid, ep = new_producer_id(tansu.bootstrap)
    entries = [wal_entry(topic, i % 2, [f"w{i}".encode()], pid if i % 2 == 0 else -1, ep if i % 2 == 0 else -1,
                         i // 2 if i % 2 == 0 else -1) for i in range(6)]
    placements = {}

    async def put(i, task_status=trio.TASK_STATUS_IGNORED):
        placements[i] = await writer.append(entries[i], "az2", task_status=task_status)

    writer = WalWriter(config.wal, "az1", "proxy-a", make_s3_client(config.wal), audit)
    async with writer.running():
        async with trio.open_nursery() as nursery:
            for i in range(6):
                await nursery.start(put, i)  # buffered in this order
    flushed = {p.flushed.sequence: p.flushed for p in placements.values()}
    sender = NotifySender(config.notify, "az1", "proxy-a", writer.epoch, audit, bucket=bucket)
    results = {}
    try:
        for seq in sorted(flushed):
            results[flushed[seq].key] = await sender.notify(flushed[seq], "az2")
    finally:
        await sender.aclose()
    offsets = [results[placements[i].key][placements[i].entry_index_in_zone].base_offset for i in range(6)]
    assert offsets == [0, 0, 1, 1, 2, 2]  # partition 0 gets entries 0,2,4; partition 1 gets 1,3,5
    assert consume(tansu.bootstrap, topic, 0) == [(0, b"w0"), (1, b"w2"), (2, b"w4")]
    assert consume(tansu.bootstrap, topic, 1) == [(0, b"w1"), (1, b"w3"), (2, b"w5")]


@pytest.mark.trio
async def test_prefetch_reads_into_the_cache_and_appends_nothing(env, tansu):
    s3, bucket, topic, config, agent, audit = env
    obj = put_object(s3, bucket, "wal/pf/obj-1", {"az2": [wal_entry(topic, 0, values("pf", 2))]})
    sender = NotifySender(config.notify, "az1", "proxy-a", 1, audit, bucket=bucket)
    assert await sender.prefetch(obj, "az2")
    assert consume(tansu.bootstrap, topic, 0) == []  # read, not appended
    results = await sender.notify(obj, "az2")
    await sender.aclose()
    assert [(r.error_code, r.base_offset) for r in results] == [(0, 0)]
    agent.stop()  # its agent_apply record follows the answer: stopped, the agent has written it
    reads = [(r["key"], r["cache_hits"], r["cache_misses"]) for r in audit.of("agent_read")]
    assert reads == [("wal/pf/obj-1", 0, 1), ("wal/pf/obj-1", 1, 0)]  # the notification found it cached
    assert [r["key"] for r in audit.of("agent_apply")] == ["wal/pf/obj-1"]  # the prefetch applied nothing
    assert consume(tansu.bootstrap, topic, 0) == [(0, b"pf-0"), (1, b"pf-1")]
    # Both round trips crossed zones and are billed; the prefetch lists no entries, so its
    # request is smaller than the notification's (which names its batch).
    notes = {r["status"]: r for r in audit.of("notification")}
    assert set(notes) == {"prefetch", "ok"}
    assert (notes["prefetch"]["entries"], notes["ok"]["entries"]) == (0, 1)
    assert 0 < notes["prefetch"]["request_bytes"] < notes["ok"]["request_bytes"]
    assert notes["prefetch"]["response_bytes"] > 0
