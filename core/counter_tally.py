"""Counters the request path adds to as plain numbers, served by prometheus-client.

prometheus-client's `Counter.inc` checks the metric's state in three Python calls and takes
a lock on every increment. The proxy counts seven series per produce request forwarded
(requests, bytes in and out, decisions, lookups, forwarded outcomes, principal bytes), and
on the local route a request's Python calls are its CPU. So those series are tallied: a
`CounterTally` is one labelled child's running total, added to by one `+=`, and
`TalliedCounter` (a prometheus-client Counter) pushes each tally's growth since the last
push into its own child whenever it is collected - a scrape, `generate_latest`,
`REGISTRY.get_sample_value` - before the library reads it. The series, their names, labels,
`_created` times and exposition are the library's own.

Threads: the tallies are added to by the proxy's one trio thread; a scrape collects in
the HTTP server's threads. A tally's total is read whole under the GIL, and only a push
(serialized by a lock) moves what has been pushed, so an increment is never lost or
counted twice; a scrape between two related increments sees one and not the other, as it
could with the library's own counters.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from prometheus_client import Counter
from prometheus_client.metrics_core import Metric

_PUSHING = threading.Lock()  # pushes happen per scrape, never on the request path


class CounterTally:
    """One child's count: `inc` adds, a collection of its counter pushes it."""

    __slots__ = ("total", "_pushed", "_child")

    def __init__(self, child: Counter) -> None:
        self.total: float = 0
        self._pushed: float = 0
        self._child = child

    def inc(self, amount: float = 1) -> None:
        """Add `amount` (>= 0). Raises ValueError for a negative amount, as Counter.inc does."""
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        self.total += amount

    def push(self) -> None:
        """Add what was counted since the last push to the child (hold _PUSHING)."""
        total = self.total
        if total != self._pushed:
            self._child.inc(total - self._pushed)
            self._pushed = total


class TalliedCounter(Counter):
    """A Counter whose children the request path counts with `tally(*label_values)`."""

    _tallies: dict[tuple[object, ...], CounterTally] | None = None  # on the parent, made by the first tally

    def tally(self, *values: object) -> CounterTally:
        """The tally of the child `labels(*values)`, made once per distinct values."""
        tallies = self._tallies
        if tallies is None:
            tallies = self._tallies = {}
        tally = tallies.get(values)
        if tally is None:
            tally = tallies[values] = CounterTally(self.labels(*values))
        return tally

    def collect(self) -> Iterable[Metric]:
        if self._tallies:
            with _PUSHING:
                for tally in list(self._tallies.values()):  # copied whole: the trio thread may add one
                    tally.push()
        return super().collect()
