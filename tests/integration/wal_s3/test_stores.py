"""The WAL on both stores (parametrized by `wal_store`): one S3 Standard bucket on moto, and S3
Express One Zone directory buckets, one per zone, behind deploy/local/s3_express.py (sessions
checked on every request). A few representative paths: write and read back, epochs and
fencing, conditional writes, checkpoints and GC."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from core.audit import MemoryAuditSink
from wal_s3.format import WalEntry
from wal_s3.gc import Checkpoints, run_gc
from wal_s3.reader import WalReader
from wal_s3.writer import WalFencedError, WalWriter

pytestmark = pytest.mark.integration


def entry(i: int, size: int = 100) -> WalEntry:
    return WalEntry("orders", i % 3, 1, i, 0, 1, bytes([i % 256]) * size)


def keys(client, bucket: str, prefix: str = "") -> list[str]:
    return sorted(o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", []))


@pytest.mark.trio
async def test_writer_puts_into_its_zone_bucket_and_readers_of_other_zones_read_it(wal_store):
    make_config, make_client = wal_store
    config = make_config(linger_ms=20, s3_transport="auto")  # the event-loop transport, sessions included
    client = make_client(config)
    writer = WalWriter(config, "az1", "p1", client, MemoryAuditSink())
    async with writer.running():
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                placements = {}

                async def one(i: int, zone: str) -> None:
                    placements[i] = await writer.append(entry(i), zone)

                for i, zone in enumerate(["az2", "az3", "az2"]):
                    nursery.start_soon(one, i, zone)
    expected_bucket = f"{config.bucket}--az1--x-s3" if config.storage_class == "express" else config.bucket
    assert writer.bucket == expected_bucket
    key = placements[0].key
    assert {p.key for p in placements.values()} == {key}  # one object, sealed by linger
    assert key in await trio.to_thread.run_sync(keys, client, expected_bucket, "")
    for zone, indexes in (("az2", [0, 2]), ("az3", [1])):
        reader = WalReader(config, client, MemoryAuditSink(), zone)
        p = placements[indexes[0]]
        with trio.fail_after(20):
            got = await reader.read_zone(key, p.zone_offset, p.zone_length, source_zone="az1")
        assert sorted(e.producer_epoch for e in got) == indexes  # entry(i) puts i there; tasks start in any order


@pytest.mark.trio
async def test_epochs_fence_on_every_store(wal_store):
    make_config, make_client = wal_store
    config = make_config(linger_ms=10, epoch_check_interval_s=0)
    client = make_client(config)
    old = WalWriter(config, "az1", "p1", client, MemoryAuditSink())
    new = WalWriter(config, "az1", "p1", client, MemoryAuditSink())
    with pytest.RaisesGroup(WalFencedError, flatten_subgroups=True, allow_unwrapped=True):
        async with old.running():
            p_old = await old.append(entry(1), "az2")
            assert await new.register_epoch() == 2
            assert await old.check_epoch() is True
            with pytest.raises(WalFencedError, match="epoch 1 superseded by epoch 2"):
                await old.append(entry(2), "az2")
    async with new.running():
        p_new = await new.append(entry(3), "az2")
    assert p_old.key.endswith("/p1/0000000001/000000000000")
    assert p_new.key.endswith("/p1/0000000002/000000000000")


@pytest.mark.trio
async def test_checkpoints_land_in_the_object_bucket_and_gc_deletes_applied_objects(wal_store):
    make_config, make_client = wal_store
    config = make_config(linger_ms=60_000)
    client = make_client(config)

    async def write_object(writer_zone: str) -> str:
        writer = WalWriter(config, writer_zone, "p1", client, MemoryAuditSink())
        placements = []
        async with writer.running():
            async with trio.open_nursery() as nursery:
                async def one(zone: str) -> None:
                    placements.append(await writer.append(entry(1), zone))
                for zone in ("az2", "az3"):
                    nursery.start_soon(one, zone)
                await trio.testing.wait_all_tasks_blocked()
                writer.close()
        return placements[0].key

    with trio.fail_after(30):
        from_az0, from_az1 = await write_object("az0"), await write_object("az1")
        checkpoints = Checkpoints(config, client)
        # az2 applied both objects (one call), az3 only az0's.
        await checkpoints.mark_applied_many([from_az0, from_az1], "az2")
        await checkpoints.mark_applied_many([from_az0], "az3")
        reports, indexes = {}, {}
        for zone in ("az0", "az1"):
            bucket = config.bucket_for(zone)
            reports[zone] = await run_gc(config, client, bucket=bucket)
            indexes[zone] = await Checkpoints(config, client, bucket=bucket).applied_index()
    if config.storage_class == "express":
        # Each object and its checkpoints in its writer's zone bucket: GC of az0's deletes its object
        # and both its manifests; az1's bucket keeps its object and az2's manifest of it.
        assert reports["az0"].deleted == (from_az0,) and reports["az1"].deleted == ()
        assert indexes == {"az0": {}, "az1": {from_az1: {"az2"}}}
        assert reports["az1"].pending == 1
        remaining = keys(client, config.bucket_for("az1"))
        assert from_az1 in remaining and from_az0 not in remaining
        assert keys(client, config.bucket_for("az0"), "") == ["_epochs/p1/0000000001"]  # only the epoch marker
    else:
        # One bucket: the first pass sees both objects, deletes the fully applied one; az2's
        # manifest names both objects, so it stays while az1's object does (az3's goes).
        assert reports["az0"].deleted == (from_az0,) and reports["az0"].pending == 1
        assert indexes["az1"] == {from_az0: {"az2"}, from_az1: {"az2"}}
        assert reports["az1"].deleted == ()
        assert from_az1 in keys(client, config.bucket)
