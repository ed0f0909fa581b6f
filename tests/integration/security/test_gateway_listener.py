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


def gateway_toml(tmp_path, bootstrap, port, certs, users_file, tls: bool = True) -> str:
    tls_lines = f'tls_cert_file = "{certs.cert_file}"\ntls_key_file = "{certs.key_file}"\n' if tls else ""
    return (f'zone = "use1-az1"\n[upstream]\nbootstrap_servers = ["{bootstrap}"]\n'
            f'[proxy]\nlisten_host = "0.0.0.0"\nlisten_port = {port}\nproxy_id = "gw-sec"\nworkers = 2\n'
            f'advertised_host = "localhost"\n{tls_lines}'
            f'sasl_mechanisms = ["SCRAM-SHA-512"]\nsasl_users_file = "{users_file}"\n'
            f'[audit]\noutput = "{tmp_path / "audit"}"\n[authz]\nsource = "none"\n')


def test_gateway_on_every_interface_serves_sasl_ssl_producers(tansu, certs, users_file, tmp_path):
    from confluent_kafka import Producer

    topic = unique_name("gw-sec")
    create_topics(tansu.bootstrap, {topic: PARTITIONS})
    port = free_port()
    config = tmp_path / "gateway.toml"
    config.write_text(gateway_toml(tmp_path, tansu.bootstrap, port, certs, users_file))
    log = tmp_path / "gateway.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "azsidecar", "proxy", "--config", str(config)],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_log(log, r"proxy gw-sec-w\d listening", 2, proc, START_TIMEOUT_S)
        producer = Producer({"bootstrap.servers": f"localhost:{port}", "security.protocol": "SASL_SSL",
                             "ssl.ca.location": str(certs.ca_file), "sasl.mechanism": "SCRAM-SHA-512",
                             "sasl.username": USER, "sasl.password": PASSWORD, "enable.idempotence": True,
                             "acks": "all"})
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


def test_gateway_without_tls_refuses_to_start(tansu, certs, users_file, tmp_path):
    config = tmp_path / "gateway.toml"
    config.write_text(gateway_toml(tmp_path, tansu.bootstrap, free_port(), certs, users_file, tls=False))
    done = subprocess.run([sys.executable, "-m", "azsidecar", "proxy", "--config", str(config)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "proxy.listen_host: '0.0.0.0' is reachable from other hosts" in done.stderr
