"""The Produce API (key 0) v0-v12 in both directions, sans-IO: requests and responses,
encoded and decoded, with one set of types used by the proxy and by the agent.

Strategy: record batches stay opaque `memoryview` slices (of the received frame when
decoding; the caller's buffers when encoding). The encoder returns the frame as a list of
buffers (`encode_produce_request_parts`) so a vectored send writes the record batches
without a copy in user space (joining a ~1 MB request cost the proxy ~15 % of its CPU at
full rate), or joined once (`encode_produce_request`: the agent's batches, slices of a WAL
object's GET body, copied once). The generic schema classes of kafka-python and aiokafka
copy every record set several times and build a tree of objects per response: about a
third of the proxy's Python time per request, and per request the largest CPU item of
the agent's profile after the syscalls. The layout is small and fixed, so it is written
by hand here and tested byte for byte against both libraries (kafka-python v3-v12,
aiokafka v0-v8) in tests/unit/kafka_protocol/test_produce.py.

Request (header v1, v2 from v9): transactional_id nullable string (v3+), acks int16,
timeout_ms int32, topic_data [name string, partition_data [index int32, records nullable
bytes]].
Response (header v0, v1 from v9): responses [name string, partition_responses [index
int32, error_code int16, base_offset int64, log_append_time_ms int64 (v2+),
log_start_offset int64 (v5+), record_errors [batch_index int32, message nullable string]
(v8+), error_message nullable string (v8+)]], throttle_time_ms int32 (v1+).
From v9 strings, arrays and bytes are compact and every struct ends in tagged fields; the
v10+ leader hints (KIP-951 current_leader, node_endpoints) are tagged fields: the decoder
skips them and the encoder never writes them, so upstream broker endpoints never reach a
client. v13 names topics by id and is not covered.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from kafka_protocol._wire import (
    I32,
    I64,
    SIZE,
    ProtocolError,
    Reader,
    array_length,
    bytes_length,
    string,
)

API_PRODUCE = 0
PRODUCE_VERSIONS = (0, 12)  # the versions encoded and decoded here; v13 names topics by id
FIRST_TRANSACTIONAL_VERSION = 3  # transactional_id in the request
FIRST_FLEXIBLE_PRODUCE_VERSION = 9
_HEADER = struct.Struct(">hhi")  # api_key, api_version, correlation_id (the client id follows)
_ACKS_TIMEOUT = struct.Struct(">hi")
_PARTITION_HEAD = struct.Struct(">ihq")  # index, error_code, base_offset
_NO_TAGS = b"\x00"

Batch = bytes | memoryview  # one record batch (or a record set) as given, never decoded here
TopicBatches = Sequence[tuple[str, Sequence[tuple[int, Batch]]]]


# --- Request ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class PartitionProduceData:
    index: int
    records: memoryview | None


@dataclass(frozen=True, slots=True)
class TopicProduceData:
    name: str
    partition_data: tuple[PartitionProduceData, ...]


@dataclass(frozen=True, slots=True)
class ProduceRequestData:
    """A Produce request's body; field names as in Kafka's ProduceRequest schema."""

    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: tuple[TopicProduceData, ...]


def produce_request(acks: int, timeout_ms: int, topics: TopicBatches,
                    transactional_id: str | None = None) -> ProduceRequestData:
    """A request carrying `topics` [(topic, [(partition, batch)])] in the order given (the
    batches as views, not copies)."""
    return ProduceRequestData(transactional_id, acks, timeout_ms, tuple(
        TopicProduceData(name, tuple(PartitionProduceData(index, memoryview(batch)) for index, batch in parts))
        for name, parts in topics))


def _check_version(api_version: int, what: str) -> None:
    if not PRODUCE_VERSIONS[0] <= api_version <= PRODUCE_VERSIONS[1]:
        raise ValueError(f"Produce {what} v{api_version}: only v{PRODUCE_VERSIONS[0]}-v{PRODUCE_VERSIONS[1]} "
                         "are covered")


def decode_produce_request(body: bytes | memoryview, api_version: int) -> ProduceRequestData:
    """Decode a Produce body (after the request header); record sets stay memoryview slices
    of `body`. Raises ProtocolError when the body is malformed, ValueError for a version
    outside PRODUCE_VERSIONS."""
    _check_version(api_version, "request")
    r = Reader(body, api_version >= FIRST_FLEXIBLE_PRODUCE_VERSION, "Produce request")
    transactional_id = r.string() if api_version >= FIRST_TRANSACTIONAL_VERSION else None
    acks = r.int16()
    timeout_ms = r.int32()
    topics = []
    for _ in range(r.array_length()):
        name = r.string()
        if name is None:
            raise ProtocolError("Produce request with a null topic name")
        partitions = []
        for _ in range(r.array_length()):
            index = r.int32()
            records = r.bytes_view()
            r.tagged_fields()
            partitions.append(PartitionProduceData(index, records))
        r.tagged_fields()
        topics.append(TopicProduceData(name, tuple(partitions)))
    r.tagged_fields()
    r.end()
    return ProduceRequestData(transactional_id, acks, timeout_ms, tuple(topics))


def encode_produce_request_parts(request: ProduceRequestData, api_version: int, correlation_id: int,
                                 client_id: str | None) -> list[bytes | memoryview]:
    """The framed request (size prefix, request header v1 or v2, body) as a list of buffers,
    not joined: the record sets are the request's own memoryviews.

    Raises ValueError for a version outside PRODUCE_VERSIONS, a transactional id before
    v3, or a non-flexible string longer than an int16 length; struct.error for a number
    outside its field's range.
    """
    flexible = api_version >= FIRST_FLEXIBLE_PRODUCE_VERSION
    parts = encode_produce_body_parts(request, api_version)
    head: list[bytes | memoryview] = [
        b"",  # size, filled in below
        _HEADER.pack(API_PRODUCE, api_version, correlation_id),
        string(client_id, flexible=False),  # the header's client_id is never compact
    ]
    if flexible:
        head.append(_NO_TAGS)
    head[0] = SIZE.pack(sum(map(len, head)) + sum(map(len, parts)))
    head.extend(parts)
    return head


def encode_produce_body_parts(request: ProduceRequestData, api_version: int) -> list[bytes | memoryview]:
    """The request's body (after the request header) as a list of buffers. Raises what
    encode_produce_request_parts raises."""
    _check_version(api_version, "request")
    flexible = api_version >= FIRST_FLEXIBLE_PRODUCE_VERSION
    tags = _NO_TAGS if flexible else b""
    parts: list[bytes | memoryview] = []
    if api_version >= FIRST_TRANSACTIONAL_VERSION:
        parts.append(string(request.transactional_id, flexible))
    elif request.transactional_id is not None:
        raise ValueError("transactional_id needs Produce v3 or later")
    parts.append(_ACKS_TIMEOUT.pack(request.acks, request.timeout_ms))
    parts.append(array_length(len(request.topic_data), flexible))
    for topic in request.topic_data:
        parts.append(string(topic.name, flexible))
        parts.append(array_length(len(topic.partition_data), flexible))
        for partition in topic.partition_data:
            records = partition.records
            parts.append(I32.pack(partition.index))
            parts.append(bytes_length(None if records is None else len(records), flexible))
            if records is not None:
                parts.append(records)
            if flexible:
                parts.append(tags)
        if flexible:
            parts.append(tags)
    if flexible:
        parts.append(tags)
    return parts


def encode_produce_request(request: ProduceRequestData, api_version: int, correlation_id: int,
                           client_id: str | None) -> bytes:
    """encode_produce_request_parts joined once (the record sets copied once). Raises what it raises."""
    return b"".join(encode_produce_request_parts(request, api_version, correlation_id, client_id))


# --- Response --------------------------------------------------------------------------------

class PartitionAnswer(NamedTuple):
    """One partition of a ProduceResponse (record_errors are not kept: nothing uses them)."""

    topic: str
    index: int  # type: ignore[assignment]  # Kafka's field name; shadows tuple.index, which nothing calls
    error_code: int
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None


class ProduceAnswer(NamedTuple):
    """A ProduceResponse's body: its partitions in the order of the response, and the throttle time."""

    partitions: tuple[PartitionAnswer, ...]
    throttle_time_ms: int = 0


