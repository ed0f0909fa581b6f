"""The agent's readiness probe on Apache Kafka: one Metadata request naming no topic.

The probe runs every few seconds in every agent; asking for the whole cluster's metadata
made each probe's cost grow with the cluster (aiokafka decodes the answer in Python), and
with a zone's three agents, three times over.
"""

from __future__ import annotations

import asyncio

import pytest

from leader_notify.agent.appender import KafkaAppender
from leader_notify.agent.errors import KafkaAppendUnavailable
from tests.conftest import unique_name
from tests.integration.kafka.conftest import ZONES

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def test_the_probe_asks_for_the_brokers_only(kafka):
    topic = unique_name("probe")
    kafka.create_topic(topic, 60)  # a full answer would list its 60 partitions
    answers = []

    async def scenario():
        async with KafkaAppender(kafka.bootstrap.split(","), home_zone=ZONES[1]) as appender:
            client = appender._client
            send = client.send

            async def recording_send(node_id, request, **kwargs):
                answer = await send(node_id, request, **kwargs)
                answers.append((type(request).__name__, answer))
                return answer

            client.send = recording_send
            await appender.probe()

    asyncio.run(scenario())
    assert [name for name, _ in answers] == ["MetadataRequest"]
    (_, answer), = answers
    assert sorted(b[0] for b in answer.brokers) == [1, 2, 3]
    assert answer.topics == []


def test_a_probe_before_the_start_says_so():
    appender = KafkaAppender(["127.0.0.1:9"], home_zone=ZONES[1])
    with pytest.raises(KafkaAppendUnavailable, match="not started"):
        asyncio.run(appender.probe())
