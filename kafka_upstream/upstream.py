"""Trio client for the upstream Kafka brokers: pipelined requests on one connection per node.

Strategy: `submit()` writes a request in its FIFO send turn (send_turn.py) and returns a pending
handle; the caller awaits it separately. Callers that submit in client order therefore
keep Kafka's per-connection ordering (the broker handles one connection's requests in
order), while many requests stay in flight. One reader task per connection matches
responses to correlation ids. Socket and trio errors become `UpstreamError` here, the
adapter that owns this I/O. With `security_protocol` SSL/SASL_SSL each connection is
wrapped in trio.SSLStream; with SASL_* the proxy authenticates with its own identity
(kafka-python's client-side mechanisms make the messages) right after ApiVersions. With
OAUTHBEARER the token is an MSK IAM token (core/msk_iam.py, signed in a worker thread), and
when the broker announces a session lifetime (KIP-368) a task per connection re-authenticates
on the same connection before it ends: it holds the send turn, waits until no response is
pending (the broker would read a pipelined request as SASL bytes), and runs the SASL exchange
again; if that fails the connection is closed and the next request opens a new one.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import struct
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import trio
from kafka.net.sasl import get_sasl_mechanism
from kafka.net.sasl.oauth import AbstractTokenProvider
from kafka.protocol.api_header import ResponseClassRegistry
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from core.msk_iam import MskIamError, MskIamTokens, reauthenticate_after_ms
from core.socket_io import receive_some, send_buffers, take_whole_writes
from core.tls import client_context
from kafka_protocol.kafka_codec import API_PRODUCE, FAST_PRODUCE_VERSIONS
from kafka_protocol.produce import ProduceRequestData, decode_produce_response, encode_produce_request_parts
from kafka_protocol.produce_scan import forwarded_request_head
from kafka_upstream.config import UpstreamConfig
from kafka_upstream.errors import UpstreamError, UpstreamTimeout
from kafka_upstream.send_turn import SendTurn

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
MAX_RESPONSE_BYTES = 256 * 1024 * 1024  # a Metadata answer of a huge cluster stays far below
BOOTSTRAP_NODE = -1  # connection made to a bootstrap address before metadata names nodes


@dataclass(frozen=True)
class RawRequest:
    """A request forwarded as the client sent it: header fields (its client id too) and
    body bytes; only the correlation id is the connection's. Its answer is the raw
    response frame (size prefix removed), correlation id first."""

    api_key: int
    api_version: int
    body: bytes
    flexible: bool  # request header v2 (tagged fields) rather than v1
    client_id: str | None  # the client's own (None: null)

    def frame(self, correlation_id: int) -> bytes:
        client = b"" if self.client_id is None else self.client_id.encode()
        length = -1 if self.client_id is None else len(client)
        header = struct.pack(">hhih", self.api_key, self.api_version, correlation_id, length) + client
        if self.flexible:
            header += b"\x00"  # no tagged fields
        return _SIZE.pack(len(header) + len(self.body)) + header + self.body


# Called once with a forwarded request's answer frame (size prefix removed), or with the
# UpstreamError that ended it (UpstreamTimeout: no answer within its time-out).
AnswerCallback = Callable[[bytes | UpstreamError], None]


class _Pending:
    __slots__ = ("event", "response", "error", "decode", "on_answer")

    def __init__(self, decode: Callable[[bytes], Any], on_answer: AnswerCallback | None = None) -> None:
        self.event = trio.Event()
        self.response: Any = None
        self.error: Exception | None = None
        self.decode = decode  # response frame (size prefix removed) -> response
        self.on_answer = on_answer  # a forwarded request: called back instead of `event`

    async def wait(self, timeout_s: float) -> Any:
        """The decoded response. Raises UpstreamTimeout or UpstreamError."""
        with trio.move_on_after(timeout_s):
            await self.event.wait()
        if not self.event.is_set():
            raise UpstreamTimeout(f"no answer within {timeout_s}s")
        if self.error is not None:
            raise self.error
        return self.response


class UpstreamConnection:
    """One TCP connection to one broker."""

    def __init__(self, stream: trio.abc.Stream, node_id: int, address: str, client_id: str) -> None:
        self.node_id = node_id
        self.address = address
        self._stream = stream
        self._client_id = client_id
        self._send_turn = SendTurn()  # fair: submission order is kept
        self._correlation = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._idle = trio.Event()  # set while no response is pending
        self._idle.set()
        self._closed = trio.Event()
        self.reauthentications = 0  # completed KIP-368 re-authentications on this connection
        # Forwarded requests' (deadline, correlation id), oldest first: one task per connection
        # fails those answered too late (`expire_late_answers`), instead of a waiting task each.
        self._deadlines: deque[tuple[float, int]] = deque()
        self._deadline_added = trio.Event()
        self._expiry_scope: trio.CancelScope | None = None

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def submit(self, request: Any, version: int, expect_response: bool = True, *,
                     holding_lock: bool = False) -> _Pending | None:
        """Write `request` at `version`; returns a handle to await, or None without response.

        `holding_lock`: the caller is inside `quiesced()` (re-authentication) and holds the send turn.
        Raises UpstreamError if the connection is closed or the write fails.
        """
        if self.closed:
            raise UpstreamError(f"connection to {self.address} is closed")
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        fast_produce = FAST_PRODUCE_VERSIONS[0] <= version <= FAST_PRODUCE_VERSIONS[1]
        if isinstance(request, RawRequest):
            data: list[bytes | memoryview] = [request.frame(correlation_id)]
            decode: Callable[[bytes], Any] = bytes
        elif isinstance(request, ProduceRequestData):
            if not fast_produce:
                raise UpstreamError(f"Produce v{version} cannot carry v2 record batches")
            # Record sets go out as the client sent them, by one vectored send: no copy; the
            # answer is read by the hand-written decoder (a ProduceAnswer).
            data = encode_produce_request_parts(request, version, correlation_id, self._client_id)
            decode = functools.partial(decode_produce_response, api_version=version)
        else:
            if request.API_KEY == API_PRODUCE and fast_produce:
                data = encode_produce_request_parts(request, version, correlation_id, self._client_id)
            else:
                request.with_header(correlation_id=correlation_id, client_id=self._client_id)
                data = [request.encode(version=version, header=True, framed=True)]
            decode = functools.partial(_response_class(request).decode, version=version, header=True)
        pending = _Pending(decode) if expect_response else None
        try:
            if holding_lock:
                await self._send(correlation_id, pending, data)
            else:
                if not self._send_turn.take_nowait():  # uncontended (the usual case): no trip through the scheduler
                    await self._send_turn.take()  # fair: queued behind earlier submitters
                try:
                    await self._send(correlation_id, pending, data)
                finally:
                    self._send_turn.give_back()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self._fail_all(UpstreamError(f"send to {self.address} failed: {exc}"))
            raise UpstreamError(f"send to {self.address} failed: {exc}") from exc
        return pending

    async def _send(self, correlation_id: int, pending: _Pending | None, data: list[bytes | memoryview]) -> None:
        # In the send turn: a request counts as pending only once it is being sent, so
        # quiesced() (which holds the turn) waits for what is on the wire, not for requests
        # queued behind it. Raises UpstreamError if the connection closed while it waited.
        if self.closed:
            raise UpstreamError(f"connection to {self.address} is closed")
        if pending is not None:
            self._pending[correlation_id] = pending
            if self._idle.is_set():
                self._idle = trio.Event()
        await send_buffers(self._stream, data)

    async def forward_produce(self, api_version: int, body: memoryview, timeout_s: float,
                              on_answer: AnswerCallback) -> None:
        """Send a Produce request whose body is the client's bytes, unchanged, after a request
        header of this connection's correlation and client id, by one vectored write.

        `on_answer` is called exactly once, in the step that ends the request: with the answer
        frame (from the reader task), or with an UpstreamError - the send failed (before this
        returns), the connection failed, or UpstreamTimeout when no answer came within
        `timeout_s` (from `expire_late_answers`). It must not raise. Raises nothing.
        """
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        head = forwarded_request_head(api_version, correlation_id, self._client_id, len(body))
        pending = _Pending(bytes, on_answer)
        try:
            if not self._send_turn.take_nowait():  # uncontended (the usual case): no trip through the scheduler
                await self._send_turn.take()  # fair: queued behind earlier submitters
            try:
                await self._send(correlation_id, pending, [head, body])
            finally:
                self._send_turn.give_back()
        except UpstreamError as exc:  # closed before it was sent (and registered)
            self._call_back(on_answer, exc)
            return
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self._fail_all(UpstreamError(f"send to {self.address} failed: {exc}"))  # calls on_answer
            return
        if not self._deadlines:
            self._deadline_added.set()
        self._deadlines.append((trio.current_time() + timeout_s, correlation_id))

    async def expire_late_answers(self) -> None:
        """Answer UpstreamTimeout for each forwarded request still unanswered at its deadline,
        until the connection closes. Deadlines come in order (one time-out per connection's
        user), so this sleeps until the oldest; under steady traffic it wakes about once per
        time-out, not once per request."""
        with trio.CancelScope() as self._expiry_scope:
            if self.closed:
                return
            while True:
                if not self._deadlines:
                    self._deadline_added = trio.Event()
                    await self._deadline_added.wait()
                    continue
                deadline, correlation_id = self._deadlines[0]
                pending = self._pending.get(correlation_id)
                if pending is None:
                    self._deadlines.popleft()  # answered
                    continue
                if trio.current_time() < deadline:
                    await trio.sleep_until(deadline)
                    continue
                self._deadlines.popleft()
                del self._pending[correlation_id]
                if not self._pending:
                    self._idle.set()
                pending.event.set()
                assert pending.on_answer is not None  # only forwarded requests have deadlines
                self._call_back(pending.on_answer, UpstreamTimeout(
                    f"{self.address}: no answer within its time-out (correlation id {correlation_id})"))

    def _call_back(self, on_answer: AnswerCallback, answer: bytes | UpstreamError) -> None:
        try:
            on_answer(answer)
        except Exception:  # noqa: BLE001 - a bug of the forwarder must not end this connection's other requests
            log.exception("internal error handling a forwarded answer from %s", self.address)

    async def request(self, request: Any, version: int, timeout_s: float, *, holding_lock: bool = False) -> Any:
        pending = await self.submit(request, version, holding_lock=holding_lock)
        assert pending is not None
        return await pending.wait(timeout_s)

    @contextlib.asynccontextmanager
    async def quiesced(self, timeout_s: float) -> AsyncIterator[None]:
        """Hold the send turn until no response is pending; requests inside pass `holding_lock=True`.

        Raises UpstreamTimeout if responses are still pending after `timeout_s`.
        """
        async with self._send_turn:
            with trio.move_on_after(timeout_s):
                await self._idle.wait()
            if not self._idle.is_set():
                raise UpstreamTimeout(f"{self.address}: responses still pending after {timeout_s}s")
            yield

    async def run_reader(self) -> None:
        """Read responses until the connection ends; then fail whatever is pending."""
        buf = bytearray()
        error = UpstreamError(f"connection to {self.address} closed by the broker")
        try:
            while True:
                while len(buf) < 4:
                    chunk = await receive_some(self._stream, 65536)
                    if not chunk:
                        return
                    buf += chunk
                (size,) = _SIZE.unpack_from(buf, 0)
                if not 4 <= size <= MAX_RESPONSE_BYTES:
                    error = UpstreamError(f"{self.address} sent a response frame of {size} bytes")
                    return
                while len(buf) < 4 + size:
                    chunk = await receive_some(self._stream, max(65536, 4 + size - len(buf)))
                    if not chunk:
                        return
                    buf += chunk
                frame = bytes(buf[4 : 4 + size])
                del buf[: 4 + size]
                self._deliver(frame)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            error = UpstreamError(f"connection to {self.address} failed: {exc}")
        finally:
            self._fail_all(error)
            with trio.CancelScope(shield=True):
                await self._close_stream()

    async def _close_stream(self) -> None:
        # The reader and aclose() may both close: with TLS the second close_notify then finds
        # the socket closed already, which is no error.
        try:
            await self._stream.aclose()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    def _deliver(self, frame: bytes) -> None:
        (correlation_id,) = struct.unpack_from(">i", frame, 0)
        pending = self._pending.pop(correlation_id, None)
        if not self._pending:
            self._idle.set()
        if pending is None:
            log.warning("upstream %s answered unknown correlation id %d", self.address, correlation_id)
            return
        if pending.on_answer is not None:
            pending.event.set()
            self._call_back(pending.on_answer, frame)
            return
        try:
            pending.response = pending.decode(frame)
        except Exception as exc:  # noqa: BLE001 - ProtocolError, or the library's decode errors: the broker sent garbage
            pending.error = UpstreamError(f"cannot decode response from {self.address}: {exc}")
        pending.event.set()

    def _fail_all(self, error: UpstreamError) -> None:
        self._closed.set()
        pending, self._pending = self._pending, {}
        self._idle.set()
        self._deadlines.clear()
        if self._expiry_scope is not None:
            self._expiry_scope.cancel()
        for p in pending.values():
            p.error = error
            if p.on_answer is not None and not p.event.is_set():
                p.event.set()
                self._call_back(p.on_answer, error)
            p.event.set()

    async def aclose(self) -> None:
        self._closed.set()
        if self._expiry_scope is not None:
            self._expiry_scope.cancel()
        await self._close_stream()


class _FixedToken(AbstractTokenProvider):  # type: ignore[misc]  # kafka-python is untyped
    """kafka-python's OAUTHBEARER mechanism asks a provider synchronously; ours was signed beforehand."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self._token = token

    def token(self) -> str:
        return self._token


