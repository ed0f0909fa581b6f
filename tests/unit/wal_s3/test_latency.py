"""Gray-failure deadlines and the guard's states, table-tested (imports only wal_s3.latency)."""

from __future__ import annotations

import pytest

from wal_s3.latency import LatencyGuard, gray_deadline_s, p99, request_units


@pytest.mark.parametrize(("values", "expected"), [
    ([0.5], 0.5),
    ([0.1] * 99 + [9.0], 0.1),          # 100 values: the 99th is still 0.1
    ([0.1] * 98 + [5.0, 9.0], 5.0),     # two slow ones: the 99th is the first of them
    (list(range(1, 201)), 198),         # ceil(0.99 x 200) = 198th
    ([3.0, 1.0, 2.0], 3.0),             # unsorted input
])
def test_p99_nearest_rank(values, expected):
    assert p99(values) == expected


def test_p99_of_nothing_is_an_error():
    with pytest.raises(ValueError):
        p99([])


@pytest.mark.parametrize(("latencies", "expected"), [
    ([], 30.0),                          # nothing known: the configured timeout
    ([0.05] * 19, 30.0),                 # still fewer than 20 samples
    ([0.05] * 20, 1.0),                  # 3 x 0.05 = 0.15 < floor 1.0
    ([0.5] * 100, 1.5),                  # 3 x p99 0.5
    ([0.2] * 98 + [2.0, 2.0], 6.0),      # the p99 is 2.0: 6 s
    ([12.0] * 30, 30.0),                 # 36 s capped at the ceiling
])
def test_gray_deadline(latencies, expected):
    assert gray_deadline_s(latencies, floor_s=1.0, ceiling_s=30.0, factor=3.0, min_samples=20) == pytest.approx(expected)


@pytest.mark.parametrize(("latencies", "expected"), [
    ([], 6.0),                           # nothing known: three times the maximum (under the 10 s timeout)
    ([0.2] * 19, 6.0),                   # 19 of the 20 it takes: still cold
    ([0.2] * 20, 1.0),                   # 3 x 0.2 = 0.6 < floor 1.0
    ([0.5] * 20, 1.5),                   # below the maximum: 3 x p99
    ([0.85] * 20, 2.0),                  # 2.55 s capped at the maximum
    ([12.0] * 20, 2.0),                  # even above the timeout: the maximum, not "no deadline"
])
def test_gray_deadline_at_most_max_s(latencies, expected):
    assert gray_deadline_s(latencies, floor_s=1.0, ceiling_s=10.0, factor=3.0, min_samples=20,
                           max_s=2.0) == pytest.approx(expected)


def test_guard_with_a_maximum_deadline_bounds_attempt_and_hedge_whatever_the_p99():
    """Every recent round trip took 0.9 s (3 x p99 = 2.7 s): with max_deadline_s 2.0 an
    attempt and its hedge are abandoned after 2.0 s each, 4.0 s together."""
    guard = LatencyGuard(floor_s=1.0, ceiling_s=10.0, min_samples=3, max_deadline_s=2.0)
    for t in (1.0, 2.0, 3.0):
        guard.observe(t, 0.9)
    first = guard.start(10.0)
    assert first is not None and guard.attempt_timeout_s(10.0, first) == 2.0
    assert guard.failed(first, 12.0, timed_out=True) is False  # gray now; the hedge may go
    hedge = guard.start(12.0, hedge=True)
    assert hedge is not None and guard.attempt_timeout_s(12.0, hedge) == 2.0
    assert guard.failed(hedge, 14.0, timed_out=True) is True  # the hedge spent: give up at 4.0 s


def test_guard_deadline_follows_the_last_minute_but_keeps_the_last_samples():
    guard = LatencyGuard(floor_s=1.0, ceiling_s=30.0, min_samples=3)
    assert guard.deadline_s(0.0) == 30.0
    for t in (1.0, 2.0, 3.0):
        guard.observe(t, 0.5)
    assert guard.deadline_s(3.0) == 1.5
    guard.observe(70.0, 2.0)  # a minute later: the old ones are pruned down to the last 3
    assert guard.deadline_s(70.0) == 6.0
    guard.observe(70.5, 0.1)  # recomputed at most once a second
    assert guard.deadline_s(70.5) == 6.0


