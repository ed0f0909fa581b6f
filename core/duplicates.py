"""Does the leader really have a batch it called a duplicate? (sans-IO)

Why this exists: DUPLICATE_SEQUENCE_NUMBER is supposed to mean "already appended", and
clients (librdkafka) count it as delivered. Tansu's s3 storage engine writes a producer's
next sequence (meta.json), then the partition's high watermark, then the batch object,
as three separate S3 writes; a broker stopped between the first and the last (kill -9, or
SIGTERM once its 5 s drain ends) keeps the sequence but never writes the batch, and every
retry of it is then answered "duplicate" (docs/reliability.md, finding 1). So before the
sidecar acknowledges a duplicate it reads the partition's tail and looks for the batch:
producer id, epoch and base sequence.

The search goes backwards from the high watermark in growing windows. A producer's batches
sit in the log in sequence order, so the search can stop at the first of this producer's
batches that comes *before* the wanted one: the wanted batch is absent if it was not found
after it. The I/O shells (kafka_upstream/upstream.py fetches with trio, the agent with aiokafka) only
fetch the byte ranges `TailSearch.next_range()` asks for and feed back what they read.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

# baseOffset int64, batchLength int32, partitionLeaderEpoch int32, magic int8, crc uint32,
# attributes int16, lastOffsetDelta int32, baseTimestamp int64, maxTimestamp int64,
# producerId int64, producerEpoch int16, baseSequence int32, recordCount int32
_HEADER = struct.Struct(">qiiBIhiqqqhii")
_LOG_OVERHEAD = 12  # baseOffset + batchLength precede the length-counted part

FIRST_WINDOW_OFFSETS = 2_000  # the batch, if there, is near the end: retries follow within seconds
WINDOW_GROWTH = 4
MAX_SCANNED_OFFSETS = 2_000_000  # beyond this the answer is "unknown": the client retries, we look again


class Verdict(enum.Enum):
    PRESENT = "present"  # the leader has the batch: acknowledge with its offset
    ABSENT = "absent"  # the leader consumed the sequence without the batch: never acknowledge
    UNKNOWN = "unknown"  # the tail could not be read (far enough): answer retriably


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    last_offset_delta: int
    producer_id: int
    producer_epoch: int
    base_sequence: int

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1


def batch_headers(records: bytes | memoryview | None) -> list[BatchHeader]:
    """The headers of the whole magic-2 batches in a Fetch response's records.

    A Fetch may cut its last batch short; that partial batch (and anything that is not a
    magic-2 batch) ends the list instead of raising: the caller fetches on from the last
    whole batch.
    """
    out: list[BatchHeader] = []
    if not records:
        return out
    view = memoryview(records)
    pos = 0
    while len(view) - pos >= _HEADER.size:
        (base_offset, batch_length, _leader_epoch, magic, _crc, _attributes, last_delta, _base_ts, _max_ts,
         producer_id, producer_epoch, base_sequence, _count) = _HEADER.unpack_from(view, pos)
        total = _LOG_OVERHEAD + batch_length
        if magic != 2 or batch_length < _HEADER.size - _LOG_OVERHEAD or pos + total > len(view):
            break
        out.append(BatchHeader(base_offset, last_delta, producer_id, producer_epoch, base_sequence))
        pos += total
    return out


@dataclass(frozen=True, slots=True)
class OffsetRange:
    start: int  # inclusive
    end: int  # exclusive


class TailSearch:
    """Backward search for one batch; drive it with `next_range()` / `feed()`.

    `high_watermark` is the partition's end as the leader reported it after answering the
    duplicate; `log_start` its first offset (0 when unknown).
    """

    def __init__(self, producer_id: int, producer_epoch: int, base_sequence: int, high_watermark: int,
                 log_start: int = 0, first_window: int = FIRST_WINDOW_OFFSETS,
                 max_scanned: int = MAX_SCANNED_OFFSETS) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self._log_start = max(0, log_start)
        self._end = high_watermark  # everything at or after this offset was searched
        self._window = first_window
        self._budget = max_scanned
        self.verdict: Verdict | None = None
        self.base_offset = -1
        if high_watermark <= self._log_start:
            self.verdict = Verdict.ABSENT  # an empty log has no batch at all

    def next_range(self) -> OffsetRange | None:
        """The offsets to read next, or None once `verdict` is set."""
        if self.verdict is not None:
            return None
        if self._budget <= 0:
            self.verdict = Verdict.UNKNOWN
            return None
        start = max(self._log_start, self._end - min(self._window, self._budget))
        return OffsetRange(start, self._end)

    def feed(self, searched: OffsetRange, headers: list[BatchHeader]) -> None:
        """Every batch header the leader returned for `searched` (in log order)."""
        earlier_seen = False
        for h in headers:
            if h.next_offset <= searched.start or h.base_offset >= searched.end:
                continue  # a fetch may start before the range or run past it
            if h.producer_id != self.producer_id:
                continue
            if h.producer_epoch == self.producer_epoch and h.base_sequence == self.base_sequence:
                self.verdict, self.base_offset = Verdict.PRESENT, h.base_offset
                return
            if _before(h, self.producer_epoch, self.base_sequence):
                earlier_seen = True
        if earlier_seen or searched.start <= self._log_start:
            # The wanted batch would follow this producer's earlier one, and nothing after it
            # (this window and every later one) is the wanted batch; or the log begins here.
            self.verdict = Verdict.ABSENT
            return
        self._budget -= searched.end - searched.start
        self._end = searched.start
        self._window *= WINDOW_GROWTH

    def failed(self) -> None:
        """The shell could not read a range: the answer is unknown."""
        self.verdict = Verdict.UNKNOWN


def _before(h: BatchHeader, epoch: int, base_sequence: int) -> bool:
    """True if `h` is one of the producer's batches written before (epoch, base_sequence)."""
    if h.producer_epoch != epoch:
        return h.producer_epoch < epoch
    return h.base_sequence < base_sequence


def covered_until(headers: list[BatchHeader], fetched_from: int) -> int:
    """The offset to fetch next after reading `headers` from `fetched_from` (no progress: same)."""
    return max((h.next_offset for h in headers), default=fetched_from)