def _response_class(request: Any) -> Any:
    return ResponseClassRegistry._response_class_registry[request.API_KEY][None]  # noqa: SLF001


@dataclass(frozen=True)
class BrokerAddress:
    node_id: int
    host: str
    port: int
    rack: str | None


class UpstreamCluster:
    """Connections to the upstream cluster, one per broker node, opened on demand.

    Use `async with open_upstream(config) as cluster:`; reader tasks live in its nursery.
    """

    def __init__(self, config: UpstreamConfig, nursery: trio.Nursery, msk_tokens: MskIamTokens | None = None) -> None:
        """`msk_tokens` signs the OAUTHBEARER tokens (default: from config's region and role, AWS credential chain).

        Raises ConfigError if the TLS CA file cannot be loaded.
        """
        self.config = config
        self._nursery = nursery
        self._ssl_context = client_context(config.tls_ca_file, config.tls_check_hostname) if config.tls else None
        if msk_tokens is None and config.msk_iam:
            msk_tokens = MskIamTokens(config.aws_msk_iam_region, role_arn=config.aws_msk_iam_role_arn)
        self._msk_tokens = msk_tokens
        self._connections: dict[int, UpstreamConnection] = {}
        self._connect_locks: dict[int, trio.Lock] = {}
        self._brokers: dict[int, BrokerAddress] = {}
        self._bootstrap_start = 0  # index of the bootstrap address tried first
        self.api_versions: dict[int, tuple[int, int]] = {}

    def set_brokers(self, brokers: Mapping[int, BrokerAddress]) -> None:
        self._brokers = dict(brokers)

    @property
    def brokers(self) -> Mapping[int, BrokerAddress]:
        return self._brokers

    def open_connection(self, node_id: int) -> UpstreamConnection | None:
        """The open connection to `node_id` if there is one (no wait), else None."""
        conn = self._connections.get(node_id)
        return conn if conn is not None and not conn.closed else None

    async def connection(self, node_id: int = BOOTSTRAP_NODE) -> UpstreamConnection:
        """An open connection to `node_id` (or any bootstrap server). Raises UpstreamError."""
        conn = self._connections.get(node_id)
        if conn is not None and not conn.closed:
            return conn
        lock = self._connect_locks.setdefault(node_id, trio.Lock())
        async with lock:
            conn = self._connections.get(node_id)
            if conn is not None and not conn.closed:
                return conn
            conn = await self._connect(node_id)
            self._connections[node_id] = conn
            return conn

    async def _connect(self, node_id: int) -> UpstreamConnection:
        """Connect to `node_id`, or to the bootstrap servers in turn.

        Any failure of an address - TCP, TLS, or a broker that accepts and then does not
        answer ApiVersions or SASL within connect_timeout_s - moves on to the next address;
        the next bootstrap connection starts after the address that failed last.
        Raises UpstreamError when every address failed.
        """
        if node_id == BOOTSTRAP_NODE or node_id not in self._brokers:
            candidates = [hp.rpartition(":") for hp in self.config.bootstrap_servers]
            addresses = [(h, int(p)) for h, _, p in candidates]
            start = self._bootstrap_start % len(addresses)
            addresses = addresses[start:] + addresses[:start]
        else:
            b = self._brokers[node_id]
            addresses = [(b.host, b.port)]
        failures: list[str] = []
        for host, port in addresses:
            try:
                return await self._connect_to(node_id, host, port)
            except UpstreamError as exc:
                reason = str(exc)  # SASL failures name their address already
                failures.append(reason if reason.startswith(f"{host}:{port}:") else f"{host}:{port}: {reason}")
                if node_id == BOOTSTRAP_NODE or node_id not in self._brokers:
                    self._bootstrap_start += 1
                log.info("upstream node %d at %s:%d failed: %s", node_id, host, port, exc)
        raise UpstreamError(f"cannot connect to upstream node {node_id}: {'; '.join(failures)}")

    async def _connect_to(self, node_id: int, host: str, port: int) -> UpstreamConnection:
        """One address: TCP (+TLS), ApiVersions once per cluster, SASL. Raises UpstreamError."""
        try:
            with trio.fail_after(self.config.connect_timeout_s):
                stream = await self._open_stream(host, port)
        except (OSError, trio.TooSlowError, trio.BrokenResourceError) as exc:
            cause = exc.__cause__ if isinstance(exc, trio.BrokenResourceError) and exc.__cause__ else exc
            raise UpstreamError(f"connect failed: {cause!r}") from exc
        conn = UpstreamConnection(stream, node_id, f"{host}:{port}", self.config.client_id)
        self._nursery.start_soon(conn.run_reader)
        self._nursery.start_soon(conn.expire_late_answers)
        try:
            if not self.api_versions:
                await self._fetch_api_versions(conn)
            if self.config.sasl_mechanism:
                reauth_ms = await self._authenticate(conn)
                if reauth_ms is not None:
                    self._nursery.start_soon(self._keep_authenticated, conn, reauth_ms)
        except UpstreamError:
            await conn.aclose()
            raise
        return conn

    def start_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run a background task in the cluster's nursery (it must not raise)."""
        self._nursery.start_soon(fn, *args)

    async def drop(self, node_id: int) -> None:
        """Close the cached connection to `node_id` (the next use reconnects); pending requests
        fail. Dropping the bootstrap connection makes the next one start at the next address."""
        if node_id == BOOTSTRAP_NODE:
            self._bootstrap_start += 1
        conn = self._connections.pop(node_id, None)
        if conn is not None:
            await conn.aclose()

    async def _open_stream(self, host: str, port: int) -> trio.abc.Stream:
        """TCP, and TLS on top when configured (the socket is closed if the handshake fails).

        Raises OSError, or trio.BrokenResourceError wrapping the ssl error.
        """
        tcp = await trio.open_tcp_stream(host, port)
        take_whole_writes(tcp)  # a forwarded request goes out in one write, not 16 KiB at a time
        if self._ssl_context is None:
            return tcp
        stream = trio.SSLStream(tcp, self._ssl_context, server_hostname=host)
        try:
            await stream.do_handshake()
        except BaseException:
            await trio.aclose_forcefully(tcp)
            raise
        return stream

    async def _fetch_api_versions(self, conn: UpstreamConnection) -> None:
        # v0: every broker answers it; the ranges are all we need. Part of connecting, so
        # bounded like it: a broker that accepts and never answers is skipped quickly.
        response = await conn.request(ApiVersionsRequest[0](), 0, self.config.connect_timeout_s)
        if response.error_code != 0:
            raise UpstreamError(f"upstream ApiVersions failed with error {response.error_code}")
        self.api_versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}

    async def _authenticate(self, conn: UpstreamConnection, holding_lock: bool = False) -> int | None:
        """SaslHandshake v1, then SaslAuthenticate until the mechanism is done.

        Returns the milliseconds after which the connection must re-authenticate (KIP-368), or
        None when the broker set no session lifetime. Raises UpstreamError.
        """
        timeout_s = self.config.request_timeout_s
        mechanism_name = self.config.sasl_mechanism
        handshake = await conn.request(SaslHandshakeRequest(mechanism=mechanism_name), 1, timeout_s,
                                       holding_lock=holding_lock)
        if handshake.error_code != 0:
            raise UpstreamError(f"{conn.address} refused SASL mechanism {mechanism_name} "
                                f"(error {handshake.error_code}; enabled: {handshake.mechanisms})")
        version = self.version_for(SaslAuthenticateRequest.API_KEY, 2)
        identity = "the IAM role" if self.config.msk_iam else repr(self.config.sasl_username)
        mechanism = get_sasl_mechanism(mechanism_name)(
            sasl_mechanism=mechanism_name, sasl_plain_username=self.config.sasl_username,
            sasl_plain_password=self.config.sasl_password, security_protocol=self.config.security_protocol,
            sasl_oauth_token_provider=await self._oauth_token())
        session_lifetime_ms = 0
        try:
            while not mechanism.is_done():
                response = await conn.request(SaslAuthenticateRequest(auth_bytes=mechanism.auth_bytes()),
                                              version, timeout_s, holding_lock=holding_lock)
                if response.error_code != 0:
                    raise UpstreamError(f"{conn.address}: SASL {mechanism_name} authentication as "
                                        f"{identity} failed (error {response.error_code}): "
                                        f"{response.error_message}")
                mechanism.receive(response.auth_bytes)
                session_lifetime_ms = getattr(response, "session_lifetime_ms", 0) or 0  # v1+ (KIP-368)
        except (ValueError, KeyError) as exc:  # kafka-python's SCRAM client: bad server messages or signature
            raise UpstreamError(f"{conn.address}: SASL {mechanism_name} exchange failed: {exc}") from exc
        if not mechanism.is_authenticated():
            raise UpstreamError(f"{conn.address}: SASL {mechanism_name} authentication did not complete")
        return reauthenticate_after_ms(session_lifetime_ms)

    async def _oauth_token(self) -> _FixedToken | None:
        """The MSK IAM token for this exchange, signed in a worker thread. Raises UpstreamError."""
        if self._msk_tokens is None:
            return None
        try:
            token = await trio.to_thread.run_sync(self._msk_tokens.token)
        except MskIamError as exc:
            raise UpstreamError(str(exc)) from exc
        return _FixedToken(token.value)

    async def _keep_authenticated(self, conn: UpstreamConnection, reauth_ms: int | None) -> None:
        """Re-authenticate `conn` each time its session nears its end, until it closes (KIP-368)."""
        while reauth_ms is not None:
            with trio.move_on_after(reauth_ms / 1000):
                await conn.wait_closed()
            if conn.closed:
                return
            try:
                async with conn.quiesced(self.config.request_timeout_s):
                    reauth_ms = await self._authenticate(conn, holding_lock=True)
            except UpstreamError as exc:
                # The broker would close it at the session's end anyway; the next request reconnects.
                log.warning("re-authentication to %s failed, closing the connection: %s", conn.address, exc)
                await conn.aclose()
                return
            conn.reauthentications += 1
            log.debug("re-authenticated to %s; next in %s ms", conn.address, reauth_ms)

    async def ensure_api_versions(self) -> dict[int, tuple[int, int]]:
        if not self.api_versions:
            await self.connection()
        return self.api_versions

    def version_for(self, api_key: int, highest_we_speak: int) -> int:
        """The highest version both we and the upstream speak. Raises UpstreamError if none."""
        if api_key not in self.api_versions:
            raise UpstreamError(f"upstream does not support api_key {api_key}")
        lo, hi = self.api_versions[api_key]
        version = min(hi, highest_we_speak)
        if version < lo:
            raise UpstreamError(f"no common version for api_key {api_key}")
        return version

    async def aclose(self) -> None:
        for conn in list(self._connections.values()):
            with trio.CancelScope(shield=True):
                await conn.aclose()


class open_upstream:  # noqa: N801 - used as `async with open_upstream(config) as cluster`
    def __init__(self, config: UpstreamConfig, msk_tokens: MskIamTokens | None = None) -> None:
        self._config = config
        self._msk_tokens = msk_tokens

    async def __aenter__(self) -> UpstreamCluster:
        self._nursery_manager = trio.open_nursery()
        nursery = await self._nursery_manager.__aenter__()
        self._cluster = UpstreamCluster(self._config, nursery, self._msk_tokens)
        return self._cluster

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        await self._cluster.aclose()
        return await self._nursery_manager.__aexit__(*exc_info)
