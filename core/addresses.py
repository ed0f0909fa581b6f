"""Whether a host or peer address is loopback: for listeners (who can reach them) and for
connection limits (loopback peers are exempt from per-source limits). Pure."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """True for 'localhost' and loopback addresses: 127.0.0.0/8, ::1, IPv4-mapped ::ffff:127.x
    (a zone suffix such as '%lo' is ignored). False for names and for anything else."""
    if host == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool((mapped or ip).is_loopback)
