"""Where a partition's leader lives: override maps first, then the broker's rack (pure).

Overrides exist for clusters that report no rack (Tansu): `partition_zones` keys are
"topic-glob:partition" or "topic-glob:*", most specific first (an exact partition wins
over "*", an exact topic over a glob); `broker_zones` maps broker ids to zones.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping


def leader_zone(topic: str, partition: int, leader_id: int | None, leader_rack: str | None,
                partition_zones: Mapping[str, str], broker_zones: Mapping[str, str]) -> str | None:
    """The zone of (topic, partition)'s leader, or None if nothing says."""
    best: tuple[int, str] | None = None
    for key, zone in partition_zones.items():
        pattern, _, part = key.rpartition(":")
        if not pattern or not fnmatch.fnmatchcase(topic, pattern):
            continue
        if part == "*":
            rank = 0
        elif part.isdigit() and int(part) == partition:
            rank = 2
        else:
            continue
        rank += 1 if pattern == topic else 0  # an exact topic beats a glob
        if best is None or rank > best[0]:
            best = (rank, zone)
    if best is not None:
        return best[1]
    if leader_id is not None and str(leader_id) in broker_zones:
        return broker_zones[str(leader_id)]
    return leader_rack or None
