"""Mutual TLS on the proxy's listener: the client's principal comes from its certificate.

An in-process proxy in front of the session's Tansu broker requires a client certificate
signed by the test CA (`proxy.tls_client_ca_file`), maps subjects with Kafka-style rules
(`RULE:^CN=(.*?),OU=ServiceUsers,O=Example$/$1/L`, no DEFAULT), and authorizes from an ACL
file that lets `User:orders-svc` write topic `ok-*` only. A confluent-kafka producer with
the orders-svc certificate gets its `ok-*` records acknowledged and TOPIC_AUTHORIZATION_FAILED
for another topic; a certificate no rule maps, and a client with no certificate, are
refused at connection time.
"""

from __future__ import annotations

import ssl

import confluent_kafka
import pytest
import trio
from cryptography.x509.oid import NameOID

from kafka_upstream.config import UpstreamConfig
from proxy.config import AuthzConfig, ProxyConfig
from proxy.startup import run_proxy
from tests.conftest import create_topics, unique_name
from tests.integration.proxy.kafka_wire import Wire, api_versions_request
from tests.integration.security._certs import make_certs, make_client_cert

pytestmark = [pytest.mark.integration, pytest.mark.trio]

TOPIC_AUTHORIZATION_FAILED = 29
ACLS = """
[[acl]]
principal = "User:orders-svc"
operation = "Write"
resource_type = "Topic"
pattern_type = "Prefixed"
name = "ok-"
"""
SERVICE = [(NameOID.ORGANIZATION_NAME, "Example"), (NameOID.ORGANIZATIONAL_UNIT_NAME, "ServiceUsers"),
           (NameOID.COMMON_NAME, "Orders-Svc")]
PERSON = [(NameOID.ORGANIZATION_NAME, "Example"), (NameOID.ORGANIZATIONAL_UNIT_NAME, "People"),
          (NameOID.COMMON_NAME, "mallory")]


async def start(nursery, tansu, tmp_path):
    (tmp_path / "certs").mkdir()
    certs = make_certs(tmp_path / "certs")
    acl_file = tmp_path / "acls.toml"
    acl_file.write_text(ACLS)
    config = ProxyConfig(listen_port=0, tls_cert_file=str(certs.cert_file), tls_key_file=str(certs.key_file),
                         tls_client_ca_file=str(certs.ca_file),
                         tls_principal_mapping_rules=("RULE:^CN=(.*?),OU=ServiceUsers,O=Example$/$1/L",))
    _server, port = await nursery.start(
        lambda task_status: run_proxy(config, UpstreamConfig(bootstrap_servers=(tansu.bootstrap,)),
                                      task_status=task_status,
                                      authz=AuthzConfig(source="file", acl_file=str(acl_file))))
    return certs, port


def produce(port: int, ca_file, cert_file, key_file, topic: str) -> list[int]:
    """Three records to `topic` by a real client over mutual TLS; the error code of each (0: acknowledged)."""
    codes: list[int] = []
    producer = confluent_kafka.Producer({
        "bootstrap.servers": f"localhost:{port}", "security.protocol": "SSL", "ssl.ca.location": str(ca_file),
        "ssl.certificate.location": str(cert_file), "ssl.key.location": str(key_file), "acks": "all",
        "enable.idempotence": True, "message.timeout.ms": 20_000})
    for i in range(3):
        producer.produce(topic, str(i).encode(), partition=0,
                         on_delivery=lambda err, _msg: codes.append(err.code() if err else 0))
    assert producer.flush(30) == 0
    return codes


async def test_a_certificate_principal_gets_exactly_its_rights(nursery, tansu, tmp_path):
    certs, port = await start(nursery, tansu, tmp_path)
    cert, key = make_client_cert(certs, tmp_path, SERVICE, "orders-svc")
    ok, other = unique_name("ok"), unique_name("payments")
    await trio.to_thread.run_sync(create_topics, tansu.bootstrap, {ok: 1, other: 1})
    assert await trio.to_thread.run_sync(produce, port, certs.ca_file, cert, key, ok) == [0, 0, 0]
    assert await trio.to_thread.run_sync(produce, port, certs.ca_file, cert, key, other) == \
        [TOPIC_AUTHORIZATION_FAILED] * 3


async def connect(port: int, ca_file, cert_file=None, key_file=None) -> Wire:
    context = ssl.create_default_context(cafile=str(ca_file))
    if cert_file is not None:
        context.load_cert_chain(str(cert_file), str(key_file))
    stream = await trio.open_ssl_over_tcp_stream("localhost", port, ssl_context=context)
    return Wire(stream)


async def refused(port: int, ca_file, cert_file=None, key_file=None) -> bool:
    """Whether the proxy closes the connection instead of answering ApiVersions."""
    with trio.fail_after(10):
        try:
            wire = await connect(port, ca_file, cert_file, key_file)
            await wire.send(api_versions_request(1))
            data = await wire.stream.receive_some(4096)
        except (trio.BrokenResourceError, ssl.SSLError, OSError):
            return True
    return data == b""


async def test_a_certificate_no_rule_maps_and_no_certificate_are_refused(nursery, tansu, tmp_path):
    certs, port = await start(nursery, tansu, tmp_path)
    person_cert, person_key = make_client_cert(certs, tmp_path, PERSON, "mallory")
    service_cert, service_key = make_client_cert(certs, tmp_path, SERVICE, "orders-svc")
    assert await refused(port, certs.ca_file, person_cert, person_key)
    assert await refused(port, certs.ca_file)
    assert not await refused(port, certs.ca_file, service_cert, service_key)
