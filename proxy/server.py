"""The client-facing Kafka listener (trio): one connection task per client.

Per connection, one reader drives the sans-IO codec and hands each request to
`RequestHandler.begin`, in request order; what `begin` returns is a response slot that a
single writer task sends strictly in request order. The slot channel is bounded by
`max_in_flight_per_connection`, so a client that pipelines too much stops being read
(TCP backpressure) instead of growing memory. Bad input closes only that connection.

Write-through: when a slot is filled while the writer task is parked waiting for exactly
that slot (plain TCP), the filler writes the answer to the socket itself, without waiting
for the writer task's next scheduler step; the writer then sends whatever the socket did
not take. Order is unchanged: only the slot the writer waits for is ever written early.
"""

from __future__ import annotations

import functools
import logging
import os
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio
from kafka.protocol.producer.transaction import InitProducerIdRequest, InitProducerIdResponse
from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

from core import errors
from core.addresses import is_loopback
from core.audit import AuditSink
from core.configload import ConfigError
from core.errors import COORDINATOR_NOT_AVAILABLE
from core.log_limit import LogLimiter
from core.produce import ProduceBackend, Results
from core.socket_io import receive_into, receive_some
from core.tls import HANDSHAKE_TIMEOUT_S, check_private, server_context
from kafka_protocol.api_names import api_name
from kafka_protocol.kafka_codec import (
    API_API_VERSIONS,
    API_FIND_COORDINATOR,
    API_INIT_PRODUCER_ID,
    API_METADATA,
    API_PRODUCE,
    API_SASL_AUTHENTICATE,
    API_SASL_HANDSHAKE,
    MESSAGES,
    NEED_DATA,
    ProtocolError,
    RequestFrame,
    ServerCodec,
    UnsupportedRequest,
    decode_request,
    encode_response,
)
from kafka_upstream.config import UpstreamConfig
from kafka_upstream.coordinators import (
    FORWARDED,
    Coordinators,
    coordinator_key,
    error_response,
    forwarded_frame,
    with_correlation_id,
)
from kafka_upstream.direct import (
    DirectBackend,
    encode_produce_answer,
    produce_answers,
    refuse_partitions,
    validate_produce,
)
from kafka_upstream.errors import UpstreamError
from kafka_upstream.metadata import MetadataCache, build_client_metadata
from kafka_upstream.upstream import UpstreamCluster, open_upstream
from proxy import authorize, limits, metrics
from proxy.acl import AclProvider, AclSet, Request
from proxy.acl_rules import AclFileError, parse_acl_file
from proxy.acl_source import ClusterAcls, FixedAcls
from proxy.authz_answers import authorized_metadata, coordinator_refusal
from proxy.bypass import SameZoneBypass, coordinator_endpoint, same_zone_brokers, with_real_endpoints
from proxy.config import AuthzConfig, ProxyConfig, QuotaConfig
from proxy.limits import admit, receive_deadline
from proxy.listen import open_listeners
from proxy.memory import TRIM_CHECK_INTERVAL_S, BurstTracker, burst_over_since, should_trim, trim
from proxy.passthrough import API_FETCH, BrokerListeners, build_broker_metadata, fetch_with_rack, passthrough_versions
from proxy.passthrough_audit import PassthroughMeter
from proxy.principal_mapping import NoRuleMatched, parse_rules, principal_name, subject_name
from proxy.produce_only import refused_fetch
from proxy.quota import ProduceQuotas
from proxy.receive_budget import ReceiveBudget
from proxy.sasl import (
    SASL_AUTHENTICATION_FAILED,
    AuthenticationFailed,
    Credentials,
    CredentialsError,
    SaslSession,
    load_credentials,
)
from proxy.versions import (
    FEATURE_MARKERS,
    api_versions_response,
    negotiate,
    unsupported_api_versions_response,
    with_sasl,
)

log = logging.getLogger(__name__)

PROXY_NODE_ID = 1  # the one broker clients see (without proxy.broker_listeners)
# A request passed through may wait at the broker for long: JoinGroup until the rebalance
# ends (up to the group's max.poll.interval.ms, 300 s by default). The client has its own
# timeout; the proxy must not give up first.
PASS_THROUGH_TIMEOUT_S = 310.0
RECEIVE_CHUNK_BYTES = 256 * 1024
MIN_RECEIVE_BYTES = 16 * 1024  # with less room than this in the receive budget, a connection stops reading
HIGHEST_INIT_PRODUCER_ID_VERSION = 5
MAX_REFUSED_CLIENTS_LOGGED = 1024  # client ids whose refused Fetch was logged (once each)
LOGIN_THREADS = 2  # PLAIN logins run PBKDF2 (ms each) off the event loop; a login storm gets two threads


