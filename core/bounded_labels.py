"""A metric label whose values are bounded: the first `limit` distinct values are kept, later
ones are counted under OTHER.

Why: a label taken from what clients send (their principal names) would otherwise let one
client grow the sidecar's metrics, and every Prometheus scrape, without bound. The first
names seen are the ones a gateway serves day to day; the audit records keep every name.
"""

from __future__ import annotations

OTHER = "other"


class BoundedLabels:
    """Maps a value to itself while fewer than `limit` distinct values were seen, else OTHER."""

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError(f"limit must be >= 0, not {limit}")
        self._limit = limit
        self._seen: set[str] = set()

    def label(self, value: str) -> str:
        if value in self._seen:
            return value
        if len(self._seen) < self._limit:
            self._seen.add(value)
            return value
        return OTHER
