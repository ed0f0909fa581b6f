"""The WAL's latency-path S3 requests on the event loop: HTTP/1.1 by wal_s3/_http11.py,
SigV4 by wal_s3/_sigv4.py, I/O by anyio.

Why not boto3 here: boto3 blocks, so S3Store runs it in worker threads. On the WAL path
every record waits for one PUT (proxy) and one ranged GET (agent), and each boto3 call
cost ~1.5 ms of CPU plus two thread hand-offs, each a wake-up after a long idle wait
(bench_router's "PUT thread hand-off" and "agent: bridge to S3 read" rows). This transport
does only those two requests, with only what they need, on the caller's trio or asyncio
loop. Everything else (LIST, DELETE, HEAD, whole-object GET, checkpoint manifests) stays
on boto3.

Taken from botocore, not rewritten: the credentials chain (a refresh that is due runs in a
worker thread, as it may call IMDS or STS), the bucket's URL (region endpoint, addressing
style, custom endpoint_url: captured off a request botocore builds) and the CA bundle.
Written here for speed, each tested byte for byte against the library it replaced: the
HTTP/1.1 codec (h11 cost ~190 µs per request) and SigV4 signing (botocore's S3SigV4Auth
~90 µs). Done here too: a keep-alive connection pool, timeouts, and the status -> S3Error
mapping shared with the boto3 path (`_s3.classify_error`).

S3 Express One Zone (`express=True`): requests are signed for the `s3express` service with
a CreateSession session's credentials and carry its token (wal_s3/_express.py); one
CreateSession runs at a time, on the first request and again shortly before the session
expires, and an ExpiredToken/InvalidToken answer drops the session for the retry.

Integrity: PUT bodies are sent UNSIGNED-PAYLOAD (SHA-256 of an 8 MiB object is ~20 ms of
CPU, on the event loop here) with an `x-amz-checksum-crc32c` header, which S3 checks
against the body it received, as it does for the SDKs' checksums. CRC-32C because the WAL
encoder already runs one over the whole object for its trailer and hands the PUT the
body's CRC continued from it, so the checksum costs no pass of its own over the body (the
CRC-32 (IEEE) sent before took a pass of ~0.15 ms per MiB, in a worker thread). Readers
verify their own CRC-32Cs. No hidden retries: a failed request raises S3TransientError and the
caller's backoff decides (a conditional PUT must not be re-sent behind the writer's back).
"""

from __future__ import annotations

import base64
import logging
import select
import socket
import ssl
import time
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import anyio
import anyio.abc
import anyio.lowlevel
import boto3
import botocore.session
from botocore.awsrequest import AWSResponse
from botocore.httpsession import get_cert_path
from crc32c import crc32c

from wal_s3 import _express
from wal_s3._http11 import END, NEED_DATA, ProtocolError, ResponseHead, ResponseReader, encode_request_head
from wal_s3._sigv4 import SigV4Signer
from wal_s3.config import WalConfig
from wal_s3.s3 import EXPECTED_OWNER_HEADER, S3Error, S3PermanentError, S3TransientError, classify_error

log = logging.getLogger(__name__)

RECEIVE_BYTES = 256 * 1024
SEND_CHUNK_BYTES = 1024 * 1024  # each chunk of a large body gets the full request timeout, as botocore's
MAX_ERROR_BODY_BYTES = 64 * 1024
IDLE_MAX_S = 10.0  # a pooled connection idle longer is closed (servers drop idle keep-alives)
USER_AGENT = "azsidecar-wal"


@dataclass
class _Conn:
    stream: anyio.abc.ByteStream
    sock: Any  # the raw socket (trio's, or asyncio's wrapper): polled for a server's close
    idle_since: float = 0.0


