"""Per-principal produce quotas as token buckets (proxy/quota.py); times and sizes by hand."""

from __future__ import annotations

from proxy.quota import MAX_THROTTLE_MS, ProduceQuotas

RATE = 1000.0  # bytes per second


def test_a_burst_is_free_then_the_debt_is_the_throttle():
    quotas = ProduceQuotas(RATE, {}, burst_s=1.0)
    assert quotas.record("User:a", 1000, now=0.0) == 0  # the full bucket: 1000 bytes
    assert quotas.record("User:a", 500, now=0.0) == 500  # 500 bytes of debt at 1000 B/s
    assert quotas.record("User:a", 0, now=0.5) == 0  # paid back after 0.5 s
    assert quotas.record("User:a", 250, now=0.75) == 0  # 0.25 s refilled 250 bytes
    assert quotas.record("User:a", 100, now=0.75) == 100


def test_the_long_run_rate_is_the_quota():
    quotas = ProduceQuotas(RATE, {}, burst_s=1.0)
    now, sent = 0.0, 0
    for _ in range(100):  # a client that waits exactly the throttle it is told each time
        throttle_ms = quotas.record("User:a", 300, now)
        sent += 300
        now += throttle_ms / 1000
    # 30000 bytes: 1000 from the burst, the other 29000 at 1000 B/s -> 29 s, waits rounded up to whole ms
    assert 29.0 <= now <= 29.1


def test_principals_have_their_own_buckets_and_rates():
    quotas = ProduceQuotas(0.0, {"User:noisy": RATE}, burst_s=1.0)
    assert quotas.record("User:noisy", 3000, 0.0) == 2000
    assert quotas.record("User:quiet", 10**9, 0.0) == 0  # no default quota: unlimited
    assert quotas.rate_of("User:quiet") == 0.0


def test_the_throttle_is_capped():
    quotas = ProduceQuotas(RATE, {}, burst_s=1.0)
    assert quotas.record("User:a", 10**9, 0.0) == MAX_THROTTLE_MS
