"""Test helpers for MSK IAM: fixed AWS credentials, a token checker, and a broker double.

The checker recomputes the token's SigV4 signature with botocore's own signer (SigV4QueryAuth)
from the token's fields and the known secret, so a token the client made verifies only if it
is the presigned `kafka-cluster:Connect` request MSK expects.

The broker double is a TLS Kafka listener on a real socket, written with the proxy's sans-IO
frame parser (kafka_protocol/kafka_codec.py) and kafka-python's message classes. It speaks what MSK's
IAM listener speaks to a client: ApiVersions, SaslHandshake (OAUTHBEARER only), SaslAuthenticate
(RFC 7628: a bad token gets an error challenge, the client's %x01 then gets
SASL_AUTHENTICATION_FAILED), Metadata; and, like a Kafka broker with connections.max.reauth.ms
(KIP-368), it announces a session lifetime and closes a connection that sends anything but
SaslHandshake after its session has expired. Everything it sees is recorded for the test.
"""

from __future__ import annotations

import base64
import contextlib
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

import trio
from botocore.auth import SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import CredentialProvider, Credentials
from kafka.protocol.metadata import ApiVersionsResponse, MetadataResponse
from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

from kafka_protocol.kafka_codec import (
    API_API_VERSIONS,
    API_METADATA,
    API_PRODUCE,
    API_SASL_AUTHENTICATE,
    API_SASL_HANDSHAKE,
    NEED_DATA,
    ServerCodec,
    decode_request,
    encode_response,
)
from kafka_protocol.produce import PartitionAnswer, encode_produce_response

ACCESS_KEY = "AKIDEXAMPLE"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"  # AWS's documentation example key
SESSION_TOKEN = "FQoGZXIvYXdzE/example+session=token"
REGION = "eu-west-1"
UNSUPPORTED_SASL_MECHANISM = 33
SASL_AUTHENTICATION_FAILED = 58
VERSIONS = {API_PRODUCE: 8, API_API_VERSIONS: 3, API_METADATA: 8, API_SASL_HANDSHAKE: 1, API_SASL_AUTHENTICATE: 2}
START_TIMEOUT_S = 10.0
TOPIC = "orders"  # the one topic the double leads (one partition, node 1)


def server_ssl(certs: Any) -> ssl.SSLContext:
    """The double's TLS context, from tests/integration/security/_certs.py's CertFiles (127.0.0.1 in the SANs)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(certs.cert_file), str(certs.key_file))
    return context


class FixedCredentials(CredentialProvider):
    METHOD = "test-fixed"

    def __init__(self, access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY,
                 token: str | None = SESSION_TOKEN) -> None:
        super().__init__()
        self.credentials = Credentials(access_key, secret_key, token)
        self.loads = 0

    def load(self) -> Credentials:
        self.loads += 1
        return self.credentials


def token_url(token: str) -> str:
    """The presigned URL inside a token (base64url without padding)."""
    return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()


def token_fields(token: str) -> tuple[str, dict[str, str]]:
    """(scheme://host/path, query fields) of a token; a repeated field raises AssertionError."""
    parts = urlsplit(token_url(token))
    pairs = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=True)
    fields = dict(pairs)
    assert len(fields) == len(pairs), f"repeated query field in {pairs}"
    return f"{parts.scheme}://{parts.netloc}{parts.path}", fields


def expected_signature(token: str, credentials: Credentials, region: str) -> str:
    """The SigV4 signature botocore's signer gives the token's request with `credentials`."""
    base, fields = token_fields(token)
    signed = [(k, v) for k, v in fields.items() if k not in ("X-Amz-Signature", "User-Agent")]
    request = AWSRequest(method="GET", url=f"{base}?{urlencode(signed, quote_via=quote, safe='-_.~')}")
    request.context["timestamp"] = fields["X-Amz-Date"]
    auth = SigV4QueryAuth(credentials, "kafka-cluster", region, expires=int(fields["X-Amz-Expires"]))
    return auth.signature(auth.string_to_sign(request, auth.canonical_request(request)), request)