@dataclass
class ResponseSlot:
    """A response-to-be, sent by the writer when `ready` fires (`data` None = send nothing)."""

    ready: trio.Event
    data: bytes | None = None
    writer: _ResponseWriter | None = None  # its connection's writer, once queued there
    broken: bool = False  # answering failed (our bug): the writer closes the connection
    mute_until: float = 0.0  # quota throttle: read nothing more from this connection before this trio time

    def fill(self, data: bytes) -> None:
        """Set the answer and mark it ready; written at once if the writer waits for this slot."""
        writer = self.writer
        if writer is not None and writer.waiting_for is self:
            data = writer.write_now(data)
        self.data = data
        self.ready.set()


class _ResponseWriter:
    """What `ResponseSlot.fill` needs to write through: the socket, and the slot the
    connection's writer task is parked on (None while it sends or has nothing queued)."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd  # plain TCP only: a TLS stream must encrypt through trio
        self.waiting_for: ResponseSlot | None = None

    def write_now(self, data: bytes) -> bytes:
        """Write what the non-blocking socket takes now; returns the rest for the writer task."""
        if self.fd is None:
            return data
        try:
            written = os.write(self.fd, data)
        except BlockingIOError:
            return data
        except OSError:
            return data  # the client went away: the writer task meets the error and closes
        return data[written:]


@dataclass
class _ConnectionState:
    """What the limits of one connection look at (trio times)."""

    source: str  # the peer's address
    last_activity: float  # bytes in, or a response out
    partial_since: float | None = None  # first bytes of a request not yet complete arrived then
    outstanding: int = 0  # requests read whose response is not yet written
    accounted: int = 0  # bytes its codec holds, as counted in the receive budget


ProduceBackendFactory = Callable[[UpstreamCluster, MetadataCache], Awaitable[ProduceBackend]]
# A client's connection: plain TCP, or TLS over it when the proxy has a certificate.
ClientStream = trio.SocketStream | trio.SSLStream[trio.SocketStream]


class RequestHandler:
    """Answers the requests the proxy serves; everything else is refused like a broker would."""

    def __init__(self, config: ProxyConfig, upstream: UpstreamConfig, cluster: UpstreamCluster,
                 metadata: MetadataCache, backend: ProduceBackend, advertise_host: str, advertise_port: int,
                 authz: AclProvider | None = None, quotas: ProduceQuotas | None = None) -> None:
        """`authz`: the ACLs each client principal is checked against (None: authz.source "none",
        every client may do what the sidecar's principal may). `quotas`: produce byte rates per
        principal (None: none)."""
        self.config = config
        self.authz = authz
        self.quotas = quotas
        self.upstream_config = upstream
        self.cluster = cluster
        self.metadata = metadata
        self.backend = backend
        self.advertise_host = advertise_host
        self.advertise_port = advertise_port
        self.advertised: dict[int, tuple[int, int]] = {}
        self._max_versions: dict[int, int] = {}  # highest version per API of `_max_versions_of`
        self._max_versions_of: dict[int, tuple[int, int]] | None = None
        self.coordinators = Coordinators(cluster, metadata, upstream.request_timeout_s)
        self.brokers: BrokerListeners | None = None  # set with proxy.broker_listeners: every API passes through
        self.bypass: SameZoneBypass | None = None  # set with proxy.bypass_same_zone: this zone's brokers at their own address
        self.meter: PassthroughMeter | None = None  # counts the bytes passed through (audit)
        self._login_limiter = trio.CapacityLimiter(LOGIN_THREADS)
        self._fetch_refused_for: set[str | None] = set()
        self._denial_log = LogLimiter()

    async def start(self) -> None:
        """Learn the upstream's API ranges (so ApiVersions can be answered). Raises UpstreamError."""
        upstream = await self.cluster.ensure_api_versions()
        self.advertised = negotiate(upstream)
        if self.brokers is not None:
            self.advertised = passthrough_versions(upstream, self.advertised)
        if self.config.sasl_mechanisms:
            self.advertised = with_sasl(self.advertised)

    def max_versions(self) -> dict[int, int]:
        """The highest version of each API the proxy advertises (not to be changed: every
        request's decoding reads it, so it is made again only when `advertised` is replaced)."""
        if self._max_versions_of is not self.advertised:
            self._max_versions = {k: hi for k, (_lo, hi) in self.advertised.items()}
            self._max_versions_of = self.advertised
        return self._max_versions

    def node_for_port(self, port: int) -> int | None:
        """The upstream broker a listener port stands for (None: the bootstrap listener)."""
        return self.brokers.nodes.get(port) if self.brokers is not None else None

    async def begin(self, frame: RequestFrame, nursery: trio.Nursery, node_id: int | None = None,
                    who: Request | None = None) -> ResponseSlot | None:
        """Run the ordered part of handling `frame`; return the slot its response will fill.

        `node_id`: the upstream broker whose listener the request came in on (pass-through).
        `who`: the client's principal and address, checked against `self.authz` when set.
        Raises ProtocolError (close the connection) for undecodable or unsupported requests.
        """
        started = time.perf_counter()
        metrics.REQUESTS_BY(api_name(frame.api_key), frame.api_version).inc()
        if self.brokers is not None and frame.api_key not in MESSAGES and frame.api_key in self.advertised:
            lo, hi = self.advertised[frame.api_key]
            if not lo <= frame.api_version <= hi:
                raise UnsupportedRequest(frame, f"unsupported version {frame.api_version} of api_key {frame.api_key}")
            slot = ResponseSlot(trio.Event())
            nursery.start_soon(self._pass_through, frame, node_id, slot, started)
            return slot
        if self.brokers is None and frame.api_key == API_FETCH and frame.api_key in self.advertised \
                and self.advertised[frame.api_key][0] <= frame.api_version <= self.advertised[frame.api_key][1]:
            refused = refused_fetch(bytes(frame.body), frame.api_version)
            if refused is not None:  # an answer, not a closed connection: the consumer reports it
                self._log_refused_fetch(frame.client_id)
                return _ready(encode_response(refused, frame.correlation_id, frame.api_version))
        try:
            request = decode_request(frame, self.max_versions())
        except UnsupportedRequest:
            if frame.api_key == API_API_VERSIONS:
                # KIP-511: answer v0 with UNSUPPORTED_VERSION and our range; the client retries lower.
                data = encode_response(unsupported_api_versions_response(self.advertised), frame.correlation_id, 0)
                return _ready(data)
            raise
        slot = ResponseSlot(trio.Event())
        if frame.api_key == API_PRODUCE:
            validated = validate_produce(request, frame.api_version, self.config.max_batch_bytes)
            if self.authz is not None:
                self._authorize_produce(validated, who)
            for tp, rejected in validated.rejected.items():
                metrics.ERRORS.labels(rejected.error_code).inc()
                log.info("rejected produce to %s-%d: %s", tp[0], tp[1], rejected.error_message,
                         extra={"topic": tp[0], "partition": tp[1]})
            throttle_ms = 0
            if self.quotas is not None:
                throttle_ms = self._throttle(frame, who, slot)
            completion = await self.backend.submit(validated.items, validated.ctx) if validated.items else None
            answer = functools.partial(self._answer_produce, slot, validated, frame, started, throttle_ms)
            # A completion that can call back (every partition on the WAL path) answers in the
            # step where its last result arrives; others are awaited by a task.
            if completion is not None and completion.on_results(answer):
                return slot

            async def finish_produce() -> None:
                answer(await completion() if completion is not None else {})

            nursery.start_soon(finish_produce)
            return slot
        if frame.api_key == API_API_VERSIONS:
            self._finish(slot, api_versions_response(self.advertised), frame, started)
            return slot
        if frame.api_key == API_METADATA:
            nursery.start_soon(self._metadata, request, frame, slot, started, who)
            return slot
        if frame.api_key == API_INIT_PRODUCER_ID:
            if self.authz is not None:
                code = authorize.init_producer_id(self.authz.current(), _principal(who), request.transactional_id)
                if code != errors.NONE:
                    self._denied(frame, "transactional_id" if request.transactional_id else "cluster", who)
                    self._finish(slot, InitProducerIdResponse(throttle_time_ms=0, error_code=code, producer_id=-1,
                                                              producer_epoch=-1), frame, started)
                    return slot
            nursery.start_soon(self._init_producer_id, request, frame, slot, started)
            return slot
        if frame.api_key == API_FIND_COORDINATOR:
            nursery.start_soon(self._find_coordinator, request, frame, slot, started, who)
            return slot
        if frame.api_key in FORWARDED:
            if self.authz is not None:
                refused = coordinator_refusal(frame.api_key, request, self.authz.current(), _principal(who))
                if refused is not None:
                    self._denied(frame, "transactional", who)
                    self._finish(slot, refused, frame, started)
                    return slot
            nursery.start_soon(self._forward_to_coordinator, request, frame, slot, started)
            return slot
        raise ProtocolError(f"api_key {frame.api_key} is decodable but not served")

    async def begin_unauthenticated(self, frame: RequestFrame, session: SaslSession,
                                    nursery: trio.Nursery) -> tuple[ResponseSlot, bool]:
        """Answer a request that arrives before SASL authentication has finished.

        Returns (slot, close): `close` means write the answer, then close the connection
        (failed authentication or an unsupported mechanism, as Kafka does). Raises
        ProtocolError for anything but ApiVersions, SaslHandshake and SaslAuthenticate.
        """
        if frame.api_key == API_API_VERSIONS:
            slot = await self.begin(frame, nursery)
            assert slot is not None
            return slot, False
        if frame.api_key not in (API_SASL_HANDSHAKE, API_SASL_AUTHENTICATE):
            raise ProtocolError(f"api_key {frame.api_key} before SASL authentication (client_id={frame.client_id})")
        started = time.perf_counter()
        metrics.REQUESTS_BY(api_name(frame.api_key), frame.api_version).inc()
        request = decode_request(frame, self.max_versions())
        slot = ResponseSlot(trio.Event())
        if frame.api_key == API_SASL_HANDSHAKE:
            error_code = session.handshake(request.mechanism)
            if error_code:
                log.info("closing connection: SASL mechanism %r refused (client_id=%s)", request.mechanism,
                         frame.client_id)
            self._finish(slot, SaslHandshakeResponse(error_code=error_code, mechanisms=list(session.mechanisms)),
                         frame, started)
            return slot, error_code != 0
        try:
            token = await trio.to_thread.run_sync(session.authenticate, request.auth_bytes,
                                                  limiter=self._login_limiter)
        except AuthenticationFailed as exc:
            metrics.PROTOCOL_ERRORS.labels("sasl_authentication_failed").inc()
            log.info("closing connection: SASL authentication failed (client_id=%s): %s", frame.client_id, exc)
            self._finish(slot, SaslAuthenticateResponse(error_code=SASL_AUTHENTICATION_FAILED, error_message=str(exc),
                                                        auth_bytes=b"", session_lifetime_ms=0), frame, started)
            return slot, True
        if session.authenticated:
            log.info("client_id=%s authenticated as %r", frame.client_id, session.principal)
        self._finish(slot, SaslAuthenticateResponse(error_code=0, error_message=None, auth_bytes=token,
                                                    session_lifetime_ms=0), frame, started)
        return slot, False

    def _log_refused_fetch(self, client_id: str | None) -> None:
        if client_id in self._fetch_refused_for or len(self._fetch_refused_for) >= MAX_REFUSED_CLIENTS_LOGGED:
            return
        self._fetch_refused_for.add(client_id)
        log.warning("answered a Fetch with TOPIC_AUTHORIZATION_FAILED (client_id=%s): this sidecar passes only "
                    "producers through (proxy.broker_listeners is off); point consumers at the cluster's bootstrap "
                    "or turn pass-through on", client_id)

    def _authorize_produce(self, validated: Any, who: Request | None) -> None:
        """Refuse, in `validated`, the partitions the client may not write (Kafka's Produce checks)."""
        assert self.authz is not None
        has_transactional = any(b.is_transactional for item in validated.items for b in item.batches)
        verdict = authorize.produce(self.authz.current(), _principal(who), (t for t, _p in validated.order),
                                    validated.ctx.transactional_id, has_transactional)
        if verdict.whole is not None:
            refuse_partitions(validated, verdict.whole, None)
            metrics.AUTHZ_DENIALS.labels("Produce", "transactional_id").inc()
            self._log_denial("Produce", "transactional_id", validated.ctx.transactional_id, who)
        elif verdict.denied_topics:
            refuse_partitions(validated, errors.TOPIC_AUTHORIZATION_FAILED, verdict.denied_topics)
            metrics.AUTHZ_DENIALS.labels("Produce", "topic").inc(len(verdict.denied_topics))
            self._log_denial("Produce", "topic", ",".join(sorted(verdict.denied_topics)), who)

    def _denied(self, frame: RequestFrame, resource_type: str, who: Request | None, name: str = "") -> None:
        metrics.AUTHZ_DENIALS.labels(api_name(frame.api_key), resource_type).inc()
        self._log_denial(api_name(frame.api_key), resource_type, name, who)

    def _log_denial(self, api: str, resource_type: str, name: str | None, who: Request | None) -> None:
        """Log a refusal, at most once a minute per principal, API and resource type (names
        come from clients: shown with repr, cut short)."""
        principal = _principal(who)
        allowed, held_back = self._denial_log.allow((principal.principal, api, resource_type), trio.current_time())
        if allowed:
            more = f" ({held_back} more like it held back)" if held_back else ""
            log.info("authz: %s refused to %r from %s on %s %r%s", api, principal.principal, principal.host or "?",
                     resource_type, (name or "")[:MAX_DENIALS_LOGGED_NAME], more)

    def _throttle(self, frame: RequestFrame, who: Request | None, slot: ResponseSlot) -> int:
        """Count a Produce against its principal's quota; its throttle_time_ms (the connection
        is muted as long, as a broker mutes it)."""
        assert self.quotas is not None
        now = trio.current_time()
        throttle_ms = self.quotas.record(_principal(who).principal, len(frame.body), now)
        if throttle_ms:
            metrics.QUOTA_THROTTLED.inc()
            metrics.QUOTA_THROTTLE_TIME.inc(throttle_ms / 1000)
            slot.mute_until = now + throttle_ms / 1000
        return throttle_ms

    def _answer_produce(self, slot: ResponseSlot, validated: Any, frame: RequestFrame, started: float,
                        throttle_ms: int, upstream_results: Results) -> None:
        """Fill the slot with the Produce answer. A failure here is our bug: the connection is
        closed (as for any internal error) instead of leaving the client without an answer."""
        try:
            results = dict(validated.rejected)
            results.update(upstream_results)
            if validated.ctx.acks == 0:
                slot.ready.set()  # acks=0: never answered
                return
            for r in upstream_results.values():  # rejections were counted when rejected
                if r.error_code:
                    metrics.ERRORS.labels(r.error_code).inc()
            answers = produce_answers(validated.order, results)
            self._finish_encoded(slot, encode_produce_answer(answers, frame.correlation_id, frame.api_version,
                                                             throttle_ms), frame, started)
        except Exception:
            log.exception("internal error answering a Produce request; closing the connection")
            slot.broken = True
            slot.ready.set()

    def _finish(self, slot: ResponseSlot, response: Any, frame: RequestFrame, started: float) -> None:
        self._finish_encoded(slot, encode_response(response, frame.correlation_id, frame.api_version), frame, started)

    def _finish_encoded(self, slot: ResponseSlot, data: bytes, frame: RequestFrame, started: float) -> None:
        elapsed_s = time.perf_counter() - started
        slot.fill(data)
        metrics.REQUEST_LATENCY_BY(api_name(frame.api_key)).observe(elapsed_s)  # after the answer is on its way

    async def _metadata(self, request: Any, frame: RequestFrame, slot: ResponseSlot, started: float,
                        who: Request | None = None) -> None:
        names = None if request.topics is None else [t.name for t in request.topics]
        if frame.api_version == 0 and names == []:
            names = None  # v0: an empty list means every topic
        allow = bool(getattr(request, "allow_auto_topic_creation", True)) if frame.api_version >= 4 else True
        acls = self.authz.current() if self.authz is not None else None
        verdict = authorize.metadata(acls, _principal(who), names, allow) if acls is not None else None
        try:
            if verdict is None or names is None:
                view = await self.metadata.topics(names, allow_auto_create=allow)
            else:
                # Refused topics are not asked for (nor auto-created with the sidecar's rights);
                # topics the client may not create are asked for without auto-creation.
                asked = [n for n in names if n not in verdict.denied]
                view = await self.metadata.topics([n for n in asked if n not in verdict.no_create],
                                                  allow_auto_create=allow)
                if verdict.no_create:
                    view = await self.metadata.topics([n for n in asked if n in verdict.no_create],
                                                      allow_auto_create=False)
        except UpstreamError as exc:
            log.warning("metadata from upstream failed: %s", exc)
            view = self.metadata.view  # answer from what we have; missing topics get errors
        if self.brokers is not None:
            if not view.brokers:  # a request for no topics before any refresh: the brokers are the answer
                try:
                    await self.metadata.ensure_broker(-1)
                except UpstreamError as exc:
                    log.warning("metadata from upstream failed: %s", exc)
            ports = await self.brokers.ensure(list(view.brokers))
            response = build_broker_metadata(view, names, ports, self.advertise_host)
            if self.bypass is not None:
                response = with_real_endpoints(response, view.brokers, same_zone_brokers(view.brokers, self.bypass))
        else:
            response = build_client_metadata(view, names, PROXY_NODE_ID, self.advertise_host, self.advertise_port)
        if acls is not None and verdict is not None:
            response = authorized_metadata(response, acls, _principal(who), names, verdict)
            if verdict.denied:
                self._denied(frame, "topic", who, ",".join(sorted(verdict.denied)))
        self._finish(slot, response, frame, started)

    async def _init_producer_id(self, request: Any, frame: RequestFrame, slot: ResponseSlot, started: float) -> None:
        # Forwarded at the highest version both sides speak (Tansu 0.6 fails v0/v1), then
        # answered at the client's version.
        try:
            version = self.cluster.version_for(API_INIT_PRODUCER_ID, HIGHEST_INIT_PRODUCER_ID_VERSION)
            forwarded = InitProducerIdRequest(
                transactional_id=request.transactional_id,
                transaction_timeout_ms=request.transaction_timeout_ms,
                producer_id=getattr(request, "producer_id", -1),
                producer_epoch=getattr(request, "producer_epoch", -1))
            if request.transactional_id:
                upstream = await self.coordinators.init_producer_id(forwarded, version)
            else:
                upstream = await self.metadata.ask_any_broker(forwarded, version)  # any healthy broker
            response = InitProducerIdResponse(throttle_time_ms=0, error_code=upstream.error_code,
                                              producer_id=upstream.producer_id, producer_epoch=upstream.producer_epoch)
        except UpstreamError as exc:
            log.warning("InitProducerId upstream failed: %s", exc)
            response = InitProducerIdResponse(throttle_time_ms=0, error_code=COORDINATOR_NOT_AVAILABLE,
                                              producer_id=-1, producer_epoch=-1)
        self._finish(slot, response, frame, started)


    async def _find_coordinator(self, request: Any, frame: RequestFrame, slot: ResponseSlot, started: float,
                                who: Request | None = None) -> None:
        refused = None
        if self.authz is not None:
            acls, principal = self.authz.current(), _principal(who)

            def refused(key_type: int, key: str) -> int:
                code = authorize.find_coordinator(acls, principal, key_type, key)
                if code != errors.NONE:
                    self._denied(frame, "group" if key_type == authorize.KEY_GROUP else "transactional_id", who, key)
                return code

        response = await self.coordinators.find_coordinator(request, frame.api_version, self._coordinator_endpoint,
                                                            refused)
        self._finish(slot, response, frame, started)

    async def _coordinator_endpoint(self, node_id: int) -> tuple[int, str, int]:
        """Where a client reaches upstream coordinator `node_id`: its own listener with
        proxy.broker_listeners, else the proxy's one broker."""
        if self.brokers is None:
            return PROXY_NODE_ID, self.advertise_host, self.advertise_port
        ports = await self.brokers.ensure([node_id])
        host, port = self.advertise_host, ports[node_id]
        if self.bypass is not None:
            brokers = self.metadata.view.brokers
            host, port = coordinator_endpoint(node_id, (host, port), brokers, same_zone_brokers(brokers, self.bypass))
        return node_id, host, port

    async def _pass_through(self, frame: RequestFrame, node_id: int | None, slot: ResponseSlot,
                            started: float) -> None:
        """Forward `frame` verbatim to the broker whose listener it came in on (the bootstrap
        listener: any healthy broker) and answer with the broker's bytes. If the broker
        cannot be reached the connection is closed, as it would be to that broker."""
        raw = forwarded_frame(frame)
        if frame.api_key == API_FETCH:
            raw = fetch_with_rack(raw.body, frame.api_version, self.config.consumer_rack or "", frame.client_id) or raw
        try:
            if node_id is None:
                response = await self.metadata.ask_any_broker(raw, frame.api_version)
            else:
                conn = await self.cluster.connection(node_id)
                response = await conn.request(raw, frame.api_version, PASS_THROUGH_TIMEOUT_S)
        except UpstreamError as exc:
            log.info("closing connection: api_key %d for broker %s failed: %s (client_id=%s)", frame.api_key,
                     node_id, exc, frame.client_id)
            slot.broken = True
            slot.ready.set()
            return
        if self.meter is not None:  # whole frames as they went to and came from the broker
            self.meter.add(-1 if node_id is None else node_id, frame.api_key, len(raw.frame(0)), len(response) + 4)
        self._finish_encoded(slot, with_correlation_id(response, frame.correlation_id), frame, started)

    async def _forward_to_coordinator(self, request: Any, frame: RequestFrame, slot: ResponseSlot,
                                      started: float) -> None:
        answer = await self.coordinators.forward(frame, *coordinator_key(frame.api_key, request))
        if isinstance(answer, int):
            self._finish(slot, error_response(frame.api_key, request, answer), frame, started)
        else:
            self._finish_encoded(slot, answer, frame, started)


def _ready(data: bytes | None) -> ResponseSlot:
    slot = ResponseSlot(trio.Event(), data)
    slot.ready.set()
    return slot


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
        self._log_limiter = LogLimiter()
        self._burst = BurstTracker()
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
        """Give a burst's memory back once it has been over a while (proxy/memory.py)."""
        while True:
            await trio.sleep(TRIM_CHECK_INTERVAL_S)
            self._after_burst()

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
        self._open_by_source[source] = self._open_by_source.get(source, 0) + 1
        self._idle = trio.Event() if self._connections == 1 else self._idle
        try:
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
        codec = ServerCodec(self.config.max_frame_bytes)
        state = _ConnectionState(source, trio.current_time())
        session = None
        if self._credentials is not None:
            session = SaslSession(self.config.sasl_mechanisms, self._credentials)
        send_slots, receive_slots = trio.open_memory_channel[ResponseSlot](self.config.max_in_flight_per_connection)
        writer = _ResponseWriter(stream.socket.fileno() if isinstance(stream, trio.SocketStream) else None)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._write_responses, stream, receive_slots, nursery.cancel_scope, writer, state)
            try:
                await self._read_requests(stream, codec, send_slots, nursery, session, writer, state, node_id, tls_name)
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
                send_slots.close()
                self._budget.add(-state.accounted)
                self._budget.end_overdraft(state)

    def _account(self, codec: ServerCodec, state: _ConnectionState) -> None:
        held = codec.held_bytes
        self._budget.add(held - state.accounted)
        state.accounted = held
        if self._budget.used > self._burst.peak_held_bytes:
            self._burst.peak_held_bytes, self._burst.over_since = self._budget.used, None

    async def _read_requests(self, stream: ClientStream, codec: ServerCodec,
                             send_slots: trio.MemorySendChannel[ResponseSlot], nursery: trio.Nursery,
                             session: SaslSession | None = None, writer: _ResponseWriter | None = None,
                             state: _ConnectionState | None = None, node_id: int | None = None,
                             tls_name: str | None = None) -> None:
        # Plain TCP: large frames are read straight into their own buffer (no joining copy).
        sock = stream.socket if isinstance(stream, trio.SocketStream) else None
        state = state or _ConnectionState("", trio.current_time())
        config = self.config
        who: Request | None = None  # the client's principal, once authenticated (with authz or quotas only)
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
                        room = max(self._budget.room, RECEIVE_CHUNK_BYTES if overdraft else 0)
                    # The frame buffer grows before its bytes come, so only within the room; a
                    # chunk read is counted once it arrived (the bound is soft by one read).
                    direct = codec.frame_buffer(room) if sock is not None else None
                    self._account(codec, state)
                    if direct is not None:
                        assert sock is not None  # a frame buffer is read into on plain TCP only
                        got = await receive_into(sock, direct)
                    else:
                        data = await receive_some(stream, RECEIVE_CHUNK_BYTES)
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
                    slot.writer = writer
                    await send_slots.send(slot)
                    if close:
                        return  # the answer is still written, then the connection closes
                    continue
                if who is None and (self.handler.authz is not None or self.handler.quotas is not None):
                    who = client_principal(session, state.source, tls_name)
                slot = await self.handler.begin(frame, nursery, node_id, who)
                if slot is not None and slot.mute_until > mute_until:
                    mute_until = slot.mute_until
                if slot is not None:
                    slot.writer = writer
                    await send_slots.send(slot)
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

    async def _write_responses(self, stream: ClientStream, receive_slots: trio.MemoryReceiveChannel[ResponseSlot],
                               connection_scope: trio.CancelScope,
                               writer: _ResponseWriter, state: _ConnectionState | None = None) -> None:
        async with receive_slots:
            async for slot in receive_slots:
                writer.waiting_for = slot  # from here on its filler may write it through
                try:
                    await slot.ready.wait()
                finally:
                    writer.waiting_for = None
                if state is not None:
                    state.outstanding -= 1  # answered (or never to be: acks=0)
                    state.last_activity = trio.current_time()
                if slot.broken:
                    metrics.PROTOCOL_ERRORS.labels("internal").inc()
                    connection_scope.cancel()  # the failure is logged where it happened
                    return
                if not slot.data:
                    continue  # nothing to send (acks=0), or written through whole
                try:
                    await stream.send_all(slot.data)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    connection_scope.cancel()  # client vanished: drop the rest of its work
                    return


