"""TLS and SASL on the client listener, with real clients against real proxy processes.

confluent-kafka and kafka-python produce through the proxy over TLS (verifying the
throwaway CA), and with SASL PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 over SASL_PLAINTEXT
and SASL_SSL; a kafka-python consumer reading Tansu directly finds the records. Raw
requests (kafka-python's classes) check the refusals: a wrong password gets
SASL_AUTHENTICATION_FAILED (58) and the connection closes; a Produce before
authentication closes the connection unanswered. The proxies log at DEBUG; their logs
must never contain a password.
"""

from __future__ import annotations

import struct

import pytest
import trio
from kafka.protocol.metadata import ApiVersionsResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from tests.conftest import create_topics, unique_name
from tests.integration.proxy.kafka_wire import Wire, api_versions_request, encode, produce_request, record_batch
from tests.integration.security.conftest import PASSWORD, UPSTREAM_PASSWORD, USER

pytestmark = pytest.mark.integration

RECORDS = 20
DELIVERY_TIMEOUT_S = 30.0
SASL_AUTHENTICATION_FAILED = 58
UNSUPPORTED_SASL_MECHANISM = 33
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


def consume_values(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    """Values of `topic` partition 0 read from the broker directly (not through the proxy)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                             consumer_timeout_ms=10_000)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        values = []
        for message in consumer:
            values.append(message.value)
            if len(values) >= expected:
                break
        return values
    finally:
        consumer.close()


def end_offset(bootstrap: str, topic: str) -> int:
    """The broker's end offset of `topic` partition 0 (0 = nothing was ever written)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        return consumer.end_offsets([tp])[tp]
    finally:
        consumer.close()


def expected_values(tag: str) -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(RECORDS)]


def confluent_produce(bootstrap: str, topic: str, tag: str, settings: dict) -> list:
    from confluent_kafka import Producer

    errors: list = []
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "message.timeout.ms": int(DELIVERY_TIMEOUT_S * 1000), **settings})
    for value in expected_values(tag):
        producer.produce(topic, value=value, partition=0,
                         on_delivery=lambda err, _msg: errors.append(err) if err else None)
    assert producer.flush(DELIVERY_TIMEOUT_S) == 0, "undelivered records"
    return errors


def kafka_python_produce(bootstrap: str, topic: str, tag: str, settings: dict) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, **settings)
    try:
        futures = [producer.send(topic, value=v, partition=0) for v in expected_values(tag)]
        for f in futures:
            f.get(timeout=DELIVERY_TIMEOUT_S)
    finally:
        producer.close(timeout=10)


def fresh_topic(tansu) -> str:
    name = unique_name("sec")
    create_topics(tansu.bootstrap, {name: 1})
    return name


def test_confluent_kafka_over_tls(tansu, tls_proxy, certs):
    topic = fresh_topic(tansu)
    errors = confluent_produce(tls_proxy.bootstrap, topic, "ck-tls",
                               {"security.protocol": "SSL", "ssl.ca.location": str(certs.ca_file)})
    assert errors == []
    assert consume_values(tansu.bootstrap, topic, RECORDS) == expected_values("ck-tls")


def test_kafka_python_over_tls(tansu, tls_proxy, certs):
    topic = fresh_topic(tansu)
    kafka_python_produce(tls_proxy.bootstrap, topic, "kp-tls",
                         {"security_protocol": "SSL", "ssl_cafile": str(certs.ca_file)})
    assert consume_values(tansu.bootstrap, topic, RECORDS) == expected_values("kp-tls")


