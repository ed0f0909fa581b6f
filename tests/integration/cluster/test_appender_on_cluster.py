"""The agent's KafkaAppender on a three-broker cluster whose leaders sit in three zones and
move (librdkafka's mock cluster, racks use1-az1/az2/az3 unless a test leaves them unset).

The appender runs as the agent of use1-az2: it appends only to leaders in its zone, and
refuses the others with NOT_LEADER_OR_FOLLOWER so the proxy re-routes.
"""

from __future__ import annotations

import asyncio

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from deploy.local.mock_cluster import start_mock_cluster
from leader_notify.agent.appender import KafkaAppender
from tests.integration.cluster.conftest import ZONES, read_partitions, spread_leaders

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

HOME = "use1-az2"
NOT_LEADER_OR_FOLLOWER = 6


def batch(value: int) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    builder.append(0, timestamp=None, key=None, value=str(value).encode(), headers=[])
    return bytes(builder.build())


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_a_leader_that_moves_into_the_agents_zone_is_appended_to_at_once(cluster):
    """B3: the agent looks the leader up again before it refuses (aiokafka's cached
    metadata is trusted for 5 minutes)."""
    spread_leaders(cluster, "into", 3)  # partition 0: broker 1 (az1), 1: broker 2 (az2), 2: broker 3 (az3)

    async def scenario():
        async with KafkaAppender(list(cluster.bootstraps), home_zone=HOME) as appender:
            before = await appender.append("into", 0, batch(1))
            cluster.set_leader("into", 0, 2)  # into use1-az2
            after = await appender.append("into", 0, batch(2))
            cluster.set_leader("into", 0, 3)  # and out again, to use1-az3
            out = await appender.append("into", 0, batch(3))
            return before, after, out

    before, after, out = run(scenario())
    assert before.error_code == NOT_LEADER_OR_FOLLOWER
    assert "use1-az1" in before.reason and "broker 1" in before.reason
    assert (after.error_code, after.base_offset) == (0, 0)
    assert out.error_code == NOT_LEADER_OR_FOLLOWER and "use1-az3" in out.reason
    assert read_partitions(cluster.bootstrap, "into", [0], 1) == {0: [2]}


def test_without_racks_the_agent_places_leaders_by_broker_zones(tmp_path):
    """O1: a cluster that reports no rack; router.broker_zones says where each broker is."""
    broker_zones = {str(b): zone for b, zone in ZONES.items()}
    with start_mock_cluster(3, log_dir=tmp_path) as cluster:  # no racks
        spread_leaders(cluster, "norack", 3)

        async def scenario():
            async with KafkaAppender(list(cluster.bootstraps), home_zone=HOME, broker_zones=broker_zones) as appender:
                return [await appender.append("norack", p, batch(p)) for p in range(3)]

        results = run(scenario())
        assert [r.error_code for r in results] == [NOT_LEADER_OR_FOLLOWER, 0, NOT_LEADER_OR_FOLLOWER]
        assert "broker_zones" in results[0].reason
        assert read_partitions(cluster.bootstrap, "norack", [0, 1, 2], 1) == {1: [1]}


def test_the_first_appends_to_a_topic_need_one_attempt(cluster):
    """No UNKNOWN_TOPIC_OR_PARTITION and backoff before the first batches of a new topic,
    also when several partitions' first batches come at once (one notification)."""
    cluster.create_topic("fresh", 6)
    for partition in range(6):
        cluster.set_leader("fresh", partition, 2)

    async def scenario():
        async with KafkaAppender(list(cluster.bootstraps), home_zone=HOME) as appender:
            return await asyncio.gather(*(appender.append("fresh", p, batch(p)) for p in range(6)))

    results = run(scenario())
    assert [(r.error_code, r.base_offset, r.attempts) for r in results] == [(0, 0, 1)] * 6