ANONYMOUS = "User:ANONYMOUS"  # Kafka's principal of a client that did not authenticate
MAX_DENIALS_LOGGED_NAME = 200  # characters of refused resource names in one log line


def client_principal(session: SaslSession | None, source: str, tls_name: str | None = None) -> Request:
    """The client's principal as Kafka names it and its address: `User:<SASL user>` when it
    logged in with SASL, else `User:<name from its certificate>` with mutual TLS, else
    User:ANONYMOUS."""
    if session is not None and session.principal:
        return Request(f"User:{session.principal}", source)
    if tls_name is not None:
        return Request(f"User:{tls_name}", source)
    return Request(ANONYMOUS, source)


def _principal(who: Request | None) -> Request:
    return who if who is not None else Request(ANONYMOUS, "")


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


def load_fixed_acls(authz: AuthzConfig, source: str) -> AclProvider | None:
    """The rules of source "file" (read now) or "deny" (none); None for "none" and "cluster".

    Raises ConfigError naming authz.acl_file when it cannot be read or is not valid.
    """
    if source == "deny":
        return FixedAcls(AclSet.of([], authz.super_users))
    if source != "file":
        return None
    try:
        text = Path(authz.acl_file).read_text()
    except OSError as exc:
        raise ConfigError(f"authz.acl_file: {authz.acl_file}: {exc.strerror or exc}") from exc
    try:
        rules = parse_acl_file(text, authz.super_users)
    except AclFileError as exc:
        raise ConfigError(f"authz.acl_file: {authz.acl_file}: {exc}") from exc
    metrics.AUTHZ_ACLS.set(len(rules.bindings))
    return FixedAcls(rules)


