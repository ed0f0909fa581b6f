"""The error a failed upstream connect ends with names every address once, with its reason
(a SASL refusal carries its address already, a socket or TLS failure does not). No sockets:
one address's connect is replaced by the failures it can end with; the real ones are in
tests/integration/kafka/test_upstream_security_on_kafka.py."""

from __future__ import annotations

import pytest

from kafka_upstream.config import UpstreamConfig
from kafka_upstream.errors import UpstreamError
from kafka_upstream.upstream import UpstreamCluster, open_upstream

SASL = "SASL SCRAM-SHA-512 authentication as 'alice' failed (error 58): Authentication failed"
TLS = "connect failed: SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed')"


@pytest.mark.trio
async def test_each_address_is_named_once_with_its_reason(monkeypatch):
    async def connect_to(self, node_id: int, host: str, port: int):
        if port == 9096:
            raise UpstreamError(f"{host}:{port}: {SASL}")  # as _authenticate words it
        raise UpstreamError(TLS)  # as a failed TCP or TLS connect is worded

    monkeypatch.setattr(UpstreamCluster, "_connect_to", connect_to)
    config = UpstreamConfig(bootstrap_servers=("b-1:9096", "b-2:9094"))
    async with open_upstream(config) as cluster:
        with pytest.raises(UpstreamError) as info:
            await cluster.connection()
    assert str(info.value) == f"cannot connect to upstream node -1: b-1:9096: {SASL}; b-2:9094: {TLS}"
