"""The proxy's window of pipelined notifications to one agent (pure).

Strategy: a ZoneNotifier with `notify.pipeline_depth` > 1 keeps up to that many objects'
notifications in flight on one connection to its agent, in object order, flagged
`ordered`; the agent starts object k+1's appends while object k's are in flight, keeping
each partition's order with its tickets. This class decides, from the answers as they
arrive, what the notifier does next; the notifier only sends, awaits and hands results on.

- An answer with every entry applied is final: `Accept`, in object order.
- Anything else (an entry error, a refusal, a broken connection, a timeout) starts a
  recovery: no ordered request is sent any more; once every ordered request in flight
  is answered (none can still be on its way to the agent), each object whose answer was
  not all applied, in object order, is delivered again `Serial`ly, unordered, one at a
  time (the sender's own attempts, backoff and gray-agent rules; entries already applied
  are answered from the agent's applied map or by the leader's duplicate check). The
  agent held every partition whose ordered run failed (ordered_runs.py) so that no later
  ordered batch of it was appended before this re-send. Pipelining resumes after the last.
- An object the notifier cannot pipeline (the agent is gray: one probe at a time) is
  `sent(ordered=False)`: it is delivered serially at its turn, as in a recovery.

So per partition, a batch is appended only after the batches of the objects before it
were (or were answered as failed for good), and an object is settled, for the
checkpoint and its waiters, only when every one of its entries has its final result.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class Accept:
    """The pipelined answer of `key` is final (every entry applied)."""

    key: str


@dataclass(frozen=True)
class Serial:
    """Deliver `key` again (or for the first time), unordered, and report `serial_done`."""

    key: str


Step = Accept | Serial


class OrderedWindow:
    """Objects in flight to one agent, oldest first. Keys are WAL object keys (unique)."""

    def __init__(self, depth: int) -> None:
        if depth < 1:
            raise ValueError("depth must be >= 1")
        self.depth = depth
        self._in_flight: deque[str] = deque()
        self._answers: dict[str, bool] = {}  # key -> every entry applied
        self._recovering = False
        self._serial: str | None = None  # a Serial step handed out, not yet done

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    @property
    def recovering(self) -> bool:
        return self._recovering

    def can_send(self) -> bool:
        """May the next object go (ordered or not)? Not while a recovery runs, not past the depth."""
        return not self._recovering and len(self._in_flight) < self.depth

    def sent(self, key: str, *, ordered: bool = True) -> None:
        """`key` is the next object; call before its frame leaves (its answer may come at once).
        Raises RuntimeError if `can_send()` is false."""
        if not self.can_send():
            raise RuntimeError(f"{key}: sent while the window is full or recovering")
        self._in_flight.append(key)
        if not ordered:
            self.answered(key, ok=False)

    def answered(self, key: str, *, ok: bool) -> None:
        """The ordered answer of `key` (ok: every entry applied). Raises KeyError for a key not in flight."""
        if key not in self._in_flight or key in self._answers:
            raise KeyError(key)
        self._answers[key] = ok
        if not ok:
            self._recovering = True  # stop sending at once: nothing ordered may follow a failure

    def next_step(self) -> Step | None:
        """What to do now, or None: wait for an answer (or for `serial_done`)."""
        if self._serial is not None or not self._in_flight:
            return None
        head = self._in_flight[0]
        ok = self._answers.get(head)
        if ok is None:
            return None
        if ok:
            self._pop()
            return Accept(head)
        # A failed head is re-sent only when no ordered request is still in flight: the
        # unordered re-send ends the agent's hold, which must not let an ordered one through.
        if any(key not in self._answers for key in self._in_flight):
            return None
        self._serial = head
        return Serial(head)

    def serial_done(self, key: str) -> None:
        """The Serial delivery of `key` ended (with its final results or an error)."""
        if self._serial != key:
            raise KeyError(key)
        self._serial = None
        self._pop()

    def _pop(self) -> None:
        del self._answers[self._in_flight.popleft()]
        if not self._in_flight and self._serial is None:
            self._recovering = False
