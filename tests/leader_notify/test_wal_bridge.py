"""The asyncio -> trio portal the agent reads WAL objects through: results, errors and
cancellation cross the thread boundary in both directions."""

from __future__ import annotations

import asyncio
import threading

import pytest
import trio

from leader_notify._wal_bridge import PortalClosed, TrioPortal

TIMEOUT_S = 10.0


def run(coro_fn):
    portal = TrioPortal()
    portal.start()
    try:
        return asyncio.run(asyncio.wait_for(coro_fn(portal), TIMEOUT_S))
    finally:
        portal.close()


def test_result_and_thread():
    async def where(x):
        await trio.sleep(0)  # a real trio checkpoint: this runs inside the trio loop
        return x * 2, threading.current_thread().name

    value, thread = run(lambda portal: portal.call(where, 21))
    assert value == 42
    assert thread == "wal-bridge-trio"


def test_exception_reaches_the_caller_unchanged():
    class Boom(Exception):
        pass

    async def fail():
        raise Boom("from trio")

    async def main(portal):
        with pytest.raises(Boom, match="from trio"):
            await portal.call(fail)

    run(main)


def test_cancelling_the_caller_cancels_the_trio_task():
    started, cancelled = threading.Event(), threading.Event()

    async def forever():
        started.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            cancelled.set()
            raise

    async def main(portal):
        task = asyncio.create_task(portal.call(forever))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, TIMEOUT_S)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await asyncio.get_running_loop().run_in_executor(None, cancelled.wait, TIMEOUT_S)

    run(main)


def test_close_ends_running_calls_and_refuses_new_ones():
    started = threading.Event()

    async def forever():
        started.set()
        await trio.sleep_forever()

    async def echo(x):
        return x

    async def main():
        portal = TrioPortal()
        portal.start()
        task = asyncio.create_task(portal.call(forever))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, TIMEOUT_S)
        portal.close()
        with pytest.raises(PortalClosed):
            await task
        with pytest.raises(PortalClosed):
            await portal.call(echo, 1)

    asyncio.run(asyncio.wait_for(main(), TIMEOUT_S))
