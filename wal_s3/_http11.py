"""The HTTP/1.1 client side of the WAL's two S3 requests, sans-IO: a request head encoder
and a response reader.

Why not h11 (which this replaced, and against which tests/unit/wal_s3/test_http11.py checks
this module byte for byte): h11 is general (both roles, every state, events as objects)
and cost ~190 µs of CPU per request and response on the 2-core sandbox, on the event loop
in the latency path of every WAL record (a PUT in the proxy, a ranged GET in the agent).
This module does only what a client of S3 needs, in ~20 µs: one request at a time on a
connection; answers framed by Content-Length, chunked, or the server's close; 1xx answers
skipped; keep-alive unless HTTP/1.0 or `Connection: close`. The grammar (status line,
header fields, obs-fold, chunk headers) is h11's, so both accept and refuse the same heads.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from typing import Final, NamedTuple


class ProtocolError(ValueError):
    """The server's answer is not HTTP/1.1 we can use, or a request header cannot be sent."""


class ResponseHead(NamedTuple):
    status: int
    reason: bytes
    headers: list[tuple[bytes, bytes]]  # names lower-cased, in the order received
    http_version: bytes  # b"1.1", b"1.0"


class Signal(enum.Enum):
    """next_event()'s two answers besides a head or a body piece. An enum, so `event is
    NEED_DATA` narrows the event's union for the type checker as it does at run time."""

    NEED_DATA = "NEED_DATA"  # feed more bytes (receive_data)
    END = "END"  # the answer is complete

    def __repr__(self) -> str:
        return self.value


NEED_DATA: Final = Signal.NEED_DATA
END: Final = Signal.END

MAX_HEAD_BYTES = 64 * 1024  # h11's default max_incomplete_event_size is 16 KiB; S3 heads are < 2 KiB

