"""The cross-zone notification protocol: frames, messages, HMAC authentication, replay guard.

Sans-IO on purpose (h11 style): bytes in, frozen dataclasses out. Nothing here touches a
socket, a clock, trio or asyncio; the current time is passed in by the caller. The wire
format is specified byte by byte in docs/notify-protocol.md; this module is its only
implementation and `tests/leader_notify/test_protocol.py` pins it with golden bytes.

Strategy: a frame is `u32 length | header | payload | HMAC-SHA256`. The MAC covers the
length prefix, the header (with key id, timestamp and nonce) and the payload, so a frame
cannot be cut, extended, re-keyed or re-timed without the key. Verification happens
before the payload is decoded: an unauthenticated peer never reaches the message parser.
The receiver then checks the timestamp window and the nonce cache (`ReplayGuard`), so a
captured frame cannot be played back. Every attempt of the sender builds a new frame (new
nonce) around the same request id; the agent's applied-entries map, not the nonce, makes
a retried request idempotent.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import struct
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

PROTOCOL_VERSION = 1
MAX_FRAME_BYTES = 16 * 1024 * 1024  # ~250k entries of short topics; the payload itself travels via S3
# Entries per notification: an 8 MiB zone share of minimal batches (61-byte v2 header plus one
# tiny record) holds ~120k; twice that leaves room for larger wal.max_bytes.
MAX_ENTRIES = 262_144
MAX_STRING_BYTES = 1024  # object keys (S3 allows 1024 bytes), topic names (Kafka allows 249)
MAC_BYTES = 32  # HMAC-SHA256 digest size
NONCE_BYTES = 16  # 128 random bits: collisions are not a practical concern inside the window
KEY_ID_BYTES = 4

_LEN = struct.Struct(">I")
# version u8 | type u8 | key_id 4s | timestamp_ms i64 | nonce 16s
_HEADER = struct.Struct(">BB4sq16s")
_MIN_FRAME_BODY = _HEADER.size + MAC_BYTES
FRAME_OVERHEAD_BYTES = _LEN.size + _MIN_FRAME_BODY  # frame bytes around a payload
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
# request fields after the strings: epoch i64, zone_offset u64, zone_length u64
_REQ_TAIL = struct.Struct(">qQQ")
# per entry after the topic: partition i32, offset u64, length u32, crc32c u32,
# record_count i32, producer_id i64, producer_epoch i16, base_sequence i32
_ENTRY = struct.Struct(">iQIIiqhi")
# per result: error_code i16, base_offset i64, flags u8
_RESULT = struct.Struct(">hqB")
_FLAG_DUPLICATE = 0x01


class MessageType(enum.IntEnum):
    REQUEST = 1
    RESPONSE = 2


class RequestStatus(enum.IntEnum):
    """Whole-request outcome in a response; per-entry outcomes are Kafka error codes."""

    OK = 0
    MALFORMED = 1  # authenticated, but the payload does not decode
    REPLAYED = 2  # timestamp outside the window, or nonce already seen
    FORBIDDEN_KEY = 3  # bucket or object key outside the agent's configured bucket/prefix
    WRONG_ZONE = 4  # the notification is addressed to another zone's agent
    UNSUPPORTED_VERSION = 5
    INTERNAL = 6  # the agent failed (S3 unreachable, bug); safe to retry
    OVERLOADED = 7  # the agent is shutting down or full; safe to retry


# Kafka error codes a producer may retry (Kafka's RetriableException subclasses we can meet
# on the append path); the sender re-sends a notification while an entry has one of them.
RETRIABLE_ENTRY_CODES = frozenset({
    2,  # CORRUPT_MESSAGE (the WAL read did not match; a re-read may)
    3,  # UNKNOWN_TOPIC_OR_PARTITION
    5,  # LEADER_NOT_AVAILABLE
    6,  # NOT_LEADER_OR_FOLLOWER
    7,  # REQUEST_TIMED_OUT
    13,  # NETWORK_EXCEPTION
    19,  # NOT_ENOUGH_REPLICAS
    20,  # NOT_ENOUGH_REPLICAS_AFTER_APPEND
    56,  # KAFKA_STORAGE_ERROR
})

RETRIABLE_STATUSES = frozenset({RequestStatus.REPLAYED, RequestStatus.INTERNAL, RequestStatus.OVERLOADED})


class ProtocolError(ValueError):
    """The peer sent bytes that are not a valid frame or message (the peer's fault)."""


class AuthError(ProtocolError):
    """The frame's MAC does not verify under any configured key, or its key id is unknown."""


@dataclass(frozen=True)
class NotifyEntry:
    """One record batch of the zone share: where it is in the object and whose it is."""

    topic: str
    partition: int
    offset: int  # byte offset of the entry inside the WAL object
    length: int
    crc32c: int
    record_count: int
    producer_id: int  # -1: no producer id (not idempotent)
    producer_epoch: int
    base_sequence: int


@dataclass(frozen=True)
class NotifyRequest:
    request_id: int
    source_zone: str
    dest_zone: str
    proxy_id: str
    epoch: int
    bucket: str
    key: str
    zone_offset: int
    zone_length: int
    entries: tuple[NotifyEntry, ...]


@dataclass(frozen=True)
class EntryResult:
    """Outcome of one entry: error_code 0 with the leader's base offset, or a Kafka error code.

    duplicate=True: the leader already had the batch (DUPLICATE_SEQUENCE_NUMBER) or the
    agent had applied it before; base_offset is then the earlier offset if known, else -1.
    """

    error_code: int
    base_offset: int = -1
    duplicate: bool = False

    @property
    def ok(self) -> bool:
        return self.error_code == 0


@dataclass(frozen=True)
class NotifyResponse:
    request_id: int
    status: RequestStatus
    message: str
    results: tuple[EntryResult, ...]


@dataclass(frozen=True)
class Frame:
    """An authenticated frame: header fields and the still-encoded payload."""

    version: int
    type: MessageType
    key_id: bytes
    timestamp_ms: int
    nonce: bytes
    payload: bytes


# ---------------------------------------------------------------- keys and MACs


def key_id_of(key: bytes) -> bytes:
    """Public 4-byte name of a key: lets the receiver pick the key without trying all."""
    return hashlib.sha256(b"azsidecar-notify-key-id\x00" + key).digest()[:KEY_ID_BYTES]


class Keyring:
    """HMAC keys: the first signs, every one verifies (rotation: add new, move first, drop old).

    Raises ValueError when given no key or a key shorter than 16 bytes (too weak to matter).
    """

    MIN_KEY_BYTES = 16

    def __init__(self, keys: Sequence[bytes | str]) -> None:
        raw = [k.encode() if isinstance(k, str) else bytes(k) for k in keys]
        if not raw:
            raise ValueError("at least one HMAC key is required")
        for k in raw:
            if len(k) < self.MIN_KEY_BYTES:
                raise ValueError(f"HMAC keys must be at least {self.MIN_KEY_BYTES} bytes")
        self._signing = raw[0]
        self.signing_key_id = key_id_of(raw[0])
        self._by_id = {key_id_of(k): k for k in raw}

    def mac(self, data: bytes) -> bytes:
        return hmac.digest(self._signing, data, "sha256")  # one-shot: no HMAC object per frame

    def verify(self, key_id: bytes, data: bytes, mac: bytes) -> bool:
        key = self._by_id.get(key_id)
        if key is None:
            return False
        return hmac.compare_digest(hmac.digest(key, data, "sha256"), mac)


# ---------------------------------------------------------------- frames


def encode_frame(keyring: Keyring, type_: MessageType, payload: bytes, timestamp_ms: int, nonce: bytes) -> bytes:
    """Wrap an encoded message in a signed frame. Raises ValueError if it would exceed MAX_FRAME_BYTES."""
    if len(nonce) != NONCE_BYTES:
        raise ValueError(f"nonce must be {NONCE_BYTES} bytes")
    body_len = _HEADER.size + len(payload) + MAC_BYTES
    if _LEN.size + body_len > MAX_FRAME_BYTES:
        raise ValueError(f"frame of {_LEN.size + body_len} bytes exceeds MAX_FRAME_BYTES")
    signed = _LEN.pack(body_len) + _HEADER.pack(PROTOCOL_VERSION, type_, keyring.signing_key_id,
                                                 timestamp_ms, nonce) + payload
    return signed + keyring.mac(signed)


class FrameDecoder:
    """Incremental frame reader: feed bytes with `receive_data`, pull frames with `next_frame`.

    `next_frame` returns None when more bytes are needed. It raises ProtocolError for a
    length outside the limits and AuthError when the MAC does not verify; after either the
    connection must be closed (the stream position can no longer be trusted). Memory is
    bounded: at most one frame of MAX_FRAME_BYTES is buffered.
    """

    def __init__(self, keyring: Keyring) -> None:
        self._keyring = keyring
        self._buf = bytearray()

    def receive_data(self, data: bytes) -> None:
        self._buf += data

    @property
    def buffered_bytes(self) -> int:
        return len(self._buf)

    def next_frame(self) -> Frame | None:
        if len(self._buf) < _LEN.size:
            return None
        (body_len,) = _LEN.unpack_from(self._buf, 0)
        if body_len < _MIN_FRAME_BODY or _LEN.size + body_len > MAX_FRAME_BYTES:
            raise ProtocolError(f"frame length {body_len} outside {_MIN_FRAME_BODY}..{MAX_FRAME_BYTES}")
        end = _LEN.size + body_len
        if len(self._buf) < end:
            return None
        raw = bytes(self._buf[:end])
        del self._buf[:end]
        signed, mac = raw[:-MAC_BYTES], raw[-MAC_BYTES:]
        version, type_, key_id, timestamp_ms, nonce = _HEADER.unpack_from(signed, _LEN.size)
        if not self._keyring.verify(key_id, signed, mac):
            raise AuthError("frame MAC does not verify under any configured key")
        if version != PROTOCOL_VERSION:
            raise ProtocolError(f"unsupported protocol version {version}")
        try:
            mtype = MessageType(type_)
        except ValueError as exc:
            raise ProtocolError(f"unknown message type {type_}") from exc
        return Frame(version, mtype, key_id, timestamp_ms, nonce, signed[_LEN.size + _HEADER.size:])


class ReplayGuard:
    """Refuses frames outside a timestamp window or whose nonce was seen inside it.

    Bounded: at most `max_nonces` remembered. When full, the oldest nonces are forgotten
    and the window start moves up to the timestamp of the newest forgotten one, so a
    forgotten nonce can never be accepted again.
    """

    def __init__(self, window_ms: int, max_nonces: int) -> None:
        if window_ms <= 0 or max_nonces <= 0:
            raise ValueError("window_ms and max_nonces must be > 0")
        self._window_ms = window_ms
        self._max = max_nonces
        self._seen: OrderedDict[bytes, int] = OrderedDict()  # nonce -> timestamp, insertion order
        self._floor_ms = -(2**63)

    def check(self, timestamp_ms: int, nonce: bytes, now_ms: int) -> bool:
        """True if fresh (and remember it); False for a replay or a stale/future timestamp."""
        if abs(now_ms - timestamp_ms) > self._window_ms or timestamp_ms <= self._floor_ms:
            return False
        if nonce in self._seen:
            return False
        cutoff = now_ms - self._window_ms
        while self._seen:
            oldest_nonce, oldest_ts = next(iter(self._seen.items()))
            if oldest_ts >= cutoff and len(self._seen) < self._max:
                break
            del self._seen[oldest_nonce]
            if oldest_ts >= cutoff:
                self._floor_ms = max(self._floor_ms, oldest_ts)
        if timestamp_ms <= self._floor_ms:
            return False
        self._seen[nonce] = timestamp_ms
        return True


# ---------------------------------------------------------------- messages


def _put_str(out: bytearray, s: str) -> None:
    b = s.encode("utf-8")
    if len(b) > MAX_STRING_BYTES:
        raise ValueError(f"string of {len(b)} bytes exceeds MAX_STRING_BYTES")
    out += _U16.pack(len(b))
    out += b


class _Reader:
    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def take(self, st: struct.Struct) -> tuple[Any, ...]:
        if self._pos + st.size > len(self._data):
            raise ProtocolError("message truncated")
        values = st.unpack_from(self._data, self._pos)
        self._pos += st.size
        return values

    def string(self) -> str:
        (n,) = self.take(_U16)
        if n > MAX_STRING_BYTES or self._pos + n > len(self._data):
            raise ProtocolError("string length out of range")
        raw = self._data[self._pos:self._pos + n]
        self._pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError("string is not UTF-8") from exc

    def count(self, per_item_min: int) -> int:
        n: int
        (n,) = self.take(_U32)
        # Checked against the bytes actually left before any list is built: a forged
        # count can not make us allocate more than the frame already holds.
        if n > MAX_ENTRIES or n * per_item_min > len(self._data) - self._pos:
            raise ProtocolError(f"count {n} out of range")
        return n

    def end(self) -> None:
        if self._pos != len(self._data):
            raise ProtocolError(f"{len(self._data) - self._pos} trailing bytes")


def encode_request(req: NotifyRequest) -> bytes:
    """Message payload of a request. Raises ValueError for values that do not fit the format."""
    if len(req.entries) > MAX_ENTRIES:
        raise ValueError(f"{len(req.entries)} entries exceed MAX_ENTRIES")
    out = bytearray(struct.pack(">Q", req.request_id))
    for s in (req.source_zone, req.dest_zone, req.proxy_id, req.bucket, req.key):
        _put_str(out, s)
    out += _REQ_TAIL.pack(req.epoch, req.zone_offset, req.zone_length)
    out += _U32.pack(len(req.entries))
    for e in req.entries:
        _put_str(out, e.topic)
        out += _ENTRY.pack(e.partition, e.offset, e.length, e.crc32c, e.record_count,
                           e.producer_id, e.producer_epoch, e.base_sequence)
    return bytes(out)


def decode_request(payload: bytes) -> NotifyRequest:
    """Raises ProtocolError if the payload is not exactly one valid request."""
    r = _Reader(payload)
    (request_id,) = r.take(struct.Struct(">Q"))
    source_zone, dest_zone, proxy_id, bucket, key = (r.string() for _ in range(5))
    epoch, zone_offset, zone_length = r.take(_REQ_TAIL)
    n = r.count(_U16.size + _ENTRY.size)
    entries = []
    for _ in range(n):
        topic = r.string()
        entries.append(NotifyEntry(topic, *r.take(_ENTRY)))
    r.end()
    return NotifyRequest(request_id, source_zone, dest_zone, proxy_id, epoch, bucket, key,
                         zone_offset, zone_length, tuple(entries))


def encode_response(resp: NotifyResponse) -> bytes:
    """Message payload of a response. Raises ValueError for values that do not fit the format."""
    out = bytearray(struct.pack(">QB", resp.request_id, resp.status))
    _put_str(out, resp.message[:MAX_STRING_BYTES // 4])  # at most 4 UTF-8 bytes per char
    out += _U32.pack(len(resp.results))
    for res in resp.results:
        out += _RESULT.pack(res.error_code, res.base_offset, _FLAG_DUPLICATE if res.duplicate else 0)
    return bytes(out)


def decode_response(payload: bytes) -> NotifyResponse:
    """Raises ProtocolError if the payload is not exactly one valid response."""
    r = _Reader(payload)
    request_id, status = r.take(struct.Struct(">QB"))
    try:
        status = RequestStatus(status)
    except ValueError as exc:
        raise ProtocolError(f"unknown request status {status}") from exc
    message = r.string()
    n = r.count(_RESULT.size)
    results = []
    for _ in range(n):
        code, base_offset, flags = r.take(_RESULT)
        if flags & ~_FLAG_DUPLICATE:
            raise ProtocolError(f"unknown result flags {flags:#x}")
        results.append(EntryResult(code, base_offset, bool(flags & _FLAG_DUPLICATE)))
    r.end()
    return NotifyResponse(request_id, status, message, tuple(results))


def key_allowed(bucket: str, key: str, allowed_bucket: str, allowed_prefix: str) -> bool:
    """True if the object lies in the agent's WAL bucket under its prefix (and is a plain key)."""
    if bucket != allowed_bucket or not key.startswith(allowed_prefix) or not key:
        return False
    # No path tricks and no control characters: keys are generated by the WAL writer.
    return ".." not in key.split("/") and all(0x20 <= ord(c) < 0x7F for c in key)


def results_all_ok(results: Iterable[EntryResult]) -> bool:
    return all(r.ok for r in results)
