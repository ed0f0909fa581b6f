"""SASL/OAUTHBEARER with MSK IAM tokens at socket level: the proxy's upstream client (trio,
kafka-python's OAUTHBEARER messages) and the agent's aiokafka client, against the TLS broker
double of msk_iam_double.py, which checks each token with botocore's signer.

No broker installable here validates MSK IAM tokens (see docs/security.md): MSK's IAM
listener is AWS's own; Tansu 0.6 validates OAUTHBEARER only as a JWT from an OpenID issuer
and its TLS listener does not work here; librdkafka's mock cluster has no SASL at all.
"""

from __future__ import annotations

import asyncio

import pytest
import trio
import trio.testing
from kafka.protocol.metadata import MetadataRequest

from core.msk_iam import MskIamError, MskIamTokens
from kafka_protocol.kafka_codec import encode_response
from kafka_upstream.config import UpstreamConfig
from kafka_upstream.errors import UpstreamError
from kafka_upstream.upstream import UpstreamConnection, open_upstream
from leader_notify.agent._msk_iam import AiokafkaMskIamTokens
from leader_notify.agent.appender import AppendResult, KafkaAppender
from leader_notify.agent.errors import KafkaAppendUnavailable
from leader_notify.agent.runner import aiokafka_security
from tests.integration.proxy.kafka_wire import record_batch
from tests.integration.security.msk_iam_double import (
    REGION,
    TOPIC,
    FixedCredentials,
    MetadataResponse,
    MskBrokerDouble,
    double_in_a_thread,
    server_ssl,
    token_is_valid,
)

pytestmark = pytest.mark.integration
TIMEOUT_S = 10.0


def iam_upstream(port: int, ca_file) -> UpstreamConfig:
    return UpstreamConfig(bootstrap_servers=(f"127.0.0.1:{port}",), security_protocol="SASL_SSL",
                          tls_ca_file=str(ca_file), sasl_mechanism="OAUTHBEARER", aws_msk_iam_region=REGION,
                          connect_timeout_s=5, request_timeout_s=5)


async def start_double(nursery, certs, credentials: FixedCredentials, **kwargs) -> MskBrokerDouble:
    double = MskBrokerDouble(server_ssl(certs), credentials=credentials.credentials, **kwargs)
    await nursery.start(double.serve)
    return double


async def metadata(conn) -> object:
    return await conn.request(MetadataRequest[1](topics=[]), 1, TIMEOUT_S)


@pytest.mark.trio
async def test_proxy_authenticates_with_a_valid_token_then_talks(nursery, certs):
    credentials = FixedCredentials()
    double = await start_double(nursery, certs, credentials, session_lifetime_ms=0)
    async with open_upstream(iam_upstream(double.port, certs.ca_file),
                             MskIamTokens(REGION, credentials=credentials)) as cluster:
        conn = await cluster.connection()
        response = await metadata(conn)
    assert [b.node_id for b in response.brokers] == [1]
    assert double.connections[0].events == [
        ("ApiVersions", "v0"), ("SaslHandshake", "OAUTHBEARER"), ("SaslAuthenticate", "v2 ok"), ("Metadata", "v1")]
    assert len(double.tokens) == 1 and token_is_valid(double.tokens[0], credentials.credentials, REGION)


@pytest.mark.trio
async def test_proxy_reauthenticates_on_the_same_connection_before_the_session_ends(nursery, certs):
    credentials = FixedCredentials()
    # 1.2 s sessions: re-authentication is due at 1.02 s (85%), well before the broker would close.
    double = await start_double(nursery, certs, credentials, session_lifetime_ms=1_200)
    async with open_upstream(iam_upstream(double.port, certs.ca_file),
                             MskIamTokens(REGION, credentials=credentials)) as cluster:
        conn = await cluster.connection()
        await metadata(conn)
        await double.wait_for(lambda: double.authentications >= 3, timeout_s=TIMEOUT_S)
        await metadata(conn)  # after two re-authentications, on the first connection, still served
        assert await cluster.connection() is conn
        assert conn.reauthentications >= 2
    events = double.connections[0].events
    assert len(double.connections) == 1 and double.connections[0].closed_by_broker == ""
    assert events[:4] == [("ApiVersions", "v0"), ("SaslHandshake", "OAUTHBEARER"), ("SaslAuthenticate", "v2 ok"),
                          ("Metadata", "v1")]
    assert events[4:8] == [("SaslHandshake", "OAUTHBEARER"), ("SaslAuthenticate", "v2 ok")] * 2
    assert events[-1] == ("Metadata", "v1")
    assert all(token_is_valid(t, credentials.credentials, REGION) for t in double.tokens)


@pytest.mark.trio
async def test_refused_reauthentication_closes_the_connection_and_the_next_request_reconnects(nursery, certs):
    credentials = FixedCredentials()
    double = await start_double(nursery, certs, credentials, session_lifetime_ms=1_200,
                                refuse_authentication=lambda n: n == 2)
    async with open_upstream(iam_upstream(double.port, certs.ca_file),
                             MskIamTokens(REGION, credentials=credentials)) as cluster:
        first = await cluster.connection()
        with trio.fail_after(TIMEOUT_S):
            await first.wait_closed()
        second = await cluster.connection()
        assert second is not first
        await metadata(second)
    assert double.connections[0].events[3:] == [("SaslHandshake", "OAUTHBEARER"), ("SaslAuthenticate", "refused"),
                                                ("SaslAuthenticate", "failure acknowledged")]
    assert double.connections[1].events[-1] == ("Metadata", "v1")


