"""Produce byte-rate quotas per client principal, as token buckets (pure; the caller passes the time).

Strategy: each principal with a quota (its own, else the default) has a bucket of
`rate × burst_s` bytes that refills at `rate` bytes per second. A Produce request takes its
size from the bucket, which may go negative; the debt, at the principal's rate, is the
throttle time - `throttle_time_ms` in the answer, as a broker puts it (KIP-219), while the
proxy stops reading that connection for as long (as Kafka mutes the channel). So a
principal's long-run rate is held to its quota whatever its connections or clients do,
and one tenant cannot use up the upstream quota the gateway's own principal has.

Buckets are kept per principal for the life of the process: principals are the names of
the users file or the mapped certificate subjects, a bounded set (MAX_PRINCIPALS guards it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

MAX_THROTTLE_MS = 30_000  # a broker's throttle is bounded by its quota window too; a client's request timeout is 30 s
MAX_PRINCIPALS = 100_000  # buckets kept; beyond this the oldest is dropped (its debt forgiven)


@dataclass
class TokenBucket:
    rate_bytes_per_s: float
    burst_bytes: float
    tokens: float
    updated_at: float

    def take(self, nbytes: int, now: float) -> float:
        """Take `nbytes`; returns how long (s) the caller must wait for the bucket to be out of debt."""
        elapsed = max(0.0, now - self.updated_at)
        self.tokens = min(self.burst_bytes, self.tokens + elapsed * self.rate_bytes_per_s)
        self.updated_at = now
        self.tokens -= nbytes
        return -self.tokens / self.rate_bytes_per_s if self.tokens < 0 else 0.0


class ProduceQuotas:
    """The buckets of every principal with a quota."""

    def __init__(self, default_bytes_per_s: float, per_principal: Mapping[str, float], burst_s: float) -> None:
        self._default = default_bytes_per_s
        self._per_principal = dict(per_principal)
        self._burst_s = burst_s
        self._buckets: dict[str, TokenBucket] = {}

    def rate_of(self, principal: str) -> float:
        """Bytes per second allowed to `principal` (0: no quota)."""
        return self._per_principal.get(principal, self._default)

    def record(self, principal: str, nbytes: int, now: float) -> int:
        """Count a Produce request of `nbytes` for `principal` at `now` (s); returns its
        throttle_time_ms (0: within quota), at most MAX_THROTTLE_MS."""
        bucket = self._buckets.get(principal)
        if bucket is None:
            rate = self.rate_of(principal)
            if rate <= 0:
                return 0
            if len(self._buckets) >= MAX_PRINCIPALS:
                self._buckets.pop(next(iter(self._buckets)))
            bucket = self._buckets[principal] = TokenBucket(rate, rate * self._burst_s, rate * self._burst_s, now)
        wait_s = bucket.take(nbytes, now)
        return min(MAX_THROTTLE_MS, int(wait_s * 1000 + 0.999))
