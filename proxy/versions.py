"""Which API versions the proxy serves, and the ApiVersions answers it gives.

The proxy advertises the intersection of what it implements and what the upstream
cluster supports, except Produce, which it advertises from version 0 because librdkafka
disables idempotence and other features when a broker's Produce range starts above 0;
Produce v0-v2 are rejected when they actually arrive (UNSUPPORTED_VERSION). Produce is
capped at 12 because v13 addresses topics by id only.
"""

from __future__ import annotations

from collections.abc import Mapping

from kafka.protocol.metadata import ApiVersionsResponse

from core.errors import NONE, UNSUPPORTED_VERSION
from kafka_protocol.kafka_codec import (
    API_API_VERSIONS,
    API_FIND_COORDINATOR,
    API_INIT_PRODUCER_ID,
    API_METADATA,
    API_PRODUCE,
    API_SASL_AUTHENTICATE,
    API_SASL_HANDSHAKE,
)
from kafka_upstream.coordinators import FORWARDED, HIGHEST_FIND_COORDINATOR_VERSION

# What this proxy implements: api_key -> (min, max).
IMPLEMENTED: dict[int, tuple[int, int]] = {
    API_PRODUCE: (0, 12),
    API_METADATA: (0, 12),
    API_API_VERSIONS: (0, 4),
    API_INIT_PRODUCER_ID: (0, 5),
    # Transactions (kafka_upstream/coordinators.py): FindCoordinator answered, the rest forwarded.
    API_FIND_COORDINATOR: (0, HIGHEST_FIND_COORDINATOR_VERSION),
    **{api_key: (0, highest) for api_key, highest in FORWARDED.items()},
}
# Served by the proxy itself: the upstream's range does not limit them.
SERVED_LOCALLY = frozenset({API_API_VERSIONS, API_METADATA})

API_FETCH = 1
# Advertised but not served. librdkafka enables message format v2 only if Fetch >= 4 is
# advertised and ZSTD only with Fetch >= 10 (LZ4 needs FindCoordinator, served above); a
# producer never sends Fetch. A client that does (a consumer pointed at the sidecar) is
# disconnected with a log line: consumers read from the cluster directly.
FEATURE_MARKERS: dict[int, tuple[int, int]] = {
    API_FETCH: (0, 12),
}


def negotiate(upstream: Mapping[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """The ranges to advertise given the upstream's ApiVersions ranges.

    APIs the upstream lacks (except those served locally) are left out.
    """
    out: dict[int, tuple[int, int]] = {}
    for api_key, (lo, hi) in IMPLEMENTED.items():
        if api_key in SERVED_LOCALLY:
            out[api_key] = (lo, hi)
            continue
        if api_key not in upstream:
            continue
        up_lo, up_hi = upstream[api_key]
        top = min(hi, up_hi)
        bottom = lo if api_key == API_PRODUCE else max(lo, up_lo)
        if bottom <= top:
            out[api_key] = (bottom, top)
    for api_key, (lo, hi) in FEATURE_MARKERS.items():
        if api_key in upstream:
            up_lo, up_hi = upstream[api_key]
            if max(lo, up_lo) <= min(hi, up_hi):
                out[api_key] = (max(lo, up_lo), min(hi, up_hi))
    return out


# Served by the proxy itself when its listener has SASL on. SaslHandshake v0 (raw tokens
# without Kafka framing) is not offered: clients that know ApiVersions use v1 and then
# SaslAuthenticate, as librdkafka, kafka-python, aiokafka and the Java client do.
SASL_VERSIONS: dict[int, tuple[int, int]] = {
    API_SASL_HANDSHAKE: (1, 1),
    API_SASL_AUTHENTICATE: (0, 2),
}


def with_sasl(advertised: Mapping[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """`advertised` plus the SASL APIs (for a listener that requires SASL)."""
    return {**advertised, **SASL_VERSIONS}


def api_versions_response(advertised: Mapping[int, tuple[int, int]], error_code: int = NONE) -> ApiVersionsResponse:
    keys = [
        ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
        for k, (lo, hi) in sorted(advertised.items())
    ]
    return ApiVersionsResponse(error_code=error_code, api_keys=keys, throttle_time_ms=0)


def unsupported_api_versions_response(advertised: Mapping[int, tuple[int, int]]) -> ApiVersionsResponse:
    """Sent as v0 when the client asks ApiVersions at a version we do not know (KIP-511)."""
    return api_versions_response(
        {API_API_VERSIONS: advertised[API_API_VERSIONS]}, error_code=UNSUPPORTED_VERSION)
