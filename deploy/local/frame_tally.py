"""What the inter-zone meter counted, taken apart: TCP data segments, pure ACKs, connection
set-up, and the Kafka requests and responses the data segments carried.

Strategy: sans-IO. `FrameTally.add(frame)` takes one Ethernet frame as a zone put it onto
the bridge (deploy/local/port_capture.py reads them); the tally parses the IPv4 and TCP
headers, reassembles each direction of each connection by sequence number and cuts the
byte stream into Kafka frames (a 4-byte size, then the frame). Requests are the direction
towards a broker port; a connection's responses come in the order of its requests, so
each response is matched to the API of the request it answers. Produce requests are
decoded (kafka_protocol.produce) into their record batches: the bytes the audit records
count, and what the framing model (core/framing.py) starts from.

A segment that starts after a gap in its stream (a frame the capture missed) stops Kafka
parsing of that direction (`broken_streams`); the TCP counts stay exact, and so do the
bytes carried twice (each direction keeps the ranges it carried, gap or not).

Retransmissions are segments that repeat bytes the stream already carried. Whether they
were needed, the receiver says: an ACK whose first SACK block lies below its ACK number
(or inside its second block) is a D-SACK (RFC 2883), "these bytes came twice". A
retransmission the receiver D-SACKed was spurious: the link had delivered the first copy.
A tail-loss probe sends the connection's last segment again, lost or not; a segment lost
mid-stream is sent again by a fast retransmit, without a D-SACK: `unexplained` counts those.
The matching waits for `retransmissions()`, because the capture reads the ports one after
another and may take an ACK before the segment it answers.
"""

from __future__ import annotations

import bisect
import struct
from collections import Counter, deque
from collections.abc import Collection
from dataclasses import dataclass, field

from kafka_protocol._wire import ProtocolError
from kafka_protocol.kafka_codec import parse_request_frame
from kafka_protocol.produce import decode_produce_request

ETHERNET_HEADER_BYTES = 14
ETHERTYPE_IPV4 = 0x0800
IP_PROTOCOL_TCP = 6
PRODUCE_API_KEY = 0
_SYN, _FIN, _RST = 0x02, 0x01, 0x04
_SEQ_MOD = 1 << 32
TCP_OPTION_END, TCP_OPTION_NOP, TCP_OPTION_SACK = 0, 1, 5
SACK_BLOCK_BYTES = 8  # two 32-bit sequence numbers

Endpoint = tuple[str, int]
Direction = tuple[Endpoint, Endpoint]  # (source, destination)


@dataclass(frozen=True)
class TcpSegment:
    """The parts of one TCP/IPv4 frame the tally needs."""

    frame_bytes: int
    source: Endpoint
    destination: Endpoint
    seq: int
    flags: int
    payload: bytes
    ack: int = 0
    sack_blocks: tuple[tuple[int, int], ...] = ()  # (left, right) edges, as the receiver sent them

    @property
    def kind(self) -> str:
        """`data` (payload), `control` (SYN, FIN or RST without payload) or `pure_ack`."""
        if self.payload:
            return "data"
        return "control" if self.flags & (_SYN | _FIN | _RST) else "pure_ack"

    @property
    def duplicate_block(self) -> tuple[int, int] | None:
        """The range a D-SACK reports as received twice (RFC 2883, as Linux's tcp_check_dsack
        reads it): the first SACK block if it starts below the ACK number or lies inside the
        second block; else None."""
        if not self.sack_blocks:
            return None
        left, right = self.sack_blocks[0]
        if _before(left, self.ack):
            return left, right
        if len(self.sack_blocks) > 1:
            outer_left, outer_right = self.sack_blocks[1]
            if not _before(left, outer_left) and not _before(outer_right, right):
                return left, right
        return None


def _before(a: int, b: int) -> bool:
    """a comes before b in sequence space (modulo 2^32)."""
    return a != b and (b - a) % _SEQ_MOD < _SEQ_MOD // 2


