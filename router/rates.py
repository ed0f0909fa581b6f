"""Byte-rate and object-size estimates the cost policy reads (pure: time passed in)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

RATE_HALF_LIFE_S = 10.0  # how fast the rate estimate forgets: ~10 s of history dominates


@dataclass
class DecayingRate:
    """Exponentially decaying byte rate: `add(n, now)`, `rate(now)` in bytes per second."""

    half_life_s: float = RATE_HALF_LIFE_S
    _value: float = 0.0  # decayed byte sum
    _at: float | None = None
    _started: float | None = None

    def _decay_to(self, now: float) -> None:
        if self._at is not None and now > self._at:
            self._value *= math.exp(-math.log(2) * (now - self._at) / self.half_life_s)
        self._at = now if self._at is None or now > self._at else self._at

    def add(self, nbytes: int, now: float) -> None:
        if self._started is None:
            self._started = now
        self._decay_to(now)
        self._value += nbytes

    def rate(self, now: float) -> float:
        if self._started is None:
            return 0.0
        self._decay_to(now)
        # The decayed sum of a steady rate r converges to r * half_life / ln 2; early on,
        # divide by the elapsed-time equivalent instead so the first seconds are not underrated.
        window = self.half_life_s / math.log(2) * (1 - math.exp(-math.log(2) * max(now - self._started, 1e-3)
                                                                 / self.half_life_s))
        return self._value / max(window, 1e-3)


@dataclass
class ZoneRates:
    """Cross-zone byte rates per destination zone."""

    by_zone: dict[str, DecayingRate] = field(default_factory=dict)

    def add(self, zone: str, nbytes: int, now: float) -> None:
        self.by_zone.setdefault(zone, DecayingRate()).add(nbytes, now)

    def rate(self, zone: str, now: float) -> float:
        r = self.by_zone.get(zone)
        return r.rate(now) if r else 0.0

    def total(self, now: float) -> float:
        return sum(r.rate(now) for r in self.by_zone.values())
