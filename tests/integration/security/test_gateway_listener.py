"""A zone gateway as configured for production: every interface, an advertised name, TLS and
SASL, two workers. A SASL_SSL producer that bootstraps from the advertised name delivers;
the same listener refuses to start without TLS (the real command, exit 2)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from deploy.local.processes import free_port, stop_process
from tests.conftest import create_topics, unique_name
from tests.integration.azsidecar.test_gateway_workers import START_TIMEOUT_S, consume, wait_for_log
from tests.integration.proxy.clients_matrix import PARTITIONS
from tests.integration.security.conftest import PASSWORD, USER

pytestmark = pytest.mark.integration
TOPIC_AUTHORIZATION_FAILED = 29


def gateway_toml(tmp_path, bootstrap, port, certs, users_file, tls: bool = True, authz: str | None = "none") -> str:
    """`authz`: authz.source, or None to leave the section out (a gateway then denies by default)."""
    tls_lines = f'tls_cert_file = "{certs.cert_file}"\ntls_key_file = "{certs.key_file}"\n' if tls else ""
    authz_lines = f'[authz]\nsource = "{authz}"\n' if authz is not None else ""
    return (f'zone = "use1-az1"\n[upstream]\nbootstrap_servers = ["{bootstrap}"]\n'
            f'[proxy]\nlisten_host = "0.0.0.0"\nlisten_port = {port}\nproxy_id = "gw-sec"\nworkers = 2\n'
            f'advertised_host = "localhost"\n{tls_lines}'
            f'sasl_mechanisms = ["SCRAM-SHA-512"]\nsasl_users_file = "{users_file}"\n'
            f'[audit]\noutput = "{tmp_path / "audit"}"\n{authz_lines}')


def start_gateway(tmp_path, toml: str) -> subprocess.Popen:
    config = tmp_path / "gateway.toml"
    config.write_text(toml)
    with open(tmp_path / "gateway.log", "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "azsidecar", "proxy", "--config", str(config)],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_log(tmp_path / "gateway.log", r"proxy gw-sec-w\d listening", 2, proc, START_TIMEOUT_S)
    except BaseException:
        stop_process(proc)
        raise
    return proc


def sasl_ssl_producer(port: int, certs, **settings):
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": f"localhost:{port}", "security.protocol": "SASL_SSL",
                     "ssl.ca.location": str(certs.ca_file), "sasl.mechanism": "SCRAM-SHA-512",
                     "sasl.username": USER, "sasl.password": PASSWORD, "acks": "all", **settings})


def test_gateway_on_every_interface_serves_sasl_ssl_producers(tansu, certs, users_file, tmp_path):
    topic = unique_name("gw-sec")
    create_topics(tansu.bootstrap, {topic: PARTITIONS})
    port = free_port()
    log = tmp_path / "gateway.log"
    proc = start_gateway(tmp_path, gateway_toml(tmp_path, tansu.bootstrap, port, certs, users_file))
    try:
        producer = sasl_ssl_producer(port, certs, **{"enable.idempotence": True})
        brokers = producer.list_topics(timeout=15).brokers
        assert [(b.host, b.port) for b in brokers.values()] == [("localhost", port)]
        for i in range(100):
            producer.produce(topic, value=f"{i:03d}".encode())
        assert producer.flush(30) == 0
        received = consume(tansu.bootstrap, topic, 100)
        assert sorted(v for records in received.values() for _, v in records) == [
            f"{i:03d}".encode() for i in range(100)]
        assert PASSWORD not in log.read_text()
    finally:
        stop_process(proc)


def test_a_gateway_with_no_authorization_configured_refuses_every_topic(tansu, certs, users_file, tmp_path):
    """No [authz] section: a gateway denies by default (TOPIC_AUTHORIZATION_FAILED, the
    connection stays open), and nothing reaches the broker."""
    topic = unique_name("gw-deny")
    create_topics(tansu.bootstrap, {topic: PARTITIONS})
    port = free_port()
    proc = start_gateway(tmp_path, gateway_toml(tmp_path, tansu.bootstrap, port, certs, users_file, authz=None))
    try:
        producer = sasl_ssl_producer(port, certs, **{"message.timeout.ms": 20_000, "retries": 0})
        errors: list[int] = []
        for i in range(10):
            producer.produce(topic, value=f"{i}".encode(), partition=i % PARTITIONS,
                             on_delivery=lambda err, _msg: errors.append(err.code() if err else 0))
        assert producer.flush(30) == 0
        assert errors == [TOPIC_AUTHORIZATION_FAILED] * 10
    finally:
        stop_process(proc)
    assert consume(tansu.bootstrap, topic, 0) == {}


def test_gateway_without_tls_refuses_to_start(tansu, certs, users_file, tmp_path):
    config = tmp_path / "gateway.toml"
    config.write_text(gateway_toml(tmp_path, tansu.bootstrap, free_port(), certs, users_file, tls=False))
    done = subprocess.run([sys.executable, "-m", "azsidecar", "proxy", "--config", str(config)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "proxy.listen_host: '0.0.0.0' is reachable from other hosts" in done.stderr
