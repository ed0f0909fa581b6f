"""Codec tests: golden bytes with every field spelled out, and fuzzing of the decoder.

Imports nothing but the codec (and hashlib/hmac to compute the expected MAC from the spec).
"""

from __future__ import annotations

import hashlib
import hmac

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leader_notify.protocol import (
    HELLO_FRAME_BYTES,
    MAX_FRAME_BYTES,
    AuthError,
    Channel,
    EntryResult,
    Keyring,
    MessageType,
    NotifyEntry,
    NotifyRequest,
    NotifyResponse,
    ProtocolError,
    RequestStatus,
    Role,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    key_allowed,
)

KEY = b"0123456789abcdef"  # 16 bytes, the minimum
OTHER_KEY = b"fedcba9876543210"
AGENT_C = bytes(range(16))  # the agent's challenge
PROXY_C = bytes(range(16, 32))  # the proxy's challenge

REQUEST = NotifyRequest(
    request_id=7, source_zone="az1", dest_zone="az2", proxy_id="p", epoch=3, bucket="b",
    key="wal/k", zone_offset=100, zone_length=50,
    entries=(NotifyEntry("t", 2, 100, 50, 0xDEADBEEF, 5, 1000, 1, 42),), share="az2.1of2",
)

REQUEST_PAYLOAD = bytes.fromhex(
    "0000000000000007"  # request_id u64 = 7
    "0003" "617a31"  # source_zone "az1"
    "0003" "617a32"  # dest_zone "az2"
    "0001" "70"  # proxy_id "p"
    "0001" "62"  # bucket "b"
    "0005" "77616c2f6b"  # key "wal/k"
    "0008" "617a322e316f6632"  # share "az2.1of2"
    "00"  # flags u8: bit 0 = prefetch
    "0000000000000003"  # epoch i64 = 3
    "0000000000000064"  # zone_offset u64 = 100
    "0000000000000032"  # zone_length u64 = 50
    "00000001"  # entry count u32 = 1
    "0001" "74"  # topic "t"
    "00000002"  # partition i32 = 2
    "0000000000000064"  # offset u64 = 100
    "00000032"  # length u32 = 50
    "deadbeef"  # crc32c u32
    "00000005"  # record_count i32 = 5
    "00000000000003e8"  # producer_id i64 = 1000
    "0001"  # producer_epoch i16 = 1
    "0000002a"  # base_sequence i32 = 42
)

RESPONSE = NotifyResponse(7, RequestStatus.OK, "", (
    EntryResult(0, 12, append_us=1500), EntryResult(46, -1, True), EntryResult(6)))

RESPONSE_PAYLOAD = bytes.fromhex(
    "0000000000000007"  # request_id u64 = 7
    "00"  # status u8 = OK
    "0000"  # message "" (u16 length 0)
    "00000003"  # result count u32 = 3
    "0000" "000000000000000c" "00" "000005dc"  # error 0, base_offset 12, flags 0, appended in 1,500 us
    "002e" "ffffffffffffffff" "01" "ffffffff"  # error 46 DUPLICATE_SEQUENCE_NUMBER, offset -1, duplicate, no append
    "0006" "ffffffffffffffff" "00" "ffffffff"  # error 6 NOT_LEADER_OR_FOLLOWER, offset -1, no append
)


def test_request_payload_golden():
    assert encode_request(REQUEST) == REQUEST_PAYLOAD
    assert decode_request(REQUEST_PAYLOAD) == REQUEST


def test_response_payload_golden():
    assert encode_response(RESPONSE) == RESPONSE_PAYLOAD
    assert decode_response(RESPONSE_PAYLOAD) == RESPONSE


def test_append_time_saturates_and_unknown_round_trips():
    # 2**32 us (71.6 min) does not fit: reported as the largest value, never as "unknown"
    long = NotifyResponse(1, RequestStatus.OK, "", (EntryResult(0, 5, append_us=2**32), EntryResult(0, 6)))
    payload = encode_response(long)
    # each result is 15 bytes (i16, i64, u8, u32): the append times end each of the last two
    assert (payload[-19:-15], payload[-4:]) == (bytes.fromhex("fffffffe"), bytes.fromhex("ffffffff"))
    assert [r.append_us for r in decode_response(payload).results] == [0xFFFFFFFE, -1]


def test_hello_frame_golden():
    key_id = hashlib.sha256(b"azsidecar-notify-key-id\x00" + KEY).digest()[:4]
    signed = (
        bytes.fromhex("0000003e")  # u32 length of the rest: 14 header + 16 challenge + 32 MAC = 62
        + bytes.fromhex("03")  # version 3
        + bytes.fromhex("04")  # type 4 = HELLO_AGENT
        + key_id  # 4-byte key id
        + bytes.fromhex("0000000000000000")  # sequence u64 = 0
        + AGENT_C  # payload: the 16-byte challenge
    )
    expected = signed + hmac.new(KEY, b"azsidecar-notify-v3 hello\x00" + signed, hashlib.sha256).digest()
    agent = Channel(Keyring([KEY]), Role.AGENT, AGENT_C)
    assert agent.hello() == expected
    assert len(expected) == HELLO_FRAME_BYTES == 66