def token_is_valid(token: str, credentials: Credentials, region: str) -> bool:
    try:
        base, fields = token_fields(token)
    except (ValueError, AssertionError):
        return False
    return (base == f"https://kafka.{region}.amazonaws.com/" and fields.get("Action") == "kafka-cluster:Connect"
            and fields.get("X-Amz-Credential", "").startswith(f"{credentials.access_key}/")
            and fields.get("X-Amz-Signature") == expected_signature(token, credentials, region))


@dataclass
class Seen:
    """What one client connection sent, in order: (api name, detail)."""

    index: int
    events: list[tuple[str, str]] = field(default_factory=list)
    closed_by_broker: str = ""


class MskBrokerDouble:
    def __init__(self, ssl_context: ssl.SSLContext, *, session_lifetime_ms: int,
                 credentials: Credentials, region: str = REGION,
                 refuse_authentication: Callable[[int], bool] = lambda n: False) -> None:
        self._ssl = ssl_context
        self.session_lifetime_ms = session_lifetime_ms
        self._credentials = credentials
        self._region = region
        self._refuse = refuse_authentication  # by number of the authentication (1 = first, all connections)
        self.port = 0
        self.connections: list[Seen] = []
        self.tokens: list[str] = []
        self.authentications = 0
        self.generation = 0  # sessions of an older generation are expired (expire_sessions)
        self.appended: list[bytes] = []  # record batches of every Produce applied, in order
        self.changed = trio.Event()  # set (and replaced) whenever something is recorded

    def expire_sessions(self) -> None:
        """End every current session now, as if its lifetime had passed (thread-safe: one int)."""
        self.generation += 1

    def _note(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    async def wait_for(self, condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
        with trio.fail_after(timeout_s):
            while not condition():
                await self.changed.wait()

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        tls_listeners = [trio.SSLListener(lst, self._ssl, https_compatible=False) for lst in listeners]
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, self._handle, tls_listeners)
            task_status.started(self.port)

    async def _handle(self, stream: trio.SSLStream[trio.SocketStream]) -> None:
        seen = Seen(len(self.connections))
        self.connections.append(seen)
        codec = ServerCodec(1024 * 1024)
        session_ends_at: float | None = None  # trio time; None = not authenticated
        session_generation = 0
        mechanism_chosen = False
        error_challenge_sent = False
        try:
            while True:
                frame = codec.next_frame()
                if frame is NEED_DATA:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    codec.receive_data(data)
                    continue
                request = decode_request(frame, VERSIONS)
                key, version, cid = frame.api_key, frame.api_version, frame.correlation_id
                if key == API_API_VERSIONS:
                    seen.events.append(("ApiVersions", f"v{version}"))
                    keys = [ApiVersionsResponse.ApiVersion(api_key=k, min_version=0, max_version=v)
                            for k, v in sorted(VERSIONS.items())]
                    response = ApiVersionsResponse(error_code=0, api_keys=keys, throttle_time_ms=0)
                elif key == API_SASL_HANDSHAKE:
                    seen.events.append(("SaslHandshake", request.mechanism))
                    ok = request.mechanism == "OAUTHBEARER"
                    mechanism_chosen = ok
                    response = SaslHandshakeResponse(error_code=0 if ok else UNSUPPORTED_SASL_MECHANISM,
                                                      mechanisms=["OAUTHBEARER"])
                elif key == API_SASL_AUTHENTICATE:
                    if not mechanism_chosen:
                        seen.closed_by_broker = "SaslAuthenticate without SaslHandshake"
                        return
                    response, session_ends_at, error_challenge_sent = self._authenticate(
                        seen, bytes(request.auth_bytes), version, error_challenge_sent)
                    session_generation = self.generation
                    mechanism_chosen = error_challenge_sent  # one handshake per authentication
                else:
                    name = {API_METADATA: "Metadata", API_PRODUCE: "Produce"}.get(key, f"api_key {key}")
                    if mechanism_chosen:  # a broker reads the bytes after SaslHandshake as SASL, not a request
                        seen.closed_by_broker = f"{name} during authentication"
                        return
                    expired = session_ends_at is not None and (
                        trio.current_time() >= session_ends_at or session_generation != self.generation)
                    if session_ends_at is None or expired:
                        # Kafka's SocketServer: an expired (or never started) session gets the connection closed.
                        seen.closed_by_broker = f"{name} on an expired session" if session_ends_at else name
                        return
                    seen.events.append((name, f"v{version}"))
                    if key == API_PRODUCE:
                        answers = []
                        for topic in request.topic_data:
                            for p in topic.partition_data:
                                answers.append(PartitionAnswer(topic.name, p.index, 0, len(self.appended)))
                                self.appended.append(bytes(p.records or b""))
                        self._note()
                        await stream.send_all(encode_produce_response(answers, cid, version))
                        continue
                    response = self._metadata(request)
                self._note()
                await stream.send_all(encode_response(response, cid, version))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        finally:
            self._note()
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)

    def _metadata(self, request: object) -> MetadataResponse:
        M = MetadataResponse
        partition = M.MetadataResponseTopic.MetadataResponsePartition(
            error_code=0, partition_index=0, leader_id=1, leader_epoch=0, replica_nodes=[1], isr_nodes=[1],
            offline_replicas=[])
        requested = getattr(request, "topics", None)
        names = [TOPIC] if requested is None else [t.name for t in requested]
        topics = [M.MetadataResponseTopic(error_code=0 if n == TOPIC else 3, name=n, is_internal=False,
                                          partitions=[partition] if n == TOPIC else []) for n in names]
        return M(throttle_time_ms=0, cluster_id="msk-double", controller_id=1, topics=topics,
                 brokers=[M.MetadataResponseBroker(node_id=1, host="127.0.0.1", port=self.port, rack="use1-az1")])

    def _authenticate(self, seen: Seen, auth_bytes: bytes, version: int,
                      error_challenge_sent: bool) -> tuple[SaslAuthenticateResponse, float | None, bool]:
        if error_challenge_sent:  # RFC 7628 3.2.3: the client's %x01 ends a failed exchange
            seen.events.append(("SaslAuthenticate", "failure acknowledged" if auth_bytes == b"\x01" else "garbage"))
            return (SaslAuthenticateResponse(error_code=SASL_AUTHENTICATION_FAILED, auth_bytes=b"",
                                             error_message="invalid MSK IAM token", session_lifetime_ms=0),
                    None, False)
        self.authentications += 1
        prefix, suffix = b"n,,\x01auth=Bearer ", b"\x01\x01"
        token = ""
        if auth_bytes.startswith(prefix) and auth_bytes.endswith(suffix):
            token = auth_bytes[len(prefix):-len(suffix)].decode()
        self.tokens.append(token)
        valid = bool(token) and token_is_valid(token, self._credentials, self._region)
        if not valid or self._refuse(self.authentications):
            seen.events.append(("SaslAuthenticate", "refused"))
            challenge = b'{"status":"invalid_token"}'
            return (SaslAuthenticateResponse(error_code=0, auth_bytes=challenge, error_message=None,
                                             session_lifetime_ms=0), None, True)
        seen.events.append(("SaslAuthenticate", f"v{version} ok"))
        lifetime_ms = self.session_lifetime_ms if version >= 1 else 0
        # v0 clients are told nothing, but their session ends all the same (KIP-368).
        ends_at = trio.current_time() + self.session_lifetime_ms / 1000 if self.session_lifetime_ms else float("inf")
        return (SaslAuthenticateResponse(error_code=0, auth_bytes=b"", error_message=None,
                                         session_lifetime_ms=lifetime_ms), ends_at, False)


@contextlib.contextmanager
def double_in_a_thread(ssl_context: ssl.SSLContext, credentials: FixedCredentials,
                       **kwargs: Any) -> Iterator[MskBrokerDouble]:
    """The trio broker double on its own thread, for the agent's asyncio client; stopped on exit."""
    ready = threading.Event()
    started: dict[str, object] = {}

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            double = MskBrokerDouble(ssl_context, credentials=credentials.credentials, **kwargs)
            await nursery.start(double.serve)
            started["double"] = double
            started["token"] = trio.lowlevel.current_trio_token()
            started["scope"] = nursery.cancel_scope
            ready.set()

    thread = threading.Thread(target=trio.run, args=(run,), daemon=True)
    thread.start()
    assert ready.wait(START_TIMEOUT_S), "broker double did not start"
    try:
        yield started["double"]  # type: ignore[misc]
    finally:
        trio.from_thread.run_sync(started["scope"].cancel, trio_token=started["token"])  # type: ignore[attr-defined]
        thread.join(START_TIMEOUT_S)
        assert not thread.is_alive()
