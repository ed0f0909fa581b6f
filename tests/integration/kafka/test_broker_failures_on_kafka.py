"""Brokers that fail under the sidecar, on Apache Kafka: what Tansu and the mock cluster
could not show (a Tansu broker restarted mid-stream lost batches it had acknowledged; the
mock cluster has no ISR).

- A leader killed with kill -9 mid-stream and restarted, with acks=all and idempotence,
  on the local route and on the WAL route (an agent appending to it): every acknowledged
  record is in the log exactly once, in order.
- NOT_ENOUGH_REPLICAS reaches the producer through the sidecar as it does from the broker.
"""

from __future__ import annotations

import confluent_kafka
import pytest

from tests.conftest import unique_name
from tests.integration.cluster.conftest import Delivery, produce, producer, proxy_on, read_back, wal_sidecars
from tests.integration.kafka.conftest import spread_leaders

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(420)]

PARTITIONS = 6


def test_a_leader_killed_and_restarted_mid_stream_loses_nothing_acknowledged(own_kafka, moto_server, tmp_path):
    kafka = own_kafka
    bucket = unique_name("wal")
    moto_server.create_bucket(bucket)
    topic = unique_name("kill")
    leaders = spread_leaders(kafka, topic, PARTITIONS)  # node 2 (use1-az2, an agent's zone) leads 1 and 4
    assert [p for p, node in leaders.items() if node == 2] == [1, 4]
    batches = [[(i % PARTITIONS, i) for i in range(k * 200, (k + 1) * 200)] for k in range(3)]
    delivery = Delivery()
    with wal_sidecars(kafka, moto_server, bucket, tmp_path) as sidecars:
        p = producer(sidecars.proxy, acks="all", **{"message.timeout.ms": 120_000})
        produce(p, topic, batches[0], delivery)
        assert p.flush(60) == 0
        produce(p, topic, batches[1], delivery)  # in flight while the leader dies
        kafka.kill_node(2)
        assert p.flush(120) == 0
        moved = kafka.leaders(topic)
        assert all(moved[p] in (1, 3) for p in (1, 4)), moved  # the controller elected an in-sync replica
        kafka.start_node(2)
        produce(p, topic, batches[2], delivery)
        assert p.flush(60) == 0
    assert not delivery.failed, delivery.failed[:5]
    want: dict[int, list[int]] = {}
    for partition, value in batches[0] + batches[1] + batches[2]:
        want.setdefault(partition, []).append(value)
    assert delivery.acked == want
    assert read_back(kafka.bootstrap, topic, PARTITIONS, 600) == want  # exactly once, in order


def _produce_once(bootstrap: str, topic: str, partition: int) -> confluent_kafka.KafkaError | None:
    """One record with acks=all and no retries: the broker's own error comes back as it is."""
    errors: list = []
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False,
                                  "retries": 0, "message.timeout.ms": 30_000})
    p.produce(topic, b"x", partition=partition, on_delivery=lambda err, _msg: errors.append(err))
    assert p.flush(40) == 0
    return errors[0]


def test_not_enough_replicas_reaches_the_producer_through_the_sidecar_as_from_the_broker(own_kafka, tmp_path):
    """A partition with replicas on nodes 1 and 2 and min.insync.replicas 2: with node 2
    killed the ISR shrinks to the leader alone and an acks=all produce is refused with
    NOT_ENOUGH_REPLICAS, straight from the broker and through the sidecar alike. (Two of
    the three nodes down cannot show it here: each node is also a controller, and without
    a quorum the ISR does not shrink.)"""
    kafka = own_kafka
    topic = unique_name("nerp")
    kafka.create_topic(topic, 1, assignments={0: [1, 2]})
    with proxy_on(kafka, tmp_path) as proxy:
        assert _produce_once(proxy.bootstrap, topic, 0) is None
        kafka.kill_node(2)
        deadline_state = None
        for _ in range(300):  # bounded: the controller fences node 2 after its session times out (~9 s)
            deadline_state = kafka.describe(topic)[0]
            if deadline_state["isr"] == [1]:
                break
        assert deadline_state is not None and deadline_state["isr"] == [1], deadline_state
        # The metadata can show the shrunk ISR before the leader has applied it; until then
        # the leader takes the record and waits for node 2 (REQUEST_TIMED_OUT). Bounded.
        for _ in range(4):
            direct = _produce_once(kafka.nodes[1].bootstrap, topic, 0)
            if direct is None or direct.code() != confluent_kafka.KafkaError.REQUEST_TIMED_OUT:
                break
        through = _produce_once(proxy.bootstrap, topic, 0)
    assert direct is not None and direct.code() == confluent_kafka.KafkaError.NOT_ENOUGH_REPLICAS, direct
    assert through is not None and through.code() == confluent_kafka.KafkaError.NOT_ENOUGH_REPLICAS, through
