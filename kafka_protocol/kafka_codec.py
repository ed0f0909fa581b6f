"""Sans-IO Kafka server codec: bytes in, request frames out; responses in, bytes out.

Strategy: framing and the request header are parsed here by hand (they are tiny and fixed
by the protocol), the bodies by kafka-python 3.x's schema-driven protocol classes, which
cover every version including flexible ones and skip unknown tagged fields. Received
chunks are kept as immutable bytes: a frame inside one chunk is handed on as a memoryview
of it (no copy), a frame spanning chunks is joined once. A large frame can instead be
received straight into a buffer of its own (`frame_buffer()` / `received_into()`): the
joining copy of ~1 MB Produce requests was ~13 % of the proxy's busy time in saturation.
That buffer grows with the bytes received (doubling, at most FRAME_AHEAD_BYTES or the bytes
already there ahead of them), never to the size the frame announces: a 20-byte header
announcing 16 MiB costs 256 KiB, not 16 MiB. `held_bytes` is what the codec holds, for the
caller's process-wide receive budget. The memoryviews stay valid whatever arrives later.
No sockets, clocks or trio here.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass
from typing import Any

from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

API_PRODUCE = 0
API_METADATA = 3
API_API_VERSIONS = 18
API_INIT_PRODUCER_ID = 22
API_SASL_HANDSHAKE = 17
API_SASL_AUTHENTICATE = 36
API_FIND_COORDINATOR = 10
API_ADD_PARTITIONS_TO_TXN = 24
API_ADD_OFFSETS_TO_TXN = 25
API_END_TXN = 26
API_TXN_OFFSET_COMMIT = 28

# api_key -> (request class, response class) for the APIs the proxy serves.
MESSAGES: dict[int, tuple[Any, Any]] = {
    API_PRODUCE: (ProduceRequest, ProduceResponse),
    API_METADATA: (MetadataRequest, MetadataResponse),
    API_API_VERSIONS: (ApiVersionsRequest, ApiVersionsResponse),
    API_INIT_PRODUCER_ID: (InitProducerIdRequest, InitProducerIdResponse),
    # Transactions: answered (FindCoordinator) or forwarded to the coordinator (kafka_upstream/coordinators.py).
    API_FIND_COORDINATOR: (FindCoordinatorRequest, FindCoordinatorResponse),
    API_ADD_PARTITIONS_TO_TXN: (AddPartitionsToTxnRequest, AddPartitionsToTxnResponse),
    API_ADD_OFFSETS_TO_TXN: (AddOffsetsToTxnRequest, AddOffsetsToTxnResponse),
    API_END_TXN: (EndTxnRequest, EndTxnResponse),
    API_TXN_OFFSET_COMMIT: (TxnOffsetCommitRequest, TxnOffsetCommitResponse),
    # Decoded only when the listener has SASL on (advertised by proxy/versions.py then).
    API_SASL_HANDSHAKE: (SaslHandshakeRequest, SaslHandshakeResponse),
    API_SASL_AUTHENTICATE: (SaslAuthenticateRequest, SaslAuthenticateResponse),
}

MIN_HEADER_BYTES = 8  # api_key int16, api_version int16, correlation_id int32
# Frames at least this large may be received into a buffer of their own; below it the
# copy saved does not pay for the extra system call of a second read. Above the maximum
# they arrive in chunks as before, so a client announcing a huge frame gets no memory
# ahead of the bytes it actually sends.
DIRECT_RECEIVE_MIN_BYTES = 64 * 1024
DIRECT_RECEIVE_MAX_BYTES = 16 * 1024 * 1024
# Room a frame's own buffer may have beyond the bytes received when it starts (one plain
# read allocates as much); later it at most doubles. Growing in these steps costs ~15 % over
# allocating the whole frame at once (bench/bench_codec_receive.py), still below the join.
FRAME_AHEAD_BYTES = 256 * 1024
# What a buffered chunk costs beyond its bytes (the bytes object and its deque slot): a
# client trickling one byte per segment must not hold 50 times what it is charged for.
CHUNK_OVERHEAD_BYTES = 64
_SIZE = struct.Struct(">i")
_HEADER_FIXED = struct.Struct(">hhih")  # + client_id length


class ProtocolError(Exception):
    """The peer sent bytes that are not a valid Kafka request; the connection must close."""


class FrameTooLarge(ProtocolError):
    """A frame's declared size exceeds the configured maximum."""


