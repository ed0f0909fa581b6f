"""The periodic flush loop of the audit's interval summaries, for trio and asyncio alike.

Strategy: every interval summary of the audit (the router's produce summaries, the WAL
path's object summaries, the pass-through's bytes per broker and per Fetch partition) has
the same shell: counters filled by the code that accounts, made into records every
`interval_s`, and once more when the task ends, so a shutdown loses nothing. This is that
loop, once. It sleeps with anyio, so the same function runs in the proxy's trio nursery and
in the agent's asyncio tasks; a test drives it with trio's virtual clock.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio


async def flush_every(interval_s: float, flush: Callable[[], None], last: Callable[[], None] | None = None) -> None:
    """Call `flush` every `interval_s` until cancelled; then `last` (default: `flush` once more).
    Raises ValueError for an interval that is not positive."""
    if interval_s <= 0:
        raise ValueError(f"flush interval must be > 0, got {interval_s}")
    try:
        while True:
            await anyio.sleep(interval_s)
            flush()
    finally:
        (last or flush)()
