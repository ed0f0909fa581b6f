"""Three loopback zones with the WAL on S3 Express One Zone: real `azsidecar proxy` and
`azsidecar agent` processes, a directory bucket per zone behind deploy/local/s3_express.py
(sessions checked on every request) in front of the zones' moto, on the shared Apache Kafka
zones (three KRaft nodes, one rack per zone, leaders placed by the brokers); every record
read back."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import boto3
import pytest

from deploy.local.processes import DUMMY_CREDENTIALS
from deploy.local.s3_express import create_directory_bucket, running_front
from deploy.local.scenario import TopicSpec, Workload, router_overrides, run_sidecar
from deploy.local.sidecar_stack import SidecarSettings, sidecar_starter
from tests.conftest import unique_name

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.timeout(600)]


def records_of(audit_dir: Path, kind: str) -> list[dict]:
    out = []
    for path in audit_dir.rglob("*.jsonl.gz"):
        with gzip.open(path, "rt") as f:
            out.extend(r for r in map(json.loads, f) if r["kind"] == kind)
    return out


def test_records_cross_zones_through_each_zone_directory_bucket(loopback_kafka_zones, tmp_path):
    env = loopback_kafka_zones
    zones = env.zone_names
    base = unique_name("wal")  # the zones are shared: this test's own directory buckets
    # paced (2,000 records per producer over ~1 s), so every partition takes many requests
    workload = Workload(total_bytes=600_000, record_bytes=100, topics=(TopicSpec("orders", partitions=4, keyed=True),),
                        linger_ms=5, records_per_s=2_000)
    assert env.moto is not None
    for zone in zones:
        create_directory_bucket(("127.0.0.1", env.moto.port), f"{base}--{zone}--x-s3")
    with running_front(f"127.0.0.1:{env.moto.port}", tmp_path / "front.log") as endpoint:
        settings = SidecarSettings(produce_detail="batch", object_detail="object", wal_bucket=base, audit_dir=tmp_path / "audit", policy="wal", linger_ms=20,
                                   partition_zones=router_overrides(env, workload)["partition_zones"],
                                   # a loaded host's slow answers must not open the circuits here
                                   # (tests/system/e2e/test_demo_netns.py says why)
                                   extra={"wal": {"storage_class": "express", "endpoint_url": endpoint},
                                          "notify": {"gray_floor_s": 8.0, "gray_max_s": 8.0}})
        result = run_sidecar(env, workload, sidecar_starter(env, settings), name="express")
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id=DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
        in_bucket = {zone: {o["Key"] for o in s3.list_objects_v2(Bucket=f"{base}--{zone}--x-s3").get("Contents", [])}
                     for zone in zones}

    assert result.verification["ok"], result.verification["problems"]
    assert result.records == 6_000 and result.verification["records"] == 6_000  # 3 zones x 2,000
    written = records_of(settings.audit_dir, "wal_flush")
    assert written and all(f["ok"] for f in written)
    # 4 partitions over 3 racks: every zone produces to partitions led elsewhere
    assert {f["zone"] for f in written} == set(zones)  # every proxy took the WAL path
    for f in written:  # each zone's proxy wrote into its own zone's directory bucket (no GC runs here)
        assert f["key"] in in_bucket[f["zone"]], f
        assert f"/wal/{f['zone']}/" in f["key"]
    # Express counts what a batch's records waited in the producer into the linger by default:
    # the partitions' later requests carry librdkafka's real record timestamps, so some waited
    batches = [b for b in records_of(settings.audit_dir, "produce_batch") if b["route"] == "wal"]
    assert batches and all(b["producer_wait_ms"] >= 0 for b in batches)
    assert any(b["producer_wait_ms"] > 0 for b in batches)
