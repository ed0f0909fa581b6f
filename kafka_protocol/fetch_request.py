"""A client's Fetch request body decoded with the library's schema, or None (pure).

The proxy's codec cuts a request after its client id, so for flexible versions the body
still starts with the request header's tagged fields; only an empty tagged-field section
(one 0 byte) is accepted, as every client sends it. Anything that does not decode is None:
the callers then forward or close, never raise.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer.fetch import FetchRequest


def decode_fetch_request(body: bytes, api_version: int) -> Any | None:
    """The decoded FetchRequest of `body` at `api_version`, or None."""
    if FetchRequest.flexible_version_q(api_version):
        if not body or body[0] != 0:
            return None
        body = body[1:]
    try:
        return FetchRequest.decode(body, version=api_version)
    except Exception:  # noqa: BLE001 - the library raises a variety of errors on bad bytes
        return None