def test_guard_hedges_once_then_sends_only_probes_while_gray():
    guard = LatencyGuard(floor_s=1.0, ceiling_s=30.0, probe_interval_s=1.0)
    a = guard.start(0.0)
    b = guard.start(0.0)
    assert a is not None and b is not None and not guard.gray
    assert guard.failed(a, 2.0, timed_out=True) is False  # first timeout: gray, a retry (hedge) is allowed
    assert guard.gray
    assert guard.failed(b, 2.0, timed_out=True) is False  # b started before the gray state: its hedge too
    probe = guard.start(2.1)
    assert probe is not None and probe.probe
    assert guard.start(2.1) is None        # one probe at a time: everything else fails at once
    assert guard.failed(probe, 4.1, timed_out=True) is True  # timed out while gray: give up
    assert guard.start(4.5) is None        # less than a second after the last probe ended
    probe = guard.start(5.1)
    assert probe is not None
    assert guard.failed(probe, 5.2, timed_out=False) is False  # a refusal is no timeout: no give-up signal
    assert guard.gray                      # ... and it is not a success either
    probe = guard.start(6.2)
    guard.succeeded(probe, 6.3)            # the dependency answers again
    assert not guard.gray
    normal = guard.start(6.3)
    assert normal is not None and not normal.probe and not normal.was_gray


def test_attempt_timeout_is_unbounded_until_there_is_history_and_doubled_for_a_probe():
    guard = LatencyGuard(floor_s=1.0, ceiling_s=30.0, min_samples=2)
    assert guard.attempt_timeout_s(0.0) == float("inf")  # the transport's own timeouts apply
    guard.observe(0.1, 0.2)
    guard.observe(0.2, 0.2)
    assert guard.attempt_timeout_s(1.5) == 1.0
    first = guard.start(1.5)
    guard.failed(first, 2.5, timed_out=True)
    hedge = guard.start(2.5, hedge=True)
    assert hedge.probe and guard.attempt_timeout_s(2.5, hedge) == 1.0  # a hedge: the plain deadline
    guard.failed(hedge, 3.5, timed_out=True)
    probe = guard.start(4.5)  # a new request while gray
    assert probe.probe and guard.attempt_timeout_s(4.5, probe) == 2.0  # alone: twice the deadline
    short = LatencyGuard(floor_s=1.0, ceiling_s=1.5, min_samples=2)
    short.observe(0.1, 0.2)
    short.observe(0.2, 0.2)
    short.gray = True
    assert short.attempt_timeout_s(1.0, short.start(1.0)) == 1.5  # never past the ceiling


@pytest.mark.parametrize(("latencies", "expected"), [
    ([0.1] * 4, 30.0),             # four successes: nothing known yet
    ([0.1] * 5, 1.0),              # five set the scale: 3 x 0.1 under the floor
    ([0.5] * 4 + [2.0], 6.0),      # the p99 of five is their maximum
])
def test_gray_deadline_with_the_default_minimum_of_five(latencies, expected):
    assert gray_deadline_s(latencies, floor_s=1.0, ceiling_s=30.0) == pytest.approx(expected)


def test_a_cold_place_with_a_maximum_is_abandoned_at_three_times_it_not_at_the_timeout():
    """An agent hung after answering a proxy 4 times (notify: gray_max_s 1.5 s, timeout 10 s):
    the attempt and its hedge are abandoned after 4.5 s each instead of 10 s each; the
    fifth answer ends the cold deadline at once (no second of caching)."""
    guard = LatencyGuard(floor_s=0.5, ceiling_s=10.0, max_deadline_s=1.5)
    for t in (1.0, 2.0, 3.0, 4.0):
        guard.observe(t, 0.05)
    first = guard.start(5.0)
    assert first is not None and guard.attempt_timeout_s(5.0, first) == 4.5
    assert guard.failed(first, 9.5, timed_out=True) is False  # gray; the hedge may go
    hedge = guard.start(9.5, hedge=True)
    assert hedge is not None and guard.attempt_timeout_s(9.5, hedge) == 4.5
    assert guard.failed(hedge, 14.0, timed_out=True) is True  # 9 s in all, not 20
    warm = LatencyGuard(floor_s=0.5, ceiling_s=10.0, max_deadline_s=1.5)
    for t in (1.0, 2.0, 3.0, 4.0):
        warm.observe(t, 0.05)
    assert warm.deadline_s(4.0) == 4.5
    warm.observe(4.2, 0.05)
    assert warm.deadline_s(4.3) == 0.5  # five answers: 3 x 0.05 under the floor


