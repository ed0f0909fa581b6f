"""A consumer reading through the pass-through leaves `fetch_bytes` records that add up, per
partition, to the record bytes of the partition's log, and say who served them.

What is counted (docs/audit-records.md, fetch_bytes): each Fetch answer's partition
`records` field, the record batches as the broker sent them, no protocol framing. The
consumer reads each partition's whole log once from offset 0 (a log well under librdkafka's
1 MB per-partition fetch size, so no batch is cut and fetched again), so the expected bytes
are the sum of the log's batch sizes, read from the broker itself (raw_log).

The proxy runs in use1-az1 and puts its zone into Fetch as the consumer's rack (KIP-392):
partition 0 is led in use1-az1, so its leader serves it (from_leader true); partition 1 is led
in use1-az2, whose leader sends the consumer to the use1-az1 replica, so the follower
serves it (from_leader false) and the use1-az2 leader's answers carry no records.
"""

from __future__ import annotations

import time

import confluent_kafka
import pytest

from tests.conftest import unique_name
from tests.integration.cluster.conftest import Delivery, produce, producer, proxy_on
from tests.integration.cluster.raw_log import raw_log
from tests.integration.cluster.test_passthrough_audit_on_cluster import audit_records

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(120)]

RECORDS = 150  # per partition
VALUE_BYTES = 1000


def test_fetch_bytes_per_partition_match_the_logs_the_consumer_read(kafka, tmp_path):
    topic = unique_name("fetched")
    kafka.create_topic(topic, 2, assignments={0: [1, 2, 3], 1: [2, 1, 3]})  # led in use1-az1 and use1-az2
    delivery = Delivery()
    p = producer(kafka.bootstrap, acks="all")  # straight to the cluster: only the consumer uses the sidecar
    produce(p, topic, [(partition, 10**(VALUE_BYTES - 1) + i) for partition in (0, 1) for i in range(RECORDS)],
            delivery)
    assert p.flush(30) == 0 and not delivery.failed
    log_bytes = {0: sum(b.size_bytes for b in raw_log(kafka.nodes[1].bootstrap, topic, 0)),
                 1: sum(b.size_bytes for b in raw_log(kafka.nodes[2].bootstrap, topic, 1))}
    assert all(n > RECORDS * VALUE_BYTES for n in log_bytes.values()), log_bytes
    with proxy_on(kafka, tmp_path, settings={"proxy": {"broker_listeners": True}}) as proxy:
        consumer = confluent_kafka.Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": unique_name("g"),
                                             "enable.auto.commit": False})
        consumer.assign([confluent_kafka.TopicPartition(topic, partition, confluent_kafka.OFFSET_BEGINNING)
                         for partition in (0, 1)])
        got = {0: 0, 1: 0}
        deadline = time.monotonic() + 40
        try:
            while sum(got.values()) < 2 * RECORDS and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is not None and not msg.error():
                    got[msg.partition()] += 1
        finally:
            consumer.close()
        assert got == {0: RECORDS, 1: RECORDS}
    # the proxy flushed its counters when it stopped
    rows = [r for r in audit_records(tmp_path / "audit") if r["kind"] == "fetch_bytes" and r["topic"] == topic]
    served: dict[tuple[int, int, str, bool | None], int] = {}
    for r in rows:
        assert r["zone"] == "use1-az1" and r["schema_version"] >= 14, r
        key = (r["partition"], r["broker_id"], r["broker_zone"], r["from_leader"])
        served[key] = served.get(key, 0) + r["bytes"]
    assert served == {(0, 1, "use1-az1", True): log_bytes[0],  # the leader in the consumer's zone
                      (1, 1, "use1-az1", False): log_bytes[1]}, (served, log_bytes)  # its follower there
    unscanned = [r for r in audit_records(tmp_path / "audit") if r["kind"] == "fetch_bytes" and r["partition"] < 0]
    assert unscanned == []