_TOKEN = re.compile(rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+")
_FIELD_VALUE_BAD = re.compile(rb"[\x00\r\n]|^[ \t]|[ \t]$")
_STATUS_LINE = re.compile(rb"HTTP/(?P<version>[0-9]\.[0-9]) (?P<status>[0-9]{3})(?: (?P<reason>(?:[ \t]|[^\x00\s])*))?")
_HEADER_FIELD = re.compile(
    rb"(?P<name>[-!#$%&'*+.^_`|~0-9a-zA-Z]+):[ \t]*(?P<value>(?:[^\x00\s]+(?:[ \t]+[^\x00\s]+)*)?)[ \t]*")
_OBS_FOLD = re.compile(rb"[ \t]+")
_BLANK_LINE = re.compile(rb"\n\r?\n")
_CHUNK_HEADER = re.compile(rb"(?P<size>[0-9A-Fa-f]{1,20})(?:;.*)?[ \t]*\r\n")


def encode_request_head(method: str, target: str, headers: Iterable[tuple[str, str]]) -> bytes:
    """`METHOD target HTTP/1.1`, the headers as given (names' case kept), a blank line.

    The caller sends the body and must include Content-Length for one (and Host).
    Raises ProtocolError for a name that is not a token, or a value with CR, LF or NUL
    (header injection) or with leading/trailing whitespace.
    """
    lines = [f"{method} {target} HTTP/1.1\r\n".encode("ascii")]
    for name, value in headers:
        raw_name, raw_value = name.encode("ascii"), value.encode("ascii")
        if not _TOKEN.fullmatch(raw_name) or _FIELD_VALUE_BAD.search(raw_value):
            raise ProtocolError(f"illegal header {name!r}: {value!r}")
        lines.append(raw_name + b": " + raw_value + b"\r\n")
    lines.append(b"\r\n")
    return b"".join(lines)


class ResponseReader:
    """Reads one response to a request of `method` (b"GET", b"PUT", ...).

    Feed bytes with receive_data (b"" when the server closed the connection); next_event()
    returns NEED_DATA, the ResponseHead, then body pieces (bytes), then END. After END,
    `keep_alive` says whether the connection can carry another request. Raises
    ProtocolError for anything malformed, or for a close before the answer's end.
    """

    def __init__(self, method: bytes) -> None:
        self._head_request = method == b"HEAD"
        self._buffer = bytearray()
        # A Content-Length body piece as it was received, handed out as is: an 8 MiB GET
        # body went through the buffer and out of it, two copies besides the caller's join.
        self._direct: bytes | None = None
        self._closed = False
        self._state = "head"  # head, length, chunk_header, chunk_data, chunk_end, trailers, until_close, done
        self._remaining = 0  # bytes left of the Content-Length body or of the current chunk
        self.keep_alive = False
        self.head: ResponseHead | None = None

    def receive_data(self, data: bytes) -> None:
        if data:
            if self._closed:
                raise ProtocolError("data after the connection closed")
            if (self._state == "length" and not self._buffer and self._direct is None
                    and len(data) <= self._remaining):
                self._direct = bytes(data)  # no copy for bytes; the body's next piece
                return
            if self._direct is not None:  # keep the order: the pending piece goes first
                self._buffer += self._direct
                self._direct = None
            self._buffer += data
        else:
            self._closed = True

    def next_event(self) -> ResponseHead | bytes | Signal:
        state = self._state
        if state == "head":
            return self._read_head()
        if state == "length":
            return self._read_counted(then="done")
        if state in ("chunk_header", "chunk_data", "chunk_end", "trailers"):
            return self._read_chunked()
        if state == "until_close":
            if self._buffer:
                return self._take(len(self._buffer))
            if self._closed:
                self._state = "done"
                return END
            return NEED_DATA
        return END

    # ---- the head -----------------------------------------------------------------------

    def _read_head(self) -> ResponseHead | bytes | Signal:
        buffer = self._buffer
        while True:
            if buffer[:2] == b"\r\n" or buffer[:1] == b"\n":
                raise ProtocolError("empty line where a status line was expected")
            match = _BLANK_LINE.search(buffer)
            if match is None:
                if len(buffer) > MAX_HEAD_BYTES:
                    raise ProtocolError(f"response head longer than {MAX_HEAD_BYTES} bytes")
                if self._closed:
                    raise ProtocolError("the server closed the connection before a complete answer"
                                        if buffer else "the server closed the connection without answering")
                return NEED_DATA
            end = match.end()
            lines = bytes(buffer[:end]).split(b"\n")[:-2]  # the blank line's two pieces
            del buffer[:end]
            head = _parse_head([line[:-1] if line.endswith(b"\r") else line for line in lines])
            if 100 <= head.status < 200:
                if head.status == 101:
                    raise ProtocolError("101 Switching Protocols to a request that asked for no upgrade")
                continue  # 100 Continue and other interim answers: the final one follows
            self.head = head
            self._frame(head)
            return head

    def _frame(self, head: ResponseHead) -> None:
        """Choose how the body ends, as RFC 7230 3.3.3 (and h11) does."""
        lengths = [v for n, v in head.headers if n == b"content-length"]
        encodings = [v for n, v in head.headers if n == b"transfer-encoding"]
        closes = any(b"close" in (t.strip().lower() for t in v.split(b","))
                     for n, v in head.headers if n == b"connection")
        self.keep_alive = head.http_version == b"1.1" and not closes
        if self._head_request or head.status in (204, 304):
            self._state = "done"
        elif encodings:
            if [e.strip().lower() for v in encodings for e in v.split(b",")] != [b"chunked"]:
                raise ProtocolError(f"unsupported Transfer-Encoding {encodings!r}")
            self._state = "chunk_header"
        elif lengths:
            values = {v.strip() for length in lengths for v in length.split(b",")}
            if len(values) != 1 or not next(iter(values)).isdigit():
                raise ProtocolError(f"bad Content-Length {lengths!r}")
            self._remaining = int(next(iter(values)))
            self._state = "length" if self._remaining else "done"
        else:
            self._state = "until_close"
            self.keep_alive = False

    # ---- the body -----------------------------------------------------------------------

    def _take(self, n: int) -> bytes:
        with memoryview(self._buffer) as view:  # one copy out of the buffer (a slice of it would be a second)
            piece = bytes(view[:n])
        del self._buffer[:n]
        return piece

    def _read_counted(self, then: str) -> bytes | Signal:
        if self._remaining == 0:
            self._state = then
            return END if then == "done" else self._read_chunked()
        if self._direct is not None:
            piece, self._direct = self._direct, None
            self._remaining -= len(piece)
            if self._remaining == 0:
                self._state = then
            return piece
        if not self._buffer:
            if self._closed:
                raise ProtocolError(f"the server closed the connection {self._remaining} bytes before the body's end")
            return NEED_DATA
        piece = self._take(min(self._remaining, len(self._buffer)))
        self._remaining -= len(piece)
        if self._remaining == 0:
            self._state = then
        return piece

    def _read_chunked(self) -> bytes | Signal:
        while True:
            state = self._state
            if state == "chunk_data":
                return self._read_counted(then="chunk_end")
            if state == "trailers":  # after the last chunk: trailer fields (ignored), then a blank line
                if self._buffer[:2] == b"\r\n" or self._buffer[:1] == b"\n":
                    del self._buffer[:2 if self._buffer[:1] == b"\r" else 1]
                    self._state = "done"
                    return END
                match = _BLANK_LINE.search(self._buffer)
                if match is None:
                    return self._need_more("the trailer")
                lines = bytes(self._buffer[:match.end()]).split(b"\n")[:-2]
                del self._buffer[:match.end()]
                _parse_fields([line[:-1] if line.endswith(b"\r") else line for line in lines])
                self._state = "done"
                return END
            line_end = self._buffer.find(b"\r\n")
            if line_end == -1:
                return self._need_more("a chunk header")
            if state == "chunk_end":
                if line_end != 0:
                    raise ProtocolError("chunk data longer than its size")
                del self._buffer[:2]
                self._state = "chunk_header"
                continue
            match = _CHUNK_HEADER.fullmatch(self._buffer, 0, line_end + 2)
            if match is None:
                raise ProtocolError(f"bad chunk header {bytes(self._buffer[:line_end])[:40]!r}")
            size = int(match["size"], 16)
            del self._buffer[:line_end + 2]
            if size == 0:
                self._state = "trailers"
                continue
            self._remaining = size
            self._state = "chunk_data"

    def _need_more(self, what: str) -> Signal:
        if self._closed:
            raise ProtocolError(f"the server closed the connection inside {what}")
        if len(self._buffer) > MAX_HEAD_BYTES:
            raise ProtocolError(f"{what} longer than {MAX_HEAD_BYTES} bytes")
        return NEED_DATA


def _parse_head(lines: list[bytes]) -> ResponseHead:
    if not lines:
        raise ProtocolError("no status line")
    status = _STATUS_LINE.fullmatch(lines[0])
    if status is None:
        raise ProtocolError(f"bad status line {lines[0][:80]!r}")
    return ResponseHead(int(status["status"]), status["reason"] or b"", _parse_fields(lines[1:]),
                        status["version"])


def _parse_fields(lines: list[bytes]) -> list[tuple[bytes, bytes]]:
    """Header lines -> [(lower-cased name, value)], obs-fold continuation lines joined."""
    joined: list[bytes] = []
    for line in lines:
        fold = _OBS_FOLD.match(line)
        if fold:
            if not joined:
                raise ProtocolError("continuation line at the start of the headers")
            joined[-1] += b" " + line[fold.end():]
        else:
            joined.append(line)
    fields: list[tuple[bytes, bytes]] = []
    for line in joined:
        match = _HEADER_FIELD.fullmatch(line)
        if match is None:
            raise ProtocolError(f"bad header line {line[:80]!r}")
        name, value = match["name"].lower(), match["value"]
        # As h11 stores them: one Content-Length for a list of equal ones (a list of unequal
        # ones is refused when the body is framed), Transfer-Encoding lower-cased.
        if name == b"content-length":
            values = {v.strip() for v in value.split(b",")}
            if len(values) == 1:
                value = values.pop()
            if any(n == b"content-length" for n, _ in fields):
                if (name, value) not in fields:
                    raise ProtocolError("conflicting Content-Length headers")
                continue
        elif name == b"transfer-encoding":
            value = value.lower()
        fields.append((name, value))
    return fields
