"""A produce-only sidecar (pass-through off, as on a zone gateway) and the consumers
pointed at it: a clear error at once, no reconnect loop (issue 21)."""

from __future__ import annotations

import time

import confluent_kafka
import pytest
from kafka import KafkaConsumer
from kafka.errors import IncompatibleBrokerVersion

from tests.conftest import create_topics, unique_name
from tests.integration.proxy.conftest import start_proxy

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

ERROR_WITHIN_S = 15.0


def produce_only(tmp_path):
    config = tmp_path / "proxy.toml"
    config.write_text(f'[proxy]\nbroker_listeners = false\n[audit]\noutput = "{tmp_path / "audit"}"\n')
    return config


def test_an_assigning_confluent_consumer_gets_an_error_not_a_reconnect_loop(tansu, tmp_path):
    topic = unique_name("po")
    create_topics(tansu.bootstrap, {topic: 1})
    with start_proxy(tansu.bootstrap, tmp_path, config_file=produce_only(tmp_path)) as proxy:
        consumer = confluent_kafka.Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": "po"})
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])  # an offset: no ListOffsets, straight to Fetch
        error = None
        deadline = time.monotonic() + ERROR_WITHIN_S
        try:
            while error is None and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is not None and msg.error():
                    error = msg.error()
        finally:
            consumer.close()
        log = proxy.log_text()
    assert error is not None and error.code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED, error
    assert log.count("answered a Fetch with TOPIC_AUTHORIZATION_FAILED") == 1  # once per client id
    assert "closing connection" not in log


def test_a_kafka_python_group_consumer_raises_at_once(tansu, tmp_path):
    topic = unique_name("po")
    create_topics(tansu.bootstrap, {topic: 1})
    with start_proxy(tansu.bootstrap, tmp_path, config_file=produce_only(tmp_path)) as proxy:
        started = time.monotonic()
        with pytest.raises(IncompatibleBrokerVersion, match="JoinGroup"):
            consumer = KafkaConsumer(topic, bootstrap_servers=proxy.bootstrap, group_id="po-g",
                                     consumer_timeout_ms=int(ERROR_WITHIN_S * 1000))
            try:
                for _ in consumer:
                    pass
            finally:
                consumer.close()
        assert time.monotonic() - started < ERROR_WITHIN_S
        assert "closing connection" not in proxy.log_text()
