"""leader_notify/sender/recovery.py: which objects a restarted proxy re-sends, and delivery through a real agent."""

from __future__ import annotations

import pytest
import trio

from leader_notify.sender.recovery import earlier_objects, recorded_layout, recover_acknowledged, zone_shares
from wal_s3.billing import S3RequestTally
from wal_s3.format import WalEntry, encode_object, parse_object
from wal_s3.s3 import S3PermanentError
from wal_s3.writer import object_key


def test_earlier_objects_are_this_writers_older_epochs_in_epoch_then_sequence_order():
    keys = [object_key("wal/", "az1", "p1", 2, 1), object_key("wal/", "az1", "p1", 1, 10),
            object_key("wal/", "az1", "p1", 1, 9), object_key("wal/", "az1", "p1", 3, 0),  # current epoch: no
            object_key("wal/", "az1", "p2", 1, 0),  # another writer: no
            object_key("other/", "az1", "p1", 1, 0),  # outside the prefix: no
            "wal/_checkpoints/x/az2", "wal/_epochs/p1/0000000001"]
    assert earlier_objects(keys, "wal/", "p1", 3) == [
        object_key("wal/", "az1", "p1", 1, 9), object_key("wal/", "az1", "p1", 1, 10),
        object_key("wal/", "az1", "p1", 2, 1)]
    assert earlier_objects(keys, "wal/", "p1", 1) == []


class _MetadataStore:
    """head_metadata only (the layout read is all that is tested here)."""

    def __init__(self, meta=None, error=None) -> None:
        self.meta, self.error = meta, error

    async def head_metadata(self, key):
        if self.error is not None:
            raise self.error
        return self.meta


@pytest.mark.parametrize(("store", "layout"), [
    (_MetadataStore({"zones": "az1,az2.1of3,az2.3of3", "share-entries": "2,4,1"}),
     {"az1": ((0, 0, 2),), "az2": ((0, 0, 4), (2, 4, 5))}),
    (_MetadataStore({"zones": "az2.1of3,az2.3of3"}), {}),  # written before share-entries: split by today's owners
    (_MetadataStore({"zones": "az2.1of3,az2.3of3", "share-entries": "4"}), {}),  # does not match: same
    (_MetadataStore(error=S3PermanentError("HEAD k: 403")), {}),
])
def test_recovery_reads_the_layout_from_the_metadata_or_falls_back(store, layout):
    retry = {"max_attempts": 1, "base_ms": 1, "max_ms": 1}
    assert trio.run(recorded_layout, store, "k", S3RequestTally(), retry) == layout


def test_zone_shares_of_a_parsed_object_are_the_encoders_own():
    entries = {
        "az3": [WalEntry("orders", 0, 7, 0, 0, 2, b"batch-one"), WalEntry("a-longer-topic-name", 5, -1, -1, -1, 1, b"")],
        "az2": [WalEntry("t", 1, 9, 3, 100, 3, b"x" * 1000)],
    }
    obj = encode_object(writer_id="p1", epoch=1, sequence=4, created_ms=0, entries_by_zone=entries)
    assert zone_shares(parse_object(obj.data)) == dict(obj.zones)


@pytest.mark.integration
@pytest.mark.trio
async def test_restarted_proxy_delivers_acknowledged_entries_nobody_applied(s3_bucket, tansu, monkeypatch):
    from core.audit import MemoryAuditSink
    from leader_notify.sender.sender import NotifySender
    from tests.conftest import create_topics, unique_name
    from tests.integration.leader_notify.helpers import AgentThread, config_for, consume, new_producer_id, wal_entry
    from wal_s3.s3 import make_s3_client
    from wal_s3.writer import WalWriter

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    server, bucket = s3_bucket
    acked, plain = unique_name("acked"), unique_name("plain")
    create_topics(tansu.bootstrap, {acked: 1, plain: 1})
    audit, recovery_audit = MemoryAuditSink(), MemoryAuditSink()
    agent = AgentThread(config_for(server.endpoint_url, bucket, tansu.bootstrap), "az2", audit).start()
    config = config_for(server.endpoint_url, bucket, tansu.bootstrap, agents={"az2": agent.address})
    pid, ep = new_producer_id(tansu.bootstrap)
    try:
        # Epoch 1 of proxy-a: two objects become durable, then the proxy "dies" before notifying.
        first = WalWriter(config.wal, "az1", "proxy-a", make_s3_client(config.wal), audit)
        async with first.running():
            for seq, values in ((0, [b"a0", b"a1"]), (2, [b"a2"])):
                await first.append(wal_entry(acked, 0, values, pid, ep, seq), "az2")
            await first.append(wal_entry(plain, 0, [b"p0"]), "az2")  # an object with leader-mode entries only
        # Epoch 2: the restarted proxy recovers before serving.
        second = WalWriter(config.wal, "az1", "proxy-a", make_s3_client(config.wal), audit)
        assert await second.register_epoch() == 2
        sender = NotifySender(config.notify, "az1", "proxy-a", 2, audit, bucket=bucket)
        try:
            with trio.fail_after(60):
                report = await recover_acknowledged(config.wal, make_s3_client(config.wal), sender, "proxy-a", 2,
                                                    lambda topic: topic == acked, audit=recovery_audit)
                again = await recover_acknowledged(config.wal, make_s3_client(config.wal), sender, "proxy-a", 2,
                                                   lambda topic: topic == acked)
        finally:
            await sender.aclose()
    finally:
        agent.stop()
    assert report.scanned == 3 and report.failed == () and report.skipped == 1
    # The first recovery's billed S3 requests: a LIST of the WAL prefix, a LIST of the
    # checkpoints (no manifest yet: nothing applied), a GET of each of the 3 earlier objects.
    assert sorted((r["purpose"], r["operation"], r["requests"]) for r in recovery_audit.of("s3_request")) == [
        ("recovery", "GET", 3), ("recovery", "LIST", 2)]
    assert [zone for _, zone in report.delivered] == ["az2", "az2"]
    assert again.failed == ()
    # Each acknowledged record exactly once and in order, the re-run appended nothing; the
    # leader-mode object was left alone (its producer got no answer and re-sends it).
    assert consume(tansu.bootstrap, acked, 0) == [(0, b"a0"), (1, b"a1"), (2, b"a2")]
    assert consume(tansu.bootstrap, plain, 0) == []


