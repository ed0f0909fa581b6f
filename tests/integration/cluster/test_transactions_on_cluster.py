"""Transactional producers through the proxy, on a three-broker cluster (librdkafka's mock
cluster checks sequences and transaction state for transactional producers).

FindCoordinator is answered by the proxy after asking upstream; InitProducerId with a
transactional id, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn go to
the real coordinators; the batches to the leaders in three zones.

The mock cluster writes transaction markers but does not filter aborted records for a
read_committed consumer, and does not apply TxnOffsetCommit to the group's committed
offsets (docs/operations-local.md). So the tests check the log (every record once, in
order, and one marker per transaction per partition) and which requests reached which
coordinator, instead of what a real cluster's read_committed consumer would show.
"""

from __future__ import annotations

import confluent_kafka
import pytest

from tests.integration.cluster.conftest import Delivery, produce, proxy_on, read_back, spread_leaders

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

PARTITIONS = 6
ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = 24, 25, 26, 28


def transactional(bootstrap: str, transactional_id: str) -> confluent_kafka.Producer:
    return confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                                     "linger.ms": 5, "transaction.timeout.ms": 30_000})


def test_commit_and_abort_across_zones_read_committed_sees_the_committed(cluster, tmp_path):
    spread_leaders(cluster, "txn", PARTITIONS)  # leaders in use1-az1/az2/az3
    committed_1 = [(i % PARTITIONS, i) for i in range(60)]
    aborted = [(i % PARTITIONS, i) for i in range(60, 120)]
    committed_2 = [(i % PARTITIONS, i) for i in range(120, 180)]
    delivery = Delivery()
    with proxy_on(cluster, tmp_path) as proxy:
        p = transactional(proxy.bootstrap, "txn-1")
        p.init_transactions(30)
        p.begin_transaction()
        produce(p, "txn", committed_1, delivery)
        p.commit_transaction(30)
        p.begin_transaction()
        produce(p, "txn", aborted, delivery)
        assert p.flush(30) == 0
        p.abort_transaction(30)
        p.begin_transaction()
        produce(p, "txn", committed_2, delivery)
        p.commit_transaction(30)
        log = proxy.log_text()
    assert not delivery.failed, delivery.failed[:5]
    want: dict[int, list[int]] = {}
    for partition, value in committed_1 + aborted + committed_2:  # aborted ones too: the mock shows them
        want.setdefault(partition, []).append(value)
    assert read_back(cluster.bootstrap, "txn", PARTITIONS, 180) == want  # once each, in order
    ends = log_ends(cluster.bootstrap, "txn", PARTITIONS)
    assert ends == {p: len(want[p]) + 3 for p in range(PARTITIONS)}  # + a commit, an abort, a commit marker
    assert "internal error" not in log


def test_offsets_sent_to_the_transaction_go_to_the_coordinators(cluster, tmp_path):
    """AddOffsetsToTxn and EndTxn reach the transaction coordinator, TxnOffsetCommit the
    group coordinator (both set by the test, so the forwarding is what puts them there)."""
    spread_leaders(cluster, "txn-out", PARTITIONS)
    spread_leaders(cluster, "txn-in", PARTITIONS)
    cluster.command("coordinator", key_type="transaction", key="copier-1", broker=3)
    cluster.command("coordinator", key_type="group", key="copier", broker=2)
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "copier",
                                         "enable.auto.commit": False})
    try:
        with proxy_on(cluster, tmp_path) as proxy:
            p = transactional(proxy.bootstrap, "copier-1")
            p.init_transactions(30)
            cluster.track_requests()
            p.begin_transaction()
            delivery = Delivery()
            produce(p, "txn-out", [(0, 1), (1, 2)], delivery)
            offsets = [confluent_kafka.TopicPartition("txn-in", 0, 42), confluent_kafka.TopicPartition("txn-in", 1, 7)]
            p.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
            p.commit_transaction(30)
    finally:
        consumer.close()
    received = cluster.requests()
    assert (3, ADD_PARTITIONS_TO_TXN) in received and (3, ADD_OFFSETS_TO_TXN) in received
    assert (2, TXN_OFFSET_COMMIT) in received
    assert (3, END_TXN) in received
    assert not [r for r in received if r[1] in (ADD_OFFSETS_TO_TXN, END_TXN, ADD_PARTITIONS_TO_TXN) and r[0] != 3]
    assert not [r for r in received if r[1] == TXN_OFFSET_COMMIT and r[0] != 2]
    assert not delivery.failed
    assert read_back(cluster.bootstrap, "txn-out", PARTITIONS, 2) == {0: [1], 1: [2]}


def log_ends(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"ends-{topic}"})
    try:
        return {p: consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)}
    finally:
        consumer.close()
