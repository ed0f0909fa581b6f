"""The sidecar's upstream security against Apache Kafka itself: TLS (a private CA,
hostname verification on) and SASL/SCRAM-SHA-512 over TLS, as MSK's ports 9094 and
9096 offer them. The brokers' listeners, certificates and SCRAM user come from
deploy/local/kafka_security.py; the proxy and both agents connect only to the secured
listener, so every record on the local route (the proxy to the use1-az1 leader) and on
the WAL route (the agents to the use1-az2/az3 leaders) went over it. The records are
read back over the cluster's PLAINTEXT listener.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.local.kafka_cluster import KafkaCluster, start_kafka_cluster
from deploy.local.kafka_security import (
    SASL_SSL_LISTENER,
    SSL_LISTENER,
    BrokerTls,
    make_broker_tls,
    scram_format_args,
    security_listeners,
)
from deploy.local.processes import DUMMY_CREDENTIALS, free_port
from deploy.local.sidecar_stack import to_toml
from tests.conftest import unique_name
from tests.integration.cluster.conftest import Delivery, produce, producer, read_back, wal_sidecars
from tests.integration.kafka import test_leader_placement_on_kafka as placement
from tests.integration.kafka.conftest import ZONES, spread_leaders
from tests.integration.kafka.test_wal_on_kafka import batches

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

USER = "alice"
PASSWORD = "alice-Scram-5f3e91"  # what the sidecar logs in with; must never show up in its output
PARTITIONS = 6  # leaders in all three zones: two partitions on the local route, four on the WAL route
RECORDS = 300
REFUSED_WITHIN_S = 60.0  # a refused start must end, not hang: three addresses, each failing in well under 5 s


@pytest.fixture(scope="module")
def broker_tls(tmp_path_factory) -> BrokerTls:
    return make_broker_tls(tmp_path_factory.mktemp("broker-tls"))


@pytest.fixture(scope="module")
def secure_kafka(broker_tls, tmp_path_factory) -> Iterator[KafkaCluster]:
    with start_kafka_cluster(tuple(ZONES.values()), log_dir=tmp_path_factory.mktemp("kafka"),
                             listeners=security_listeners(broker_tls),
                             format_args=scram_format_args({USER: PASSWORD})) as cluster:
        yield cluster


def password_file(directory: Path, password: str) -> Path:
    path = directory / "upstream-sasl-password"
    path.write_text(password + "\n")
    path.chmod(0o600)
    return path


def upstream(cluster: KafkaCluster, ca_file: Path, protocol: str, password: Path | None = None) -> dict:
    """The [upstream] section: the listener of `protocol` only, trusting `ca_file`."""
    name = SSL_LISTENER if protocol == "SSL" else SASL_SSL_LISTENER
    settings: dict = {"bootstrap_servers": cluster.listener_bootstrap(name).split(","),
                      "security_protocol": protocol, "tls_ca_file": str(ca_file)}
    if protocol == "SASL_SSL":
        assert password is not None
        settings |= {"sasl_mechanism": "SCRAM-SHA-512", "sasl_username": USER, "sasl_password_file": str(password)}
    return settings


@pytest.mark.parametrize("protocol", ["SSL", "SASL_SSL"])
def test_local_and_wal_routes_over_the_secured_listener(protocol, secure_kafka, broker_tls, moto_server, tmp_path):
    bucket = unique_name("wal")
    moto_server.create_bucket(bucket)
    topic = unique_name("orders")
    leaders = spread_leaders(secure_kafka, topic, PARTITIONS)
    values = [(i % PARTITIONS, i) for i in range(RECORDS)]
    delivery = Delivery()
    settings = {"upstream": upstream(secure_kafka, broker_tls.ca_file, protocol, password_file(tmp_path, PASSWORD))}
    with wal_sidecars(secure_kafka, moto_server, bucket, tmp_path, settings=settings) as sidecars:
        p = producer(sidecars.proxy, acks="all")
        produce(p, topic, values, delivery)
        assert p.flush(60) == 0
    assert not delivery.failed, delivery.failed[:5]
    want: dict[int, list[int]] = {}
    for partition, value in values:
        want.setdefault(partition, []).append(value)
    assert delivery.acked == want
    assert read_back(secure_kafka.bootstrap, topic, PARTITIONS, RECORDS) == want  # once each, in order

    routes = {(b["partition"], b["route"]) for b in batches(sidecars.audit_dir) if b["error_code"] == 0}
    assert routes == {(p, "local" if leaders[p] == 1 else "wal") for p in range(PARTITIONS)}
    for name, log in sidecars.logs.items():
        assert PASSWORD not in log.read_text(errors="replace"), name


def refused_start(role: str, upstream_settings: dict, directory: Path, moto=None) -> tuple[int, str]:
    """Run `azsidecar ROLE` (proxy in use1-az1, agent in use1-az2) with these [upstream]
    settings until it exits, within REFUSED_WITHIN_S; (exit code, its output)."""
    if role == "proxy":
        config = {"zone": ZONES[1], "proxy": {"listen_host": "127.0.0.1", "listen_port": free_port()}}
    else:
        bucket = unique_name("wal")
        moto.create_bucket(bucket)  # the agent checks the WAL bucket before the brokers
        config = {"zone": ZONES[2], "agent": {"listen_host": "127.0.0.1", "listen_port": free_port()},
                  "wal": {"bucket": bucket, "region": "us-east-1", "endpoint_url": moto.endpoint_url}}
    config |= {"upstream": upstream_settings, "audit": {"output": str(directory / "audit")}}
    path = directory / f"{role}.toml"
    path.write_text(to_toml(config))
    env = {**os.environ, **DUMMY_CREDENTIALS, "AZSIDECAR_NOTIFY_HMAC_KEYS": secrets.token_hex(24),
           "AWS_DEFAULT_REGION": "us-east-1"}
    done = subprocess.run([sys.executable, "-m", "azsidecar", role, "--config", str(path)], capture_output=True,
                          text=True, env=env, timeout=REFUSED_WITHIN_S)
    return done.returncode, done.stdout + done.stderr


def last_line(output: str) -> str:
    """The one line a refused start ends with (exit code 1)."""
    line = output.strip().splitlines()[-1]
    assert line.startswith("azsidecar: cannot start: upstream.bootstrap_servers: "), output
    return line


def test_wrong_scram_password_stops_the_proxy_with_the_brokers_answer(secure_kafka, broker_tls, tmp_path):
    settings = upstream(secure_kafka, broker_tls.ca_file, "SASL_SSL", password_file(tmp_path, "wrong-Pw-0a9c"))
    code, output = refused_start("proxy", settings, tmp_path)
    assert code == 1, output
    line = last_line(output)
    for address in settings["bootstrap_servers"]:  # each address once, with the broker's answer
        assert (f"{address}: SASL SCRAM-SHA-512 authentication as '{USER}' failed (error 58): "  # SASL_AUTHENTICATION_FAILED
                "Authentication failed during authentication due to invalid credentials") in line, line
        assert line.count(address) == 1, line
    assert "wrong-Pw-0a9c" not in output


def test_wrong_scram_password_stops_the_agent_with_the_brokers_answer(secure_kafka, broker_tls, moto_server,
                                                                       tmp_path):
    settings = upstream(secure_kafka, broker_tls.ca_file, "SASL_SSL", password_file(tmp_path, "wrong-Pw-0a9c"))
    code, output = refused_start("agent", settings, tmp_path, moto_server)
    assert code == 1, output
    line = last_line(output)
    for address in settings["bootstrap_servers"]:
        assert (f"{address}: [Error 58] SaslAuthenticationFailed: Authentication failed during authentication "
                "due to invalid credentials with SASL mechanism SCRAM-SHA-512") in line, line
    assert "wrong-Pw-0a9c" not in output


@pytest.mark.parametrize("role", ["proxy", "agent"])
def test_a_sidecar_that_does_not_trust_the_brokers_ca_refuses_to_connect(role, secure_kafka, moto_server, tmp_path):
    other = make_broker_tls(tmp_path / "other", ca_name="some other CA")
    code, output = refused_start(role, upstream(secure_kafka, other.ca_file, "SSL"), tmp_path, moto_server)
    assert code == 1, output
    line = last_line(output)
    for address in secure_kafka.listener_bootstrap(SSL_LISTENER).split(","):
        assert f"{address}: " in line, line
    assert "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in certificate chain" in line


def test_plan_leaders_applies_over_the_upstream_sasl_scram_over_tls_of_the_proxy_config(secure_kafka, broker_tls, tmp_path):
    """`azsidecar plan leaders --apply` (tests/integration/kafka/test_leader_placement_on_kafka.py)
    with --config: the proxy's [upstream] (SASL_SSL, SCRAM-SHA-512, a private CA) is how the
    command reaches the cluster; the password comes from its file and never shows."""
    topic = unique_name("secured")
    secure_kafka.create_topic(topic, placement.PARTITIONS, assignments=placement.ASSIGNMENTS)
    audit = placement.write_audit(tmp_path / "window-audit", topic)
    config = tmp_path / "proxy.toml"
    settings = upstream(secure_kafka, broker_tls.ca_file, "SASL_SSL", password_file(tmp_path, PASSWORD))
    config.write_text(to_toml({"zone": "use1-az1", "upstream": settings}))
    done = subprocess.run([sys.executable, "-m", "azsidecar.cli", "plan", "leaders", "--from-audit", str(audit),
                           "--config", str(config), "--out", str(tmp_path / "r.json"),
                           "--plan-out", str(tmp_path / "plan.json"), "--min-saving-bytes", str(placement.MB),
                           "--apply", "--throttle-s", "0"], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "applied 3 moves" in done.stdout
    assert PASSWORD not in done.stdout + done.stderr
    expected = {0: 1, 1: 1, 2: 1, 3: 3, 4: 2, 5: 3}
    assert placement.leaders_when_settled(secure_kafka, topic, expected) == expected
    (tmp_path / "wrong").mkdir()
    wrong = password_file(tmp_path / "wrong", "not-the-password")
    config.write_text(to_toml({"zone": "use1-az1", "upstream": {**settings, "sasl_password_file": str(wrong)}}))
    refused = subprocess.run([sys.executable, "-m", "azsidecar.cli", "plan", "leaders", "--from-audit", str(audit),
                              "--config", str(config), "--out", str(tmp_path / "r2.json"),
                              "--plan-out", str(tmp_path / "plan2.json")],
                             capture_output=True, text=True, timeout=240)
    assert refused.returncode == 1, refused.stderr + refused.stdout
    [line] = refused.stderr.strip().splitlines()  # one line: kafka-python's retry log is kept off stderr
    assert line.startswith("azsidecar: cannot start: cannot reach ") and "Traceback" not in refused.stderr
    # The cause, named: the brokers' refusal as kafka-python reports it, or, where the client
    # read the refusal and the close together and saw only "socket disconnected" (twice in
    # loaded CI runs, every connection of its bootstrap alike), what to check.
    assert "SaslAuthenticationFailedError" in line or "may have refused the SASL login" in line, line
    assert "SCRAM-SHA-512" in line