class UnsupportedRequest(Exception):
    """A well-framed request for an API key or version the proxy does not serve."""

    def __init__(self, frame: RequestFrame, reason: str) -> None:
        super().__init__(reason)
        self.frame = frame


@dataclass(frozen=True, slots=True)
class RequestFrame:
    """One request as received: header fields plus the undecoded body."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: memoryview
    size: int  # frame bytes, without the 4-byte size prefix


class NeedData:
    """Returned by next_frame() when the buffer holds no complete frame yet."""

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = NeedData()


def is_flexible(api_key: int, api_version: int) -> bool:
    """Whether (api_key, api_version) uses flexible (tagged-field) headers."""
    pair = MESSAGES.get(api_key)
    if pair is None:
        return False
    return bool(pair[0].flexible_version_q(api_version))


class ServerCodec:
    """Splits a client's byte stream into request frames."""

    def __init__(self, max_frame_bytes: int) -> None:
        self._chunks: deque[bytes] = deque()
        self._offset = 0  # bytes of _chunks[0] already consumed
        self._buffered = 0
        self._chunk_held = 0  # bytes of the chunks in _chunks, consumed prefix and overhead included
        self._max_frame_bytes = max_frame_bytes
        # A large frame being received into its own buffer (size prefix included), how much
        # of it is there, and its full size; the buffer grows towards that size as bytes
        # arrive. While it is set, _chunks holds only bytes after it.
        self._frame: bytearray | None = None
        self._filled = 0
        self._frame_total = 0

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet returned as frames."""
        return self._buffered

    @property
    def held_bytes(self) -> int:
        """Memory this codec holds for the stream: buffered chunks and the frame buffer's capacity."""
        return self._chunk_held + (len(self._frame) if self._frame is not None else 0)

    def receive_data(self, data: bytes) -> None:
        if not data:
            return
        if self._frame is not None and self._filled < self._frame_total:
            take = min(len(data), self._frame_total - self._filled)
            short = take - (len(self._frame) - self._filled)
            if short > 0:  # the bytes are here already: hold them in the frame, not twice
                self._frame += bytes(short)
            self._frame[self._filled : self._filled + take] = memoryview(data)[:take]
            self._filled += take
            self._buffered += take
            data = data[take:]
            if not data:
                return
        chunk = bytes(data)  # no copy when `data` already is bytes
        self._chunks.append(chunk)
        self._buffered += len(chunk)
        self._chunk_held += len(chunk) + CHUNK_OVERHEAD_BYTES

    def frame_buffer(self, max_grow_bytes: int | None = None) -> memoryview | None:
        """Where the rest of the frame being received may be read into directly, or None
        (then read a chunk and pass it to receive_data). Call received_into(n) after
        writing n bytes at its start, and release the view before calling this again (the
        buffer may grow). `max_grow_bytes` caps the memory this call may add (the caller's
        budget); the returned view may then be short, or None if there is no room at all.
        Raises FrameTooLarge or ProtocolError like next_frame.
        """
        if self._frame is None:
            if self._buffered < 4:
                return None
            size = self._frame_size()
            if not DIRECT_RECEIVE_MIN_BYTES <= size + 4 <= DIRECT_RECEIVE_MAX_BYTES or self._buffered >= size + 4:
                return None
            # Everything buffered belongs to this frame: move it into the frame's own buffer
            # (as large as what is there; room for more is added below, within the budget).
            frame = bytearray(self._buffered)
            filled = 0
            first = True
            while self._chunks:
                chunk = self._chunks.popleft()
                part = memoryview(chunk)[self._offset:] if first else memoryview(chunk)
                first = False
                frame[filled : filled + len(part)] = part
                filled += len(part)
            self._offset = 0
            self._chunk_held = 0
            self._frame, self._filled, self._frame_total = frame, filled, size + 4
        frame = self._frame
        if self._filled == len(frame) < self._frame_total:
            grow = max(self._filled, FRAME_AHEAD_BYTES)
            grow = min(grow, self._frame_total - len(frame))
            if max_grow_bytes is not None:
                grow = min(grow, max_grow_bytes)
            if grow <= 0:
                return None
            frame += bytes(grow)  # in place: calloc'd zeros, and realloc moves rather than copies when it can
        if self._filled < len(frame):
            return memoryview(frame)[self._filled:]
        return None

    def received_into(self, n: int) -> None:
        """n bytes were written at the start of the last frame_buffer()."""
        if self._frame is None or not 0 <= n <= len(self._frame) - self._filled:
            raise ValueError(f"received_into({n}) without room for it")
        self._filled += n
        self._buffered += n

    def _frame_size(self) -> int:
        size: int
        (size,) = _SIZE.unpack(self._peek4())
        if size < MIN_HEADER_BYTES:
            raise ProtocolError(f"frame size {size} is smaller than a request header")
        if size > self._max_frame_bytes:
            raise FrameTooLarge(f"frame of {size} bytes exceeds max_frame_bytes={self._max_frame_bytes}")
        return size

    def next_frame(self) -> RequestFrame | NeedData:
        """The next complete request, or NEED_DATA.

        Raises FrameTooLarge or ProtocolError when the stream cannot be a Kafka request.
        """
        if self._frame is not None:
            if self._filled < self._frame_total:
                return NEED_DATA
            frame, self._frame, self._filled, self._frame_total = self._frame, None, 0, 0
            self._buffered -= len(frame)
            return parse_request_frame(memoryview(frame)[4:])
        if self._buffered < 4:
            return NEED_DATA
        size = self._frame_size()
        if self._buffered < 4 + size:
            return NEED_DATA
        return parse_request_frame(self._consume(4 + size)[4:])

    def _peek4(self) -> bytes:
        first = self._chunks[0]
        if len(first) - self._offset >= 4:
            return first[self._offset : self._offset + 4]
        head = first[self._offset :]
        for chunk in list(self._chunks)[1:]:
            head += chunk[: 4 - len(head)]
            if len(head) == 4:
                break
        return head

    def _drop_first_chunk(self) -> None:
        chunk = self._chunks.popleft()
        self._chunk_held -= len(chunk) + CHUNK_OVERHEAD_BYTES
        self._offset = 0

    def _consume(self, n: int) -> memoryview:
        """Remove the first `n` buffered bytes (n <= buffered) and return them."""
        self._buffered -= n
        first = self._chunks[0]
        start = self._offset
        if len(first) - start >= n:
            self._offset += n
            if self._offset == len(first):
                self._drop_first_chunk()
            return memoryview(first)[start : start + n]
        parts: list[bytes | memoryview] = [memoryview(first)[start:]]
        need = n - (len(first) - start)
        self._drop_first_chunk()
        while need:
            chunk = self._chunks[0]
            if len(chunk) <= need:
                parts.append(chunk)
                need -= len(chunk)
                self._drop_first_chunk()
            else:
                parts.append(memoryview(chunk)[:need])
                self._offset = need
                need = 0
        return memoryview(b"".join(parts))


