"""Deadlines from recent latency, for gray failures (pure: the caller passes the time).

A dependency that hangs instead of refusing (S3 stopped mid-request, an agent frozen)
is only noticed by a timeout, and a fixed one long enough for the slowest healthy request
(30 s for S3, 10 s per notification attempt) leaves producers stalled for all of it. So
each kind of request to each place keeps the latencies of its recent successes, and an
attempt slower than `gray_deadline_s` of them (3 x p99 of the last minute, at least a
floor, at most the configured timeout and, where the caller gives one, a maximum: the
notification sender's `notify.gray_max_s`, the WAL's `wal.gray_max_s`) is abandoned and counts as a failure.

`LatencyGuard` adds what to do meanwhile: after such a timeout the place is *gray*; the
attempt that timed out may be retried once (a hedge, in case it was one slow request),
but while gray only one attempt at a time goes out (a probe, at most one per
`probe_interval_s`; a new request's probe is allowed twice the deadline, a hedge only
the deadline, so the requests behind a hang still fail within two deadlines) and every
other fails at once, so work queued behind a hung
dependency fails within about one deadline instead of one deadline each. A success ends
the gray state.

Work: requests to one place differ in size (a notification of 1 entry or of 512, a PUT of
100 KiB or of 16 MiB), and a deadline that ignores it calls a large, healthy request gray:
an agent appending an 8 MiB object across 512 partitions was abandoned at the deadline a
1-entry notification has. So each attempt says how much work it is, in *units*
(`request_units`: 1 for the request itself, plus 1 per `entries_per_unit` entries and per
`bytes_per_unit` bytes); each success is kept as its seconds per unit; and an attempt of
u units gets u times the per-unit deadline (floor, maximum and cold start included), at
most the ceiling (the configured timeout). A request of about one unit keeps the deadline
it had; a hung place is still noticed within u x the maximum, at most the timeout.

First contact: some requests cost the place more the first time, for a reason outside it. An
agent's first append to a partition (a topic just created, a leader just moved) waits at the
leader until its followers start fetching the partition: up to the brokers'
replica.fetch.wait.max.ms (500 ms by default, 5 s on deploy/local's cluster; 4.99 s measured
there on 2026-12-01 where the warm appends took 15-80 ms). No history tells that wait from a
hang, so the caller marks such an attempt (`start(first_contact=True)`): it gets the ceiling,
and its time is not kept. Only while the place is not gray: a hang is then noticed within the
ceiling, and once gray, within the usual deadlines.

Used by the WAL writer (PUTs), the WAL reader (ranged GETs, deadline only) and the
notification sender (per destination zone). Kept free of I/O so a later base package can
take it as is.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

WINDOW_S = 60.0  # "recent": successes of the last minute ...
# ... or the last 5 if the minute had fewer. With fewer in all nothing is known: no deadline
# below the configured timeout. Five successes set the scale (their p99 is their maximum), so
# a link where every request is slow is never cut short, and a hang soon after a start
# (20 were too many: a proxy with little WAL traffic had not made them 6 s in) is caught.
MIN_SAMPLES = 5
# Until then, where the caller gives a maximum (`max_s`), a cold place's deadline is this
# many times that maximum (at most the timeout): with notify.gray_max_s 1.5 s a hung agent
# that had answered a proxy only 4 times cost each of its notifications the whole 10 s
# notify.timeout_s (and its hedge as much again); now 4.5 s. A healthy first request
# (connections, caches, a first GET and append) has three times what a warm one may take.
COLD_FACTOR = 3.0
# ... and at most the last 256: at tens of requests a second a minute-long window kept the
# slow first seconds after a start (connections, caches) in the p99 for a whole minute,
# which pushed the deadline to the ceiling exactly when a hang came early.
MAX_SAMPLES = 256
RECOMPUTE_S = 1.0  # the deadline is recomputed at most once a second (a sort of up to MAX_SAMPLES values)
DEFAULT_FACTOR = 3.0
PROBE_INTERVAL_S = 1.0  # while gray: at most one probe per second, never two at once
# A probe may take twice the deadline: it is alone (everything else fails at once), and a
# dependency coming back is often slow at first (an agent works off what it got while hung).
PROBE_DEADLINE_FACTOR = 2.0


def p99(values: Sequence[float]) -> float:
    """The 99th percentile, nearest rank (the smallest value at or above 99 % of them)."""
    if not values:
        raise ValueError("p99 of no values")
    ordered = sorted(values)
    rank = -(-99 * len(ordered) // 100)  # ceil(0.99 n), 1-based
    return ordered[rank - 1]


def request_units(*, nbytes: int, bytes_per_unit: int, entries: int = 0, entries_per_unit: int = 0) -> float:
    """How much work a request is, in units of the gray deadline: 1 for the request itself
    (a round trip, a first byte), plus 1 per `bytes_per_unit` bytes and, where
    `entries_per_unit` is given (> 0), 1 per that many entries. Raises ValueError for a
    unit size below 1 or a negative count."""
    if bytes_per_unit < 1 or entries_per_unit < 0 or nbytes < 0 or entries < 0:
        raise ValueError(f"request_units: nbytes {nbytes}, bytes_per_unit {bytes_per_unit}, "
                         f"entries {entries}, entries_per_unit {entries_per_unit}")
    units = 1.0 + nbytes / bytes_per_unit
    if entries_per_unit:
        units += entries / entries_per_unit
    return units


def gray_deadline_s(latencies_s: Sequence[float], *, floor_s: float, ceiling_s: float,
                    factor: float = DEFAULT_FACTOR, min_samples: int = MIN_SAMPLES,
                    max_s: float | None = None, units: float = 1.0) -> float:
    """units x max(factor x p99(latencies_s), floor_s), at most units x max_s (if given) and
    ceiling_s.

    `latencies_s` are seconds per unit of work (each success's seconds over its units), and
    the deadline is for an attempt of `units` (`request_units`; 1: a request as small as
    they come). With fewer than min_samples latencies nothing is known yet: units x
    COLD_FACTOR x max_s where a maximum is given, else the ceiling (the configured timeout),
    so a cold start abandons a healthy first request only if it takes several times what a
    warm one may. `max_s` bounds the deadline per unit however slow the recent requests
    were, so that a hang is noticed within units x max_s even on a loaded host (the price: a
    place whose requests all take longer is treated as failing). Raises ValueError for
    units below 1.
    """
    if units < 1.0:
        raise ValueError(f"gray_deadline_s: units {units} < 1 (a request is at least one unit)")
    if len(latencies_s) < min_samples:
        per_unit = float("inf") if max_s is None else COLD_FACTOR * max_s
    else:
        per_unit = max(floor_s, factor * p99(latencies_s))
        if max_s is not None:
            per_unit = min(per_unit, max_s)
    return min(ceiling_s, units * per_unit)


@dataclass(slots=True)
class Attempt:
    """One attempt as the guard let it start."""

    started_at: float
    probe: bool  # the one attempt allowed out while gray
    was_gray: bool  # the place was gray when it started (a timeout then means: give up)
    hedge: bool = False  # the retry of an attempt that just timed out: the plain deadline, not a probe's
    units: float = 1.0  # its work (request_units): its deadline is that many per-unit deadlines
    # It asks the place for something it has not done for this caller before (an agent's
    # first append to a partition, whose leader then waits for its followers to start
    # fetching it): no deadline below the ceiling, and its latency is not kept.
    first_contact: bool = False


class LatencyGuard:
    """Recent latencies and the gray state of one kind of request to one place."""

    def __init__(self, *, floor_s: float, ceiling_s: float, factor: float = DEFAULT_FACTOR,
                 window_s: float = WINDOW_S, min_samples: int = MIN_SAMPLES,
                 probe_interval_s: float = PROBE_INTERVAL_S, max_deadline_s: float | None = None) -> None:
        self.floor_s, self.ceiling_s, self.factor = floor_s, ceiling_s, factor
        self.max_deadline_s = max_deadline_s
        self.window_s, self.min_samples, self.probe_interval_s = window_s, min_samples, probe_interval_s
        self.gray = False
        self._samples: deque[tuple[float, float]] = deque(maxlen=MAX_SAMPLES)  # (ended at, seconds)
        self._probing = False
        self._probe_ended = float("-inf")
        self._deadline: tuple[float, float, bool] | None = None  # (computed at, value, from too few samples)

    def deadline_s(self, now: float, units: float = 1.0) -> float:
        """How long an attempt of `units` (request_units) started now may take before it is abandoned."""
        if units < 1.0:
            raise ValueError(f"deadline_s: units {units} < 1 (a request is at least one unit)")
        cached = self._deadline
        # Recomputed once a second, and at once when the history has just become enough.
        if cached is None or now - cached[0] >= RECOMPUTE_S or (cached[2] and len(self._samples) >= self.min_samples):
            while len(self._samples) > self.min_samples and now - self._samples[0][0] > self.window_s:
                self._samples.popleft()
            # Per unit and without the ceiling: an attempt's units scale it, then the ceiling bounds it.
            value = gray_deadline_s([s for _, s in self._samples], floor_s=self.floor_s, ceiling_s=float("inf"),
                                    factor=self.factor, min_samples=self.min_samples, max_s=self.max_deadline_s)
            cached = self._deadline = (now, value, len(self._samples) < self.min_samples)
        return min(self.ceiling_s, units * cached[1])

    def attempt_timeout_s(self, now: float, attempt: Attempt | None = None) -> float:
        """deadline_s for the attempt's units (twice that, at most the ceiling, for a probe),
        or infinity for a first contact and while the deadline is the ceiling (no history, a
        p99 that high, or an attempt that much work): then the transport's own timeouts, which bound each wait
        for progress rather than the whole transfer, apply."""
        if attempt is not None and attempt.first_contact:
            return float("inf")
        deadline = self.deadline_s(now, 1.0 if attempt is None else attempt.units)
        if deadline >= self.ceiling_s:
            return float("inf")
        if attempt is not None and attempt.probe and not attempt.hedge:
            return min(self.ceiling_s, PROBE_DEADLINE_FACTOR * deadline)
        return deadline

    def observe(self, now: float, seconds: float, units: float = 1.0) -> None:
        """A successful request of `units` (request_units) took `seconds`, ended at `now`
        (outside start/succeeded: a reader's GET). Kept as seconds per unit."""
        self._samples.append((now, seconds / units))
        self.gray = False

    def start(self, now: float, *, hedge: bool = False, units: float = 1.0,
              first_contact: bool = False) -> Attempt | None:
        """Let an attempt of `units` (request_units) start now, or None: gray, and a probe is
        out or was just made (fail at once). `hedge`: it retries an attempt of the same
        request that just timed out. `first_contact`: it asks for something the place has
        not done for this caller before (Attempt.first_contact); honoured only while the
        place is not gray (a gray place's probe and hedge keep their deadlines, so a hang is
        still noticed within them). Raises ValueError for units below 1."""
        if units < 1.0:
            raise ValueError(f"start: units {units} < 1 (a request is at least one unit)")
        if not self.gray:
            return Attempt(now, probe=False, was_gray=False, hedge=hedge, units=units, first_contact=first_contact)
        if self._probing or now - self._probe_ended < self.probe_interval_s:
            return None
        self._probing = True
        return Attempt(now, probe=True, was_gray=True, hedge=hedge, units=units)

    def succeeded(self, attempt: Attempt, now: float) -> None:
        self._end(attempt, now)
        if attempt.first_contact:  # its time is the first append's, not what the place usually takes
            self.gray = False
            return
        self.observe(now, now - attempt.started_at, attempt.units)

    def failed(self, attempt: Attempt, now: float, *, timed_out: bool) -> bool:
        """The attempt failed (`timed_out`: abandoned at its deadline, which makes the place
        gray). Returns True when the caller should not try again now: it timed out while
        the place was already gray (the hedge is spent)."""
        self._end(attempt, now)
        if timed_out:
            self.gray = True
            return attempt.was_gray
        return False

    def _end(self, attempt: Attempt, now: float) -> None:
        if attempt.probe:
            self._probing = False
            self._probe_ended = now
