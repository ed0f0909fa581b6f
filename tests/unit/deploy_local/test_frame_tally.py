"""The meter's frames taken apart (deploy/local/frame_tally.py), on frames built by hand.

A frame: Ethernet 14 + IPv4 20 + TCP 32 (20 + the 12-byte timestamps option) = 66 bytes
of headers, then the payload. The broker listens on 9093; the client's port is 40000.
"""

from __future__ import annotations

import struct

from deploy.local.frame_tally import FrameTally, parse_tcp_frame
from kafka_protocol.produce import encode_produce_request, produce_request

CLIENT = ("10.213.0.1", 40_000)
BROKER = ("10.213.0.2", 9093)
SYN, ACK, PSH_ACK, FIN_ACK = 0x02, 0x10, 0x18, 0x11


def frame(source, destination, seq, flags, payload=b""):
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + 32 + len(payload), 0, 0, 64, 6, 0,
                     bytes(int(x) for x in source[0].split(".")), bytes(int(x) for x in destination[0].split(".")))
    tcp = struct.pack("!HHIIBBHHH", source[1], destination[1], seq, 0, 8 << 4, flags, 65535, 0, 0) + b"\x01\x01" + bytes(10)
    return b"\x00" * 12 + b"\x08\x00" + ip + tcp + payload


def test_a_frame_parses_into_endpoints_flags_and_payload():
    segment = parse_tcp_frame(frame(CLIENT, BROKER, 7, PSH_ACK, b"abc"))
    assert segment is not None
    assert (segment.frame_bytes, segment.source, segment.destination, segment.seq, segment.payload) == (
        66 + 3, CLIENT, BROKER, 7, b"abc")
    assert segment.kind == "data"
    assert parse_tcp_frame(frame(BROKER, CLIENT, 7, ACK)).kind == "pure_ack"
    assert parse_tcp_frame(frame(BROKER, CLIENT, 7, FIN_ACK)).kind == "control"


def test_an_arp_frame_is_other():
    arp = b"\xff" * 6 + b"\x00" * 6 + b"\x08\x06" + bytes(28)
    assert parse_tcp_frame(arp) is None
    tally = FrameTally({9093})
    tally.add(arp)
    assert (tally.other.packets, tally.other.frame_bytes, tally.total_bytes) == (1, 42, 42)


def _produce(correlation_id):
    # Two partitions of one topic: batches of 100 and 30 bytes (opaque to the tally).
    request = produce_request(-1, 30_000, [("t", [(0, b"a" * 100), (1, b"b" * 30)])])
    return encode_produce_request(request, 9, correlation_id, "p")


def test_a_produce_split_over_two_segments_is_reassembled_and_its_answer_matched():
    wire = _produce(1)
    # v9: size 4 + header (2 + 2 + 4 + client_id 2+1 + tags 1 = 12) + transactional_id 1 + acks 2
    # + timeout 4 + topics 1 + name 1+1 + partitions 1 + (index 4 + records 1+100 + tags 1)
    # + (index 4 + records 1+30 + tags 1) + topic tags 1 + body tags 1 = 171
    assert len(wire) == 171
    tally = FrameTally({9093})
    tally.add(frame(CLIENT, BROKER, 99, SYN))
    tally.add(frame(BROKER, CLIENT, 499, SYN | ACK))
    tally.add(frame(CLIENT, BROKER, 100, PSH_ACK, wire[:50]))
    tally.add(frame(CLIENT, BROKER, 150, PSH_ACK, wire[50:]))
    tally.add(frame(BROKER, CLIENT, 500, ACK))
    answer = struct.pack("!ii", 6, 1) + b"\x00\x00"  # size 6: correlation_id, 2 bytes of body
    tally.add(frame(BROKER, CLIENT, 500, PSH_ACK, answer))
    assert (tally.kafka.batches, tally.kafka.batch_bytes, tally.kafka.topic_entries) == (2, 130, 1)
    assert tally.kafka.request_bytes == {0: 171}
    assert tally.kafka.response_bytes == {0: 10}
    assert vars(tally.parts("to_broker", "data")) == {"packets": 2, "frame_bytes": 2 * 66 + 171, "payload_bytes": 171}
    assert vars(tally.parts("to_broker", "control")) == {"packets": 1, "frame_bytes": 66, "payload_bytes": 0}
    assert vars(tally.parts("from_broker", "pure_ack")) == {"packets": 1, "frame_bytes": 66, "payload_bytes": 0}
    assert tally.total_bytes == 66 * 6 + 171 + 10
    assert tally.broken_streams == 0


def test_a_retransmitted_segment_is_counted_on_the_wire_but_parsed_once():
    wire = _produce(1)
    tally = FrameTally({9093})
    tally.add(frame(CLIENT, BROKER, 99, SYN))
    tally.add(frame(CLIENT, BROKER, 100, PSH_ACK, wire[:50]))
    tally.add(frame(CLIENT, BROKER, 100, PSH_ACK, wire[:80]))  # the first 50 again, 30 new
    tally.add(frame(CLIENT, BROKER, 180, PSH_ACK, wire[80:]))
    assert tally.parts("to_broker", "data").packets == 3
    assert (tally.kafka.requests[0], tally.kafka.batches) == (1, 2)
    assert vars(tally.retransmitted) == {"packets": 1, "frame_bytes": 66 + 80, "payload_bytes": 50}


def test_a_gap_in_a_stream_stops_its_parsing():
    wire = _produce(1)
    tally = FrameTally({9093})
    tally.add(frame(CLIENT, BROKER, 99, SYN))
    tally.add(frame(CLIENT, BROKER, 150, PSH_ACK, wire[50:]))  # bytes 100..149 never seen
    assert (tally.broken_streams, tally.kafka.requests[0]) == (1, 0)
    assert tally.parts("to_broker", "data").packets == 1
