"""Fixtures for wal_s3 tests: a WalConfig on a fresh moto bucket, boto3 clients, S3 fault hooks.

Faults are injected with botocore event hooks on the client under test: `before-send`
can answer instead of the server (500, 503 SlowDown) or raise what urllib3/botocore raise
on a reset or a timeout; `after-call` can lose the response of a request that did reach
S3 (the ambiguous case a conditional PUT must survive).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ConnectionClosedError, ReadTimeoutError

from deploy.local.processes import DUMMY_CREDENTIALS
from wal_s3.config import WalConfig
from wal_s3.s3 import make_s3_client


@pytest.fixture
def wal_env(s3_bucket, monkeypatch):
    """(config factory, client factory) for a fresh bucket; credentials via boto3's env chain."""
    server, bucket = s3_bucket
    for k, v in DUMMY_CREDENTIALS.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_PROFILE", raising=False)

    def config(**overrides) -> WalConfig:
        # boto3 by default: Faults hooks into botocore. The h11 transport has its own tests
        # (test_s3_http.py) and meets real-socket faults in test_fault_proxy.py.
        base = {"bucket": bucket, "region": "us-east-1", "endpoint_url": server.endpoint_url, "retry_base_ms": 1, "retry_max_ms": 5,
                "s3_transport": "boto3"}
        base.update(overrides)
        return WalConfig(**base)

    return config, make_s3_client


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_kwargs):
        yield self._body


def error_response(status: int, code: str) -> AWSResponse:
    body = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
            f"<Message>injected {code}</Message></Error>").encode()
    return AWSResponse("http://injected", status, {"Content-Type": "application/xml"}, _Raw(body))


def fault(kind: str, url: str = "http://injected"):
    """A before-send result (or exception) for a fault kind."""
    if kind == "500":
        return error_response(500, "InternalError")
    if kind == "503":
        return error_response(503, "SlowDown")
    if kind == "reset":
        return ConnectionClosedError(endpoint_url=url)
    if kind == "timeout":
        return ReadTimeoutError(endpoint_url=url)
    raise ValueError(kind)


class Faults:
    """Scripted faults for one operation: each request consumes the next kind (None = pass)."""

    def __init__(self, client, operation: str, script: list[str | None] | Callable[[int], str | None]) -> None:
        self.script = script
        self.requests = 0
        self.lock = threading.Condition()
        self.gate: threading.Event | None = None  # when set, requests wait for it (worker threads)
        client.meta.events.register(f"before-send.s3.{operation}", self._before_send)

    def wait_requests(self, n: int, timeout_s: float = 10.0) -> None:
        """Block (in a worker thread) until n requests reached the hook; raise on timeout."""
        with self.lock:
            if not self.lock.wait_for(lambda: self.requests >= n, timeout=timeout_s):
                raise TimeoutError(f"{self.requests} requests reached the hook, expected {n}")

    def _before_send(self, request, **_kwargs):
        with self.lock:
            n = self.requests
            self.requests += 1
            self.lock.notify_all()
        if self.gate is not None:
            self.gate.wait(timeout=30)
        kind = self.script(n) if callable(self.script) else (self.script[n] if n < len(self.script) else None)
        if kind is None:
            return None
        result = fault(kind, request.url)
        if isinstance(result, Exception):
            raise result
        return result
