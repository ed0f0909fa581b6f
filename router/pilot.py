"""Which topics the WAL route may take: the pilot's include and exclude lists (pure).

Strategy: a platform team pilots the WAL route on one topic before the fleet. A topic may
take the WAL route when it matches a glob of `router.wal_topics` (default `*`: every topic)
and none of `router.wal_exclude_topics`; any other topic's cross-zone batches go direct.
Globs are fnmatch's, case-sensitive as Kafka topic names are. The answer is a refusal
reason (the decision's `reason` in metrics and audit records) or None, so the router and
its tests read one table.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence

NOT_PILOTED = "topic not in router.wal_topics"
EXCLUDED = "topic in router.wal_exclude_topics"


def wal_refusal(topic: str, include: Sequence[str], exclude: Sequence[str]) -> str | None:
    """None when `topic` may take the WAL route, else why not (NOT_PILOTED or EXCLUDED).
    An exclude wins over an include."""
    if any(fnmatch.fnmatchcase(topic, pattern) for pattern in exclude):
        return EXCLUDED
    if not any(fnmatch.fnmatchcase(topic, pattern) for pattern in include):
        return NOT_PILOTED
    return None