def listener_security(config: ProxyConfig) -> tuple[ssl.SSLContext | None, Credentials | None]:
    """The listener's TLS context and SASL users, loaded from the configured files.

    Raises ConfigError when a file cannot be read or parsed.
    """
    context = server_context(config.tls_cert_file, config.tls_key_file, config.tls_client_ca_file) \
        if config.tls_cert_file else None
    credentials = None
    if config.sasl_mechanisms:
        check_private(config.sasl_users_file, "proxy.sasl_users_file")
        try:
            credentials = load_credentials(config.sasl_users_file)
        except CredentialsError as exc:
            raise ConfigError(f"proxy.sasl_users_file: {exc}") from exc
    return context, credentials


async def run_proxy(proxy_config: ProxyConfig, upstream_config: UpstreamConfig,
                    backend_factory: ProduceBackendFactory | None = None,
                    task_status: trio.TaskStatus[tuple[ProxyServer, int]] = trio.TASK_STATUS_IGNORED, *,
                    bypass: SameZoneBypass | None = None,
                    audit: AuditSink | None = None, broker_zones: Mapping[str, str] | None = None,
                    authz: AuthzConfig | None = None, quotas: QuotaConfig | None = None) -> None:
    """Connect upstream, listen, serve. `task_status.started((server, port))` once listening.
    `bypass`: with proxy.bypass_same_zone, the zone whose brokers Metadata names at their
    real addresses.

    `audit`: where `passthrough_bytes` records go (with proxy.broker_listeners); the record's
    `zone` is the audit writer's, and a broker's zone is `broker_zones[str(node id)]`, else
    its rack.

    `authz`: how each client principal is authorized (None: as authz.source "none").
    `quotas`: produce byte rates per client principal (None: none).

    Raises ConfigError if the listener's TLS or SASL files or the ACL file cannot be loaded,
    AclSourceError if the cluster's ACLs cannot be read at start-up.
    """
    ssl_context, credentials = listener_security(proxy_config)
    source = authz.effective_source(proxy_config) if authz is not None else "none"
    fixed_acls = load_fixed_acls(authz, source) if authz is not None else None
    async with open_upstream(upstream_config) as cluster:
        metadata = MetadataCache(cluster, upstream_config.metadata_ttl_s, upstream_config.metadata_timeout_s)
        if backend_factory is None:
            backend: ProduceBackend = DirectBackend(cluster, metadata, upstream_config.request_timeout_s)
        else:
            backend = await backend_factory(cluster, metadata)
        listeners = await open_listeners(proxy_config.listen_host, proxy_config.listen_port,
                                         reuse_port=proxy_config.workers > 1)
        port = listeners[0].socket.getsockname()[1]
        advertised_host, advertised_port = proxy_config.advertised
        acls: AclProvider | None = fixed_acls
        cluster_acls = None
        if source == "cluster" and authz is not None:
            cluster_acls = ClusterAcls(cluster, metadata, frozenset(authz.super_users), authz.refresh_interval_s,
                                       authz.max_stale_s)
            await cluster_acls.refresh()  # the first read must succeed: refusing everyone silently helps no one
            acls = cluster_acls
        if source == "deny":
            log.warning("authz: a zone gateway without authz.source denies every client (set authz.source to "
                        "\"cluster\" or \"file\", or \"none\" to give every client the sidecar's rights)")
        handler = RequestHandler(proxy_config, upstream_config, cluster, metadata, backend,
                                 advertised_host, advertised_port or port, authz=acls,
                                 quotas=ProduceQuotas(quotas.produce_bytes_per_s, quotas.principal_produce_bytes_per_s,
                                                      quotas.burst_s) if quotas is not None and quotas.enabled else None)
        await handler.start()
        server = ProxyServer(proxy_config, handler, ssl_context=ssl_context, credentials=credentials)
        if proxy_config.passthrough:
            handler.brokers = BrokerListeners(server.open_broker_listener)
            handler.bypass = bypass if proxy_config.bypass_same_zone else None
            if audit is not None:
                zones = dict(broker_zones or {})

                def zone_of(node_id: int) -> str:
                    broker = metadata.view.brokers.get(node_id)
                    return zones.get(str(node_id)) or (broker.rack if broker is not None else None) or ""

                handler.meter = PassthroughMeter(audit, proxy_config.proxy_id, zone_of,
                                                 proxy_config.passthrough_audit_interval_s)
        await handler.start()
        async with trio.open_nursery() as nursery:
            if handler.meter is not None:
                nursery.start_soon(handler.meter.run)
            if cluster_acls is not None:
                nursery.start_soon(cluster_acls.run)
            await nursery.start(server.serve, listeners)
            task_status.started((server, port))
