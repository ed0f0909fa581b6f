"""Which pytest-xdist group a test file runs in under `make test` (tests/conftest.py)."""

from __future__ import annotations

import os

import pytest

from tests.conftest import xdist_group_of


@pytest.mark.parametrize(("relative", "version", "beside", "expected"), [
    ("system/e2e/test_three_zones_loopback.py", None, False, "system"),
    ("system/e2e/test_follower_fetch_netns.py", None, True, "system/e2e/test_follower_fetch_netns.py"),
    ("integration/kafka/test_wal_on_kafka.py", None, False, "kafka-default"),
    ("integration/kafka/test_kafka_3.py", "3.9.1", False, "kafka-3.9.1"),
    ("integration/spark_audit/test_jobs.py", None, False, "spark"),
    ("integration/proxy/test_wire.py", None, False, "integration/proxy/test_wire.py"),
    ("integration/test_moto_atomic.py", None, False, "integration/test_moto_atomic.py"),
])
def test_group_of_a_test_file(relative, version, beside, expected):
    assert xdist_group_of(relative.replace("/", os.sep), version, beside) == expected
