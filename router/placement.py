"""Which zone this sidecar runs in: `--zone`, else EC2 instance metadata (IMDSv2).

The AZ *id* (use1-az1) is used, not the name (us-east-1a): names are shuffled per AWS
account, ids are the same physical zone everywhere, so proxies and agents of different
accounts agree.
"""

from __future__ import annotations

import urllib.error
import urllib.request

from core.errors import SidecarError

IMDS_ENDPOINT = "http://169.254.169.254"
IMDS_TIMEOUT_S = 1.0  # off EC2 nothing answers; do not hold up start-up for long
TOKEN_TTL_S = 60


class ZoneUnknown(SidecarError):
    """Neither configuration nor instance metadata says which zone this is."""

    retriable = False  # set `zone` in the configuration


def zone_from_imds(endpoint: str = IMDS_ENDPOINT, timeout_s: float = IMDS_TIMEOUT_S) -> str:
    """The AZ id from IMDSv2. Raises ZoneUnknown with the reason."""
    try:
        token_req = urllib.request.Request(f"{endpoint}/latest/api/token", method="PUT",
                                           headers={"X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL_S)})
        with urllib.request.urlopen(token_req, timeout=timeout_s) as r:
            token = r.read().decode()
        zone_req = urllib.request.Request(f"{endpoint}/latest/meta-data/placement/availability-zone-id",
                                          headers={"X-aws-ec2-metadata-token": token})
        with urllib.request.urlopen(zone_req, timeout=timeout_s) as r:
            zone: str = r.read().decode().strip()
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        raise ZoneUnknown(f"instance metadata at {endpoint} did not answer ({exc})") from exc
    if not zone:
        raise ZoneUnknown(f"instance metadata at {endpoint} returned an empty AZ id")
    return zone


def resolve_zone(configured: str | None, imds_endpoint: str = IMDS_ENDPOINT) -> str:
    """`configured` if set, else the IMDSv2 AZ id. Raises ZoneUnknown with advice."""
    if configured:
        return configured
    try:
        return zone_from_imds(imds_endpoint)
    except ZoneUnknown as exc:
        raise ZoneUnknown(f"cannot tell which availability zone this is: pass --zone (an AZ id such as "
                          f"use1-az1) or set `zone` in the config file; {exc}") from exc
