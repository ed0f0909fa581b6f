"""TLS and SASL from the sidecar to its upstream brokers, for the proxy and the agent.

Tansu 0.6's own TLS listener does not work here (its `--cert` and `--key` flags refuse
to be given together, and with `--cert` alone it still speaks plaintext), so the TLS
and SASL "broker" is one of our proxy processes with TLS+SASL on its listener in front
of plaintext Tansu: the sidecar under test connects to it exactly as to MSK (TLS with a
private CA, SASL SCRAM or PLAIN with its own identity), and the records must land in
Tansu. The client side of SASL is kafka-python's (proxy) and aiokafka's (agent)
mechanisms, the server side ours, checked against confluent-kafka and kafka-python in
test_listener.py.
"""

from __future__ import annotations

import asyncio

import pytest

from kafka_upstream.config import UpstreamConfig
from kafka_upstream.errors import UpstreamError
from kafka_upstream.upstream import open_upstream
from proxy.config import ProxyConfig
from proxy.startup import run_proxy
from tests.integration.proxy.kafka_wire import Wire, produce_request, record_batch
from tests.integration.security.conftest import UPSTREAM_PASSWORD, secured_proxy
from tests.integration.security.test_listener import (
    RECORDS,
    consume_values,
    expected_values,
    fresh_topic,
    kafka_python_produce,
)

pytestmark = pytest.mark.integration


def sasl_upstream(bootstrap: str, ca_file, mechanism: str = "SCRAM-SHA-512", password: str = UPSTREAM_PASSWORD,
                  protocol: str = "SASL_SSL") -> UpstreamConfig:
    return UpstreamConfig(bootstrap_servers=(bootstrap,), security_protocol=protocol, tls_ca_file=str(ca_file),
                          sasl_mechanism=mechanism, sasl_username="sidecar", sasl_password=password,
                          connect_timeout_s=5, request_timeout_s=10)


def test_proxy_produces_through_a_sasl_ssl_upstream_password_from_file(tansu, sasl_ssl_proxy, certs,
                                                                       tmp_path):
    secret = tmp_path / "upstream-password"
    secret.write_text(UPSTREAM_PASSWORD + "\n")
    secret.chmod(0o600)
    upstream = {"security_protocol": "SASL_SSL", "tls_ca_file": certs.ca_file, "sasl_mechanism": "SCRAM-SHA-512",
                "sasl_username": "sidecar", "sasl_password_file": secret}
    with secured_proxy(sasl_ssl_proxy.bootstrap, tmp_path, "downstream", {}, upstream, log_level="DEBUG") as down:
        topic = fresh_topic(tansu)
        kafka_python_produce(down.bootstrap, topic, "chain", {})
        assert consume_values(tansu.bootstrap, topic, RECORDS) == expected_values("chain")
        assert UPSTREAM_PASSWORD not in down.log_text()
    assert "authenticated as 'sidecar'" in sasl_ssl_proxy.log_text()
    assert UPSTREAM_PASSWORD not in sasl_ssl_proxy.log_text()


def test_proxy_takes_the_upstream_password_from_the_environment(tansu, sasl_plaintext_proxy, tmp_path,
                                                                monkeypatch):
    monkeypatch.setenv("AZSIDECAR_UPSTREAM_SASL_PASSWORD", UPSTREAM_PASSWORD)  # inherited by the process
    upstream = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_username": "sidecar"}
    with secured_proxy(sasl_plaintext_proxy.bootstrap, tmp_path, "downstream-env", {}, upstream,
                       log_level="DEBUG") as down:
        topic = fresh_topic(tansu)
        kafka_python_produce(down.bootstrap, topic, "env", {})
        assert consume_values(tansu.bootstrap, topic, RECORDS) == expected_values("env")
        assert UPSTREAM_PASSWORD not in down.log_text()


