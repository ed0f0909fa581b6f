"""MSK IAM access control: SASL/OAUTHBEARER tokens, and when to refresh and re-authenticate.

An MSK IAM token is a SigV4-presigned `GET https://kafka.<region>.amazonaws.com/?Action=kafka-cluster:Connect`
(service `kafka-cluster`, valid for 900 s from signing), base64url-encoded without padding;
aws-msk-iam-sasl-signer-python makes it from botocore credentials. The client sends it as the
OAUTHBEARER initial response (RFC 7628 GS2 header `n,,\\x01auth=Bearer <token>\\x01\\x01`); the broker
answers with a session lifetime (KIP-368 `session_lifetime_ms`, bounded by the token's expiry and
the credentials') after which the connection must re-authenticate or be closed.

`MskIamTokens` caches one token and signs a new one once `REFRESH_FRACTION` of its lifetime has
passed, so every (re-)authentication sends a token that still has minutes to live. Signing is
blocking (the credential chain may ask the instance metadata service or STS): callers run
`token()` in a worker thread. The decisions (`refresh_due`, `reauthenticate_after_ms`) are pure.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import botocore.session
from aws_msk_iam_sasl_signer import MSKAuthTokenProvider
from botocore.credentials import CredentialProvider, Credentials
from botocore.exceptions import BotoCoreError, ClientError

from core.errors import SidecarError

TOKEN_LIFETIME_MS = MSKAuthTokenProvider.DEFAULT_TOKEN_EXPIRY_SECONDS * 1000  # X-Amz-Expires=900
REFRESH_FRACTION = 0.8  # sign anew after 80% of a token's life, as the Java and librdkafka refreshers do
REAUTH_FRACTION = 0.85  # KIP-368: clients re-authenticate at 85-95% of the session lifetime; we take the earliest
MIN_REAUTH_MS = 1_000  # never re-authenticate in a tight loop, whatever lifetime a broker announces
REGION_RE = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")  # us-east-1, eu-central-2, us-gov-west-1


class MskIamError(SidecarError):
    """No token could be made: no AWS credentials, or STS refused the role (environment, not config)."""


@dataclass(frozen=True)
class Token:
    value: str = ""  # base64url presigned URL; a bearer secret, kept out of reprs and logs
    issued_ms: int = 0
    expires_ms: int = 0

    def __repr__(self) -> str:
        return f"Token(issued_ms={self.issued_ms}, expires_ms={self.expires_ms})"


def refresh_due(token: Token | None, now_ms: int) -> bool:
    """True when `token` must be replaced before it is sent: none yet, or REFRESH_FRACTION of its life gone."""
    if token is None:
        return True
    lifetime_ms = token.expires_ms - token.issued_ms
    return now_ms >= token.issued_ms + int(lifetime_ms * REFRESH_FRACTION)


def reauthenticate_after_ms(session_lifetime_ms: int) -> int | None:
    """How long after authenticating a connection must re-authenticate (KIP-368); None = never.

    A lifetime of 0 means the broker set no limit (connections.max.reauth.ms unset).
    """
    if session_lifetime_ms <= 0:
        return None
    return max(MIN_REAUTH_MS, int(session_lifetime_ms * REAUTH_FRACTION))


def oauthbearer_initial_response(token: str) -> bytes:
    """The OAUTHBEARER client's first (and only) message, RFC 7628 section 3.1, no extensions."""
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


class _SessionCredentials(CredentialProvider):  # type: ignore[misc]  # botocore is untyped
    """botocore's default chain (environment, web identity, ECS task role, instance profile)."""

    METHOD = "azsidecar-default-chain"

    def __init__(self, session: botocore.session.Session) -> None:
        super().__init__()
        self._session = session

    def load(self) -> Credentials:
        credentials = self._session.get_credentials()
        if credentials is None:
            raise MskIamError("no AWS credentials for MSK IAM: give the task or instance a role "
                              "(or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)")
        return credentials


class MskIamTokens:
    """Signs and caches MSK IAM tokens for one region; thread-safe, blocking (call from a worker thread)."""

    def __init__(self, region: str, *, role_arn: str = "", credentials: CredentialProvider | None = None,
                 clock_ms: Callable[[], int] | None = None) -> None:
        """`credentials` defaults to botocore's chain; with `role_arn` the role is assumed at each signing."""
        self.region = region
        self._role_arn = role_arn
        self._credentials = credentials
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._lock = threading.Lock()
        self._token: Token | None = None

    def token(self) -> Token:
        """A token with most of its life left. Raises MskIamError when none can be signed."""
        with self._lock:
            token = self._token
            if token is None or refresh_due(token, self._clock_ms()):
                token = self._token = self._sign()
            return token

    def _sign(self) -> Token:
        try:
            if self._role_arn:
                value, expires_ms = MSKAuthTokenProvider.generate_auth_token_from_role_arn(self.region, self._role_arn)
            else:
                if self._credentials is None:
                    self._credentials = _SessionCredentials(botocore.session.Session())
                value, expires_ms = MSKAuthTokenProvider.generate_auth_token_from_credentials_provider(
                    self.region, self._credentials)
        except (BotoCoreError, ClientError, ValueError) as exc:  # ValueError: the signer's "credentials can not be empty"
            raise MskIamError(f"cannot sign an MSK IAM token for {self.region}: {exc}") from exc
        # The signer dates the token (X-Amz-Date, to the second) and gives its expiry; the life is fixed.
        return Token(value=value, issued_ms=int(expires_ms) - TOKEN_LIFETIME_MS, expires_ms=int(expires_ms))
