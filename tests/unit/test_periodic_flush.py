"""The one periodic flush loop of the audit's summaries (core.periodic_flush), on trio's
virtual clock and on asyncio."""

from __future__ import annotations

import asyncio

import pytest
import trio

from core.periodic_flush import flush_every


@pytest.mark.trio
async def test_flushes_every_interval_and_last_once_when_cancelled(autojump_clock):
    calls: list[tuple[str, float]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(flush_every, 10.0, lambda: calls.append(("flush", trio.current_time())),
                           lambda: calls.append(("last", trio.current_time())))
        await trio.sleep(25.0)
        nursery.cancel_scope.cancel()
    assert calls == [("flush", 10.0), ("flush", 20.0), ("last", 25.0)]


def test_runs_on_asyncio_and_calls_last_on_the_way_out():
    calls: list[str] = []

    async def main() -> None:
        flushed = asyncio.Event()

        def flush() -> None:
            calls.append("flush")
            flushed.set()

        task = asyncio.create_task(flush_every(0.01, flush, lambda: calls.append("last")))
        await asyncio.wait_for(flushed.wait(), timeout=10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert calls[-1] == "last" and set(calls[:-1]) == {"flush"}


def test_refuses_an_interval_that_is_not_positive():
    with pytest.raises(ValueError, match="> 0"):
        asyncio.run(flush_every(0.0, lambda: None))