def test_request_frame_golden_binds_both_challenges_and_sequence():
    payload = b"\x01\x02"
    key_id = hashlib.sha256(b"azsidecar-notify-key-id\x00" + KEY).digest()[:4]
    signed = (
        bytes.fromhex("00000030")  # u32 length of the rest: 14 header + 2 payload + 32 MAC = 48
        + bytes.fromhex("03")  # version 3
        + bytes.fromhex("01")  # type 1 = request
        + key_id
        + bytes.fromhex("0000000000000001")  # sequence u64 = 1 (the proxy's HELLO was 0)
        + payload
    )
    mac = hmac.new(KEY, b"azsidecar-notify-v3 session\x00" + AGENT_C + PROXY_C + signed, hashlib.sha256).digest()
    proxy, agent = pair()
    assert proxy.send(MessageType.REQUEST, payload) == signed + mac
    agent.receive_data(signed + mac)
    frame = agent.next_frame()
    assert (frame.type, frame.sequence, frame.payload) == (MessageType.REQUEST, 1, payload)
    assert agent.next_frame() is None


def pair(agent_keys=(KEY,), proxy_keys=(KEY,), agent_c=AGENT_C, proxy_c=PROXY_C) -> tuple[Channel, Channel]:
    """A proxy channel and an agent channel after their HELLO exchange."""
    proxy = Channel(Keyring(list(proxy_keys)), Role.PROXY, proxy_c)
    agent = Channel(Keyring(list(agent_keys)), Role.AGENT, agent_c)
    agent.receive_data(proxy.hello())
    proxy.receive_data(agent.hello())
    assert agent.next_frame() is None and proxy.next_frame() is None
    assert agent.established and proxy.established
    return proxy, agent


def test_response_comes_back_on_the_same_connection():
    proxy, agent = pair()
    agent.receive_data(proxy.send(MessageType.REQUEST, b"req"))
    assert agent.next_frame().payload == b"req"
    proxy.receive_data(agent.send(MessageType.RESPONSE, b"resp"))
    frame = proxy.next_frame()
    assert (frame.type, frame.sequence, frame.payload) == (MessageType.RESPONSE, 1, b"resp")


def test_captured_frame_refused_on_another_connection_even_to_the_same_agent_challenge():
    proxy, agent = pair()
    captured = proxy.send(MessageType.REQUEST, REQUEST_PAYLOAD)
    # Another agent (or the same one restarted): another challenge.
    _, other_agent = pair(agent_c=b"\xaa" * 16)
    other_agent.receive_data(captured)
    with pytest.raises(AuthError):
        other_agent.next_frame()
    # Even an agent that drew the same challenge refuses it: the proxy's challenge differs.
    _, same_challenge = pair(proxy_c=b"\xbb" * 16)
    same_challenge.receive_data(captured)
    with pytest.raises(AuthError):
        same_challenge.next_frame()


def test_captured_frame_refused_again_on_its_own_connection():
    proxy, agent = pair()
    captured = proxy.send(MessageType.REQUEST, b"once")
    agent.receive_data(captured)
    assert agent.next_frame().payload == b"once"
    agent.receive_data(captured)  # played again: sequence 1 where 2 is due
    with pytest.raises(ProtocolError, match="sequence 1, expected 2"):
        agent.next_frame()


def test_reflected_frames_refused():
    proxy, agent = pair()
    # The agent's own HELLO sent back to it is not a proxy HELLO.
    lone = Channel(Keyring([KEY]), Role.AGENT, AGENT_C)
    lone.receive_data(lone.hello())
    with pytest.raises(ProtocolError, match="HELLO_PROXY"):
        lone.next_frame()
    # A response sent to the agent as if it were a request: wrong direction.
    agent.receive_data(agent.send(MessageType.RESPONSE, b"x"))
    with pytest.raises(ProtocolError):
        agent.next_frame()


def test_rotation_old_and_new_key_verify_unknown_refused():
    # Mid-rotation: everyone verifies both keys; the proxy still signs with the old one.
    old_proxy, agent = pair(agent_keys=(KEY, OTHER_KEY), proxy_keys=(OTHER_KEY, KEY))
    new_proxy, agent2 = pair(agent_keys=(KEY, OTHER_KEY), proxy_keys=(KEY,))
    agent.receive_data(old_proxy.send(MessageType.REQUEST, b"x"))
    assert agent.next_frame().payload == b"x"
    agent2.receive_data(new_proxy.send(MessageType.REQUEST, b"y"))
    assert agent2.next_frame().payload == b"y"
    only_new = Channel(Keyring([KEY]), Role.AGENT, AGENT_C)
    only_new.receive_data(Channel(Keyring([OTHER_KEY]), Role.PROXY, PROXY_C).hello())
    with pytest.raises(AuthError):
        only_new.next_frame()


