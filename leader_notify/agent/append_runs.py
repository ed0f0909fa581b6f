"""The appender's accumulator, without I/O: each partition's batches queued as a run, which
of them go in a leader's next ProduceRequest, and what each run learns from an answer.

Rules (Kafka's, and the ones that keep each partition's order): a request carries at most
one batch per partition; a run's next batch goes after its previous batch was appended,
or, with requests already in flight, ahead of that answer when
sequence_chain.may_send_ahead allows it; a partition with a batch in flight takes no batch
of another run; a request holds up to `max_request_bytes`, and the runs queued after the
first batch that does not fit wait for the next request, so none overtakes another (a
batch larger than the limit goes alone). leader_notify/agent/appender.py is the I/O shell:
it sends what `next_request` picks and hands answers to `settle_answer`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from aiokafka.structs import TopicPartition

from core.errors import NETWORK_EXCEPTION, NONE, UNKNOWN_TOPIC_OR_PARTITION
from kafka_protocol.produce import Batch
from leader_notify.agent.sequence_chain import SequenceChain


@dataclass(frozen=True)
class AppendResult:
    error_code: int
    base_offset: int = -1
    duplicate: bool = False
    attempts: int = 1
    latency_s: float = 0.0
    reason: str = ""  # why the append was refused, for the agent's log


class Run:
    """One partition's batches queued with its leader's drain task, sent one per request.

    `next` is the batch to send; `offsets` and `latencies_s` hold the answers of
    batches[first:next]. `done` resolves when the run is through, or stopped at `next`
    with `failure` (an error code: that batch was not appended); its caller cancelled
    leaves it cancelled, and the drain task drops it.
    """

    __slots__ = ("tp", "batches", "first", "next", "sent", "in_flight", "offsets", "latencies_s", "failure", "done",
                 "last_s", "group", "group_index", "chain")

    def __init__(self, tp: TopicPartition, batches: Sequence[Batch], first: int, done: asyncio.Future[None],
                 now: float, group: RunGroup | None = None) -> None:
        self.tp = tp
        self.batches = batches
        self.first = first
        self.next = first
        self.sent = first  # the next batch to put in a request (> next while batches are in flight)
        self.in_flight = 0  # requests in flight with one of its batches
        self.offsets: list[int] = []
        self.latencies_s: list[float] = []
        self.failure: int | None = None
        self.done = done
        self.last_s = now  # when the batch in flight became the next one (its latency starts)
        self.group = group  # runs queued together (append_runs): their caller waits for all at once
        self.group_index = 0  # which of the group's runs
        self.chain = SequenceChain(batches)  # may its next batch go ahead of the answers?

    def appended(self, base_offset: int, now: float) -> None:
        self.offsets.append(base_offset)
        self.latencies_s.append(now - self.last_s)
        self.last_s = now
        self.next += 1
        if self.next == len(self.batches) and not self.done.done():
            self._finish()

    def stop(self, code: int) -> None:
        if not self.done.done():
            self.failure = code
            self._finish()

    def _finish(self) -> None:
        self.done.set_result(None)
        if self.group is not None:
            self.group.one_done(self)


class RunGroup:
    """Runs queued together by `append_runs`: one future resolves when the last is through,
    so the caller wakes once for all of them (the runs' own `done` futures then have no
    waiter and cost no loop callback)."""

    __slots__ = ("remaining", "all_done", "on_through")

    def __init__(self, loop: asyncio.AbstractEventLoop, on_through: Callable[[int], None] | None) -> None:
        self.remaining = 0
        self.all_done: asyncio.Future[None] = loop.create_future()
        self.on_through = on_through

    def one_done(self, run: Run) -> None:
        self.remaining -= 1
        if run.failure is None and self.on_through is not None:
            self.on_through(run.group_index)
        if self.remaining == 0 and not self.all_done.done():
            self.all_done.set_result(None)


class PartitionRun(NamedTuple):
    """One partition's batches for `append_runs`, and the list its results go to."""
    topic: str
    partition: int
    batches: Sequence[Batch]
    results: list[AppendResult]



def next_request(pending: Sequence[Run], busy: Mapping[TopicPartition, Run],
                 max_request_bytes: int) -> tuple[dict[TopicPartition, Run], list[Run]]:
    """(the runs whose next batch goes in the next request, by partition, in queue order;
    the runs still queued afterwards). Runs that are done (stopped, or their caller was
    cancelled) are dropped; a run that is not busy but has batches out (which cannot happen)
    is stopped, so nothing spins on a run nobody would send."""
    taken: dict[TopicPartition, Run] = {}
    blocked: set[TopicPartition] = set()
    live: list[Run] = []
    room = max_request_bytes
    for i, run in enumerate(pending):
        if run.done.done():
            continue
        tp = run.tp
        if tp in taken or tp in blocked:
            live.append(run)
            continue
        flying = busy.get(tp)
        if flying is None:
            if run.sent != run.next:
                run.stop(NETWORK_EXCEPTION)
                continue
        elif not (flying is run and run.chain.may_send_ahead(run.first, run.next, run.sent)):
            blocked.add(tp)
            live.append(run)
            continue
        size = len(run.batches[run.sent])
        if size > room and taken:
            live.extend(r for r in pending[i:] if not r.done.done())
            break
        room -= size
        taken[tp] = run
        live.append(run)
    return taken, live


def settle_answer(batches: Sequence[tuple[Run, int]], outcome: Mapping[tuple[str, int], tuple[int, int]],
                  failure: int | None, busy: dict[TopicPartition, Run], now: float) -> None:
    """Give each run its batch's result from one request's answer: `outcome` (topic,
    partition) -> (error code, base offset), or `failure` for the whole request. A run whose
    batch failed stops there (its caller retries that batch; answers to its batches sent
    ahead are then ignored); `busy` forgets partitions with nothing left in flight."""
    for run, index in batches:
        run.in_flight -= 1
        if run.in_flight == 0 and busy.get(run.tp) is run:
            del busy[run.tp]
        if run.done.done():
            continue
        if failure is not None:
            run.stop(failure)
            continue
        code, offset = outcome.get(run.tp, (UNKNOWN_TOPIC_OR_PARTITION, -1))  # a TopicPartition is a tuple
        if index != run.next:
            run.stop(NETWORK_EXCEPTION)  # answers come in request order: never, but never append out of order
        elif code == NONE:
            run.appended(offset, now)
        else:
            run.stop(code)
