"""The verifier of bench/workload.py passes a clean log and names what is wrong in a bad one.

Runs on the loopback Tansu fixture (no root needed): the producer writes through the
real confluent-kafka client, the faults are planted with kafka-python.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tests.conftest import create_topics, unique_name

# Bytes, records and bounded waits only, and an environment of its own: runs beside the
# system tier's chain at the integration tier's priority (tests/conftest.py).
BESIDE_THE_SYSTEM_TIER = True

pytestmark = pytest.mark.integration

_SPEC = importlib.util.spec_from_file_location(
    "bench_workload", Path(__file__).resolve().parents[3] / "bench" / "workload.py")
workload = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(workload)


def test_value_round_trip():
    value = workload.value_of("z1-p0", 42, 100)
    assert len(value) == 100
    assert value.startswith(b"z1-p0|0000000042|")
    assert workload.parse_value(value) == ("z1-p0", 42)
    with pytest.raises(ValueError):
        workload.parse_value(b"no separators here")


def _produce_small(tansu, tmp_path, topic):
    # 2 topics is overkill here; one unkeyed topic with 2 partitions, 10 records of 50 B.
    spec = {"zones": ["use1-az1", "use1-az2"], "record_bytes": 50, "linger_ms": 5,
            "topics": [{"name": topic, "partitions": 2, "keyed": False}]}
    create_topics(tansu.bootstrap, {topic: 2})
    out = tmp_path / "s.json"
    summary = workload.produce(spec, "p0", "use1-az1", {"use1-az1": tansu.bootstrap}, 500, out)
    assert json.loads(out.read_text()) == summary
    return summary


def test_clean_log_verifies(tansu, tmp_path):
    topic = unique_name("wl")
    summary = _produce_small(tansu, tmp_path, topic)
    # 10 records round-robin over 2 partitions: seqs 0,2,4,6,8 and 1,3,5,7,9.
    assert {tp: (e["count"], e["first_seq"], e["last_seq"]) for tp, e in summary["partitions"].items()} == {
        f"{topic}:0": (5, 0, 8), f"{topic}:1": (5, 1, 9)}
    result = workload.verify(tansu.bootstrap, [summary], timeout_s=60)
    assert result == {"ok": True, "records": 10, "expected_records": 10, "partitions": 2, "problems": []}


def test_duplicate_and_foreign_records_are_reported(tansu, tmp_path):
    from kafka import KafkaProducer

    topic = unique_name("wl")
    summary = _produce_small(tansu, tmp_path, topic)
    plain = KafkaProducer(bootstrap_servers=tansu.bootstrap, acks="all")
    try:
        plain.send(topic, workload.value_of("p0", 8, 50), partition=0).get(timeout=10)  # seq 8 again
        plain.send(topic, workload.value_of("stranger", 0, 50), partition=1).get(timeout=10)
    finally:
        plain.close()
    result = workload.verify(tansu.bootstrap, [summary], timeout_s=60)
    assert not result["ok"]
    assert result["records"] == 12
    assert f"{topic}:0@5: duplicate: p0 seq 8 after 8" in result["problems"]
    assert f"{topic}:1 stranger: records from a producer no summary mentions" in result["problems"]


def test_missing_records_are_reported(tansu, tmp_path):
    topic = unique_name("wl")
    summary = _produce_small(tansu, tmp_path, topic)
    # Claim one more record on partition 1 than was written.
    entry = summary["partitions"][f"{topic}:1"]
    entry["count"] += 1
    result = workload.verify(tansu.bootstrap, [summary], timeout_s=60, idle_timeout_s=3)
    assert not result["ok"]
    assert any("log ends before the expected records" in p for p in result["problems"])
    assert f"{topic}:1 p0: 5 records (expected 6), digest matches" in result["problems"]