def test_a_cold_place_without_a_maximum_keeps_the_timeout():
    guard = LatencyGuard(floor_s=1.0, ceiling_s=30.0)
    assert guard.deadline_s(0.0) == 30.0 and guard.attempt_timeout_s(0.0) == float("inf")


MiB = 1024 * 1024


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({"nbytes": 0, "bytes_per_unit": 8 * MiB}, 1.0),                       # the request itself
    ({"nbytes": 100 * 1024, "bytes_per_unit": 8 * MiB}, 1.01220703125),    # a small PUT: 1 + 100/8192
    ({"nbytes": 8 * MiB, "bytes_per_unit": 8 * MiB}, 2.0),                 # an object at the flush size
    ({"nbytes": 16 * MiB, "bytes_per_unit": 8 * MiB}, 3.0),
    ({"nbytes": 8 * MiB, "bytes_per_unit": 8 * MiB, "entries": 512, "entries_per_unit": 64}, 10.0),
    ({"nbytes": 16 * 1024, "bytes_per_unit": 8 * MiB, "entries": 1, "entries_per_unit": 64}, 1.017578125),
    ({"nbytes": 0, "bytes_per_unit": 8 * MiB, "entries": 512}, 1.0),       # entries_per_unit 0: not counted
])
def test_request_units(kwargs, expected):
    assert request_units(**kwargs) == pytest.approx(expected)


@pytest.mark.parametrize("kwargs", [
    {"nbytes": 1, "bytes_per_unit": 0},
    {"nbytes": -1, "bytes_per_unit": 8},
    {"nbytes": 1, "bytes_per_unit": 8, "entries": -1, "entries_per_unit": 64},
    {"nbytes": 1, "bytes_per_unit": 8, "entries": 1, "entries_per_unit": -64},
])
def test_request_units_refuses_what_is_no_size(kwargs):
    with pytest.raises(ValueError):
        request_units(**kwargs)


@pytest.mark.parametrize(("latencies", "units", "expected"), [
    ([], 1.0, 4.5),                  # cold: 3 x max_s 1.5
    ([], 2.0, 9.0),                  # cold, twice the work: twice that
    ([], 10.0, 10.0),                # cold, 512 entries of 8 MiB: 45 s, at most the 10 s ceiling
    ([0.01] * 5, 1.0, 1.0),          # the floor
    ([0.01] * 5, 6.0, 6.0),          # six times the floor
    ([0.4] * 5, 2.0, 2.4),           # 3 x 0.4 per unit, two units
    ([0.6] * 5, 2.0, 3.0),           # 1.8 per unit capped at 1.5, two units
    ([0.6] * 5, 10.0, 10.0),         # 15 s capped at the ceiling
])
def test_gray_deadline_scales_with_the_units_of_work(latencies, units, expected):
    assert gray_deadline_s(latencies, floor_s=1.0, ceiling_s=10.0, max_s=1.5, units=units) == pytest.approx(expected)


def test_gray_deadline_without_a_maximum_is_the_ceiling_when_cold_whatever_the_units():
    assert gray_deadline_s([], floor_s=1.0, ceiling_s=30.0, units=3.0) == 30.0


