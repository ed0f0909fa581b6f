"""KafkaAppender.append_run above its Kafka I/O: a scripted client (the metadata part of
AIOKafkaClient the appender reads) and a scripted `_send` (one ProduceRequest to a
leader) answer each request, so the tests see every request's contents and can fail a
chosen batch. test_appender.py runs the real client against Tansu."""

from __future__ import annotations

import asyncio
import weakref

import pytest
from aiokafka.conn import CloseReason
from aiokafka.errors import RequestTimedOutError
from aiokafka.structs import BrokerMetadata

from kafka_protocol.produce import PartitionAnswer, ProduceAnswer
from leader_notify.agent.appender import AppendResult, KafkaAppender, PartitionRun
from leader_notify.agent.produce_channel import AnswerDeadlines
from leader_notify.agent.sequence_chain import producer_run_key
from tests.asyncio_idle import all_tasks_blocked
from tests.integration.leader_notify.idempotent_batches import idempotent_batch
from tests.refcount import WeakBuffer, collector_off, still_alive

NOT_LEADER_OR_FOLLOWER = 6
NOT_ENOUGH_REPLICAS = 19  # retriable; the batch was not appended
OUT_OF_ORDER_SEQUENCE_NUMBER = 45  # not retriable: the run stops there


class Cluster:
    def __init__(self) -> None:
        self.leader = 1

    def leader_for_partition(self, tp):
        return self.leader

    def broker_metadata(self, node_id):
        return BrokerMetadata(node_id, "h", 9092, None)


class Client:
    """Appends every batch it is sent unless `refuse` names it (batch -> codes, one per try)."""

    def __init__(self, refuse=None) -> None:
        self.cluster = Cluster()
        self.refuse = {batch: list(codes) for batch, codes in (refuse or {}).items()}
        self.requests: list[list[tuple[int, bytes]]] = []  # (partition, batch) per request
        self.logs: dict[int, list[bytes]] = {}
        self.refreshed = 0
        self.hold: set[bytes] = set()  # a request with one of these batches waits for `release`
        self.release = asyncio.Event()
        self.next_sequence: dict[tuple[int, int], int] = {}  # (partition, producer id) -> sequence the leader expects
        self.outstanding = 0  # requests sent whose answer was not yet made
        self.most_outstanding = 0
        self.in_flight_at_send: list[int] = []  # per request: requests in flight once it was sent

    async def send(self, client, node_id, topics, *, pipelined=False):
        """The appender's `_send`: records the request now, answers it when awaited (in
        the order sent, as a broker answers one connection's requests)."""
        parts = [(partition, bytes(batch)) for _topic, partitions in topics for partition, batch in partitions]
        self.requests.append(parts)
        self.outstanding += 1
        self.most_outstanding = max(self.most_outstanding, self.outstanding)
        self.in_flight_at_send.append(self.outstanding)
        return None, LazyAnswer(self._answer(parts))

    async def _answer(self, parts):
        if self.hold.intersection(batch for _p, batch in parts):
            await self.release.wait()
        self.outstanding -= 1
        answers = []
        for partition, batch in parts:
            codes = self.refuse.get(batch)
            if codes:
                answers.append((partition, codes.pop(0), -1))
                continue
            key = producer_run_key(batch)
            if key is not None:  # an idempotent batch: the leader's sequence check, as Kafka's
                expected = self.next_sequence.get((partition, key[0]))
                if expected is not None and key[2] != expected:
                    answers.append((partition, OUT_OF_ORDER_SEQUENCE_NUMBER, -1))
                    continue
                self.next_sequence[(partition, key[0])] = key[3]
            log = self.logs.setdefault(partition, [])
            log.append(batch)
            answers.append((partition, 0, len(log) - 1))
        return ProduceAnswer(tuple(PartitionAnswer("t", *answer) for answer in answers))

    async def force_metadata_update(self):
        self.refreshed += 1
        return True


class LazyAnswer:
    """Stands for the answer future: the scripted leader makes the answer when the appender
    awaits it, in the order the appender awaits them (request order), so `outstanding`
    counts the requests the appender has sent and not yet taken the answer of."""

    def __init__(self, coro) -> None:
        self._coro = coro

    def __await__(self):
        return self._coro.__await__()

    def add_done_callback(self, _callback) -> None:  # an answer nobody will await: never made
        self._coro.close()


def appender(client: Client, requests_in_flight: int = 2, max_request_bytes: int = 1024 * 1024) -> KafkaAppender:
    app = KafkaAppender(["x:1"], max_attempts=3, requests_in_flight=requests_in_flight,
                        max_request_bytes=max_request_bytes)
    app._client = client
    app._send = client.send
    return app