def _sack_blocks(options: bytes) -> tuple[tuple[int, int], ...]:
    blocks: list[tuple[int, int]] = []
    i = 0
    while i < len(options):
        kind = options[i]
        if kind == TCP_OPTION_END:
            break
        if kind == TCP_OPTION_NOP:
            i += 1
            continue
        if i + 1 >= len(options) or options[i + 1] < 2:
            break  # a malformed option: the rest cannot be read
        length = options[i + 1]
        if kind == TCP_OPTION_SACK:
            for at in range(i + 2, min(i + length, len(options)) - SACK_BLOCK_BYTES + 1, SACK_BLOCK_BYTES):
                left, right = struct.unpack_from("!II", options, at)
                blocks.append((left, right))
        i += length
    return tuple(blocks)


def parse_tcp_frame(frame: bytes) -> TcpSegment | None:
    """The TCP segment in an Ethernet frame, or None for anything else (ARP, IPv6, UDP)."""
    if len(frame) < ETHERNET_HEADER_BYTES + 20 or struct.unpack_from("!H", frame, 12)[0] != ETHERTYPE_IPV4:
        return None
    ip = ETHERNET_HEADER_BYTES
    ihl = (frame[ip] & 0x0F) * 4
    total_length = struct.unpack_from("!H", frame, ip + 2)[0]
    if frame[ip + 9] != IP_PROTOCOL_TCP or len(frame) < ip + ihl + 20:
        return None
    tcp = ip + ihl
    source_port, destination_port, seq, ack = struct.unpack_from("!HHII", frame, tcp)
    data_offset = (frame[tcp + 12] >> 4) * 4
    flags = frame[tcp + 13]
    source = ".".join(str(b) for b in frame[ip + 12 : ip + 16])
    destination = ".".join(str(b) for b in frame[ip + 16 : ip + 20])
    payload = frame[tcp + data_offset : ip + total_length]
    return TcpSegment(len(frame), (source, source_port), (destination, destination_port), seq, flags, bytes(payload),
                      ack, _sack_blocks(frame[tcp + 20 : tcp + data_offset]))


@dataclass
class Parts:
    """Packets and frame bytes of one kind of frame."""

    packets: int = 0
    frame_bytes: int = 0
    payload_bytes: int = 0

    def add(self, frame_bytes: int, payload_bytes: int = 0) -> None:
        self.packets += 1
        self.frame_bytes += frame_bytes
        self.payload_bytes += payload_bytes


@dataclass(frozen=True)
class Retransmission:
    """One data segment that repeated bytes its stream had already carried."""

    direction: Direction
    seq: int
    repeated_bytes: int
    frame_bytes: int
    # It ended at the highest byte the stream had sent: the segment a tail-loss probe sends
    # again (an RTO sends the oldest unacknowledged one, a fast retransmit a hole's).
    at_tail: bool


@dataclass(frozen=True)
class RetransmissionKinds:
    """The retransmitted segments (FrameTally.retransmitted) by what the receiver said of them."""

    dsacked: Parts  # the receiver D-SACKed them: it had the bytes already, nothing was lost
    not_dsacked: Parts  # no D-SACK seen: they replaced lost bytes (or the D-SACK was not captured)
    at_tail: Parts  # of either kind: the last segment sent, sent again
    # Neither D-SACKed nor at the tail: what a segment lost mid-stream and sent again by a fast
    # retransmit looks like. A tail-loss probe is at the tail (unless the capture read a newer
    # segment first) and is D-SACKed when nothing was lost, so a probe is at least one of both.
    unexplained: Parts

    def as_dict(self) -> dict[str, dict[str, int]]:
        return {"dsacked": vars(self.dsacked), "not_dsacked": vars(self.not_dsacked), "at_tail": vars(self.at_tail),
                "unexplained": vars(self.unexplained)}


