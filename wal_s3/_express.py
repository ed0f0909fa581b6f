"""S3 Express One Zone session credentials for the event-loop transport (wal_s3/_s3_http.py).

A directory bucket takes object requests signed (SigV4, service `s3express`) with temporary
credentials that CreateSession (`GET <bucket URL>?session`, signed with the process's own
credentials) hands out for five minutes, sent with their token in `x-amz-s3session-token`.
This module holds the parts without I/O: the session, parsing CreateSession's answer, and
when to refresh. A session is refreshed REFRESH_MARGIN_S before it expires, so a request
signed with it never reaches S3 after it ran out; an answer saying the token expired or is
unknown drops it (SESSION_ERROR_CODES), so the caller's retry creates a new one.
"""

from __future__ import annotations

import datetime
import xml.etree.ElementTree as ET
from dataclasses import dataclass

TOKEN_HEADER = "x-amz-s3session-token"
SESSION_QUERY = "session="  # CreateSession's canonical query string (`?session`)
SERVICE = "s3express"
REFRESH_MARGIN_S = 60.0  # sessions last 300 s: renew in the last minute, before any request could outlive one
SESSION_ERROR_CODES = frozenset({"ExpiredToken", "InvalidToken"})
_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


@dataclass(frozen=True)
class ExpressSession:
    access_key: str
    secret_key: str
    token: str
    expires_at: float  # seconds since the epoch

    def __repr__(self) -> str:  # the secret and the token stay out of logs
        return f"ExpressSession(access_key={self.access_key!r}, expires_at={self.expires_at})"


class SessionParseError(ValueError):
    """CreateSession answered 2xx with a body that is not a session."""


def parse_create_session(body: bytes) -> ExpressSession:
    """The session in a CreateSessionResult document; raises SessionParseError."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        raise SessionParseError(f"CreateSession answer is not XML: {exc}") from exc

    def text(name: str) -> str:
        for path in (f"{_NS}Credentials/{_NS}{name}", f"Credentials/{name}"):
            value = root.findtext(path)
            if value:
                return value
        raise SessionParseError(f"CreateSession answer lacks Credentials/{name}")

    expiration = text("Expiration")
    try:
        expires = datetime.datetime.fromisoformat(expiration.replace("Z", "+00:00"))
    except ValueError as exc:
        raise SessionParseError(f"CreateSession Expiration {expiration!r}: {exc}") from exc
    if expires.tzinfo is None:
        expires = expires.replace(tzinfo=datetime.UTC)
    return ExpressSession(text("AccessKeyId"), text("SecretAccessKey"), text("SessionToken"), expires.timestamp())


def needs_refresh(session: ExpressSession | None, now: float, margin_s: float = REFRESH_MARGIN_S) -> bool:
    """True when there is no session or it expires within `margin_s` of `now`."""
    return session is None or now >= session.expires_at - margin_s


def session_target(bucket_path: str) -> str:
    """CreateSession's path from the bucket URL's path: `/bucket/` -> `/bucket` (path style), `/` stays."""
    stripped = bucket_path.rstrip("/")
    return stripped or "/"