def codes_and_offsets(results: list[AppendResult]) -> list[tuple[int, int]]:
    return [(r.error_code, r.base_offset) for r in results]


def test_runs_of_two_partitions_share_requests_one_batch_per_partition_in_order():
    client = Client()

    async def main():
        app = appender(client)
        r0: list[AppendResult] = []
        r1: list[AppendResult] = []
        await asyncio.gather(app.append_run("t", 0, [b"a0", b"a1", b"a2"], r0),
                             app.append_run("t", 1, [b"b0", b"b1"], r1))
        return r0, r1

    r0, r1 = asyncio.run(main())
    assert codes_and_offsets(r0) == [(0, 0), (0, 1), (0, 2)]
    assert codes_and_offsets(r1) == [(0, 0), (0, 1)]
    assert client.requests == [[(0, b"a0"), (1, b"b0")], [(0, b"a1"), (1, b"b1")], [(0, b"a2")]]
    assert client.logs == {0: [b"a0", b"a1", b"a2"], 1: [b"b0", b"b1"]}


def run_a0_a1_a2(client) -> list[AppendResult]:
    """Partition t-0's run of a0, a1, a2 through an appender on `client`; its results."""
    async def main():
        results: list[AppendResult] = []
        await appender(client).append_run("t", 0, [b"a0", b"a1", b"a2"], results)
        return results
    return asyncio.run(main())


def test_a_batch_refused_for_good_stops_the_run_and_later_batches_are_never_sent():
    client = Client(refuse={b"a1": [OUT_OF_ORDER_SEQUENCE_NUMBER]})

    results = run_a0_a1_a2(client)
    assert codes_and_offsets(results) == [(0, 0), (OUT_OF_ORDER_SEQUENCE_NUMBER, -1)]
    assert client.requests == [[(0, b"a0")], [(0, b"a1")]]  # a2 never left
    assert client.logs == {0: [b"a0"]}


def test_a_retriable_refusal_retries_that_batch_then_the_run_goes_on_in_order():
    client = Client(refuse={b"a1": [NOT_LEADER_OR_FOLLOWER]})

    results = run_a0_a1_a2(client)
    assert codes_and_offsets(results) == [(0, 0), (0, 1), (0, 2)]
    assert results[1].attempts == 2  # the refused try counts as the first
    assert client.refreshed == 1  # NOT_LEADER_OR_FOLLOWER: metadata refreshed before the retry
    assert client.requests == [[(0, b"a0")], [(0, b"a1")], [(0, b"a1")], [(0, b"a2")]]
    assert client.logs == {0: [b"a0", b"a1", b"a2"]}


async def cancel_once_a1_is_in_flight(client: Client, call) -> None:
    """Start `call` (an appender coroutine), cancel it once two requests went out (the
    second, with a1, held by the leader), then let a1's answer come: the drain task gets it
    and must send nothing more."""
    task = asyncio.create_task(call)
    await all_tasks_blocked()
    assert len(client.requests) == 2
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    client.release.set()
    await all_tasks_blocked()  # the drain task got a1's answer and must have stopped


def test_a_cancelled_run_keeps_what_was_appended_and_sends_no_more():
    client = Client()
    client.hold = {b"a1"}

    async def main():
        results: list[AppendResult] = []
        await cancel_once_a1_is_in_flight(client, appender(client).append_run("t", 0, [b"a0", b"a1", b"a2"], results))
        return results

    results = asyncio.run(main())
    assert codes_and_offsets(results) == [(0, 0)]
    assert client.requests == [[(0, b"a0")], [(0, b"a1")]]  # a2 never left
    assert client.logs == {0: [b"a0", b"a1"]}  # a1 was in flight: the leader has it, the caller was gone


def test_no_leader_known_goes_through_the_attempt_path_then_the_run():
    client = Client()
    client.cluster.leader = -1  # leader election under way: LEADER_NOT_AVAILABLE, retried

    async def main():
        app = appender(client)
        results: list[AppendResult] = []

        async def refresh():
            client.refreshed += 1
            client.cluster.leader = 1
            return True

        client.force_metadata_update = refresh
        await app.append_run("t", 0, [b"a0", b"a1"], results)
        return results

    results = asyncio.run(main())
    assert codes_and_offsets(results) == [(0, 0), (0, 1)]
    assert results[0].attempts == 2 and client.refreshed == 1
    assert client.requests == [[(0, b"a0")], [(0, b"a1")]]