def parse_request_frame(frame: bytes | memoryview) -> RequestFrame:
    """Parse the request header of one frame (without its size prefix).

    Raises ProtocolError on a truncated or malformed header.
    """
    view = memoryview(frame)
    if len(frame) < _HEADER_FIXED.size:
        raise ProtocolError("truncated request header")
    api_key, api_version, correlation_id, client_id_len = _HEADER_FIXED.unpack_from(frame, 0)
    pos = _HEADER_FIXED.size
    client_id: str | None = None
    if client_id_len >= 0:
        if pos + client_id_len > len(frame):
            raise ProtocolError("client_id runs past the end of the frame")
        client_id = bytes(view[pos : pos + client_id_len]).decode("utf-8", errors="replace")
        pos += client_id_len
    elif client_id_len != -1:
        raise ProtocolError(f"invalid client_id length {client_id_len}")
    if is_flexible(api_key, api_version):
        pos = _skip_tagged_fields(frame, pos)
    return RequestFrame(api_key, api_version, correlation_id, client_id, view[pos:], len(frame))


def _read_uvarint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise ProtocolError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise ProtocolError("varint longer than 5 bytes")


def _skip_tagged_fields(data: bytes | memoryview, pos: int) -> int:
    count, pos = _read_uvarint(data, pos)
    for _ in range(count):
        _tag, pos = _read_uvarint(data, pos)
        size, pos = _read_uvarint(data, pos)
        pos += size
        if pos > len(data):
            raise ProtocolError("tagged field runs past the end of the frame")
    return pos


