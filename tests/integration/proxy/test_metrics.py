"""/metrics: request counters by API move when clients produce through the proxy; every series
carries the zone and component, the build is named, other components' families are not served."""

from __future__ import annotations

import subprocess

import pytest
import trio
from prometheus_client import REGISTRY, generate_latest

from azsidecar import __version__
from deploy.local.processes import free_port
from tests import metrics_scrape
from tests.conftest import create_topics, unique_name
from tests.integration.proxy.conftest import TEST_ZONE, start_proxy
from tests.integration.proxy.kafka_wire import Wire, produce_request, record_batch
from tests.integration.proxy.test_wire import start_proxy as start_inproc_proxy

pytestmark = pytest.mark.integration


def _sample(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.mark.trio
async def test_in_process_counters_move_after_a_produce(nursery, tansu):
    from kafka.protocol.producer import ProduceResponse

    port = await start_inproc_proxy(nursery, tansu)
    topic = unique_name("metrics")
    await trio.to_thread.run_sync(create_topics, tansu.bootstrap, {topic: 2})
    produce_before = _sample("azsidecar_proxy_requests_total", {"api": "Produce", "api_version": "9"})
    corrupt_before = _sample("azsidecar_proxy_errors_total", {"error_code": "2"})
    anonymous_before = _sample("azsidecar_proxy_principal_produce_bytes_total", {"principal": "User:ANONYMOUS"})
    bad = bytearray(record_batch([b"x"]))
    bad[-1] ^= 1
    wire = await Wire.connect(port)
    requests = [produce_request(1, 9, -1, {(topic, 0): record_batch([b"a", b"b"]), (topic, 1): bytes(bad)}),
                produce_request(2, 9, -1, {(topic, 0): record_batch([b"c"])})]
    await wire.send(b"".join(requests))
    for _ in range(2):
        await wire.read_response(ProduceResponse, 9)
    await wire.aclose()
    assert _sample("azsidecar_proxy_requests_total", {"api": "Produce", "api_version": "9"}) == produce_before + 2
    assert _sample("azsidecar_proxy_errors_total", {"error_code": "2"}) == corrupt_before + 1
    # no SASL, no certificate: Kafka's ANONYMOUS; each frame counted without its 4-byte size prefix
    assert _sample("azsidecar_proxy_principal_produce_bytes_total", {"principal": "User:ANONYMOUS"}) == \
        anonymous_before + sum(len(r) - 4 for r in requests)
    exposition = generate_latest().decode()
    assert 'azsidecar_proxy_requests_total{api="Produce",api_version="9"}' in exposition
    assert "azsidecar_proxy_request_latency_seconds_bucket" in exposition


def _scrape(port: int) -> dict[tuple[str, tuple], float]:
    return metrics_scrape.series(port)


def test_metrics_endpoint_of_a_proxy_process(tansu, tmp_path):
    metrics_port = free_port()
    topic = unique_name("metrics-http")
    create_topics(tansu.bootstrap, {topic: 1})
    with start_proxy(tansu.bootstrap, tmp_path, ("--metrics-port", str(metrics_port))) as proxy:
        before = _scrape(metrics_port)
        assert not any(name == "azsidecar_proxy_requests_total" and dict(labels).get("api") == "Produce"
                       for name, labels in before)
        done = subprocess.run(["kcat", "-P", "-b", proxy.bootstrap, "-t", topic, "-X", "acks=all"],
                              input=b"one\ntwo\n", capture_output=True, timeout=30)
        assert done.returncode == 0, done.stderr
        after = _scrape(metrics_port)
    produce = sum(v for (name, labels), v in after.items()
                  if name == "azsidecar_proxy_requests_total" and dict(labels)["api"] == "Produce")
    versions = sum(v for (name, labels), v in after.items()
                   if name == "azsidecar_proxy_requests_total" and dict(labels)["api"] == "ApiVersions")
    assert produce >= 1
    assert versions >= 1  # kcat negotiates first
    own = (("component", "proxy"), ("zone", TEST_ZONE))
    assert after[("azsidecar_proxy_open_connections", own)] >= 0
    assert all(dict(labels).get("zone") == TEST_ZONE and dict(labels).get("component") == "proxy"
               for _name, labels in after)
    assert [dict(labels)["version"] for name, labels in after if name == "azsidecar_build_info"] == [__version__]
    by_route = {dict(labels)["route"]: v for (name, labels), v in after.items()
                if name == "azsidecar_proxy_produce_latency_seconds_count"}
    assert sum(by_route.values()) >= 1, by_route
    # Another component's families (the WAL reader's cache, the agent's) are not served by a proxy.
    assert not any(name.startswith(("azsidecar_wal_cache_", "azsidecar_agent_")) for name, _labels in after)
