"""WAL object format: sans-IO encoder and parsers (bytes in, values out).

Strategy: an object is a header with a zone index, then each destination zone's entries
back to back, then a trailer. The zone index lets an agent fetch its whole share with one
ranged GET; every entry carries a CRC-32C of its own header fields and one of its raw
record batch, so a zone range verifies on its own without the rest of the object; the
trailer's CRC-32C covers the whole object for readers that hold all of it (GC, tools).
All integers are big-endian, as in Kafka. The parsers bounds-check every length before
slicing and never allocate from a length they read: batches come back as memoryview
slices of the caller's buffer. docs/wal-format.md has the byte layout table.

This module imports nothing but the standard library and `crc32c`: no trio, no boto3.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from crc32c import crc32c as _crc32c

MAGIC = b"AZWL"  # first four bytes of every WAL object
END_MAGIC = b"LWZA"  # last four bytes: a cheap check that the object is not cut short
FORMAT_VERSION = 1  # bump on any layout change; parsers reject versions they do not know

MAX_TOPIC_BYTES = 249  # Kafka's own topic name limit
MAX_ZONE_NAME_BYTES = 255  # AZ ids are ~8 chars; a bound keeps the index small
MAX_WRITER_ID_BYTES = 255  # proxy ids are short; bounded so the header stays small
MAX_ZONES = 64  # regions have at most a handful of AZs; guards the index loop
MAX_BATCH_BYTES = 2**31 - 1  # Kafka record batch sizes are int32
MAX_OBJECT_BYTES = 5 * 1024**3  # S3's single-PUT limit
MAX_HEADER_BYTES = 12 + 24 + 2 + MAX_WRITER_ID_BYTES + 2 + MAX_ZONES * (2 + MAX_ZONE_NAME_BYTES + 20) + 4

# Fixed-size pieces of the layout (see docs/wal-format.md).
_PREFIX = struct.Struct(">4sHHI")  # magic, version, flags, header_length
_HEADER_FIXED = struct.Struct(">QQq")  # epoch, sequence, created_ms
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_ZONE_FIXED = struct.Struct(">QQI")  # zone offset, zone length, entry count
_ENTRY_FIXED = struct.Struct(">iqhiiII")  # partition, producer_id, producer_epoch, base_sequence, record_count, batch_length, batch_crc32c
_ENTRY_FIELDS = struct.Struct(">iqhiiI")  # _ENTRY_FIXED without the batch's CRC (packed once it is known)
_TRAILER = struct.Struct(">I4s")  # object crc32c, end magic
TRAILER_BYTES = _TRAILER.size
# Batches are copied into an object this much at a time, each chunk checksummed while it is
# in the core's cache (256 KiB: a fraction of any server core's L2).
COPY_CHUNK_BYTES = 256 * 1024
# A buffer given to encode_object to reuse grows to a whole number of these and never
# shrinks: resizing a multi-MiB bytearray moves it to fresh pages (page faults, the kernel
# zeroing every page), which costs more than encoding the object, and objects of varying
# sizes resized the buffer on nearly every encode.
REUSE_GROWTH_BYTES = 1024 * 1024
PREFIX_BYTES = _PREFIX.size  # enough to learn header_length


class WalFormatError(ValueError):
    """The bytes are not a valid WAL object (or zone range): corrupt, truncated or foreign."""


class WalEntry(NamedTuple):
    """One raw Kafka record batch and the producer metadata the agent needs to append it.

    `crc32c` is the CRC-32C of `batch`; leave it None when building an entry, the encoder
    computes it. Parsed entries always carry it (verified).

    A NamedTuple, not a frozen dataclass: one is built per appended batch, and a frozen
    dataclass's __init__ (object.__setattr__ per field) costs ~1.3 us against ~0.4 us.
    """

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    batch: bytes | memoryview
    crc32c: int | None = None

    def __repr__(self) -> str:  # the batch is bulk payload: leave it out
        return (f"WalEntry(topic={self.topic!r}, partition={self.partition}, producer_id={self.producer_id}, "
                f"producer_epoch={self.producer_epoch}, base_sequence={self.base_sequence}, "
                f"record_count={self.record_count}, crc32c={self.crc32c})")


class EntryRef(NamedTuple):
    """Where one entry's raw batch sits in an object. offset/length cover the batch bytes only.

    A NamedTuple for the same reason as WalEntry: one per entry of every encoded object.
    """

    topic: str
    partition: int
    offset: int
    length: int
    crc32c: int
    record_count: int
    producer_id: int
    producer_epoch: int
    base_sequence: int


@dataclass(frozen=True)
class ZoneShare:
    """A zone's contiguous byte range in an object and the entries in it, in order."""

    offset: int
    length: int
    entries: tuple[EntryRef, ...]