def test_append_runs_queues_the_partitions_together_and_each_stays_in_order():
    """Three partitions in one call: their batches share requests as concurrent append_run
    calls' do; a retriable refusal is retried in order, a refusal for good stops only its
    partition."""
    client = Client(refuse={b"b1": [NOT_ENOUGH_REPLICAS], b"c0": [OUT_OF_ORDER_SEQUENCE_NUMBER]})

    async def main():
        runs = [PartitionRun("t", 0, [b"a0", b"a1"], []), PartitionRun("t", 1, [b"b0", b"b1", b"b2"], []),
                PartitionRun("t", 2, [b"c0", b"c1"], [])]
        await appender(client).append_runs(runs, through.append)
        return [run.results for run in runs]

    through: list[int] = []
    r0, r1, r2 = asyncio.run(main())
    # Run 0 is through with the group, run 2 at its refusal for good, run 1 after its retry's backoff.
    assert through == [0, 2, 1]
    assert codes_and_offsets(r0) == [(0, 0), (0, 1)]
    assert codes_and_offsets(r1) == [(0, 0), (0, 1), (0, 2)]
    assert r1[1].attempts == 2
    assert codes_and_offsets(r2) == [(OUT_OF_ORDER_SEQUENCE_NUMBER, -1)]
    assert client.requests[0] == [(0, b"a0"), (1, b"b0"), (2, b"c0")]
    assert client.logs == {0: [b"a0", b"a1"], 1: [b"b0", b"b1", b"b2"]}
    assert [b for req in client.requests for p, b in req if p == 2] == [b"c0"]  # c1 never left


def test_append_runs_without_a_known_leader_goes_through_the_attempt_path():
    client = Client()
    client.cluster.leader = -1

    async def main():
        async def refresh():
            client.refreshed += 1
            client.cluster.leader = 1
            return True

        client.force_metadata_update = refresh
        runs = [PartitionRun("t", 0, [b"a0", b"a1"], []), PartitionRun("t", 1, [b"b0"], [])]
        await appender(client).append_runs(runs)
        return [run.results for run in runs]

    r0, r1 = asyncio.run(main())
    assert codes_and_offsets(r0) == [(0, 0), (0, 1)]
    assert codes_and_offsets(r1) == [(0, 0)]
    assert client.logs == {0: [b"a0", b"a1"], 1: [b"b0"]}


def test_cancelled_append_runs_keep_what_was_appended_and_send_no_more():
    client = Client()
    client.hold = {b"a1"}

    async def main():
        runs = [PartitionRun("t", 0, [b"a0", b"a1", b"a2"], []), PartitionRun("t", 1, [b"b0"], [])]
        await cancel_once_a1_is_in_flight(client, appender(client).append_runs(runs))
        return [run.results for run in runs]

    r0, r1 = asyncio.run(main())
    assert codes_and_offsets(r0) == [(0, 0)]
    assert codes_and_offsets(r1) == [(0, 0)]
    assert client.requests == [[(0, b"a0"), (1, b"b0")], [(0, b"a1")]]  # a2 never left


class Conn:
    def __init__(self) -> None:
        self.closed: list = []

    def close(self, reason=None):
        self.closed.append(reason)


def test_an_answer_that_does_not_come_times_out_and_closes_the_connection():
    async def main():
        deadlines = AnswerDeadlines(check_interval_s=0.01)
        conn = Conn()
        future = asyncio.get_running_loop().create_future()  # no answer ever
        with pytest.raises(RequestTimedOutError):
            await deadlines.answer(conn, future, 0.02)
        return conn.closed, deadlines.watched, deadlines.armed

    closed, watched, armed = asyncio.run(main())
    assert closed == [CloseReason.CONNECTION_TIMEOUT]
    assert (watched, armed) == (0, False)  # nothing left to watch: no timer keeps running


def test_an_answer_in_time_is_returned_and_the_connection_kept():
    async def main():
        deadlines = AnswerDeadlines(check_interval_s=0.01)
        conn = Conn()
        future = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(future.set_result, "answer")
        got = await deadlines.answer(conn, future, 10.0)
        deadlines.close()
        return got, conn.closed, deadlines.watched, deadlines.armed

    assert asyncio.run(main()) == ("answer", [], 0, False)


def idempotent_run(count: int, producer_id: int = 7) -> list[bytes]:
    """`count` one-record batches of one idempotent producer, sequences 0, 1, 2, ..."""
    return [idempotent_batch(producer_id, 0, i, [f"r{i}".encode()]) for i in range(count)]


def append_one_run(client: Client, batches: list[bytes], requests_in_flight: int = 2) -> list[AppendResult]:
    async def main():
        results: list[AppendResult] = []
        await appender(client, requests_in_flight).append_run("t", 0, batches, results)
        return results
    return asyncio.run(main())


