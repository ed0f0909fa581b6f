"""Produce requests and answers of the agent's appends, sans-IO: bytes in, values out.

Why: the agent sends record batches it did not build - memoryview slices of a WAL object's
GET body. aiokafka's ProduceRequest encodes them through its generic Schema, which copies
every batch four times before the connection adds its header (`bytes(batch)` by the
caller, `Bytes.encode`'s concatenation, the partitions array's join, the topics array's
join, the struct's join). `encode_produce_body` writes the body with one join over the
batches as given, so a batch's bytes are copied once here and twice by aiokafka's
connection (header + body, size + message), instead of six times in all.

`decode_produce_response` takes out of a ProduceResponse only what the appender uses (per
partition: error code and base offset) with one struct.unpack_from per partition, where
aiokafka's Schema builds every field through BytesIO reads and nested generators: per
request the largest CPU item of the agent's profile after the syscalls, paid once per
leader round trip, so more often per MiB the fewer partitions each request carries
(several agents per zone). (kafka_protocol/produce_response_codec.py decodes v3-v12 for the proxy;
leader_notify cannot import proxy, its sibling layer.)

Layout (non-flexible ProduceRequest, v0-v8, big-endian, as aiokafka's ProduceRequest_v0..v8
SCHEMA): [transactional_id: int16 length, -1 for null, then UTF-8 (v3+ only)]
required_acks int16, timeout_ms int32, topics array (int32 count; per topic: int16 length
+ UTF-8 name, partitions array: int32 count; per partition: int32 partition, int32 length
+ the record batch bytes). ProduceResponse v0-v7: topics array (int16 length + UTF-8 name,
partitions array: int32 partition, int16 error code, int64 base offset, then int64
log_append_time from v2 and int64 log_start_offset from v5), then int32 throttle_time_ms
from v1.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

Batch = bytes | memoryview
TopicBatches = Sequence[tuple[str, Sequence[tuple[int, Batch]]]]

_ACKS_TIMEOUT = struct.Struct(">hi")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">ii")  # partition, batch length
_REQUEST_HEAD = struct.Struct(">ihhi")  # frame size, api_key, api_version, correlation_id
_HEADER_FIXED_BYTES = 2 + 2 + 4  # api_key, api_version, correlation_id (the client id follows)
PRODUCE_API_KEY = 0
FIRST_VERSION_WITH_TRANSACTIONAL_ID = 3
MAX_STRING_BYTES = 32767  # int16 length prefix


def encode_produce_body(version: int, transactional_id: str | None, required_acks: int, timeout_ms: int,
                        topics: TopicBatches) -> bytes:
    """The body of a ProduceRequest `version` (0-8) carrying `topics` in the order given.

    Raises ValueError for a version this layout does not cover (flexible v9+), a name
    longer than an int16 length allows, or a transactional id before v3; struct.error for
    a number out of its field's range (acks, timeout, partition).
    """
    parts, _size = _body_parts(version, transactional_id, required_acks, timeout_ms, topics)
    return b"".join(parts)


def encode_produce_frame(version: int, correlation_id: int, client_id: str | None, transactional_id: str | None,
                         required_acks: int, timeout_ms: int, topics: TopicBatches) -> bytes:
    """A whole ProduceRequest `version` (0-8) as it goes on the connection: int32 size, request
    header v1 (int16 api_key 0, int16 api_version, int32 correlation_id, client_id as a
    nullable int16-length string), then the body of `encode_produce_body`, in one join (the
    batches copied once). Raises what encode_produce_body raises."""
    parts, body_size = _body_parts(version, transactional_id, required_acks, timeout_ms, topics)
    client = _I16.pack(-1) if client_id is None else _string(client_id)
    head = _REQUEST_HEAD.pack(_HEADER_FIXED_BYTES + len(client) + body_size, PRODUCE_API_KEY, version,
                              correlation_id) + client
    parts.insert(0, head)
    return b"".join(parts)


def decode_response_header(data: bytes | memoryview) -> int:
    """The correlation id of a response header v0 (non-flexible versions). Raises ValueError
    if the bytes are cut short."""
    try:
        (correlation_id,) = _I32.unpack_from(data, 0)
    except struct.error as exc:
        raise ValueError(f"response header cut short: {exc}") from exc
    return int(correlation_id)


def _body_parts(version: int, transactional_id: str | None, required_acks: int, timeout_ms: int,
                topics: TopicBatches) -> tuple[list[Batch], int]:
    """The body's pieces in order, and their total length."""
    if not 0 <= version <= 8:
        raise ValueError(f"ProduceRequest v{version}: only v0-v8 (non-flexible) are encoded here")
    parts: list[Batch] = []
    if version >= FIRST_VERSION_WITH_TRANSACTIONAL_ID:
        parts.append(_I16.pack(-1) if transactional_id is None else _string(transactional_id))
    elif transactional_id is not None:
        raise ValueError("transactional_id needs ProduceRequest v3 or later")
    parts.append(_ACKS_TIMEOUT.pack(required_acks, timeout_ms))
    parts.append(_I32.pack(len(topics)))
    for topic, partitions in topics:
        parts.append(_string(topic) + _I32.pack(len(partitions)))
        for partition, batch in partitions:
            parts.append(_PARTITION_HEAD.pack(partition, len(batch)))
            parts.append(batch)
    return parts, sum(map(len, parts))


