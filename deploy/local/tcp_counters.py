"""A zone's TCP drop and retransmission counters (`/proc/net/netstat`, TcpExt), read in its namespace.

Why: the metered demo's frame tally can say that a segment was sent twice without a D-SACK,
not why. The kernel's counters in the zones can: a receiver that dropped a segment
(TCPRcvQDrop, TCPBacklogDrop, TCPOFODrop, TCPZeroWindowDrop, pruning), a retransmission
timeout (TCPTimeouts), a tail-loss probe (TCPLossProbes), D-SACKs sent and received. The
meter reads them at the start and the end of an interval (deploy/local/zones.py) and keeps
the differences beside the bytes.

`parse_tcp_ext` is sans-IO; `read_tcp_ext` runs `cat` in the namespace (root only).
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping

# The counters kept: drops at the receiver, the sender's retransmission kinds, D-SACKs.
WATCHED = ("TCPRcvQDrop", "TCPBacklogDrop", "TCPOFODrop", "TCPZeroWindowDrop", "PruneCalled", "RcvPruned",
           "OfoPruned", "TCPTimeouts", "TCPLossProbes", "TCPFastRetrans", "TCPSpuriousRTOs",
           "TCPDSACKOldSent", "TCPDSACKOfoSent", "TCPDSACKRecv")
READ_TIMEOUT_S = 10.0


def parse_tcp_ext(netstat: str) -> dict[str, int]:
    """The WATCHED counters of a /proc/net/netstat text (pairs of lines: "TcpExt: names",
    "TcpExt: values"); a counter the kernel does not have is left out. Raises ValueError when
    the TcpExt lines are missing or do not pair up."""
    rows = [line.split() for line in netstat.splitlines() if line.startswith("TcpExt:")]
    if len(rows) != 2 or len(rows[0]) != len(rows[1]):
        raise ValueError(f"no TcpExt header and value lines in /proc/net/netstat ({len(rows)} TcpExt lines)")
    values = dict(zip(rows[0][1:], rows[1][1:], strict=True))
    return {name: int(values[name]) for name in WATCHED if name in values}


def read_tcp_ext(netns: str) -> dict[str, int]:
    """The WATCHED counters of the namespace `netns`; {} when they cannot be read (a diagnostic
    must not fail the measurement it sits beside)."""
    try:
        out = subprocess.run(["ip", "netns", "exec", netns, "cat", "/proc/net/netstat"], capture_output=True,
                             text=True, timeout=READ_TIMEOUT_S, check=True).stdout
        return parse_tcp_ext(out)
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}


def difference(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """after - before for the counters both have, the zero ones left out."""
    return {name: after[name] - before[name] for name in after if name in before and after[name] != before[name]}
