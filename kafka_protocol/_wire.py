"""Kafka's primitive encodings shared by the codecs: int sizes, (compact) strings and
arrays, unsigned varints, tagged fields, and the error a peer's bad bytes raise.

Non-flexible versions prefix strings with an int16 length and arrays and bytes with an
int32 length (-1 = null); flexible versions (KIP-482) use an unsigned varint of length + 1
(0 = null) and end every struct with tagged fields.
"""

from __future__ import annotations

import struct

SIZE = struct.Struct(">i")
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
MAX_VARINT_SHIFT = 28  # a uvarint of a 32-bit length takes at most 5 bytes


class ProtocolError(ValueError):
    """The peer sent bytes that are not valid Kafka protocol; the connection must close.

    A ValueError: callers that catch a codec's ValueError keep working."""


def read_uvarint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """(value, position after it). Raises ProtocolError when cut short or longer than 5 bytes."""
    if pos < len(data) and data[pos] < 0x80:  # one byte: nearly every length and tag count
        return data[pos], pos + 1
    value = shift = 0
    while True:
        if pos >= len(data):
            raise ProtocolError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > MAX_VARINT_SHIFT:
            raise ProtocolError("varint longer than 5 bytes")


def skip_tagged_fields(data: bytes | memoryview, pos: int) -> int:
    """The position after the tagged fields at `pos`. Raises ProtocolError past the end."""
    if pos < len(data) and data[pos] == 0:  # none: nearly every struct
        return pos + 1
    count, pos = read_uvarint(data, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(data, pos)
        size, pos = read_uvarint(data, pos)
        pos += size
        if pos > len(data):
            raise ProtocolError("tagged field runs past the end of the frame")
    return pos


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


MAX_STRING_BYTES = 32767  # an int16 length prefix


def string(value: str | None, flexible: bool) -> bytes:
    """A nullable string. Raises ValueError when a non-flexible string exceeds an int16 length."""
    if value is None:
        return b"\x00" if flexible else b"\xff\xff"
    raw = value.encode("utf-8")
    if flexible:
        return uvarint(len(raw) + 1) + raw
    if len(raw) > MAX_STRING_BYTES:
        raise ValueError(f"string of {len(raw)} bytes does not fit an int16 length")
    return I16.pack(len(raw)) + raw


def array_length(n: int, flexible: bool) -> bytes:
    return uvarint(n + 1) if flexible else I32.pack(n)


def bytes_length(n: int | None, flexible: bool) -> bytes:
    """The length prefix of nullable bytes (None = null)."""
    if n is None:
        return b"\x00" if flexible else I32.pack(-1)
    return uvarint(n + 1) if flexible else I32.pack(n)


class Reader:
    """Reads primitives from `data` at `pos`; raises ProtocolError on bytes that cannot be."""

    __slots__ = ("data", "pos", "flexible", "what")

    def __init__(self, data: bytes | memoryview, flexible: bool, what: str) -> None:
        self.data = memoryview(data)
        self.pos = 0
        self.flexible = flexible
        self.what = what

    def _need(self, n: int) -> None:
        if n < 0 or self.pos + n > len(self.data):
            raise ProtocolError(f"{self.what} truncated at byte {self.pos} (needs {n} more)")

    def fixed(self, layout: struct.Struct) -> tuple[int, ...]:
        self._need(layout.size)
        values: tuple[int, ...] = layout.unpack_from(self.data, self.pos)
        self.pos += layout.size
        return values

    # int16, int32, length and tagged_fields are read per field of every produce request and
    # answer on the hot path: their common cases are written out rather than built on fixed().
    def int16(self) -> int:
        pos = self.pos
        if pos + 2 > len(self.data):
            self._need(2)
        self.pos = pos + 2
        value: int = I16.unpack_from(self.data, pos)[0]
        return value

    def int32(self) -> int:
        pos = self.pos
        if pos + 4 > len(self.data):
            self._need(4)
        self.pos = pos + 4
        value: int = I32.unpack_from(self.data, pos)[0]
        return value

    def length(self, nullable_int16: bool) -> int:
        """A length prefix; -1 means null."""
        if self.flexible:
            value, self.pos = read_uvarint(self.data, self.pos)
            return value - 1
        return self.int16() if nullable_int16 else self.int32()

    def string(self) -> str | None:
        n = self.length(nullable_int16=True)
        if n < 0:
            return None
        self._need(n)
        try:
            text = bytes(self.data[self.pos : self.pos + n]).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"{self.what}: a string at byte {self.pos} is not UTF-8") from exc
        self.pos += n
        return text

    def bytes_view(self) -> memoryview | None:
        n = self.length(nullable_int16=False)
        if n < 0:
            return None
        self._need(n)
        view = self.data[self.pos : self.pos + n]
        self.pos += n
        return view

    def array_length(self) -> int:
        """An array's element count, 0 for a null array. Raises ProtocolError for a count
        the remaining bytes cannot hold (every element takes at least one byte)."""
        n = self.length(nullable_int16=False)
        if n < -1:
            raise ProtocolError(f"{self.what}: array of {n} elements")
        if n > len(self.data) - self.pos:
            raise ProtocolError(f"{self.what}: array of {n} elements in {len(self.data) - self.pos} bytes")
        return max(n, 0)

    def tagged_fields(self) -> None:
        if self.flexible:
            pos = self.pos
            if pos < len(self.data) and self.data[pos] == 0:  # none
                self.pos = pos + 1
            else:
                self.pos = skip_tagged_fields(self.data, pos)

    def end(self) -> None:
        if self.pos != len(self.data):
            raise ProtocolError(f"{len(self.data) - self.pos} bytes after the end of a {self.what}")
