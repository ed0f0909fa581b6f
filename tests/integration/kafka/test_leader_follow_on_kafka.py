"""A leader moved mid-burst costs the producer nothing, on Apache Kafka.

An idempotent confluent-kafka producer (5 requests in flight) writes a paced burst through
the proxy in use1-az1 while the partitions' leaders move with the requests `azsidecar plan
leaders --apply` makes (leader_placement/admin.py: AlterPartitionReassignments with the same
replicas in a new order, then a preferred ElectLeaders). The proxy follows each move inside
the Produce round that hit it: the batch the old leader (or the old zone's agent) refused is
sent again by the new leader's route, after any earlier batch of its partition. So the
producer sees no error and retries nothing, and a consumer reads every record once, in order.

One test per route the moved partitions start on: local/direct_cross (no WAL), and the WAL.
"""

from __future__ import annotations

import gzip
import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import confluent_kafka
import pytest

from leader_placement.admin import KafkaLeaderAdmin
from tests.conftest import unique_name
from tests.integration.cluster.conftest import Delivery, proxy_on, read_back, wal_sidecars

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(180)]

PARTITIONS = 4
RECORDS_PER_S = 600  # paced: ~150 a second per partition, several batches of each in flight at the move
RECORDS_AFTER_MOVE = 300  # half a second more of traffic once every leader has moved
RECORDS_MAX = 30 * RECORDS_PER_S  # the moves must be done well before
MOVE_AFTER_S = 0.5  # traffic flows on the first routes (every partition acknowledged) before the moves start


@dataclass
class ProducerView:
    """What the producer itself saw besides its delivery reports: errors and retries."""

    errors: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)  # librdkafka's lines for a produce answer with an error

    def log_handler(self) -> logging.Handler:
        view = self

        class Catch(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                line = record.getMessage()
                if "encountered error" in line or "NOT_LEADER" in line or "Not leader" in line:
                    view.refusals.append(line)
        return Catch()


def watched_producer(bootstrap: str, view: ProducerView) -> confluent_kafka.Producer:
    logger = logging.getLogger(f"rdkafka-{id(view)}")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.addHandler(view.log_handler())
    return confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "max.in.flight.requests.per.connection": 5,
         "linger.ms": 5, "message.timeout.ms": 60_000, "debug": "msg",  # a refused batch logs "encountered error"
         "error_cb": lambda err: view.errors.append(str(err))},
        logger=logger)


def move_leaders(bootstrap: str, topic: str, targets: dict[int, int], done: dict[str, object]) -> None:
    """Reorder each partition's replicas so its target comes first, then elect it, as the apply does."""
    try:
        keys = [(topic, p) for p in targets]
        with KafkaLeaderAdmin(bootstrap.split(",")) as admin:
            now = admin.describe(keys)
            orders = {(topic, p): (b, *[r for r in now[(topic, p)].replicas if r != b]) for p, b in targets.items()}
            done["started"] = time.monotonic()
            assert admin.reassign(orders) == {}
            deadline = time.monotonic() + 60
            while admin.reassignments(keys) or any(admin.describe(keys)[k].replicas != orders[k] for k in keys):
                assert time.monotonic() < deadline, "the reassignment did not complete"
                time.sleep(0.05)  # polling the cluster's state
            assert admin.elect_preferred(keys) == {}
            while any(admin.describe(keys)[k].leader != targets[k[1]] for k in keys):
                assert time.monotonic() < deadline, f"leaders {admin.describe(keys)}, wanted {targets}"
                time.sleep(0.05)  # polling the cluster's state
        done["at"] = time.monotonic()
    except BaseException as exc:  # noqa: BLE001 - reported by the test
        done["error"] = exc


def burst_across_the_moves(bootstrap: str, cluster_bootstrap: str, topic: str,
                           targets: dict[int, int]) -> tuple[list[tuple[int, int]], Delivery, ProducerView, dict]:
    """A paced burst through `bootstrap`; the leaders move to `targets` a second in; it goes
    on for a second after they did."""
    view, delivery, moved = ProducerView(), Delivery(), {}
    p = watched_producer(bootstrap, view)
    mover = threading.Thread(target=move_leaders, args=(cluster_bootstrap, topic, targets, moved), name="mover")
    records: list[tuple[int, int]] = []

    def report(err, msg) -> None:
        if err is not None:
            delivery.failed.append(f"{msg.partition()}:{msg.value()!r}: {err}")
            return
        value = int(msg.value())
        delivery.acked.setdefault(msg.partition(), []).append(value)
        delivery.acked_at[value] = time.monotonic()

    started = time.monotonic()
    all_acked_at = None  # when every partition had its first acknowledgement
    last = RECORDS_MAX
    for i in range(RECORDS_MAX):
        if i == last:
            break
        if all_acked_at is None and len(delivery.acked) == PARTITIONS:
            all_acked_at = time.monotonic()
        if all_acked_at is not None and not mover.is_alive() and "started" not in moved \
                and time.monotonic() - all_acked_at >= MOVE_AFTER_S:
            mover.start()
        if last == RECORDS_MAX and ("at" in moved or "error" in moved):
            last = i + RECORDS_AFTER_MOVE
        while (ahead := started + i / RECORDS_PER_S - time.monotonic()) > 0:
            p.poll(max(ahead, 0.001))  # poll() counts whole ms: a shorter wait would spin
        records.append((i % PARTITIONS, i))
        p.produce(topic, str(i).encode(), partition=i % PARTITIONS, on_delivery=report)
        p.poll(0)
    assert p.flush(60) == 0
    mover.join(60)
    return records, delivery, view, moved


