"""Produce quotas per principal, held with a real client (confluent-kafka) through an
in-process proxy in front of Tansu.

The client (User:ANONYMOUS: no SASL) has a quota of RATE bytes per second with a burst of
one second. It queues TOTAL bytes of records at once; the proxy answers with
throttle_time_ms and stops reading the connection for as long, so the whole must take at
least (TOTAL - burst) / RATE, within the stated tolerance, and the client hears of the
throttling (its throttle callback). No sleeps: the measured time is the client's own
flush.
"""

from __future__ import annotations

import time

import confluent_kafka
import pytest
import trio

from kafka_upstream.config import UpstreamConfig
from proxy.config import ProxyConfig, QuotaConfig
from proxy.startup import run_proxy
from tests.conftest import create_topics, unique_name

pytestmark = [pytest.mark.integration, pytest.mark.trio]

RATE = 512 * 1024  # bytes per second
RECORD = 1024
RECORDS = 2048  # 2 MiB of values; requests are a little larger (record and batch headers)
BATCH = 64 * 1024  # the client's batch.size: one request's values at most
TOLERANCE = 0.10  # the measured rate may exceed the quota by this much (request overheads counted by the proxy, not here)
SLOW_FACTOR = 3.0  # and take at most this many times the ideal time (a loaded machine)


def produce_all(port: int, topic: str) -> tuple[float, int, list[int]]:
    """(seconds to deliver every record, records acknowledged, throttle times the client was told)."""
    throttles: list[int] = []
    acked = [0]

    def delivered(err, _msg) -> None:
        if err is None:
            acked[0] += 1

    producer = confluent_kafka.Producer({
        # One request in flight: the proxy reads a connection's pipelined requests together, so
        # with several in flight the last ones' bytes ride on one unmute (the long-run rate
        # holds, but a short run ends early by their share).
        "bootstrap.servers": f"127.0.0.1:{port}", "acks": "all", "linger.ms": 5, "batch.size": BATCH,
        "max.in.flight.requests.per.connection": 1,
        "throttle_cb": lambda event: throttles.append(int(event.throttle_time * 1000)),
        "message.timeout.ms": 60_000})
    value = b"x" * RECORD
    started = time.monotonic()
    for _ in range(RECORDS):
        producer.produce(topic, value, partition=0, on_delivery=delivered)
    assert producer.flush(60) == 0
    elapsed = time.monotonic() - started
    producer.poll(0)  # throttle events are served by poll
    return elapsed, acked[0], throttles


async def test_a_principal_is_held_to_its_produce_rate(nursery, tansu):
    _server, port = await nursery.start(
        lambda task_status: run_proxy(ProxyConfig(listen_port=0), UpstreamConfig(bootstrap_servers=(tansu.bootstrap,)),
                                      task_status=task_status,
                                      quotas=QuotaConfig(produce_bytes_per_s=RATE, burst_s=1.0)))
    topic = unique_name("quota")
    await trio.to_thread.run_sync(create_topics, tansu.bootstrap, {topic: 1})
    elapsed, acked, throttles = await trio.to_thread.run_sync(produce_all, port, topic)
    assert acked == RECORDS
    # 2.875 s: 2 MiB less the 512 KiB burst and the last request (its throttle comes after its
    # answer, which ends the flush), at 512 KiB/s
    ideal_s = (RECORDS * RECORD - RATE * 1.0 - BATCH) / RATE
    assert elapsed >= ideal_s / (1 + TOLERANCE), f"{RECORDS * RECORD / elapsed:.0f} B/s over {elapsed:.2f} s"
    assert elapsed <= ideal_s * SLOW_FACTOR, elapsed
    assert throttles and max(throttles) > 0
