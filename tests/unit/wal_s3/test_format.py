"""The WAL codec on its own: golden bytes, property round trip, corruption, hostile lengths.

Imports nothing but the codec (and crc32c to build the golden bytes by hand).
"""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from wal_s3.format import (
    COPY_CHUNK_BYTES,
    MAX_HEADER_BYTES,
    WalEntry,
    WalFormatError,
    _parse_zone_range_checked,
    encode_object,
    header_length,
    parse_header,
    parse_object,
    parse_zone_range,
)


def test_crc32c_library_is_castagnoli():
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value (RFC 3720 B.4)


def golden() -> bytes:
    """One zone 'az1', one entry t-0 with batch b'AB', built field by field."""
    entry_head = (
        b"\x00\x01" b"t"                      # topic length 1, topic
        b"\x00\x00\x00\x00"                   # partition 0
        b"\x00\x00\x00\x00\x00\x00\x00\x05"   # producer_id 5
        b"\x00\x01"                           # producer_epoch 1
        b"\x00\x00\x00\x07"                   # base_sequence 7
        b"\x00\x00\x00\x01"                   # record_count 1
        b"\x00\x00\x00\x02"                   # batch_length 2
        + struct.pack(">I", crc32c(b"AB"))    # batch crc32c
    )
    entry = entry_head + struct.pack(">I", crc32c(entry_head)) + b"AB"
    assert len(entry) == 39
    header = (
        b"AZWL"                               # magic
        b"\x00\x01"                           # format version 1
        b"\x00\x00"                           # flags
        b"\x00\x00\x00\x46"                   # header_length 70
        b"\x00\x00\x00\x00\x00\x00\x00\x01"   # epoch 1
        b"\x00\x00\x00\x00\x00\x00\x00\x02"   # sequence 2
        b"\x00\x00\x00\x00\x00\x00\x00\x03"   # created_ms 3
        b"\x00\x01" b"w"                      # writer_id
        b"\x00\x01"                           # zone count 1
        b"\x00\x03" b"az1"                    # zone name
        b"\x00\x00\x00\x00\x00\x00\x00\x46"   # zone offset 70
        b"\x00\x00\x00\x00\x00\x00\x00\x27"   # zone length 39
        b"\x00\x00\x00\x01"                   # entry count 1
    )
    header += struct.pack(">I", crc32c(header))
    assert len(header) == 70
    body = header + entry
    return body + struct.pack(">I", crc32c(body)) + b"LWZA"


def test_golden_bytes():
    e = WalEntry("t", 0, 5, 1, 7, 1, b"AB")
    enc = encode_object(writer_id="w", epoch=1, sequence=2, created_ms=3, entries_by_zone={"az1": [e]})
    assert enc.data == golden()
    share = enc.zones["az1"]
    assert (share.offset, share.length) == (70, 39)
    ref = share.entries[0]
    assert (ref.offset, ref.length, ref.crc32c) == (70 + 37, 2, crc32c(b"AB"))
    assert enc.data[ref.offset:ref.offset + ref.length] == b"AB"
    parsed = parse_object(golden())
    assert parsed.header.writer_id == "w" and parsed.header.epoch == 1 and parsed.header.sequence == 2
    assert parsed.header.created_ms == 3
    [got] = parsed.zones["az1"]
    assert (got.topic, got.partition, got.producer_id, got.producer_epoch, got.base_sequence, got.record_count) == \
        ("t", 0, 5, 1, 7, 1)
    assert bytes(got.batch) == b"AB" and got.crc32c == crc32c(b"AB")
    assert enc.crc32c == crc32c(golden())  # the PUT's checksum: the whole object, trailer included


@pytest.mark.parametrize("batch_len", [COPY_CHUNK_BYTES - 1, COPY_CHUNK_BYTES, COPY_CHUNK_BYTES + 1,
                                       3 * COPY_CHUNK_BYTES + 17])
