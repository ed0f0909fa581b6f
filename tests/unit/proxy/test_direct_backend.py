"""DirectBackend above its adapters: what it tells the metadata cache (B4).

The paths through real sockets are in tests/integration/cluster (a leader whose broker is down).
"""

from __future__ import annotations

import pytest

from core.produce import PartitionBatches, ProduceContext
from core.record_batch import RecordBatch
from kafka_upstream.direct import DirectBackend
from kafka_upstream.metadata import PartitionInfo

CTX = ProduceContext(acks=-1, timeout_ms=30_000, transactional_id=None, client_version=9)


class LeaderlessMetadata:
    """Partition 0 of every topic has no leader (an election under way)."""

    def __init__(self) -> None:
        self.invalidated: list[str] = []

    async def leader(self, topic, partition):
        return PartitionInfo(0, -1, 3), None, 0

    def invalidate(self, topic):
        self.invalidated.append(topic)


@pytest.mark.trio
async def test_its_own_leader_not_available_makes_the_next_lookup_fresh():
    metadata = LeaderlessMetadata()
    backend = DirectBackend(cluster=None, metadata=metadata, timeout_s=1.0)  # no leader: no connection used
    batch = RecordBatch(memoryview(b"x" * 100), 7, 0, 0, 1, False, 0)
    complete = await backend.submit([PartitionBatches("elect", 0, (batch,))], CTX)
    result = (await complete())[("elect", 0)]
    assert result.error_code == 5  # LEADER_NOT_AVAILABLE, retriable
    assert metadata.invalidated == ["elect"]