@pytest.mark.trio
async def test_in_process_proxy_over_tls_upstream(nursery, tansu, tls_proxy, certs):
    from kafka.protocol.producer import ProduceResponse

    upstream = UpstreamConfig(bootstrap_servers=(tls_proxy.bootstrap,), security_protocol="SSL",
                              tls_ca_file=str(certs.ca_file))
    _server, port = await nursery.start(run_proxy, ProxyConfig(listen_port=0), upstream)
    topic = fresh_topic(tansu)
    wire = await Wire.connect(port)
    await wire.send(produce_request(5, 9, -1, {(topic, 0): record_batch([b"via-tls-upstream"])}))
    _, response = await wire.read_response(ProduceResponse, 9)
    assert [p.error_code for t in response.responses for p in t.partition_responses] == [0]
    await wire.aclose()
    assert consume_values(tansu.bootstrap, topic, 1) == [b"via-tls-upstream"]


@pytest.mark.trio
async def test_upstream_certificate_from_an_unknown_ca_is_refused(tls_proxy, tmp_path):
    from tests.integration.security._certs import make_certs

    other = make_certs(tmp_path, "some other CA")
    upstream = UpstreamConfig(bootstrap_servers=(tls_proxy.bootstrap,), security_protocol="SSL",
                              tls_ca_file=str(other.ca_file), connect_timeout_s=5)
    async with open_upstream(upstream) as cluster:
        with pytest.raises(UpstreamError, match="CERTIFICATE_VERIFY_FAILED"):
            await cluster.connection()


@pytest.mark.trio
async def test_wrong_upstream_password_fails_with_the_brokers_error_and_no_password(sasl_ssl_proxy, certs):
    upstream = sasl_upstream(sasl_ssl_proxy.bootstrap, certs.ca_file, password="wrong-Secret-913")
    async with open_upstream(upstream) as cluster:
        with pytest.raises(UpstreamError) as info:
            await cluster.connection()
    assert "error 58" in str(info.value) and "'sidecar'" in str(info.value)
    assert "wrong-Secret-913" not in str(info.value)


@pytest.mark.trio
async def test_upstream_sasl_against_each_mechanism(sasl_ssl_proxy, certs):
    for mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        async with open_upstream(sasl_upstream(sasl_ssl_proxy.bootstrap, certs.ca_file, mechanism)) as cluster:
            conn = await cluster.connection()
            assert not conn.closed
            assert 0 in cluster.api_versions  # ApiVersions answered (Produce is served)


def test_agent_appender_over_sasl_ssl(tansu, sasl_ssl_proxy, certs):
    from leader_notify.agent.appender import KafkaAppender
    from leader_notify.agent.runner import aiokafka_security

    upstream = sasl_upstream(sasl_ssl_proxy.bootstrap, certs.ca_file, "SCRAM-SHA-256")
    topic = fresh_topic(tansu)

    async def append() -> int:
        async with KafkaAppender(upstream.bootstrap_servers, security=aiokafka_security(upstream),
                                 request_timeout_ms=10_000) as appender:
            result = await appender.append(topic, 0, record_batch([b"agent-1", b"agent-2"]))
            return result.error_code

    assert asyncio.run(append()) == 0
    assert consume_values(tansu.bootstrap, topic, 2) == [b"agent-1", b"agent-2"]


def test_agent_reads_the_password_file_when_the_cli_did_not_fill_it(tmp_path, certs):
    from leader_notify.agent.runner import aiokafka_security

    secret = tmp_path / "pw"
    secret.write_text("from-file-pw\n")
    secret.chmod(0o600)
    upstream = UpstreamConfig(security_protocol="SASL_SSL", tls_ca_file=str(certs.ca_file),
                              sasl_mechanism="PLAIN", sasl_username="agent", sasl_password_file=str(secret))
    settings = aiokafka_security(upstream)
    assert settings["sasl_plain_password"] == "from-file-pw"
    assert settings["security_protocol"] == "SASL_SSL" and settings["ssl_context"].check_hostname
    assert aiokafka_security(UpstreamConfig()) == {"security_protocol": "PLAINTEXT"}