def test_batches_copied_in_chunks_keep_every_byte_and_checksum(batch_len):
    """Batches larger than a copy chunk are copied and checksummed chunk by chunk: the bytes,
    each entry's CRC, the trailer's and the whole object's are those of the whole input."""
    big = bytes((i * 7 + batch_len) % 251 for i in range(batch_len))
    small = b"tail"
    entries = [WalEntry("t", 0, 5, 1, 7, 3, big), WalEntry("t", 1, 5, 1, 0, 1, memoryview(small))]
    enc = encode_object(writer_id="w", epoch=1, sequence=2, created_ms=3, entries_by_zone={"az1": entries})
    first, second = enc.zones["az1"].entries
    assert enc.data[first.offset:first.offset + batch_len] == big and first.crc32c == crc32c(big)
    assert enc.data[second.offset:second.offset + 4] == small and second.crc32c == crc32c(small)
    assert struct.unpack(">I", enc.data[-8:-4])[0] == crc32c(bytes(enc.data[:-8]))
    assert enc.data[-4:] == b"LWZA"
    assert enc.crc32c == crc32c(bytes(enc.data))
    assert [bytes(e.batch) for e in parse_object(bytes(enc.data)).zones["az1"]] == [big, small]


@pytest.mark.parametrize("spare_len, kept_len", [(0, 1024 * 1024), (10, 1024 * 1024), (200_000, 200_000),
                                                 (76_915, 76_915), (3 * 1024 * 1024 + 5, 3 * 1024 * 1024 + 5)])
def test_encoding_into_a_spare_buffer_gives_the_same_bytes(spare_len, kept_len):
    """A reused buffer full of old bytes holds the object at its start and `data` views
    exactly the object: a shorter buffer grows to a whole MiB, a longer one keeps its length
    and the old bytes past the object (resizing a large buffer costs fresh pages)."""
    entries = [WalEntry("t", 0, 5, 1, 7, 1, bytes(range(256)) * 300)]
    fresh = encode_object(writer_id="w", epoch=1, sequence=2, created_ms=3, entries_by_zone={"az1": entries})
    assert len(fresh.data) == 70 + 37 + 256 * 300 + 8 == 76_915
    spare = bytearray(b"\xee" * spare_len)
    reused = encode_object(writer_id="w", epoch=1, sequence=2, created_ms=3, entries_by_zone={"az1": entries},
                           into=spare)
    assert isinstance(reused.data, memoryview) and reused.data.obj is spare
    assert bytes(reused.data) == fresh.data and reused.crc32c == fresh.crc32c
    assert len(spare) == kept_len
    tail = b"\xee" * 16 if spare_len >= 76_915 + 16 else b"\x00" * 16 if spare_len < 76_915 else b""
    assert spare[76_915:76_915 + 16] == tail
    reused.data.release()
    spare.append(0)  # no view of the buffer is left behind: it can be resized again


names = st.text(st.characters(min_codepoint=48, max_codepoint=122), min_size=1, max_size=12)
entries = st.builds(
    WalEntry,
    topic=st.text(min_size=1, max_size=40).filter(lambda t: len(t.encode()) <= 249),
    partition=st.integers(0, 2**31 - 1),
    producer_id=st.integers(-(2**63), 2**63 - 1),
    producer_epoch=st.integers(-(2**15), 2**15 - 1),
    base_sequence=st.integers(-(2**31), 2**31 - 1),
    record_count=st.integers(0, 2**31 - 1),
    batch=st.binary(max_size=300),
    crc32c=st.none(),  # the encoder computes it
)
objects = st.dictionaries(names, st.lists(entries, max_size=6), max_size=5)


def same(a: WalEntry, b: WalEntry) -> bool:
    return (a.topic, a.partition, a.producer_id, a.producer_epoch, a.base_sequence, a.record_count,
            bytes(a.batch)) == (b.topic, b.partition, b.producer_id, b.producer_epoch, b.base_sequence,
                                b.record_count, bytes(b.batch))


@settings(max_examples=200, deadline=None)
@given(objects, st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))
def test_round_trip(by_zone, epoch, sequence):
    enc = encode_object(writer_id="proxy-a", epoch=epoch, sequence=sequence, created_ms=-1,
                        entries_by_zone=by_zone)
    parsed = parse_object(enc.data)
    assert (parsed.header.epoch, parsed.header.sequence, parsed.header.created_ms) == (epoch, sequence, -1)
    assert list(parsed.zones) == list(by_zone)
    for zone, want in by_zone.items():
        share = enc.zones[zone]
        from_range = parse_zone_range(enc.data[share.offset:share.offset + share.length], len(want))
        for got_list in (parsed.zones[zone], from_range):
            assert len(got_list) == len(want)
            assert all(same(g, w) for g, w in zip(got_list, want))
        for ref, w in zip(share.entries, want):
            assert enc.data[ref.offset:ref.offset + ref.length] == bytes(w.batch)
            assert ref.crc32c == crc32c(bytes(w.batch))