def test_any_flipped_bit_fails_auth_or_framing():
    proxy, _ = pair()
    good = proxy.send(MessageType.REQUEST, REQUEST_PAYLOAD)
    for i in range(len(good)):
        bad = bytearray(good)
        bad[i] ^= 0x10
        _, agent = pair()
        agent.receive_data(bytes(bad))
        try:
            frame = agent.next_frame()
        except ProtocolError:
            continue
        # A flipped length bit may make the decoder wait for more bytes; never accept.
        assert frame is None, f"flipped byte {i} was accepted"


def test_only_a_hello_sized_frame_is_accepted_before_authentication():
    agent = Channel(Keyring([KEY]), Role.AGENT, AGENT_C)
    agent.receive_data((MAX_FRAME_BYTES - 4).to_bytes(4, "big"))  # announces the largest frame
    with pytest.raises(ProtocolError, match="before the HELLO"):
        agent.next_frame()
    assert agent.buffered_bytes == 4


def test_oversized_length_refused_before_buffering_after_authentication():
    _, agent = pair()
    agent.receive_data((MAX_FRAME_BYTES - 3).to_bytes(4, "big"))
    with pytest.raises(ProtocolError, match="outside"):
        agent.next_frame()


def test_key_allowed():
    assert key_allowed("wal", "pre/ab/az1/p/1/2", "wal", "pre/")
    assert not key_allowed("other", "pre/ab", "wal", "pre/")
    assert not key_allowed("wal", "elsewhere/ab", "wal", "pre/")
    assert not key_allowed("wal", "pre/../secret", "wal", "pre/")
    assert not key_allowed("wal", "pre/a\nb", "wal", "pre/")


names = st.text(min_size=0, max_size=30)
entries = st.builds(
    NotifyEntry, topic=names, partition=st.integers(-(2**31), 2**31 - 1),
    offset=st.integers(0, 2**64 - 1), length=st.integers(0, 2**32 - 1), crc32c=st.integers(0, 2**32 - 1),
    record_count=st.integers(-(2**31), 2**31 - 1), producer_id=st.integers(-(2**63), 2**63 - 1),
    producer_epoch=st.integers(-(2**15), 2**15 - 1), base_sequence=st.integers(-(2**31), 2**31 - 1))
requests = st.builds(
    NotifyRequest, request_id=st.integers(0, 2**64 - 1), source_zone=names, dest_zone=names,
    proxy_id=names, epoch=st.integers(-(2**63), 2**63 - 1), bucket=names, key=names,
    zone_offset=st.integers(0, 2**64 - 1), zone_length=st.integers(0, 2**64 - 1),
    entries=st.lists(entries, max_size=5).map(tuple), share=names, prefetch=st.booleans())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(req=requests, cuts=st.lists(st.integers(0, 10_000), max_size=6))
def test_roundtrip_with_arbitrary_splits(req, cuts):
    proxy = Channel(Keyring([KEY]), Role.PROXY, PROXY_C)
    dec = Channel(Keyring([KEY]), Role.AGENT, AGENT_C)
    proxy.receive_data(dec.hello())
    hello = proxy.hello()
    assert proxy.next_frame() is None
    frames = hello + b"".join(proxy.send(MessageType.REQUEST, encode_request(req)) for _ in range(2))
    got = []
    points = sorted({min(c, len(frames)) for c in cuts} | {0, len(frames)})
    for a, b in zip(points, points[1:]):
        dec.receive_data(frames[a:b])
        while (f := dec.next_frame()) is not None:
            got.append(decode_request(f.payload))
    assert got == [req, req]
    assert dec.buffered_bytes == 0


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=2000))
def test_garbage_never_crashes(data):
    dec = Channel(Keyring([KEY]), Role.AGENT, AGENT_C)
    dec.receive_data(data)
    try:
        while dec.next_frame() is not None:
            pass
    except ProtocolError:
        pass
    for decode in (decode_request, decode_response):
        try:
            decode(data)
        except ProtocolError:
            pass


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=300), pos=st.integers(0, 300))
def test_mutated_authenticated_payload_is_protocol_error_or_valid(data, pos):
    # An authenticated peer with a bug: payload garbage must give ProtocolError, not a crash.
    payload = bytearray(REQUEST_PAYLOAD)
    payload[pos % len(payload):pos % len(payload)] = data
    try:
        decode_request(bytes(payload))
    except ProtocolError:
        pass
