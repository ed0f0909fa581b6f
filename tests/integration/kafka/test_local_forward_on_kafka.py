"""The local route's forward path on Apache Kafka: a Produce request whose partitions are all
led in the proxy's zone goes to the leader as the client's bytes, and its answer comes back
as the leader's bytes; anything else takes the decoding path, with the same results.

A proxy process in use1-az1 (no WAL: cross-zone partitions go direct); its /metrics say
which path each request took (azsidecar_router_forwarded_requests_total by outcome,
azsidecar_router_forward_declined_total by reason), its per-batch audit records what it
forwarded, and a consumer on the cluster reads back what the producer was told was written.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import trio
from kafka.protocol.producer import ProduceResponse

from deploy.local.processes import free_port
from tests import metrics_scrape
from tests.conftest import unique_name
from tests.integration.cluster.conftest import Delivery, produce, producer, proxy_on, read_back
from tests.integration.proxy.kafka_wire import Wire, produce_request, record_batch

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(180)]

RECORDS = 3000
FORWARDED = "azsidecar_router_forwarded_requests_total"
DECLINED = "azsidecar_router_forward_declined_total"


def counters(port: int, name: str, label: str) -> dict[str, float]:
    return {s.labels[label]: s.value for s in metrics_scrape.samples(port) if s.name == name}


def produce_batches(audit_dir: Path, topic: str) -> list[dict]:
    return [r for path in audit_dir.rglob("*.jsonl.gz") for r in map(json.loads, gzip.open(path, "rt"))
            if r["kind"] == "produce_batch" and r["topic"] == topic]


def burst(bootstrap: str, topic: str, partitions: int) -> Delivery:
    """RECORDS numbered records over the partitions in turn (idempotent, linger 5 ms), all delivered."""
    delivery = Delivery()
    p = producer(bootstrap)
    produce(p, topic, ((i % partitions, i) for i in range(RECORDS)), delivery)
    assert p.flush(60) == 0
    assert delivery.failed == [], delivery.failed[:5]
    return delivery


def expected(partitions: int) -> dict[int, list[int]]:
    return {p: list(range(p, RECORDS, partitions)) for p in range(partitions)}


@pytest.mark.parametrize("forward", [True, False])
def test_a_topic_led_in_the_zone_is_forwarded_whole_with_the_same_results(kafka, tmp_path, forward):
    topic = unique_name("forward")
    kafka.create_topic(topic, 3, assignments={p: [1, 2, 3] for p in range(3)})  # every leader in use1-az1
    metrics_port = free_port()
    settings = {"proxy": {"metrics_port": metrics_port, "forward_local_produce": forward}}
    with proxy_on(kafka, tmp_path, settings=settings) as proxy:
        delivery = burst(f"{proxy.host}:{proxy.port}", topic, 3)
        forwarded = counters(metrics_port, FORWARDED, "outcome")
        declined = counters(metrics_port, DECLINED, "reason")
    assert delivery.acked == expected(3)
    if forward:
        assert forwarded.get("bytes", 0) >= 3, forwarded  # at least one request per partition
        assert forwarded.get("decoded", 0) == 0, forwarded
        assert declined == {}, declined
    else:
        assert forwarded == {} and declined == {}
    assert read_back(kafka.bootstrap, topic, 3, RECORDS) == expected(3)  # once each, in order
    batches = produce_batches(tmp_path / "audit", topic)
    # the warm-up of librdkafka sends nothing: every record of the burst is in a local batch, once
    assert sum(b["records"] for b in batches) == RECORDS
    assert {(b["route"], b["reason"], b["leader_zone"], b["error_code"]) for b in batches} == {
        ("local", "same zone", "use1-az1", 0)}
    assert sorted({b["partition"] for b in batches}) == [0, 1, 2]


def test_a_request_with_partitions_led_in_two_zones_takes_the_decoding_path(kafka, tmp_path):
    topic = unique_name("mixed")
    kafka.create_topic(topic, 2, assignments={0: [1, 2, 3], 1: [2, 3, 1]})  # p0 in use1-az1, p1 in use1-az2
    metrics_port = free_port()
    # Without the per-broker listeners the proxy is the producer's one broker: each request
    # carries both partitions, so none can go whole to one leader.
    settings = {"proxy": {"metrics_port": metrics_port, "broker_listeners": False}}
    with proxy_on(kafka, tmp_path, settings=settings) as proxy:
        delivery = burst(f"{proxy.host}:{proxy.port}", topic, 2)
        declined = counters(metrics_port, DECLINED, "reason")
    assert delivery.acked == expected(2)
    assert declined.get("route", 0) >= 1, declined
    assert read_back(kafka.bootstrap, topic, 2, RECORDS) == expected(2)
    batches = produce_batches(tmp_path / "audit", topic)
    assert sum(b["records"] for b in batches) == RECORDS
    assert {(b["partition"], b["route"], b["error_code"]) for b in batches} == {(0, "local", 0), (1, "direct_cross", 0)}


@pytest.mark.trio
async def test_a_corrupt_batch_is_refused_by_the_leader_and_only_its_partition_fails(kafka, tmp_path):
    topic = unique_name("crc")
    await trio.to_thread.run_sync(lambda: kafka.create_topic(topic, 2, assignments={0: [1, 2, 3], 1: [1, 2, 3]}))
    metrics_port = free_port()
    with proxy_on(kafka, tmp_path, settings={"proxy": {"metrics_port": metrics_port}}) as proxy:
        good = record_batch([b"good-1", b"good-2"])
        bad = bytearray(record_batch([b"bad-1", b"bad-2"]))
        bad[-1] ^= 0xFF  # the last value byte: the CRC-32C no longer matches (the proxy does not check it here)
        wire = await Wire.connect(proxy.port, proxy.host)
        await wire.send(produce_request(3, 9, -1, {(topic, 0): good, (topic, 1): bytes(bad)}))
        correlation_id, response = await wire.read_response(ProduceResponse, 9)
        assert correlation_id == 3
        codes = {(p.index, p.error_code) for t in response.responses for p in t.partition_responses}
        assert codes == {(0, 0), (1, 2)}  # CORRUPT_MESSAGE, from the leader
        await wire.send(produce_request(4, 9, -1, {(topic, 1): record_batch([b"retry"])}))
        correlation_id, response = await wire.read_response(ProduceResponse, 9)
        assert correlation_id == 4
        answer = response.responses[0].partition_responses[0]
        assert (answer.index, answer.error_code, answer.base_offset) == (1, 0, 0)  # the bad batch never landed
        await wire.aclose()
        forwarded = await trio.to_thread.run_sync(counters, metrics_port, FORWARDED, "outcome")
    assert forwarded == {"decoded": 1.0, "bytes": 1.0}  # the refusal settled like any answer; the retry as bytes