def reencode(writer_id: str, epoch: int, sequence: int, created_ms: int, by_zone: dict) -> bytes:
    """The layout of docs/wal-format.md written out again, independently of the encoder."""
    def text(s: str) -> bytes:
        return struct.pack(">H", len(s.encode())) + s.encode()

    zone_bodies = []
    for entries in by_zone.values():
        body = b""
        for e in entries:
            head = text(e.topic) + struct.pack(">iqhiiII", e.partition, e.producer_id, e.producer_epoch,
                                               e.base_sequence, e.record_count, len(e.batch), crc32c(bytes(e.batch)))
            body += head + struct.pack(">I", crc32c(head)) + bytes(e.batch)
        zone_bodies.append(body)
    header_len = 12 + 24 + 2 + len(writer_id.encode()) + 2 + sum(2 + len(z.encode()) + 20 for z in by_zone) + 4
    index, offset = b"", header_len
    for zone, body, entries in zip(by_zone, zone_bodies, by_zone.values()):
        index += text(zone) + struct.pack(">QQI", offset, len(body), len(entries))
        offset += len(body)
    header = b"AZWL" + struct.pack(">HHI", 1, 0, header_len) + struct.pack(">QQq", epoch, sequence, created_ms)
    header += text(writer_id) + struct.pack(">H", len(by_zone)) + index
    header += struct.pack(">I", crc32c(header))
    whole = header + b"".join(zone_bodies)
    return whole + struct.pack(">I", crc32c(whole)) + b"LWZA"


@settings(max_examples=300, deadline=None)
@given(objects, st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.integers(-(2**63), 2**63 - 1),
       st.none() | st.integers(-3000, 3000))
def test_encoder_matches_an_independent_encoding_byte_for_byte(by_zone, epoch, sequence, created_ms, slack):
    want = reencode("proxy-a", epoch, sequence, created_ms, by_zone)
    # A reused buffer (slack bytes longer or shorter than the object, full of old bytes), or none.
    into = None if slack is None else bytearray(b"\xa5" * max(0, len(want) + slack))
    enc = encode_object(writer_id="proxy-a", epoch=epoch, sequence=sequence, created_ms=created_ms,
                        entries_by_zone=by_zone, into=into)
    # A bytearray or a view of the reused one: what S3Store.put_if_absent sends in one piece.
    assert type(enc.data) is (bytearray if into is None else memoryview)
    assert into is None or enc.data.obj is into
    assert enc.data == want


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_single_corrupted_byte_is_detected(data):
    by_zone = {"az1": [WalEntry("orders", 3, 9, 0, 100, 2, b"x" * 20), WalEntry("t", 0, -1, -1, -1, 1, b"")],
               "az2": [WalEntry("pay", 1, 9, 0, 5, 1, bytes(range(16)))]}
    blob = encode_object(writer_id="w1", epoch=4, sequence=8, created_ms=99, entries_by_zone=by_zone)
    pos = data.draw(st.integers(0, len(blob.data) - 1))
    xor = data.draw(st.integers(1, 255))
    bad = bytearray(blob.data)
    bad[pos] ^= xor
    with pytest.raises(WalFormatError):
        parse_object(bytes(bad))
    # The same corruption inside a zone's range is caught by that range alone.
    for share in blob.zones.values():
        if share.offset <= pos < share.offset + share.length:
            with pytest.raises(WalFormatError):
                parse_zone_range(bytes(bad[share.offset:share.offset + share.length]), len(share.entries))


def test_every_truncation_is_detected():
    blob = encode_object(writer_id="w1", epoch=1, sequence=1, created_ms=0,
                         entries_by_zone={"a": [WalEntry("t", 0, 1, 0, 0, 1, b"abc")]}).data
    for n in range(len(blob)):
        with pytest.raises(WalFormatError):
            parse_object(blob[:n])


