"""A Produce request and its answer read lightly, for forwarding them as they are (sans-IO).

Strategy: the local route sends a client's Produce request to the leader with only the
request header rewritten (the body is the client's bytes, untouched) and hands the leader's
answer back with only its correlation id and throttle time rewritten. What the proxy needs
to decide that and to account for it is read here, without building the request again:

- `scan_produce_request`: per partition its topic, index and record set, and of its one
  record batch the fixed 61-byte header (record count, producer id, epoch and sequence,
  flags, first timestamp); the records themselves are never looked at. A request this
  path should not carry (two batches for a partition, a null or empty record set, a
  partition named twice, magic other than 2, a control batch, a batch over the limit,
  acks other than -1 or 1, or bytes that do not parse) gives None: the caller takes the
  decoding path, which answers each of those the way it always has.
- `scan_produce_response`: per partition its error code and base offset, where the
  throttle time sits, and whether the answer is `plain` (every partition NONE, no record
  errors, no error message, no tagged fields: KIP-951 leader hints and node endpoints are
  tagged fields, which must never reach a client). Only a plain answer is passed on as
  bytes; any other is decoded whole (kafka_protocol.produce) and settled like the
  decoding path's.
- `forwarded_request_head` / `client_answer`: the two header rewrites.

The record batches' CRC-32C is not checked here, unlike core.record_batch.split_batches:
the bytes go unchanged to the one party that stores them, and an Apache Kafka leader
checks every batch's CRC before it appends (UnifiedLog.analyzeAndValidateRecords), answering
CORRUPT_MESSAGE for that partition - the code the proxy itself would give. Checking it
here too cost 0.14 ms of CPU per MiB, a quarter of the local route's budget.

No sockets, clocks or trio here.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from core.produce import PartitionBatches
from core.record_batch import (
    BATCH_HEADER,
    BATCH_HEADER_BYTES,
    CONTROL_FLAG,
    LOG_OVERHEAD,
    MAGIC_V2,
    TRANSACTIONAL_FLAG,
    RecordBatch,
)
from kafka_protocol._wire import I32, I64, SIZE, ProtocolError, Reader, string

API_PRODUCE = 0
FORWARDED_VERSIONS = (3, 12)  # v0-v2 carry older message sets; v13 names topics by id
FIRST_TRANSACTIONAL_VERSION = 3
FIRST_FLEXIBLE_VERSION = 9
FORWARDED_ACKS = (-1, 1)  # acks=0 has no answer to account from: the decoding path takes it
_HEADER = struct.Struct(">hhi")  # api_key, api_version, correlation_id
_PARTITION_HEAD = struct.Struct(">ihq")  # index, error_code, base_offset
_TIMES = struct.Struct(">qq")  # log_append_time_ms, log_start_offset
FIRST_LOG_START_VERSION = 5
FIRST_RECORD_ERRORS_VERSION = 8
_NO_TAGS = b"\x00"


@dataclass(frozen=True, slots=True)
class ScannedProduce:
    """What the forward path needs of a Produce request; its partitions in request order,
    each with exactly one batch (a view of the request's bytes)."""

    transactional_id: str | None
    acks: int
    timeout_ms: int
    partitions: tuple[PartitionBatches, ...]


@dataclass(frozen=True, slots=True)
class ScannedAnswer:
    """A Produce answer read lightly: (topic, index, error_code, base_offset) per partition
    in the answer's order, and where its throttle_time_ms sits (-1: v0 has none)."""

    partitions: tuple[tuple[str, int, int, int], ...]
    throttle_at: int
    plain: bool  # every partition NONE, no record errors or messages, no tagged fields


def scan_produce_request(body: bytes | memoryview, api_version: int, max_batch_bytes: int) -> ScannedProduce | None:
    """The request's partitions and their batch headers, or None when the forward path
    should not carry it (the module docstring lists when). Raises nothing."""
    if not FORWARDED_VERSIONS[0] <= api_version <= FORWARDED_VERSIONS[1]:
        return None
    try:
        return _scan_request(Reader(body, api_version >= FIRST_FLEXIBLE_VERSION, "Produce request"), max_batch_bytes)
    except ProtocolError:
        return None


def _scan_request(r: Reader, max_batch_bytes: int) -> ScannedProduce | None:
    transactional_id = r.string()  # v3+: every forwarded version has it
    acks = r.int16()
    timeout_ms = r.int32()
    if acks not in FORWARDED_ACKS:
        return None
    partitions: list[PartitionBatches] = []
    seen: set[tuple[str, int]] = set()
    for _ in range(r.array_length()):
        topic = r.string()
        if topic is None:
            return None
        for _ in range(r.array_length()):
            index = r.int32()
            records = r.bytes_view()
            r.tagged_fields()
            if records is None or (topic, index) in seen:
                return None
            seen.add((topic, index))
            batch = _one_batch(records, max_batch_bytes)
            if batch is None:
                return None
            partitions.append(PartitionBatches(topic, index, (batch,)))
        r.tagged_fields()
    r.tagged_fields()
    r.end()
    return ScannedProduce(transactional_id, acks, timeout_ms, tuple(partitions))


def _one_batch(records: memoryview, max_batch_bytes: int) -> RecordBatch | None:
    """The record set's one batch from its header, or None unless it is exactly one
    acceptable magic-2 batch (its CRC unchecked: the module docstring says why)."""
    size = len(records)
    if size < BATCH_HEADER_BYTES or size > max_batch_bytes:
        return None
    (_base_offset, batch_length, _leader_epoch, magic, crc, attributes, _last_delta, base_ts,
     _max_ts, producer_id, producer_epoch, base_sequence, record_count) = BATCH_HEADER.unpack_from(records, 0)
    if magic != MAGIC_V2 or LOG_OVERHEAD + batch_length != size or record_count < 0 or attributes & CONTROL_FLAG:
        return None
    return RecordBatch(records, producer_id, producer_epoch, base_sequence, record_count,
                       bool(attributes & TRANSACTIONAL_FLAG), crc, base_ts)


def forwarded_request_head(api_version: int, correlation_id: int, client_id: str | None, body_bytes: int) -> bytes:
    """The size prefix and request header (v1, v2 from v9) of a Produce request whose body
    of `body_bytes` is sent after it unchanged. Raises ValueError for a client id longer
    than an int16 length."""
    head = _HEADER.pack(API_PRODUCE, api_version, correlation_id) + string(client_id, flexible=False)
    if api_version >= FIRST_FLEXIBLE_VERSION:
        head += _NO_TAGS
    return SIZE.pack(len(head) + body_bytes) + head


def scan_produce_response(frame: bytes | memoryview, api_version: int) -> ScannedAnswer:
    """Read a Produce answer frame (size prefix removed, header included) of `api_version`
    (3-12). Raises ProtocolError when the bytes are not one."""
    flexible = api_version >= FIRST_FLEXIBLE_VERSION
    r = Reader(frame, flexible, f"Produce response v{api_version}")
    r.int32()  # correlation_id
    plain = _no_tags(r)
    partitions: list[tuple[str, int, int, int]] = []
    for _ in range(r.array_length()):
        topic = r.string()
        if topic is None:
            raise ProtocolError("Produce response with a null topic name")
        for _ in range(r.array_length()):
            index, error_code, base_offset = r.fixed(_PARTITION_HEAD)
            r.fixed(_TIMES if api_version >= FIRST_LOG_START_VERSION else I64)  # log_append_time_ms, log_start_offset
            if api_version >= FIRST_RECORD_ERRORS_VERSION:
                record_errors = r.array_length()
                for _ in range(record_errors):
                    r.int32()
                    r.string()
                    r.tagged_fields()
                message = r.string()
                plain = plain and not record_errors and message is None
            plain = _no_tags(r) and plain and error_code == 0
            partitions.append((topic, index, error_code, base_offset))
        plain = _no_tags(r) and plain
    throttle_at = r.pos
    r.int32()
    plain = _no_tags(r) and plain
    r.end()
    return ScannedAnswer(tuple(partitions), throttle_at, plain)


def _no_tags(r: Reader) -> bool:
    """Skip a struct's tagged fields (flexible versions); True when there were none."""
    if not r.flexible:
        return True
    start = r.pos
    r.tagged_fields()
    return r.pos == start + 1


def client_answer(frame: bytes | memoryview, answer: ScannedAnswer, correlation_id: int,
                  throttle_time_ms: int) -> bytes:
    """The client's framed answer (size prefix included): the leader's `frame` with the
    client's correlation id and the proxy's throttle time."""
    out = bytearray(SIZE.pack(len(frame)))
    out += frame
    I32.pack_into(out, 4, correlation_id)
    I32.pack_into(out, 4 + answer.throttle_at, throttle_time_ms)
    return bytes(out)