def produce_batches(audit_dir: Path, topic: str) -> list[dict]:
    return [r for path in audit_dir.rglob("*.jsonl.gz") for r in map(json.loads, gzip.open(path, "rt"))
            if r["kind"] == "produce_batch" and r["topic"] == topic]


def assert_rerouted(batches: list[dict], expected: dict[int, tuple[str, str]]) -> None:
    """Some batches were sent again after a refusal, each as `expected` says for its partition
    ((route, reason)): with the route it took then and the refused route and zone named."""
    got = {(b["partition"], b["route"], b["reason"]) for b in batches if b["reason"].startswith("leader moved")}
    assert got, "no batch was refused and sent again: the move did not hit a batch on its way"
    assert got <= {(p, route, reason) for p, (route, reason) in expected.items()}, got


def follow_lines(log_dir: Path) -> list[str]:
    """The proxies' lines about refused batches: what a refusal that reached the producer was."""
    return [line for path in log_dir.rglob("*.log") for line in path.read_text(errors="replace").splitlines()
            if "moved leader" in line or "refused" in line]


def check(records: list[tuple[int, int]], delivery: Delivery, view: ProducerView, moved: dict,
          cluster_bootstrap: str, topic: str, log_dir: Path) -> None:
    assert "error" not in moved, moved.get("error")
    assert "at" in moved, "the leaders did not move"
    want: dict[int, list[int]] = {}
    for partition, value in records:
        want.setdefault(partition, []).append(value)
    for partition, values in want.items():  # the move happened mid-burst for every partition
        assert any(delivery.acked_at.get(v, 0) < moved["started"] for v in values), partition
        assert any(delivery.acked_at.get(v, 0) > moved["at"] for v in values), partition
    assert not delivery.failed, delivery.failed[:5]
    assert view.errors == []
    assert view.refusals == [], (view.refusals[:5], follow_lines(log_dir)[:10])
    assert delivery.acked == want
    assert read_back(cluster_bootstrap, topic, PARTITIONS, len(records)) == want  # once each, in order


@pytest.fixture
def topic(kafka) -> Iterator[str]:
    """p0 led by node 1 (use1-az1), p1 and p3 by node 2 (use1-az2), p2 by node 3 (use1-az3); RF 3."""
    name = unique_name("follow")
    kafka.create_topic(name, PARTITIONS, assignments={0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2], 3: [2, 1, 3]})
    yield name


# p0 local -> use1-az2, p1 use1-az2 -> local, p2 use1-az3 -> use1-az2; p3 stays in use1-az2
TARGETS = {0: 2, 1: 1, 2: 2}


def test_leaders_moved_mid_burst_on_the_local_and_direct_routes_cost_the_producer_nothing(kafka, topic, tmp_path):
    with proxy_on(kafka, tmp_path, settings={"router": {"policy": "direct"}}) as proxy:
        records, delivery, view, moved = burst_across_the_moves(f"{proxy.host}:{proxy.port}", kafka.bootstrap,
                                                                topic, TARGETS)
    check(records, delivery, view, moved, kafka.bootstrap, topic, tmp_path)
    batches = produce_batches(tmp_path / "audit", topic)
    assert [b for b in batches if b["error_code"] != 0] == []
    assert {(b["partition"], b["route"]) for b in batches} == {
        (0, "local"), (0, "direct_cross"), (1, "direct_cross"), (1, "local"), (2, "direct_cross"),
        (3, "direct_cross")}
    # the batches on their way at the move were refused by the old leader and sent again by the
    # proxy (a partition may have had none: the first refusal refreshes the whole topic's leaders)
    assert_rerouted(batches, {
        0: ("direct_cross", "leader moved: re-routed (local to use1-az1 refused)"),
        1: ("local", "leader moved: re-routed (direct_cross to use1-az2 refused)"),
        2: ("direct_cross", "leader moved: re-routed (direct_cross to use1-az3 refused)")})


def test_leaders_moved_mid_burst_on_the_wal_route_cost_the_producer_nothing(kafka, topic, moto_server, tmp_path):
    bucket = unique_name("wal")
    moto_server.create_bucket(bucket)
    # Default notify settings: the first append of a partition at the leader it moved to waits
    # for that leader's followers, up to the brokers' replica.fetch.wait.max.ms (5 s here), and
    # the sender gives such a first contact notify.timeout_s, not the gray deadline.
    with wal_sidecars(kafka, moto_server, bucket, tmp_path) as sidecars:
        records, delivery, view, moved = burst_across_the_moves(sidecars.proxy, kafka.bootstrap, topic, TARGETS)
    check(records, delivery, view, moved, kafka.bootstrap, topic, tmp_path)
    batches = produce_batches(sidecars.audit_dir, topic)
    assert [b for b in batches if b["error_code"] != 0] == []
    # p0 local -> WAL to use1-az2; p1 WAL to use1-az2 -> local; p2 WAL to use1-az3 -> WAL to use1-az2
    assert {(b["partition"], b["leader_zone"], b["route"]) for b in batches} == {
        (0, "use1-az1", "local"), (0, "use1-az2", "wal"), (1, "use1-az2", "wal"), (1, "use1-az1", "local"),
        (2, "use1-az3", "wal"), (2, "use1-az2", "wal"), (3, "use1-az2", "wal")}
    # refused by the old leader (p0, directly) or by the agent of the zone the leader left (p1, p2)
    assert_rerouted(batches, {
        0: ("wal", "leader moved: re-routed (local to use1-az1 refused)"),
        1: ("local", "leader moved: re-routed (wal to use1-az2 refused)"),
        2: ("wal", "leader moved: re-routed (wal to use1-az3 refused)")})
