"""Whose turn it is to write on one upstream connection: a fair mutex with no owner task.

A connection's requests must go out whole and in the order they were submitted, so its
writers take turns. trio.Lock does that, and also records its owner and (trio >= 0.25)
registers a parking-lot breaker for it on every acquire: a coroutine-state check and two
table updates per produce request forwarded, a measurable share of the local route's CPU.
Every writer here takes and gives back its turn in one `try`/`finally` of its own, so an
owner check adds nothing. Waiters are served first come, first served, and a turn given
back with writers waiting goes straight to the oldest (no barging: the order is kept).
"""

from __future__ import annotations

from types import TracebackType

import trio


class SendTurn:
    """A FIFO mutex: `take_nowait`/`take` then `give_back`, or `async with`."""

    __slots__ = ("_taken", "_waiting")

    def __init__(self) -> None:
        self._taken = False
        self._waiting = trio.lowlevel.ParkingLot()

    def taken(self) -> bool:
        return self._taken

    def take_nowait(self) -> bool:
        """Take the turn if it is free and nobody waits for it (no checkpoint); False otherwise."""
        if self._taken or self._waiting:
            return False
        self._taken = True
        return True

    async def take(self) -> None:
        """Wait for the turn, behind every writer already waiting (a checkpoint either way).
        Cancelled while it waits: the turn is not taken."""
        await trio.lowlevel.checkpoint_if_cancelled()
        if self.take_nowait():
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        await self._waiting.park()  # woken by give_back, with the turn handed over

    def give_back(self) -> None:
        """Hand the turn to the oldest waiting writer, or free it. Raises RuntimeError if it
        was not taken."""
        if not self._taken:
            raise RuntimeError("give_back of a turn not taken")
        if self._waiting:
            self._waiting.unpark()  # stays taken: it is the woken writer's now
        else:
            self._taken = False

    async def __aenter__(self) -> None:
        await self.take()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.give_back()
