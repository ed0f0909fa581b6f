"""The client-facing Kafka listener (trio): one connection task per client.

Per connection, one reader drives the sans-IO codec and hands each request to
`RequestHandler.begin`, in request order; what `begin` returns is a response slot, queued
in the connection's ResponseQueue, whose answers go out strictly in request order
(proxy/response_slots.py). The queue is bounded by `max_in_flight_per_connection`, so a
client that pipelines too much stops being read (TCP backpressure) instead of growing
memory. Bad input closes only that connection.
"""

from __future__ import annotations

import functools
import logging
import os
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from core.addresses import is_loopback
from core.log_limit import LogLimiter
from core.socket_io import receive_into, receive_some, take_whole_writes
from core.tls import HANDSHAKE_TIMEOUT_S
from kafka_protocol.frame_pool import FramePool
from kafka_protocol.kafka_codec import (
    NEED_DATA,
    ProtocolError,
    ServerCodec,
    UnsupportedRequest,
)
from proxy import limits, metrics
from proxy.acl import Request
from proxy.config import ProxyConfig
from proxy.limits import admit, receive_deadline
from proxy.memory import TRIM_CHECK_INTERVAL_S, BurstTracker, burst_is_big, burst_over_since, should_trim, trim
from proxy.principal_mapping import NoRuleMatched, parse_rules, principal_name, subject_name
from proxy.receive_budget import ReceiveBudget
from proxy.request_handler import RequestHandler, client_principal
from proxy.response_slots import ResponseQueue, ResponseSlot
from proxy.sasl import (
    Credentials,
    SaslSession,
)
from proxy.versions import (
    FEATURE_MARKERS,
)

log = logging.getLogger(__name__)

# A read outside a large frame's own buffer. Small: the first read of a ~1 MB request only
# needs its header (the rest goes straight into the frame's buffer), and a 256 KiB read
# cost an allocation of its size and a copy of what it got into the frame's buffer.
RECEIVE_CHUNK_BYTES = 64 * 1024
MIN_RECEIVE_BYTES = 16 * 1024  # with less room than this in the receive budget, a connection stops reading
NOTHING_YET = -2  # _read_ready found the socket empty


@dataclass
class _ConnectionState:
    """What the limits of one connection look at (trio times)."""

    source: str  # the peer's address
    last_activity: float  # bytes in, or a response out
    partial_since: float | None = None  # first bytes of a request not yet complete arrived then
    outstanding: int = 0  # requests read whose response is not yet written
    accounted: int = 0  # bytes its codec holds, as counted in the receive budget


# A client's connection: plain TCP, or TLS over it when the proxy has a certificate.
ClientStream = trio.SocketStream | trio.SSLStream[trio.SocketStream]


