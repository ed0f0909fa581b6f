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


def frame(source, destination, seq, flags, payload=b"", ack=0, sacks=()):
    # Options: NOP NOP timestamps(10); with SACK blocks also NOP NOP kind 5, length 2 + 8 per block.
    options = b"\x01\x01" + bytes([8, 10]) + bytes(8)
    if sacks:
        options += b"\x01\x01" + bytes([5, 2 + 8 * len(sacks)]) + b"".join(struct.pack("!II", *b) for b in sacks)
    tcp_bytes = 20 + len(options)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + tcp_bytes + len(payload), 0, 0, 64, 6, 0,
                     bytes(int(x) for x in source[0].split(".")), bytes(int(x) for x in destination[0].split(".")))
    tcp = struct.pack("!HHIIBBHHH", source[1], destination[1], seq, ack, (tcp_bytes // 4) << 4, flags, 65535, 0, 0)
    return b"\x00" * 12 + b"\x08\x00" + ip + tcp + options + payload


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


def test_bytes_sent_twice_are_counted_after_a_gap_too_and_a_hole_filled_late_is_not():
    # The capture missed bytes 100..149 (lost before the meter): parsing stops, but what the
    # meter reads twice is still known. Offsets from the SYN's 99 + 1.
    tally = FrameTally({9093})
    tally.add(frame(CLIENT, BROKER, 99, SYN))
    tally.add(frame(CLIENT, BROKER, 150, PSH_ACK, b"b" * 50))  # 150..199, after the gap
    tally.add(frame(CLIENT, BROKER, 200, PSH_ACK, b"c" * 50))  # 200..249
    tally.add(frame(CLIENT, BROKER, 100, PSH_ACK, b"a" * 50))  # the hole filled: first time on the meter
    tally.add(frame(CLIENT, BROKER, 180, PSH_ACK, b"x" * 40))  # 180..219: all 40 carried before
    tally.add(frame(CLIENT, BROKER, 200, PSH_ACK, b"c" * 50))  # the last segment again: a tail probe
    tally.add(frame(CLIENT, BROKER, 240, PSH_ACK, b"d" * 20))  # 240..259: 10 again, 10 new
    assert tally.broken_streams == 1
    assert vars(tally.retransmitted) == {"packets": 3, "frame_bytes": 3 * 66 + 40 + 50 + 20,
                                         "payload_bytes": 40 + 50 + 10}
    assert vars(tally.retransmissions().at_tail) == {"packets": 1, "frame_bytes": 66 + 50, "payload_bytes": 50}


def test_a_connection_seen_from_its_middle_counts_repeats_from_its_first_captured_byte():
    tally = FrameTally({9093})
    tally.add(frame(CLIENT, BROKER, 5_000, PSH_ACK, b"a" * 30))  # no SYN seen: opened before the capture
    tally.add(frame(CLIENT, BROKER, 5_000, PSH_ACK, b"a" * 30))
    tally.add(frame(CLIENT, BROKER, 4_990, PSH_ACK, b"z" * 10))  # before the first captured byte: unknown
    assert tally.broken_streams == 1
    assert vars(tally.retransmitted) == {"packets": 1, "frame_bytes": 66 + 30, "payload_bytes": 30}


def test_sack_blocks_and_the_ack_number_are_read_from_the_options():
    segment = parse_tcp_frame(frame(BROKER, CLIENT, 500, ACK, ack=300, sacks=((400, 450), (500, 600))))
    assert segment is not None
    assert (segment.ack, segment.sack_blocks) == (300, ((400, 450), (500, 600)))
    assert segment.frame_bytes == 66 + 4 + 16  # NOP NOP, kind and length, two blocks of 8


def test_a_d_sack_is_a_first_block_below_the_ack_or_inside_the_second():
    def duplicate(ack, sacks):
        segment = parse_tcp_frame(frame(BROKER, CLIENT, 500, ACK, ack=ack, sacks=sacks))
        assert segment is not None
        return segment.duplicate_block

    assert duplicate(300, ((250, 300),)) == (250, 300)  # below the cumulative ACK: received twice
    assert duplicate(300, ((400, 450), (350, 500))) == (400, 450)  # inside the second block
    assert duplicate(300, ((400, 450), (500, 600))) is None  # an ordinary SACK: a hole at 300..400
    assert duplicate(300, ()) is None
    # Sequence numbers wrap: 2^32 - 100 comes before an ACK of 50.
    assert duplicate(50, ((2**32 - 100, 2**32 - 50),)) == (2**32 - 100, 2**32 - 50)


def _connection_with_a_tail_probe(tally, d_sack):
    # 100 bytes in two segments; the last one (150..199) sent again, as a tail-loss probe does.
    tally.add(frame(CLIENT, BROKER, 99, SYN))
    tally.add(frame(CLIENT, BROKER, 100, PSH_ACK, b"x" * 50))
    tally.add(frame(CLIENT, BROKER, 150, PSH_ACK, b"y" * 50))
    tally.add(frame(CLIENT, BROKER, 150, PSH_ACK, b"y" * 50))
    if d_sack:  # the broker had 150..199 already: ACK 200 with a D-SACK block for it
        tally.add(frame(BROKER, CLIENT, 500, ACK, ack=200, sacks=((150, 200),)))
    else:
        tally.add(frame(BROKER, CLIENT, 500, ACK, ack=200))


def test_a_retransmission_the_receiver_d_sacked_was_a_duplicate():
    tally = FrameTally({9093})
    _connection_with_a_tail_probe(tally, d_sack=True)
    kinds = tally.retransmissions()
    one = {"packets": 1, "frame_bytes": 66 + 50, "payload_bytes": 50}
    assert vars(tally.retransmitted) == one
    assert vars(kinds.dsacked) == one
    assert vars(kinds.not_dsacked) == {"packets": 0, "frame_bytes": 0, "payload_bytes": 0}
    assert vars(kinds.at_tail) == one  # it ended at byte 200, the highest sent
    assert kinds.unexplained.packets == 0


def test_a_retransmission_without_a_d_sack_replaced_lost_bytes():
    tally = FrameTally({9093})
    _connection_with_a_tail_probe(tally, d_sack=False)
    kinds = tally.retransmissions()
    assert vars(kinds.dsacked) == {"packets": 0, "frame_bytes": 0, "payload_bytes": 0}
    assert vars(kinds.not_dsacked) == {"packets": 1, "frame_bytes": 66 + 50, "payload_bytes": 50}
    assert kinds.unexplained.packets == 0  # at the tail: a probe's shape, lost or not


def test_a_d_sack_read_before_the_segment_it_answers_still_matches():
    # The capture reads one port after the other: the receiver's D-SACK may come first.
    tally = FrameTally({9093})
    tally.add(frame(CLIENT, BROKER, 99, SYN))
    tally.add(frame(CLIENT, BROKER, 100, PSH_ACK, b"x" * 50))
    tally.add(frame(BROKER, CLIENT, 500, ACK, ack=150, sacks=((100, 150),)))
    tally.add(frame(CLIENT, BROKER, 100, PSH_ACK, b"x" * 50))
    assert tally.retransmissions().dsacked.packets == 1


def test_a_d_sack_of_the_other_direction_or_of_other_bytes_does_not_match():
    tally = FrameTally({9093})
    tally.add(frame(CLIENT, BROKER, 99, SYN))
    tally.add(frame(CLIENT, BROKER, 100, PSH_ACK, b"x" * 50))
    tally.add(frame(CLIENT, BROKER, 150, PSH_ACK, b"y" * 50))
    tally.add(frame(CLIENT, BROKER, 100, PSH_ACK, b"x" * 50))  # the head again, as an RTO sends it
    tally.add(frame(BROKER, CLIENT, 500, ACK, ack=200, sacks=((150, 200),)))  # D-SACKs other bytes
    tally.add(frame(CLIENT, BROKER, 9, ACK, ack=600, sacks=((100, 150),)))  # the client's D-SACK: other stream
    kinds = tally.retransmissions()
    assert (kinds.dsacked.packets, kinds.not_dsacked.packets) == (0, 1)
    assert kinds.at_tail.packets == 0  # 100..149 is not the last byte sent (199)
    # Mid-stream and not D-SACKed: a lost segment's retransmission.
    assert vars(kinds.unexplained) == {"packets": 1, "frame_bytes": 66 + 50, "payload_bytes": 50}


def test_a_d_sacked_retransmission_before_the_tail_is_explained():
    # The capture read a newer segment before the probe: not at the tail, but D-SACKed.
    tally = FrameTally({9093})
    tally.add(frame(CLIENT, BROKER, 99, SYN))
    tally.add(frame(CLIENT, BROKER, 100, PSH_ACK, b"x" * 50))
    tally.add(frame(CLIENT, BROKER, 150, PSH_ACK, b"y" * 50))
    tally.add(frame(CLIENT, BROKER, 100, PSH_ACK, b"x" * 50))
    tally.add(frame(BROKER, CLIENT, 500, ACK, ack=200, sacks=((100, 150),)))
    kinds = tally.retransmissions()
    assert (kinds.dsacked.packets, kinds.at_tail.packets, kinds.unexplained.packets) == (1, 0, 0)
