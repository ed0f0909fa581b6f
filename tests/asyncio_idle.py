"""asyncio's counterpart of trio.testing.wait_all_tasks_blocked, for tests that must know
every other task has gone as far as it can (to show one did not overtake another)."""

from __future__ import annotations

import asyncio

MAX_TURNS = 10_000


async def all_tasks_blocked() -> None:
    """Return once nothing but this task is ready to run on the running loop: every other
    task waits on a future, a timer or I/O. Fails after MAX_TURNS turns (a task that never
    blocks)."""
    loop = asyncio.get_running_loop()
    for _ in range(MAX_TURNS):
        await asyncio.sleep(0)  # one turn of the loop: what was ready has run
        if not loop._ready:  # type: ignore[attr-defined]  # noqa: SLF001 - the base event loop's ready queue
            return
    raise AssertionError(f"the loop still had ready callbacks after {MAX_TURNS} turns")