def encode_produce_response(partitions: Iterable[PartitionAnswer], correlation_id: int, api_version: int,
                            throttle_time_ms: int = 0) -> bytes:
    """The framed response (size prefix included), topics in order of first appearance; the
    fields a version lacks are left out. Raises ValueError for a version outside
    PRODUCE_VERSIONS or a non-flexible name longer than an int16 length."""
    _check_version(api_version, "response")
    flexible = api_version >= FIRST_FLEXIBLE_PRODUCE_VERSION
    by_topic: dict[str, list[PartitionAnswer]] = {}
    for p in partitions:
        by_topic.setdefault(p.topic, []).append(p)
    tags = _NO_TAGS if flexible else b""
    out = [b"", I32.pack(correlation_id), tags, array_length(len(by_topic), flexible)]
    for topic, answers in by_topic.items():
        out.append(string(topic, flexible))
        out.append(array_length(len(answers), flexible))
        for p in answers:
            out.append(_PARTITION_HEAD.pack(p.index, p.error_code, p.base_offset))
            if api_version >= 2:
                out.append(I64.pack(p.log_append_time_ms))
            if api_version >= 5:
                out.append(I64.pack(p.log_start_offset))
            if api_version >= 8:
                out.append(array_length(0, flexible))  # record_errors: none reported
                out.append(string(p.error_message, flexible))
            out.append(tags)
        out.append(tags)
    if api_version >= 1:
        out.append(I32.pack(throttle_time_ms))
    out.append(tags)
    body = b"".join(out)
    return SIZE.pack(len(body)) + body