class S3Http:
    """PUT and ranged GET of one bucket's objects. Raises S3Error subclasses only."""

    def __init__(self, *, bucket_url: str, region: str, credentials: Any, connect_timeout_s: float,
                 request_timeout_s: float, max_idle: int, ssl_context: ssl.SSLContext | None = None,
                 express: bool = False, clock: Callable[[], float] = time.time,
                 receive_buffer_bytes: int = 0, expected_bucket_owner: str = "") -> None:
        """bucket_url: the URL an object key is appended to (percent-encoded), ending in '/'.
        credentials: a botocore Credentials (or RefreshableCredentials), None if there are none.
        express: a directory bucket (S3 Express One Zone session authentication); `clock`
        (seconds since the epoch) times its sessions. receive_buffer_bytes: SO_RCVBUF of each
        connection (0: the OS default). expected_bucket_owner: an AWS account id sent (signed) as
        x-amz-expected-bucket-owner on every request ("" = none)."""
        parts = urlsplit(bucket_url)
        if parts.scheme not in ("http", "https") or not parts.hostname or not bucket_url.endswith("/"):
            raise ValueError(f"bad bucket URL {bucket_url!r}")
        self.bucket_url = bucket_url
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._host_header = parts.netloc  # what SigV4 signs as `host`; sent verbatim
        self._path = parts.path
        self._tls = parts.scheme == "https"
        self._ssl = ssl_context if ssl_context is not None or not self._tls else ssl.create_default_context()
        self._signer = SigV4Signer(region, _express.SERVICE if express else "s3")
        self._credentials = credentials
        self.express = express
        self._clock = clock
        self._session: _express.ExpressSession | None = None
        self._session_lock = anyio.Lock()
        self.sessions_created = 0
        self._connect_timeout_s = connect_timeout_s
        self._request_timeout_s = request_timeout_s
        self._max_idle = max_idle
        self._receive_buffer_bytes = receive_buffer_bytes
        self._owner = {EXPECTED_OWNER_HEADER: expected_bucket_owner} if expected_bucket_owner else {}
        self._idle: list[_Conn] = []
        self._loop_token: object | None = None  # pooled connections belong to one event loop

    # ---- requests -----------------------------------------------------------------------

    async def put(self, key: str, body: bytes | bytearray | memoryview, headers: Mapping[str, str], *,
                  body_crc32c: int | None = None, timing: list[float] | None = None) -> None:
        """PUT body at key with `headers` (If-None-Match, x-amz-meta-*) and a CRC-32C checksum:
        `body_crc32c` if the caller has it (an encoded WAL object's), else computed here."""
        view = memoryview(body)
        crc = crc32c(view) if body_crc32c is None else body_crc32c
        all_headers = {**headers, "Content-Length": str(len(view)),
                       "x-amz-sdk-checksum-algorithm": "CRC32C",  # as the SDKs send it
                       "x-amz-checksum-crc32c": base64.b64encode(crc.to_bytes(4, "big")).decode()}
        status, error = await self._request("PUT", key, all_headers, view, f"PUT {key}", read_body=False,
                                            timing=timing)
        if isinstance(error, S3Error):  # not 2xx (on a 2xx, `error` is the (empty) body)
            raise error

    async def get_range(self, key: str, start: int, length: int, *, timing: list[float] | None = None) -> bytes:
        """Bytes [start, start+length) of key; fewer if the object is shorter."""
        what = f"GET {key} [{start}+{length}]"
        status, result = await self._request("GET", key, {"Range": f"bytes={start}-{start + length - 1}"},
                                             None, what, read_body=True, timing=timing)
        if isinstance(result, S3Error):  # not 2xx
            raise result
        if status == 206:
            return result
        if status == 200:  # the whole object (a server may ignore Range): cut the range out
            return result[start:start + length]
        # Another 2xx, which S3 never answers a ranged GET with (an S3-compatible store or a
        # proxy in between might): an S3 error the caller's retries handle, not a crash.
        raise S3TransientError(f"{what}: unexpected HTTP {status} for a ranged GET")

    async def _request(self, method: str, key: str, headers: dict[str, str], body: memoryview | None,
                       what: str, *, read_body: bool, timing: list[float] | None) -> tuple[int, bytes | S3Error]:
        """(status, body bytes) on 2xx, else (status, S3Error to raise). Transport problems raise.

        `timing` gets the request's time from connection checkout to the answer (connecting
        included, signing not: the audit's S3 request time is the network's and S3's)."""
        target = self._path + quote(key, safe="/~")
        signed = await self._signed_headers(method, target, {**headers, **self._owner})
        status, result = await self._round_trip(method, target, signed, body, what, read_body=read_body,
                                                timing=timing)
        if self.express and isinstance(result, S3Error) and any(code in str(result)
                                                                for code in _express.SESSION_ERROR_CODES):
            self._session = None  # the next attempt (the caller's backoff) creates a new session
            raise S3TransientError(f"{result} (S3 Express session dropped)")
        return status, result

    async def _round_trip(self, method: str, target: str, signed: list[tuple[str, str]], body: memoryview | None,
                          what: str, *, read_body: bool, timing: list[float] | None) -> tuple[int, bytes | S3Error]:
        started = time.perf_counter()
        conn = await self._checkout(what)
        reader = ResponseReader(method.encode("ascii"))
        try:
            # One cancel scope per request, its deadline pushed on by every send and receive:
            # request_timeout_s bounds each wait for progress (as botocore's socket timeouts),
            # not the whole transfer of a large body.
            with anyio.CancelScope(deadline=anyio.current_time() + self._request_timeout_s) as scope:
                status, data = await self._exchange(conn, scope, reader, method, target, signed, body, read_body)
            if scope.cancelled_caught:
                reader.keep_alive = False
                raise S3TransientError(f"{what}: no progress within {self._request_timeout_s:g} s")
            if 200 <= status < 300:
                return status, data
            return status, _error_from(status, data, what)
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream,
                ProtocolError, ssl.SSLError) as exc:
            reader.keep_alive = False
            raise S3TransientError(f"{what}: {type(exc).__name__}: {exc}") from exc
        finally:
            if timing is not None:
                timing.append(time.perf_counter() - started)
            if reader.keep_alive:  # set only once the whole answer was read
                await self._checkin(conn)
            else:
                await _discard(conn)

    async def _exchange(self, conn: _Conn, scope: anyio.CancelScope, reader: ResponseReader, method: str,
                        target: str, headers: list[tuple[str, str]], body: memoryview | None,
                        read_body: bool) -> tuple[int, bytes]:
        timeout_s = self._request_timeout_s
        head = encode_request_head(method, target, headers)
        if body is None or len(body) <= SEND_CHUNK_BYTES // 16:  # small: one send for the whole request
            await conn.stream.send(head + body if body is not None else head)
        else:
            await conn.stream.send(head)
            for i in range(0, len(body), SEND_CHUNK_BYTES):
                scope.deadline = anyio.current_time() + timeout_s
                # anyio types send() as taking bytes; its streams pass the item on to a socket's
                # send, a transport's write or an SSLObject's write, which all take any buffer,
                # and a memoryview slice saves copying each 1 MiB chunk.
                await conn.stream.send(body[i:i + SEND_CHUNK_BYTES])  # type: ignore[arg-type]
        status = 0
        chunks: list[bytes] = []
        kept = 0
        while True:
            event = reader.next_event()
            if event is NEED_DATA:
                scope.deadline = anyio.current_time() + timeout_s
                try:
                    data = await conn.stream.receive(RECEIVE_BYTES)
                except anyio.EndOfStream:
                    data = b""
                reader.receive_data(data)
            elif event is END:
                return status, b"".join(chunks)
            elif isinstance(event, ResponseHead):
                status = event.status
            elif (read_body and 200 <= status < 300) or kept < MAX_ERROR_BODY_BYTES:
                # A body piece. A failed request's body is an error document: keep its start only.
                chunks.append(event)
                kept += len(event)

    async def _signed_headers(self, method: str, target: str, headers: dict[str, str]) -> list[tuple[str, str]]:
        if self.express:
            session = await self._express_session()
            signed = self._signer.sign(method, target, {"Host": self._host_header, **headers,
                                                        _express.TOKEN_HEADER: session.token},
                                       access_key=session.access_key, secret_key=session.secret_key)
            signed.append(("User-Agent", USER_AGENT))
            return signed
        credentials = await self._frozen_credentials()
        signed = self._signer.sign(method, target, {"Host": self._host_header, **headers},
                                   access_key=credentials.access_key, secret_key=credentials.secret_key,
                                   token=credentials.token)
        signed.append(("User-Agent", USER_AGENT))  # not signed (botocore never signs user-agent)
        return signed

    async def _express_session(self) -> _express.ExpressSession:
        """A live S3 Express session: the cached one, or a new one from CreateSession (one at a
        time; tasks that find a refresh under way wait for it). Raises S3Error."""
        session = self._session
        if not _express.needs_refresh(session, self._clock()):
            assert session is not None
            return session
        async with self._session_lock:
            session = self._session
            if _express.needs_refresh(session, self._clock()):
                session = self._session = await self._create_session()
            assert session is not None
            return session

    async def _create_session(self) -> _express.ExpressSession:
        credentials = await self._frozen_credentials()
        path = _express.session_target(self._path)
        what = f"CreateSession {self._host_header}{path}"
        signed = self._signer.sign("GET", path, {"Host": self._host_header, **self._owner},
                                   access_key=credentials.access_key,
                                   secret_key=credentials.secret_key, token=credentials.token,
                                   query=_express.SESSION_QUERY)
        signed.append(("User-Agent", USER_AGENT))
        status, result = await self._round_trip("GET", f"{path}?session", signed, None, what, read_body=True,
                                                timing=None)
        if isinstance(result, S3Error):  # not 2xx
            raise result
        try:
            session = _express.parse_create_session(result)
        except _express.SessionParseError as exc:
            raise S3TransientError(f"{what}: {exc}") from exc
        self.sessions_created += 1
        return session

    async def _frozen_credentials(self) -> Any:
        creds = self._credentials
        if creds is None:
            raise S3PermanentError("no AWS credentials found (environment, config files, IMDS, ...)")
        try:
            refresh_needed = getattr(creds, "refresh_needed", None)
            if refresh_needed is not None and refresh_needed():
                return await anyio.to_thread.run_sync(creds.get_frozen_credentials)  # may call IMDS/STS
            return creds.get_frozen_credentials()
        except S3Error:
            raise
        except Exception as exc:  # noqa: BLE001 - botocore's credential errors, of any kind
            raise S3TransientError(f"refreshing AWS credentials: {type(exc).__name__}: {exc}") from exc

    # ---- connections --------------------------------------------------------------------

    async def _checkout(self, what: str) -> _Conn:
        token = anyio.lowlevel.current_token()
        if self._loop_token != token:  # a new event loop: the old loop's sockets are not ours to use
            for conn in self._idle:  # that loop may be gone: close what can be closed without it
                close = getattr(conn.sock, "close", None)  # trio's socket; asyncio's closes with its transport
                if close is not None:
                    close()
            self._idle = []
            self._loop_token = token
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if now - conn.idle_since <= IDLE_MAX_S and not _dropped(conn.sock):
                return conn
            await _discard(conn)
        try:
            with anyio.fail_after(self._connect_timeout_s):
                # anyio's overloads take `tls` only as a literal True or False (to type the
                # stream they return); a bool known at run time is what connect_tcp accepts.
                stream: anyio.abc.ByteStream = await anyio.connect_tcp(  # type: ignore[call-overload]
                    self._host, self._port, tls=self._tls, ssl_context=self._ssl,
                    tls_hostname=self._host if self._tls else None)
        except TimeoutError as exc:
            raise S3TransientError(f"{what}: connecting to {self._host}:{self._port} took over "
                                   f"{self._connect_timeout_s:g} s") from exc
        except (OSError, ssl.SSLError, anyio.BrokenResourceError) as exc:
            raise S3TransientError(f"{what}: connecting to {self._host}:{self._port}: {exc}") from exc
        sock = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
        if self._receive_buffer_bytes and sock is not None:
            try:  # a larger window after connecting is fine: Linux scales the window for tcp_rmem's max
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._receive_buffer_bytes)
            except OSError as exc:
                log.debug("SO_RCVBUF %d refused: %s", self._receive_buffer_bytes, exc)
        return _Conn(stream, sock)

    async def _checkin(self, conn: _Conn) -> None:
        if len(self._idle) >= self._max_idle:
            await _discard(conn)
            return
        conn.idle_since = time.monotonic()
        self._idle.append(conn)

    async def aclose(self) -> None:
        """Close the pooled idle connections (requests in flight close theirs when done)."""
        idle, self._idle = self._idle, []
        for conn in idle:
            await _discard(conn)


