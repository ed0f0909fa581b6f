"""Names of a zone's shares when several agents serve the zone (issue 17).

A zone with one agent has one share, named like the zone. A zone with n > 1 agents has up
to n shares, `<zone>.<i>of<n>` (i = 1..n, the agent's place in `notify.agents`), each laid
out contiguously in the zone's range of a WAL object. The writer lists the share names
present in an object in its `zones` metadata; each agent checkpoints its share under the
name the notification gave it, and GC deletes an object once every listed name has a
checkpoint. Which agent owns an entry can depend on its partition's leader when the entry
was written (notify.agent_ownership = "leader"), so the layout is recorded, not recomputed:
in memory as the flushed object's share runs, and in S3 as the `share-entries` metadata
(each share's entry count, in `zones` order) that a restarted proxy's recovery reads.
Pure functions, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

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


def share_index(name: str) -> int:
    """The 0-based agent index a share name stands for (0 for a one-agent zone's share)."""
    m = _SHARE_RE.match(name)
    if m and int(m["index"]) <= int(m["count"]):
        return int(m["index"]) - 1
    return 0


def share_runs(names: Sequence[str], counts: Sequence[int]) -> tuple[tuple[int, int, int], ...]:
    """(agent index, first entry, end entry) of each share laid out back to back in a zone,
    from the shares' names and entry counts in layout order."""
    runs, first = [], 0
    for name, count in zip(names, counts, strict=True):
        runs.append((share_index(name), first, first + count))
        first += count
    return tuple(runs)


def encode_share_entries(counts: Sequence[int]) -> str:
    """The `share-entries` metadata of an object: entry counts of its shares, in the order
    of its `zones` metadata (set only when a zone has several agents)."""
    return ",".join(str(c) for c in counts)


def parse_share_entries(zones: str, share_entries: str) -> dict[str, tuple[tuple[int, int, int], ...]]:
    """zone -> runs (as share_runs) from an object's `zones` and `share-entries` metadata.
    Raises ValueError when they do not match."""
    names = [n for n in zones.split(",") if n]
    counts = [int(c) for c in share_entries.split(",") if c]
    if len(names) != len(counts) or any(c < 0 for c in counts):
        raise ValueError(f"share-entries {share_entries!r} does not match zones {zones!r}")
    by_zone: dict[str, tuple[list[str], list[int]]] = {}
    for name, count in zip(names, counts):
        zone_names, zone_counts = by_zone.setdefault(zone_of_share(name), ([], []))
        zone_names.append(name)
        zone_counts.append(count)
    return {zone: share_runs(n, c) for zone, (n, c) in by_zone.items()}

