"""Use wal_s3's trio WalReader and Checkpoints from the asyncio agent.

Why a bridge: aiokafka needs asyncio, wal_s3's reader (block cache with single-flight,
retries, `agent_read` audit records) and checkpoints are trio. One dedicated thread runs
a trio loop for the agent's lifetime; asyncio calls into it with
`trio.from_thread.run` from a worker thread. Both sides keep their own structured
concurrency; the agent's read semaphore bounds the calls in flight. wal_s3's errors stop
here and become ZoneReadError / CheckpointFailed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import trio

START_TIMEOUT_S = 10.0


class ZoneReadError(Exception):
    """The zone share could not be read or did not verify (the proxy may retry)."""


class CheckpointFailed(Exception):
    pass


class TrioPortal:
    """A trio loop in its own thread; `await portal.call(fn, *args)` runs fn there."""

    def __init__(self, max_threads: int) -> None:
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._thread: threading.Thread | None = None
        # Worker threads that wait on the trio side; bounded like any thread pool.
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=max_threads, thread_name_prefix="wal-bridge")

    def start(self) -> None:
        """Raises RuntimeError if the trio thread does not come up."""
        ready = threading.Event()

        async def main() -> None:
            self._token = trio.lowlevel.current_trio_token()
            self._stop = trio.Event()
            ready.set()
            await self._stop.wait()

        self._thread = threading.Thread(target=trio.run, args=(main,), name="wal-bridge-trio", daemon=True)
        self._thread.start()
        if not ready.wait(START_TIMEOUT_S):
            raise RuntimeError("trio bridge thread did not start")

    def close(self) -> None:
        if self._token is not None and self._stop is not None:
            try:
                trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
            except trio.RunFinishedError:
                pass
        if self._thread is not None:
            self._thread.join(START_TIMEOUT_S)
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def call(self, fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._pool, lambda: trio.from_thread.run(lambda: fn(*args, **kwargs), trio_token=self._token))


class WalZoneReader:
    """The agent's ZoneReader: wal_s3.WalReader (block cache, retries, audit) via the portal."""

    def __init__(self, portal: TrioPortal, wal_reader: Any) -> None:
        self._portal = portal
        self._reader = wal_reader

    async def read_zone(self, key: str, zone_offset: int, zone_length: int, *, source_zone: str,
                        expected_entries: int) -> list:
        """Entries of the range, CRCs verified. Raises ZoneReadError."""
        from wal_s3.format import WalFormatError  # noqa: PLC0415
        from wal_s3.reader import WalReadError  # noqa: PLC0415

        try:
            return await self._portal.call(self._reader.read_zone, key, zone_offset, zone_length,
                                           source_zone=source_zone, expected_entries=expected_entries)
        except (WalReadError, WalFormatError, ValueError) as exc:
            raise ZoneReadError(f"{key} [{zone_offset}+{zone_length}]: {exc}") from exc


def wal_checkpoint(portal: TrioPortal, checkpoints: Any) -> Callable[[str, str], Awaitable[None]]:
    """wal_s3 Checkpoints.mark_applied as the agent's asyncio checkpoint hook."""

    async def checkpoint(key: str, zone: str) -> None:
        from wal_s3.gc import CheckpointError  # noqa: PLC0415

        try:
            await portal.call(checkpoints.mark_applied, key, zone)
        except (CheckpointError, ValueError) as exc:
            raise CheckpointFailed(str(exc)) from exc

    return checkpoint
