"""The agent's GC checkpoints: each object applied and answered is named in the next
checkpoint manifest of its share, written after the answer (the proxy's produce latency must
not pay for an S3 PUT that only garbage collection reads), one manifest per
`checkpoint_interval_s` or at once when `checkpoint_max_keys` are waiting. Bounded: past
`max_pending` keys not yet in a written manifest, `add` waits for S3 (backpressure).

`manifests` (pure) groups the waiting keys; `CheckpointBatcher` times and writes them as
tracked tasks and audits each as a `checkpoint_write` record.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from core.audit import AuditSink

log = logging.getLogger(__name__)

Checkpoint = Callable[[Sequence[str], str], Awaitable[None]]  # (object keys, share) -> None: one manifest


def manifests(waiting: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
    """share -> the object keys of its manifest, in the order applied, each once (a re-sent
    notification is checkpointed once), from (object key, share) pairs."""
    by_share: dict[str, list[str]] = {}
    for key, share in waiting:
        by_share.setdefault(share, []).append(key)
    return {share: list(dict.fromkeys(keys)) for share, keys in by_share.items()}


class CheckpointBatcher:
    """Keys applied and answered, not yet in a written manifest, and the manifests in flight."""

    def __init__(self, checkpoint: Checkpoint, audit: AuditSink, interval_s: float, max_keys: int,
                 max_pending: int) -> None:
        self._checkpoint = checkpoint
        self._audit = audit
        self._interval_s = interval_s
        self._max_keys = max_keys
        self._room = asyncio.Semaphore(max_pending)
        self._waiting: list[tuple[str, str]] = []  # (object key, share name checkpointed)
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def add(self, key: str, share: str) -> None:
        """Name `key` in `share`'s next manifest (waits while `max_pending` keys are unwritten)."""
        await self._room.acquire()  # backpressure if S3 falls far behind
        self._waiting.append((key, share))
        if len(self._waiting) >= self._max_keys:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._interval_s, self.flush)

    def flush(self) -> None:
        """Start writing one manifest per share of the waiting keys (tracked tasks)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiting, self._waiting = self._waiting, []
        per_share = collections.Counter(share for _key, share in waiting)  # the room each share's keys hold
        for share, keys in manifests(waiting).items():  # one, unless the zone has several agents
            task = asyncio.get_running_loop().create_task(self._write(keys, share, per_share[share]))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _write(self, keys: list[str], share: str, taken: int) -> None:
        started = time.perf_counter()
        status = "ok"
        try:
            await self._checkpoint(keys, share)
        except Exception as exc:  # noqa: BLE001 - GC keeps the objects (orphans later); appends stand
            status = "failed"
            log.warning("checkpoint manifest of %d objects for %s failed: %r", len(keys), share, exc)
        finally:
            for _ in range(taken):
                self._room.release()
        self._audit.emit("checkpoint_write", {"keys": len(keys), "wal_keys": ",".join(keys),
                                              "put_ms": (time.perf_counter() - started) * 1000, "status": status})

    async def drain(self) -> None:
        """Write the waiting keys now and wait for every manifest in flight."""
        self.flush()
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