@pytest.mark.trio
async def test_invalid_token_fails_with_the_brokers_message_and_no_token_in_it(nursery, certs):
    signer = FixedCredentials(secret_key="not-the-secret-the-broker-knows")
    double = await start_double(nursery, certs, FixedCredentials(), session_lifetime_ms=0)
    async with open_upstream(iam_upstream(double.port, certs.ca_file),
                             MskIamTokens(REGION, credentials=signer)) as cluster:
        with pytest.raises(UpstreamError, match="OAUTHBEARER authentication as the IAM role failed") as info:
            await cluster.connection()
    assert "invalid MSK IAM token" in str(info.value)
    assert double.tokens[0] not in str(info.value)


def _metadata_answer(request_bytes: bytes) -> bytes:
    correlation_id = int.from_bytes(request_bytes[8:12], "big")  # size, api_key, api_version, correlation_id
    return encode_response(MetadataResponse(throttle_time_ms=0, brokers=[], controller_id=1, topics=[]),
                           correlation_id, 1)


@pytest.mark.trio
async def test_quiesced_waits_for_responses_on_the_wire_and_holds_back_requests_queued_behind_it():
    client, broker = trio.testing.memory_stream_pair()
    conn = UpstreamConnection(client, 1, "double:9098", "azsidecar")
    entered, release = trio.Event(), trio.Event()
    later: list[object] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run_reader)
        first = await conn.submit(MetadataRequest[1](topics=[]), 1)
        first_bytes = await broker.receive_some(65536)

        async def reauthenticate() -> None:
            async with conn.quiesced(TIMEOUT_S):
                entered.set()
                await release.wait()  # the SASL exchange would run here

        async def submit_later() -> None:
            later.append(await conn.submit(MetadataRequest[1](topics=[]), 1))

        nursery.start_soon(reauthenticate)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(submit_later)  # queued behind the quiescing task on the send lock
        await trio.testing.wait_all_tasks_blocked()
        assert not entered.is_set()  # the first Metadata answer is still owed
        await broker.send_all(_metadata_answer(first_bytes))
        with trio.fail_after(TIMEOUT_S):
            await entered.wait()  # entered although a request waits behind it: only sent ones count
            await first.wait(TIMEOUT_S)
        await trio.testing.wait_all_tasks_blocked()
        assert later == []  # not sent while the connection is quiesced
        release.set()
        with trio.fail_after(TIMEOUT_S):
            second_bytes = await broker.receive_some(65536)
            await broker.send_all(_metadata_answer(second_bytes))
            await trio.testing.wait_all_tasks_blocked()
            await later[0].wait(TIMEOUT_S)
        await conn.aclose()


def test_agent_appends_with_msk_iam_and_reconnects_with_a_fresh_token_when_the_session_ends(certs):
    """aiokafka has no KIP-368 re-authentication: the broker closes the connection at the first
    request after the session's end (before handling it), the appender retries, and aiokafka's
    new connection authenticates with a token from the same provider."""
    credentials = FixedCredentials()
    one, two = record_batch([b"one"]), record_batch([b"two"])
    with double_in_a_thread(server_ssl(certs), credentials, session_lifetime_ms=900_000) as double:
        config = iam_upstream(double.port, certs.ca_file)
        security = aiokafka_security(config, msk_tokens=MskIamTokens(REGION, credentials=credentials))
        assert security["security_protocol"] == "SASL_SSL" and security["sasl_mechanism"] == "OAUTHBEARER"

        async def appends() -> tuple[AppendResult, AppendResult]:
            async with KafkaAppender(config.bootstrap_servers, security=security, max_attempts=3,
                                     request_timeout_ms=5_000) as appender:
                first = await asyncio.wait_for(appender.append(TOPIC, 0, one), TIMEOUT_S)
                double.expire_sessions()
                second = await asyncio.wait_for(appender.append(TOPIC, 0, two), TIMEOUT_S)
                return first, second

        first, second = asyncio.run(appends())
    assert (first.error_code, first.base_offset, first.attempts) == (0, 0, 1)
    assert (second.error_code, second.base_offset) == (0, 1) and second.attempts >= 2
    assert double.appended == [one, two]  # each once
    closed = [c.closed_by_broker for c in double.connections if c.closed_by_broker]
    assert closed and all("on an expired session" in reason for reason in closed)
    authenticated = [c for c in double.connections if ("SaslHandshake", "OAUTHBEARER") in c.events]
    assert len(authenticated) >= 2
    assert all(token_is_valid(t, credentials.credentials, REGION) for t in double.tokens)


def test_agent_without_aws_credentials_fails_before_connecting_with_one_clear_error():
    class NoCredentials(FixedCredentials):
        def load(self):
            raise MskIamError("no AWS credentials for MSK IAM: give the task or instance a role")

    config = iam_upstream(9098, "")
    security = aiokafka_security(config, msk_tokens=MskIamTokens(REGION, credentials=NoCredentials()))
    provider = security["sasl_oauth_token_provider"]
    assert isinstance(provider, AiokafkaMskIamTokens)
    with pytest.raises(KafkaAppendUnavailable) as info:
        asyncio.run(provider.check())
    assert str(info.value) == ("upstream.aws_msk_iam_region eu-west-1: no AWS credentials for MSK IAM: "
                               "give the task or instance a role")
    asyncio.run(AiokafkaMskIamTokens(MskIamTokens(REGION, credentials=FixedCredentials())).check())  # signs fine
