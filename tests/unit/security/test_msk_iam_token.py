"""MSK IAM tokens (core/msk_iam.py) without network: fixed credentials, a frozen signing clock.

The token must be the presigned `kafka-cluster:Connect` request MSK verifies: every SigV4
field is checked by hand, and the signature is recomputed with botocore's signer.
"""

from __future__ import annotations

import dataclasses
import datetime

import botocore.auth
import pytest
from botocore.credentials import Credentials

from core.msk_iam import (
    MskIamError,
    MskIamTokens,
    Token,
    oauthbearer_initial_response,
    reauthenticate_after_ms,
    refresh_due,
)
from tests.integration.security.msk_iam_double import (
    ACCESS_KEY,
    REGION,
    SECRET_KEY,
    SESSION_TOKEN,
    FixedCredentials,
    expected_signature,
    token_fields,
    token_is_valid,
)

SIGNED_AT = datetime.datetime(2026, 11, 26, 1, 0, 0)  # botocore's clock is naive UTC
SIGNED_AT_MS = 1_795_654_800_000  # 2026-11-26T01:00:00Z


@pytest.fixture
def frozen_signing_clock(monkeypatch):
    """botocore's SigV4 clock, settable by the test (the signer reads it through botocore.auth)."""
    now = {"at": SIGNED_AT}
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: now["at"])
    return now


def test_token_is_the_presigned_connect_request_field_by_field(frozen_signing_clock):
    token = MskIamTokens(REGION, credentials=FixedCredentials()).token()
    base, fields = token_fields(token.value)
    assert "=" not in token.value[-2:]  # base64url without padding
    assert base == "https://kafka.eu-west-1.amazonaws.com/"
    assert fields["Action"] == "kafka-cluster:Connect"
    assert fields["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256"
    assert fields["X-Amz-Credential"] == "AKIDEXAMPLE/20261126/eu-west-1/kafka-cluster/aws4_request"
    assert fields["X-Amz-Date"] == "20261126T010000Z"
    assert fields["X-Amz-Expires"] == "900"
    assert fields["X-Amz-SignedHeaders"] == "host"
    assert fields["X-Amz-Security-Token"] == SESSION_TOKEN
    assert fields["User-Agent"].startswith("aws-msk-iam-sasl-signer-python/")
    assert len(fields["X-Amz-Signature"]) == 64 and int(fields["X-Amz-Signature"], 16) >= 0
    assert set(fields) == {"Action", "X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
                           "X-Amz-SignedHeaders", "X-Amz-Security-Token", "X-Amz-Signature", "User-Agent"}
    assert (token.issued_ms, token.expires_ms) == (SIGNED_AT_MS, SIGNED_AT_MS + 900_000)


def test_signature_verifies_with_botocores_signer_and_only_with_the_right_secret(frozen_signing_clock):
    token = MskIamTokens(REGION, credentials=FixedCredentials()).token().value
    _, fields = token_fields(token)
    right = Credentials(ACCESS_KEY, SECRET_KEY, SESSION_TOKEN)
    assert fields["X-Amz-Signature"] == expected_signature(token, right, REGION)
    assert token_is_valid(token, right, REGION)
    assert not token_is_valid(token, Credentials(ACCESS_KEY, SECRET_KEY + "x", SESSION_TOKEN), REGION)
    assert not token_is_valid(token, right, "us-east-1")  # the region is inside the signed scope


def test_token_is_reused_until_80_percent_of_its_life_then_signed_again(frozen_signing_clock):
    clock = {"ms": SIGNED_AT_MS}
    credentials = FixedCredentials()
    tokens = MskIamTokens(REGION, credentials=credentials, clock_ms=lambda: clock["ms"])
    first = tokens.token()
    clock["ms"] = SIGNED_AT_MS + 719_999  # 80% of 900 s is 720 s
    assert tokens.token() is first
    assert credentials.loads == 1
    clock["ms"] = SIGNED_AT_MS + 720_000
    frozen_signing_clock["at"] = SIGNED_AT + datetime.timedelta(seconds=720)
    second = tokens.token()
    assert second.value != first.value
    assert token_fields(second.value)[1]["X-Amz-Date"] == "20261126T011200Z"
    assert (second.issued_ms, second.expires_ms) == (SIGNED_AT_MS + 720_000, SIGNED_AT_MS + 1_620_000)
    assert credentials.loads == 2


@pytest.mark.parametrize(("token", "now_ms", "due"), [
    (None, 0, True),
    (Token("t", issued_ms=1_000, expires_ms=901_000), 1_000, False),
    (Token("t", issued_ms=1_000, expires_ms=901_000), 720_999, False),
    (Token("t", issued_ms=1_000, expires_ms=901_000), 721_000, True),
    (Token("t", issued_ms=1_000, expires_ms=901_000), 2_000_000, True),
])
def test_refresh_due(token, now_ms, due):
    assert refresh_due(token, now_ms) is due


@pytest.mark.parametrize(("session_lifetime_ms", "after_ms"), [
    (0, None),  # the broker has no connections.max.reauth.ms
    (-1, None),
    (900_000, 765_000),  # 85% of an MSK token's 15 minutes
    (3_600_000, 3_060_000),
    (1_000, 1_000),  # floor: never a tight loop
    (2_000, 1_700),
])
def test_reauthenticate_after(session_lifetime_ms, after_ms):
    assert reauthenticate_after_ms(session_lifetime_ms) == after_ms


def test_initial_response_is_the_rfc7628_gs2_message():
    assert oauthbearer_initial_response("abc") == b"n,,\x01auth=Bearer abc\x01\x01"


def test_token_repr_hides_the_bearer_value():
    token = Token("SECRET-bearer-value", issued_ms=1, expires_ms=2)
    assert "SECRET" not in repr(token) and "SECRET" not in str(token)
    assert "SECRET" not in repr(dataclasses.replace(token, issued_ms=5))


def test_no_credentials_is_a_clear_error(monkeypatch):
    class NoCredentials(FixedCredentials):
        def load(self):
            raise MskIamError("no AWS credentials for MSK IAM")

    with pytest.raises(MskIamError, match="no AWS credentials"):
        MskIamTokens(REGION, credentials=NoCredentials()).token()
    with pytest.raises(MskIamError, match="cannot sign an MSK IAM token for eu-west-1"):
        MskIamTokens(REGION, credentials=FixedCredentials(access_key="", secret_key="")).token()
