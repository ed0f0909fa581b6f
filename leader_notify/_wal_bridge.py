"""Use wal_s3's WalReader and trio Checkpoints from the asyncio agent.

The reader (block cache with single-flight, retries, `agent_read` audit records) runs on
anyio, so the agent calls it on its own asyncio loop: a read costs the GET's worker
thread and nothing more. Until it did, every read crossed to a trio thread and back,
0.6-1.1 ms of each notification at p50 in bench/bench_router.py on the 2-core host.

Why a bridge is left: wal_s3's checkpoints are trio, aiokafka needs asyncio, and a
manifest is written about once a second, so it is not worth porting. One dedicated thread runs
a trio loop for the agent's lifetime. A call hands its coroutine function straight to
that loop (`TrioToken.run_sync_soon` starts it in the portal's nursery) and the result
comes back with `loop.call_soon_threadsafe`: two thread switches per call, no thread
pool in between (a pool thread parked in `trio.from_thread.run` cost two more switches,
about 0.3 ms of every notification on a busy 2-core machine). Cancelling the asyncio
side cancels the trio task. Both sides keep their own structured concurrency; the
agent's read semaphore bounds the calls in flight. wal_s3's errors stop here and become
ZoneReadError / CheckpointFailed.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio

START_TIMEOUT_S = 10.0


class ZoneReadError(Exception):
    """The zone share could not be read or did not verify (the proxy may retry)."""


class CheckpointFailed(Exception):
    pass


class PortalClosed(RuntimeError):
    """The trio thread stopped before the call finished."""


class TrioPortal:
    """A trio loop in its own thread; `await portal.call(fn, *args)` runs fn there."""

    def __init__(self) -> None:
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._stop: trio.Event | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Raises RuntimeError if the trio thread does not come up."""
        ready = threading.Event()

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                self._token = trio.lowlevel.current_trio_token()
                self._nursery = nursery
                self._stop = trio.Event()
                ready.set()
                await self._stop.wait()
                nursery.cancel_scope.cancel()  # calls still running end as PortalClosed

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

    async def call(self, fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
        """fn(*args, **kwargs) in the trio thread; raises what fn raises, PortalClosed if the
        portal stops first."""
        if self._token is None or self._nursery is None:
            raise PortalClosed("the trio bridge is not running")
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()
        scope = trio.CancelScope()  # cancelled from asyncio if the caller gives up

        def deliver(value: Any, exc: BaseException | None) -> None:  # in the asyncio thread
            if future.done():
                return
            if exc is not None:
                future.set_exception(exc)
            else:
                future.set_result(value)

        def send(value: Any, exc: BaseException | None) -> None:  # from the trio thread
            try:
                loop.call_soon_threadsafe(deliver, value, exc)
            except RuntimeError:
                pass  # the asyncio loop is closed: no one waits any more

        async def run() -> None:
            delivered = False
            try:
                with scope:
                    try:
                        value = await fn(*args, **kwargs)
                    except Exception as exc:  # noqa: BLE001 - handed to the asyncio caller as is
                        send(None, exc)
                    else:
                        send(value, None)
                    delivered = True
            finally:
                if not delivered:
                    send(None, PortalClosed("the call was cancelled in the trio bridge"))

        nursery = self._nursery

        def spawn() -> None:  # in the trio thread
            try:
                nursery.start_soon(run)
            except RuntimeError:  # the nursery closed: the portal is stopping
                send(None, PortalClosed("the trio bridge has stopped"))

        try:
            self._token.run_sync_soon(spawn)
        except trio.RunFinishedError as exc:
            raise PortalClosed("the trio bridge has stopped") from exc
        try:
            return await future
        except asyncio.CancelledError:
            try:
                self._token.run_sync_soon(scope.cancel)
            except trio.RunFinishedError:
                pass
            raise


class WalZoneReader:
    """The agent's ZoneReader: wal_s3.WalReader (block cache, retries, audit) on the agent's loop."""

    def __init__(self, wal_reader: Any) -> None:
        self._reader = wal_reader

    async def read_zone(self, key: str, zone_offset: int, zone_length: int, *, source_zone: str,
                        expected_entries: int) -> list:
        """Entries of the range, CRCs verified. Raises ZoneReadError."""
        from wal_s3.format import WalFormatError  # noqa: PLC0415
        from wal_s3.reader import WalReadError  # noqa: PLC0415

        try:
            return await self._reader.read_zone(key, zone_offset, zone_length, source_zone=source_zone,
                                                expected_entries=expected_entries)
        except (WalReadError, WalFormatError, ValueError) as exc:
            raise ZoneReadError(f"{key} [{zone_offset}+{zone_length}]: {exc}") from exc


def wal_checkpoint(portal: TrioPortal, checkpoints: Any) -> Callable[[Sequence[str], str], Awaitable[None]]:
    """wal_s3 Checkpoints.mark_applied_many (one manifest PUT) as the agent's asyncio checkpoint hook."""

    async def checkpoint(keys: Sequence[str], zone: str) -> None:
        from wal_s3.gc import CheckpointError  # noqa: PLC0415

        try:
            await portal.call(checkpoints.mark_applied_many, list(keys), zone)
        except (CheckpointError, ValueError) as exc:
            raise CheckpointFailed(str(exc)) from exc

    return checkpoint
