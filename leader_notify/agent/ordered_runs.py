"""Which pipelined (ordered) partition runs an agent may append, after one failed (pure).

Strategy: a proxy may keep several notifications to one agent in flight on one connection
(`notify.pipeline_depth`, docs/notify-protocol.md "Pipelining"), in object order, each
flagged `ordered`. The agent's tickets already make object k+1's run of a partition wait
until object k's run of it is through. What tickets cannot see is a failure: if k's run of
partition p failed (the leader moved, the append timed out), the proxy will re-send k, and
k+1's batches of p, already at the agent, must not be appended before that re-send.

So a failed ordered run marks its (proxy, topic, partition) held, with its error code,
before its ticket is passed on; every later ordered run of that key fails at its turn with
the same code, unappended (the proxy re-sends those objects too). The hold ends when an
unordered request of the same proxy reaches the key's turn: the proxy re-sends serially,
unordered, only after every ordered request it had in flight was answered, so nothing
ordered can still be behind it. Unordered runs never set a hold (the sender awaits each
before the next, as before pipelining existed).

Keys are per proxy id: other proxies' producers are other producers, with no order between
them. Held keys are few (one per partition that failed while pipelined, until the proxy's
re-send a round trip later); they are bounded all the same (`max_keys`, the oldest
dropped first).

No I/O, no clock, no asyncio: the agent calls `turn` and `finished` from its callbacks.
"""

from __future__ import annotations

from collections import OrderedDict

MAX_HELD_KEYS = 65_536  # far above one proxy's partitions failing at once; bounds the agent's memory

RunKey = tuple[str, str, int]  # (proxy_id, topic, partition)


class OrderedRuns:
    """Holds of (proxy, topic, partition) after a failed ordered run."""

    def __init__(self, max_keys: int = MAX_HELD_KEYS) -> None:
        if max_keys < 1:
            raise ValueError("max_keys must be >= 1")
        self._max = max_keys
        self._held: OrderedDict[RunKey, int] = OrderedDict()

    def turn(self, key: RunKey, *, ordered: bool) -> int | None:
        """A run of `key` reached its turn: None to append it, else the error code to fail it
        with, unappended (an earlier ordered run of the key failed and was not re-sent yet)."""
        if not ordered:
            self._held.pop(key, None)  # the proxy's serial re-send: what it sends is appended
            return None
        return self._held.get(key)

    def finished(self, key: RunKey, *, ordered: bool, error_code: int) -> None:
        """A run of `key` is through, before its ticket is passed on; `error_code` is its first
        failed batch's code, 0 if every batch was appended."""
        if not ordered or error_code == 0:
            return
        self._held[key] = error_code
        self._held.move_to_end(key)
        while len(self._held) > self._max:
            self._held.popitem(last=False)

    def held(self, key: RunKey) -> int | None:
        return self._held.get(key)

    def __len__(self) -> int:
        return len(self._held)
