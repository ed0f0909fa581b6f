"""Produce responses v3-v12 without the library's objects: encoded for the client, decoded from the leader.

Strategy: a Produce round trip through the proxy decodes the leader's ProduceResponse and
encodes the client's. With kafka-python's schema classes these two took about a third of
the proxy's Python time per request (a tree of DataContainer objects built and walked per
response, ~1,500 function calls per one-record request in all). The layout is small and
fixed, so it is written by hand here, sans-IO, and tested byte for byte against the
library in tests/unit/proxy/test_produce_response_codec.py.

Layout (v3-v12; response header v0 = correlation_id int32, v1 from v9 adds tagged fields):
  responses [name string, partition_responses [index int32, error_code int16,
      base_offset int64, log_append_time_ms int64, log_start_offset int64 (v5+),
      record_errors [batch_index int32, batch_index_error_message nullable string] (v8+),
      error_message nullable string (v8+), tagged fields (v9+)], tagged fields (v9+)],
  throttle_time_ms int32, tagged fields (v9+)
From v9 strings and arrays are "compact" (uvarint length + 1, 0 = null). v10+ leader hints
(KIP-951: current_leader, node_endpoints) are tagged fields: the decoder skips them and the
encoder never writes them, so upstream broker endpoints never reach the client.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any, NamedTuple

from kafka_protocol.kafka_codec import (
    _SIZE,
    FIRST_FLEXIBLE_PRODUCE_VERSION,
    ProtocolError,
    _array_length,
    _read_uvarint,
    _skip_tagged_fields,
    _string,
)

FAST_PRODUCE_RESPONSE_VERSIONS = (3, 12)
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_FIXED = struct.Struct(">ihqq")  # index, error_code, base_offset, log_append_time_ms
_I64 = struct.Struct(">q")


class PartitionAnswer(NamedTuple):
    """One partition of a ProduceResponse (record_errors are not kept: the proxy never uses them)."""

    topic: str
    index: int  # type: ignore[assignment]  # Kafka's field name; shadows tuple.index, which nothing calls
    error_code: int
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None


class ProduceAnswer(NamedTuple):
    correlation_id: int
    partitions: tuple[PartitionAnswer, ...]
    throttle_time_ms: int


def encode_produce_response(partitions: Iterable[PartitionAnswer], correlation_id: int, api_version: int,
                            throttle_time_ms: int = 0) -> bytes:
    """The framed response (size prefix included), topics in order of first appearance.

    Raises ValueError for a version outside FAST_PRODUCE_RESPONSE_VERSIONS.
    """
    if not FAST_PRODUCE_RESPONSE_VERSIONS[0] <= api_version <= FAST_PRODUCE_RESPONSE_VERSIONS[1]:
        raise ValueError(f"Produce response v{api_version} is not written by the fast path")
    flexible = api_version >= FIRST_FLEXIBLE_PRODUCE_VERSION
    by_topic: dict[str, list[PartitionAnswer]] = {}
    for p in partitions:
        by_topic.setdefault(p.topic, []).append(p)
    tags = b"\x00" if flexible else b""
    out = [b"", _I32.pack(correlation_id), tags, _array_length(len(by_topic), flexible)]
    for topic, answers in by_topic.items():
        out.append(_string(topic, flexible))
        out.append(_array_length(len(answers), flexible))
        for p in answers:
            out.append(_PARTITION_FIXED.pack(p.index, p.error_code, p.base_offset, p.log_append_time_ms))
            if api_version >= 5:
                out.append(_I64.pack(p.log_start_offset))
            if api_version >= 8:
                out.append(_array_length(0, flexible))  # record_errors: the proxy reports none
                out.append(_string(p.error_message, flexible))
            out.append(tags)
        out.append(tags)
    out.append(_I32.pack(throttle_time_ms))
    out.append(tags)
    body = b"".join(out)
    return _SIZE.pack(len(body)) + body


def decode_produce_response(frame: bytes | memoryview, api_version: int) -> ProduceAnswer:
    """Decode a response frame (size prefix removed, header included).

    Raises ProtocolError when the bytes are not a Produce response of `api_version`.
    """
    if not FAST_PRODUCE_RESPONSE_VERSIONS[0] <= api_version <= FAST_PRODUCE_RESPONSE_VERSIONS[1]:
        raise ValueError(f"Produce response v{api_version} is not read by the fast path")
    r = _Reader(frame, api_version >= FIRST_FLEXIBLE_PRODUCE_VERSION)
    try:
        (correlation_id,) = r.fixed(_I32)
        r.tags()
        partitions: list[PartitionAnswer] = []
        for _ in range(r.count()):
            topic = r.string()
            if topic is None:
                raise ProtocolError("Produce response with a null topic name")
            for _ in range(r.count()):
                index, error_code, base_offset, log_append_time_ms = r.fixed(_PARTITION_FIXED)
                log_start_offset = r.fixed(_I64)[0] if api_version >= 5 else -1
                error_message = None
                if api_version >= 8:
                    for _ in range(r.count()):  # record_errors: skipped
                        r.fixed(_I32)
                        r.string()
                        r.tags()
                    error_message = r.string()
                r.tags()
                partitions.append(PartitionAnswer(topic, index, error_code, base_offset, log_append_time_ms,
                                                  log_start_offset, error_message))
            r.tags()
        (throttle_time_ms,) = r.fixed(_I32)
        r.tags()
    except (struct.error, UnicodeDecodeError) as exc:
        raise ProtocolError(f"Produce response v{api_version} truncated or malformed: {exc}") from exc
    if r.pos != len(r.data):
        raise ProtocolError(f"{len(r.data) - r.pos} bytes after the end of a Produce response")
    return ProduceAnswer(correlation_id, tuple(partitions), throttle_time_ms)


class _Reader:
    __slots__ = ("data", "pos", "flexible")

    def __init__(self, data: bytes | memoryview, flexible: bool) -> None:
        self.data = data
        self.pos = 0
        self.flexible = flexible

    def fixed(self, layout: struct.Struct) -> tuple[Any, ...]:
        values = layout.unpack_from(self.data, self.pos)  # struct.error past the end
        self.pos += layout.size
        return values

    def _length(self, nullable_int16: bool) -> int:
        if self.flexible:
            value, self.pos = _read_uvarint(self.data, self.pos)
            return value - 1
        length: int = self.fixed(_I16 if nullable_int16 else _I32)[0]
        return length

    def count(self) -> int:
        n = self._length(nullable_int16=False)
        if n > len(self.data) - self.pos:  # every element takes at least one byte
            raise ProtocolError(f"array of {n} elements in {len(self.data) - self.pos} bytes")
        return max(n, 0)

    def string(self) -> str | None:
        n = self._length(nullable_int16=True)
        if n < 0:
            return None
        if self.pos + n > len(self.data):
            raise ProtocolError("string runs past the end of the response")
        text = bytes(self.data[self.pos : self.pos + n]).decode("utf-8")
        self.pos += n
        return text

    def tags(self) -> None:
        if self.flexible:
            self.pos = _skip_tagged_fields(self.data, self.pos)
