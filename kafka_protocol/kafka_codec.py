"""Sans-IO Kafka server codec: bytes in, request frames out; responses in, bytes out.

Strategy: framing and the request header are parsed here by hand (they are tiny and fixed
by the protocol), Produce v3-v12 bodies by kafka_protocol/produce.py, the others by
kafka-python 3.x's schema-driven protocol classes, which
cover every version including flexible ones and skip unknown tagged fields. Received
chunks are kept as immutable bytes: a frame inside one chunk is handed on as a memoryview
of it (no copy), a frame spanning chunks is joined once. A large frame can instead be
received straight into a buffer of its own (`frame_buffer()` / `received_into()`): the
joining copy of ~1 MB Produce requests was ~13 % of the proxy's busy time in saturation.
That buffer grows with the bytes received (doubling, at most FRAME_AHEAD_BYTES or the bytes
already there ahead of them), never to the size the frame announces: a 20-byte header
announcing 16 MiB costs 256 KiB, not 16 MiB. Once a stream has completed a frame of some
size, later frames up to that size get their whole buffer at once (within the budget): the
client has shown it sends what it announces, and growing copies. `held_bytes` is what the codec holds, for the
caller's process-wide receive budget. A frame of MAPPED_FRAME_MIN_BYTES or more (larger
than any client's default request) is received into an anonymous memory mapping of its
full size instead: only the pages its bytes reach become resident, it never moves or
copies to grow, and its memory goes back to the OS as soon as the frame is dropped. A
flood of such frames then costs what arrived, not that plus the allocator's copies and
the free heap they leave behind. The memoryviews stay valid whatever arrives later.
No sockets, clocks or trio here.
"""

from __future__ import annotations

import enum
import mmap
import struct
from collections import deque
from dataclasses import dataclass
from typing import Any, Final

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

from core.errors import SidecarError
from kafka_protocol._wire import SIZE as _SIZE
from kafka_protocol._wire import ProtocolError as ProtocolError  # the codecs' error, re-exported
from kafka_protocol._wire import skip_tagged_fields
from kafka_protocol.frame_pool import FramePool
from kafka_protocol.produce import decode_produce_request

API_PRODUCE = 0
FAST_PRODUCE_VERSIONS = (3, 12)  # decoded by kafka_protocol.produce (records as views); v0-v2 by the library
MIN_ACCEPTED_PRODUCE_VERSION = 3  # v0-v2 carry message sets older than magic 2: refused (UNSUPPORTED_VERSION)
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
# Frames at least this large get a memory mapping of their own (see the module docstring):
# above the 1 MB default request size of Kafka's clients, so everyday Produce requests keep
# reusing the allocator's memory and pay no page faults for a fresh mapping.
MAPPED_FRAME_MIN_BYTES = 2 * 1024 * 1024
# What a buffered chunk costs beyond its bytes (the bytes object and its deque slot): a
# client trickling one byte per segment must not hold 50 times what it is charged for.
CHUNK_OVERHEAD_BYTES = 64
_HEADER_FIXED = struct.Struct(">hhih")  # + client_id length


class FrameTooLarge(ProtocolError):
    """A frame's declared size exceeds the configured maximum."""


class UnsupportedRequest(SidecarError):
    """A well-framed request for an API key or version the proxy does not serve."""

    retriable = False  # the same input fails the same way

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


class NeedData(enum.Enum):
    """Returned by next_frame() when the buffer holds no complete frame yet. A one-member
    enum, so `frame is NEED_DATA` narrows `RequestFrame | NeedData` to RequestFrame for the
    type checker as it does at run time."""

    NEED_DATA = "NEED_DATA"

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = NeedData.NEED_DATA


def is_flexible(api_key: int, api_version: int) -> bool:
    """Whether (api_key, api_version) uses flexible (tagged-field) headers."""
    pair = MESSAGES.get(api_key)
    if pair is None:
        return False
    return bool(pair[0].flexible_version_q(api_version))


