"""One notifier per destination agent: each WAL object's share (or, in a zone with several
agents, the agent's run of it) announced to the agent exactly once, in object sequence
order, several in flight on one connection (`notify.pipeline_depth`) or one at a time with
the objects queued right behind the one in flight prefetched; acknowledged shares re-sent.

The router's announcer (`router/wal_path.py` ObjectAnnouncer) announces every released object here
and asks for each entry's answer with `on_result`; this module and the sender
(`leader_notify/sender/sender.py`) own everything about getting the answer.
"""

from __future__ import annotations

import collections
import functools
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import trio

from core import errors
from leader_notify import metrics
from leader_notify.protocol import EntryResult
from leader_notify.sender.ordered_window import Accept, OrderedWindow
from leader_notify.sender.owners import AgentMap
from leader_notify.sender.pipeline import PipeAnswer, Pipeline, PipeSender
from leader_notify.sender.sender import AnnouncedObject, Started

log = logging.getLogger(__name__)

MAX_NOTIFY_QUEUE = 1024  # objects waiting for their notification per zone; the writer's buffer bound comes first
REDRIVE_BACKOFF_INITIAL_S = 0.5  # re-sending acknowledged (ack_mode wal) entries after a failed delivery
REDRIVE_BACKOFF_MAX_S = 10.0

# The agent's answer for one zone share: one result per entry, or why the notification failed.
ZoneAnswer = list[EntryResult] | Exception
AnswerCallback = Callable[[ZoneAnswer], None]


class NotifySink(PipeSender, Protocol):
    """What a notifier needs of the sender (NotifySender; fakes in unit tests)."""

    @property
    def agents(self) -> AgentMap: ...

    @property
    def prefetch_depth(self) -> int: ...

    @property
    def pipeline_depth(self) -> int: ...

    def share_of(self, zone: str, topic: str, partition: int) -> str: ...

    def start(self, flushed: AnnouncedObject, dest_zone: str, agent: int = 0) -> Started | None: ...

    async def prefetch(self, flushed: AnnouncedObject, dest_zone: str, agent: int = 0) -> bool: ...

    async def notify(self, flushed: AnnouncedObject, dest_zone: str, *, agent: int | None = None,
                     started: Started | None = None,
                     on_answer: Callable[[list[EntryResult]], None] | None = None,
                     hedge: bool = False) -> list[EntryResult]: ...


class OrderedPipe(Protocol):
    """Pipelined notifications to one agent (leader_notify/sender/pipeline.py Pipeline; fakes in unit tests)."""

    async def send(self, flushed: AnnouncedObject, on_answer: Callable[[PipeAnswer], None]) -> None:
        """Send `flushed` ordered; `on_answer` gets its answer or an exception, once. Never raises."""
        ...


