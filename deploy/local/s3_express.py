"""An S3 Express One Zone front for moto: directory buckets, CreateSession, session tokens.

moto has no directory buckets, so this HTTP/1.1 front (h11, keep-alive like deploy/local/s3_delay.py)
plays the zonal endpoint: it answers CreateSession itself and passes every other request on to moto
once its session checks pass. Buckets are addressed path-style (`/<bucket>/<key>`, what botocore
sends to an `endpoint_url`) or virtual-host style (`Host: <bucket>.<host>`).

What it enforces, as S3 Express does:
- directory bucket names, `<base>--<az-id>--x-s3` (wal_s3.config.directory_bucket_name's rules):
  another name is `400 InvalidBucketName`;
- CreateSession (`GET /<bucket>?session`) needs a SigV4 Authorization for the `s3express` service
  and answers temporary credentials (access key id, secret, session token, expiry
  `session_ttl_s` ahead; mode `ReadWrite`, or `ReadOnly` by `x-amz-create-session-mode`);
  a bucket that moto does not have is `404 NoSuchBucket`;
- every other request carries `x-amz-s3session-token` of a live session for that bucket, with a
  SigV4 signature (service `s3express`) by that session's access key id and secret, verified
  here: no token is `403 AccessDenied`, an unknown one `403 InvalidToken`, an expired one
  `400 ExpiredToken`, another bucket's `403 AccessDenied`, a wrong key id `403 AccessDenied`, a
  wrong signature `403 SignatureDoesNotMatch`, a write with a ReadOnly session `403 AccessDenied`.

Buckets are created in moto directly (`create_directory_bucket`: botocore itself would ask for
a session first); the front does not take CreateBucket.
It keeps counts of what it answered (`counts`, and a stats file when run as a program).

Run: `python -m deploy.local.s3_express --upstream 127.0.0.1:4566 [--listen 127.0.0.1:0]
[--session-ttl-s 300] [--stats FILE]`; it prints `listening=HOST:PORT` once ready.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import hmac
import http.client
import re
import secrets
import sys
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import h11
import trio

from deploy.local.fault_common import hostport, keep_writing_counts, running_listener, until_sigint_or_sigterm
from deploy.local.processes import STARTUP_TIMEOUT_S
from deploy.local.s3_delay import _forward, _next_event
from wal_s3.config import DIRECTORY_BUCKET_SUFFIX, directory_bucket_name

SESSION_TTL_S = 300.0  # S3 Express session credentials last five minutes
READY_TIMEOUT_S = STARTUP_TIMEOUT_S  # for `running_front`'s process to print its address
TOKEN_HEADER = b"x-amz-s3session-token"
MODE_HEADER = b"x-amz-create-session-mode"
_CREDENTIAL_RE = re.compile(rb"Credential=([^/,\s]+)/\d{8}/[^/]+/([^/]+)/aws4_request")
_AUTH_RE = re.compile(rb"^AWS4-HMAC-SHA256 Credential=([^/,\s]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request,\s*"
                      rb"SignedHeaders=([^,\s]+),\s*Signature=([0-9a-f]{64})$")
_WRITES = frozenset({b"PUT", b"POST", b"DELETE"})
_XMLNS = "http://s3.amazonaws.com/doc/2006-03-01/"


@dataclass(frozen=True)
class Session:
    bucket: str
    access_key_id: str
    secret_access_key: str
    token: str
    expires_at: float  # clock() seconds
    read_only: bool


@dataclass(frozen=True)
class Answer:
    """What the front answers itself (an error or a CreateSession result)."""

    status: int
    body: bytes


def is_directory_bucket(name: str) -> bool:
    """True if `name` is `<base>--<az-id>--x-s3` by the directory bucket naming rules."""
    if not name.endswith(DIRECTORY_BUCKET_SUFFIX):
        return False
    base, sep, az_id = name[: -len(DIRECTORY_BUCKET_SUFFIX)].rpartition("--")
    if not sep:
        return False
    try:
        return directory_bucket_name(base, az_id) == name
    except ValueError:
        return False


def error_body(code: str, message: str) -> bytes:
    return (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
            f"<Message>{message}</Message></Error>").encode()


def _error(status: int, code: str, message: str) -> Answer:
    return Answer(status, error_body(code, message))


def bucket_of(target: bytes, host: bytes) -> tuple[str, bool]:
    """(bucket, is_create_session) of a request: path-style `/<bucket>[/key][?query]`, or
    virtual-host style when the Host's first label is a directory bucket name."""
    path, _, query = target.decode("latin-1").partition("?")
    params = urllib.parse.parse_qs(query, keep_blank_values=True)
    first_label = host.decode("latin-1").split(":", 1)[0].split(".", 1)[0]
    if is_directory_bucket(first_label):
        bucket = first_label
        rest = path.lstrip("/")
    else:
        bucket, _, rest = urllib.parse.unquote(path.lstrip("/")).partition("/")
    return bucket, ("session" in params and not rest)


