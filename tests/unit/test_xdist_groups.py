"""Which pytest-xdist group a test file runs in under `make test` (tests/conftest.py)."""

from __future__ import annotations

import os

import pytest

from tests.conftest import xdist_group_of


@pytest.mark.parametrize(("relative", "version", "beside", "own", "expected"), [
    ("system/e2e/test_three_zones_loopback.py", None, False, False, "system"),
    ("system/e2e/test_follower_fetch_netns.py", None, True, False, "system/e2e/test_follower_fetch_netns.py"),
    ("integration/kafka/test_wal_on_kafka.py", None, False, False, "kafka-default"),
    ("integration/kafka/test_kafka_3.py", "3.9.1", False, False, "kafka-3.9.1"),
    ("integration/spark_audit/test_jobs.py", None, False, False, "spark"),
    ("integration/spark_audit/test_session_after_timeout.py", None, False, True,
     "integration/spark_audit/test_session_after_timeout.py"),
    ("integration/proxy/test_wire.py", None, False, False, "integration/proxy/test_wire.py"),
    ("integration/test_moto_atomic.py", None, False, False, "integration/test_moto_atomic.py"),
])
def test_group_of_a_test_file(relative, version, beside, own, expected):
    assert xdist_group_of(relative.replace("/", os.sep), version, beside, own) == expected
