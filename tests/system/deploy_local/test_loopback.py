"""Without namespaces the environment runs on 127.0.0.1 and says the meter is "unmetered"."""

from __future__ import annotations

import boto3
import pytest
from kafka.admin import KafkaAdminClient

from deploy.local.scenario import TopicSpec, Workload, run_baseline
from deploy.local.zones import three_zones

# Bytes, records and bounded waits only, and an environment of its own: runs beside the
# system tier's chain at the integration tier's priority (tests/conftest.py).
BESIDE_THE_SYSTEM_TIER = True


def test_loopback_zones_are_unmetered():
    with three_zones(mode="loopback", start_s3=False, start_brokers=False) as env:
        assert not env.metered
        assert [z.address for z in env.zones] == ["127.0.0.1"] * 3
        assert [z.netns for z in env.zones] == [None] * 3
        # Three sidecars share 127.0.0.1, so each zone gets its own port.
        assert len({z.sidecar_bootstrap for z in env.zones}) == 3
        meter = env.meter()
        meter.start()
        reading = meter.stop()
    assert reading.status == "unmetered"
    assert reading.total_bytes is None
    assert reading.as_dict()["total_bytes"] is None


def test_meter_stop_without_start_is_an_error():
    with three_zones(mode="loopback", start_s3=False, start_brokers=False) as env:
        with pytest.raises(RuntimeError):
            env.meter().stop()


def test_bad_arguments_are_rejected_before_anything_starts():
    with pytest.raises(ValueError):
        three_zones(zones=("a", "a")).__enter__()
    with pytest.raises(ValueError):
        three_zones(mode="loopback", start_s3=False).__enter__()
    with pytest.raises(ValueError):
        three_zones(mode="bogus").__enter__()
    with pytest.raises(ValueError, match="brokers_own_s3: loopback mode only"):
        three_zones(mode="netns", brokers_own_s3=True).__enter__()


@pytest.mark.integration
def test_brokers_own_s3_keeps_the_broker_logs_out_of_the_wals_moto():
    with three_zones(("use1-az1", "use1-az2"), mode="loopback", brokers_own_s3=True) as env:
        wal_s3 = boto3.client("s3", endpoint_url=env.moto.endpoint_url, region_name="us-east-1",
                              aws_access_key_id="test", aws_secret_access_key="test")
        buckets = [b["Name"] for b in wal_s3.list_buckets()["Buckets"]]
        # the brokers' bucket lives in their own moto; the brokers answer from it
        assert env.bucket not in buckets
        for zone in env.zones:
            admin = KafkaAdminClient(bootstrap_servers=zone.broker_bootstrap, request_timeout_ms=10_000)
            try:
                admin.list_topics()
            finally:
                admin.close()


@pytest.mark.integration
def test_loopback_baseline_delivers_exactly_once():
    # 3 producers * (300,000 // 3 // 500 = 200 records) = 600 records.
    workload = Workload(total_bytes=300_000, record_bytes=500, linger_ms=5, timeout_s=60,
                        topics=(TopicSpec("u", 3, keyed=False), TopicSpec("k", 3, keyed=True)))
    with three_zones(mode="loopback") as env:
        result = run_baseline(env, workload)
    assert result.verification["problems"] == []
    assert result.records == 600
    assert result.reading.status == "unmetered"