def test_recover_cli_says_why_there_is_nothing_to_do(tmp_path, capsys, monkeypatch):
    from azsidecar.cli import main as azsidecar_main

    monkeypatch.setenv("AZSIDECAR_NOTIFY_HMAC_KEYS", "k" * 32)
    config = tmp_path / "sidecar.toml"
    config.write_text('zone = "az1"\n[wal]\nbucket = "b"\nregion = "us-east-1"\n')
    assert azsidecar_main(["recover", "--config", str(config)]) == 0
    assert "no topic has router.ack_modes 'wal'" in capsys.readouterr().err
    config.write_text('[wal]\nbucket = "b"\n[router]\nack_modes = { "orders" = "wal" }\n')
    assert azsidecar_main(["recover", "--config", str(config)]) == 2
    assert "zone: recover needs the writer's zone" in capsys.readouterr().err


@pytest.mark.integration
@pytest.mark.trio
@pytest.mark.parametrize("ownership", ["partition", "leader"])
async def test_recovery_with_two_agents_resends_only_the_run_whose_agent_did_not_apply_it(s3_bucket, tansu,
                                                                                         monkeypatch, ownership):
    """"leader": the writer's owners followed leaders the recovering proxy does not know (it
    would hash them the other way round); recovery reads the runs from the object's metadata."""
    from core.audit import MemoryAuditSink
    from leader_notify.sender.owners import AgentMap, owner_index
    from leader_notify.sender.sender import NotifySender
    from tests.conftest import create_topics, unique_name
    from tests.integration.leader_notify.helpers import AgentThread, config_for, consume, wal_entry
    from wal_s3.s3 import make_s3_client
    from wal_s3.writer import WalWriter

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    server, bucket = s3_bucket
    audit = MemoryAuditSink()
    base = config_for(server.endpoint_url, bucket, tansu.bootstrap)
    a0, a1 = AgentThread(base, "az2", audit).start(), AgentThread(base, "az2", audit).start()
    config = config_for(server.endpoint_url, bucket, tansu.bootstrap, agents={"az2": [a0.address, a1.address]},
                        **{"notify.agent_ownership": ownership})
    # A topic name whose partitions hash to both agents (the agents' ports are random: with
    # 8 partitions, 1 name in 128 hashes all of them to one agent, and a CI run met one).
    for _ in range(1000):
        acked = unique_name("acked")
        hashed = [owner_index((a0.address, a1.address), acked, p) for p in range(8)]
        if {0, 1} <= set(hashed):
            break
    else:
        raise AssertionError("no topic name hashes partitions to both agents")
    create_topics(tansu.bootstrap, {acked: 8})
    owners = AgentMap(config.notify.agents, ownership)
    if ownership == "partition":
        p0, p1 = hashed.index(0), hashed.index(1)
    else:  # p0 hashes to agent 1 but its leader (broker 10, rank 0) gives it to agent 0; p1 the other way
        p0, p1 = hashed.index(1), hashed.index(0)
        owners.note_leader("az2", acked, p0, 10)
        owners.note_leader("az2", acked, p1, 20)
    assert (owners.owner("az2", acked, p0), owners.owner("az2", acked, p1)) == (0, 1)
    try:
        writer = WalWriter(config.wal, "az1", "proxy-a", make_s3_client(config.wal), audit)
        writer.share_of = owners.share_of
        async with writer.running():
            pending = [await writer.buffer(wal_entry(acked, p, [f"v{p}".encode()]), "az2") for p in (p1, p0)]
        flushed = (await pending[0].placement()).flushed
        # Agent 0 applied its run (and checkpoints it when it stops); agent 1 never heard of it.
        sender = NotifySender(config.notify, "az1", "proxy-a", 1, audit, bucket=bucket)
        assert [r.error_code for r in await sender.notify(flushed, "az2", agent=0)] == [0]
        await sender.aclose()
        a0.stop()
        second = WalWriter(config.wal, "az1", "proxy-a", make_s3_client(config.wal), audit)
        assert await second.register_epoch() == 2
        restarted = NotifySender(config.notify, "az1", "proxy-a", 2, audit, bucket=bucket)  # knows no leader
        with trio.fail_after(60):
            report = await recover_acknowledged(config.wal, make_s3_client(config.wal), restarted, "proxy-a", 2,
                                                lambda topic: topic == acked)
        await restarted.aclose()
    finally:
        a0.stop()
        a1.stop()
    assert report.delivered == ((flushed.key, "az2.2of2"),) and report.failed == () and report.skipped == 1
    # Not idempotent: had agent 0's run been re-sent to a restarted agent, p0 would hold v twice.
    assert consume(tansu.bootstrap, acked, p0) == [(0, f"v{p0}".encode())]
    assert consume(tansu.bootstrap, acked, p1) == [(0, f"v{p1}".encode())]