def decode_request(frame: RequestFrame, max_versions: dict[int, int]) -> Any:
    """Decode a frame's body with the library's schema for (api_key, api_version).

    Produce v3-v12 take the fast path below (same fields, records as memoryview slices).
    Raises UnsupportedRequest for an API key or version outside `max_versions`, and
    ProtocolError when the body does not parse.
    """
    pair = MESSAGES.get(frame.api_key)
    if pair is None or frame.api_key not in max_versions:
        raise UnsupportedRequest(frame, f"unsupported api_key {frame.api_key}")
    if not 0 <= frame.api_version <= max_versions[frame.api_key]:
        raise UnsupportedRequest(frame, f"unsupported version {frame.api_version} of api_key {frame.api_key}")
    try:
        if frame.api_key == API_PRODUCE and FAST_PRODUCE_VERSIONS[0] <= frame.api_version <= FAST_PRODUCE_VERSIONS[1]:
            return decode_produce_request(frame.body, frame.api_version)
        return pair[0].decode(frame.body, version=frame.api_version)
    except Exception as exc:  # the library raises a variety of errors on bad bytes
        raise ProtocolError(f"cannot decode api_key {frame.api_key} v{frame.api_version}: {exc}") from exc


def encode_response(response: Any, correlation_id: int, api_version: int) -> bytes:
    """Frame a response object at `api_version` for `correlation_id` (size prefix included)."""
    response.API_VERSION = api_version  # before the header: the library's setter touches it
    response.with_header(correlation_id=correlation_id)
    return bytes(response.encode(header=True, framed=True))


# --- Produce fast path ----------------------------------------------------------------------
# The library's Produce decoder copies every record set into new bytes and its encoder
# copies them again; Produce carries nearly all of the proxy's bytes, so these two
# hand-written functions keep record sets as memoryview slices of the received frame and
# write them out with one join. Layout (v3-v12): transactional_id nullable string, acks
# int16, timeout_ms int32, topic_data [name string, partition_data [index int32, records
# nullable bytes]]; from v9 strings, arrays and bytes are "compact" (uvarint length + 1,
# 0 = null) and every struct ends in tagged fields. Tested byte for byte against the
# library in tests/unit/proxy/test_codec_produce_fast.py.

FAST_PRODUCE_VERSIONS = (3, 12)  # v0-v2 predate magic 2; v13 names topics by id
MIN_ACCEPTED_PRODUCE_VERSION = 3  # v0-v2 carry message sets older than magic 2: refused (UNSUPPORTED_VERSION)
FIRST_FLEXIBLE_PRODUCE_VERSION = 9
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")


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
    """A decoded Produce request; field names as in the library's ProduceRequest."""

    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: tuple[TopicProduceData, ...]


class _Reader:
    __slots__ = ("data", "pos", "flexible")

    def __init__(self, data: memoryview, flexible: bool) -> None:
        self.data = data
        self.pos = 0
        self.flexible = flexible

    def _need(self, n: int) -> None:
        if n < 0 or self.pos + n > len(self.data):
            raise ProtocolError(f"Produce request truncated at byte {self.pos} (needs {n} more)")

    def int16(self) -> int:
        self._need(2)
        value: int
        (value,) = _I16.unpack_from(self.data, self.pos)
        self.pos += 2
        return value

    def int32(self) -> int:
        self._need(4)
        value: int
        (value,) = _I32.unpack_from(self.data, self.pos)
        self.pos += 4
        return value

    def length(self, nullable_int16: bool) -> int:
        """A length prefix; -1 means null."""
        if self.flexible:
            value, self.pos = _read_uvarint(self.data, self.pos)
            return value - 1
        return self.int16() if nullable_int16 else self.int32()

    def string(self) -> str | None:
        n = self.length(nullable_int16=True)
        if n < 0:
            return None
        self._need(n)
        text = bytes(self.data[self.pos : self.pos + n]).decode("utf-8")
        self.pos += n
        return text

    def bytes_view(self) -> memoryview | None:
        n = self.length(nullable_int16=False)
        if n < 0:
            return None
        self._need(n)
        view = self.data[self.pos : self.pos + n]
        self.pos += n
        return view

    def array_length(self) -> int:
        n = self.length(nullable_int16=False)
        # Each element takes at least one byte: a count beyond the remaining bytes is a lie.
        if n > len(self.data) - self.pos:
            raise ProtocolError(f"array of {n} elements in {len(self.data) - self.pos} bytes")
        return n

    def tagged_fields(self) -> None:
        if self.flexible:
            self.pos = _skip_tagged_fields(self.data, self.pos)


