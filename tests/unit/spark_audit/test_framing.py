"""The bytes-on-the-wire formula (core.framing), every number worked out by hand.

Per packet: IPv4 20 + TCP 20 + timestamps 12 = 52 bytes (+ the link header when counted).
MSS = MTU - 52: 1500 -> 1448, 9001 -> 8949. A stream adds one data packet's header per
MSS of payload and nothing for pure ACKs (a lower bound: a receiver may ACK rarely).
"""

from __future__ import annotations

import pytest

from core.configload import ConfigError
from core.framing import (
    Framing,
    direct_produce_wire_bytes,
    message_packets,
    round_trip_wire_bytes,
    stream_wire_bytes,
)

PEERED = Framing(path_mtu=1500)
VPC = Framing()  # 9001
ETHERNET_1500 = Framing(path_mtu=1500, link_header_bytes=14)


@pytest.mark.parametrize(("framing", "mss", "per_packet"), [
    (PEERED, 1448, 52), (VPC, 8949, 52), (ETHERNET_1500, 1448, 66),
])
def test_mss_and_header_per_packet(framing, mss, per_packet):
    assert (framing.mss, framing.packet_header_bytes) == (mss, per_packet)


@pytest.mark.parametrize(("payload", "framing", "wire"), [
    # one MSS of payload: its data packet's 52 header bytes, no ACK
    (1448, PEERED, 1448 + 52),
    (8949, VPC, 8949 + 52),
    # ten MSS: ten headers
    (14_480, PEERED, 14_480 + 520),
    # half an MSS: half a header (batches share segments)
    (724, PEERED, 724 + 26),
    # Ethernet counted too: 66 per packet
    (1448, ETHERNET_1500, 1448 + 66),
    (0, PEERED, 0),
])
def test_stream_adds_data_packet_headers_in_proportion_and_no_acks(payload, framing, wire):
    assert stream_wire_bytes(payload, framing) == pytest.approx(wire, rel=1e-12)


def test_direct_produce_counts_the_produce_overhead_per_batch_then_frames_it():
    # two batches of 1_407 + 41 = 1_448 each: 2_896 payload = two MSS -> + 2 * 52 = 3_000
    assert direct_produce_wire_bytes(2 * 1_407, 2, PEERED) == pytest.approx(3_000, rel=1e-12)


@pytest.mark.parametrize(("size", "packets"), [(0, 0), (1, 1), (1448, 1), (1449, 2), (2896, 2), (2897, 3)])
def test_a_message_sent_alone_takes_whole_packets(size, packets):
    assert message_packets(size, PEERED) == packets


@pytest.mark.parametrize(("request_bytes", "response_bytes", "framing", "wire"), [
    # one packet each way and one ACK each: 4 * 52
    (300, 100, PEERED, 300 + 100 + 4 * 52),
    (300, 100, ETHERNET_1500, 300 + 100 + 4 * 66),
    # 3_000 B need 3 packets at MSS 1448, 1 at 8949
    (3_000, 100, PEERED, 3_100 + (3 + 1 + 2) * 52),
    (3_000, 100, VPC, 3_100 + (1 + 1 + 2) * 52),
    # no answer (it never came): the request's packet and its ACK
    (300, 0, PEERED, 300 + 2 * 52),
    (0, 0, PEERED, 0),
])
def test_round_trip_counts_whole_packets_and_an_ack_per_message(request_bytes, response_bytes, framing, wire):
    assert round_trip_wire_bytes(request_bytes, response_bytes, framing) == wire


@pytest.mark.parametrize("kwargs", [{"path_mtu": 575}, {"path_mtu": 65_536}, {"link_header_bytes": -1},
                                    {"link_header_bytes": 65}])
def test_out_of_range_values_are_config_errors(kwargs):
    with pytest.raises(ConfigError, match="audit\\."):
        Framing(**kwargs)