def test_zone_range_cut_at_an_entry_boundary_is_detected_by_count():
    e = WalEntry("t", 0, 1, 0, 0, 1, b"abc")
    enc = encode_object(writer_id="w", epoch=1, sequence=1, created_ms=0, entries_by_zone={"a": [e, e]})
    share = enc.zones["a"]
    first_entry_end = share.entries[0].offset + 3  # the first entry's batch is b"abc"
    with pytest.raises(WalFormatError, match="holds 1 entries, index says 2"):
        parse_zone_range(enc.data[share.offset:first_entry_end], expected_entries=2)


def test_hostile_batch_length_is_bounds_checked_not_allocated():
    head = b"\x00\x01t" + struct.pack(">iqhiiII", 0, 1, 0, 0, 1, 0xFFFFFFFF, 0)
    rng = head + struct.pack(">I", crc32c(head)) + b"short"
    with pytest.raises(WalFormatError, match="needs 4294967295 bytes"):
        parse_zone_range(rng)


def test_unknown_version_and_foreign_objects_are_named():
    blob = bytearray(golden())
    blob[5] = 2
    with pytest.raises(WalFormatError, match="unsupported WAL format version 2"):
        parse_object(bytes(blob))
    with pytest.raises(WalFormatError, match="bad magic"):
        parse_object(b"PK\x03\x04" + bytes(100))
    with pytest.raises(WalFormatError, match="header_length"):
        header_length(b"AZWL\x00\x01\x00\x00" + struct.pack(">I", MAX_HEADER_BYTES + 1))


def test_header_parses_from_a_prefix_of_the_object():
    blob = golden()
    h = parse_header(blob[:70])
    assert dict(h.zones)["az1"].offset == 70 and h.zones["az1"].length == 39 and h.zones["az1"].entry_count == 1
    with pytest.raises(WalFormatError, match="header is 70 bytes, only 69 given"):
        parse_header(blob[:69])


@pytest.mark.parametrize("kwargs, message", [
    ({"writer_id": ""}, "writer_id"),
    ({"epoch": -1}, "epoch"),
    ({"entries_by_zone": {"": []}}, "zone name"),
    ({"entries_by_zone": {"a": [WalEntry("", 0, 0, 0, 0, 0, b"")]}}, "topic"),
    ({"entries_by_zone": {"a": [WalEntry("t", -1, 0, 0, 0, 0, b"")]}}, "partition"),
    ({"entries_by_zone": {"a": [WalEntry("t", 0, 0, 0, 0, 0, b"x", crc32c=1)]}}, "does not match"),
])
def test_encoder_rejects_bad_input(kwargs, message):
    args = {"writer_id": "w", "epoch": 1, "sequence": 1, "created_ms": 0, "entries_by_zone": {}}
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        encode_object(**args)


def _outcome(parse, data, expected):
    try:
        return [(e.topic, e.partition, bytes(e.batch), e.crc32c) for e in parse(data, expected)]
    except WalFormatError as exc:
        return f"{type(exc).__name__}: {exc}"


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_straight_zone_parse_answers_as_the_step_by_step_one(data):
    """parse_zone_range's straight loop and _parse_zone_range_checked: the same entries for a
    good range, the same error for any corrupted byte, truncation or wrong count."""
    entries = [WalEntry("orders", 3, 9, 0, 100, 2, b"x" * 20), WalEntry("t", 0, -1, -1, -1, 1, b""),
               WalEntry("orders", 4, 9, 0, 5, 1, bytes(range(16)))]
    enc = encode_object(writer_id="w1", epoch=4, sequence=8, created_ms=99, entries_by_zone={"az1": entries})
    share = enc.zones["az1"]
    good = bytes(enc.data[share.offset:share.offset + share.length])
    bad = bytearray(good)
    pos = data.draw(st.integers(0, len(good) - 1))
    bad[pos] ^= data.draw(st.integers(1, 255))
    cut = good[:data.draw(st.integers(0, len(good)))]
    expected = data.draw(st.sampled_from([None, 3, 2]))
    for case in (good, bytes(bad), cut):
        assert _outcome(parse_zone_range, case, expected) == _outcome(_parse_zone_range_checked, case, expected)
    assert _outcome(parse_zone_range, good, 3) == [("orders", 3, b"x" * 20, crc32c(b"x" * 20)), ("t", 0, b"", crc32c(b"")),
                                                  ("orders", 4, bytes(range(16)), crc32c(bytes(range(16))))]