class ZoneNotifier:
    """Sends one notification per (object, zone agent), in object sequence order.

    With `sender.pipeline_depth` > 1 (the default) up to that many objects are in flight to
    the agent at once, on one connection, flagged ordered: the agent appends object k+1
    while object k's appends are in flight, each partition in order (leader_notify/sender/pipeline.py,
    ordered_window.py: an answer that is not every entry applied stops the pipeline, and
    once every ordered request in flight is answered, each such object is re-sent serially,
    in order, before pipelining resumes). Nothing is prefetched then: the objects in the
    window are read concurrently by the agent anyway. With depth 1, one at a time:

    `agent`: which agent of the zone (its index in `notify.agents`); its entries of each
    share are one run `[first, end)` of the share's entries (the writer's layout), and the
    results it gets are that run's. While an object is in flight, the
    `sender.prefetch_depth` objects queued right behind it are prefetched (the agent reads
    them into its cache; appends stay one notification at a time): as each notification
    starts, the window moves on by one object, so every object of a long queue is read
    ahead, not only those announced while few prefetches were running.

    Every entry of the zone's share asks for its result exactly once (the writer releases
    every entry of a durable object), so the results are dropped after the last one asks.

    A share holding entries of ack_mode=wal topics (`acked_topic`) was already answered to
    its producers: if the notification fails, the waiters get the failure at once, and the
    notifier then re-sends the share with backoff until the agent applied every such entry,
    before it notifies any later object of the zone (so a partition's later batches cannot
    overtake it). A non-retriable refusal ends the re-drive with an error log; the object
    stays in S3 for leader_notify/sender/recovery.py.
    """

    def __init__(self, zone: str, sender: NotifySink, nursery: trio.Nursery,
                 acked_topic: Callable[[str], bool] | None = None, agent: int = 0,
                 open_pipe: Callable[[NotifySink, str, int, trio.Nursery], OrderedPipe] = Pipeline) -> None:
        """`open_pipe(sender, zone, agent, nursery)`: the ordered pipeline used when
        `sender.pipeline_depth` > 1 (fakes in unit tests)."""
        self.zone = zone
        self.agent = agent
        self._sender = sender
        self._nursery = nursery
        self._prefetch_depth = sender.prefetch_depth
        self._prefetching = 0
        # Objects announced behind the one in flight, in order, and whether their prefetch was sent.
        self._behind: collections.deque[_Behind] = collections.deque()
        self._acked_topic = acked_topic
        self._send, self._receive = trio.open_memory_channel[tuple[AnnouncedObject, Started | None]](MAX_NOTIFY_QUEUE)
        self._results: dict[str, _ZoneResult] = {}
        self._unfinished = 0  # announced objects not yet notified (re-sends included)
        self._idle = trio.Event()
        self._idle.set()
        self._depth = sender.pipeline_depth
        if self._depth > 1:
            self._window = OrderedWindow(self._depth)
            self._window_moved = trio.Event()
            self._pipe = open_pipe(sender, zone, agent, nursery)
            self._flushed_by_key: dict[str, AnnouncedObject] = {}  # sent, not yet settled
            self._timed_out: set[str] = set()  # keys whose pipelined attempt timed out, not yet settled
            self._sending_done = False
            nursery.start_soon(self._send_pipelined)
            nursery.start_soon(self._settle_pipelined)
        else:
            nursery.start_soon(self._run)

    def announce(self, flushed: AnnouncedObject, first: int = 0, end: int | None = None) -> None:
        """Called synchronously, in sequence order, as each object becomes durable.

        With nothing of this zone queued or in flight, the notification's frame is written
        right here (`sender.start`), in the step that learnt of the object's durability,
        instead of one scheduler pass later in this notifier's task (which then only awaits
        the answer).
        """
        started = (self._sender.start(flushed, self.zone, self.agent)
                   if self._unfinished == 0 and self._depth == 1 else None)
        if self._unfinished and self._depth == 1:
            # An earlier object of this agent is being applied: have the agent read this one
            # ahead, so its notification finds the bytes in the agent's cache (appends stay in order).
            self._behind.append(_Behind(flushed))
            self._prefetch_window()
        end = len(flushed.zones[self.zone].entries) if end is None else end
        self._results[flushed.key] = _ZoneResult(end - first, first=first)
        self._unfinished += 1
        self._idle = trio.Event() if self._unfinished == 1 else self._idle
        self._send.send_nowait((flushed, started))

    def _prefetch_window(self) -> None:
        """Prefetch the first `prefetch_depth` objects behind the one in flight that are not
        yet, with at most `prefetch_depth` prefetches running."""
        for behind in itertools.islice(self._behind, self._prefetch_depth):
            if self._prefetching >= self._prefetch_depth:
                return
            if not behind.prefetched:
                behind.prefetched = True
                self._prefetching += 1
                self._nursery.start_soon(self._prefetch, behind.flushed)

    async def _prefetch(self, flushed: AnnouncedObject) -> None:
        try:
            await self._sender.prefetch(flushed, self.zone, self.agent)
        finally:
            self._prefetching -= 1
            self._prefetch_window()

    def first_index(self, key: str) -> int:
        """The zone-share index of this agent's first entry of `key` (its result 0)."""
        return self._results[key].first

    async def wait_idle(self) -> None:
        """Until every object announced so far has been notified (and re-sent where owed)."""
        await self._idle.wait()

    @property
    def pending_objects(self) -> int:
        return len(self._results)

    def on_result(self, key: str, callback: AnswerCallback) -> None:
        """Call `callback` with the agent's results for `key`'s share of this zone (or the
        exception the notification raised) once they are in: at once if they already are.
        Every entry of an announced share asks exactly once."""
        slot = self._results[key]
        if slot.done:
            self._hand_over(key, slot, callback)
        else:
            slot.callbacks.append(callback)

    def _answered(self, key: str, slot: _ZoneResult, value: ZoneAnswer) -> None:
        slot.value = value
        slot.done = True
        callbacks, slot.callbacks = slot.callbacks, []
        for callback in callbacks:
            self._hand_over(key, slot, callback)

    def _hand_over(self, key: str, slot: _ZoneResult, callback: AnswerCallback) -> None:
        assert slot.value is not None  # handed over once done
        slot.waiters_left -= 1
        if slot.waiters_left == 0:
            del self._results[key]
        try:
            callback(slot.value)
        except Exception:  # one waiter's bug must not keep the others from their results
            log.exception("a notification result callback failed")

    async def _notify(self, flushed: AnnouncedObject, started: Started | None = None,
                      on_answer: Callable[[list[EntryResult]], None] | None = None,
                      hedge: bool = False) -> ZoneAnswer:
        try:
            if hedge:  # the pipelined attempt timed out: the serial one is its hedge
                return await self._sender.notify(flushed, self.zone, agent=self.agent, on_answer=on_answer,
                                                 hedge=True)
            return await self._sender.notify(flushed, self.zone, agent=self.agent, started=started,
                                             on_answer=on_answer)
        except Exception as exc:  # noqa: BLE001 - NotifyError and anything unexpected: every waiter gets it
            return exc

    async def _run(self) -> None:
        async for flushed, started in self._receive:
            if self._behind and self._behind[0].flushed is flushed:
                self._behind.popleft()  # now in flight: the window moves on
                self._prefetch_window()
            try:
                await self._deliver(flushed, started)
            finally:
                self._unfinished -= 1
                if self._unfinished == 0:
                    self._idle.set()

    # ------------------------------------------------------------ pipelined (pipeline_depth > 1)

    def _moved(self) -> None:
        self._window_moved.set()
        self._window_moved = trio.Event()

    async def _send_pipelined(self) -> None:
        """Send each object as it comes, ordered on the pipeline, while the window lets it;
        an object for an agent that is gray goes serially at its turn (one probe at a time)."""
        try:
            async for flushed, _started in self._receive:
                while not self._window.can_send():
                    await self._window_moved.wait()
                self._flushed_by_key[flushed.key] = flushed
                if (self._sender.guard(self.zone, self.agent).gray
                        or not self._sender.pipelining_allowed(self.zone, self.agent)):
                    # Gray: one probe at a time; an agent of the previous protocol version:
                    # no ordered requests (pipeline.py). Either way serially, at its turn.
                    self._window.sent(flushed.key, ordered=False)
                    self._moved()
                    continue
                self._window.sent(flushed.key)
                await self._pipe.send(flushed, functools.partial(self._pipe_answered, flushed.key))
        finally:
            self._sending_done = True
            self._moved()

    def _pipe_answered(self, key: str, value: PipeAnswer) -> None:
        ok = not isinstance(value, Exception) and all(r.ok for r in value)
        if isinstance(value, trio.TooSlowError):
            self._timed_out.add(key)  # its serial re-send is the hedge of this attempt
        if ok:  # final: the producers' waiters get it now, whatever is still ahead of it
            slot = self._results[key]
            if not slot.done:
                self._answered(key, slot, value)
        self._window.answered(key, ok=ok)
        self._moved()

    async def _settle_pipelined(self) -> None:
        """Settle objects in order as the window says: accept, or deliver serially."""
        while True:
            step = self._window.next_step()
            if step is None:
                if self._sending_done and self._window.in_flight == 0:
                    return
                await self._window_moved.wait()
                continue
            flushed = self._flushed_by_key.pop(step.key)
            try:
                if not isinstance(step, Accept):
                    try:
                        await self._deliver(flushed, None, hedge=step.key in self._timed_out)
                    finally:
                        self._window.serial_done(step.key)
            finally:
                self._timed_out.discard(step.key)
                self._moved()  # room in the window, or the recovery is over
                self._unfinished -= 1
                if self._unfinished == 0:
                    self._idle.set()

    async def _deliver(self, flushed: AnnouncedObject, started: Started | None, hedge: bool = False) -> None:
        slot = self._results[flushed.key]
        # The waiters get an agent's answer as the sender decodes it (on_answer), before the
        # sender's own metrics and audit record; failures when notify gives up.
        value = await self._notify(flushed, started, functools.partial(self._answered, flushed.key, slot), hedge)
        if not slot.done:
            self._answered(flushed.key, slot, value)
        assert slot.value is not None  # done
        if self._acked_topic is None:
            return  # no ack_mode wal topic: nothing is owed beyond the first answer
        refs = flushed.zones[self.zone].entries[slot.first:slot.first + slot.waiters_total]
        acked = [i for i, ref in enumerate(refs) if self._acked_topic(ref.topic)]
        if acked and not acked_entries_applied(slot.value, acked):
            await self._redrive(flushed, acked, slot.value)

    async def _redrive(self, flushed: AnnouncedObject, acked: list[int], value: ZoneAnswer) -> None:
        metrics.REDRIVE_PENDING.labels(self.zone).set(1)
        backoff_s = REDRIVE_BACKOFF_INITIAL_S
        attempts = 1
        try:
            while not acked_entries_applied(value, acked):
                final = (not errors.exception_is_retriable(value) if isinstance(value, Exception)
                         else not any(errors.is_retriable(value[i].error_code) for i in acked
                                      if not acked_entries_applied(value, [i])))
                if final:  # refused for good (keys, foreign object), or the leader can never take the batch
                    log.error("acknowledged (ack_mode wal) entries of %s for %s not appended: %s; the object stays "
                              "in S3 (GC holds it; azsidecar recover)", flushed.key, self.zone,
                              value if isinstance(value, Exception) else
                              [value[i].error_code for i in acked if not acked_entries_applied(value, [i])])
                    return
                log.warning("re-sending %s to %s (acknowledged entries, attempt %d): %s", flushed.key, self.zone,
                            attempts + 1, value if isinstance(value, Exception) else "entries failed")
                await trio.sleep(backoff_s)  # backoff between deliveries, not synchronization
                backoff_s = min(2 * backoff_s, REDRIVE_BACKOFF_MAX_S)
                value = await self._notify(flushed)
                attempts += 1
                metrics.REDRIVES.labels(self.zone).inc()
            log.info("acknowledged entries of %s applied in %s after %d notifications", flushed.key, self.zone,
                     attempts)
        finally:
            metrics.REDRIVE_PENDING.labels(self.zone).set(0)


def acked_entries_applied(value: ZoneAnswer, indexes: list[int]) -> bool:
    """Did the agent's answer (`value`: entry results, or the exception) apply each entry of `indexes`?"""
    if isinstance(value, Exception):
        return False
    return all(value[i].error_code in (errors.NONE, errors.DUPLICATE_SEQUENCE_NUMBER) or value[i].duplicate
               for i in indexes)


@dataclass
class _Behind:
    flushed: AnnouncedObject
    prefetched: bool = False


@dataclass
class _ZoneResult:
    waiters_left: int
    first: int = 0  # the agent's first entry in the zone share: result i is entry first + i
    waiters_total: int = -1
    done: bool = False
    value: ZoneAnswer | None = None
    callbacks: list[AnswerCallback] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.waiters_total < 0:
            self.waiters_total = self.waiters_left
