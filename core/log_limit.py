"""Rate-limited logging as a pure decision: at most one line per key per interval.

A refusal or timeout a peer can provoke at will (a flood of connections, a slowloris)
must not fill the log. The proxy's and the agent's listeners key it by (reason, source
address) or by source; the caller passes the time and logs how many lines were held back.
"""

from __future__ import annotations

from collections import OrderedDict

LOG_INTERVAL_S = 60.0  # at most one line per key per minute
LOG_MAX_KEYS = 4096  # keys remembered; the oldest is forgotten first (then it may log again)


class LogLimiter:
    """At most one log line per key per interval; counts what it held back."""

    def __init__(self, interval_s: float = LOG_INTERVAL_S, max_keys: int = LOG_MAX_KEYS) -> None:
        self.interval_s = interval_s
        self.max_keys = max_keys
        self._keys: OrderedDict[object, tuple[float, int]] = OrderedDict()  # key -> (logged at, held back since)

    def allow(self, key: object, now: float) -> tuple[bool, int]:
        """(whether to log now, how many lines for `key` were held back since its last line)."""
        known = self._keys.get(key)
        if known is not None and now - known[0] < self.interval_s:
            self._keys[key] = (known[0], known[1] + 1)
            return False, 0
        self._keys[key] = (now, 0)
        self._keys.move_to_end(key)
        while len(self._keys) > self.max_keys:
            self._keys.popitem(last=False)
        return True, known[1] if known is not None else 0
