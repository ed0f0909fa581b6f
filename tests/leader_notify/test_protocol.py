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
    MAX_FRAME_BYTES,
    AuthError,
    EntryResult,
    FrameDecoder,
    Keyring,
    MessageType,
    NotifyEntry,
    NotifyRequest,
    NotifyResponse,
    ProtocolError,
    ReplayGuard,
    RequestStatus,
    decode_request,
    decode_response,
    encode_frame,
    encode_request,
    encode_response,
    key_allowed,
)

KEY = b"0123456789abcdef"  # 16 bytes, the minimum
OTHER_KEY = b"fedcba9876543210"
NONCE = bytes(range(16))

REQUEST = NotifyRequest(
    request_id=7, source_zone="az1", dest_zone="az2", proxy_id="p", epoch=3, bucket="b",
    key="wal/k", zone_offset=100, zone_length=50,
    entries=(NotifyEntry("t", 2, 100, 50, 0xDEADBEEF, 5, 1000, 1, 42),),
)

REQUEST_PAYLOAD = bytes.fromhex(
    "0000000000000007"  # request_id u64 = 7
    "0003" "617a31"  # source_zone "az1"
    "0003" "617a32"  # dest_zone "az2"
    "0001" "70"  # proxy_id "p"
    "0001" "62"  # bucket "b"
    "0005" "77616c2f6b"  # key "wal/k"
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
    EntryResult(0, 12), EntryResult(46, -1, True), EntryResult(6)))

RESPONSE_PAYLOAD = bytes.fromhex(
    "0000000000000007"  # request_id u64 = 7
    "00"  # status u8 = OK
    "0000"  # message "" (u16 length 0)
    "00000003"  # result count u32 = 3
    "0000" "000000000000000c" "00"  # error 0, base_offset 12, flags 0
    "002e" "ffffffffffffffff" "01"  # error 46 DUPLICATE_SEQUENCE_NUMBER, offset -1, duplicate flag
    "0006" "ffffffffffffffff" "00"  # error 6 NOT_LEADER_OR_FOLLOWER, offset -1
)


def test_request_payload_golden():
    assert encode_request(REQUEST) == REQUEST_PAYLOAD
    assert decode_request(REQUEST_PAYLOAD) == REQUEST


def test_response_payload_golden():
    assert encode_response(RESPONSE) == RESPONSE_PAYLOAD
    assert decode_response(RESPONSE_PAYLOAD) == RESPONSE


def test_frame_golden():
    payload = b"\x01\x02"
    key_id = hashlib.sha256(b"azsidecar-notify-key-id\x00" + KEY).digest()[:4]
    signed = (
        bytes.fromhex("00000040")  # u32 length of the rest: 30 header + 2 payload + 32 MAC = 64
        + bytes.fromhex("01")  # version 1
        + bytes.fromhex("01")  # type 1 = request
        + key_id  # 4-byte key id
        + bytes.fromhex("0000018bcfe56800")  # timestamp_ms i64 = 1700000000000
        + NONCE  # 16-byte nonce
        + payload
    )
    expected = signed + hmac.new(KEY, signed, hashlib.sha256).digest()
    frame_bytes = encode_frame(Keyring([KEY]), MessageType.REQUEST, payload, 1_700_000_000_000, NONCE)
    assert frame_bytes == expected
    dec = FrameDecoder(Keyring([KEY]))
    dec.receive_data(frame_bytes)
    frame = dec.next_frame()
    assert (frame.type, frame.timestamp_ms, frame.nonce, frame.payload) == (
        MessageType.REQUEST, 1_700_000_000_000, NONCE, payload)
    assert dec.next_frame() is None


def test_rotation_old_and_new_key_verify_unknown_refused():
    old_signed = encode_frame(Keyring([OTHER_KEY]), MessageType.REQUEST, b"x", 1, NONCE)
    new_signed = encode_frame(Keyring([KEY]), MessageType.REQUEST, b"y", 1, NONCE)
    dec = FrameDecoder(Keyring([KEY, OTHER_KEY]))
    dec.receive_data(old_signed + new_signed)
    assert dec.next_frame().payload == b"x"
    assert dec.next_frame().payload == b"y"
    only_new = FrameDecoder(Keyring([KEY]))
    only_new.receive_data(old_signed)
    with pytest.raises(AuthError):
        only_new.next_frame()


def test_any_flipped_bit_fails_auth_or_framing():
    good = encode_frame(Keyring([KEY]), MessageType.REQUEST, REQUEST_PAYLOAD, 5, NONCE)
    for i in range(len(good)):
        bad = bytearray(good)
        bad[i] ^= 0x10
        dec = FrameDecoder(Keyring([KEY]))
        dec.receive_data(bytes(bad))
        try:
            frame = dec.next_frame()
        except ProtocolError:
            continue
        # A flipped length bit may make the decoder wait for more bytes; never accept.
        assert frame is None, f"flipped byte {i} was accepted"


def test_oversized_length_refused_before_buffering():
    dec = FrameDecoder(Keyring([KEY]))
    dec.receive_data((MAX_FRAME_BYTES).to_bytes(4, "big"))
    with pytest.raises(ProtocolError):
        dec.next_frame()


def test_replay_guard_window_and_nonce():
    g = ReplayGuard(window_ms=1000, max_nonces=3)
    assert g.check(10_000, b"a", now_ms=10_000)
    assert not g.check(10_000, b"a", now_ms=10_001)  # same nonce again
    assert not g.check(8_000, b"b", now_ms=10_000)  # 2 s old
    assert not g.check(12_000, b"c", now_ms=10_000)  # 2 s in the future
    assert g.check(10_001, b"d", now_ms=10_001)
    assert g.check(10_002, b"e", now_ms=10_002)
    # Full: adding "f" forgets "a" (ts 10_000), so anything at or before 10_000 is refused now.
    assert g.check(10_003, b"f", now_ms=10_003)
    assert not g.check(10_000, b"a", now_ms=10_004)
    assert not g.check(9_999, b"z", now_ms=10_004)


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
    entries=st.lists(entries, max_size=5).map(tuple))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(req=requests, cuts=st.lists(st.integers(0, 10_000), max_size=6))
def test_roundtrip_with_arbitrary_splits(req, cuts):
    frames = b"".join(encode_frame(Keyring([KEY]), MessageType.REQUEST, encode_request(req), i, NONCE)
                      for i in range(2))
    dec = FrameDecoder(Keyring([KEY]))
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
    dec = FrameDecoder(Keyring([KEY]))
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