@pytest.mark.parametrize("units", [0.0, 0.5, -1.0])
def test_less_than_one_unit_is_refused(units):
    with pytest.raises(ValueError):
        gray_deadline_s([], floor_s=1.0, ceiling_s=10.0, units=units)
    guard = LatencyGuard(floor_s=1.0, ceiling_s=10.0)
    with pytest.raises(ValueError):
        guard.start(0.0, units=units)
    with pytest.raises(ValueError):
        guard.deadline_s(0.0, units)


def test_guard_keeps_seconds_per_unit_and_gives_each_attempt_its_units_worth():
    """Five answers of 6 s for 10 units each (0.6 s per unit): a 1-unit attempt gets 3 x 0.6
    = 1.8 s capped at the 1.5 s maximum; a 10-unit one 15 s, at most the ceiling (10 s), which
    means no deadline of the guard's own (the caller's timeout); a 4-unit probe 2 x 6 s capped
    at 10 s; and a 10-unit success at 6 s is no reason to be gray."""
    guard = LatencyGuard(floor_s=1.0, ceiling_s=10.0, max_deadline_s=1.5)
    for t in (1.0, 2.0, 3.0, 4.0, 5.0):
        guard.observe(t, 6.0, units=10.0)
    assert guard.deadline_s(5.0) == pytest.approx(1.5)
    assert guard.deadline_s(5.0, 10.0) == 10.0
    small = guard.start(5.0, units=1.0)
    big = guard.start(5.0, units=10.0)
    assert small is not None and guard.attempt_timeout_s(5.0, small) == pytest.approx(1.5)
    assert big is not None and guard.attempt_timeout_s(5.0, big) == float("inf")
    four = guard.start(5.0, units=4.0)
    assert four is not None and guard.attempt_timeout_s(5.0, four) == pytest.approx(6.0)
    guard.succeeded(four, 10.6)  # 5.6 s for 4 units: 1.4 s per unit
    assert guard.deadline_s(10.6) == pytest.approx(1.5)  # recomputed: 3 x p99 1.4 = 4.2, capped at 1.5
    assert not guard.gray
    guard.failed(small, 11.0, timed_out=True)
    probe = guard.start(12.5, units=4.0)
    assert probe is not None and probe.probe
    assert guard.attempt_timeout_s(12.5, probe) == 10.0  # 2 x 6 s, at most the ceiling


def warm_guard() -> LatencyGuard:
    """Five answers of 0.05 s: the deadline is the 1.0 s floor (notify's defaults, timeout 10 s)."""
    guard = LatencyGuard(floor_s=1.0, ceiling_s=10.0, max_deadline_s=1.5)
    for t in (1.0, 2.0, 3.0, 4.0, 5.0):
        guard.observe(t, 0.05)
    return guard


def test_a_first_contact_waits_the_ceiling_and_its_time_is_not_kept():
    """A new partition's first append took 5 s (its followers were not fetching it yet): no
    gray failure, and the next attempt's deadline is still the 1 s the warm answers set."""
    guard = warm_guard()
    first = guard.start(6.0, first_contact=True)
    assert first is not None and first.first_contact
    assert guard.attempt_timeout_s(6.0, first) == float("inf")  # the transport's timeout (10 s)
    guard.succeeded(first, 11.0)
    assert not guard.gray
    assert guard.attempt_timeout_s(12.0, guard.start(12.0)) == 1.0  # not 1.5 s: the 5 s were not kept


def test_a_first_contact_while_gray_has_the_gray_deadlines():
    """A hung agent: the first contact's attempt waited 10 s; its hedge and the next new
    partitions' probes are held to the deadlines of a gray place, not to the ceiling again."""
    guard = warm_guard()
    first = guard.start(6.0, first_contact=True)
    assert guard.failed(first, 16.0, timed_out=True) is False  # gray now: one hedge
    hedge = guard.start(16.0, hedge=True, first_contact=True)
    assert hedge is not None and not hedge.first_contact
    assert guard.attempt_timeout_s(16.0, hedge) == 1.0
    assert guard.failed(hedge, 17.0, timed_out=True) is True
    probe = guard.start(18.5, first_contact=True)
    assert probe is not None and probe.probe and not probe.first_contact
    assert guard.attempt_timeout_s(18.5, probe) == 2.0  # a probe's twice the deadline
