"""The audit counts consumer bytes by zone pair (issue 21, item 4).

A consumer in the proxy's zone (use1-az1) reads, through the sidecar, a partition led by
broker 2 (rack use1-az2). Every byte of that partition's log crosses from use1-az2 to
use1-az1 in Fetch answers, so the proxy's `passthrough_bytes` records must put at least
those bytes on the (use1-az1, use1-az2, Fetch) pair - and at most those bytes plus a
Fetch answer's own fields per request - and nothing on a pair the consumer never used.
The log's size is read from the leader itself (tests/integration/cluster/raw_log.py).
"""

from __future__ import annotations

import gzip
import json
import time

import confluent_kafka
import pytest

from tests.integration.cluster.conftest import Delivery, produce, producer, proxy_on
from tests.integration.cluster.raw_log import raw_log

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

RECORDS = 200
VALUE_BYTES = 1000
FETCH = 1
# A Fetch v4..v12 answer for one partition, besides its record batches: header, throttle,
# error, session id, topic name (4 bytes here), partition index, error, high watermark,
# last stable offset, log start offset, aborted transactions, preferred replica, records
# length, tagged fields: under 120 bytes; 200 leaves room without hiding a second copy of
# the log (200 x 1 KB records).
FETCH_ANSWER_FIELDS_MAX_BYTES = 200


def test_a_consumer_reading_from_another_zone_shows_on_that_zone_pair(cluster, tmp_path):
    cluster.create_topic("far", 1)
    cluster.set_leader("far", 0, 2)  # use1-az2; the proxy is in use1-az1
    delivery = Delivery()
    p = producer(cluster.bootstrap)  # straight to the cluster: only the consumer goes through the sidecar
    produce(p, "far", [(0, 10**(VALUE_BYTES - 1) + i) for i in range(RECORDS)], delivery)
    assert p.flush(30) == 0 and not delivery.failed
    log_bytes = sum(b.size_bytes for b in raw_log(cluster.address(2), "far", 0))
    assert log_bytes > RECORDS * VALUE_BYTES
    settings = {"proxy": {"broker_listeners": True}}
    with proxy_on(cluster, tmp_path, settings=settings) as proxy:
        consumer = confluent_kafka.Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": "far-reader",
                                             "enable.auto.commit": False})
        consumer.assign([confluent_kafka.TopicPartition("far", 0, confluent_kafka.OFFSET_BEGINNING)])
        got = 0
        deadline = time.monotonic() + 30
        try:
            while got < RECORDS and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is not None and not msg.error():
                    got += 1
        finally:
            consumer.close()
        assert got == RECORDS
    # the proxy stopped (SIGTERM): its last counts are written
    rows = [r for r in audit_records(tmp_path / "audit") if r["kind"] == "passthrough_bytes"]
    by_pair: dict[tuple[str, str, int], list[int]] = {}
    for r in rows:
        counts = by_pair.setdefault((r["zone"], r["broker_zone"], r["api_key"]), [0, 0, 0])
        counts[0] += r["requests"]
        counts[1] += r["request_bytes"]
        counts[2] += r["response_bytes"]
    fetch = by_pair.get(("use1-az1", "use1-az2", FETCH))
    assert fetch is not None, by_pair
    requests, request_bytes, response_bytes = fetch
    assert log_bytes <= response_bytes <= log_bytes + requests * FETCH_ANSWER_FIELDS_MAX_BYTES, (fetch, log_bytes)
    assert request_bytes > 0
    assert not [k for k in by_pair if k[1] != "use1-az2" and k[2] == FETCH], by_pair  # no other broker fetched from
    assert {r["broker_id"] for r in rows if r["api_key"] == FETCH} == {2}


def audit_records(directory) -> list[dict]:
    out = []
    for path in sorted(directory.rglob("*.jsonl.gz")):
        with gzip.open(path, "rt") as f:
            out += [json.loads(line) for line in f if line.strip()]
    return out
