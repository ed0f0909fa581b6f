"""May a partition's next record batch go to its leader before the previous one is answered?

Pure decisions on record-batch headers (magic v2), no I/O.

Kafka lets an idempotent producer keep up to five requests in flight per connection:
the leader appends a producer's batches only in sequence order (each batch's base
sequence is the previous batch's last sequence + 1), so a batch that arrives after its
predecessor failed is refused with OUT_OF_ORDER_SEQUENCE_NUMBER instead of being appended
out of order. A batch without a producer id has no such check: a second one in flight
could be appended before a first one that failed and is retried, so those stay one at a
time.

The check protects only when the leader knows the producer: a leader with no state for a
producer id (a new producer, or one whose state expired) accepts any sequence. So a batch
goes ahead of its predecessor's answer only when a batch before that predecessor, of the
same producer and epoch, was already appended by this leader in the same run (the caller
says so with `predecessor_confirmed`).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from kafka_protocol.produce_codec import Batch

_HEADER = struct.Struct(">bIhiqqqhi")  # magic .. base sequence, from byte 16 of a v2 batch
_HEADER_OFFSET = 16
_HEADER_END = _HEADER_OFFSET + _HEADER.size  # 57: the records count follows
_TRANSACTIONAL = 0x10  # attributes bit 4
_CONTROL = 0x20  # attributes bit 5
_SEQUENCE_MODULUS = 1 << 31  # sequences wrap from Int32.MAX to 0


def producer_run_key(batch: Batch) -> tuple[int, int, int, int] | None:
    """(producer id, epoch, base sequence, last sequence + 1) of an idempotent,
    non-transactional data batch, or None: not such a batch (no producer id, transactional,
    a control batch, another magic, too short to have the header)."""
    if len(batch) < _HEADER_END:
        return None
    magic, _crc, attributes, last_offset_delta, _first_ts, _max_ts, producer_id, epoch, base_sequence = (
        _HEADER.unpack_from(batch, _HEADER_OFFSET))
    if magic != 2 or producer_id < 0 or base_sequence < 0 or attributes & (_TRANSACTIONAL | _CONTROL):
        return None
    return producer_id, epoch, base_sequence, (base_sequence + last_offset_delta + 1) % _SEQUENCE_MODULUS


def follows(previous: Batch, batch: Batch) -> bool:
    """True if `batch` is the same idempotent producer's (same id and epoch) next batch in
    sequence right after `previous`."""
    before = producer_run_key(previous)
    after = producer_run_key(batch)
    return (before is not None and after is not None and before[:2] == after[:2]
            and after[2] == before[3])


def may_send_ahead(batches: Sequence[Batch], first: int, confirmed: int, sent: int) -> bool:
    """May `batches[sent]` go to the leader while batches[confirmed:sent] are in flight?

    The run began at `first`; `confirmed` is its first unanswered batch, so
    batches[first:confirmed] were appended by the leader. One of them must be the
    predecessor of batches[confirmed] (the leader then knows the producer), and every batch
    from there to `sent` must follow the one before it.
    """
    if confirmed <= first or not confirmed < sent < len(batches):
        return False
    return all(follows(batches[i - 1], batches[i]) for i in range(confirmed, sent + 1))


class SequenceChain:
    """`may_send_ahead` over one run's batches, with each pair's `follows` worked out once.

    A leader's drain task asks again each time it starts a request, about four times per
    batch of a busy partition; parsing both headers each time cost ~3-4 µs per ask, ~13 %
    of an idempotent agent's time under cProfile. The answers are the function's, for any order of
    asks (tests/unit/leader_notify/test_sequence_chain.py compares them)."""

    __slots__ = ("_batches", "_follows")

    def __init__(self, batches: Sequence[Batch]) -> None:
        self._batches = batches
        self._follows: list[bool | None] | None = None  # per index i: follows(batches[i-1], batches[i])

    def may_send_ahead(self, first: int, confirmed: int, sent: int) -> bool:
        batches = self._batches
        if confirmed <= first or not confirmed < sent < len(batches):
            return False
        memo = self._follows
        if memo is None:
            memo = self._follows = [None] * len(batches)
        for i in range(confirmed, sent + 1):
            ok = memo[i]
            if ok is None:
                ok = memo[i] = follows(batches[i - 1], batches[i])
            if not ok:
                return False
        return True