class ProxyServer:
    """Accepts client connections and serves them until cancelled or `shutdown()`."""

    def __init__(self, config: ProxyConfig, handler: RequestHandler, *, ssl_context: ssl.SSLContext | None = None,
                 credentials: Credentials | None = None) -> None:
        """`ssl_context`: serve TLS. `credentials`: require SASL (config.sasl_mechanisms) first."""
        self.config = config
        self.handler = handler
        self._ssl_context = ssl_context
        self._credentials = credentials
        # mutual TLS: certificate subject -> principal name (validated with the config)
        self._mapping_rules = parse_rules(config.tls_principal_mapping_rules) if config.tls_client_ca_file else None
        self._reading_scopes: set[trio.CancelScope] = set()  # one per connection waiting for bytes
        self._stopping = False
        self._listen_scope: trio.CancelScope | None = None
        self._listening: tuple[trio.Nursery, trio.Nursery] | None = None  # (listeners, connection handlers)
        self._connections = 0
        self._open_by_source: dict[str, int] = {}
        self._budget = ReceiveBudget(config.max_receive_buffer_bytes)
        self._frame_pool = FramePool()  # large requests' buffers, used again once released
        self._log_limiter = LogLimiter()
        self._burst = BurstTracker()
        self._big_burst = trio.Event()  # set once self._burst is big enough to trim after
        self._idle = trio.Event()
        self._idle.set()
        # Awaited by shutdown() after the in-flight requests, within the same grace period
        # (the router's WAL path: deliveries already acknowledged to producers).
        self.on_shutdown: list[Callable[[], Awaitable[None]]] = []

    @property
    def draining(self) -> bool:
        """True from the start of `shutdown()`: no new connections, in-flight work finishing."""
        return self._stopping

    async def serve(self, listeners: list[trio.SocketListener],
                    task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            with trio.CancelScope() as self._listen_scope:
                async with trio.open_nursery() as listening:
                    self._listening = (listening, nursery)
                    listening.start_soon(functools.partial(trio.serve_listeners, self._handle_connection, listeners,
                                                           handler_nursery=nursery))
                    listening.start_soon(self._trim_after_bursts)
                    task_status.started(listeners)
            self._listening = None

    async def _trim_after_bursts(self) -> None:
        """Give a burst's memory back once it has been over a while (proxy/memory.py); until
        a burst is big enough to trim after, sleep (an idle proxy wakes for nothing)."""
        while True:
            await self._big_burst.wait()
            await trio.sleep(TRIM_CHECK_INTERVAL_S)
            self._after_burst()

    def _note_burst_peak(self) -> None:
        """Called on each new peak of the burst: wake the trim task once it is big."""
        if not self._big_burst.is_set() and burst_is_big(self._burst):
            self._big_burst.set()

    async def open_broker_listener(self) -> int:
        """One more listener on the proxy's host (an ephemeral port), served like the first;
        returns its port. Raises OSError, RuntimeError if the server is not serving."""
        if self._listening is None:
            raise RuntimeError("the proxy is not serving")
        listening, handlers = self._listening
        listeners = await trio.open_tcp_listeners(0, host=self.config.listen_host)
        listening.start_soon(functools.partial(trio.serve_listeners, self._handle_connection, listeners,
                                               handler_nursery=handlers))
        port: int = listeners[0].socket.getsockname()[1]  # trio types socket addresses as Any
        return port

    async def shutdown(self) -> None:
        """Stop accepting and reading; let in-flight requests finish within shutdown_grace_s.

        Only waiting for bytes is interrupted: a request already read is handed on and
        answered, never abandoned halfway (it may already be at the leader).
        """
        self._stopping = True
        if self._listen_scope is not None:
            self._listen_scope.cancel()
        for scope in list(self._reading_scopes):
            scope.cancel()
        with trio.move_on_after(self.config.shutdown_grace_s) as grace:
            await self._idle.wait()
            for hook in self.on_shutdown:
                await hook()
        if grace.cancelled_caught:
            log.warning("shutdown grace of %ss over with work left (requests or deliveries); a restart recovers "
                        "acknowledged WAL entries", self.config.shutdown_grace_s)

    def _limited(self, reason: str, source: str, what: str) -> None:
        """Count a limit's refusal or close; log it at most once per reason and source per minute."""
        metrics.CONNECTIONS_LIMITED.labels(reason).inc()
        allowed, held_back = self._log_limiter.allow((reason, source), trio.current_time())
        if allowed:
            more = f" ({held_back} more like it held back)" if held_back else ""
            log.warning("%s from %s: %s%s", what, source, reason, more)

    async def _handle_connection(self, tcp_stream: trio.SocketStream) -> None:
        stream: ClientStream = tcp_stream
        source = _peer_host(tcp_stream)
        refused = admit(self._connections, self._open_by_source.get(source, 0), is_loopback(source),
                        self.config.max_connections, self.config.max_connections_per_source)
        if refused is not None:
            self._limited(refused, source, "refused a connection")
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await stream.aclose()
            return
        metrics.CONNECTIONS.inc()
        self._connections += 1
        if self._connections > self._burst.peak_connections:  # a burst growing is not over
            self._burst.peak_connections, self._burst.over_since = self._connections, None
            self._note_burst_peak()
        self._open_by_source[source] = self._open_by_source.get(source, 0) + 1
        self._idle = trio.Event() if self._connections == 1 else self._idle
        try:
            take_whole_writes(tcp_stream)  # large answers (fetches passed through) in one write
            node_id = self.handler.node_for_port(tcp_stream.socket.getsockname()[1])
            tls_name = None
            if self._ssl_context is not None:
                stream = tls_stream = trio.SSLStream(tcp_stream, self._ssl_context, server_side=True)
                if not await _tls_handshake(tls_stream):
                    return
                if self._mapping_rules is not None:
                    tls_name = self._certificate_principal(tls_stream, source)
                    if tls_name is None:
                        return
            await self._serve_connection(stream, source, node_id, tls_name)
        except Exception:  # a bug handling one client must not take the listener down
            metrics.PROTOCOL_ERRORS.labels("internal").inc()
            log.exception("internal error on a client connection; closing it")
        finally:
            metrics.CONNECTIONS.dec()
            self._connections -= 1
            left = self._open_by_source[source] - 1
            if left:
                self._open_by_source[source] = left
            else:
                del self._open_by_source[source]
            if self._connections == 0:
                self._idle.set()
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await stream.aclose()

    def _after_burst(self) -> None:
        """Once a burst of connections or bytes has been over a while, give its memory back."""
        now = trio.current_time()
        self._burst.over_since = burst_over_since(self._burst, now, self._connections, self._budget.used)
        if should_trim(self._burst, now):
            started = time.perf_counter()
            if trim():
                metrics.MEMORY_TRIMS.inc()
                log.info("a burst of %d connections (peak %d bytes held) is over: free memory returned to the OS "
                         "in %.1f ms", self._burst.peak_connections, self._burst.peak_held_bytes,
                         (time.perf_counter() - started) * 1000)
            self._burst = BurstTracker(last_trim_at=now, baseline_connections=self._connections,
                                       peak_connections=self._connections)
            self._big_burst = trio.Event()

    def _certificate_principal(self, stream: trio.SSLStream[trio.SocketStream], source: str) -> str | None:
        """The principal name of the client's certificate (verified by the handshake), or None
        (logged, counted) when no mapping rule gives one: the connection is closed, as Kafka does."""
        assert self._mapping_rules is not None
        try:
            name = principal_name(self._mapping_rules, subject_name(stream.getpeercert()["subject"]))
        except (NoRuleMatched, KeyError, TypeError) as exc:
            metrics.PROTOCOL_ERRORS.labels("tls_principal").inc()
            log.info("closing connection from %s: client certificate: %s", source, exc)
            return None
        return name

    async def _serve_connection(self, stream: ClientStream, source: str = "",
                                node_id: int | None = None, tls_name: str | None = None) -> None:
        codec = ServerCodec(self.config.max_frame_bytes, self._frame_pool)
        state = _ConnectionState(source, trio.current_time())
        session = None
        if self._credentials is not None:
            session = SaslSession(self.config.sasl_mechanisms, self._credentials)

        def answered() -> None:
            state.outstanding -= 1  # answered (or never to be: acks=0)
            state.last_activity = trio.current_time()

        responses = ResponseQueue(stream.socket.fileno() if isinstance(stream, trio.SocketStream) else None,
                                  self.config.max_in_flight_per_connection, answered)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(responses.run_writer, stream, nursery.cancel_scope, _count_broken_answer)
            try:
                await self._read_requests(stream, codec, responses, nursery, session, state, node_id, tls_name)
            except ProtocolError as exc:
                metrics.PROTOCOL_ERRORS.labels(type(exc).__name__).inc()
                log.warning("closing connection: %s", exc)
                nursery.cancel_scope.cancel()
            except UnsupportedRequest as exc:
                metrics.PROTOCOL_ERRORS.labels("unsupported").inc()
                hint = " (the sidecar is produce-only: point consumers and admin clients at the cluster)" \
                    if exc.frame.api_key in FEATURE_MARKERS else ""
                log.warning("closing connection: %s (client_id=%s)%s", exc, exc.frame.client_id, hint)
                nursery.cancel_scope.cancel()
            finally:
                responses.close()
                self._budget.add(-state.accounted)
                self._budget.end_overdraft(state)

    def _account(self, codec: ServerCodec, state: _ConnectionState) -> None:
        held = codec.held_bytes
        self._budget.add(held - state.accounted)
        state.accounted = held
        if self._budget.used > self._burst.peak_held_bytes:
            self._burst.peak_held_bytes, self._burst.over_since = self._budget.used, None
            self._note_burst_peak()

    async def _read_requests(self, stream: ClientStream, codec: ServerCodec, responses: ResponseQueue,
                             nursery: trio.Nursery, session: SaslSession | None = None,
                             state: _ConnectionState | None = None, node_id: int | None = None,
                             tls_name: str | None = None) -> None:
        # Plain TCP: large frames are read straight into their own buffer (no joining copy).
        sock = stream.socket if isinstance(stream, trio.SocketStream) else None
        state = state or _ConnectionState("", trio.current_time())
        config = self.config
        who: Request | None = None  # the client's principal, once authenticated (authz, quotas, the audit)
        slot: ResponseSlot | None
        mute_until = 0.0  # a quota throttle: no read before this trio time
        while not self._stopping:
            if mute_until and mute_until > trio.current_time():
                # Throttled (quotas): read nothing until the throttle time is over, as Kafka
                # mutes the channel; shutdown() ends the wait like any other read.
                muted = trio.CancelScope(deadline=mute_until)
                self._reading_scopes.add(muted)
                try:
                    with muted:
                        await trio.sleep_forever()
                finally:
                    self._reading_scopes.discard(muted)
                if self._stopping:
                    return
                state.last_activity = trio.current_time()  # waiting on our throttle is not idle
            # Bytes already there are read at once, without the deadline, cancel scope and budget
            # wait that waiting for them needs (NOTHING_YET: nothing there; -1: no room; both wait below).
            got = self._read_ready(sock, codec, state) if sock is not None else -1
            empty = got == NOTHING_YET  # found empty just now: the read below waits before it tries
            if not got:
                return  # client closed; pending responses are still written
            if got < 0:
                deadline = receive_deadline(state.partial_since, state.last_activity, config.request_receive_timeout_s,
                                            config.idle_timeout_s)
                receiving = trio.CancelScope(deadline=deadline.at)
                self._reading_scopes.add(receiving)
                direct = None
                got = 0
                try:
                    with receiving:
                        room = self._budget.room
                        if room < MIN_RECEIVE_BYTES or self._budget.overdraft_holder is state:
                            # Backpressure: read nothing until there is room, unless this connection may
                            # finish its half-received request on the overdraft (proxy/receive_budget.py).
                            owner = state if state.partial_since is not None else None
                            overdraft = await self._budget.wait_for_room(MIN_RECEIVE_BYTES, owner)
                            empty = False
                            room = max(self._budget.room, RECEIVE_CHUNK_BYTES if overdraft else 0)
                        # The frame buffer grows before its bytes come, so only within the room; a
                        # chunk read is counted once it arrived (the bound is soft by one read).
                        direct = codec.frame_buffer(room) if sock is not None else None
                        self._account(codec, state)
                        if direct is not None:
                            assert sock is not None  # a frame buffer is read into on plain TCP only
                            got = await receive_into(sock, direct, wait_first=empty)
                        else:
                            data = await receive_some(stream, RECEIVE_CHUNK_BYTES, wait_first=empty)
                            got = len(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    return
                finally:
                    self._reading_scopes.discard(receiving)
                    if direct is not None:
                        direct.release()  # the codec may grow the buffer before the next read
                if receiving.cancelled_caught:
                    if self._stopping:
                        return  # shutting down
                    if deadline.reason == limits.IDLE_TIMEOUT:
                        now = trio.current_time()
                        if state.outstanding:
                            state.last_activity = now  # waiting for our answers is not idle
                        if now < state.last_activity + config.idle_timeout_s:
                            continue  # an answer went out while this read waited
                    self._limited(deadline.reason, state.source, "closed a connection")
                    return
                if not got:
                    return  # client closed; pending responses are still written
                if direct is not None:
                    codec.received_into(got)
                else:
                    codec.receive_data(data)
            completed = False
            while True:
                frame = codec.next_frame()
                if frame is NEED_DATA:
                    break
                completed = True
                state.outstanding += 1
                if session is not None and not session.authenticated:
                    slot, close = await self.handler.begin_unauthenticated(frame, session, nursery)
                    await responses.put(slot)
                    if close:
                        return  # the answer is still written, then the connection closes
                    continue
                if who is None:
                    who = client_principal(session, state.source, tls_name)
                slot = await self.handler.begin(frame, nursery, node_id, who)
                if slot is not None and slot.mute_until > mute_until:
                    mute_until = slot.mute_until
                if slot is not None:
                    await responses.put(slot)
                else:
                    state.outstanding -= 1
            self._account(codec, state)
            # Measured after handing the requests on: time spent waiting for our own room
            # (max_in_flight_per_connection) is not the client's slowness.
            now = trio.current_time()
            state.last_activity = now
            if completed:
                self._budget.end_overdraft(state)
            if not codec.buffered_bytes:
                state.partial_since = None
            elif completed or state.partial_since is None:
                state.partial_since = now

    def _read_ready(self, sock: trio.socket.SocketType, codec: ServerCodec, state: _ConnectionState) -> int:
        """Read what a plain TCP socket holds now into the codec, without waiting: the bytes
        read (0: the client closed), NOTHING_YET when the socket is empty, or -1 when there is
        no room in the receive budget or the read failed (the waiting read then meets it again)."""
        room = self._budget.room
        if room < MIN_RECEIVE_BYTES or self._budget.overdraft_holder is not None:
            return -1
        direct = codec.frame_buffer(room)
        self._account(codec, state)
        try:
            if direct is not None:
                got = os.readv(sock.fileno(), [direct])
                if got:
                    direct.release()
                    direct = None
                    codec.received_into(got)
                return got
            data = os.read(sock.fileno(), RECEIVE_CHUNK_BYTES)
            codec.receive_data(data)
            return len(data)
        except BlockingIOError:
            return NOTHING_YET
        except OSError:  # the waiting read meets it too
            return -1
        finally:
            if direct is not None:
                direct.release()


def _count_broken_answer() -> None:
    metrics.PROTOCOL_ERRORS.labels("internal").inc()


def _peer_host(stream: trio.SocketStream) -> str:
    """The client's address ("" if the socket no longer knows it)."""
    try:
        peer = stream.socket.getpeername()
    except OSError:
        return ""
    return str(peer[0]) if isinstance(peer, tuple) else str(peer)


async def _tls_handshake(stream: trio.SSLStream[trio.SocketStream]) -> bool:
    """Finish the server side of a TLS handshake; False (logged) if the client failed it."""
    try:
        with trio.fail_after(HANDSHAKE_TIMEOUT_S):
            await stream.do_handshake()
    except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError) as exc:
        metrics.PROTOCOL_ERRORS.labels("tls_handshake").inc()
        log.info("closing connection: TLS handshake failed: %r", exc.__cause__ or exc)
        return False
    return True
