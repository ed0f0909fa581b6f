"""Circuit breaker per destination zone (pure: the caller passes the time).

closed -> open after `failure_threshold` consecutive failures; open -> half-open after
`open_s`; half-open lets traffic try again: one success closes, one failure re-opens.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_FAILURE_THRESHOLD = 3  # consecutive WAL/notify failures before falling back
DEFAULT_OPEN_S = 10.0  # how long a broken zone is avoided before it is tried again


@dataclass
class Breaker:
    failure_threshold: int = DEFAULT_FAILURE_THRESHOLD
    open_s: float = DEFAULT_OPEN_S
    state: str = "closed"
    failures: int = 0
    opened_at: float = 0.0

    def allows(self, now: float) -> bool:
        """Whether the WAL path to this zone may be used at `now`."""
        if self.state == "open" and now - self.opened_at >= self.open_s:
            self.state = "half_open"
        return self.state != "open"

    def record_success(self) -> None:
        self.state = "closed"
        self.failures = 0

    def record_failure(self, now: float) -> None:
        self.failures += 1
        if self.state == "half_open" or self.failures >= self.failure_threshold:
            self.state = "open"
            self.opened_at = now
