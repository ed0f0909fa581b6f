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


def test_a_sasl_login_seen_only_as_closed_connections_gets_what_to_check():
    from azsidecar.run_plan_leaders import sasl_hint
    from kafka_upstream.config import UpstreamConfig

    sasl = UpstreamConfig(bootstrap_servers=("b:9096",), security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                          sasl_username="sidecar")
    disconnect = "<KafkaSSLTransport [127.0.0.1:9096<-40000]>: socket disconnected"
    assert sasl_hint(sasl, disconnect) == (
        "; the brokers may have refused the SASL login and closed the connection: check "
        "upstream.sasl_mechanism (SCRAM-SHA-512), upstream.sasl_username and the password")
    # The client named the refusal: nothing to add. No SASL: a close says nothing about a login.
    assert sasl_hint(sasl, "SaslAuthenticationFailedError: Authentication failed") == ""
    assert sasl_hint(UpstreamConfig(bootstrap_servers=("b:9092",)), disconnect) == ""