def _dropped(sock: Any) -> bool:
    """True if an idle keep-alive connection is readable: the server closed it (or sent
    stray bytes); either way it cannot carry a request. Polled by file descriptor, as
    asyncio's socket wrapper offers no recv."""
    if sock is None:
        return False
    try:
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True


async def _discard(conn: _Conn) -> None:
    """Close at once: a TLS close_notify is not owed to a server whose connection we abandon."""
    await anyio.aclose_forcefully(conn.stream)


def _error_from(status: int, body: bytes, what: str) -> S3Error:
    code = message = ""
    if body:
        try:
            root = ET.fromstring(body)
            code = root.findtext("Code") or ""
            message = root.findtext("Message") or ""
        except ET.ParseError:
            message = body[:200].decode("utf-8", "replace")
    return classify_error(status, code, message, what)


# ---- choosing the transport ------------------------------------------------------------

def http_transport(client: Any, config: WalConfig, bucket: str | None = None) -> S3Http | None:
    """The event-loop transport for `bucket` (default config.bucket), or None to keep boto3 for
    every call (wal.s3_transport = "boto3", or "auto" with an HTTP proxy in the environment for
    the endpoint: botocore honours proxies, this transport does not). With wal.storage_class
    "express" it authenticates with S3 Express sessions."""
    if config.s3_transport == "boto3":
        return None
    bucket = bucket or config.bucket
    try:
        bucket_url = bucket_url_of(client, bucket)
    except Exception as exc:  # noqa: BLE001 - no credentials to presign with, or an unusual client
        log.warning("WAL PUTs and GETs go through boto3: no URL for bucket %s (%s: %s)", bucket,
                    type(exc).__name__, exc)
        return None
    host = urlsplit(bucket_url).hostname or ""
    scheme = urlsplit(bucket_url).scheme
    if config.s3_transport == "auto" and scheme in urllib.request.getproxies() \
            and not urllib.request.proxy_bypass(host):
        log.info("an HTTP proxy is configured for %s: WAL PUTs and GETs go through boto3", host)
        return None
    ssl_context = None
    if scheme == "https":
        # The CA bundle boto3 would use (its ca_bundle setting: AWS_CA_BUNDLE or the config file, read by botocore).
        ca_bundle = botocore.session.Session().get_config_variable("ca_bundle")
        ssl_context = ssl.create_default_context(cafile=ca_bundle or get_cert_path(True))
    return S3Http(bucket_url=bucket_url, region=client.meta.region_name, credentials=boto3.session.Session().get_credentials(),
                  connect_timeout_s=config.connect_timeout_s, request_timeout_s=config.request_timeout_s,
                  max_idle=config.max_s3_threads, ssl_context=ssl_context, express=config.storage_class == "express",
                  receive_buffer_bytes=config.receive_buffer_bytes, expected_bucket_owner=config.expected_bucket_owner)