def create_directory_bucket(moto: tuple[str, int], name: str, timeout_s: float = 10.0) -> None:
    """Create directory bucket `name` in moto at `moto` (HOST, PORT) with one plain PUT.

    Raises ValueError for a name that is not a directory bucket's, OSError if moto refuses."""
    if not is_directory_bucket(name):
        raise ValueError(f"{name!r} is not <base>--<az-id>--x-s3")
    conn = http.client.HTTPConnection(*moto, timeout=timeout_s)
    try:
        conn.request("PUT", f"/{name}", body=b"")
        response = conn.getresponse()
        response.read()
    finally:
        conn.close()
    if response.status != 200:
        raise OSError(f"moto refused bucket {name}: HTTP {response.status}")


class ExpressFront:
    """The session table and the checks; `clock` is injectable so tests can expire sessions."""

    def __init__(self, session_ttl_s: float = SESSION_TTL_S, clock: Callable[[], float] = time.time) -> None:
        self.session_ttl_s = session_ttl_s
        self.clock = clock
        self.sessions: dict[str, Session] = {}
        self.counts: Counter[str] = Counter()

    def create_session(self, bucket: str, headers: dict[bytes, bytes]) -> Answer:
        credential = _CREDENTIAL_RE.search(headers.get(b"authorization", b""))
        if credential is None:
            return _error(403, "AccessDenied", "CreateSession needs a SigV4 Authorization header")
        if credential.group(2) != b"s3express":
            return _error(403, "AccessDenied", "CreateSession must be signed for the s3express service")
        mode = headers.get(MODE_HEADER, b"ReadWrite")
        if mode not in (b"ReadWrite", b"ReadOnly"):
            return _error(400, "InvalidArgument", "x-amz-create-session-mode: ReadWrite or ReadOnly")
        self._forget_expired()
        session = Session(bucket, "ASIA" + secrets.token_hex(8).upper(), secrets.token_urlsafe(30),
                          secrets.token_urlsafe(48), self.clock() + self.session_ttl_s, mode == b"ReadOnly")
        self.sessions[session.token] = session
        expiration = datetime.datetime.fromtimestamp(session.expires_at, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = (f'<?xml version="1.0" encoding="UTF-8"?><CreateSessionResult xmlns="{_XMLNS}"><Credentials>'
                f"<SessionToken>{session.token}</SessionToken><SecretAccessKey>{session.secret_access_key}"
                f"</SecretAccessKey><AccessKeyId>{session.access_key_id}</AccessKeyId>"
                f"<Expiration>{expiration}</Expiration></Credentials></CreateSessionResult>").encode()
        return Answer(200, body)

    def check(self, method: bytes, bucket: str, headers: dict[bytes, bytes], target: bytes = b"/",
              raw_headers: list[tuple[bytes, bytes]] | None = None) -> Answer | None:
        """None if the request may go on to moto, else the error to answer."""
        token = headers.get(TOKEN_HEADER)
        if token is None:
            return _error(403, "AccessDenied", "a directory bucket request needs x-amz-s3session-token")
        session = self.sessions.get(token.decode("latin-1"))
        if session is None:
            return _error(403, "InvalidToken", "The provided token is malformed or otherwise invalid.")
        if self.clock() >= session.expires_at:
            return _error(400, "ExpiredToken", "The provided token has expired.")
        if session.bucket != bucket:
            return _error(403, "AccessDenied", f"the session is for {session.bucket}, not {bucket}")
        credential = _CREDENTIAL_RE.search(headers.get(b"authorization", b""))
        if credential is None or credential.group(1).decode("latin-1") != session.access_key_id:
            return _error(403, "AccessDenied", "the request is not signed with the session's access key id")
        if raw_headers is not None and not signature_ok(method, target, raw_headers, session.secret_access_key):
            return _error(403, "SignatureDoesNotMatch", "The request signature we calculated does not match")
        if session.read_only and method in _WRITES:
            return _error(403, "AccessDenied", "a ReadOnly session cannot write")
        return None

    def _forget_expired(self) -> None:
        now = self.clock()
        for token in [t for t, s in self.sessions.items() if now >= s.expires_at + self.session_ttl_s]:
            del self.sessions[token]  # kept one more ttl, so a late request still reads "expired"


def signature_ok(method: bytes, target: bytes, headers: list[tuple[bytes, bytes]], secret_key: str) -> bool:
    """Verify a request's SigV4 Authorization (header form, S3 rules: the path as sent, the
    payload hash from x-amz-content-sha256) under `secret_key`."""
    by_name: dict[bytes, list[bytes]] = {}
    for name, value in headers:
        by_name.setdefault(name.lower(), []).append(value)
    match = _AUTH_RE.match(b"".join(by_name.get(b"authorization", [b""])[:1]))
    amz_date = by_name.get(b"x-amz-date", [b""])[0].decode("latin-1")
    if match is None or not amz_date:
        return False
    _key, day, region, service, signed_names, signature = (g.decode("latin-1") for g in match.groups())
    path, _, query = target.decode("latin-1").partition("?")
    pairs = []
    for part in query.split("&") if query else []:
        param, _, arg = part.partition("=")  # text: the header loop's name and value are bytes
        pairs.append((urllib.parse.quote(urllib.parse.unquote(param), safe="-_.~"),
                      urllib.parse.quote(urllib.parse.unquote(arg), safe="-_.~")))
    canonical_headers = "".join(
        f"{name}:{','.join(' '.join(v.decode('latin-1').split()) for v in by_name.get(name.encode(), []))}\n"
        for name in signed_names.split(";"))
    payload = by_name.get(b"x-amz-content-sha256", [b"UNSIGNED-PAYLOAD"])[0].decode("latin-1")
    canonical = "\n".join((method.decode("ascii"), path, "&".join(f"{k}={v}" for k, v in sorted(pairs)),
                           canonical_headers, signed_names, payload))
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = "\n".join(("AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()))
    key = f"AWS4{secret_key}".encode()
    for part in (day, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return hmac.compare_digest(hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest(), signature)


async def _drain_body(conn: h11.Connection, stream: trio.SocketStream) -> None:
    while not isinstance(await _next_event(conn, stream), h11.EndOfMessage):
        pass


async def _answer(conn: h11.Connection, stream: trio.SocketStream, answer: Answer) -> None:
    if conn.they_are_waiting_for_100_continue:
        await stream.send_all(conn.send(h11.InformationalResponse(status_code=100, headers=[])))
    await _drain_body(conn, stream)
    headers = [(b"content-type", b"application/xml"), (b"content-length", str(len(answer.body)).encode())]
    await stream.send_all(conn.send(h11.Response(status_code=answer.status, headers=headers)))
    await stream.send_all(conn.send(h11.Data(data=answer.body)) + conn.send(h11.EndOfMessage()))


async def _serve_client(front: ExpressFront, client: trio.SocketStream, upstream: tuple[str, int]) -> None:
    conn = h11.Connection(h11.SERVER)
    async with client:
        try:
            while True:
                request = await _next_event(conn, client)
                if not isinstance(request, h11.Request):
                    return
                headers = {name: value for name, value in request.headers}
                bucket, is_session = bucket_of(request.target, headers.get(b"host", b""))
                answer: Answer | None
                if not is_directory_bucket(bucket):
                    answer = _error(400, "InvalidBucketName", f"{bucket!r} is not <base>--<az-id>--x-s3")
                elif is_session and request.method == b"GET":
                    answer = front.create_session(bucket, headers)
                else:
                    answer = front.check(request.method, bucket, headers, request.target, list(request.headers))
                if answer is None:
                    front.counts["passed"] += 1
                    await _forward(request, conn, client, upstream)
                else:
                    front.counts["session" if answer.status == 200 else f"{answer.status}"] += 1
                    if answer.status == 200:  # CreateSession of a bucket moto lacks: NoSuchBucket
                        answer = await _bucket_exists(upstream, bucket) or answer
                    await _answer(conn, client, answer)
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, h11.ProtocolError):
            pass  # either side went away or spoke nonsense: only this connection ends


async def _bucket_exists(upstream: tuple[str, int], bucket: str) -> Answer | None:
    """None if moto has `bucket` (HEAD), else the NoSuchBucket answer."""
    stream = await trio.open_tcp_stream(*upstream)
    async with stream:
        up = h11.Connection(h11.CLIENT)
        head = h11.Request(method="HEAD", target=f"/{bucket}",
                           headers=[(b"host", f"{upstream[0]}:{upstream[1]}".encode()), (b"connection", b"close")])
        await stream.send_all(up.send(head) + up.send(h11.EndOfMessage()))
        response = await _next_event(up, stream)
    if isinstance(response, h11.Response) and response.status_code == 404:
        return _error(404, "NoSuchBucket", f"The specified bucket does not exist: {bucket}")
    return None


async def serve(listen: tuple[str, int], upstream: tuple[str, int], front: ExpressFront | None = None,
                task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve the front on `listen` (port 0: any) until cancelled; started with (host, port)."""
    front = front or ExpressFront()
    listeners = await trio.open_tcp_listeners(listen[1], host=listen[0])
    task_status.started(listeners[0].socket.getsockname()[:2])

    async def handler(stream: trio.SocketStream) -> None:
        await _serve_client(front, stream, upstream)

    await trio.serve_listeners(handler, listeners)


@contextlib.contextmanager
def running_front(upstream: str, log_path: Path, session_ttl_s: float = SESSION_TTL_S) -> Iterator[str]:
    """This front as a process in front of `upstream` (HOST:PORT of moto or the latency
    injector); yields its endpoint URL, stops it on exit. Raises RuntimeError if it does not
    come up within READY_TIMEOUT_S (its stderr is in `log_path`)."""
    argv = [sys.executable, "-m", "deploy.local.s3_express", "--upstream", upstream, "--listen", "127.0.0.1:0",
            "--session-ttl-s", str(session_ttl_s)]
    with running_listener(argv, log_path, "S3 Express front", READY_TIMEOUT_S) as address:
        yield "http://" + address


async def _main(args: argparse.Namespace) -> None:
    front = ExpressFront(args.session_ttl_s)
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(serve, hostport(args.listen), hostport(args.upstream), front)
        if args.stats:
            nursery.start_soon(keep_writing_counts, front.counts, Path(args.stats))
        print(f"listening={host}:{port}", flush=True)
        await until_sigint_or_sigterm(nursery)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True, help="moto (or the latency injector) HOST:PORT")
    parser.add_argument("--listen", default="127.0.0.1:0")
    parser.add_argument("--session-ttl-s", type=float, default=SESSION_TTL_S)
    parser.add_argument("--stats", help="write answer counts as JSON to this file every second")
    try:
        trio.run(_main, parser.parse_args())
    except KeyboardInterrupt:
        sys.exit(0)
