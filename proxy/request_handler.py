"""What the proxy answers, request by request: `RequestHandler.begin` decodes a client's
request, authorizes it, and hands it to the part that serves its API (a dispatch table by
API key): Produce to the produce backend (the router), Metadata from the upstream cluster's
metadata, ApiVersions from the negotiated ranges, coordinator and transaction requests
forwarded to their coordinator, everything else passed through to a broker (with
proxy.broker_listeners) or refused as a broker would.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from kafka.protocol.producer.transaction import InitProducerIdRequest, InitProducerIdResponse
from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

from core import errors
from core.bounded_labels import BoundedLabels
from core.errors import COORDINATOR_NOT_AVAILABLE
from core.log_limit import LogLimiter
from core.produce import ProduceBackend, ProduceContext, Results
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
    ProtocolError,
    RequestFrame,
    UnsupportedRequest,
    decode_request,
    encode_response,
)
from kafka_protocol.produce_scan import ScannedAnswer, client_answer, scan_produce_request
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
    ValidatedProduce,
    encode_produce_answer,
    produce_answers,
    refuse_partitions,
    validate_produce,
)
from kafka_upstream.errors import UpstreamError
from kafka_upstream.forward import ProduceForwarder
from kafka_upstream.metadata import MetadataCache, build_client_metadata
from kafka_upstream.upstream import UpstreamCluster
from proxy import authorize, metrics
from proxy.acl import AclProvider, AclSet, Request
from proxy.authz_answers import authorized_metadata, coordinator_refusal
from proxy.bypass import SameZoneBypass, coordinator_endpoint, same_zone_brokers, with_real_endpoints
from proxy.config import ProxyConfig
from proxy.fetch_audit import FetchMeter
from proxy.passthrough import API_FETCH, BrokerListeners, build_broker_metadata, fetch_with_rack, passthrough_versions
from proxy.passthrough_audit import PassthroughMeter
from proxy.produce_only import refused_fetch
from proxy.quota import ProduceQuotas
from proxy.response_slots import ResponseSlot, ready_slot
from proxy.sasl import (
    SASL_AUTHENTICATION_FAILED,
    AuthenticationFailed,
    SaslSession,
)
from proxy.versions import (
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
HIGHEST_INIT_PRODUCER_ID_VERSION = 5
MAX_REFUSED_CLIENTS_LOGGED = 1024  # client ids whose refused Fetch was logged (once each)
LOGIN_THREADS = 2  # PLAIN logins run PBKDF2 (ms each) off the event loop; a login storm gets two threads




# Serves one decoded request: (request, frame, slot, started, nursery, who).
_Serve = Callable[[Any, RequestFrame, ResponseSlot, float, trio.Nursery, Request | None], Awaitable[None]]


class RequestHandler:
    """Answers the requests the proxy serves; everything else is refused like a broker would."""

    def __init__(self, config: ProxyConfig, upstream: UpstreamConfig, cluster: UpstreamCluster,
                 metadata: MetadataCache, backend: ProduceBackend, advertise_host: str, advertise_port: int,
                 authz: AclProvider | None = None, quotas: ProduceQuotas | None = None,
                 forwarder: ProduceForwarder | None = None) -> None:
        """`authz`: the ACLs each client principal is checked against (None: authz.source "none",
        every client may do what the sidecar's principal may). `quotas`: produce byte rates per
        principal (None: none). `forwarder`: offered each Produce request before it is decoded
        (the local route's forward path, with proxy.forward_local_produce)."""
        self.config = config
        self.forwarder = forwarder if config.forward_local_produce else None
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
        self.fetch_meter: FetchMeter | None = None  # counts Fetch answers' record bytes per partition (audit)
        self._login_limiter = trio.CapacityLimiter(LOGIN_THREADS)
        self._fetch_refused_for: set[str | None] = set()
        self._denial_log = LogLimiter()
        self.principal_labels = BoundedLabels(config.max_principal_labels)
        # API key -> the method serving its decoded requests (begin's dispatch table)
        self._serves: dict[int, _Serve] = {
            API_PRODUCE: self._serve_produce,
            API_API_VERSIONS: self._serve_api_versions,
            API_METADATA: self._serve_metadata,
            API_INIT_PRODUCER_ID: self._serve_init_producer_id,
            API_FIND_COORDINATOR: self._serve_find_coordinator,
            **{key: self._serve_forwarded for key in FORWARDED},
        }

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
            slot = ResponseSlot()
            nursery.start_soon(self._pass_through, frame, node_id, slot, started)
            return slot
        if self.brokers is None and frame.api_key == API_FETCH and frame.api_key in self.advertised \
                and self.advertised[frame.api_key][0] <= frame.api_version <= self.advertised[frame.api_key][1]:
            refused = refused_fetch(bytes(frame.body), frame.api_version)
            if refused is not None:  # an answer, not a closed connection: the consumer reports it
                self._log_refused_fetch(frame.client_id)
                return ready_slot(encode_response(refused, frame.correlation_id, frame.api_version))
        if frame.api_key == API_PRODUCE and self.forwarder is not None:
            forwarded = await self._forward_produce(frame, started, who)
            if forwarded is not None:
                return forwarded
        try:
            request = decode_request(frame, self.max_versions())
        except UnsupportedRequest:
            if frame.api_key == API_API_VERSIONS:
                # KIP-511: answer v0 with UNSUPPORTED_VERSION and our range; the client retries lower.
                data = encode_response(unsupported_api_versions_response(self.advertised), frame.correlation_id, 0)
                return ready_slot(data)
            raise
        serve = self._serves.get(frame.api_key)
        if serve is None:
            raise ProtocolError(f"api_key {frame.api_key} is decodable but not served")
        slot = ResponseSlot()
        await serve(request, frame, slot, started, nursery, who)
        return slot

    # The APIs a decoded request may be for, each served by one method below (`_serves`):
    # each fills the slot now or starts the task that will.

    async def _serve_produce(self, request: Any, frame: RequestFrame, slot: ResponseSlot, started: float,
                             nursery: trio.Nursery, who: Request | None) -> None:
        principal = who.principal if who is not None else ""
        validated = validate_produce(request, frame.api_version, self.config.max_batch_bytes, principal)
        if who is not None:
            metrics.PRINCIPAL_PRODUCE_BYTES_BY(self.principal_labels.label(principal)).inc(frame.size)
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
        # A completion that can call back (the router's always can) answers in the step where
        # its last result arrives; others are awaited by a task.
        if completion is not None and completion.on_results(answer):
            return

        async def finish_produce() -> None:
            answer(await completion() if completion is not None else {})

        nursery.start_soon(finish_produce)

    async def _forward_produce(self, frame: RequestFrame, started: float, who: Request | None) -> ResponseSlot | None:
        """The local route's forward path (kafka_upstream/forward.py): the request scanned, not
        decoded, and sent on whole when the forwarder takes it. None, having done nothing, when
        it does not: the request then takes the decoding path (which answers anything unusual,
        refusals included, the way it always has)."""
        assert self.forwarder is not None
        if frame.api_version > self.max_versions().get(API_PRODUCE, -1):
            return None
        scanned = scan_produce_request(frame.body, frame.api_version, self.config.max_batch_bytes)
        if scanned is None:
            return None
        principal = who.principal if who is not None else ""
        if self.authz is not None:
            verdict = authorize.produce(self.authz.current(), _principal(who), (p.topic for p in scanned.partitions),
                                        scanned.transactional_id,
                                        any(p.batches[0].is_transactional for p in scanned.partitions))
            if verdict.whole is not None or verdict.denied_topics:
                return None
        slot = ResponseSlot()
        ctx = ProduceContext(scanned.acks, scanned.timeout_ms, scanned.transactional_id, frame.api_version, principal)
        order = ValidatedProduce(ctx, order=[(p.topic, p.partition) for p in scanned.partitions])
        answer = _ForwardedProduceAnswer(functools.partial(self._send_forwarded, slot, frame, started),
                                         functools.partial(self._answer_produce, slot, order, frame, started))
        if not await self.forwarder.forward(scanned, ctx, frame.body, answer):
            return None
        # Counted once the request is taken (else the decoding path counts it); its answer
        # cannot come before this: the upstream reader runs only after this step.
        if who is not None:
            metrics.PRINCIPAL_PRODUCE_BYTES_BY(self.principal_labels.label(principal)).inc(frame.size)
        if self.quotas is not None:
            answer.throttle_ms = self._throttle(frame, who, slot)
        return slot

    async def _serve_api_versions(self, request: Any, frame: RequestFrame, slot: ResponseSlot, started: float,
                                  nursery: trio.Nursery, who: Request | None) -> None:
        self._finish(slot, api_versions_response(self.advertised), frame, started)

    async def _serve_metadata(self, request: Any, frame: RequestFrame, slot: ResponseSlot, started: float,
                              nursery: trio.Nursery, who: Request | None) -> None:
        nursery.start_soon(self._metadata, request, frame, slot, started, who)

    async def _serve_init_producer_id(self, request: Any, frame: RequestFrame, slot: ResponseSlot, started: float,
                                      nursery: trio.Nursery, who: Request | None) -> None:
        if self.authz is not None:
            code = authorize.init_producer_id(self.authz.current(), _principal(who), request.transactional_id)
            if code != errors.NONE:
                self._denied(frame, "transactional_id" if request.transactional_id else "cluster", who)
                self._finish(slot, InitProducerIdResponse(throttle_time_ms=0, error_code=code, producer_id=-1,
                                                          producer_epoch=-1), frame, started)
                return
        nursery.start_soon(self._init_producer_id, request, frame, slot, started)

    async def _serve_find_coordinator(self, request: Any, frame: RequestFrame, slot: ResponseSlot, started: float,
                                      nursery: trio.Nursery, who: Request | None) -> None:
        nursery.start_soon(self._find_coordinator, request, frame, slot, started, who)

    async def _serve_forwarded(self, request: Any, frame: RequestFrame, slot: ResponseSlot, started: float,
                               nursery: trio.Nursery, who: Request | None) -> None:
        if self.authz is not None:
            refused = coordinator_refusal(frame.api_key, request, self.authz.current(), _principal(who))
            if refused is not None:
                self._denied(frame, "transactional", who)
                self._finish(slot, refused, frame, started)
                return
        nursery.start_soon(self._forward_to_coordinator, request, frame, slot, started)

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
        slot = ResponseSlot()
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

    def _authorize_produce(self, validated: ValidatedProduce, who: Request | None) -> None:
        """Refuse, in `validated`, the partitions the client may not write (Kafka's Produce checks)."""
        assert self.authz is not None
        verdict = refuse_unauthorized_produce(validated, self.authz.current(), _principal(who))
        if verdict.whole is not None:
            metrics.AUTHZ_DENIALS.labels("Produce", "transactional_id").inc()
            self._log_denial("Produce", "transactional_id", validated.ctx.transactional_id, who)
        elif verdict.denied_topics:
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
        principal = _principal(who).principal
        throttle_ms = self.quotas.record(principal, len(frame.body), now)
        if throttle_ms:
            label = self.principal_labels.label(principal)
            metrics.QUOTA_THROTTLED.labels(label).inc()
            metrics.QUOTA_THROTTLE_TIME.labels(label).inc(throttle_ms / 1000)
            slot.mute_until = now + throttle_ms / 1000
        return throttle_ms

    def _answer_produce(self, slot: ResponseSlot, validated: ValidatedProduce, frame: RequestFrame, started: float,
                        throttle_ms: int, upstream_results: Results) -> None:
        """Fill the slot with the Produce answer. A failure here is our bug: the connection is
        closed (as for any internal error) instead of leaving the client without an answer."""
        try:
            results = dict(validated.rejected)
            results.update(upstream_results)
            if validated.ctx.acks == 0:
                slot.finish()  # acks=0: never answered
                return
            for r in upstream_results.values():  # rejections were counted when rejected
                if r.error_code:
                    metrics.ERRORS.labels(r.error_code).inc()
            answers = produce_answers(validated.order, results)
            self._finish_encoded(slot, encode_produce_answer(answers, frame.correlation_id, frame.api_version,
                                                             throttle_ms), frame, started)
        except Exception:
            log.exception("internal error answering a Produce request; closing the connection")
            slot.fail()

    def _send_forwarded(self, slot: ResponseSlot, frame: RequestFrame, started: float, throttle_ms: int,
                        leader_frame: bytes, answer: ScannedAnswer) -> None:
        """Fill the slot with a forwarded request's answer: the leader's bytes, its correlation
        id and throttle time the client's. A failure here is our bug: the connection is
        closed, as `_answer_produce` does."""
        try:
            data = client_answer(leader_frame, answer, frame.correlation_id, throttle_ms)
            self._finish_encoded(slot, data, frame, started)
        except Exception:
            log.exception("internal error answering a forwarded Produce request; closing the connection")
            slot.fail()

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
            slot.fail()
            return
        if self.meter is not None:  # whole frames as they went to and came from the broker
            self.meter.add(-1 if node_id is None else node_id, frame.api_key, len(raw.frame(0)), len(response) + 4)
        if self.fetch_meter is not None and frame.api_key == API_FETCH:  # scanned, forwarded as it is
            self.fetch_meter.add(-1 if node_id is None else node_id, response, frame.api_version)
        self._finish_encoded(slot, with_correlation_id(response, frame.correlation_id), frame, started)

    async def _forward_to_coordinator(self, request: Any, frame: RequestFrame, slot: ResponseSlot,
                                      started: float) -> None:
        answer = await self.coordinators.forward(frame, *coordinator_key(frame.api_key, request))
        if isinstance(answer, int):
            self._finish(slot, error_response(frame.api_key, request, answer), frame, started)
        else:
            self._finish_encoded(slot, answer, frame, started)


class _ForwardedProduceAnswer:
    """A forwarded Produce request's answer to its client (kafka_upstream.forward.ForwardedAnswer)."""

    __slots__ = ("_send", "_settled", "throttle_ms")

    def __init__(self, send: Callable[[int, bytes, ScannedAnswer], None],
                 settled: Callable[[int, Results], None]) -> None:
        self._send = send  # (throttle_ms, the leader's answer, its reading) -> the client's answer in its slot
        self._settled = settled  # (throttle_ms, results) -> the answer encoded into its slot
        self.throttle_ms = 0  # the quota's, set once the request is taken

    def answer_bytes(self, frame: bytes, answer: ScannedAnswer) -> None:
        self._send(self.throttle_ms, frame, answer)

    def answer_results(self, results: Results) -> None:
        self._settled(self.throttle_ms, results)


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


def refuse_unauthorized_produce(validated: ValidatedProduce, acls: AclSet, who: Request) -> authorize.ProduceVerdict:
    """Kafka's Produce checks applied to a validated request: the refused partitions are
    answered (TRANSACTIONAL_ID_ or TOPIC_AUTHORIZATION_FAILED) and taken out of what is
    routed. Returns the verdict."""
    has_transactional = any(b.is_transactional for item in validated.items for b in item.batches)
    verdict = authorize.produce(acls, who, (t for t, _p in validated.order), validated.ctx.transactional_id,
                                has_transactional)
    if verdict.whole is not None:
        refuse_partitions(validated, verdict.whole, None)
    elif verdict.denied_topics:
        refuse_partitions(validated, errors.TOPIC_AUTHORIZATION_FAILED, verdict.denied_topics)
    return verdict


def _principal(who: Request | None) -> Request:
    return who if who is not None else Request(ANONYMOUS, "")
