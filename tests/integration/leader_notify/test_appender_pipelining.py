"""Two ProduceRequests in flight per leader for an idempotent producer's batches, against
Tansu (which refuses a batch out of sequence, as Kafka does; librdkafka's mock cluster
does not) behind deploy/local/kafka_faults.py, which refuses a chosen ProduceRequest.

What must hold: a batch sent ahead of the answer to the batch before it is never appended
before that batch. When the batch before is refused, the leader refuses the one sent ahead
(OUT_OF_ORDER_SEQUENCE_NUMBER), and the appender retries both in order.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import confluent_kafka
import pytest

from deploy.local.fault_common import running_listener
from deploy.local.processes import free_port, start_tansu
from leader_notify.agent.appender import AppendResult, KafkaAppender
from tests.conftest import create_topics, unique_name
from tests.integration.cluster.raw_log import raw_log
from tests.integration.leader_notify.idempotent_batches import idempotent_batch

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

NOT_ENOUGH_REPLICAS = 19  # retriable: the leader did not append the batch
MESSAGE_TOO_LARGE = 10  # not retriable


@contextmanager
def tansu_behind_front(tmp_path, topic: str, refusals: str) -> Iterator[str]:
    """A Tansu broker whose Metadata names the front's address, and the front refusing
    `refusals` (N:CODE,...) of the ProduceRequests carrying `topic`; yields the front's address."""
    port = free_port()
    with start_tansu(log_dir=tmp_path, advertised_port=port) as tansu:
        argv = [sys.executable, "-m", "deploy.local.kafka_faults", "--upstream", tansu.bootstrap,
                "--listen", f"127.0.0.1:{port}", "--refuse-produce", refusals, "--topic", topic]
        with running_listener(argv, tmp_path / "front.log", "Kafka fault front") as front:
            yield front


def idempotent_producer_id(bootstrap: str, topic: str) -> tuple[int, int]:
    """(producer id, epoch) that Tansu gave a real idempotent producer (confluent-kafka), read
    from the batch header of the one record it wrote to `topic` (sequences count per partition)."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    producer.produce(topic, b"-1", partition=0)
    assert producer.flush(30) == 0
    (batch,) = raw_log(bootstrap, topic, 0)
    return batch.producer_id, batch.producer_epoch


def counted_produces(tmp_path) -> int:
    """The ProduceRequests of the test's topic that reached the front (its stderr log)."""
    text = (tmp_path / "front.log").read_text()
    return sum(line.startswith(("forwarded produce #", "refused produce #")) for line in text.splitlines())


def append_run(bootstrap: str, topic: str, batches: list[bytes], requests_in_flight: int = 2) -> list[AppendResult]:
    async def main():
        async with KafkaAppender([bootstrap], requests_in_flight=requests_in_flight) as appender:
            results: list[AppendResult] = []
            await appender.append_run(topic, 0, batches, results)
            return results
    return asyncio.run(asyncio.wait_for(main(), 60))


def run_with_fourth_request_refused(tmp_path, code: int, count: int) -> tuple[int, list[AppendResult], list]:
    """One idempotent producer's `count` one-record batches (sequences 0.., values 0..) through
    the front, which refuses the 4th ProduceRequest with `code`; (producer id, results, log)."""
    topic, source = unique_name("ahead"), unique_name("pid")
    with tansu_behind_front(tmp_path, topic, f"4:{code}") as front:
        create_topics(front, {topic: 1, source: 1})
        producer_id, epoch = idempotent_producer_id(front, source)
        batches = [idempotent_batch(producer_id, epoch, seq, [str(seq).encode()]) for seq in range(count)]
        results = append_run(front, topic, batches)
        return producer_id, results, raw_log(front, topic, 0)


def test_a_batch_sent_ahead_of_a_refused_one_is_refused_by_the_leader_and_both_are_retried(tmp_path):
    # The appender's requests: #1 sequence 0 alone (the leader may not know the producer yet),
    # #2 sequence 1 after its answer, #3 sequence 2 sent ahead, #4 sequence 3 sent ahead:
    # refused by the front; #5 sequence 4 was already in flight behind it.
    producer_id, results, log = run_with_fourth_request_refused(tmp_path, NOT_ENOUGH_REPLICAS, 12)
    assert [(r.error_code, r.base_offset) for r in results] == [(0, i) for i in range(12)]
    assert [r.attempts for r in results] == [1, 1, 1, 2] + [1] * 8
    assert [(b.producer_id, b.values) for b in log] == [(producer_id, [seq]) for seq in range(12)]
    assert "refused produce #4 with 19" in (tmp_path / "front.log").read_text()
    # 12 batches, sequence 3 again and sequence 4 again (it was in flight behind 3); one
    # request at a time would have made 13.
    assert counted_produces(tmp_path) == 14


def test_a_batch_refused_for_good_leaves_the_one_sent_ahead_unappended(tmp_path):
    _producer_id, results, log = run_with_fourth_request_refused(tmp_path, MESSAGE_TOO_LARGE, 8)
    # Sequence 3 refused: the run stops there; sequence 4, sent ahead, was refused by Tansu
    # out of sequence and is neither appended nor reported.
    assert [(r.error_code, r.base_offset) for r in results] == [(0, 0), (0, 1), (0, 2), (MESSAGE_TOO_LARGE, -1)]
    assert [b.values for b in log] == [[0], [1], [2]]
    assert counted_produces(tmp_path) == 5  # sequence 4 went ahead of 3's answer
