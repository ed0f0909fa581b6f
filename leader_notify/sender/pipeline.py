"""Pipelined notifications to one agent: several in flight on one connection, in order (trio).

Strategy: one connection of its own per (zone, agent), opened on first use and again after
a failure; the notifier's one task writes each request frame (flagged `ordered`) as its
object comes, and one reader task takes the answers, which the agent writes in request
order, and hands each to the callback its send registered. A frame order on one TCP
connection is the order the agent takes its partition tickets in, so object order is
kept per partition without waiting for answers (docs/notify-protocol.md, "Pipelining").

There are no attempts here: an answer that is not every entry applied, a refusal, a broken
connection or a timeout is handed on as it is, and the notifier's OrderedWindow turns it
into a serial re-send through `NotifySender.notify` (attempts, backoff, gray agents).
A failure of the connection fails every request in flight on it and closes it; the next
send opens a new one. Each request's deadline is `notify.timeout_s` from its send; the
reader waits for the oldest one's.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable
from typing import Protocol

import trio

from core.errors import SidecarError
from leader_notify import protocol as p
from leader_notify.metrics import SenderMetrics
from leader_notify.sender.sender import RECEIVE_CHUNK_BYTES, AnnouncedObject, Answer, NotifyError, _Conn
from wal_s3.latency import Attempt, LatencyGuard

log = logging.getLogger(__name__)

# What a pipelined request comes to: its entries' results as the agent answered them
# (an Answer), or why it has none.
PipeAnswer = list[p.EntryResult] | Exception
AnswerHandler = Callable[[PipeAnswer], None]


class PipeSender(Protocol):
    """What a pipeline needs of the sender (NotifySender): its requests, connections and records."""

    @property
    def timeout_s(self) -> float: ...

    @property
    def max_idle_s(self) -> float: ...

    # on_gray(zone, agent index): an attempt to that agent was abandoned at its gray deadline.
    on_gray: Callable[[str, int], None] | None

    @property
    def metrics(self) -> SenderMetrics: ...

    def guard(self, zone: str, agent: int = 0) -> LatencyGuard: ...

    def pipelining_allowed(self, dest_zone: str, agent: int) -> bool: ...

    def encode_ordered(self, flushed: AnnouncedObject, dest_zone: str, agent: int) -> tuple[p.NotifyRequest, bytes]: ...

    def units_of(self, request: p.NotifyRequest) -> float: ...

    def agent_address(self, dest_zone: str, agent: int) -> str: ...

    def first_contact(self, address: str, request: p.NotifyRequest) -> bool: ...

    def answered(self, address: str, request: p.NotifyRequest, response: p.NotifyResponse) -> None: ...

    async def connect(self, dest_zone: str, agent: int) -> _Conn: ...

    def record(self, dest_zone: str, key: str, entries: int, *, sent_bytes: int, received_bytes: int,
               rtt_s: float, status: str) -> None: ...


class PipelineBroken(SidecarError):
    """The pipeline's connection failed with requests in flight (they have no answer)."""


class _Waiting:
    __slots__ = ("request", "on_answer", "sent_at", "deadline", "frame_bytes", "gate", "units")

    def __init__(self, request: p.NotifyRequest, on_answer: AnswerHandler, sent_at: float, deadline: float,
                 frame_bytes: int, gate: Attempt, units: float) -> None:
        self.request, self.on_answer = request, on_answer
        self.sent_at, self.deadline, self.frame_bytes = sent_at, deadline, frame_bytes
        self.gate = gate  # the agent's LatencyGuard let it start: its round trip is reported there
        self.units = units  # its own work (gate.units adds the work in flight ahead of it)


