"""Sans-IO Kafka server codec: bytes in, request frames out; responses in, bytes out.

Strategy: framing and the request header are parsed here by hand (they are tiny and fixed
by the protocol), the bodies by kafka-python 3.x's schema-driven protocol classes, which
cover every version including flexible ones and skip unknown tagged fields. Received
chunks are kept as immutable bytes: a frame inside one chunk is handed on as a memoryview
of it (no copy), a frame spanning chunks is joined once. The memoryviews stay valid
whatever arrives later. No sockets, clocks or trio here.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass
from typing import Any

from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.protocol.producer.transaction import InitProducerIdRequest, InitProducerIdResponse

API_PRODUCE = 0
API_METADATA = 3
API_API_VERSIONS = 18
API_INIT_PRODUCER_ID = 22

# api_key -> (request class, response class) for the APIs the proxy serves.
MESSAGES: dict[int, tuple[Any, Any]] = {
    API_PRODUCE: (ProduceRequest, ProduceResponse),
    API_METADATA: (MetadataRequest, MetadataResponse),
    API_API_VERSIONS: (ApiVersionsRequest, ApiVersionsResponse),
    API_INIT_PRODUCER_ID: (InitProducerIdRequest, InitProducerIdResponse),
}

MIN_HEADER_BYTES = 8  # api_key int16, api_version int16, correlation_id int32
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
    return pair[0].flexible_version_q(api_version)


class ServerCodec:
    """Splits a client's byte stream into request frames."""

    def __init__(self, max_frame_bytes: int) -> None:
        self._chunks: deque[bytes] = deque()
        self._offset = 0  # bytes of _chunks[0] already consumed
        self._buffered = 0
        self._max_frame_bytes = max_frame_bytes

    @property
    def buffered_bytes(self) -> int:
        return self._buffered

    def receive_data(self, data: bytes) -> None:
        if data:
            self._chunks.append(bytes(data))  # no copy when `data` already is bytes
            self._buffered += len(data)

    def next_frame(self) -> RequestFrame | NeedData:
        """The next complete request, or NEED_DATA.

        Raises FrameTooLarge or ProtocolError when the stream cannot be a Kafka request.
        """
        if self._buffered < 4:
            return NEED_DATA
        (size,) = _SIZE.unpack(self._peek4())
        if size < MIN_HEADER_BYTES:
            raise ProtocolError(f"frame size {size} is smaller than a request header")
        if size > self._max_frame_bytes:
            raise FrameTooLarge(f"frame of {size} bytes exceeds max_frame_bytes={self._max_frame_bytes}")
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

    def _consume(self, n: int) -> memoryview:
        """Remove the first `n` buffered bytes (n <= buffered) and return them."""
        self._buffered -= n
        first = self._chunks[0]
        start = self._offset
        if len(first) - start >= n:
            self._offset += n
            if self._offset == len(first):
                self._chunks.popleft()
                self._offset = 0
            return memoryview(first)[start : start + n]
        parts: list[bytes | memoryview] = [memoryview(first)[start:]]
        need = n - (len(first) - start)
        self._chunks.popleft()
        self._offset = 0
        while need:
            chunk = self._chunks[0]
            if len(chunk) <= need:
                parts.append(chunk)
                need -= len(chunk)
                self._chunks.popleft()
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


def _read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
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


def _skip_tagged_fields(data: bytes, pos: int) -> int:
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

    Raises UnsupportedRequest for an API key or version outside `max_versions`, and
    ProtocolError when the body does not parse.
    """
    pair = MESSAGES.get(frame.api_key)
    if pair is None or frame.api_key not in max_versions:
        raise UnsupportedRequest(frame, f"unsupported api_key {frame.api_key}")
    if not 0 <= frame.api_version <= max_versions[frame.api_key]:
        raise UnsupportedRequest(frame, f"unsupported version {frame.api_version} of api_key {frame.api_key}")
    try:
        return pair[0].decode(frame.body, version=frame.api_version)
    except Exception as exc:  # the library raises a variety of errors on bad bytes
        raise ProtocolError(f"cannot decode api_key {frame.api_key} v{frame.api_version}: {exc}") from exc


def encode_response(response: Any, correlation_id: int, api_version: int) -> bytes:
    """Frame a response object at `api_version` for `correlation_id` (size prefix included)."""
    response.API_VERSION = api_version  # before the header: the library's setter touches it
    response.with_header(correlation_id=correlation_id)
    return bytes(response.encode(header=True, framed=True))