PROBE_KEY = "azsidecar-url-probe"


class _ProbeDone(Exception):
    """Stops bucket_url_of's probe at a directory bucket's CreateSession."""


class _EmptyBody:
    def stream(self, **_kwargs: Any) -> Iterator[bytes]:
        yield b""


def bucket_url_of(client: Any, bucket: str) -> str:
    """The URL botocore sends an object request of `bucket` to, up to the key.

    Captured off a HEAD that botocore builds and signs but never sends (a `before-send`
    handler answers it), so region endpoints, addressing style (virtual-hosted or path) and
    a custom endpoint_url come out exactly as botocore resolves them for real requests.
    (A presigned URL does not: botocore presigns with the global endpoint.)

    A directory bucket's HEAD is signed with a session, so botocore first builds a
    CreateSession to `<bucket URL>?session`: that request is captured instead and the probe
    stopped there (no session is created, none cached in the client).
    """
    seen: list[str] = []

    def capture(request: Any, **_kwargs: Any) -> Any:
        seen.append(request.url)
        return AWSResponse(request.url, 200, {}, _EmptyBody())

    def capture_session(request: Any, **_kwargs: Any) -> Any:
        parts = urlsplit(request.url)
        path = parts.path if parts.path.endswith("/") else parts.path + "/"
        seen.append(f"{parts.scheme}://{parts.netloc}{path}{PROBE_KEY}")
        raise _ProbeDone

    events = (("before-send.s3.HeadObject", capture), ("before-send.s3.CreateSession", capture_session))
    for event, handler in events:  # unique ids are per emitter, not per event
        client.meta.events.register_first(event, handler, unique_id=f"azsidecar-url-probe-{id(seen)}-{event}")
    try:
        client.head_object(Bucket=bucket, Key=PROBE_KEY)
    except _ProbeDone:
        pass
    finally:
        for event, _handler in events:
            client.meta.events.unregister(event, unique_id=f"azsidecar-url-probe-{id(seen)}-{event}")
    parts = urlsplit(seen[0])
    if not parts.path.endswith("/" + PROBE_KEY):
        raise ValueError(f"unexpected request URL shape for bucket {bucket!r}: {parts.path}")
    return f"{parts.scheme}://{parts.netloc}{parts.path[:-len(PROBE_KEY)]}"
