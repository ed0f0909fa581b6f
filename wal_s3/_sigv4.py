"""AWS Signature Version 4 for the WAL's S3 PUTs and ranged GETs (UNSIGNED-PAYLOAD), and
S3 Express One Zone's CreateSession (service `s3express`, one query parameter).

Why not botocore's S3SigV4Auth (which this replaced, and against which
tests/unit/wal_s3/test_sigv4.py checks it byte for byte): botocore builds an AWSRequest,
an HTTPHeaders message and the signing key (four HMACs) for every request, ~90 µs on the
2-core sandbox, on the event loop in the latency path of every WAL record. This does the
same computation for the one shape of request the WAL sends (no query string, payload
not hashed, the path already percent-encoded as S3 wants it) and keeps the day's signing
key.

Headers the caller passes are signed in full (botocore's list of never-signed headers,
such as User-Agent, is not expected here: add those after signing).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping

UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
ALGORITHM = "AWS4-HMAC-SHA256"
_RESERVED = frozenset({"authorization", "x-amz-date", "date", "x-amz-security-token", "x-amz-content-sha256"})


class SigV4Signer:
    """Signs requests for one region and service with whatever credentials each call passes."""

    def __init__(self, region: str, service: str = "s3") -> None:
        self._region = region
        self._service = service
        self._key_cache: tuple[str, str, bytes] | None = None  # (secret, yyyymmdd, signing key)

    def sign(self, method: str, path: str, headers: Mapping[str, str], *, access_key: str, secret_key: str,
             token: str | None = None, timestamp: str | None = None, query: str = "") -> list[tuple[str, str]]:
        """The headers to send: `headers` (which must include Host), then X-Amz-Date,
        X-Amz-Security-Token (with a session token), X-Amz-Content-SHA256 and Authorization,
        in botocore's order. `path` is the request target as sent (percent-encoded), without
        its query; `query` the canonical query string (S3 Express CreateSession: "session=").
        `timestamp` (YYYYMMDDTHHMMSSZ) defaults to now."""
        if timestamp is None:
            timestamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        out = list(headers.items())
        if any(name.lower() in _RESERVED for name, _ in out):
            raise ValueError(f"headers set by signing were passed in: {[n for n, _ in out]}")
        out.append(("X-Amz-Date", timestamp))
        if token:
            out.append(("X-Amz-Security-Token", token))
        out.append(("X-Amz-Content-SHA256", UNSIGNED_PAYLOAD))
        canonical = sorted((name.lower(), " ".join(value.split())) for name, value in out)
        signed_headers = ";".join(name for name, _ in canonical)
        canonical_request = "\n".join((
            method, path, query,
            "".join(f"{name}:{value}\n" for name, value in canonical),
            signed_headers, UNSIGNED_PAYLOAD))
        day = timestamp[:8]
        scope = f"{day}/{self._region}/{self._service}/aws4_request"
        string_to_sign = "\n".join((ALGORITHM, timestamp, scope,
                                    hashlib.sha256(canonical_request.encode("utf-8")).hexdigest()))
        signature = hmac.new(self._signing_key(secret_key, day), string_to_sign.encode("utf-8"),
                             hashlib.sha256).hexdigest()
        out.append(("Authorization", f"{ALGORITHM} Credential={access_key}/{scope}, "
                                     f"SignedHeaders={signed_headers}, Signature={signature}"))
        return out

    def _signing_key(self, secret_key: str, day: str) -> bytes:
        cached = self._key_cache
        if cached is not None and cached[0] == secret_key and cached[1] == day:
            return cached[2]
        key = hmac.new(f"AWS4{secret_key}".encode(), day.encode(), hashlib.sha256).digest()
        for part in (self._region, self._service, "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        self._key_cache = (secret_key, day, key)
        return key