def test_plaintext_client_on_the_tls_listener_is_dropped_and_tls_still_served(tls_proxy, certs):
    async def main() -> None:
        wire = await Wire.connect(tls_proxy.port)
        await wire.send(api_versions_request(1))
        await wire.expect_closed()  # a Kafka frame is not a TLS ClientHello
        await wire.aclose()

    trio.run(main)
    assert "TLS handshake failed" in tls_proxy.log_text()


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_confluent_kafka_with_sasl(tansu, sasl_plaintext_proxy, sasl_ssl_proxy, certs, mechanism, protocol):
    proxy = sasl_ssl_proxy if protocol == "SASL_SSL" else sasl_plaintext_proxy
    settings = {"security.protocol": protocol, "sasl.mechanisms": mechanism, "sasl.username": USER,
                "sasl.password": PASSWORD}
    if protocol == "SASL_SSL":
        settings["ssl.ca.location"] = str(certs.ca_file)
    topic = fresh_topic(tansu)
    tag = f"ck-{protocol}-{mechanism}"
    assert confluent_produce(proxy.bootstrap, topic, tag, settings) == []
    assert consume_values(tansu.bootstrap, topic, RECORDS) == expected_values(tag)


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_kafka_python_with_sasl(tansu, sasl_plaintext_proxy, sasl_ssl_proxy, certs, mechanism, protocol):
    proxy = sasl_ssl_proxy if protocol == "SASL_SSL" else sasl_plaintext_proxy
    settings = {"security_protocol": protocol, "sasl_mechanism": mechanism, "sasl_plain_username": USER,
                "sasl_plain_password": PASSWORD}
    if protocol == "SASL_SSL":
        settings["ssl_cafile"] = str(certs.ca_file)
    topic = fresh_topic(tansu)
    tag = f"kp-{protocol}-{mechanism}"
    kafka_python_produce(proxy.bootstrap, topic, tag, settings)
    assert consume_values(tansu.bootstrap, topic, RECORDS) == expected_values(tag)


def test_confluent_kafka_with_a_wrong_password_delivers_nothing(tansu, sasl_plaintext_proxy):
    from confluent_kafka import KafkaError, Producer

    failures: list = []
    producer = Producer({"bootstrap.servers": sasl_plaintext_proxy.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": USER, "sasl.password": "not-it",
                         "message.timeout.ms": 3000, "error_cb": failures.append})
    delivered: list = []
    producer.produce(fresh_topic(tansu), value=b"x", on_delivery=lambda err, _m: delivered.append(err))
    producer.flush(10)
    assert len(delivered) == 1 and delivered[0] is not None  # timed out undelivered
    assert any(f.code() == KafkaError._AUTHENTICATION for f in failures), failures


# --- raw requests ----------------------------------------------------------------------------

async def _handshake(wire: Wire, mechanism: str, correlation_id: int = 2) -> SaslHandshakeResponse:
    await wire.send(encode(SaslHandshakeRequest(mechanism=mechanism), correlation_id, 1))
    got, response = await wire.read_response(SaslHandshakeResponse, 1)
    assert got == correlation_id
    return response


@pytest.mark.trio
async def test_api_versions_before_login_advertises_sasl(sasl_plaintext_proxy):
    wire = await Wire.connect(sasl_plaintext_proxy.port)
    await wire.send(api_versions_request(1))
    _, response = await wire.read_response(ApiVersionsResponse, 3)
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert ranges[17] == (1, 1)  # SaslHandshake v1 only: tokens travel in SaslAuthenticate
    assert ranges[36] == (0, 2)  # SaslAuthenticate
    await wire.aclose()


@pytest.mark.trio
async def test_tls_listener_without_sasl_does_not_advertise_sasl(tls_proxy, certs):
    import ssl

    context = ssl.create_default_context(cafile=str(certs.ca_file))
    stream = trio.SSLStream(await trio.open_tcp_stream("127.0.0.1", tls_proxy.port), context,
                            server_hostname="127.0.0.1")
    wire = Wire(stream)
    await wire.send(api_versions_request(1))
    _, response = await wire.read_response(ApiVersionsResponse, 3)
    keys = {k.api_key for k in response.api_keys}
    assert 17 not in keys and 36 not in keys and 0 in keys
    await wire.aclose()


