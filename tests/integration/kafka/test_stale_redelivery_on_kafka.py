"""An agent re-appending a batch the leader wrote long ago (an agent restarted before it
checkpointed, then a proxy's recovery re-sent the object) on Apache Kafka.

Kafka remembers a producer's last five batches: a retry of one of them is answered
DUPLICATE_SEQUENCE_NUMBER, an older one OUT_OF_ORDER_SEQUENCE_NUMBER, the same answer as a
batch that skips a sequence. The agent reads the partition's tail before it believes either:
a batch that is there counts as appended (with its real offset); one that is not keeps the
leader's refusal.
"""

from __future__ import annotations

import asyncio

import pytest

from leader_notify.agent.appender import KafkaAppender
from tests.conftest import unique_name
from tests.integration.kafka.conftest import ZONES, spread_leaders
from tests.integration.leader_notify.idempotent_batches import idempotent_batch

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

HOME = ZONES[1]  # spread_leaders: partition 0 is led by node 1
PRODUCER_ID, EPOCH = 424_242, 0
OUT_OF_ORDER_SEQUENCE_NUMBER = 45


def test_a_batch_older_than_the_leaders_five_is_appended_once_and_a_gap_stays_refused(kafka):
    topic = unique_name("stale")
    spread_leaders(kafka, topic, 1)
    batches = [idempotent_batch(PRODUCER_ID, EPOCH, seq, [f"v{seq}".encode()]) for seq in range(10)]

    async def scenario():
        async with KafkaAppender(kafka.bootstrap.split(","), home_zone=HOME) as appender:
            first = [await appender.append(topic, 0, batches[seq]) for seq in range(7)]
            again = [await appender.append(topic, 0, batches[seq]) for seq in (0, 5)]
            gap = await appender.append(topic, 0, batches[9])  # sequence 7 and 8 never sent
            return first, again, gap

    first, again, gap = asyncio.run(asyncio.wait_for(scenario(), 120))
    assert [(r.error_code, r.base_offset, r.duplicate) for r in first] == [(0, seq, False) for seq in range(7)]
    # Sequence 0 is beyond the five the leader remembers (2-6): OUT_OF_ORDER_SEQUENCE_NUMBER
    # from the leader, found in the log at offset 0. Sequence 5 is one of the five: Kafka
    # answers it as appended, at its first offset.
    assert [(r.error_code, r.base_offset, r.duplicate) for r in again] == [(0, 0, True), (0, 5, False)]
    assert (gap.error_code, gap.duplicate) == (OUT_OF_ORDER_SEQUENCE_NUMBER, False)
