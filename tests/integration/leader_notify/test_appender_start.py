"""A failed start says why each broker could not be used (aiokafka's bootstrap only says
"Unable to bootstrap"). No sockets: aiokafka's bootstrap and connect are replaced by the
failures a wrong CA, a wrong SASL password and a silent address give; the real ones are
in tests/integration/kafka/test_upstream_security_on_kafka.py."""

from __future__ import annotations

import asyncio
import ssl

import pytest
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaConnectionError, SaslAuthenticationFailed

from leader_notify.agent import appender as appender_module
from leader_notify.agent.appender import KafkaAppender
from leader_notify.agent.errors import KafkaAppendUnavailable

PASSWORD = "never-Shown-77"


def test_failed_start_names_each_addresses_refusal(monkeypatch):
    async def bootstrap(self) -> None:
        raise KafkaConnectionError("Unable to bootstrap from [...]")

    async def create_conn(host, port, **kwargs):
        assert kwargs["sasl_plain_password"] == PASSWORD  # connects as the appender's client would
        if port == 9096:
            raise SaslAuthenticationFailed("Authentication failed during authentication due to invalid credentials "
                                           "with SASL mechanism SCRAM-SHA-512")
        if port == 9097:
            raise ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
        await asyncio.sleep(3600)  # accepts and never answers

    monkeypatch.setattr(AIOKafkaClient, "bootstrap", bootstrap)
    monkeypatch.setattr(appender_module, "create_conn", create_conn)
    monkeypatch.setattr(appender_module, "PROBE_TIMEOUT_S", 0.05)
    security = {"security_protocol": "SASL_SSL", "ssl_context": ssl.create_default_context(), "sasl_mechanism": "SCRAM-SHA-512",
                "sasl_plain_username": "alice", "sasl_plain_password": PASSWORD}
    appender = KafkaAppender(["b1:9096", "b2:9097", "b3:9098"], security=security)

    with pytest.raises(KafkaAppendUnavailable) as info:
        asyncio.run(appender.start())
    message = str(info.value)
    assert "b1:9096: [Error 58] SaslAuthenticationFailed: Authentication failed" in message
    assert "b2:9097: [SSL: CERTIFICATE_VERIFY_FAILED]" in message
    assert "b3:9098: no answer within 0.05 s" in message
    assert PASSWORD not in message


def test_an_address_that_answers_when_asked_again_is_left_out(monkeypatch):
    class Conn:
        closed = False

        def close(self) -> None:
            self.closed = True

    opened: list[Conn] = []

    async def bootstrap(self) -> None:
        raise KafkaConnectionError("Unable to bootstrap from [('b1', 9092, 2)]")

    async def create_conn(host, port, **kwargs):
        opened.append(Conn())
        return opened[-1]

    monkeypatch.setattr(AIOKafkaClient, "bootstrap", bootstrap)
    monkeypatch.setattr(appender_module, "create_conn", create_conn)
    with pytest.raises(KafkaAppendUnavailable, match=r"could be used: KafkaConnectionError: Unable to bootstrap"):
        asyncio.run(KafkaAppender(["b1:9092"]).start())
    assert [c.closed for c in opened] == [True]
