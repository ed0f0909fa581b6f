"""What the proxy advertises in front of Apache Kafka 4.x, where KIP-896 removed old
versions (Produce v0-2, Fetch below v4, ...) and Produce v13 (4.1+) names topics by id.

Read with ApiVersions v0 on a plain socket from the proxy and from a broker. Produce is
advertised from v0 on purpose (librdkafka turns idempotence off when Produce's range
starts above 0) and v0-v2 are refused when they arrive; it stops at v12, the last version
that names topics, so current clients (the Java 4.x producer included) send v12. Kafka
4.4 itself does the same at the bottom (advertises v0, refuses v0-2) and serves v13. Every
other API the proxy forwards lies within what the broker serves.
"""

from __future__ import annotations

import socket
import struct

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from tests.integration.cluster.conftest import proxy_on
from tests.integration.cluster.raw_log import _read

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

PRODUCE, FETCH, METADATA, API_VERSIONS = 0, 1, 3, 18


def api_versions(address: str) -> dict[int, tuple[int, int]]:
    host, _, port = address.rpartition(":")
    request = ApiVersionsRequest()
    request.with_header(correlation_id=1, client_id="versions-probe")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(bytes(request.encode(version=0, header=True, framed=True)))
        size = struct.unpack(">i", _read(s, 4))[0]
        answer = ApiVersionsResponse.decode(_read(s, size), version=0, header=True)
    assert answer.error_code == 0, answer
    return {a.api_key: (a.min_version, a.max_version) for a in answer.api_keys}


def test_the_proxy_advertises_what_it_serves_in_front_of_kafka_4(kafka, tmp_path):
    broker = api_versions(kafka.nodes[1].bootstrap)
    # Apache Kafka 4.4 too advertises Produce from v0 (for librdkafka) while refusing v0-2
    # (KIP-896), and serves v13, by topic id.
    assert broker[PRODUCE] == (0, 13)
    assert broker[FETCH][0] == 4
    with proxy_on(kafka, tmp_path) as proxy:
        advertised = api_versions(proxy.bootstrap)
    assert advertised[PRODUCE] == (0, 12)
    assert advertised[FETCH] == (4, 12)  # the broker's floor, the proxy's ceiling
    for api_key, (lo, hi) in advertised.items():
        if api_key in (PRODUCE, METADATA, API_VERSIONS):  # served by the proxy itself
            continue
        assert api_key in broker, api_key
        assert broker[api_key][0] <= lo <= hi <= broker[api_key][1], (api_key, (lo, hi), broker[api_key])
