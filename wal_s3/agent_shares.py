"""Names of a zone's shares when several agents serve the zone (issue 17).

A zone with one agent has one share, named like the zone. A zone with n > 1 agents has up
to n shares, `<zone>.<i>of<n>` (i = 1..n, the agent's place in `notify.agents`), each laid
out contiguously in the zone's range of a WAL object. The writer lists the share names
present in an object in its `zones` metadata; each agent checkpoints its share under the
name the notification gave it, and GC deletes an object once every listed name has a
checkpoint. Pure functions, no I/O.
"""

from __future__ import annotations

import re

_SHARE_RE = re.compile(r"^(?P<zone>.+)\.(?P<index>[1-9]\d*)of(?P<count>[1-9]\d*)$")


def share_name(zone: str, index: int, count: int) -> str:
    """The share of agent `index` (0-based) of `count` agents of `zone`. Raises ValueError."""
    if not 0 <= index < count:
        raise ValueError(f"agent index {index} outside 0..{count - 1}")
    return zone if count == 1 else f"{zone}.{index + 1}of{count}"


def zone_of_share(name: str) -> str:
    """The zone a share name belongs to (the name itself for a one-agent zone)."""
    m = _SHARE_RE.match(name)
    if m and int(m["index"]) <= int(m["count"]):
        return m["zone"]
    return name
