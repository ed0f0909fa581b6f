"""When the report may scale a window's dollars to a month and a year, and by how much.

Rule: a figure is projected only from a window of at least `min_window_s` of audited traffic
(first to last record; default one hour, `azsidecar audit --min-projection-hours`). A
shorter window holds a burst, a test or a start-up, and multiplying ten seconds by 3.2
million says nothing about a year; the report then prints "window too short to project
(10 s < 1 h)" in the figure's place. From a long enough window the projection scales
linearly: month = 30.4375 days (365.25 / 12), year = 365.25 days, assuming the observed
traffic and mix go on.
"""

from __future__ import annotations

from dataclasses import dataclass

SECONDS_PER_MONTH = 30.4375 * 86_400  # 365.25 / 12 days
SECONDS_PER_YEAR = 365.25 * 86_400
MIN_PROJECTION_WINDOW_S = 3600.0  # an hour: the CUR's own granularity, and the shortest window a bill can be checked on


def short_duration(seconds: float) -> str:
    """A window as a person says it: 10 s, 45 min, 1 h, 36 h, 2.5 days."""
    if seconds < 60:
        return f"{seconds:.3g} s"
    if seconds < 3600:
        return f"{seconds / 60:.3g} min"
    if seconds < 3 * 86_400:
        return f"{seconds / 3600:.3g} h"
    return f"{seconds / 86_400:.3g} days"


@dataclass(frozen=True)
class Projection:
    """A window's dollars per month and per year, or why there are none."""

    amount_usd: float  # over the window
    window_s: float
    min_window_s: float
    per_month_usd: float | None
    per_year_usd: float | None

    @property
    def refusal(self) -> str | None:
        """Why nothing is projected ("window too short to project (10 s < 1 h)"), else None."""
        if self.per_month_usd is not None:
            return None
        if self.window_s <= 0:
            return "no window to project from (a single instant)"
        return (f"window too short to project ({short_duration(self.window_s)} < "
                f"{short_duration(self.min_window_s)})")

    @property
    def basis(self) -> str:
        """Where a projection comes from: "from 36 h of audited traffic"."""
        return f"from {short_duration(self.window_s)} of audited traffic"


def project(amount_usd: float, window_s: float, min_window_s: float = MIN_PROJECTION_WINDOW_S) -> Projection:
    """`amount_usd` observed over `window_s`, scaled to a month and a year when the window
    is at least `min_window_s` long (and not empty). Raises ValueError for a negative minimum."""
    if min_window_s < 0:
        raise ValueError(f"minimum projection window {min_window_s} s: must be >= 0")
    if window_s <= 0 or window_s < min_window_s:
        return Projection(amount_usd, window_s, min_window_s, None, None)
    return Projection(amount_usd, window_s, min_window_s, amount_usd * SECONDS_PER_MONTH / window_s,
                      amount_usd * SECONDS_PER_YEAR / window_s)
