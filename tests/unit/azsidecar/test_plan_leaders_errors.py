"""The one line `azsidecar plan leaders` prints when it cannot reach the cluster names the cause."""

from __future__ import annotations

import logging

from azsidecar.run_plan_leaders import _ClientErrors


def record(message: str) -> logging.LogRecord:
    return logging.LogRecord("kafka.net.connection", logging.ERROR, __file__, 1, message, None, None)


def test_a_refused_login_after_twenty_disconnects_is_still_the_cause():
    errors = _ClientErrors()
    for port in range(40000, 40030):
        errors.emit(record(f"<KafkaSSLTransport [127.0.0.1:9093<-{port}]>: socket disconnected"))
    errors.emit(record("SaslAuthenticationFailedError: Authentication failed during authentication due to "
                       "invalid credentials with SASL mechanism SCRAM-SHA-512"))
    errors.emit(record("SaslAuthenticationFailedError: a second refusal"))
    assert len(errors.messages) == 21
    assert errors.cause("KafkaTimeoutError: Unable to bootstrap") == (
        "SaslAuthenticationFailedError: Authentication failed during authentication due to "
        "invalid credentials with SASL mechanism SCRAM-SHA-512")


def test_without_a_refused_login_the_first_line_that_adds_something_is_the_cause():
    errors = _ClientErrors()
    errors.emit(record("Bootstrap failed: no broker answered"))
    errors.emit(record("Connect to 127.0.0.1:9092 failed: Connection refused"))
    assert errors.cause("KafkaTimeoutError: Unable to bootstrap") == "Connect to 127.0.0.1:9092 failed: Connection refused"
