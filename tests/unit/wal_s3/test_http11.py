"""wal_s3/_http11.py reads S3's answers as h11 does, and writes request heads as h11 does,
byte for byte: same status, headers, body and keep-alive verdict for every way the bytes
can arrive, and both refuse the same malformed answers."""

from __future__ import annotations

import random

import h11
import pytest

from wal_s3._http11 import END, NEED_DATA, ProtocolError, ResponseHead, ResponseReader, encode_request_head

MOTO_HEADS = (b"Server: Werkzeug/3.1.9 Python/3.11.2\r\nDate: Sun, 22 Nov 2026 18:00:00 GMT\r\n"
              b"x-amz-request-id: ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789\r\n"
              b"x-amz-id-2: ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789\r\n")

VALID = {
    "put 200": b"HTTP/1.1 200 OK\r\n" + MOTO_HEADS + b'ETag: "abc"\r\nContent-Length: 0\r\n\r\n',
    "get 206": (b"HTTP/1.1 206 Partial Content\r\n" + MOTO_HEADS + b"content-range: bytes 100-109/300\r\n"
                b"Content-Length: 10\r\n\r\n0123456789"),
    "chunked, extensions, trailer": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                                     b"5;name=value\r\nhello\r\nA  \r\n, world!!!\r\n0\r\nx-trailer: t\r\n\r\n"),
    "chunked, upper-case hex, no trailer": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n1A\r\n"
                                           + b"z" * 26 + b"\r\n0\r\n\r\n",
    "100 continue first": b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    "http/1.0": b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nabc",
    "connection close": b"HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\nContent-Length: 3\r\n\r\nabc",
    "until close": b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nall of this until EOF",
    "204": b"HTTP/1.1 204 No Content\r\nx-amz-request-id: 1\r\n\r\n",
    "304": b"HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n",
    "obs-fold": b"HTTP/1.1 200 OK\r\nX-Folded: one\r\n  two\r\n\tthree\r\nContent-Length: 0\r\n\r\n",
    "no reason": b"HTTP/1.1 200\r\nContent-Length: 1\r\n\r\nx",
    "bare LF": b"HTTP/1.1 200 OK\nContent-Length: 1\nX-A: b\n\nx",
    "error xml": (b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/xml\r\nContent-Length: 109\r\n\r\n"
                  b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>SignatureDoesNotMatch</Code>"
                  b"<Message>bad</Message></Error>"),
    "repeated equal content-length": b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\nabcde",
    "empty value, whitespace around values": b"HTTP/1.1 200 OK\r\nX-Empty:\r\nX-Pad: \t v a \t\r\nContent-Length: 0\r\n\r\n",
    "content-length and chunked": (b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
                                   b"3\r\nabc\r\n0\r\n\r\n"),
    "103 early hints first": b"HTTP/1.1 103 Early Hints\r\nLink: x\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx",
    "content-length twice, equal": b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
    "zero-length chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
}

INVALID = {
    "bad status": b"HTTP/1.1 20 OK\r\nContent-Length: 0\r\n\r\n",
    "not http": b"SSH-2.0-OpenSSH_9.2\r\n\r\n",
    "no colon": b"HTTP/1.1 200 OK\r\nNoColonHere\r\n\r\n",
    "space before colon": b"HTTP/1.1 200 OK\r\nBad : x\r\nContent-Length: 0\r\n\r\n",
    "NUL in value": b"HTTP/1.1 200 OK\r\nX: a\x00b\r\nContent-Length: 0\r\n\r\n",
    "content-length not a number": b"HTTP/1.1 200 OK\r\nContent-Length: 12a\r\n\r\n",
    "content-lengths differ": b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
    "gzip transfer-encoding": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nxx",
    "closed mid-body": b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
    "closed mid-chunk": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhe",
    "chunk longer than its size": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n",
    "bad chunk size": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    "closed before answering": b"",
    "closed mid-head": b"HTTP/1.1 200 OK\r\nContent-Len",
    "fold at start": b"HTTP/1.1 200 OK\r\n continued\r\nContent-Length: 0\r\n\r\n",
    "negative content-length": b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
    "transfer-encoding twice": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"
                                b"0\r\n\r\n"),
    "http/2 status line": b"HTTP/2 200 OK\r\n\r\n",
    "101": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n",
}


def ours(method: bytes, pieces: list[bytes]) -> tuple:
    reader = ResponseReader(method)
    feed = iter([*pieces, b""])
    head, body = None, bytearray()
    while True:
        event = reader.next_event()
        if event is NEED_DATA:
            reader.receive_data(next(feed))
        elif isinstance(event, ResponseHead):
            head = (event.status, event.reason, event.headers, event.http_version)
        elif event is END:
            return head, bytes(body), reader.keep_alive
        else:
            body += event