class Pipeline:
    """Ordered notifications to `agent` of `dest_zone`. One task calls `send`; the reader
    runs in `nursery` (the notifier's)."""

    def __init__(self, sender: PipeSender, dest_zone: str, agent: int, nursery: trio.Nursery) -> None:
        self._sender = sender
        self._zone = dest_zone
        self._agent = agent
        self._address = sender.agent_address(dest_zone, agent)
        self._nursery = nursery
        self._timeout_s = sender.timeout_s
        self._max_idle_s = sender.max_idle_s
        self._conn: _Conn | None = None
        self._waiting: collections.deque[_Waiting] = collections.deque()
        self._read_scope: trio.CancelScope | None = None
        self._last_use = 0.0

    @property
    def in_flight(self) -> int:
        return len(self._waiting)

    async def send(self, flushed: AnnouncedObject, on_answer: AnswerHandler) -> None:
        """Send `flushed`'s notification; `on_answer` gets its answer (or the exception) exactly
        once, from the reader or from here. Never raises but for cancellation."""
        try:
            request, payload = self._sender.encode_ordered(flushed, self._zone, self._agent)
        except NotifyError as exc:
            on_answer(exc)
            return
        conn = self._conn
        if conn is not None and not self._waiting and time.monotonic() - self._last_use > self._max_idle_s:
            self._close(conn)  # idle past the agent's patience: a fresh one
            conn = None
        if conn is None:
            try:
                conn = await self._sender.connect(self._zone, self._agent)
            except Exception as exc:  # noqa: BLE001 - OSError, TooSlowError, ProtocolError, closed by the agent
                on_answer(exc)
                return
            version = conn.channel.version
            if version is None or not p.ordered_allowed(version):
                # An agent of the previous release may refuse the ordered flag: this object
                # goes the serial way (the window's recovery), and so do the next ones while
                # the sender knows the agent's version (notifier.py asks pipelining_allowed).
                conn.stream.socket.close()
                self._sender.metrics.pipelining_off.labels(dest_zone=self._zone, reason="agent_protocol").inc()
                log.warning("notification pipelining to %s/%d is off: the agent speaks notify protocol v%s, "
                            "ordered requests need v%d; its objects go one at a time until it is upgraded",
                            self._zone, self._agent, version, p.ORDERED_MIN_VERSION)
                on_answer(NotifyError(f"{self._zone}/{self._agent}: not pipelined, the agent speaks notify "
                                      f"protocol v{version}"))
                return
            self._conn = conn
            self._nursery.start_soon(self._read, conn)
        frame = conn.channel.send(p.MessageType.REQUEST, payload)
        now = trio.current_time()
        guard = self._sender.guard(self._zone, self._agent)
        units = self._sender.units_of(request)
        # Its round trip includes the work of the requests ahead of it on the connection (the
        # agent answers in order): its deadline is for theirs and its own, so a small object
        # behind a 512-partition one is not abandoned for the big one's time.
        # Behind a first contact (a partition new to the agent: first_contact.py) it waits for
        # that one's first append: a first contact too.
        first_contact = (any(ahead.gate.first_contact for ahead in self._waiting)
                         or self._sender.first_contact(self._address, request))
        gate = guard.start(now, units=units + sum(ahead.units for ahead in self._waiting), first_contact=first_contact)
        if gate is None:  # gray, its probe out: the notifier's serial path probes
            on_answer(NotifyError(f"{self._zone}/{self._agent}: not sent, the agent is not answering in time"))
            return
        # The gray-agent deadline, as a serial attempt has it.
        timeout_s = min(self._timeout_s, guard.attempt_timeout_s(now, gate))
        waiting = _Waiting(request, on_answer, time.monotonic(), now + timeout_s, len(frame), gate, units)
        self._waiting.append(waiting)
        self._last_use = time.monotonic()
        if self._read_scope is not None and len(self._waiting) == 1:
            self._read_scope.deadline = waiting.deadline
        try:
            with trio.fail_at(waiting.deadline):
                await conn.stream.send_all(frame)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError) as exc:
            self._fail(conn, exc)

    async def _read(self, conn: _Conn) -> None:
        """Hand each answer of `conn` to its request's callback, oldest first, until it fails."""
        try:
            while self._conn is conn:
                deadline = self._waiting[0].deadline if self._waiting else float("inf")
                with trio.CancelScope(deadline=deadline) as scope:
                    self._read_scope = scope
                    data = await conn.stream.receive_some(RECEIVE_CHUNK_BYTES)
                self._read_scope = None
                if scope.cancelled_caught:
                    if self._waiting and trio.current_time() >= self._waiting[0].deadline:
                        late = self._waiting[0]
                        raise trio.TooSlowError(f"no answer within {late.deadline - late.gate.started_at:.2f} s")
                    continue  # the deadline moved (a send after idling)
                if not data:
                    raise PipelineBroken("agent closed the connection")
                conn.channel.receive_data(data)
                received = len(data)
                while (frame := conn.channel.next_frame()) is not None:
                    self._answered(frame, received)
                    received = 0
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError,
                p.ProtocolError, PipelineBroken) as exc:
            self._fail(conn, exc)
        finally:
            self._read_scope = None
            if self._conn is conn and not self._waiting:
                self._close(conn)

    def _answered(self, frame: p.Frame, received_bytes: int) -> None:
        """Raises ProtocolError for an answer that is not the oldest request's."""
        if frame.type != p.MessageType.RESPONSE:
            raise p.ProtocolError("agent sent a request frame")
        if not self._waiting:
            raise p.ProtocolError("an answer with no request in flight")
        response = p.decode_response(frame.payload)
        waiting = self._waiting[0]
        request = waiting.request
        if response.request_id != request.request_id and not (
                response.request_id == 0 and response.status != p.RequestStatus.OK):
            raise p.ProtocolError(f"response for request {response.request_id}, expected {request.request_id}")
        self._waiting.popleft()
        if self._read_scope is not None:
            self._read_scope.deadline = self._waiting[0].deadline if self._waiting else float("inf")
        rtt_s = time.monotonic() - waiting.sent_at
        self._sender.guard(self._zone, self._agent).succeeded(waiting.gate, trio.current_time())
        self._sender.answered(self._address, request, response)
        answer: PipeAnswer
        if response.status == p.RequestStatus.OK and len(response.results) == len(request.entries):
            answer = Answer(response.results, waiting.frame_bytes, received_bytes)
            status = "ok" if p.results_all_ok(response.results) else "entry_errors"
        else:
            answer = NotifyError(f"agent answered {response.status.name}: {response.message} "
                                 f"({len(response.results)} results for {len(request.entries)} entries)")
            status = response.status.name.lower()
        self._sender.record(self._zone, request.key, len(request.entries), sent_bytes=waiting.frame_bytes,
                            received_bytes=received_bytes, rtt_s=rtt_s, status=status)
        _hand(waiting, answer)

    def _fail(self, conn: _Conn, exc: BaseException) -> None:
        """`conn` failed: every request in flight on it gets `exc`; it is closed."""
        if self._conn is not conn:
            return
        self._close(conn)
        failed, self._waiting = self._waiting, collections.deque()
        if failed:
            log.info("notification pipeline to %s/%d failed with %d in flight: %r", self._zone, self._agent,
                     len(failed), exc)
        error = exc if isinstance(exc, Exception) else NotifyError(repr(exc))
        guard = self._sender.guard(self._zone, self._agent)
        now = trio.current_time()
        timed_out = isinstance(exc, trio.TooSlowError)
        for k, waiting in enumerate(failed):
            guard.failed(waiting.gate, now, timed_out=timed_out and k == 0)
        if timed_out and failed and self._sender.on_gray is not None:
            self._sender.on_gray(self._zone, self._agent)  # the router's breaker counts it, as for a serial attempt
        for waiting in failed:
            self._sender.record(self._zone, waiting.request.key, len(waiting.request.entries),
                                sent_bytes=waiting.frame_bytes, received_bytes=0,
                                rtt_s=time.monotonic() - waiting.sent_at, status="failed")
            _hand(waiting, error)

    def _close(self, conn: _Conn) -> None:
        if self._conn is conn:
            self._conn = None
        if self._read_scope is not None:
            self._read_scope.cancel()
        conn.stream.socket.close()


def _hand(waiting: _Waiting, answer: PipeAnswer) -> None:
    try:
        waiting.on_answer(answer)
    except Exception:  # a waiter's bug must not stop the reader
        log.exception("a pipelined notification's answer callback failed")
