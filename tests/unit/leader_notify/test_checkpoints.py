"""The agent's GC checkpoints (leader_notify/agent/checkpoints.py) on asyncio without S3:
keys grouped into one manifest per share, each once; written when max_keys are waiting or
after the interval; bounded, and drained on close. Expected manifests written by hand."""

from __future__ import annotations

import asyncio

from core.audit import MemoryAuditSink
from leader_notify.agent.checkpoints import CheckpointBatcher, manifests


def test_one_manifest_per_share_each_key_once_in_applied_order():
    assert manifests([("k1", "az2.1of2"), ("k2", "az2.2of2"), ("k1", "az2.1of2"), ("k3", "az2.1of2")]) == {
        "az2.1of2": ["k1", "k3"], "az2.2of2": ["k2"]}
    assert manifests([]) == {}


def test_max_keys_writes_at_once_and_the_interval_writes_the_rest():
    written: list[tuple[list[str], str]] = []
    audit = MemoryAuditSink()

    async def main():
        first_written = asyncio.Event()

        async def checkpoint(keys, share):
            written.append((list(keys), share))
            first_written.set()

        batcher = CheckpointBatcher(checkpoint, audit, interval_s=3600, max_keys=2, max_pending=10)
        await batcher.add("k1", "az2")
        await batcher.add("k2", "az2")  # the second key: max_keys, written now
        await batcher.add("k3", "az3")  # waits for the (hour-long) interval ...
        await asyncio.wait_for(first_written.wait(), 5.0)
        assert written == [(["k1", "k2"], "az2")]
        await batcher.drain()  # ... or for close
        assert written == [(["k1", "k2"], "az2"), (["k3"], "az3")]

    asyncio.run(main())
    assert [(r["keys"], r["wal_keys"], r["status"]) for r in audit.of("checkpoint_write")] == [
        (2, "k1,k2", "ok"), (1, "k3", "ok")]


def test_a_failed_manifest_is_audited_and_gives_its_room_back():
    audit = MemoryAuditSink()

    async def checkpoint(keys, share):
        raise OSError("S3 down")

    async def main():
        batcher = CheckpointBatcher(checkpoint, audit, interval_s=3600, max_keys=1, max_pending=1)
        await batcher.add("k1", "az2")
        await batcher.drain()
        await asyncio.wait_for(batcher.add("k2", "az2"), 1.0)  # the room of k1 came back
        await batcher.drain()

    asyncio.run(main())
    assert [(r["wal_keys"], r["status"]) for r in audit.of("checkpoint_write")] == [("k1", "failed"),
                                                                                  ("k2", "failed")]