@dataclass
class _Stream:
    """One direction of one connection: the next expected sequence number and unparsed bytes;
    and which bytes it carried (`seen`, offsets from `base`), kept after a gap as well."""

    next_seq: int | None = None
    buffer: bytearray = field(default_factory=bytearray)
    broken: bool = False
    base: int | None = None  # the sequence number of the first byte the capture could place
    seen: list[list[int]] = field(default_factory=list)  # disjoint [start, end) offsets, in order

    def carried(self, start: int, end: int) -> int:
        """Note bytes [start, end) (offsets from `base`) as carried; how many of them already were."""
        seen = self.seen
        if seen and start == seen[-1][1]:  # the next bytes: the usual case
            seen[-1][1] = end
            return 0
        if not seen or start > seen[-1][1]:  # past a gap
            seen.append([start, end])
            return 0
        first = bisect.bisect_left(seen, start, key=lambda r: r[1])  # the first range ending at or after start
        repeated, low, high, last = 0, start, end, first
        while last < len(seen) and seen[last][0] <= end:
            repeated += max(0, min(end, seen[last][1]) - max(start, seen[last][0]))
            low, high = min(low, seen[last][0]), max(high, seen[last][1])
            last += 1
        seen[first:last] = [[low, high]]
        return repeated


@dataclass
class KafkaParts:
    """Kafka frames (size prefix included) per API key and direction, and the Produce contents."""

    request_bytes: Counter[int] = field(default_factory=Counter)
    response_bytes: Counter[int] = field(default_factory=Counter)
    requests: Counter[int] = field(default_factory=Counter)
    batch_bytes: int = 0  # record batches in Produce requests: what produce_batch.bytes counts
    batches: int = 0  # partition entries in Produce requests
    topic_entries: int = 0  # topic entries in Produce requests


