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
    Incompatible,
    Keyring,
    MessageType,
    Negotiated,
    NotifyEntry,
    NotifyRequest,
    NotifyResponse,
    ProtocolError,
    Reconnect,
    RequestStatus,
    Role,
    VersionMismatch,
    agent_answer_version,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    key_allowed,
    ordered_allowed,
    proxy_outcome,
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


def test_ordered_flag_golden():
    # Version 4 defines flag bit 1 (ordered); the payload is the same in versions 3 and 4.
    assert REQUEST_PAYLOAD[41] == 0x00  # flags: after request_id (8) and six strings (33 bytes)
    payload = REQUEST_PAYLOAD[:41] + bytes.fromhex("02") + REQUEST_PAYLOAD[42:]  # flags u8: bit 1 = ordered
    ordered = NotifyRequest(**{**REQUEST.__dict__, "ordered": True})
    assert encode_request(ordered) == payload
    assert decode_request(payload) == ordered
    with pytest.raises(ProtocolError, match="unknown request flags 0x4"):
        decode_request(REQUEST_PAYLOAD[:41] + bytes.fromhex("04") + REQUEST_PAYLOAD[42:])


def test_append_time_saturates_and_unknown_round_trips():
    # 2**32 us (71.6 min) does not fit: reported as the largest value, never as "unknown"
    long = NotifyResponse(1, RequestStatus.OK, "", (EntryResult(0, 5, append_us=2**32), EntryResult(0, 6)))
    payload = encode_response(long)
    # each result is 15 bytes (i16, i64, u8, u32): the append times end each of the last two
    assert (payload[-19:-15], payload[-4:]) == (bytes.fromhex("fffffffe"), bytes.fromhex("ffffffff"))
    assert [r.append_us for r in decode_response(payload).results] == [0xFFFFFFFE, -1]


KEY_ID = hashlib.sha256(b"azsidecar-notify-key-id\x00" + KEY).digest()[:4]


def hello_bytes(version: int, type_: int, challenge: bytes) -> bytes:
    """A HELLO as the spec lays it out, written field by field (every version alike)."""
    signed = (
        bytes.fromhex("0000003e")  # u32 length of the rest: 14 header + 16 challenge + 32 MAC = 62
        + bytes([version])  # version u8: the proxy's offer, or the version the agent answers in
        + bytes([type_])  # type u8: 3 = HELLO_PROXY, 4 = HELLO_AGENT
        + KEY_ID  # 4-byte key id
        + bytes.fromhex("0000000000000000")  # sequence u64 = 0
        + challenge  # payload: the 16-byte challenge
    )
    return signed + hmac.new(KEY, b"azsidecar-notify-v3 hello\x00" + signed, hashlib.sha256).digest()


def test_hello_frames_golden_proxy_offers_agent_answers():
    proxy = Channel(Keyring([KEY]), Role.PROXY, PROXY_C)
    offer = proxy.hello()
    assert offer == (bytes.fromhex("0000003e" "04" "03") + KEY_ID + bytes(8) + PROXY_C
                     + hmac.new(KEY, b"azsidecar-notify-v3 hello\x00" + offer[:-32], hashlib.sha256).digest())
    assert offer == hello_bytes(4, 3, PROXY_C)
    assert len(offer) == HELLO_FRAME_BYTES == 66
    agent = Channel(Keyring([KEY]), Role.AGENT, AGENT_C)
    with pytest.raises(RuntimeError, match="answers the proxy's HELLO"):
        agent.hello()  # the agent speaks second
    agent.receive_data(offer)
    assert agent.next_frame() is None and agent.version == 4
    assert agent.hello() == hello_bytes(4, 4, AGENT_C)
    proxy.receive_data(hello_bytes(4, 4, AGENT_C))
    assert proxy.next_frame() is None and proxy.established and proxy.version == 4


def test_a_previous_release_proxy_gets_a_version_3_answer_and_v3_frames():
    # A version-3 proxy's HELLO (it sends it at connect, before the agent's).
    agent = Channel(Keyring([KEY]), Role.AGENT, AGENT_C)
    agent.receive_data(hello_bytes(3, 3, PROXY_C))
    assert agent.next_frame() is None and agent.version == 3
    assert agent.hello() == hello_bytes(3, 4, AGENT_C)
    signed = (bytes.fromhex("00000030" "03" "01") + KEY_ID  # length 48, version 3, type 1 = request
              + bytes.fromhex("0000000000000001") + b"\x01\x02")  # sequence 1, payload
    mac = hmac.new(KEY, b"azsidecar-notify-v3 session\x00" + AGENT_C + PROXY_C + signed, hashlib.sha256).digest()
    agent.receive_data(signed + mac)
    frame = agent.next_frame()
    assert (frame.version, frame.type, frame.payload) == (3, MessageType.REQUEST, b"\x01\x02")
    answer = agent.send(MessageType.RESPONSE, b"r")
    assert answer[4] == 3  # the answer's version byte


