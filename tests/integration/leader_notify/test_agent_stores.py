"""The agent on both WAL stores: one S3 Standard bucket on moto, and S3 Express One Zone
directory buckets (one per zone) behind deploy/local/s3_express.py. A real WAL writer in az1,
the real sender, a real agent in az2 and a real Tansu broker."""

from __future__ import annotations

import pytest
import trio

from core.audit import MemoryAuditSink
from deploy.local.s3_express import create_directory_bucket
from leader_notify.sender.sender import NotifyError, NotifySender
from tests.conftest import create_topics, unique_name
from tests.integration.leader_notify.helpers import AgentThread, config_for, consume, new_producer_id, wal_entry
from wal_s3.checkpoint_manifest import decode_manifest
from wal_s3.s3 import make_s3_client
from wal_s3.writer import WalWriter

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("dummy_aws_credentials")]
ZONES = ("az1", "az2", "az3")


@pytest.fixture(params=["standard", "express"])
def store_env(request, moto_server, tansu):
    """(config, agent thread, audit, topic) for a store: plain moto, or the Express front."""
    base = unique_name("wal")
    if request.param == "express":
        endpoint = request.getfixturevalue("express_front")
        for zone in ZONES:
            create_directory_bucket(("127.0.0.1", moto_server.port), f"{base}--{zone}--x-s3")
    else:
        endpoint = moto_server.endpoint_url
        moto_server.create_bucket(base)
    topic = unique_name("t")
    create_topics(tansu.bootstrap, {topic: 2})
    audit = MemoryAuditSink()
    more = {"wal.storage_class": request.param, "agent.checkpoint_interval_ms": 600_000}
    agent = AgentThread(config_for(endpoint, base, tansu.bootstrap, **more), "az2", audit).start()
    try:
        yield config_for(endpoint, base, tansu.bootstrap, agents={"az2": agent.address}, **more), agent, audit, topic
    finally:
        agent.stop()


@pytest.mark.trio
async def test_writer_zone_bucket_is_read_applied_and_checkpointed_there(store_env, tansu):
    config, agent, audit, topic = store_env
    pid, ep = new_producer_id(tansu.bootstrap)
    entries = [wal_entry(topic, i % 2, [f"w{i}".encode()], pid if i % 2 == 0 else -1, ep if i % 2 == 0 else -1,
                         i // 2 if i % 2 == 0 else -1) for i in range(4)]
    placements = {}
    client = make_s3_client(config.wal)
    writer = WalWriter(config.wal, "az1", "proxy-a", client, audit)

    async def put(i, task_status=trio.TASK_STATUS_IGNORED):
        placements[i] = await writer.append(entries[i], "az2", task_status=task_status)

    with trio.fail_after(60):
        async with writer.running():
            async with trio.open_nursery() as nursery:
                for i in range(4):
                    await nursery.start(put, i)
        flushed = {p.flushed.sequence: p.flushed for p in placements.values()}
        sender = NotifySender(config.notify, "az1", "proxy-a", writer.epoch, audit, bucket=writer.bucket)
        results = {}
        try:
            for seq in sorted(flushed):
                results[flushed[seq].key] = await sender.notify(flushed[seq], "az2")
        finally:
            await sender.aclose()
    offsets = [results[placements[i].key][placements[i].entry_index_in_zone].base_offset for i in range(4)]
    assert offsets == [0, 0, 1, 1]
    assert consume(tansu.bootstrap, topic, 0) == [(0, b"w0"), (1, b"w2")]
    assert consume(tansu.bootstrap, topic, 1) == [(0, b"w1"), (1, b"w3")]
    agent.stop()  # writes its checkpoint manifest
    bucket = config.wal.bucket_for("az1")
    listed = client.list_objects_v2(Bucket=bucket, Prefix="wal/_checkpoints/").get("Contents", [])
    named = set()
    for o in listed:
        zone, relative = decode_manifest(client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read())
        assert zone == "az2"
        named.update(relative)
    assert named == {k.removeprefix("wal/") for k in results}


@pytest.mark.trio
async def test_a_bucket_not_of_the_writer_zone_is_refused(store_env, tansu):
    config, agent, audit, topic = store_env
    client = make_s3_client(config.wal)
    writer = WalWriter(config.wal, "az1", "proxy-a", client, audit)
    with trio.fail_after(60):
        async with writer.running():
            placement = await writer.append(wal_entry(topic, 0, [b"never"]), "az2")
        # Source zone az3 naming az1's bucket: with one bucket per zone that is not az3's bucket.
        sender = NotifySender(config.notify, "az3", "proxy-a", writer.epoch, audit, bucket=writer.bucket)
        try:
            if config.wal.storage_class == "express":
                with pytest.raises(NotifyError) as info:
                    await sender.notify(placement.flushed, "az2")
                assert not info.value.retriable and "FORBIDDEN_KEY" in str(info.value)
            else:  # one bucket for every zone: the same notification is fine
                assert [r.base_offset for r in await sender.notify(placement.flushed, "az2")] == [0]
        finally:
            await sender.aclose()
    expected = [] if config.wal.storage_class == "express" else [(0, b"never")]
    assert consume(tansu.bootstrap, topic, 0) == expected