@dataclass(frozen=True)
class ZoneIndexEntry:
    offset: int
    length: int
    entry_count: int


@dataclass(frozen=True)
class WalHeader:
    version: int
    writer_id: str
    epoch: int
    sequence: int
    created_ms: int
    header_length: int
    zones: Mapping[str, ZoneIndexEntry]


def reuse_capacity(object_bytes: int) -> int:
    """The length a reused buffer for an object of `object_bytes` grows to (REUSE_GROWTH_BYTES steps)."""
    return -(-object_bytes // REUSE_GROWTH_BYTES) * REUSE_GROWTH_BYTES


@dataclass(frozen=True)
class EncodedObject:
    # The object: a bytearray, or with `into` a memoryview of that buffer's first bytes (both
    # go out in one sendall, where botocore would re-chunk bytes).
    data: bytearray | memoryview = field(repr=False)
    zones: Mapping[str, ZoneShare]
    # CRC-32C of all of `data`, trailer included: the PUT's x-amz-checksum-crc32c, which S3
    # checks against the body it received (continued from the trailer's CRC, no extra pass).
    crc32c: int


@dataclass(frozen=True)
class ParsedObject:
    header: WalHeader
    zones: Mapping[str, list[WalEntry]]


def entry_encoded_size(entry: WalEntry) -> int:
    """Bytes this entry takes in an object (header fields, CRCs, batch)."""
    return 2 + len(entry.topic.encode()) + _ENTRY_FIXED.size + 4 + len(entry.batch)


def entry_head_size(topic: str) -> int:
    """Bytes of an entry before its batch: an entry starts this far before its batch offset."""
    return 2 + len(topic.encode()) + _ENTRY_FIXED.size + 4


def _header_size(writer_id_b: bytes, zone_names: Sequence[bytes]) -> int:
    return (_PREFIX.size + _HEADER_FIXED.size + 2 + len(writer_id_b) + 2
            + sum(2 + len(z) + _ZONE_FIXED.size for z in zone_names) + 4)


def _check_int(name: str, value: int, lo: int, hi: int) -> None:
    if not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{name}={value!r} outside {lo}..{hi}")


def encode_object(*, writer_id: str, epoch: int, sequence: int, created_ms: int,
                  entries_by_zone: Mapping[str, Sequence[WalEntry]], into: bytearray | None = None) -> EncodedObject:
    """Serialize one WAL object; zones keep the mapping's order, entries their order.

    `into`: a bytearray to reuse: the object is written at its start and the result's `data`
    is a memoryview of its first len(object) bytes (release it before `into` is reused). A
    shorter `into` grows to `reuse_capacity` of the object; a longer one keeps its length and
    its bytes past the object. Without `into` a new bytearray of the object's size is made.

    Raises ValueError if a field is out of range (our caller broke an invariant), including
    an entry whose given crc32c does not match its batch.
    """
    writer_id_b = writer_id.encode()
    if not 1 <= len(writer_id_b) <= MAX_WRITER_ID_BYTES:
        raise ValueError(f"writer_id must be 1..{MAX_WRITER_ID_BYTES} bytes, got {len(writer_id_b)}")
    _check_int("epoch", epoch, 0, 2**64 - 1)
    _check_int("sequence", sequence, 0, 2**64 - 1)
    _check_int("created_ms", created_ms, -(2**63), 2**63 - 1)
    if len(entries_by_zone) > MAX_ZONES:
        raise ValueError(f"{len(entries_by_zone)} zones, at most {MAX_ZONES}")
    zone_names = [z.encode() for z in entries_by_zone]
    for z in zone_names:
        if not 1 <= len(z) <= MAX_ZONE_NAME_BYTES:
            raise ValueError(f"zone name must be 1..{MAX_ZONE_NAME_BYTES} bytes, got {z!r}")

    # First the layout, touching no batch byte: every size and field is checked before the
    # copy, and the header (which holds only offsets and lengths) is known up front.
    header_len = _header_size(writer_id_b, zone_names)
    laid_out: list[tuple[str, int, int, list[tuple[WalEntry, bytes, bytes]]]] = []
    index_parts: list[bytes] = []
    pos = header_len
    for zone, zone_b in zip(entries_by_zone, zone_names):
        zone_start = pos
        items: list[tuple[WalEntry, bytes, bytes]] = []
        for e in entries_by_zone[zone]:
            topic_b = e.topic.encode()
            if not 1 <= len(topic_b) <= MAX_TOPIC_BYTES:
                raise ValueError(f"topic must be 1..{MAX_TOPIC_BYTES} bytes, got {e.topic!r}")
            if e.partition < 0 or e.record_count < 0:
                raise ValueError(f"partition {e.partition} and record_count {e.record_count} must be >= 0")
            batch_len = len(e.batch)
            if batch_len > MAX_BATCH_BYTES:
                raise ValueError(f"batch of {batch_len} bytes exceeds {MAX_BATCH_BYTES}")
            try:  # struct range-checks every field against its wire width
                fields = _ENTRY_FIELDS.pack(e.partition, e.producer_id, e.producer_epoch, e.base_sequence,
                                            e.record_count, batch_len)
            except struct.error as exc:
                raise ValueError(f"entry {e.topic}-{e.partition}: a field does not fit its width: {exc}") from exc
            items.append((e, _U16.pack(len(topic_b)) + topic_b, fields))
            pos += 2 + len(topic_b) + _ENTRY_FIXED.size + 4 + batch_len
        laid_out.append((zone, zone_start, pos - zone_start, items))
        index_parts.append(_U16.pack(len(zone_b)) + zone_b
                           + _ZONE_FIXED.pack(zone_start, pos - zone_start, len(items)))
    total = pos + TRAILER_BYTES
    if total > MAX_OBJECT_BYTES:
        raise ValueError(f"object of {total} bytes exceeds {MAX_OBJECT_BYTES}")

    header = (_PREFIX.pack(MAGIC, FORMAT_VERSION, 0, header_len)
              + _HEADER_FIXED.pack(epoch, sequence, created_ms)
              + _U16.pack(len(writer_id_b)) + writer_id_b
              + _U16.pack(len(zone_names)) + b"".join(index_parts))
    header += _U32.pack(_crc32c(header))
    assert len(header) == header_len, "header size computation and encoding disagree"

    # Then one copy into a bytearray (botocore and our S3 transport send it with one sendall
    # where bytes would be re-chunked). Each batch is checksummed chunk by chunk right after
    # its chunk is copied, and the object's running CRC reads the entry right after it was
    # written, while it is still in cache: one pass over memory for the copy and both CRCs.
    # (Run as passes of their own over a finished multi-MiB object, each CRC read the whole
    # object back from memory.)
    if into is None:
        data = bytearray(total)
    else:
        data = into
        if len(data) < total:
            data.extend(bytes(reuse_capacity(total) - len(data)))
    shares: dict[str, ZoneShare] = {}
    with memoryview(data) as view:
        view[:header_len] = header
        object_crc = _crc32c(header)
        pos = header_len
        for zone, zone_start, zone_length, items in laid_out:
            refs = []
            for e, topic_part, fields in items:
                batch_len = len(e.batch)
                batch_offset = pos + len(topic_part) + _ENTRY_FIXED.size + 4
                batch_crc = _copy_checksummed(view, batch_offset, e.batch, batch_len)
                if e.crc32c is not None and e.crc32c != batch_crc:
                    raise ValueError(f"entry crc32c {e.crc32c:#010x} does not match its batch ({batch_crc:#010x})")
                head = topic_part + fields + _U32.pack(batch_crc)
                head += _U32.pack(_crc32c(head))
                view[pos:batch_offset] = head
                object_crc = _crc32c(view[pos:batch_offset + batch_len], object_crc)
                refs.append(EntryRef(e.topic, e.partition, batch_offset, batch_len, batch_crc, e.record_count,
                                     e.producer_id, e.producer_epoch, e.base_sequence))
                pos = batch_offset + batch_len
            shares[zone] = ZoneShare(zone_start, zone_length, tuple(refs))
        _TRAILER.pack_into(data, pos, object_crc, END_MAGIC)
        whole_crc = _crc32c(view[pos:total], object_crc)
    return EncodedObject(data if into is None else memoryview(data)[:total], shares, whole_crc)


def _copy_checksummed(view: memoryview, at: int, batch: bytes | memoryview, length: int) -> int:
    """Copy `batch` into view[at:at + length]; returns the batch's CRC-32C, computed on each
    chunk right after its copy (while the chunk is in cache)."""
    source = memoryview(batch)
    crc = 0
    for start in range(0, length, COPY_CHUNK_BYTES):
        end = min(length, start + COPY_CHUNK_BYTES)
        chunk = view[at + start:at + end]
        chunk[:] = source[start:end]
        crc = _crc32c(chunk, crc)
    return crc


def header_length(prefix: bytes | memoryview) -> int:
    """header_length from the first PREFIX_BYTES of an object.

    Raises WalFormatError if the bytes are short, not a WAL object, an unknown version, or
    declare a header longer than MAX_HEADER_BYTES.
    """
    if len(prefix) < _PREFIX.size:
        raise WalFormatError(f"object prefix is {len(prefix)} bytes, need {_PREFIX.size}")
    hlen: int
    magic, version, flags, hlen = _PREFIX.unpack_from(prefix, 0)
    if magic != MAGIC:
        raise WalFormatError(f"bad magic {bytes(magic)!r}, expected {MAGIC!r}")
    if version != FORMAT_VERSION:
        raise WalFormatError(f"unsupported WAL format version {version} (this reader knows {FORMAT_VERSION})")
    if flags != 0:
        raise WalFormatError(f"unknown header flags {flags:#06x}")
    if not _PREFIX.size + _HEADER_FIXED.size + 8 <= hlen <= MAX_HEADER_BYTES:
        raise WalFormatError(f"header_length {hlen} outside {_PREFIX.size + _HEADER_FIXED.size + 8}..{MAX_HEADER_BYTES}")
    return hlen


class _Cursor:
    """Bounds-checked reads from a memoryview; every error names what was being read."""

    def __init__(self, view: memoryview, pos: int = 0, end: int | None = None) -> None:
        self.view = view
        self.pos = pos
        self.end = len(view) if end is None else end

    def take(self, n: int, what: str) -> memoryview:
        if n < 0 or self.pos + n > self.end:
            raise WalFormatError(f"{what}: needs {n} bytes at offset {self.pos}, only {self.end - self.pos} left")
        out = self.view[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, st: struct.Struct, what: str) -> tuple[Any, ...]:
        return st.unpack(self.take(st.size, what))

    def text(self, what: str, max_bytes: int) -> str:
        (n,) = self.unpack(_U16, f"{what} length")
        if not 1 <= n <= max_bytes:
            raise WalFormatError(f"{what} length {n} outside 1..{max_bytes} at offset {self.pos - 2}")
        raw = self.take(n, what)
        try:
            return bytes(raw).decode()
        except UnicodeDecodeError as exc:
            raise WalFormatError(f"{what} is not UTF-8 at offset {self.pos - n}") from exc


def parse_header(data: bytes | memoryview) -> WalHeader:
    """Parse and verify the header and zone index (`data` may hold more of the object).

    Raises WalFormatError on any malformed or inconsistent field or a header CRC mismatch.
    """
    view = memoryview(data)
    hlen = header_length(view)
    if len(view) < hlen:
        raise WalFormatError(f"header is {hlen} bytes, only {len(view)} given")
    (stored_crc,) = _U32.unpack_from(view, hlen - 4)
    actual = _crc32c(view[:hlen - 4])
    if stored_crc != actual:
        raise WalFormatError(f"header crc32c mismatch: stored {stored_crc:#010x}, computed {actual:#010x}")
    cur = _Cursor(view, _PREFIX.size, hlen - 4)
    epoch, sequence, created_ms = cur.unpack(_HEADER_FIXED, "epoch/sequence/created_ms")
    writer_id = cur.text("writer_id", MAX_WRITER_ID_BYTES)
    (zone_count,) = cur.unpack(_U16, "zone count")
    if zone_count > MAX_ZONES:
        raise WalFormatError(f"zone count {zone_count} exceeds {MAX_ZONES}")
    zones: dict[str, ZoneIndexEntry] = {}
    expected_offset = hlen
    for i in range(zone_count):
        name = cur.text(f"zone[{i}] name", MAX_ZONE_NAME_BYTES)
        offset, length, count = cur.unpack(_ZONE_FIXED, f"zone[{i}] range")
        if name in zones:
            raise WalFormatError(f"zone {name!r} appears twice in the index")
        if offset != expected_offset:
            raise WalFormatError(f"zone {name!r} starts at {offset}, expected {expected_offset} (zones are contiguous)")
        if length > MAX_OBJECT_BYTES or count > length:
            raise WalFormatError(f"zone {name!r} has length {length} and {count} entries: impossible")
        zones[name] = ZoneIndexEntry(offset, length, count)
        expected_offset = offset + length
    if cur.pos != cur.end:
        raise WalFormatError(f"{cur.end - cur.pos} unexpected bytes after the zone index")
    return WalHeader(FORMAT_VERSION, writer_id, epoch, sequence, created_ms, hlen, zones)


def parse_zone_range(data: bytes | memoryview, expected_entries: int | None = None) -> list[WalEntry]:
    """Parse one zone's byte range (as fetched with a ranged GET); verify every CRC.

    Batches are memoryview slices of `data`. Raises WalFormatError on any malformed entry,
    CRC mismatch, trailing bytes, or an entry count different from `expected_entries`.

    The agent parses every range it appends (512 entries per 8 MiB object of 16 KiB
    batches), so valid ranges take a straight loop (no cursor calls, each topic name
    decoded once); at the first check that fails, the range is parsed again by the
    step-by-step parser, whose error names exactly what is wrong.
    """
    view = memoryview(data)
    end = len(view)
    pos = 0
    entries: list[WalEntry] = []
    topics: dict[bytes, str] = {}
    fixed_size = _ENTRY_FIXED.size
    unpack_fixed = _ENTRY_FIXED.unpack_from
    while pos < end:
        start = pos
        if pos + 2 > end:
            return _parse_zone_range_checked(view, expected_entries)
        (n,) = _U16.unpack_from(view, pos)
        head_end = pos + 2 + n + fixed_size
        if not 1 <= n <= MAX_TOPIC_BYTES or head_end + 4 > end:
            return _parse_zone_range_checked(view, expected_entries)
        raw_topic = bytes(view[pos + 2:pos + 2 + n])
        topic = topics.get(raw_topic)
        if topic is None:
            try:
                topic = topics[raw_topic] = raw_topic.decode()
            except UnicodeDecodeError:
                return _parse_zone_range_checked(view, expected_entries)
        partition, producer_id, producer_epoch, base_sequence, record_count, batch_len, batch_crc = unpack_fixed(
            view, pos + 2 + n)
        (stored_head_crc,) = _U32.unpack_from(view, head_end)
        pos = head_end + 4
        if (stored_head_crc != _crc32c(view[start:head_end]) or partition < 0 or record_count < 0
                or pos + batch_len > end):
            return _parse_zone_range_checked(view, expected_entries)
        batch = view[pos:pos + batch_len]
        pos += batch_len
        if _crc32c(batch) != batch_crc:
            return _parse_zone_range_checked(view, expected_entries)
        entries.append(WalEntry(topic, partition, producer_id, producer_epoch, base_sequence,
                                record_count, batch, batch_crc))
    if expected_entries is not None and len(entries) != expected_entries:
        raise WalFormatError(f"zone range holds {len(entries)} entries, index says {expected_entries}")
    return entries


def _parse_zone_range_checked(data: bytes | memoryview, expected_entries: int | None) -> list[WalEntry]:
    """parse_zone_range step by step: raises the WalFormatError that names the first problem."""
    view = memoryview(data)
    cur = _Cursor(view)
    entries: list[WalEntry] = []
    while cur.pos < cur.end:
        start = cur.pos
        where = f"entry {len(entries)} at zone offset {start}"
        topic = cur.text(f"{where}: topic", MAX_TOPIC_BYTES)
        fixed = cur.unpack(_ENTRY_FIXED, f"{where}: fields")
        (stored_head_crc,) = cur.unpack(_U32, f"{where}: header crc32c")
        head_crc = _crc32c(view[start:cur.pos - 4])
        if stored_head_crc != head_crc:
            raise WalFormatError(f"{where}: header crc32c mismatch: stored {stored_head_crc:#010x}, computed {head_crc:#010x}")
        partition, producer_id, producer_epoch, base_sequence, record_count, batch_len, batch_crc = fixed
        if partition < 0 or record_count < 0:
            raise WalFormatError(f"{where}: negative partition {partition} or record_count {record_count}")
        batch = cur.take(batch_len, f"{where}: batch")
        actual = _crc32c(batch)
        if actual != batch_crc:
            raise WalFormatError(f"{where}: batch crc32c mismatch for {topic}-{partition}: stored {batch_crc:#010x}, computed {actual:#010x}")
        entries.append(WalEntry(topic, partition, producer_id, producer_epoch, base_sequence,
                                record_count, batch, batch_crc))
    if expected_entries is not None and len(entries) != expected_entries:
        raise WalFormatError(f"zone range holds {len(entries)} entries, index says {expected_entries}")
    return entries


def parse_object(data: bytes | memoryview) -> ParsedObject:
    """Parse a whole object: trailer, object CRC, header, every zone and every entry CRC.

    Raises WalFormatError if anything is malformed, truncated or does not match its CRC.
    """
    view = memoryview(data)
    if len(view) < _PREFIX.size + TRAILER_BYTES:
        raise WalFormatError(f"object is {len(view)} bytes, too short to be a WAL object")
    header_length(view)  # magic and version first: a foreign object gets the clearer error
    stored_crc, end_magic = _TRAILER.unpack_from(view, len(view) - TRAILER_BYTES)
    if end_magic != END_MAGIC:
        raise WalFormatError(f"bad end magic {bytes(end_magic)!r}: object truncated or not a WAL object")
    actual = _crc32c(view[:len(view) - TRAILER_BYTES])
    if stored_crc != actual:
        raise WalFormatError(f"object crc32c mismatch: stored {stored_crc:#010x}, computed {actual:#010x}")
    header = parse_header(view)
    body_end = len(view) - TRAILER_BYTES
    last = header.header_length
    zones: dict[str, list[WalEntry]] = {}
    for name, z in header.zones.items():
        if z.offset + z.length > body_end:
            raise WalFormatError(f"zone {name!r} range {z.offset}+{z.length} runs past the body end {body_end}")
        zones[name] = parse_zone_range(view[z.offset:z.offset + z.length], z.entry_count)
        last = z.offset + z.length
    if last != body_end:
        raise WalFormatError(f"{body_end - last} bytes between the last zone and the trailer")
    return ParsedObject(header, zones)