def decode_response_header(frame: bytes | memoryview) -> int:
    """The correlation id at the start of a response frame (size prefix removed). Raises
    ProtocolError if the bytes are cut short."""
    if len(frame) < I32.size:
        raise ProtocolError(f"response header cut short: {len(frame)} bytes")
    correlation_id: int = I32.unpack_from(frame, 0)[0]
    return correlation_id


def decode_produce_response(frame: bytes | memoryview, api_version: int) -> ProduceAnswer:
    """Decode a response frame (size prefix removed, header included; its correlation id is
    the caller's, see decode_response_header). Raises ProtocolError when the bytes are not a
    Produce response of `api_version`, ValueError for a version outside PRODUCE_VERSIONS."""
    _check_version(api_version, "response")
    r = Reader(frame, api_version >= FIRST_FLEXIBLE_PRODUCE_VERSION, f"Produce response v{api_version}")
    r.int32()  # correlation_id
    r.tagged_fields()
    return _response_body(r, api_version)


def decode_produce_response_body(body: bytes | memoryview, api_version: int) -> ProduceAnswer:
    """Decode a response body (after the response header). Raises what decode_produce_response raises."""
    _check_version(api_version, "response")
    return _response_body(Reader(body, api_version >= FIRST_FLEXIBLE_PRODUCE_VERSION,
                                 f"Produce response v{api_version}"), api_version)


def _response_body(r: Reader, api_version: int) -> ProduceAnswer:
    partitions: list[PartitionAnswer] = []
    for _ in range(r.array_length()):
        topic = r.string()
        if topic is None:
            raise ProtocolError("Produce response with a null topic name")
        for _ in range(r.array_length()):
            index, error_code, base_offset = r.fixed(_PARTITION_HEAD)
            log_append_time_ms = r.fixed(I64)[0] if api_version >= 2 else -1
            log_start_offset = r.fixed(I64)[0] if api_version >= 5 else -1
            error_message = None
            if api_version >= 8:
                for _ in range(r.array_length()):  # record_errors: skipped
                    r.int32()
                    r.string()
                    r.tagged_fields()
                error_message = r.string()
            r.tagged_fields()
            partitions.append(PartitionAnswer(topic, index, error_code, base_offset, log_append_time_ms,
                                              log_start_offset, error_message))
        r.tagged_fields()
    throttle_time_ms = r.int32() if api_version >= 1 else 0
    r.tagged_fields()
    r.end()
    return ProduceAnswer(tuple(partitions), throttle_time_ms)
