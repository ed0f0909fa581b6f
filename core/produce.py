"""What a Produce request becomes between the front door and the paths: partition batches
in, partition results out, and the completion that carries the results back.

The seam between `proxy/` (which validates and answers) and whoever routes the batches
(`router/`, or `kafka_upstream.direct.DirectBackend` alone) is `ProduceBackend.submit` returning a
`ProduceCompletion`: awaited for the results, or, where the backend can, calling back
synchronously in the step where the last result arrives (the WAL path answers the producer
in the step where the agent's answer is decoded; docs/architecture.md says why).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from core.record_batch import RecordBatch

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class PartitionBatches:
    """One partition's validated batches from one client request, in client order."""

    topic: str
    partition: int
    batches: tuple[RecordBatch, ...]
    # Computed once, when made: the router, its audit and its metrics each ask, several times
    # per batch (functools.cached_property takes a lock per first access on Python 3.11).
    size: int = field(init=False, compare=False, repr=False)  # bytes of the batches
    records: int = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", sum(len(b.data) for b in self.batches))
        object.__setattr__(self, "records", sum(b.record_count for b in self.batches))


@dataclass
class PartitionResult:
    error_code: int
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None


@dataclass(frozen=True)
class ProduceContext:
    acks: int
    timeout_ms: int
    transactional_id: str | None
    client_version: int
    # The client's Kafka principal (User:<name>), carried into the audit records so the FinOps
    # report can split savings and costs by team; "" where no front door named one.
    principal: str = ""


Results = dict[TopicPartition, PartitionResult]
ResultsConsumer = Callable[[Results], None]


class ProduceCompletion(Protocol):
    """The results of one `ProduceBackend.submit`."""

    def __call__(self) -> Awaitable[Results]:
        """Await every partition's result (never raises: failures are error codes)."""
        ...

    def on_results(self, consumer: ResultsConsumer) -> bool:
        """Have `consumer(results)` called synchronously once every partition has its result
        (at once if all have). False, registering nothing, if this completion cannot call
        back: the caller awaits it instead."""
        ...


class ProduceBackend(Protocol):
    async def submit(self, items: list[PartitionBatches], ctx: ProduceContext) -> ProduceCompletion:
        """Hand `items` on in order; return their completion (never raises)."""
        ...


class AwaitedCompletion:
    """A completion that can only be awaited: wraps the coroutine function computing the results."""

    __slots__ = ("_compute",)

    def __init__(self, compute: Callable[[], Awaitable[Results]]) -> None:
        self._compute = compute

    def __call__(self) -> Awaitable[Results]:
        return self._compute()

    def on_results(self, consumer: ResultsConsumer) -> bool:
        return False