PartitionAnswer = tuple[int, int, int]  # partition, error code, base offset
_PARTITION_ANSWER = {0: struct.Struct(">ihq"), 2: struct.Struct(">ihqq"), 5: struct.Struct(">ihqqq")}
MAX_RESPONSE_VERSION = 7


def decode_produce_response(version: int, data: bytes | memoryview) -> list[tuple[str, list[PartitionAnswer]]]:
    """[(topic, [(partition, error code, base offset)])] of a ProduceResponse body (v0-v7,
    after the response header). Raises ValueError if the bytes are cut short, a count is
    negative, a name is not UTF-8, or bytes are left over."""
    if not 0 <= version <= MAX_RESPONSE_VERSION:
        raise ValueError(f"ProduceResponse v{version}: only v0-v{MAX_RESPONSE_VERSION} are decoded here")
    answer = _PARTITION_ANSWER[5 if version >= 5 else 2 if version >= 2 else 0]
    view = memoryview(data)
    pos = 0
    try:
        (topic_count,) = _I32.unpack_from(view, pos)
        pos += 4
        if topic_count < 0:
            raise ValueError(f"negative topic count {topic_count}")
        topics: list[tuple[str, list[PartitionAnswer]]] = []
        for _ in range(topic_count):
            (name_length,) = _I16.unpack_from(view, pos)
            pos += 2
            if name_length < 0 or pos + name_length > len(view):
                raise ValueError(f"topic name of {name_length} bytes at offset {pos}")
            topic = bytes(view[pos:pos + name_length]).decode()
            pos += name_length
            (partition_count,) = _I32.unpack_from(view, pos)
            pos += 4
            if partition_count < 0:
                raise ValueError(f"negative partition count {partition_count}")
            partitions: list[PartitionAnswer] = []
            for _ in range(partition_count):
                fields = answer.unpack_from(view, pos)
                pos += answer.size
                partitions.append((fields[0], fields[1], fields[2]))
            topics.append((topic, partitions))
        if version >= 1:
            _I32.unpack_from(view, pos)  # throttle_time_ms: not used, but it must be there
            pos += _I32.size
        if pos != len(view):
            raise ValueError(f"{len(view) - pos} bytes left after the ProduceResponse")
    except struct.error as exc:
        raise ValueError(f"ProduceResponse v{version} cut short at offset {pos}: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ValueError(f"ProduceResponse v{version}: a topic name is not UTF-8") from exc
    return topics


def _string(value: str) -> bytes:
    raw = value.encode()
    if len(raw) > MAX_STRING_BYTES:
        raise ValueError(f"string of {len(raw)} bytes does not fit an int16 length")
    return _I16.pack(len(raw)) + raw
