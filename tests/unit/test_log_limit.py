"""The log rate limit shared by the proxy's and the agent's listeners, table-tested."""

from __future__ import annotations

from core.log_limit import LogLimiter


def test_log_limiter_allows_one_line_per_key_per_interval_and_counts_the_rest():
    limiter = LogLimiter(interval_s=60.0)
    steps = [  # (key, now, expected (allowed, held back since the last line))
        (("max_connections", "10.0.0.1"), 0.0, (True, 0)),
        (("max_connections", "10.0.0.1"), 1.0, (False, 0)),
        (("max_connections", "10.0.0.1"), 59.9, (False, 0)),
        (("max_connections", "10.0.0.2"), 2.0, (True, 0)),   # another source has its own minute
        (("idle_timeout", "10.0.0.1"), 3.0, (True, 0)),      # another reason too
        (("max_connections", "10.0.0.1"), 60.0, (True, 2)),  # a minute on: logs, says 2 were held back
        (("max_connections", "10.0.0.1"), 61.0, (False, 0)),
        (("max_connections", "10.0.0.1"), 200.0, (True, 1)),
    ]
    for key, now, expected in steps:
        assert limiter.allow(key, now) == expected, (key, now)


def test_log_limiter_forgets_the_oldest_key_beyond_its_bound():
    limiter = LogLimiter(interval_s=60.0, max_keys=2)
    assert limiter.allow("a", 0.0) == (True, 0)
    assert limiter.allow("b", 0.0) == (True, 0)
    assert limiter.allow("c", 0.0) == (True, 0)  # "a" is forgotten
    assert limiter.allow("b", 1.0) == (False, 0)
    assert limiter.allow("a", 1.0) == (True, 0)  # forgotten, so it may log again
