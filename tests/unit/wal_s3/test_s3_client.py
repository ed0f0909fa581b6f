"""make_s3_client: clients of one process share a boto3 session per AWS_* environment."""

from __future__ import annotations

from wal_s3 import s3
from wal_s3.config import WalConfig


def _access_key(client) -> str:
    return client._request_signer._credentials.access_key  # botocore's signer: what requests are signed with


def test_clients_share_a_session_until_the_aws_environment_changes(monkeypatch):
    monkeypatch.setattr(s3, "_SESSIONS", {})
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDFIRST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-one")
    config = WalConfig(bucket="wal", region="us-east-1")
    first, second = s3.make_s3_client(config), s3.make_s3_client(config)
    assert len(s3._SESSIONS) == 1
    assert _access_key(first) == _access_key(second) == "AKIDFIRST"
    # Other credentials in the environment (a test, a rotated secret): a session of their own.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDSECOND")
    third = s3.make_s3_client(config)
    assert len(s3._SESSIONS) == 2
    assert _access_key(third) == "AKIDSECOND"
    assert _access_key(first) == "AKIDFIRST"
