"""Validate Kafka record batches (magic 2) without decoding their records.

The proxy routes bytes; it only reads the fixed 61-byte batch header, checks lengths and
the CRC-32C, and keeps each batch as a memoryview slice of the request frame.
Layout (Kafka's DefaultRecordBatch): baseOffset int64, batchLength int32,
partitionLeaderEpoch int32, magic int8, crc uint32, attributes int16, lastOffsetDelta
int32, baseTimestamp int64, maxTimestamp int64, producerId int64, producerEpoch int16,
baseSequence int32, recordCount int32, records...; the CRC covers attributes..end.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

from core.errors import CORRUPT_MESSAGE, INVALID_RECORD, MESSAGE_TOO_LARGE, SidecarError

BATCH_HEADER = struct.Struct(">qiiBIhiqqqhii")
BATCH_HEADER_BYTES = BATCH_HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength precede the length-counted part
CRC_START = 21  # attributes begin here; the CRC covers from here to the end
MAGIC_V2 = 2
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20


@dataclass(frozen=True, slots=True)
class RecordBatch:
    """One validated batch; `data` is the raw bytes, unchanged."""

    data: memoryview
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    is_transactional: bool
    crc: int
    # baseTimestamp: the first record's timestamp (CreateTime, producer clock, ms); -1 if unset.
    first_timestamp: int = -1


class InvalidBatch(SidecarError):
    """The client's records for one partition are unacceptable; `error_code` says why."""

    retriable = False  # the same input fails the same way

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


def split_batches(records: bytes | memoryview | None, max_batch_bytes: int) -> list[RecordBatch]:
    """Validate and split one partition's records into batches.

    Raises InvalidBatch with CORRUPT_MESSAGE (bad CRC, truncation), MESSAGE_TOO_LARGE or
    INVALID_RECORD (wrong magic, empty, control batches, negative counts).
    """
    if records is None or len(records) == 0:
        raise InvalidBatch(INVALID_RECORD, "produce request carries no record batch")
    view = memoryview(records)
    batches = []
    pos = 0
    while pos < len(view):
        if len(view) - pos < BATCH_HEADER_BYTES:
            raise InvalidBatch(CORRUPT_MESSAGE, f"truncated batch header ({len(view) - pos} bytes)")
        (_base_offset, batch_length, _leader_epoch, magic, crc, attributes, _last_delta, base_ts,
         _max_ts, producer_id, producer_epoch, base_sequence, record_count) = BATCH_HEADER.unpack_from(view, pos)
        if magic != MAGIC_V2:
            raise InvalidBatch(INVALID_RECORD, f"record batch magic {magic}; only magic 2 is accepted")
        total = LOG_OVERHEAD + batch_length
        if batch_length < BATCH_HEADER_BYTES - LOG_OVERHEAD:
            raise InvalidBatch(CORRUPT_MESSAGE, f"batch length {batch_length} is smaller than its header")
        if total > max_batch_bytes:
            raise InvalidBatch(MESSAGE_TOO_LARGE, f"batch of {total} bytes exceeds {max_batch_bytes}")
        if pos + total > len(view):
            raise InvalidBatch(CORRUPT_MESSAGE, "batch length runs past the end of the records")
        data = view[pos : pos + total]
        if crc32c.crc32c(data[CRC_START:]) != crc:
            raise InvalidBatch(CORRUPT_MESSAGE, "record batch CRC-32C mismatch")
        if record_count < 0:
            raise InvalidBatch(INVALID_RECORD, f"negative record count {record_count}")
        if attributes & CONTROL_FLAG:
            raise InvalidBatch(INVALID_RECORD, "clients may not produce control batches")
        batches.append(RecordBatch(data, producer_id, producer_epoch, base_sequence, record_count,
                                   bool(attributes & TRANSACTIONAL_FLAG), crc, base_ts))
        pos += total
    return batches