def theirs(method: bytes, pieces: list[bytes]) -> tuple:
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method=method, target="/", headers=[("Host", "h")]))
    conn.send(h11.EndOfMessage())
    feed = iter([*pieces, b""])
    head, body, eof = None, bytearray(), False
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = next(feed)
            eof = not data
            conn.receive_data(data)
        elif isinstance(event, h11.Response):
            head = (event.status_code, event.reason, [(n, v) for n, v in event.headers], event.http_version)
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            # Reusable: both sides DONE (h11's test) and the answer did not end by the server's close.
            return head, bytes(body), conn.our_state is h11.DONE and conn.their_state is h11.DONE and not eof
        elif isinstance(event, h11.ConnectionClosed):
            raise h11.RemoteProtocolError("closed")


def splits(raw: bytes, rng: random.Random) -> list[list[bytes]]:
    """Every cut in two, byte by byte, and a few random cuttings."""
    out = [[raw], [raw[i:i + 1] for i in range(len(raw))]]
    out += [[raw[:i], raw[i:]] for i in range(1, len(raw))]
    for _ in range(10):
        cuts = sorted(rng.sample(range(1, len(raw)), min(len(raw) - 1, rng.randint(1, 6)))) if len(raw) > 1 else []
        out.append([raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)])])
    return out


@pytest.mark.parametrize("name", sorted(VALID))
@pytest.mark.parametrize("method", [b"GET", b"PUT"])
def test_valid_answers_read_as_h11_reads_them(name, method):
    raw = VALID[name]
    expected = theirs(method, [raw])
    for pieces in splits(raw, random.Random(name)):
        assert ours(method, pieces) == expected, pieces


@pytest.mark.parametrize("name", sorted(INVALID))
def test_malformed_answers_refused_as_h11_refuses_them(name):
    raw = INVALID[name]
    with pytest.raises(h11.RemoteProtocolError):
        theirs(b"GET", [raw])
    for pieces in splits(raw, random.Random(name)) if raw else [[]]:
        with pytest.raises(ProtocolError):
            ours(b"GET", pieces)


def test_hand_checked_answer():
    head, body, keep_alive = ours(b"GET", [VALID["chunked, extensions, trailer"]])
    assert head == (200, b"OK", [(b"transfer-encoding", b"chunked")], b"1.1")
    assert body == b"hello, world!!!"
    assert keep_alive is True
    assert ours(b"GET", [VALID["until close"]])[1:] == (b"all of this until EOF", False)


def test_the_next_answer_s_bytes_stay_unread():
    raw = VALID["get 206"]
    reader = ResponseReader(b"GET")
    reader.receive_data(raw + b"HTTP/1.1 200 OK\r\n")
    events = []
    while (event := reader.next_event()) is not END:
        events.append(event)
    assert events[-1] == b"0123456789" and reader.keep_alive


@pytest.mark.parametrize("method,target,headers", [
    ("PUT", "/wal/wal/v1/use1-az1/w/000001.wal",
     [("Host", "127.0.0.1:4566"), ("If-None-Match", "*"), ("Content-Length", "1234"), ("x-amz-meta-zones", "a,b"),
      ("X-Amz-Date", "20261122T180005Z"), ("Authorization", "AWS4-HMAC-SHA256 Credential=A/x, Signature=f")]),
    ("GET", "/wal/k%20ey", [("Host", "bucket.s3.amazonaws.com"), ("Range", "bytes=0-99"), ("User-Agent", "azsidecar")]),
])
def test_request_heads_written_as_h11_writes_them(method, target, headers):
    conn = h11.Connection(h11.CLIENT)
    assert encode_request_head(method, target, headers) == conn.send(
        h11.Request(method=method, target=target, headers=headers))


@pytest.mark.parametrize("name,value", [("X-Bad", "a\r\nInjected: 1"), ("X-Bad", "a\nb"), ("Bad Name", "v"),
                                        ("X-Nul", "a\x00"), ("X-Lead", " v")])
def test_request_headers_that_could_split_the_request_are_refused(name, value):
    with pytest.raises(ProtocolError):
        encode_request_head("GET", "/k", [("Host", "h"), (name, value)])


def test_a_content_length_body_piece_is_handed_out_as_received():
    # An 8 MiB GET body used to be copied into the reader's buffer and out again; a piece
    # that arrives after the head, within the body's length, now goes out as the same object.
    reader = ResponseReader(b"GET")
    reader.receive_data(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n")
    assert isinstance(reader.next_event(), ResponseHead)
    assert reader.next_event() is NEED_DATA
    first, second = b"01234", b"56789"
    reader.receive_data(first)
    assert reader.next_event() is first
    assert reader.next_event() is NEED_DATA
    reader.receive_data(second)
    assert reader.next_event() is second
    assert reader.next_event() is END and reader.keep_alive