def test_a_previous_release_agent_makes_the_proxy_reconnect_offering_3():
    # A version-3 agent sent its HELLO (as 3) at accept; it will close on our v4 HELLO.
    proxy = Channel(Keyring([KEY]), Role.PROXY, PROXY_C)
    proxy.hello()
    proxy.receive_data(hello_bytes(3, 4, AGENT_C))
    with pytest.raises(VersionMismatch) as caught:
        proxy.next_frame()
    assert caught.value.outcome == Reconnect(3)
    assert not proxy.established
    # The next connection offers 3, and the same early v3 HELLO settles it.
    again = Channel(Keyring([KEY]), Role.PROXY, PROXY_C, offer=3)
    assert again.hello() == hello_bytes(3, 3, PROXY_C)
    again.receive_data(hello_bytes(3, 4, AGENT_C))
    assert again.next_frame() is None and again.version == 3
    assert again.send(MessageType.REQUEST, b"x")[4] == 3


def test_a_newer_proxy_is_answered_in_this_agents_newest_version():
    agent = Channel(Keyring([KEY]), Role.AGENT, AGENT_C)
    agent.receive_data(hello_bytes(5, 3, PROXY_C))  # a release that speaks 5 (and 4)
    assert agent.next_frame() is None and agent.version == 4
    assert agent.hello() == hello_bytes(4, 4, AGENT_C)


def test_a_version_below_the_oldest_is_refused_at_the_hello():
    agent = Channel(Keyring([KEY]), Role.AGENT, AGENT_C)
    agent.receive_data(hello_bytes(2, 3, PROXY_C))
    with pytest.raises(ProtocolError, match=r"unsupported protocol version 2 \(this agent speaks 3\.\.4\)"):
        agent.next_frame()
    proxy = Channel(Keyring([KEY]), Role.PROXY, PROXY_C)
    proxy.hello()
    proxy.receive_data(hello_bytes(5, 4, AGENT_C))  # an agent that answers above our offer
    with pytest.raises(VersionMismatch, match="upgrade the proxy"):
        proxy.next_frame()


def test_a_frame_of_another_version_on_the_connection_is_refused():
    proxy, agent = pair()  # version 4
    agent_c, proxy_c = proxy.challenges
    signed = (bytes.fromhex("0000002f" "03" "01") + KEY_ID + bytes.fromhex("0000000000000001") + b"\x01")
    mac = hmac.new(KEY, b"azsidecar-notify-v3 session\x00" + agent_c + proxy_c + signed, hashlib.sha256).digest()
    agent.receive_data(signed + mac)  # signed right, but version 3 on a version-4 connection
    with pytest.raises(ProtocolError, match="version 3 on a version-4 connection"):
        agent.next_frame()


@pytest.mark.parametrize(("offered", "oldest", "newest", "expected"), [
    (4, 3, 4, 4),  # the same release
    (3, 3, 4, 3),  # a previous release's proxy
    (5, 3, 4, 4),  # a newer proxy: our newest
    (2, 3, 4, None),  # older than we speak
    (9, 5, 6, 6),
    (4, 5, 6, None),
])
def test_agent_answer_version(offered, oldest, newest, expected):
    assert agent_answer_version(offered, oldest, newest) == expected


@pytest.mark.parametrize(("offered", "answered", "expected"), [
    (4, 4, Negotiated(4)),
    (3, 3, Negotiated(3)),  # a reconnect offering 3
    (4, 3, Reconnect(3)),  # a version-3 agent's early HELLO
    (5, 4, Negotiated(4)),  # a negotiating agent chose 4
    (4, 5, Incompatible("the agent speaks notify protocol v5 and later; this proxy speaks v3..v4: "
                        "upgrade the proxy")),
    (4, 2, Incompatible("the agent speaks notify protocol v2; this proxy speaks v3..v4: upgrade the agent")),
])
def test_proxy_outcome(offered, answered, expected):
    assert proxy_outcome(offered, answered) == expected


def test_ordered_requests_need_version_4():
    assert (ordered_allowed(3), ordered_allowed(4), ordered_allowed(5)) == (False, True, True)


def test_request_frame_golden_binds_both_challenges_and_sequence():
    payload = b"\x01\x02"
    key_id = hashlib.sha256(b"azsidecar-notify-key-id\x00" + KEY).digest()[:4]
    signed = (
        bytes.fromhex("00000030")  # u32 length of the rest: 14 header + 2 payload + 32 MAC = 48
        + bytes.fromhex("04")  # version 4 (agreed in the HELLOs)
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
    assert agent.next_frame() is None
    proxy.receive_data(agent.hello())
    assert proxy.next_frame() is None
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
    lone.receive_data(hello_bytes(4, 4, AGENT_C))
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
    hello = proxy.hello()
    answering = Channel(Keyring([KEY]), Role.AGENT, AGENT_C)  # the agent as it answers the HELLO
    answering.receive_data(hello)
    assert answering.next_frame() is None
    proxy.receive_data(answering.hello())
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
