"""Leaders moved by an operator while WAL traffic flows, on Apache Kafka, with Kafka's own
tools: `kafka-reassign-partitions` reorders each partition's replicas (same set, another
first), then `kafka-leader-election --election-type PREFERRED` makes the first the leader.

A paced idempotent producer writes through the proxy in use1-az1 the whole time (the
partitions led in use1-az2 and use1-az3 take the WAL route, then move one zone on). Every
record arrives once, in order, and no partition waits long for its acks: a leader that
moved answers NOT_LEADER once, the proxy refreshes its metadata on the spot, and the
batch goes by the new leader's zone. The bound is one metadata refresh's time-out
(`upstream.metadata_timeout_s`, 5 s) with the producer's own retry backoff.
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.conftest import unique_name
from tests.integration.cluster.conftest import Delivery, produce, producer, read_back, wal_sidecars
from tests.integration.kafka.conftest import spread_leaders
from tests.integration.kafka.java_clients import elect_preferred_leaders, reassign_partitions

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

PARTITIONS = 6
RECORDS_BEFORE = 600  # 3 s of traffic, then the move starts
RECORDS_AFTER = 600  # 3 s of traffic once every leader has moved
RECORDS_MAX = 24_000  # 2 minutes: the move must be done well before
RECORDS_PER_S = 200
# The longest pause between two acknowledgements of a partition while its leader moves: the
# producer follows the move (a metadata refresh, 5 s at most when an answer is lost, plus
# retry backoff: ~6 s on an idle host) rather than waiting out a request time-out (30 s).
# A CI run at low CPU priority (load 10-17) measured 9.8 s; the bound leaves room for that.
ACK_GAP_MAX_S = 15.0


def test_leaders_moved_with_kafkas_tools_while_wal_traffic_flows(kafka, moto_server, tmp_path):
    bucket = unique_name("wal")
    moto_server.create_bucket(bucket)
    topic = unique_name("moving")
    leaders = spread_leaders(kafka, topic, PARTITIONS)
    target = {p: (leaders[p] % 3) + 1 for p in range(PARTITIONS)}  # every leader one zone on
    moved: dict[str, object] = {}

    def move() -> None:
        try:
            state = kafka.describe(topic)
            order = {p: [target[p]] + [r for r in state[p]["replicas"] if r != target[p]] for p in state}
            reassign_partitions(kafka.version, kafka.bootstrap, topic, order, tmp_path)
            deadline = time.monotonic() + 60
            while any(s["replicas"] != order[p] for p, s in kafka.describe(topic).items()):
                assert time.monotonic() < deadline, "the reassignment did not complete"
            moved["election"] = elect_preferred_leaders(kafka.version, kafka.bootstrap, topic, range(PARTITIONS),
                                                        tmp_path)
            while kafka.leaders(topic) != target:
                assert time.monotonic() < deadline, f"leaders {kafka.leaders(topic)}, wanted {target}"
            moved["at"] = time.monotonic()
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            moved["error"] = exc

    records: list[tuple[int, int]] = []
    delivery = Delivery()
    mover = threading.Thread(target=move, name="leader-mover")
    with wal_sidecars(kafka, moto_server, bucket, tmp_path) as sidecars:
        p = producer(sidecars.proxy, acks="all")
        started = time.monotonic()
        last = RECORDS_MAX
        for i in range(RECORDS_MAX):
            if i == last:
                break
            if i == RECORDS_BEFORE:
                mover.start()
            if last == RECORDS_MAX and ("at" in moved or "error" in moved):
                last = i + RECORDS_AFTER
            while (ahead := started + i / RECORDS_PER_S - time.monotonic()) > 0:
                p.poll(max(ahead, 0.001))  # poll() counts whole ms: a shorter wait would spin
            records.append((i % PARTITIONS, i))
            produce(p, topic, [records[-1]], delivery)
        assert p.flush(60) == 0
        mover.join(120)
    assert "error" not in moved, moved.get("error")
    assert "at" in moved, "the leaders did not move"
    assert not delivery.failed, delivery.failed[:5]
    want: dict[int, list[int]] = {}
    for partition, value in records:
        want.setdefault(partition, []).append(value)
    assert delivery.acked == want
    assert read_back(kafka.bootstrap, topic, PARTITIONS, len(records)) == want  # once each, in order
    moved_at = float(moved["at"])  # type: ignore[arg-type]
    assert any(delivery.acked_at[v] > moved_at for v in want[0]), "no traffic after the move"
    for partition, values in want.items():
        times = [delivery.acked_at[v] for v in values]
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        assert max(gaps) <= ACK_GAP_MAX_S, (partition, max(gaps))
