"""ProduceRequest bodies written straight from raw record batches (sans-IO, plus one aiokafka adapter).

Why: the agent sends record batches it did not build - memoryview slices of a WAL object's
GET body. aiokafka's ProduceRequest encodes them through its generic Schema, which copies
every batch four times before the connection adds its header (`bytes(batch)` by the
caller, `Bytes.encode`'s concatenation, the partitions array's join, the topics array's
join, the struct's join). `encode_produce_body` writes the body with one join over the
batches as given, so a batch's bytes are copied once here and twice by aiokafka's
connection (header + body, size + message), instead of six times in all.

Layout (non-flexible ProduceRequest, v0-v8, big-endian, as aiokafka's ProduceRequest_v0..v8
SCHEMA): [transactional_id: int16 length, -1 for null, then UTF-8 (v3+ only)]
required_acks int16, timeout_ms int32, topics array (int32 count; per topic: int16 length
+ UTF-8 name, partitions array: int32 count; per partition: int32 partition, int32 length
+ the record batch bytes).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from aiokafka.protocol.produce import ProduceRequest

Batch = bytes | memoryview
TopicBatches = Sequence[tuple[str, Sequence[tuple[int, Batch]]]]

_ACKS_TIMEOUT = struct.Struct(">hi")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">ii")  # partition, batch length
FIRST_VERSION_WITH_TRANSACTIONAL_ID = 3
MAX_STRING_BYTES = 32767  # int16 length prefix


def encode_produce_body(version: int, transactional_id: str | None, required_acks: int, timeout_ms: int,
                        topics: TopicBatches) -> bytes:
    """The body of a ProduceRequest `version` (0-8) carrying `topics` in the order given.

    Raises ValueError for a version this layout does not cover (flexible v9+), a name
    longer than an int16 length allows, or a transactional id before v3; struct.error for
    a number out of its field's range (acks, timeout, partition).
    """
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
    return b"".join(parts)


def _string(value: str) -> bytes:
    raw = value.encode()
    if len(raw) > MAX_STRING_BYTES:
        raise ValueError(f"string of {len(raw)} bytes does not fit an int16 length")
    return _I16.pack(len(raw)) + raw


class RawProduceRequest(ProduceRequest):
    """aiokafka's ProduceRequest whose negotiated struct encodes with `encode_produce_body`.

    Same constructor, same negotiation (client.send picks the version), same response type;
    only the body is written without the Schema's copies.
    """

    def build(self, request_struct_class: type[Any]) -> Any:
        struct_class = _raw_struct_class(request_struct_class)
        built = super().build(struct_class)
        built._raw_body = encode_produce_body(  # noqa: SLF001 - our own subclass's field
            request_struct_class.API_VERSION, self._transactional_id, self._required_acks, self._timeout,
            self._topics)
        return built


_RAW_STRUCTS: dict[type[Any], type[Any]] = {}


def _raw_struct_class(base: type[Any]) -> type[Any]:
    """A subclass of aiokafka's request struct `base` whose encode() returns the prepared body."""
    cls = _RAW_STRUCTS.get(base)
    if cls is None:
        def encode(self: Any) -> bytes:
            body: bytes = self._raw_body
            return body

        cls = _RAW_STRUCTS[base] = type(f"Raw{base.__name__}", (base,), {"encode": encode})
    return cls
