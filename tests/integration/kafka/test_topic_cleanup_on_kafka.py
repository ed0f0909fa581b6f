"""The shared cluster sheds a test's topics (deploy/local/kafka_admin.delete_topics): the
internal topics and the ones asked to be kept stay."""

from __future__ import annotations

import pytest

from tests.conftest import unique_name

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def _topics(cluster, delete: list[str] | None = None) -> list[str]:
    from kafka.admin import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        if delete:
            client.delete_topics(delete)
        return client.list_topics()
    finally:
        client.close()


def test_delete_topics_keeps_the_internal_ones_and_those_named(kafka):
    kept, gone_a, gone_b = unique_name("kept"), unique_name("gone"), unique_name("gone")
    for topic in (kept, gone_a, gone_b):
        kafka.create_topic(topic, 2)
    kafka.create_topic("__azsidecar_internal_like", 1)
    deleted = set(kafka.delete_topics(keep=[kept]))
    assert {gone_a, gone_b} <= deleted and kept not in deleted and "__azsidecar_internal_like" not in deleted
    remaining = set(_topics(kafka))
    assert kept in remaining and "__azsidecar_internal_like" in remaining
    assert not {gone_a, gone_b} & remaining
    _topics(kafka, delete=["__azsidecar_internal_like"])  # not left in the group's cluster
