"""Bytes on the wire: what TCP/IP adds to the Kafka and notification bytes the records count.

Pure Python (no pyspark): the proxy imports PRODUCE_OVERHEAD_BYTES, the jobs build their
Spark expressions from the same constants, and the tests check the formula by hand.

AWS bills every byte of a packet that crosses a zone boundary, headers included, in both
directions. The records count application bytes (a batch, a notification frame); this
module turns them into packets for a path MTU M (docs/audit-records.md, "Bytes on the wire"):

    MSS            = M - IP_TCP_HEADER_BYTES              (9001 -> 8949, 1500 -> 1448)
    per packet     = IP_TCP_HEADER_BYTES + link_header_bytes
    stream(P)      = P + P / MSS * per_packet
    round_trip(Q, R) = Q + R + (ceil(Q / MSS) + ceil(R / MSS) + 2) * per_packet

Strategy: the two estimates err on opposite sides so that the savings are never overstated.
`stream` is what a direct produce would have sent, a lower bound: it counts only what is
certain, one data packet's headers per MSS of payload (a segment carries at most MSS bytes),
and no pure ACKs, because how often a receiver ACKs is its own choice: a Kafka broker
reading a bulk produce through its 100 KB socket buffer ACKed once per 31 data segments,
where a receiver that reads every segment at once ACKs one in two (docs/audit-records.md,
"Bytes on the wire", has the measurements). Retransmissions, connection set-up, Metadata and
the request and topic headers a batch shares with others are left out for the same reason.
`round_trip` is one notification and its answer, what the WAL route did put across, an upper
bound: each sent alone in whole packets, plus at most one pure ACK per message.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from core.configload import require

# Kafka Produce overhead per partition batch that a direct produce adds to the raw batch,
# counting only the per-partition entries (ProduceRequest v9: partition_index 4 + records
# length varint <= 3 + tagged fields 1 = 8; ProduceResponse v9: partition_index 4 +
# error_code 2 + base_offset 8 + log_append_time_ms 8 + log_start_offset 8 + empty
# record_errors 1 + null error_message 1 + tagged fields 1 = 33). Topic entries and
# request/response headers are shared by many batches and left out: a lower bound.
PRODUCE_OVERHEAD_BYTES = 41
# IPv4 20 + TCP 20 + the timestamps option Linux sends on every segment (10, padded to 12).
IP_TCP_HEADER_BYTES = 52
# Pure ACKs per notification message, at most (the answer usually carries the request's).
ACKS_PER_MESSAGE = 1
DEFAULT_PATH_MTU = 9001  # within an AWS VPC; 1500 across VPC peering or a transit gateway
MIN_PATH_MTU = 576  # RFC 791: every IPv4 host accepts 576-byte datagrams
MAX_PATH_MTU = 65_535


@dataclass(frozen=True)
class Framing:
    """The packets that carry a byte stream: the path MTU and the link header counted per packet.

    link_header_bytes: 0 for what AWS bills (IP packets); 14 for an Ethernet meter such as
    the demo's bridge-port counters. Raises ConfigError for values outside their range.
    """

    path_mtu: int = DEFAULT_PATH_MTU
    link_header_bytes: int = 0

    def __post_init__(self) -> None:
        require(MIN_PATH_MTU <= self.path_mtu <= MAX_PATH_MTU, f"audit.path_mtu: {MIN_PATH_MTU}..{MAX_PATH_MTU}")
        require(0 <= self.link_header_bytes <= 64, "audit.link_header_bytes: 0..64")

    @property
    def mss(self) -> int:
        """TCP payload per packet."""
        return self.path_mtu - IP_TCP_HEADER_BYTES

    @property
    def packet_header_bytes(self) -> int:
        return IP_TCP_HEADER_BYTES + self.link_header_bytes

    @property
    def stream_factor(self) -> float:
        """Wire bytes per payload byte of a stream, at least: 1 + a data packet's headers per MSS."""
        return 1 + self.packet_header_bytes / self.mss


def stream_wire_bytes(payload_bytes: float, framing: Framing) -> float:
    """Bytes on the wire for `payload_bytes` of a TCP stream, at least (no pure ACKs counted)."""
    return payload_bytes * framing.stream_factor


def direct_produce_wire_bytes(batch_bytes: int, batches: int, framing: Framing) -> float:
    """What a direct produce of `batches` batches of `batch_bytes` in total puts on the wire, at least."""
    return stream_wire_bytes(batch_bytes + batches * PRODUCE_OVERHEAD_BYTES, framing)


def message_packets(message_bytes: int, framing: Framing) -> int:
    """Packets of one message sent alone (an empty message sends none)."""
    return math.ceil(message_bytes / framing.mss) if message_bytes > 0 else 0


def round_trip_wire_bytes(request_bytes: int, response_bytes: int, framing: Framing) -> int:
    """Bytes on the wire for one request and its answer, each sent alone, with their ACKs."""
    packets = (message_packets(request_bytes, framing) + message_packets(response_bytes, framing)
               + ACKS_PER_MESSAGE * ((request_bytes > 0) + (response_bytes > 0)))
    return request_bytes + response_bytes + packets * framing.packet_header_bytes
