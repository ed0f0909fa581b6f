"""Append raw record batches to their partition leaders with aiokafka's low-level client.

Strategy: the batch bytes travel unchanged (producer id, epoch and sequence included), so
the leader does its own duplicate detection. Per leader node one drain task keeps one
ProduceRequest in flight and puts into it the next batch of every partition queued for
that node, at most one per partition (Kafka's rule), the way a producer's sender does, up
to `max_request_bytes` (a producer's max.request.size; the runs queued after the first
batch that does not fit wait for the next request, so none overtakes another). A
caller queues a partition's batches as one run (`append_run`; `append` is a run of one):
the drain task sends a run's next batch only after the previous one's answer said
appended, so each partition's order is kept with one of its batches in flight, and the
caller's task wakes once per run, not per batch. With `requests_in_flight` > 1 the drain
task also sends further requests before the first one's answer, carrying only batches
that sequence_chain.may_send_ahead lets go ahead: an idempotent producer's next batch in
sequence, behind a batch of it the leader confirmed, so the leader's sequence check
refuses it (OUT_OF_ORDER_SEQUENCE_NUMBER) if the batch before it fails; that answer is
ignored and both are retried in order. An agent that leads one broker then has the next
request on the wire while it waits, instead of sleeping once per request. Requests are framed and written onto
aiokafka's connection by produce_channel.py. Leader moves
and unknown partitions refresh metadata and retry; a leader in another zone (by
`router.broker_zones`, else the broker's rack) is looked up again before the batch is
refused, so a leader that came back into this zone is used at once; connection failures and timeouts retry
too; all with bounded attempts and capped exponential backoff.
When attempts run out the caller gets the last Kafka error code, which is retriable for
the producer, never an exception. aiokafka's exceptions stop here.

A DUPLICATE_SEQUENCE_NUMBER answer is verified before it counts as appended: the partition's
tail is fetched and searched for the batch (core/duplicates.py says why: a restarted Tansu
can call a batch a duplicate that it never wrote). Present: its real offset. Absent:
UNKNOWN_SERVER_ERROR, which no client retries and which never claims success. Tail not
readable: retried like a timeout. An OUT_OF_ORDER_SEQUENCE_NUMBER answer (to a batch not
sent ahead) is searched for the same way: Kafka gives it to a retry of a batch older than the
five per producer it remembers, so a batch found in the log counts as appended; otherwise
the refusal stands (a real gap in the producer's sequence).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from aiokafka.client import AIOKafkaClient
from aiokafka.conn import AIOKafkaConnection, collect_hosts, create_conn
from aiokafka.errors import KafkaError, RequestTimedOutError
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.metadata import MetadataRequest
from aiokafka.protocol.offset import OffsetRequest
from aiokafka.structs import TopicPartition

from core.duplicates import BatchHeader, TailSearch, Verdict, batch_headers, covered_until
from core.errors import (
    DUPLICATE_SEQUENCE_NUMBER,
    LEADER_NOT_AVAILABLE,
    NETWORK_EXCEPTION,
    NONE,
    NOT_LEADER_OR_FOLLOWER,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    REFRESH_METADATA,
    REQUEST_TIMED_OUT,
    RETRIABLE,
    UNKNOWN_SERVER_ERROR,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from core.zones import leader_zone
from kafka_protocol.produce import Batch, ProduceAnswer
from leader_notify.agent.append_runs import AppendResult, PartitionRun, Run, RunGroup, next_request, settle_answer
from leader_notify.agent.errors import KafkaAppendUnavailable
from leader_notify.agent.produce_channel import AnswerDeadlines, channel_version, leader_connection, send_produce
from leader_notify.agent.produce_request import RawProduceRequest

log = logging.getLogger(__name__)


# Internal marker, never sent: the leader moved out of the agent's zone; answered at once as
# NOT_LEADER_OR_FOLLOWER (no retries: waiting does not bring the leader back).
_LEADER_IN_OTHER_ZONE = -1000

BACKOFF_INITIAL_S = 0.1
PROBE_TIMEOUT_S = 5.0  # one address's TCP, TLS and SASL when a failed start asks why: the start must end, not hang
DEADLINE_CHECK_S = 0.5  # how often answers past request_timeout_ms are looked for (a timer per request costs more)
BACKOFF_MAX_S = 1.0  # a Tansu/Kafka restart takes about a second to reach; wait no longer per step
TAIL_FETCH_BYTES = 4 * 1024 * 1024  # per Fetch while searching a partition's tail for a duplicate
TAIL_FETCHES_PER_RANGE = 256  # a range that takes more Fetches than this is left unknown
LATEST_TIMESTAMP = -1  # ListOffsets: the log end
BEYOND_ANY_OFFSET = 1 << 62  # a Fetch here returns no records, only the partition's high watermark
# Tansu answers a Fetch with max_wait 0 with no partitions at all, and with less data the
# shorter the wait: a range read waits up to 500 ms (it returns once it has data), the
# high-watermark probe 1 ms. A read that gets no batch is tried this often before it ends.
TAIL_FETCH_WAIT_MS = 500
PROBE_FETCH_WAIT_MS = 1
TAIL_FETCH_STALLS = 3


class _Flight(NamedTuple):
    """A ProduceRequest in flight: the connection it went on (None: sent through
    client.send, already answered), its answer, and which batch of which run it carries."""
    conn: AIOKafkaConnection | None
    answer: asyncio.Future[ProduceAnswer]
    batches: list[tuple[Run, int]]


def _consume_outcome(future: asyncio.Future[ProduceAnswer]) -> None:
    """Done callback of an answer nobody will await (its drain task ended): take its
    exception so asyncio does not log it as never retrieved."""
    if not future.cancelled():
        future.exception()


class KafkaAppender:
    """Owns one AIOKafkaClient for the zone's cluster. Use `async with` (or start/close)."""

    def __init__(self, bootstrap_servers: list[str] | tuple[str, ...], *, client_id: str = "azsidecar-agent",
                 max_attempts: int = 5, produce_timeout_ms: int = 10_000, request_timeout_ms: int = 15_000,
                 requests_in_flight: int = 2, max_request_bytes: int = 1024 * 1024,
                 home_zone: str | None = None, security: Mapping[str, Any] | None = None,
                 broker_zones: Mapping[str, str] | None = None) -> None:
        """home_zone: refuse (NOT_LEADER_OR_FOLLOWER) to append to a leader in another zone -
        by broker_zones (broker id -> zone, router.broker_zones), else by its broker's rack -
        so the proxy re-routes instead of the agent crossing zones.
        security: AIOKafkaClient's security_protocol/ssl_context/sasl_* arguments (TLS, SASL).
        requests_in_flight: ProduceRequests in flight per leader (1-5); a partition with a
        batch in flight adds one only if sequence_chain.may_send_ahead lets it go ahead.
        max_request_bytes: the record batches one ProduceRequest carries at most (a batch
        larger than this goes alone), as a producer's max.request.size: requests stay far
        below the broker's socket.request.max.bytes however many partitions are appending."""
        if not 1 <= requests_in_flight <= 5:
            raise ValueError(f"requests_in_flight: 1..5, got {requests_in_flight}")
        if max_request_bytes < 1:
            raise ValueError(f"max_request_bytes: at least 1, got {max_request_bytes}")
        self._max_request_bytes = max_request_bytes
        self._requests_in_flight = requests_in_flight
        self._security = dict(security or {})
        self._home_zone = home_zone
        self._broker_zones = dict(broker_zones or {})
        self._learning: dict[str, asyncio.Future[None]] = {}  # topic -> its first metadata fetch, shared
        self._bootstrap = list(bootstrap_servers)
        self._client_id = client_id
        self._max_attempts = max_attempts
        self._produce_timeout_ms = produce_timeout_ms
        self._request_timeout_ms = request_timeout_ms
        self._client: AIOKafkaClient | None = None
        # Per leader node: runs of batches waiting for the next ProduceRequest, and the task sending them.
        self._pending: dict[int, list[Run]] = {}
        self._drains: dict[int, asyncio.Task[None]] = {}
        # aiokafka's connection per leader as last used, with its ProduceRequest version for the channel
        self._conns: dict[int, tuple[AIOKafkaConnection, int | None]] = {}
        self._deadlines = AnswerDeadlines(min(DEADLINE_CHECK_S, request_timeout_ms / 1000 / 10))

    async def start(self) -> None:
        """Connect and fetch metadata. Raises KafkaAppendUnavailable if no broker answers."""
        self._client = AIOKafkaClient(bootstrap_servers=self._bootstrap, client_id=self._client_id,
                                      request_timeout_ms=self._request_timeout_ms, retry_backoff_ms=100,
                                      **self._security)
        try:
            await self._client.bootstrap()
        except KafkaError as exc:
            await self._client.close()
            self._client = None
            reasons = "; ".join(await self._refusals()) or str(exc)
            raise KafkaAppendUnavailable(f"no broker of {self._bootstrap} could be used: {reasons}") from exc

    async def _refusals(self) -> list[str]:
        """Why each bootstrap address cannot be used, for the start-up failure's message.

        aiokafka's bootstrap only logs each address's error and raises "Unable to bootstrap",
        which hides a wrong CA or a wrong SASL password; so after a failed start every
        address is tried once more, alone, as aiokafka connects (TCP, TLS, SASL), within
        PROBE_TIMEOUT_S, and its exception kept. An address that now answers is left out.
        """
        reasons = []
        for host, port, _family in collect_hosts(self._bootstrap, randomize=False):
            try:
                conn = await asyncio.wait_for(
                    create_conn(host, port, client_id=self._client_id, request_timeout_ms=self._request_timeout_ms,
                                **self._security), PROBE_TIMEOUT_S)
            except TimeoutError:
                reasons.append(f"{host}:{port}: no answer within {PROBE_TIMEOUT_S:g} s")
            except (OSError, KafkaError) as exc:
                reasons.append(f"{host}:{port}: {exc or type(exc).__name__}")
            else:
                conn.close()
        return reasons

    async def probe(self) -> None:
        """One Metadata request naming no topic (readiness): a broker answers with the brokers
        and the controller. Raises KafkaAppendUnavailable when no known broker answers.

        Not the whole cluster's metadata: the probe runs every few seconds in every agent, and
        aiokafka decodes a full answer in Python (in a bench whose cluster held a few
        512-partition topics, 2.0 of an agent's 9.0 profiled seconds)."""
        if self._client is None:
            raise KafkaAppendUnavailable("the appender is not started")
        nodes = [b.nodeId for b in self._client.cluster.brokers()]
        random.shuffle(nodes)  # spread the probes of a zone's agents over its brokers
        refusals = []
        for node in nodes:
            try:
                answer = await self._client.send(node, MetadataRequest([]))
            except (KafkaError, OSError) as exc:
                refusals.append(f"node {node}: {exc!r}")
                continue
            if answer.brokers:
                return
            refusals.append(f"node {node}: an answer naming no broker")
        raise KafkaAppendUnavailable(f"no answer to Metadata: {'; '.join(refusals) or 'no broker known'}")

    async def close(self) -> None:
        for fut in self._learning.values():
            fut.cancel()
        drains = list(self._drains.values())
        for task in drains:
            task.cancel()
        if drains:
            await asyncio.gather(*drains, return_exceptions=True)
        self._conns.clear()
        self._deadlines.close()
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def __aenter__(self) -> KafkaAppender:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def append(self, topic: str, partition: int, batch: Batch) -> AppendResult:
        """Append one raw batch; returns the leader's base offset or the last error code."""
        assert self._client is not None, "start() first"
        return await self._append_one(self._client, TopicPartition(topic, partition), batch, time.monotonic(), None)

    async def append_run(self, topic: str, partition: int, batches: Sequence[Batch],
                         results: list[AppendResult]) -> None:
        """Append a partition's batches in order, adding one result per batch to `results`.

        Stops at the first batch that fails (its result is the last one added; the batches
        after it are not attempted), so the partition's log never skips a batch. `results`
        holds the batches appended so far also when the caller is cancelled.

        While the leader is known and in this zone the batches are queued as one run with the
        leader's drain task, which sends the next one in the first request after the previous
        one's answer said appended: the caller's task wakes once per run, not once per batch
        (per batch a future, a task step and the attempt's bookkeeping were the agent's
        largest CPU item per ProduceRequest besides aiokafka's). A batch the leader refuses
        goes through `append`'s retries (metadata refresh, backoff, duplicate check) and the
        run goes on after it.
        """
        assert self._client is not None, "start() first"
        await self._go_on(self._client, TopicPartition(topic, partition), batches, 0, None, results)

    async def append_runs(self, runs: Sequence[PartitionRun],
                          on_through: Callable[[int], None] | None = None) -> None:
        """`append_run` for several partitions at once (each in order, all concurrently),
        with one wake-up for the caller while nothing fails. `on_through(k)`, if given, is
        called as soon as run k's results are final (the agent frees its append slot then),
        not for runs still going when the caller is cancelled.

        The runs whose leader is known and in this zone are queued at once, as one group;
        the caller waits for the group, not for each run (an agent's notification carries a
        run per partition, which needed a task and a wake-up each).
        A run that a refusal stopped, or whose leader is not known, then goes on as
        `append_run` does. Each run's `results` holds what was appended also when the
        caller is cancelled."""
        assert self._client is not None, "start() first"
        client = self._client
        loop = asyncio.get_running_loop()
        queued: list[tuple[int, PartitionRun, Run]] = []
        recorded: set[int] = set()  # queued runs whose results are in their item's list

        def record(k: int, item: PartitionRun, run: Run) -> None:
            if k not in recorded:
                recorded.add(k)
                item.results.extend(AppendResult(NONE, offset, False, 1, latency_s)
                                    for offset, latency_s in zip(run.offsets, run.latencies_s, strict=True))

        def through_queued(k: int) -> None:
            # The results are in `results` before the caller hears the run is through (the
            # agent records them and passes the partition's turn on from this callback).
            _k, item, run = queued[position[k]]
            record(k, item, run)
            if on_through is not None:
                on_through(k)

        position: dict[int, int] = {}
        group = RunGroup(loop, through_queued)
        now = time.monotonic()
        later: list[tuple[int, PartitionRun]] = []
        for k, item in enumerate(runs):
            tp = TopicPartition(item.topic, item.partition)
            leader = self._known_leader_in_zone(client, tp) if item.batches else None
            if leader is None:
                later.append((k, item))
                continue
            run = Run(tp, item.batches, 0, loop.create_future(), now, group)
            run.group_index = k
            group.remaining += 1
            self._queue(client, leader, run)
            position[k] = len(queued)
            queued.append((k, item, run))
        if queued:
            try:
                await group.all_done
            finally:  # also when cancelled: a cancelled run's drain task drops it
                for k, item, run in queued:
                    if not run.done.done():
                        run.done.cancel()
                    record(k, item, run)
                    # run -> group -> through_queued -> queued -> run is a cycle: left to the
                    # collector it kept whole shares (megabytes each) for many seconds.
                    run.group = None
        steps = [self._go_on(client, run.tp, item.batches, run.next, (run.failure, -1, ""), item.results,
                             started=run.last_s, on_through=on_through, index=k)
                 for k, item, run in queued if run.failure is not None]
        steps += [self._go_on(client, TopicPartition(item.topic, item.partition), item.batches, 0, None,
                              item.results, on_through=on_through, index=k) for k, item in later]
        if len(steps) == 1:
            await steps[0]
        elif steps:
            async with asyncio.TaskGroup() as tg:
                for step in steps:
                    tg.create_task(step)

    async def _go_on(self, client: AIOKafkaClient, tp: TopicPartition, batches: Sequence[Batch], i: int,
                     first: tuple[int, int, str] | None, results: list[AppendResult], *,
                     started: float | None = None, on_through: Callable[[int], None] | None = None,
                     index: int = 0) -> None:
        """The run from batch `i` on; `first`, if given, is batch i's outcome of an attempt
        already made (a refusal, retried by `_append_one`), `started` when that try began.
        `on_through(index)` is called when the run's results are final."""
        loop = asyncio.get_running_loop()
        count = len(batches)
        while i < count:
            if first is None:
                started = time.monotonic()
                leader = self._known_leader_in_zone(client, tp)
                if leader is not None:
                    run = Run(tp, batches, i, loop.create_future(), started)
                    self._queue(client, leader, run)
                    try:
                        await run.done  # cancelled with its caller: the drain task then drops the run
                    finally:
                        results.extend(AppendResult(NONE, offset, False, 1, latency_s)
                                       for offset, latency_s in zip(run.offsets, run.latencies_s, strict=True))
                    i = run.next
                    if run.failure is None:
                        continue
                    first, started = (run.failure, -1, ""), run.last_s
            assert started is not None
            result = await self._append_one(client, tp, batches[i], started, first)
            first = None
            results.append(result)
            if result.error_code != NONE:
                break
            i += 1
        if on_through is not None:
            on_through(index)

    def _known_leader_in_zone(self, client: AIOKafkaClient, tp: TopicPartition) -> int | None:
        """The partition's leader if the metadata names one that this agent may append to;
        None sends the batch through `_attempt`, which learns, refreshes or refuses."""
        leader = client.cluster.leader_for_partition(tp)
        if leader is None or leader == -1 or self._other_zone(client, tp, leader):
            return None
        return int(leader)

    async def _append_one(self, client: AIOKafkaClient, tp: TopicPartition, batch: Batch, started: float,
                          first: tuple[int, int, str] | None) -> AppendResult:
        """`append` with retries; `first`, if given, is the outcome of an attempt already made
        (a run's batch the leader refused), counted as attempt 1."""
        topic, partition = tp.topic, tp.partition
        backoff_s = BACKOFF_INITIAL_S
        code = LEADER_NOT_AVAILABLE
        for attempt in range(1, self._max_attempts + 1):
            if first is not None:
                (code, offset, reason), first = first, None
            else:
                code, offset, reason = await self._attempt(client, tp, batch)
            if code == NONE:
                return AppendResult(NONE, offset, False, attempt, time.monotonic() - started)
            if code == OUT_OF_ORDER_SEQUENCE_NUMBER:
                # Kafka keeps a producer's last five batches: a retry of an older one (an
                # object re-delivered after an agent restarted before it checkpointed) gets
                # this answer, as does a batch that skips a sequence. In the log: appended.
                verdict, offset = await self._verify_duplicate(client, tp, batch)
                if verdict is Verdict.PRESENT:
                    return AppendResult(NONE, offset, True, attempt, time.monotonic() - started)
            if code == DUPLICATE_SEQUENCE_NUMBER:
                verdict, offset = await self._verify_duplicate(client, tp, batch)
                if verdict is Verdict.PRESENT:
                    return AppendResult(NONE, offset, True, attempt, time.monotonic() - started)
                if verdict is Verdict.ABSENT:
                    log.error("append %s-%d: the leader called the batch a duplicate but does not have it "
                              "(producer sequence consumed without the batch); failing it", topic, partition,
                              extra={"topic": topic, "partition": partition})
                    return AppendResult(UNKNOWN_SERVER_ERROR, -1, False, attempt, time.monotonic() - started)
                code = REQUEST_TIMED_OUT  # tail unreadable: try again, the answer may be clearer
            if code == _LEADER_IN_OTHER_ZONE:
                log.info("append %s-%d refused: %s", topic, partition, reason,
                         extra={"topic": topic, "partition": partition})
                return AppendResult(NOT_LEADER_OR_FOLLOWER, -1, False, attempt, time.monotonic() - started, reason)
            if code not in RETRIABLE or attempt == self._max_attempts:
                break
            log.info("append %s-%d: error %d, attempt %d/%d", topic, partition, code, attempt, self._max_attempts,
                     extra={"topic": topic, "partition": partition})
            if code in REFRESH_METADATA:
                await self._refresh(client)
            await asyncio.sleep(backoff_s)  # backoff between attempts, not synchronization
            backoff_s = min(backoff_s * 2, BACKOFF_MAX_S)
        return AppendResult(code, -1, False, attempt, time.monotonic() - started)

    async def _attempt(self, client: AIOKafkaClient, tp: TopicPartition, batch: Batch) -> tuple[int, int, str]:
        """(error code, base offset, why refused) of one try."""
        leader = client.cluster.leader_for_partition(tp)
        if leader is None:
            # Unknown topic to this client: start tracking it (one metadata round trip).
            try:
                await self._learn_topic(client, tp.topic)
            except KafkaError:
                return NETWORK_EXCEPTION, -1, ""
            leader = client.cluster.leader_for_partition(tp)
            if leader is None:
                return UNKNOWN_TOPIC_OR_PARTITION, -1, ""
        if leader == -1:
            return LEADER_NOT_AVAILABLE, -1, ""
        reason = self._other_zone(client, tp, leader)
        if reason:
            # The leader may have come back into this zone: ask before refusing. Each refusal
            # costs one Metadata request (concurrent ones share it); refusals are rare, since
            # the proxy looks the leader up again after one.
            await self._refresh(client)
            leader = client.cluster.leader_for_partition(tp)
            if leader is None or leader == -1:
                return LEADER_NOT_AVAILABLE, -1, ""
            reason = self._other_zone(client, tp, leader)
        if reason:
            return _LEADER_IN_OTHER_ZONE, -1, reason
        code, offset = await self._enqueue(client, leader, tp, batch)
        return code, offset, ""

    def _other_zone(self, client: AIOKafkaClient, tp: TopicPartition, leader: int) -> str:
        rack = getattr(client.cluster.broker_metadata(leader), "rack", None)
        return zone_refusal(tp.topic, tp.partition, leader, rack, self._home_zone, self._broker_zones)

    async def _learn_topic(self, client: AIOKafkaClient, topic: str) -> None:
        """Track `topic` and wait for metadata that has it; concurrent first appends of its
        partitions share one fetch. Raises KafkaError.

        aiokafka's add_topic answers at once for a topic it already tracks, and a metadata
        update already in flight may have been asked before the topic was added: then one
        more update is awaited instead of failing the batch with UNKNOWN_TOPIC_OR_PARTITION.
        """
        fut = self._learning.get(topic)
        if fut is None:
            fut = asyncio.ensure_future(self._fetch_topic(client, topic))
            self._learning[topic] = fut
            fut.add_done_callback(lambda _f: self._learning.pop(topic, None))
        await asyncio.shield(fut)

    async def _fetch_topic(self, client: AIOKafkaClient, topic: str) -> None:
        async with asyncio.timeout(self._request_timeout_ms / 1000):
            await client.add_topic(topic)
            if client.cluster.partitions_for_topic(topic) is None:
                await client.force_metadata_update()

    async def _enqueue(self, client: AIOKafkaClient, node: int, tp: TopicPartition, batch: Batch) -> tuple[int, int]:
        """Send one batch to `node` as a run of one; (error code, base offset)."""
        run = Run(tp, (batch,), 0, asyncio.get_running_loop().create_future(), time.monotonic())
        self._queue(client, node, run)
        await run.done
        if run.failure is not None:
            return run.failure, -1
        return NONE, run.offsets[0]

    def _queue(self, client: AIOKafkaClient, node: int, run: Run) -> None:
        """Queue the run for `node`; the node's drain task sends it with other partitions' runs.

        The drain task starts at the loop's next turn, after the other partitions' appends of
        the same notification have queued theirs: one request carries them all. (Sending a
        lone batch from its caller at once saved ~0.06 ms at p50 in bench_router but cost
        bench_agent ~7 % of its throughput in smaller requests: not done.)
        """
        self._pending.setdefault(node, []).append(run)
        if node not in self._drains:
            self._drains[node] = asyncio.create_task(self._drain(client, node))

    async def _drain(self, client: AIOKafkaClient, node: int) -> None:
        """Send the node's queued runs: one ProduceRequest in flight, or up to
        `requests_in_flight` while the extra requests carry only batches that may go ahead
        of their predecessor's answer (sequence_chain.py)."""
        flights: collections.deque[_Flight] = collections.deque()
        busy: dict[TopicPartition, Run] = {}  # partitions with a batch in flight: whose run
        try:
            while True:
                while len(flights) < self._requests_in_flight:
                    flight = await self._start_request(client, node, flights, busy)
                    if flight is None:
                        break
                    flights.append(flight)
                if flights:
                    await self._finish_request(node, flights.popleft(), busy)
                    continue
                if not self._pending.get(node):
                    # The callers just answered queue their partitions' next runs at the
                    # loop's next turn: this task waits that one turn and sends them, where
                    # ending here would have the first of them start a new task that sends
                    # a turn later (a task and a loop turn less per round trip).
                    await asyncio.sleep(0)
                    if not self._pending.get(node):
                        return
        finally:
            del self._drains[node]
            for flight in flights:
                self._deadlines.forget(flight.answer)
                flight.answer.add_done_callback(_consume_outcome)
                for run, _index in flight.batches:
                    run.stop(NETWORK_EXCEPTION)
            for run in self._pending.pop(node, []):
                run.stop(NETWORK_EXCEPTION)

    async def _start_request(self, client: AIOKafkaClient, node: int, flights: collections.deque[_Flight],
                             busy: dict[TopicPartition, Run]) -> _Flight | None:
        """Send one ProduceRequest with the next batch of each partition's first queued run
        that may go now; None if there is none (or the request could not be sent: its runs
        are then stopped).

        A request carries at most one batch per partition (Kafka's rule for v3+). A run's
        next batch goes after its previous batch's answer said appended, or, with requests
        already in flight, ahead of that answer when sequence_chain.may_send_ahead allows
        it; a partition with a batch in flight takes no batch of another run. So each
        partition's order is kept. Runs whose caller was cancelled are dropped.
        """
        taken, live = next_request(self._pending.get(node, []), busy, self._max_request_bytes)
        self._pending[node] = live
        if not taken:
            return None
        by_topic: dict[str, list[tuple[int, Batch]]] = {}
        sent: list[tuple[Run, int]] = []
        for tp, run in taken.items():
            by_topic.setdefault(tp.topic, []).append((tp.partition, run.batches[run.sent]))
            sent.append((run, run.sent))
        try:
            answer = await self._send(client, node, list(by_topic.items()), pipelined=bool(flights))
        except RequestTimedOutError:
            failure = REQUEST_TIMED_OUT
        except KafkaError as exc:
            log.info("produce to node %s: %r", node, exc)
            failure = NETWORK_EXCEPTION
        else:
            if answer is None:
                return None  # no second request on this connection now: the first one's answer comes first
            for run, index in sent:
                run.sent = index + 1
                run.in_flight += 1
                busy[run.tp] = run
            return _Flight(answer[0], answer[1], sent)
        for run, _index in sent:
            run.stop(failure)
        self._pending[node] = [run for run in self._pending[node] if not run.done.done()]
        return None

    async def _finish_request(self, node: int, flight: _Flight, busy: dict[TopicPartition, Run]) -> None:
        """Wait for the request's answer and give each of its runs its batch's result. A run
        whose batch failed stops there (its caller retries that batch; answers to its
        batches sent ahead are then ignored). Runs whose caller was cancelled are dropped."""
        outcome: dict[tuple[str, int], tuple[int, int]] = {}
        failure = None
        try:
            if flight.conn is None:
                answer = await flight.answer
            else:
                answer = await self._deadlines.answer(flight.conn, flight.answer, self._request_timeout_ms / 1000)
            for p in answer.partitions:
                outcome[(p.topic, p.index)] = (p.error_code, p.base_offset)
        except RequestTimedOutError:
            failure = REQUEST_TIMED_OUT
        except KafkaError as exc:
            log.info("produce to node %s: %r", node, exc)
            failure = NETWORK_EXCEPTION
        except BaseException:
            for run, _index in flight.batches:
                run.stop(NETWORK_EXCEPTION)
            raise
        settle_answer(flight.batches, outcome, failure, busy, time.monotonic())
        self._pending[node] = [run for run in self._pending.get(node, ()) if not run.done.done()]

    async def _send(self, client: AIOKafkaClient, node: int, topics: list[tuple[str, list[tuple[int, Batch]]]],
                    *, pipelined: bool) -> tuple[AIOKafkaConnection | None, asyncio.Future[ProduceAnswer]] | None:
        """Send one ProduceRequest (acks all) to `node`: (the connection it went on, its
        answer), the answer's deadline running from now (AnswerDeadlines.answer raises
        RequestTimedOutError after request_timeout_ms; the future fails with KafkaError if
        the connection closes). None if `pipelined` (requests are in flight) and this
        connection cannot take another. Raises KafkaError if the request cannot be sent.

        The batches go into the request as given (memoryviews of the WAL object's GET body),
        copied once into the frame. Written straight onto aiokafka's connection
        (produce_channel.py says why and what stays aiokafka's); through client.send where
        that connection does not offer what the channel needs (then one request at a time).
        """
        known = self._conns.get(node)
        if known is None or not known[0].connected():
            if pipelined:
                return None
            conn = await leader_connection(client, node)
            known = self._conns[node] = (conn, channel_version(conn))
        conn, version = known
        if version is None:
            if pipelined:
                return None
            request = RawProduceRequest(transactional_id=None, required_acks=-1, timeout=self._produce_timeout_ms,
                                        topics=topics)
            response = await client.send(node, request)
            answered: asyncio.Future[ProduceAnswer] = asyncio.get_running_loop().create_future()
            answered.set_result(response)  # a ProduceAnswer: RawProduceRequest decodes its answer
            return None, answered
        future = send_produce(conn, version, -1, self._produce_timeout_ms, topics)
        self._deadlines.watch(conn, future, self._request_timeout_ms / 1000)  # from the send, not the await
        return conn, future

    async def _verify_duplicate(self, client: AIOKafkaClient, tp: TopicPartition, batch: Batch) -> tuple[Verdict, int]:
        """Search the leader's tail for `batch` (producer id, epoch, base sequence); never raises."""
        headers = batch_headers(batch)
        node = client.cluster.leader_for_partition(tp)
        if not headers or node is None or node < 0:
            return Verdict.UNKNOWN, -1
        wanted = headers[0]
        try:
            async with asyncio.timeout(self._request_timeout_ms / 1000):
                high_watermark = await self._high_watermark(client, node, tp)
                search = TailSearch(wanted.producer_id, wanted.producer_epoch, wanted.base_sequence, high_watermark)
                while (searched := search.next_range()) is not None:
                    found, complete = await self._read_range(client, node, tp, searched.start, searched.end)
                    if not complete:
                        search.failed()
                        break
                    search.feed(searched, found)
        except (TimeoutError, KafkaError, _TailUnreadable) as exc:
            log.info("verifying a duplicate in %s-%d: %r", tp.topic, tp.partition, exc,
                     extra={"topic": tp.topic, "partition": tp.partition})
            return Verdict.UNKNOWN, -1
        verdict, base_offset = search.outcome()  # the search ended: found, absent, or unknown
        log.info("duplicate of producer %d seq %d in %s-%d: %s", wanted.producer_id, wanted.base_sequence,
                 tp.topic, tp.partition, verdict.value, extra={"topic": tp.topic, "partition": tp.partition})
        return verdict, base_offset

    async def _fetch(self, client: AIOKafkaClient, node: int, tp: TopicPartition, offset: int,
                     max_bytes: int, max_wait_ms: int = TAIL_FETCH_WAIT_MS) -> tuple[int, bytes]:
        """(high watermark, records) of one Fetch. Raises KafkaError or _TailUnreadable."""
        request = FetchRequest(max_wait_time=max_wait_ms, min_bytes=1, max_bytes=max_bytes, isolation_level=0,
                               topics=[(tp.topic, [(tp.partition, offset, max_bytes)])])
        response = await client.send(node, request)
        for topic, partitions in response.topics:
            for part in partitions:
                if topic == tp.topic and part[0] == tp.partition:
                    # (partition, error_code, high_watermark, ..., records) in every version
                    if part[1] != NONE:
                        raise _TailUnreadable(f"fetch at {offset}: error {part[1]}")
                    return int(part[2]), bytes(part[-1] or b"")
        raise _TailUnreadable("fetch answer without the partition")

    async def _high_watermark(self, client: AIOKafkaClient, node: int, tp: TopicPartition) -> int:
        # A Fetch past the end answers with the high watermark on Tansu, whose ListOffsets
        # "latest" lags (it names the last batch's base offset + 1); Kafka answers that Fetch
        # OFFSET_OUT_OF_RANGE and its ListOffsets is exact.
        try:
            high_watermark, _ = await self._fetch(client, node, tp, BEYOND_ANY_OFFSET, 1, PROBE_FETCH_WAIT_MS)
            if high_watermark >= 0:
                return high_watermark
        except _TailUnreadable:
            pass
        response = await client.send(node, OffsetRequest(-1, 0, [(tp.topic, [(tp.partition, LATEST_TIMESTAMP)])]))
        for topic, partitions in response.topics:
            for part in partitions:
                if topic == tp.topic and part[0] == tp.partition and part[1] == NONE:
                    return int(part[-1])  # (partition, error_code, [timestamp,] offset)
        raise _TailUnreadable("no high watermark")

    async def _read_range(self, client: AIOKafkaClient, node: int, tp: TopicPartition, start: int,
                          end: int) -> tuple[list[BatchHeader], bool]:
        """Every batch header in [start, end), and whether the range was read to its end.

        A leader that answers no batches at an offset below its high watermark, several times,
        has none there (Tansu advances the watermark before it writes the batch, so a broker
        stopped in between leaves such a hole at the end of the log): the read ends there.
        """
        found: list[BatchHeader] = []
        offset = start
        stalls = 0
        for _ in range(TAIL_FETCHES_PER_RANGE):
            if offset >= end:
                return found, True
            _hw, records = await self._fetch(client, node, tp, offset, TAIL_FETCH_BYTES)
            headers = batch_headers(records)
            after = covered_until(headers, offset)
            if after <= offset:
                stalls += 1
                if stalls >= TAIL_FETCH_STALLS:
                    return found, True
                continue
            stalls = 0
            found.extend(headers)
            offset = after
        return found, offset >= end

    async def _refresh(self, client: AIOKafkaClient) -> None:
        try:
            async with asyncio.timeout(self._request_timeout_ms / 1000):  # not wait_for: see agent.py
                await client.force_metadata_update()
        except (TimeoutError, KafkaError) as exc:
            log.info("metadata refresh failed: %r", exc)


def zone_refusal(topic: str, partition: int, leader: int, rack: str | None, home_zone: str | None,
                 broker_zones: Mapping[str, str]) -> str:
    """Why an agent of `home_zone` must not append to `leader` (pure); "" if it may: the
    leader is in its zone, or nothing says where it is (Tansu: no rack, no broker_zones)."""
    if not home_zone:
        return ""
    zone = leader_zone(topic, partition, leader, rack, {}, broker_zones)
    if zone is None or zone == home_zone:
        return ""
    source = "router.broker_zones" if str(leader) in broker_zones else "its rack"
    return (f"the leader of {topic}-{partition} is broker {leader} in {zone} ({source}), "
            f"not in this agent's zone {home_zone}")


class _TailUnreadable(Exception):
    """The leader's answer to a tail read could not be used."""