class FrameTally:
    """Frames one way onto the inter-zone link, taken apart (see the module docstring).

    `server_ports`: the brokers' listener ports; a segment towards one is a request.
    """

    def __init__(self, server_ports: Collection[int]) -> None:
        self._server_ports = frozenset(server_ports)
        self.by_kind: dict[tuple[str, str], Parts] = {}  # (to_broker|from_broker, kind) -> parts
        self.other = Parts()  # frames that are not TCP/IPv4 (ARP)
        # Data segments that carried bytes already sent (retransmissions; also in by_kind):
        # payload_bytes counts only the repeated bytes.
        self.retransmitted = Parts()
        self._retransmissions: list[Retransmission] = []
        self._duplicates: dict[Direction, list[tuple[int, int]]] = {}  # data direction -> D-SACKed ranges
        self.kafka = KafkaParts()
        self.broken_streams = 0
        self._streams: dict[Direction, _Stream] = {}
        self._pending: dict[Direction, deque[int]] = {}  # client->server direction: API keys awaiting answers

    @property
    def total_bytes(self) -> int:
        return self.other.frame_bytes + sum(p.frame_bytes for p in self.by_kind.values())

    def parts(self, direction: str, kind: str) -> Parts:
        return self.by_kind.get((direction, kind), Parts())

    def add(self, frame: bytes) -> None:
        segment = parse_tcp_frame(frame)
        if segment is None:
            self.other.add(len(frame))
            return
        to_broker = segment.destination[1] in self._server_ports
        direction = "to_broker" if to_broker else "from_broker"
        self.by_kind.setdefault((direction, segment.kind), Parts()).add(segment.frame_bytes, len(segment.payload))
        duplicate = segment.duplicate_block
        if duplicate is not None:  # the ACK's sender received these bytes of the opposite direction twice
            self._duplicates.setdefault((segment.destination, segment.source), []).append(duplicate)
        self._follow(segment, to_broker)

    def retransmissions(self) -> RetransmissionKinds:
        """The retransmitted segments so far, by whether the receiver D-SACKed them."""
        dsacked, not_dsacked, at_tail, unexplained = Parts(), Parts(), Parts(), Parts()
        for r in self._retransmissions:
            end = (r.seq + r.repeated_bytes) % _SEQ_MOD
            reported = any(not _before(r.seq, left) and not _before(right, end)
                           for left, right in self._duplicates.get(r.direction, ()))
            (dsacked if reported else not_dsacked).add(r.frame_bytes, r.repeated_bytes)
            if r.at_tail:
                at_tail.add(r.frame_bytes, r.repeated_bytes)
            if not reported and not r.at_tail:
                unexplained.add(r.frame_bytes, r.repeated_bytes)
        return RetransmissionKinds(dsacked, not_dsacked, at_tail, unexplained)

    def _follow(self, segment: TcpSegment, to_broker: bool) -> None:
        key = (segment.source, segment.destination)
        stream = self._streams.setdefault(key, _Stream())
        if segment.flags & _SYN:
            stream.next_seq = stream.base = (segment.seq + 1) % _SEQ_MOD
            return
        if not segment.payload:
            return
        self._note_repeats(key, stream, segment)
        if stream.broken:
            return
        if stream.next_seq is None:  # the connection opened before the capture: unparseable
            stream.broken = True
            self.broken_streams += 1
            return
        offset = (stream.next_seq - segment.seq) % _SEQ_MOD
        if offset >= _SEQ_MOD // 2:  # starts after the next expected byte: a frame was missed
            stream.broken = True
            self.broken_streams += 1
            return
        new = segment.payload[offset:]
        stream.next_seq = (stream.next_seq + len(new)) % _SEQ_MOD
        stream.buffer += new
        self._cut_frames(key, stream, to_broker)

    def _note_repeats(self, key: Direction, stream: _Stream, segment: TcpSegment) -> None:
        """A retransmission: the segment repeats bytes this direction already carried. Counted
        in a stream with a gap too (its Kafka parsing stopped, its segments still cross the
        meter), so the bytes the meter read twice are known whatever the capture missed."""
        if stream.base is None:  # the connection opened before the capture: from its first seen byte
            stream.base = segment.seq
        start = (segment.seq - stream.base) % _SEQ_MOD
        if start >= _SEQ_MOD // 2:  # before the first byte the capture saw of it: unknown, not counted
            return
        end = start + len(segment.payload)
        furthest = stream.seen[-1][1] if stream.seen else 0
        repeated = stream.carried(start, end)
        if repeated:
            self.retransmitted.add(segment.frame_bytes, repeated)
            self._retransmissions.append(Retransmission(key, segment.seq, repeated, segment.frame_bytes,
                                                        at_tail=end == furthest and repeated == len(segment.payload)))

    def _cut_frames(self, key: Direction, stream: _Stream, to_broker: bool) -> None:
        while len(stream.buffer) >= 4:
            size = struct.unpack_from("!i", stream.buffer, 0)[0]
            if len(stream.buffer) < 4 + size:
                return
            frame = bytes(stream.buffer[4 : 4 + size])
            del stream.buffer[: 4 + size]
            if to_broker:
                self._request(key, frame)
            else:
                waiting = self._pending.get((key[1], key[0]))
                api_key = waiting.popleft() if waiting else -1
                self.kafka.response_bytes[api_key] += 4 + size

    def _request(self, key: Direction, frame: bytes) -> None:
        try:
            request = parse_request_frame(frame)
        except ProtocolError:
            self.kafka.request_bytes[-1] += 4 + len(frame)
            return
        self.kafka.request_bytes[request.api_key] += 4 + len(frame)
        self.kafka.requests[request.api_key] += 1
        if request.api_key == PRODUCE_API_KEY:
            produce = decode_produce_request(request.body, request.api_version)
            for topic in produce.topic_data:
                self.kafka.topic_entries += 1
                for partition in topic.partition_data:
                    self.kafka.batches += 1
                    self.kafka.batch_bytes += len(partition.records) if partition.records is not None else 0
            if produce.acks == 0:
                return  # no answer will come
        self._pending.setdefault(key, deque()).append(request.api_key)

    def as_dict(self) -> dict[str, object]:
        return {
            "total_bytes": self.total_bytes, "other": vars(self.other), "broken_streams": self.broken_streams,
            "retransmitted": vars(self.retransmitted), "retransmissions": self.retransmissions().as_dict(),
            "tcp": {f"{d}.{k}": vars(p) for (d, k), p in sorted(self.by_kind.items())},
            "kafka": {"request_bytes": dict(self.kafka.request_bytes), "response_bytes": dict(self.kafka.response_bytes),
                      "requests": dict(self.kafka.requests), "batch_bytes": self.kafka.batch_bytes,
                      "batches": self.kafka.batches, "topic_entries": self.kafka.topic_entries},
        }
