"""Consumers through the sidecar's pass-through get follower fetching from Apache Kafka.

The proxy tells the brokers its zone as the consumer's rack (KIP-392 `rack_id` in Fetch);
with `broker.rack` and the rack-aware replica selector, the leader of a partition in
use1-az2 answers a consumer in use1-az1 with its preferred read replica, the use1-az1
node, and the records come from there. The proxy's audit (`passthrough_bytes` by zone
pair) shows it: the partition's whole log on the (use1-az1, use1-az1) pair, and on the
(use1-az1, use1-az2) pair no more than Fetch answers without records.
"""

from __future__ import annotations

import time

import confluent_kafka
import pytest

from tests.conftest import unique_name
from tests.integration.cluster.conftest import Delivery, produce, producer, proxy_on
from tests.integration.cluster.raw_log import raw_log
from tests.integration.cluster.test_passthrough_audit_on_cluster import FETCH_ANSWER_FIELDS_MAX_BYTES, audit_records

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]

RECORDS = 200
VALUE_BYTES = 1000
FETCH = 1
# The answers that send the consumer away from the leader carry no records; a few of
# them (the first Fetch, one per metadata refresh) may reach it.
LEADER_FETCHES_MAX = 20


def test_a_consumer_in_zone_1_reads_a_zone_2_partition_from_the_zone_1_replica(kafka, tmp_path):
    topic = unique_name("far")
    kafka.create_topic(topic, 1, assignments={0: [2, 1, 3]})  # led in use1-az2; the proxy is in use1-az1
    delivery = Delivery()
    p = producer(kafka.bootstrap, acks="all")  # straight to the cluster: only the consumer uses the sidecar
    produce(p, topic, [(0, 10**(VALUE_BYTES - 1) + i) for i in range(RECORDS)], delivery)
    assert p.flush(30) == 0 and not delivery.failed
    log_bytes = sum(b.size_bytes for b in raw_log(kafka.nodes[2].bootstrap, topic, 0))
    assert log_bytes > RECORDS * VALUE_BYTES
    with proxy_on(kafka, tmp_path, settings={"proxy": {"broker_listeners": True}}) as proxy:
        consumer = confluent_kafka.Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": unique_name("g"),
                                             "enable.auto.commit": False})
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
        got = 0
        deadline = time.monotonic() + 60
        try:
            while got < RECORDS and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is not None and not msg.error():
                    got += 1
        finally:
            consumer.close()
        assert got == RECORDS
    rows = [r for r in audit_records(tmp_path / "audit") if r["kind"] == "passthrough_bytes"
            and r["api_key"] == FETCH]
    by_pair: dict[tuple[str, str], list[int]] = {}
    for r in rows:
        counts = by_pair.setdefault((r["zone"], r["broker_zone"]), [0, 0])
        counts[0] += r["requests"]
        counts[1] += r["response_bytes"]
    local = by_pair.get(("use1-az1", "use1-az1"))
    assert local is not None and local[1] >= log_bytes, (by_pair, log_bytes)  # the records came from zone 1
    far_requests, far_bytes = by_pair.get(("use1-az1", "use1-az2"), [0, 0])
    assert far_requests <= LEADER_FETCHES_MAX, by_pair
    assert far_bytes <= far_requests * FETCH_ANSWER_FIELDS_MAX_BYTES, by_pair  # no records from the leader
    assert ("use1-az1", "use1-az3") not in by_pair, by_pair