class ServerCodec:
    """Splits a client's byte stream into request frames."""

    def __init__(self, max_frame_bytes: int, pool: FramePool | None = None) -> None:
        """`pool`: where large frames' buffers are taken from and given back (one per
        process, shared by its codecs; kafka_protocol/frame_pool.py), or None."""
        self._pool = pool
        self._chunks: deque[bytes] = deque()
        self._offset = 0  # bytes of _chunks[0] already consumed
        self._buffered = 0
        self._chunk_held = 0  # bytes of the chunks in _chunks, consumed prefix and overhead included
        self._max_frame_bytes = max_frame_bytes
        # A large frame being received into its own buffer (size prefix included), how much
        # of it is there, and its full size; the buffer grows towards that size as bytes
        # arrive. While it is set, _chunks holds only bytes after it.
        self._frame: bytearray | mmap.mmap | memoryview | None = None  # a memoryview: of a pooled buffer
        self._filled = 0
        self._frame_total = 0
        self._capacity = 0  # bytes of the frame's buffer counted as held (a mapping's are virtual)
        self._completed_frame_bytes = 0  # the largest frame received into its own buffer, whole

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet returned as frames."""
        return self._buffered

    @property
    def held_bytes(self) -> int:
        """Memory this codec holds for the stream: buffered chunks and the frame buffer's capacity."""
        return self._chunk_held + self._capacity

    def receive_data(self, data: bytes | bytearray) -> None:
        if not data:
            return
        if self._frame is not None and self._filled < self._frame_total:
            take = min(len(data), self._frame_total - self._filled)
            short = take - (self._capacity - self._filled)
            if short > 0:  # the bytes are here already: hold them in the frame, not twice
                self._grow(short)
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
            frame: bytearray | mmap.mmap | memoryview
            whole = size + 4
            # A client that completed a frame this large on this stream before gets the whole
            # buffer at once (within the budget): growing it copies what arrived so far, ~15 %
            # of a busy proxy's Python time at 1 MB requests. A first frame, or one larger than
            # any completed, grows with its bytes as below, so announcing costs nothing.
            earned = whole <= self._completed_frame_bytes and (
                max_grow_bytes is None or whole - self._buffered <= max_grow_bytes)
            reused = self._pool.take(whole) if earned and self._pool is not None else None
            if whole >= MAPPED_FRAME_MIN_BYTES:
                frame = mmap.mmap(-1, whole, flags=mmap.MAP_PRIVATE)
            elif reused is not None:
                frame = memoryview(reused)[:whole]
            else:
                frame = bytearray(whole if earned else self._buffered)
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
            self._frame, self._filled, self._frame_total = frame, filled, whole
            self._capacity = whole if earned and not isinstance(frame, mmap.mmap) else filled
        if self._filled == self._capacity < self._frame_total:
            grow = max(self._filled, FRAME_AHEAD_BYTES)
            grow = min(grow, self._frame_total - self._capacity)
            if max_grow_bytes is not None:
                grow = min(grow, max_grow_bytes)
            if grow <= 0:
                return None
            self._grow(grow)
        if self._filled < self._capacity:
            return memoryview(self._frame)[self._filled : self._capacity]
        return None

    def _grow(self, n: int) -> None:
        """Room for `n` more bytes of the frame being received."""
        if isinstance(self._frame, bytearray):
            self._frame += bytes(n)  # in place: calloc'd zeros, and realloc moves rather than copies when it can
        self._capacity += n  # a mapping has the frame's full size already: its pages come as bytes reach them

    def received_into(self, n: int) -> None:
        """n bytes were written at the start of the last frame_buffer()."""
        if self._frame is None or not 0 <= n <= self._capacity - self._filled:
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
            frame, self._frame, self._filled, self._frame_total, self._capacity = self._frame, None, 0, 0, 0
            self._completed_frame_bytes = max(self._completed_frame_bytes, len(frame))
            if self._pool is not None and type(frame) is bytearray:
                self._pool.offer(frame)  # used again once the request lets go of it
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
        pos = skip_tagged_fields(frame, pos)
    return RequestFrame(api_key, api_version, correlation_id, client_id, view[pos:], len(frame))


def decode_request(frame: RequestFrame, max_versions: dict[int, int]) -> Any:
    """Decode a frame's body with the library's schema for (api_key, api_version).

    Produce v3-v12 are decoded by kafka_protocol.produce (same fields, records as memoryview
    slices of the frame).
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