def test_an_idempotent_run_keeps_two_requests_in_flight_after_its_first_batch_is_confirmed():
    client = Client()
    batches = idempotent_run(4)

    results = append_one_run(client, batches)
    assert codes_and_offsets(results) == [(0, 0), (0, 1), (0, 2), (0, 3)]
    assert client.requests == [[(0, batches[0])], [(0, batches[1])], [(0, batches[2])], [(0, batches[3])]]
    # b0 alone (the leader may not know the producer yet), b1 after its answer, then b2 and
    # b3 each sent ahead of the answer to the batch before.
    assert client.in_flight_at_send == [1, 1, 2, 2]
    assert client.logs == {0: batches}


def test_with_one_request_in_flight_an_idempotent_run_goes_one_at_a_time():
    client = Client()
    batches = idempotent_run(4)

    assert codes_and_offsets(append_one_run(client, batches, requests_in_flight=1)) == [(0, i) for i in range(4)]
    assert client.most_outstanding == 1


def test_batches_without_producer_id_never_go_ahead_of_an_answer():
    client = Client()

    assert codes_and_offsets(run_a0_a1_a2(client)) == [(0, 0), (0, 1), (0, 2)]
    assert client.most_outstanding == 1


def test_a_batch_refused_with_one_sent_ahead_is_retried_and_the_partition_stays_in_order():
    batches = idempotent_run(4)
    client = Client(refuse={batches[1]: [NOT_ENOUGH_REPLICAS]})

    results = append_one_run(client, batches)
    assert codes_and_offsets(results) == [(0, 0), (0, 1), (0, 2), (0, 3)]
    # b1 refused while b2 was in flight behind it: the leader refused b2 out of sequence;
    # b1 again, then the rest of the run from b2, whose first batch goes alone.
    assert client.requests == [[(0, batches[0])], [(0, batches[1])], [(0, batches[2])], [(0, batches[1])],
                               [(0, batches[2])], [(0, batches[3])]]
    assert client.logs == {0: batches}


def test_another_producers_batch_waits_for_the_answer_before_it():
    a = idempotent_run(2, producer_id=7)
    b = idempotent_run(2, producer_id=8)
    client = Client()

    append_one_run(client, [a[0], a[1], b[0], b[1]])
    # a1 may go ahead of nothing (a0 is the run's first), b0 follows another producer's batch,
    # b1 follows b0 but b0 is the first of its producer in the run: none overlap.
    assert client.most_outstanding == 1


def test_a_request_carries_batches_up_to_max_request_bytes_in_queue_order():
    """Five partitions of 4-byte batches, 10 bytes a request, one request in flight: a
    request takes the queued runs' next batches in queue order while they fit, and stops at
    the first that does not (no later partition overtakes it); a 12-byte batch goes alone;
    nothing is lost and each partition stays in order."""
    client = Client()

    async def main():
        runs = [PartitionRun("t", 0, [b"a0.."], []), PartitionRun("t", 1, [b"b0..", b"b1.."], []),
                PartitionRun("t", 2, [b"c0..big.....", b"c1.."], []), PartitionRun("t", 3, [b"d0.."], []),
                PartitionRun("t", 4, [b"e0.."], [])]
        await appender(client, requests_in_flight=1, max_request_bytes=10).append_runs(runs)
        return [run.results for run in runs]

    results = asyncio.run(main())
    assert client.requests == [
        [(0, b"a0.."), (1, b"b0..")],  # c0 does not fit after them
        [(1, b"b1..")],  # b is queued before c, whose c0 still does not fit
        [(2, b"c0..big.....")],  # larger than the limit: alone
        [(2, b"c1.."), (3, b"d0..")],
        [(4, b"e0..")],
    ]
    assert [codes_and_offsets(r) for r in results] == [[(0, 0)], [(0, 0), (0, 1)], [(0, 0), (0, 1)], [(0, 0)], [(0, 0)]]


def test_max_request_bytes_at_least_one():
    with pytest.raises(ValueError, match="max_request_bytes"):
        KafkaAppender(["x:1"], max_request_bytes=0)


def test_append_runs_leaves_no_cycle_holding_the_batches():
    """A notification's batches are views of the share read from S3 (megabytes): once
    append_runs is through nothing may keep them, or they wait for the cyclic collector
    (measured: an agent holding ~600 MiB of finished shares beside its 256 MiB cache).
    With the collector off, the batches must be freed by reference counting alone."""
    client = Client()

    async def main(batches):
        runs = [PartitionRun("t", 0, batches[:2], []), PartitionRun("t", 1, batches[2:], [])]
        await appender(client).append_runs(runs, lambda _k: None)
        return [codes_and_offsets(run.results) for run in runs]

    batches = [WeakBuffer(b"a0"), WeakBuffer(b"a1"), WeakBuffer(b"b0")]
    alive = [weakref.ref(batch) for batch in batches]
    with collector_off():
        results = asyncio.run(main(batches))
        del batches
        left = still_alive(alive)
    assert results == [[(0, 0), (0, 1)], [(0, 0)]]
    assert left == []
