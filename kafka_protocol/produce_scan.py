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
from kafka_protocol._wire import I16, I32, I64, SIZE, ProtocolError, read_uvarint, skip_tagged_fields, string

API_PRODUCE = 0
FORWARDED_VERSIONS = (3, 12)  # v0-v2 carry older message sets; v13 names topics by id
FIRST_TRANSACTIONAL_VERSION = 3
FIRST_FLEXIBLE_VERSION = 9
FORWARDED_ACKS = (-1, 1)  # acks=0 has no answer to account from: the decoding path takes it
_HEADER = struct.Struct(">hhi")  # api_key, api_version, correlation_id
_PARTITION_HEAD = struct.Struct(">ihq")  # index, error_code, base_offset
_TIMES = struct.Struct(">qq")  # log_append_time_ms, log_start_offset
_ACKS_TIMEOUT = struct.Struct(">hi")
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
        return _scan_request(memoryview(body), api_version >= FIRST_FLEXIBLE_VERSION, max_batch_bytes)
    except (ProtocolError, IndexError, struct.error):  # cut short, or a length that runs past the end
        return None


# The two scans below read field by field with local positions rather than through a
# kafka_protocol._wire.Reader: every produce request of the local route is scanned, and the
# Reader's method per field (two for a flexible length) was ~50 Python calls a request, a
# tenth of the proxy's per-request calls. Bytes cut short raise IndexError or struct.error;
# a length past the end is checked where a slice would hide it.


def _length(data: memoryview, pos: int, flexible: bool, nullable_int16: bool) -> tuple[int, int]:
    """(a length prefix, -1 for null; the position after it)."""
    if flexible:
        n = data[pos]
        if n < 0x80:  # one byte: nearly every length
            return n - 1, pos + 1
        n, pos = read_uvarint(data, pos)
        return n - 1, pos
    if nullable_int16:
        return I16.unpack_from(data, pos)[0], pos + 2
    return I32.unpack_from(data, pos)[0], pos + 4


def _text(data: memoryview, pos: int, n: int, what: str) -> str:
    if pos + n > len(data):
        raise ProtocolError(f"{what}: a string runs past the end")
    try:
        return str(data[pos:pos + n], "utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"{what}: a string at byte {pos} is not UTF-8") from exc


def _skip_tags(data: memoryview, pos: int) -> int:
    return pos + 1 if data[pos] == 0 else skip_tagged_fields(data, pos)


def _count(data: memoryview, pos: int, flexible: bool, what: str) -> tuple[int, int]:
    """(an array's element count, 0 for null; the position after it). Raises ProtocolError for
    a count the remaining bytes cannot hold (every element takes at least one byte)."""
    n, pos = _length(data, pos, flexible, False)
    if n < -1 or n > len(data) - pos:
        raise ProtocolError(f"{what}: array of {n} elements in {len(data) - pos} bytes")
    return max(n, 0), pos


def _scan_request(data: memoryview, flexible: bool, max_batch_bytes: int) -> ScannedProduce | None:
    what = "Produce request"
    n, pos = _length(data, 0, flexible, True)  # transactional_id (v3+: every forwarded version has it)
    transactional_id = None
    if n >= 0:
        transactional_id = _text(data, pos, n, what)
        pos += n
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(data, pos)
    pos += _ACKS_TIMEOUT.size
    if acks not in FORWARDED_ACKS:
        return None
    partitions: list[PartitionBatches] = []
    seen: set[tuple[str, int]] = set()
    topics, pos = _count(data, pos, flexible, what)
    for _ in range(topics):
        n, pos = _length(data, pos, flexible, True)
        if n < 0:
            return None  # a null topic name
        topic = _text(data, pos, n, what)
        pos += n
        count, pos = _count(data, pos, flexible, what)
        for _ in range(count):
            (index,) = I32.unpack_from(data, pos)
            n, pos = _length(data, pos + 4, flexible, False)
            if n < 0 or (topic, index) in seen:
                return None  # null records, or a partition named twice
            if pos + n > len(data):
                raise ProtocolError(f"{what}: records run past the end")
            batch = _one_batch(data[pos:pos + n], max_batch_bytes)
            pos += n
            if flexible:
                pos = _skip_tags(data, pos)
            if batch is None:
                return None
            seen.add((topic, index))
            partitions.append(PartitionBatches(topic, index, (batch,)))
        if flexible:
            pos = _skip_tags(data, pos)
    if flexible:
        pos = _skip_tags(data, pos)
    if pos != len(data):
        raise ProtocolError(f"{len(data) - pos} bytes after the end of a {what}")
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
    try:
        return _scan_response(memoryview(frame), api_version)
    except (IndexError, struct.error) as exc:
        raise ProtocolError(f"Produce response v{api_version} truncated") from exc


def _scan_response(data: memoryview, api_version: int) -> ScannedAnswer:
    what = f"Produce response v{api_version}"
    flexible = api_version >= FIRST_FLEXIBLE_VERSION
    pos = 4  # correlation_id
    plain = True
    if flexible:  # the response header's tagged fields
        plain, pos = data[pos] == 0, _skip_tags(data, pos)
    times = _TIMES if api_version >= FIRST_LOG_START_VERSION else I64  # log_append_time_ms, log_start_offset
    record_errors = api_version >= FIRST_RECORD_ERRORS_VERSION
    partitions: list[tuple[str, int, int, int]] = []
    topics, pos = _count(data, pos, flexible, what)
    for _ in range(topics):
        n, pos = _length(data, pos, flexible, True)
        if n < 0:
            raise ProtocolError("Produce response with a null topic name")
        topic = _text(data, pos, n, what)
        pos += n
        count, pos = _count(data, pos, flexible, what)
        for _ in range(count):
            index, error_code, base_offset = _PARTITION_HEAD.unpack_from(data, pos)
            pos += _PARTITION_HEAD.size + times.size
            plain = plain and error_code == 0
            if record_errors:
                errors_count, pos = _count(data, pos, flexible, what)
                for _ in range(errors_count):
                    pos += 4  # batch_index
                    n, pos = _length(data, pos, flexible, True)  # its message
                    pos += max(n, 0)
                    if flexible:
                        pos = _skip_tags(data, pos)
                n, pos = _length(data, pos, flexible, True)  # error_message
                pos += max(n, 0)
                plain = plain and not errors_count and n < 0
            if flexible:
                plain, pos = plain and data[pos] == 0, _skip_tags(data, pos)
            partitions.append((topic, index, error_code, base_offset))
        if flexible:
            plain, pos = plain and data[pos] == 0, _skip_tags(data, pos)
    throttle_at = pos
    pos += 4
    if flexible:
        plain, pos = plain and data[pos] == 0, _skip_tags(data, pos)
    if pos != len(data):
        raise ProtocolError(f"{len(data) - pos} bytes after the end of a {what}")
    return ScannedAnswer(tuple(partitions), throttle_at, plain)


def client_answer(frame: bytes | memoryview, answer: ScannedAnswer, correlation_id: int,
                  throttle_time_ms: int) -> bytes:
    """The client's framed answer (size prefix included): the leader's `frame` with the
    client's correlation id and the proxy's throttle time."""
    out = bytearray(SIZE.pack(len(frame)))
    out += frame
    I32.pack_into(out, 4, correlation_id)
    I32.pack_into(out, 4 + answer.throttle_at, throttle_time_ms)
    return bytes(out)
