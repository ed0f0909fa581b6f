"""MSK IAM through the real commands: `azsidecar proxy` and `azsidecar agent` processes with
`upstream.sasl_mechanism = "OAUTHBEARER"`, their AWS credentials from the environment (as
an ECS task's role reaches botocore), against the TLS broker double, which verifies every
token with botocore's signer for those credentials. A kafka-python producer writes through
the proxy; the records must reach the double, and each batch only once.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time

import pytest
from kafka import KafkaProducer

from deploy.local.processes import DUMMY_CREDENTIALS, STARTUP_TIMEOUT_S
from tests.integration.security.conftest import secured_proxy
from tests.integration.security.msk_iam_double import (
    TOPIC,
    FixedCredentials,
    double_in_a_thread,
    server_ssl,
    token_is_valid,
)

pytestmark = pytest.mark.integration

REGION = "eu-west-1"
KEY = "0123456789abcdef-notify-key"
START_TIMEOUT_S = STARTUP_TIMEOUT_S
DELIVERY_TIMEOUT_S = 20.0
ENV_CREDENTIALS = FixedCredentials(DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"], DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                                   token=None)


@pytest.fixture
def aws_env(monkeypatch):
    """Credentials only from the environment: no profile, no instance metadata (never contacted)."""
    for name in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    for name, value in DUMMY_CREDENTIALS.items():
        monkeypatch.setenv(name, value)


def iam_settings(port: int, ca_file) -> dict[str, object]:
    return {"bootstrap_servers": [f"127.0.0.1:{port}"], "security_protocol": "SASL_SSL", "tls_ca_file": str(ca_file),
            "sasl_mechanism": "OAUTHBEARER", "aws_msk_iam_region": REGION}


def test_proxy_process_produces_to_an_msk_iam_cluster(certs, tmp_path, aws_env):
    with double_in_a_thread(server_ssl(certs), ENV_CREDENTIALS, session_lifetime_ms=0) as double:
        upstream = iam_settings(double.port, certs.ca_file)
        with secured_proxy(f"127.0.0.1:{double.port}", tmp_path, "iam", {}, upstream, log_level="DEBUG") as proxy:
            producer = KafkaProducer(bootstrap_servers=proxy.bootstrap, acks=1, enable_idempotence=False,
                                     linger_ms=0)
            try:
                for value in (b"iam-1", b"iam-2"):
                    producer.send(TOPIC, value=value, partition=0).get(timeout=DELIVERY_TIMEOUT_S)
            finally:
                producer.close(timeout=10)
            log = proxy.log_text()
    assert double.tokens and all(token_is_valid(t, ENV_CREDENTIALS.credentials, REGION) for t in double.tokens)
    assert [e for c in double.connections for e in c.events if e[0] == "SaslAuthenticate"]
    assert len(double.appended) == 2
    assert b"iam-1" in double.appended[0] and b"iam-2" in double.appended[1]
    assert not any(t in log for t in double.tokens)  # the bearer token is never logged, even at DEBUG


def _wait_for_line(proc: subprocess.Popen, prefix: str, timeout_s: float) -> str:
    """The first stdout line starting with `prefix`, or "" if the process ends or the time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith(prefix):
            return line
    return ""


def test_agent_process_authenticates_to_an_msk_iam_cluster(certs, tmp_path, aws_env, s3_bucket):
    server, bucket = s3_bucket
    with double_in_a_thread(server_ssl(certs), ENV_CREDENTIALS, session_lifetime_ms=0) as double:
        upstream = iam_settings(double.port, certs.ca_file)
        lines = ['zone = "use1-az1"', "[upstream]"]
        lines += [f"{k} = {json.dumps(v)}" for k, v in upstream.items()]  # JSON strings and lists are TOML
        lines += ["[wal]", f'bucket = "{bucket}"', 'region = "us-east-1"', 'prefix = "wal/"', f'endpoint_url = "{server.endpoint_url}"',
                  "[audit]", "enabled = false"]
        config = tmp_path / "agent.toml"
        config.write_text("\n".join(lines) + "\n")
        env = {**os.environ, "AZSIDECAR_NOTIFY_HMAC_KEYS": KEY}
        proc = subprocess.Popen([sys.executable, "-m", "azsidecar", "agent", "--config", str(config),
                                 "--listen", "127.0.0.1:0"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            line = _wait_for_line(proc, "agent zone=use1-az1 ", START_TIMEOUT_S)
        finally:
            proc.terminate()
            try:
                _, stderr = proc.communicate(timeout=START_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, stderr = proc.communicate(timeout=START_TIMEOUT_S)
    assert line.startswith("agent zone=use1-az1 event_loop=uvloop listening=127.0.0.1:"), stderr[-2000:]
    assert double.tokens and all(token_is_valid(t, ENV_CREDENTIALS.credentials, REGION) for t in double.tokens)
    # The first connection is the start-up wait's (azsidecar/broker_wait.py: on a TLS listener
    # a connection only, closed unspoken); the agent's own login comes on the next.
    assert double.connections[0].events == [], double.connections[0].events
    first = double.connections[1].events
    assert first[1:3] == [("SaslHandshake", "OAUTHBEARER"), ("SaslAuthenticate", "v1 ok")], first
    assert any(name == "Metadata" for name, _ in first[3:]), first  # served only after the login
    assert not any(t in stderr for t in double.tokens)