def decode_produce_request(body: memoryview, api_version: int) -> ProduceRequestData:
    """Decode a Produce v3-v12 body; record sets stay memoryview slices of `body`.

    Raises ProtocolError when the body is malformed.
    """
    r = _Reader(memoryview(body), api_version >= FIRST_FLEXIBLE_PRODUCE_VERSION)
    transactional_id = r.string()
    acks = r.int16()
    timeout_ms = r.int32()
    topics = []
    for _ in range(max(r.array_length(), 0)):
        name = r.string()
        if name is None:
            raise ProtocolError("Produce request with a null topic name")
        partitions = []
        for _ in range(max(r.array_length(), 0)):
            index = r.int32()
            records = r.bytes_view()
            r.tagged_fields()
            partitions.append(PartitionProduceData(index, records))
        r.tagged_fields()
        topics.append(TopicProduceData(name, tuple(partitions)))
    r.tagged_fields()
    if r.pos != len(r.data):
        raise ProtocolError(f"{len(r.data) - r.pos} bytes after the end of a Produce request")
    return ProduceRequestData(transactional_id, acks, timeout_ms, tuple(topics))


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _string(value: str | None, flexible: bool) -> bytes:
    if value is None:
        return b"\x00" if flexible else b"\xff\xff"
    raw = value.encode("utf-8")
    return (_uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw))) + raw


def _array_length(n: int, flexible: bool) -> bytes:
    return _uvarint(n + 1) if flexible else _I32.pack(n)


def encode_produce_request(request: Any, api_version: int, correlation_id: int, client_id: str | None) -> bytes:
    """Frame a Produce v3-v12 request (header v1, or v2 from v9) for an upstream broker.

    `request` has the library ProduceRequest's fields; record sets are written unchanged
    with one join (no per-field copies).
    """
    return b"".join(encode_produce_request_parts(request, api_version, correlation_id, client_id))


def encode_produce_request_parts(request: Any, api_version: int, correlation_id: int,
                                 client_id: str | None) -> list[bytes | memoryview]:
    """The framed request of encode_produce_request as a list of buffers, not joined.

    The record sets are the request's own memoryviews, so a caller that writes the list
    with one vectored send (sendmsg) never copies the payload in user space: joining a
    ~1 MB request cost the proxy ~15 % of its CPU at full rate (an allocation the size of
    the request, its page faults and the copy).
    """
    flexible = api_version >= FIRST_FLEXIBLE_PRODUCE_VERSION
    tags = b"\x00" if flexible else b""
    parts: list[bytes | memoryview] = [
        b"",  # size, filled in below
        _HEADER_FIXED.pack(API_PRODUCE, api_version, correlation_id, -1)[:8],
        _string(client_id, flexible=False),  # the header's client_id is never compact
        tags,
        _string(request.transactional_id, flexible),
        _ACKS_TIMEOUT.pack(request.acks, request.timeout_ms),
        _array_length(len(request.topic_data), flexible),
    ]
    for topic in request.topic_data:
        parts.append(_string(topic.name, flexible))
        parts.append(_array_length(len(topic.partition_data), flexible))
        for partition in topic.partition_data:
            parts.append(_I32.pack(partition.index))
            records = partition.records
            if records is None:
                parts.append(b"\x00" if flexible else _I32.pack(-1))
            else:
                parts.append(_uvarint(len(records) + 1) if flexible else _I32.pack(len(records)))
                parts.append(records)
            parts.append(tags)
        parts.append(tags)
    parts.append(tags)
    parts[0] = _SIZE.pack(sum(len(p) for p in parts))
    return parts
