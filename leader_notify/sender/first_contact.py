"""Which agent last appended each partition for this proxy: a notification naming a partition
its agent has not appended is a first contact (pure: no clock, no I/O).

Why: a partition's first append at its leader (a topic just created, a partition just added,
a leader just moved into the agent's zone) waits until the followers start fetching it, up to
the brokers' replica.fetch.wait.max.ms: 4.99 s on deploy/local's cluster (5000 ms) where the
agent's appends of a warm partition took 15-80 ms (2026-12-01,
tests/integration/kafka/test_first_notification_on_kafka.py; a direct acks=all producer there
waited 5.05 s for one of three new topics, and 0.02-0.04 s for each with 500 ms). The gray
deadline, set by the warm answers (~1 s), called that wait a hang, opened the zone's circuit
and sent its traffic direct. So the sender marks such an attempt (wal_s3/latency.py,
`Attempt.first_contact`): the configured timeout, not the gray deadline.

Keyed by partition, valued by the agent that appended it last: a leader that moves to another
zone and back is a first contact again, as its followers start over. Bounded: the partitions
appended least recently are forgotten first (then they count as first contacts once more).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

# 142 bytes per remembered partition with 32 partitions a topic (tracemalloc, 2026-12-01), ~220
# with a topic string each: under 4 MiB.
# A proxy sending to more partitions than this treats the least recent as new: a longer
# deadline for one of their notifications, never a wrong answer.
MAX_PARTITIONS = 16_384

Partition = tuple[str, int]  # (topic, partition)


class AppendedPartitions:
    """The agent address that last appended each partition for this proxy."""

    def __init__(self, max_partitions: int = MAX_PARTITIONS) -> None:
        """Raises ValueError for max_partitions below 1."""
        if max_partitions < 1:
            raise ValueError(f"max_partitions: at least 1, got {max_partitions}")
        self._max = max_partitions
        self._by: OrderedDict[Partition, str] = OrderedDict()

    def first_contact(self, agent: str, partitions: Iterable[Partition]) -> bool:
        """True if `agent` has not (or not last) appended one of `partitions`."""
        by = self._by
        return any(by.get(tp) != agent for tp in partitions)

    def appended(self, agent: str, partitions: Iterable[Partition]) -> None:
        """`agent` appended batches of `partitions` (answered them without an error)."""
        by = self._by
        for tp in partitions:
            by[tp] = agent
            by.move_to_end(tp)
        while len(by) > self._max:
            by.popitem(last=False)

    def __len__(self) -> int:
        return len(self._by)
