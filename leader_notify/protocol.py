"""The cross-zone notification protocol: frames, messages, HMAC authentication, channel binding.

Sans-IO on purpose (h11 style): bytes in, frozen dataclasses out. Nothing here touches a
socket, a clock, trio or asyncio, or draws random numbers: challenges are passed in by the
caller. The wire format is specified byte by byte in docs/notify-protocol.md; this module
is its only implementation and `tests/unit/leader_notify/test_protocol.py` pins it with golden
bytes.

Strategy (since version 2): a frame is `u32 length | header | payload | HMAC-SHA256`. A
connection opens with one HELLO frame each way carrying a fresh 16-byte random challenge
(the agent's and the proxy's). Every later frame's MAC covers both challenges, the
frame's direction (its type) and its sequence number on the connection, besides the
length, header and payload: a frame is valid on exactly one connection, at exactly one
place in it, so a captured frame is useless on another connection, at another agent of
the zone, or at the same agent after a restart (its new connections have new
challenges). No clock and no nonce cache are involved, so nothing has to survive a
restart or be shared between agents. Before the peer's HELLO verified, the only length
accepted is a HELLO's: an unauthenticated peer can make the receiver buffer at most
HELLO_FRAME_BYTES. The MAC is verified before the payload is decoded: an unauthenticated
peer never reaches the message parser. The agent's applied-entries map, not the
protocol, makes a retried request (a new frame on a new or the same connection)
idempotent.

Versions (since 4): the proxy's HELLO offers the newest version it speaks, the agent
answers with its own HELLO in the highest version both speak, and every later frame of
the connection carries that version. A HELLO is laid out and signed alike in every
version, so either end verifies the peer's before looking at its version. A version-3
agent predates this: it sends its HELLO (as 3) before reading the proxy's and closes the
connection on any other version, so a version-3 HELLO in answer to a higher offer tells
the proxy to open another connection offering 3 (`proxy_outcome` -> Reconnect). Release N
speaks N and N-1 (`OLDEST_VERSION`).
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

PROTOCOL_VERSION = 4  # the newest version this release speaks. 4: the agent answers the proxy's HELLO
# with the version both speak (negotiation), and the `ordered` request flag is defined; 3: entry
# results carry the append time; 2: per-connection challenges and sequence numbers under the MAC
# (1: timestamp + nonce)
OLDEST_VERSION = 3  # the oldest version this release still speaks: the previous release's (N-1)
# Agents of this version and later read the proxy's HELLO first and answer it in the version both
# speak. A version-3 agent sends its HELLO (as 3) at accept, before reading anything, and closes
# the connection on a HELLO of another version: that early v3 HELLO is the proxy's signal to
# open another connection offering 3.
FIRST_NEGOTIATING_VERSION = 4
# The `ordered` flag is sent on connections of this version or later only: it came to version 3
# without a version change, so an agent of version 3 may refuse it (MALFORMED).
ORDERED_MIN_VERSION = 4
MAX_FRAME_BYTES = 16 * 1024 * 1024  # ~250k entries of short topics; the payload itself travels via S3
# Entries per notification: an 8 MiB zone share of minimal batches (61-byte v2 header plus one
# tiny record) holds ~120k; twice that leaves room for larger wal.max_bytes.
MAX_ENTRIES = 262_144
MAX_STRING_BYTES = 1024  # object keys (S3 allows 1024 bytes), topic names (Kafka allows 249)
MAC_BYTES = 32  # HMAC-SHA256 digest size
CHALLENGE_BYTES = 16  # 128 random bits per side and connection: never repeats in practice
KEY_ID_BYTES = 4

_LEN = struct.Struct(">I")
# version u8 | type u8 | key_id 4s | sequence u64
_HEADER = struct.Struct(">BB4sQ")
_MIN_FRAME_BODY = _HEADER.size + MAC_BYTES
FRAME_OVERHEAD_BYTES = _LEN.size + _MIN_FRAME_BODY  # frame bytes around a payload
HELLO_FRAME_BYTES = FRAME_OVERHEAD_BYTES + CHALLENGE_BYTES  # the only frame size accepted before authentication
# MAC contexts: a HELLO is signed on its own; every later frame also covers both challenges.
# They name the framing of version 3 and stay so in later versions: the version byte is in
# every signed header, so a frame of one version never verifies as one of another.
_HELLO_CONTEXT = b"azsidecar-notify-v3 hello\x00"
_SESSION_CONTEXT = b"azsidecar-notify-v3 session\x00"
_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
# request fields after the strings: epoch i64, zone_offset u64, zone_length u64
_REQ_TAIL = struct.Struct(">qQQ")
# per entry after the topic: partition i32, offset u64, length u32, crc32c u32,
# record_count i32, producer_id i64, producer_epoch i16, base_sequence i32
_ENTRY = struct.Struct(">iQIIiqhi")
# per result: error_code i16, base_offset i64, flags u8
_RESULT = struct.Struct(">hqBI")  # error_code, base_offset, flags, append_us
APPEND_US_UNKNOWN = 0xFFFFFFFF  # the entry was not appended by this answer (duplicate, refused, not tried)
APPEND_US_MAX = 0xFFFFFFFE  # 71.6 minutes: longer appends are reported as this
_FLAG_DUPLICATE = 0x01
_REQUEST_FLAG_PREFETCH = 0x01
_REQUEST_FLAG_ORDERED = 0x02  # one of a connection's pipelined requests (docs/notify-protocol.md, "Pipelining")
_REQUEST_FLAGS = _REQUEST_FLAG_PREFETCH | _REQUEST_FLAG_ORDERED


class MessageType(enum.IntEnum):
    REQUEST = 1  # proxy -> agent
    RESPONSE = 2  # agent -> proxy
    HELLO_PROXY = 3  # proxy -> agent, first frame of a connection: the proxy's challenge
    HELLO_AGENT = 4  # agent -> proxy, first frame of a connection: the agent's challenge


class Role(enum.Enum):
    """Which end of a connection a Channel is: it fixes the types it sends and accepts."""

    PROXY = "proxy"
    AGENT = "agent"


class RequestStatus(enum.IntEnum):
    """Whole-request outcome in a response; per-entry outcomes are Kafka error codes."""

    OK = 0
    MALFORMED = 1  # authenticated, but the payload does not decode
    REPLAYED = 2  # reserved (version 1's timestamp/nonce refusal; version 2 closes the connection instead)
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


@dataclass(frozen=True)
class Negotiated:
    """Both ends speak `version` on this connection."""

    version: int


@dataclass(frozen=True)
class Reconnect:
    """The agent predates negotiation and speaks `version` only: it closes this connection
    (it cannot read the HELLO we sent); open another offering `version`."""

    version: int


@dataclass(frozen=True)
class Incompatible:
    """No version both ends speak (`reason` says which each speaks)."""

    reason: str


NegotiationOutcome = Negotiated | Reconnect | Incompatible


class VersionMismatch(ProtocolError):
    """The agent's HELLO verified but does not settle on a version this proxy can use now:
    `outcome` is a Reconnect (a version-3 agent: try again offering its version) or an
    Incompatible (a configuration problem: upgrade one side)."""

    def __init__(self, outcome: Reconnect | Incompatible) -> None:
        super().__init__(outcome.reason if isinstance(outcome, Incompatible)
                         else f"the agent speaks notify protocol v{outcome.version} only (it predates negotiation)")
        self.outcome = outcome


def agent_answer_version(offered: int, oldest: int = OLDEST_VERSION, newest: int = PROTOCOL_VERSION) -> int | None:
    """The version an agent speaking `oldest`..`newest` answers a proxy HELLO of version
    `offered` with: the highest version both speak, or None if there is none (the agent then
    closes the connection)."""
    chosen = min(offered, newest)
    return chosen if chosen >= oldest else None


def proxy_outcome(offered: int, answered: int, oldest: int = OLDEST_VERSION) -> NegotiationOutcome:
    """What a proxy that offered `offered` (and speaks `oldest`..`offered`) makes of an agent
    HELLO of version `answered`."""
    if answered == offered:
        return Negotiated(answered)
    if answered > offered:
        return Incompatible(f"the agent speaks notify protocol v{answered} and later; this proxy speaks "
                            f"v{oldest}..v{offered}: upgrade the proxy")
    if answered < oldest:
        return Incompatible(f"the agent speaks notify protocol v{answered}; this proxy speaks "
                            f"v{oldest}..v{offered}: upgrade the agent")
    if answered >= FIRST_NEGOTIATING_VERSION:
        return Negotiated(answered)  # a negotiating agent chose the highest version both speak
    return Reconnect(answered)


def ordered_allowed(version: int) -> bool:
    """May a proxy send `ordered` (pipelined) requests on a connection of `version`?"""
    return version >= ORDERED_MIN_VERSION


class AuthError(ProtocolError):
    """The frame's MAC does not verify under any configured key, or its key id is unknown.

    Also what a frame captured elsewhere gets: its MAC was made for other challenges or
    another place in the stream."""


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
    # The share of the zone this request covers, for a zone with several agents
    # (wal_s3/agent_shares.py): the agent checkpoints the object under it. "" = the whole zone.
    share: str = ""
    # Read the range into the agent's cache and append nothing (answered OK, no results): the
    # proxy sends it for object k+1 while object k's notification is being applied.
    prefetch: bool = False
    # One of several requests in flight on one connection, in object order: after one of its
    # partition's runs failed, the agent fails this proxy's later ordered runs of that
    # partition without appending them until an unordered request of the partition arrives
    # (the proxy's re-send), so nothing overtakes a batch that still has to be retried.
    ordered: bool = False


@dataclass(frozen=True)
class EntryResult:
    """Outcome of one entry: error_code 0 with the leader's base offset, or a Kafka error code.

    duplicate=True: the leader already had the batch (DUPLICATE_SEQUENCE_NUMBER) or the
    agent had applied it before; base_offset is then the earlier offset if known, else -1.
    """

    error_code: int
    base_offset: int = -1
    duplicate: bool = False
    # The leader's append of this batch as the agent timed it (its append call, retries
    # included, to the leader's answer), in microseconds; -1 when this answer did not append it.
    append_us: int = -1

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
    sequence: int
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


def _context(type_: MessageType, agent_challenge: bytes, proxy_challenge: bytes) -> bytes:
    if type_ in (MessageType.HELLO_PROXY, MessageType.HELLO_AGENT):
        return _HELLO_CONTEXT
    return _SESSION_CONTEXT + agent_challenge + proxy_challenge


def encode_frame(keyring: Keyring, type_: MessageType, payload: bytes, sequence: int, *,
                 agent_challenge: bytes = b"", proxy_challenge: bytes = b"",
                 version: int = PROTOCOL_VERSION) -> bytes:
    """Wrap an encoded message in a signed frame (Channel.send is the usual way in).

    The MAC is HMAC-SHA256(key, context | frame bytes before the MAC), the context being a
    fixed string for HELLO frames and that string plus both challenges for the others.
    Raises ValueError if it would exceed MAX_FRAME_BYTES or a challenge has the wrong size.
    """
    hello = type_ in (MessageType.HELLO_PROXY, MessageType.HELLO_AGENT)
    if not hello and (len(agent_challenge) != CHALLENGE_BYTES or len(proxy_challenge) != CHALLENGE_BYTES):
        raise ValueError(f"challenges must be {CHALLENGE_BYTES} bytes each")
    body_len = _HEADER.size + len(payload) + MAC_BYTES
    if _LEN.size + body_len > MAX_FRAME_BYTES:
        raise ValueError(f"frame of {_LEN.size + body_len} bytes exceeds MAX_FRAME_BYTES")
    signed = _LEN.pack(body_len) + _HEADER.pack(version, type_, keyring.signing_key_id, sequence) + payload
    return signed + keyring.mac(_context(type_, agent_challenge, proxy_challenge) + signed)


class Channel:
    """One end of one connection: signs what it sends, verifies what it receives.

    The proxy speaks first: `hello()` is its first frame, offering `offer` (its newest
    version, or an older one it learnt the agent speaks). Feed received bytes with
    `receive_data` and pull frames with `next_frame`: the peer's HELLO is consumed there
    (after it `established` is True and `version` is the connection's version) and only
    REQUEST frames (agent side) or RESPONSE frames (proxy side) come out, each verified
    against both challenges, the connection's version and the next expected sequence
    number. The agent answers: its `hello()` may be sent only once the proxy's HELLO is in,
    and carries the version it chose (`agent_answer_version`). `send(type, payload)` signs a
    frame once both HELLOs are done.

    `next_frame` returns None when more bytes are needed. It raises ProtocolError for a
    length outside the limits (before the HELLO: any length but a HELLO's), a version the
    agent does not speak, a type this end must not receive or a sequence out of order,
    VersionMismatch (a ProtocolError) on the proxy when the agent's HELLO settles on no
    usable version, and AuthError when the MAC does not verify; after any of them the
    connection must be closed (the stream position can no longer be trusted). Memory: at
    most HELLO_FRAME_BYTES are buffered before the peer is authenticated, at most
    `max_frame_bytes` after, and the buffer grows only with bytes received.
    """

    def __init__(self, keyring: Keyring, role: Role, challenge: bytes, *,
                 max_frame_bytes: int = MAX_FRAME_BYTES, offer: int = PROTOCOL_VERSION) -> None:
        """Raises ValueError for a challenge of the wrong size or an offer outside the
        versions this release speaks."""
        if len(challenge) != CHALLENGE_BYTES:
            raise ValueError(f"challenge must be {CHALLENGE_BYTES} bytes")
        if not HELLO_FRAME_BYTES <= max_frame_bytes <= MAX_FRAME_BYTES:
            raise ValueError(f"max_frame_bytes must be {HELLO_FRAME_BYTES}..{MAX_FRAME_BYTES}")
        if not OLDEST_VERSION <= offer <= PROTOCOL_VERSION:
            raise ValueError(f"offer must be {OLDEST_VERSION}..{PROTOCOL_VERSION}")
        self._keyring = keyring
        self.role = role
        self._challenge = challenge
        self._peer_challenge: bytes | None = None
        self._max_frame_bytes = max_frame_bytes
        self._offer = offer
        self.version: int | None = None  # the connection's version, once the peer's HELLO verified
        self._buf = bytearray()
        self._send_seq = 0
        self._recv_seq = 0
        if role is Role.AGENT:
            self._my_hello, self._peer_hello, self._accepts = (
                MessageType.HELLO_AGENT, MessageType.HELLO_PROXY, MessageType.REQUEST)
        else:
            self._my_hello, self._peer_hello, self._accepts = (
                MessageType.HELLO_PROXY, MessageType.HELLO_AGENT, MessageType.RESPONSE)

    @property
    def established(self) -> bool:
        """True once the peer's HELLO verified (the peer holds a configured key) and a version
        was agreed."""
        return self._peer_challenge is not None

    @property
    def buffered_bytes(self) -> int:
        return len(self._buf)

    @property
    def challenges(self) -> tuple[bytes, bytes]:
        """(agent's challenge, proxy's challenge) once established (tests sign odd frames with them)."""
        return self._challenges()

    def _challenges(self) -> tuple[bytes, bytes]:
        assert self._peer_challenge is not None
        if self.role is Role.AGENT:
            return self._challenge, self._peer_challenge
        return self._peer_challenge, self._challenge

    def hello(self) -> bytes:
        """Our HELLO frame (sequence 0): the proxy's offer, or the agent's answer. Raises
        RuntimeError if called twice, or on the agent before the proxy's HELLO (our bug)."""
        if self._send_seq != 0:
            raise RuntimeError("hello() must be sent once, first")
        if self.role is Role.AGENT:
            if self.version is None:
                raise RuntimeError("the agent answers the proxy's HELLO: hello() after it")
            version = self.version
        else:
            version = self._offer
        self._send_seq = 1
        return encode_frame(self._keyring, self._my_hello, self._challenge, 0, version=version)

    def send(self, type_: MessageType, payload: bytes) -> bytes:
        """A signed frame with the next sequence number. Raises RuntimeError before the peer's
        HELLO or before our own (our bug), ValueError if the frame would be too large."""
        if not self.established or self._send_seq == 0:
            raise RuntimeError("send() before both HELLOs")
        if type_ in (MessageType.HELLO_PROXY, MessageType.HELLO_AGENT):
            raise RuntimeError("HELLO frames are sent by hello()")
        assert self.version is not None
        agent_c, proxy_c = self._challenges()
        frame = encode_frame(self._keyring, type_, payload, self._send_seq,
                             agent_challenge=agent_c, proxy_challenge=proxy_c, version=self.version)
        self._send_seq += 1
        return frame

    def receive_data(self, data: bytes) -> None:
        self._buf += data

    def next_frame(self) -> Frame | None:
        while True:
            if len(self._buf) < _LEN.size:
                return None
            (body_len,) = _LEN.unpack_from(self._buf, 0)
            end = _LEN.size + body_len
            if not self.established:
                if end != HELLO_FRAME_BYTES:
                    raise ProtocolError(f"frame of {end} bytes before the HELLO ({HELLO_FRAME_BYTES} bytes)")
            elif body_len < _MIN_FRAME_BODY or end > self._max_frame_bytes:
                raise ProtocolError(f"frame length {body_len} outside {_MIN_FRAME_BODY}..{self._max_frame_bytes}")
            if len(self._buf) < end:
                return None
            raw = bytes(self._buf[:end])
            del self._buf[:end]
            signed, mac = raw[:-MAC_BYTES], raw[-MAC_BYTES:]
            version, type_, key_id, sequence = _HEADER.unpack_from(signed, _LEN.size)
            payload = signed[_LEN.size + _HEADER.size:]
            if not self.established:
                # A HELLO's layout and MAC context are the same in every version from 3 on,
                # so a HELLO of any version verifies before its version is looked at.
                if not self._keyring.verify(key_id, _HELLO_CONTEXT + signed, mac):
                    raise AuthError("HELLO MAC does not verify under any configured key")
                self._check_header(type_, sequence, self._peer_hello)
                self.version = self._agree(version)
                self._peer_challenge = payload  # HELLO_FRAME_BYTES leaves exactly CHALLENGE_BYTES
                self._recv_seq = 1
                continue
            agent_c, proxy_c = self._challenges()
            if not self._keyring.verify(key_id, _SESSION_CONTEXT + agent_c + proxy_c + signed, mac):
                raise AuthError("frame MAC does not verify for this connection under any configured key")
            if version != self.version:
                raise ProtocolError(f"frame of protocol version {version} on a version-{self.version} connection")
            self._check_header(type_, sequence, self._accepts)
            self._recv_seq += 1
            return Frame(version, MessageType(type_), key_id, sequence, payload)

    def _agree(self, peer_version: int) -> int:
        """The connection's version from the peer's verified HELLO. Raises ProtocolError."""
        if self.role is Role.AGENT:
            chosen = agent_answer_version(peer_version)
            if chosen is None:
                raise ProtocolError(f"unsupported protocol version {peer_version} "
                                    f"(this agent speaks {OLDEST_VERSION}..{PROTOCOL_VERSION})")
            return chosen
        outcome = proxy_outcome(self._offer, peer_version)
        if not isinstance(outcome, Negotiated):
            raise VersionMismatch(outcome)
        return outcome.version

    def _check_header(self, type_: int, sequence: int, expected: MessageType) -> None:
        if type_ != expected:
            raise ProtocolError(f"frame type {type_} where {expected.name} was expected")
        if sequence != self._recv_seq:
            raise ProtocolError(f"frame sequence {sequence}, expected {self._recv_seq}")


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
    for s in (req.source_zone, req.dest_zone, req.proxy_id, req.bucket, req.key, req.share):
        _put_str(out, s)
    out.append((_REQUEST_FLAG_PREFETCH if req.prefetch else 0) | (_REQUEST_FLAG_ORDERED if req.ordered else 0))
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
    source_zone, dest_zone, proxy_id, bucket, key, share = (r.string() for _ in range(6))
    (flags,) = r.take(_U8)
    if flags & ~_REQUEST_FLAGS:
        raise ProtocolError(f"unknown request flags {flags:#x}")
    epoch, zone_offset, zone_length = r.take(_REQ_TAIL)
    n = r.count(_U16.size + _ENTRY.size)
    entries = []
    for _ in range(n):
        topic = r.string()
        entries.append(NotifyEntry(topic, *r.take(_ENTRY)))
    r.end()
    return NotifyRequest(request_id, source_zone, dest_zone, proxy_id, epoch, bucket, key,
                         zone_offset, zone_length, tuple(entries), share, bool(flags & _REQUEST_FLAG_PREFETCH),
                         bool(flags & _REQUEST_FLAG_ORDERED))


def encode_response(resp: NotifyResponse) -> bytes:
    """Message payload of a response. Raises ValueError for values that do not fit the format."""
    out = bytearray(struct.pack(">QB", resp.request_id, resp.status))
    _put_str(out, resp.message[:MAX_STRING_BYTES // 4])  # at most 4 UTF-8 bytes per char
    out += _U32.pack(len(resp.results))
    for res in resp.results:
        append_us = APPEND_US_UNKNOWN if res.append_us < 0 else min(res.append_us, APPEND_US_MAX)
        out += _RESULT.pack(res.error_code, res.base_offset, _FLAG_DUPLICATE if res.duplicate else 0, append_us)
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
        code, base_offset, flags, append_us = r.take(_RESULT)
        if flags & ~_FLAG_DUPLICATE:
            raise ProtocolError(f"unknown result flags {flags:#x}")
        results.append(EntryResult(code, base_offset, bool(flags & _FLAG_DUPLICATE),
                                   -1 if append_us == APPEND_US_UNKNOWN else append_us))
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