@pytest.mark.trio
async def test_wrong_plain_password_gets_error_58_and_the_connection_closes(sasl_plaintext_proxy):
    wire = await Wire.connect(sasl_plaintext_proxy.port)
    assert (await _handshake(wire, "PLAIN")).error_code == 0
    token = b"\0" + USER.encode() + b"\0wrong-password"
    await wire.send(encode(SaslAuthenticateRequest(auth_bytes=token), 3, 2))
    correlation_id, response = await wire.read_response(SaslAuthenticateResponse, 2)
    assert (correlation_id, response.error_code) == (3, SASL_AUTHENTICATION_FAILED)
    await wire.expect_closed()


@pytest.mark.trio
async def test_right_plain_password_then_produce_is_answered(tansu, sasl_plaintext_proxy):
    from kafka.protocol.producer import ProduceResponse

    topic = fresh_topic(tansu)
    wire = await Wire.connect(sasl_plaintext_proxy.port)
    assert (await _handshake(wire, "PLAIN")).error_code == 0
    await wire.send(encode(SaslAuthenticateRequest(auth_bytes=b"\0" + USER.encode() + b"\0" + PASSWORD.encode()),
                           3, 1))
    _, response = await wire.read_response(SaslAuthenticateResponse, 1)
    assert (response.error_code, response.auth_bytes) == (0, b"")
    await wire.send(produce_request(4, 9, -1, {(topic, 0): record_batch([b"after-login"])}))
    correlation_id, produced = await wire.read_response(ProduceResponse, 9)
    assert correlation_id == 4
    assert [p.error_code for t in produced.responses for p in t.partition_responses] == [0]
    await wire.aclose()
    assert end_offset(tansu.bootstrap, topic) == 1  # the helper sees a write (it proves absence below)


@pytest.mark.trio
async def test_unsupported_mechanism_is_answered_then_closed(sasl_plaintext_proxy):
    wire = await Wire.connect(sasl_plaintext_proxy.port)
    response = await _handshake(wire, "GSSAPI")
    assert response.error_code == UNSUPPORTED_SASL_MECHANISM
    assert sorted(response.mechanisms) == sorted(MECHANISMS)
    await wire.expect_closed()


@pytest.mark.trio
async def test_produce_before_authentication_closes_the_connection_unanswered(tansu, sasl_plaintext_proxy):
    topic = fresh_topic(tansu)
    wire = await Wire.connect(sasl_plaintext_proxy.port)
    await wire.send(produce_request(1, 9, -1, {(topic, 0): record_batch([b"sneaky"])}))
    await wire.expect_closed()
    # and after a handshake but before SaslAuthenticate completes, too
    wire = await Wire.connect(sasl_plaintext_proxy.port)
    assert (await _handshake(wire, "SCRAM-SHA-256")).error_code == 0
    await wire.send(produce_request(3, 9, -1, {(topic, 0): record_batch([b"sneaky"])}))
    await wire.expect_closed()
    assert end_offset(tansu.bootstrap, topic) == 0


def test_passwords_never_appear_in_the_debug_logs(sasl_plaintext_proxy, sasl_ssl_proxy):
    # Runs after the module's logins (pytest keeps file order): both proxies logged at
    # DEBUG through successful and failed SASL sessions.
    for proxy in (sasl_plaintext_proxy, sasl_ssl_proxy):
        text = proxy.log_text()
        assert "authenticated as 'alice'" in text  # the log did see the sessions
        assert PASSWORD not in text and UPSTREAM_PASSWORD not in text
    assert "SASL authentication failed" in sasl_plaintext_proxy.log_text()


def test_frames_are_what_the_library_decodes():
    # Guard for the raw tests above: the SaslAuthenticate v2 request is flexible (compact bytes).
    frame = encode(SaslAuthenticateRequest(auth_bytes=b"ab"), 7, 2)
    (size,) = struct.unpack_from(">i", frame, 0)
    assert size == len(frame) - 4
    assert frame[-4:] == b"\x03ab\x00"  # compact bytes: uvarint(len+1)=3, 'ab', no tagged fields
