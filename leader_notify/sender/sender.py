"""The proxy side of the notification protocol (trio).

Strategy: one pool of TCP connections per destination agent; a connection carries one
request at a time, so `max_in_flight_per_zone` (a semaphore per agent address) bounds both
the open connections and the requests in flight. A new connection first exchanges HELLOs (one
round trip: each side's challenge, protocol.Channel); every frame on it is then bound to
the connection. Each attempt builds a fresh signed frame around the same request id,
waits for the response within `timeout_s`, and checks its MAC and request id. Idle
connections older than `max_idle_s` are closed rather than reused (the agent's idle
timeout is longer). A failed attempt closes its connection
(its stream position is unknown) and the next one waits with capped exponential backoff.
A notification is re-sent while the agent answers a retriable request status or any
entry carries a retriable Kafka error; re-sending is safe because the agent answers
already-applied entries from its applied map and leaders drop idempotent duplicates.
When attempts run out, `notify` raises NotifyError(retriable=True) and the proxy fails
the affected partitions with a retriable Kafka error.

Versions: a new connection offers this release's protocol version and speaks what the
agent answers; an agent of the previous release is reconnected to in its version
(versions.py, which remembers it for a while). Pipelined requests need version 4.

Several agents per zone: each partition belongs to one agent of its zone (owners.py); the
writer lays a zone's share out owner after owner, so each owner gets one notification per
object naming its own contiguous byte range and entries, and the share name it
checkpoints. Connections, slots and idle pools are per agent address.

Order: the caller awaits notifications to one agent one at a time, in WAL object order;
the agent keeps per-partition order in arrival order.

Gray agents (they hang instead of refusing): each zone keeps the round trips of its recent
successful attempts (wal_s3/latency.py), per unit of work (`units_of`: 1 per notification,
plus 1 per notify.gray_unit_entries entries and per notify.gray_unit_bytes of its range: an
agent appending 512 partitions' batches is not as quick as one appending one). An attempt
slower than its units x max(gray_factor x p99 of the last minute, gray_floor_s), at most
units x gray_max_s and timeout_s, is abandoned at once and reported through `on_gray(zone)` (the
router's breaker counts it); it is retried once, and while the zone stays gray only one
attempt at a time goes out (a probe) and every other notification fails at once, so the
partitions behind a hung agent fail retriably within about one deadline and can fall back.
A notification naming a partition its agent has not appended for this proxy (first_contact.py:
a topic just created, a leader just moved) waits timeout_s instead while the zone is not gray,
and its round trip is not kept: the leader's first append of a partition waits for its
followers, which no history of warm answers tells from a hang.

`start` sends a notification's first frame from synchronous code (the WAL writer's release
callback) when a slot and an idle connection are at hand and the socket takes the whole
frame: the agent then starts on it before the proxy's event loop gets to the task that
awaits the answer (`notify(..., started=...)`). Only the caller that knows no other
notification of the agent is queued or in flight may use it (ZoneNotifier does).
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Protocol

import trio

from core.audit import AuditSink
from core.errors import SidecarError
from core.log_limit import LogLimiter
from leader_notify import protocol as p
from leader_notify.config import NotifyConfig
from leader_notify.metrics import SenderMetrics
from leader_notify.sender.first_contact import AppendedPartitions
from leader_notify.sender.outcome import Answered, Refused, classify_answer
from leader_notify.sender.owners import AgentMap, agent_lists
from leader_notify.sender.versions import AgentVersions
from wal_s3.agent_shares import share_name
from wal_s3.format import ZoneShare, entry_head_size
from wal_s3.latency import Attempt, LatencyGuard, request_units

log = logging.getLogger(__name__)

RECEIVE_CHUNK_BYTES = 64 * 1024

# Opens a TCP stream to (host, port): trio.open_tcp_stream; unit tests pass one end of a socketpair.
OpenStream = Callable[[str, int], Awaitable[trio.SocketStream]]


class AnnouncedObject(Protocol):
    """What a notification says of a WAL object: its key and each zone's share (a wal_s3
    FlushedObject as it is released, or a recovered object's shares re-read from S3)."""

    @property
    def key(self) -> str: ...

    @property
    def zones(self) -> Mapping[str, ZoneShare]: ...

    @property
    def share_runs(self) -> Mapping[str, tuple[tuple[int, int, int], ...]]: ...


class NotifyError(SidecarError):
    """A notification could not be completed. retriable=True: a later attempt may succeed
    (agent down, timeouts); False: configuration problem (no agent for the zone, refused key)."""


class Answer(list[p.EntryResult]):
    """The agent's per-entry results (a list of EntryResult), with the bytes the round trip
    put on the wire each way, all attempts together (before TCP/IP framing)."""

    def __init__(self, results: Iterable[p.EntryResult], request_bytes: int, response_bytes: int) -> None:
        super().__init__(results)
        self.request_bytes = request_bytes
        self.response_bytes = response_bytes


class _Conn:
    def __init__(self, stream: trio.SocketStream, channel: p.Channel) -> None:
        self.stream = stream
        self.channel = channel
        self.idle_since = time.monotonic()


class Started:
    """A notification whose first attempt's frame `start` wrote: `notify` awaits its answer."""

    __slots__ = ("request", "payload", "conn", "frame_bytes", "unsent", "at")

    def __init__(self, request: p.NotifyRequest, payload: bytes, conn: _Conn, frame_bytes: int, unsent: bytes,
                 at: float) -> None:
        self.request, self.payload, self.conn = request, payload, conn
        self.frame_bytes = frame_bytes
        self.unsent = unsent  # the frame's tail the socket did not take at once (sent by notify)
        self.at = at  # time.monotonic() when it was written


class NotifySender:
    """Sends notifications to the agents of other zones. Close with `aclose()`."""

    def __init__(self, config: NotifyConfig, zone: str, proxy_id: str, epoch: int, audit: AuditSink, *,
                 bucket: str, metrics: SenderMetrics | None = None, agents: AgentMap | None = None,
                 on_gray: Callable[[str, int], None] | None = None,
                 open_stream: OpenStream = trio.open_tcp_stream) -> None:
        """`agents`: the agents of each zone and who owns what, shared with the router (None:
        made from config.agents). `on_gray(zone, agent index)`: an attempt to that agent was
        abandoned at its gray deadline (the router's circuits count it at once).
        `open_stream(host, port)`: how a connection to an agent is opened.
        Raises ValueError if config.hmac_keys is empty or a key is too short."""
        self._config = config
        self._zone = zone
        self._proxy_id = proxy_id
        self._epoch = epoch
        self._audit = audit
        self._bucket = bucket
        self._keyring = p.Keyring(config.hmac_keys)
        self.metrics = metrics or SenderMetrics()
        self._ids = itertools.count(1)
        self.agents = agents if agents is not None else AgentMap(config.agents, config.agent_ownership)
        self._idle: dict[str, list[_Conn]] = {}  # per agent address
        self._slots: dict[str, trio.Semaphore] = {}  # per agent address
        self._started: set[Started] = set()  # started and not yet taken over by notify
        self._closed = False
        self._guards: dict[str, LatencyGuard] = {}
        self._appended = AppendedPartitions()  # a notification naming a partition new to its agent: no gray deadline
        self._versions = AgentVersions()  # the protocol version to offer each agent address
        self._version_log = LogLimiter()  # agents with no version in common
        self._zone_of = {address: zone for zone, addresses in agent_lists(config.agents).items()
                         for address in addresses}
        self.on_gray = on_gray
        self._open_stream = open_stream

    def units_of(self, request: p.NotifyRequest) -> float:
        """The work `request` asks of its agent, in units of the gray deadline (wal_s3/latency.py):
        1, plus 1 per notify.gray_unit_entries entries and per notify.gray_unit_bytes of its range."""
        return request_units(nbytes=request.zone_length, bytes_per_unit=self._config.gray_unit_bytes,
                             entries=len(request.entries), entries_per_unit=self._config.gray_unit_entries)

    def first_contact(self, address: str, request: p.NotifyRequest) -> bool:
        """`request` names a partition that the agent at `address` has not appended for this
        proxy (first_contact.py): its attempts get timeout_s, not the gray deadline."""
        return self._appended.first_contact(address, ((entry.topic, entry.partition) for entry in request.entries))

    def answered(self, address: str, request: p.NotifyRequest, response: p.NotifyResponse) -> None:
        """The agent at `address` answered `request`: the partitions it appended are no first contact any more."""
        if response.status == p.RequestStatus.OK and len(response.results) == len(request.entries):
            self._appended.appended(address, ((entry.topic, entry.partition) for entry, result
                                              in zip(request.entries, response.results, strict=True)
                                              if result.error_code == 0))

    def agent_address(self, dest_zone: str, agent: int) -> str:
        """The address of `agent` (its index in the zone's notify.agents list). Raises IndexError."""
        return self.agents.agents(dest_zone)[agent]

    def guard(self, zone: str, agent: int = 0) -> LatencyGuard:
        """Recent round trips to one agent of `zone` and its gray state (per agent address:
        one hung agent of a zone does not hold back its siblings' notifications)."""
        address = self.agents.agents(zone)[agent]
        guard = self._guards.get(address)
        if guard is None:
            guard = self._guards[address] = LatencyGuard(floor_s=self._config.gray_floor_s,
                                                       ceiling_s=self._config.timeout_s,
                                                       factor=self._config.gray_factor,
                                                       max_deadline_s=self._config.gray_max_s)
        return guard

    async def aclose(self) -> None:
        self._closed = True
        for conns in self._idle.values():
            for conn in conns:
                await conn.stream.aclose()
        self._idle.clear()
        for started in self._started:  # their notify never ran (the proxy is stopping)
            started.conn.stream.socket.close()
        self._started.clear()

    def share_of(self, zone: str, topic: str, partition: int) -> str:
        """The share (owning agent) of topic-partition in `zone`: what the WAL writer groups by."""
        return self.agents.share_of(zone, topic, partition)

    def start(self, flushed: AnnouncedObject, dest_zone: str, agent: int = 0) -> Started | None:
        """Write the first attempt's frame for `flushed` -> `dest_zone` now, if that needs no
        waiting: a free slot, an idle connection, a socket that takes the frame. Returns what
        to pass to `notify(..., started=)`, or None (notify then does it all). Never raises.
        """
        if self._closed or agent >= self.agents.count(dest_zone) or self.guard(dest_zone, agent).gray:
            return None
        address = self.agents.agents(dest_zone)[agent]
        idle = self._idle.get(address)
        if not idle:
            return None
        slots = self._zone_slots(address)
        try:
            slots.acquire_nowait()
        except trio.WouldBlock:
            return None
        try:
            request, payload = self._encode(flushed, dest_zone, agent)
        except NotifyError:
            slots.release()
            return None  # notify raises it, with its audit record
        conn = idle.pop()
        if time.monotonic() - conn.idle_since > self._config.max_idle_s:
            conn.stream.socket.close()  # notify opens a fresh one
            slots.release()
            return None
        frame = conn.channel.send(p.MessageType.REQUEST, payload)
        at = time.monotonic()
        try:
            # The trio socket is non-blocking and keeps no send buffer of its own: writing to
            # its descriptor is what its send() does, minus the await.
            written = os.write(conn.stream.socket.fileno(), frame)
        except BlockingIOError:
            written = 0
        except OSError:  # the agent went away while the connection idled: notify reconnects
            conn.stream.socket.close()
            slots.release()
            return None
        started = Started(request, payload, conn, len(frame), frame[written:], at)
        self._started.add(started)
        return started

    @property
    def prefetch_depth(self) -> int:
        return self._config.prefetch_depth

    async def prefetch(self, flushed: AnnouncedObject, dest_zone: str, agent: int = 0) -> bool:
        """Ask `agent` of `dest_zone` to read its part of `flushed` into its cache, appending
        nothing (one attempt): its notification, sent once the one before it is answered,
        then finds the read done or under way. True if the agent answered OK; never raises
        (a prefetch that fails costs nothing but the cache hit)."""
        if self._closed or not 0 <= agent < self.agents.count(dest_zone):
            return False
        begun = time.monotonic()
        try:
            # No entry list: the agent needs only the range to read it, and the list crosses
            # zones (the notification that follows carries it and checks the count on the hit).
            request, payload = self._encode(flushed, dest_zone, agent, prefetch=True)
            response, sent, received = await self._round_trip(self.agents.agents(dest_zone)[agent],
                                                              request.request_id, payload)
        except (NotifyError, ValueError, OSError, trio.BrokenResourceError, trio.ClosedResourceError,
                trio.TooSlowError, p.ProtocolError, _ClosedByPeer) as exc:
            log.debug("prefetch %s -> %s/%d: %r", flushed.key, dest_zone, agent, exc)
            return False
        self.metrics.prefetches.labels(dest_zone=dest_zone, outcome=response.status.name.lower()).inc()
        # Its bytes cross zones like a notification's: billed as one, with status "prefetch".
        self._audit.emit("notification", {
            "zone": self._zone, "ts_ms": int(time.time() * 1000), "dest_zone": dest_zone, "key": flushed.key,
            "entries": 0, "request_bytes": sent, "response_bytes": received,
            "rtt_ms": (time.monotonic() - begun) * 1000, "status": "prefetch", "attempts": 1,
        })
        return response.status == p.RequestStatus.OK

    async def notify(self, flushed: AnnouncedObject, dest_zone: str, *, agent: int | None = None, started: Started | None = None,
                     on_answer: Callable[[list[p.EntryResult]], None] | None = None,
                     hedge: bool = False) -> list[p.EntryResult]:
        """Tell `dest_zone`'s agent about its share of `flushed` (a wal_s3 FlushedObject).

        `agent`: which agent of the zone (index in its `notify.agents` list); the request then
        covers that agent's entries of the share, and the results are those entries'. None:
        every agent of the zone in turn, results in share order (recovery and tools).

        `started`: what `start` returned for it (its first attempt is then under way).
        `on_answer(results)` is called with the results it returns, as soon as they are
        known: before this sender's metrics and audit record. `hedge`: the caller's own attempt
        of this notification (a pipelined one) was just abandoned at its gray deadline, so
        the first attempt here is its hedge (the plain deadline, not a probe's).
        Returns one EntryResult per entry of the share, in order (error_code 0 with the
        base offset, or the Kafka error code after the last attempt). Raises NotifyError.
        """
        if started is not None:
            self._started.discard(started)
        elif self._closed:
            raise NotifyError("sender is closed")
        count = self.agents.count(dest_zone)
        if count == 0:
            raise NotifyError(f"no agent configured for zone {dest_zone}", retriable=False)
        if agent is None:
            if count == 1:
                agent = 0
            else:
                results: list[p.EntryResult] = []
                for owner, _lo, _hi in self._slices(flushed, dest_zone):
                    results += await self.notify(flushed, dest_zone, agent=owner)
                if on_answer is not None:
                    on_answer(results)
                return results
        if not 0 <= agent < count:
            raise NotifyError(f"zone {dest_zone} has no agent {agent}", retriable=False)
        address = self.agents.agents(dest_zone)[agent]
        if started is not None:
            request, payload = started.request, started.payload
        else:
            request, payload = self._encode(flushed, dest_zone, agent)
        begun = started.at if started is not None else time.monotonic()
        answered = 0.0
        sent_bytes = received_bytes = 0
        backoff_s = self._config.backoff_initial_s
        last_problem = "no attempt"
        status = "failed"
        attempt = 0
        guard = self.guard(dest_zone, agent)
        units = self.units_of(request)
        # The last attempt was abandoned at its deadline: this one is its hedge.
        hedge = hedge and agent is not None
        try:
            for attempt in range(1, self._config.max_attempts + 1):
                now = trio.current_time()
                gate = guard.start(now, hedge=hedge, units=units, first_contact=self.first_contact(address, request))
                if gate is None:
                    if not (attempt == 1 and started is not None):
                        self.metrics.gray.labels(dest_zone=dest_zone, outcome="refused").inc()
                        status = "gray"
                        raise NotifyError(f"notify {flushed.key} -> {dest_zone}: not sent, the zone's agent is not "
                                          f"answering in time (a probe is out)", retriable=True)
                    gate = Attempt(now, probe=False, was_gray=True, units=units)  # its frame is on the wire already
                timeout_s = min(self._config.timeout_s, guard.attempt_timeout_s(now, gate))
                self.metrics.attempts.labels(dest_zone=dest_zone).inc()
                try:
                    response, sent, received = await self._round_trip(
                        address, request.request_id, payload, started if attempt == 1 else None, timeout_s)
                    sent_bytes += sent
                    received_bytes += received
                except trio.TooSlowError as exc:
                    gray = " (gray deadline)" if timeout_s < self._config.timeout_s else ""
                    last_problem = f"TooSlowError: no answer within {timeout_s:.2f} s{gray}"
                    give_up = guard.failed(gate, trio.current_time(), timed_out=True)
                    hedge = True
                    self.metrics.gray.labels(dest_zone=dest_zone, outcome="timed_out").inc()
                    if self.on_gray is not None:
                        self.on_gray(dest_zone, agent)
                    if give_up:
                        status = "gray"
                        raise NotifyError(f"notify {flushed.key} -> {dest_zone} abandoned after {attempt} attempts: "
                                          f"{last_problem}", retriable=True) from exc
                except (OSError, trio.BrokenResourceError, trio.ClosedResourceError,
                        p.ProtocolError, _ClosedByPeer) as exc:
                    guard.failed(gate, trio.current_time(), timed_out=False)
                    last_problem = f"{type(exc).__name__}: {exc}"
                except BaseException:  # cancelled from outside: says nothing about the agent
                    guard.failed(gate, trio.current_time(), timed_out=False)
                    raise
                else:
                    guard.succeeded(gate, trio.current_time())  # the agent answered, whatever it said
                    self.answered(address, request, response)
                    verdict = classify_answer(response, len(request.entries), attempt == self._config.max_attempts)
                    if isinstance(verdict, Answered):
                        status = verdict.status
                        results = Answer(verdict.results, sent_bytes, received_bytes)
                        answered = time.monotonic()  # the round trip ends here, not after on_answer
                        if on_answer is not None:
                            on_answer(results)
                        return results
                    if isinstance(verdict, Refused):
                        status = verdict.status
                        raise NotifyError(f"agent of {dest_zone} refused {flushed.key}: {verdict.message}",
                                          retriable=False)
                    last_problem = verdict.problem
                log.info("notify %s -> %s attempt %d/%d: %s", flushed.key, dest_zone, attempt,
                         self._config.max_attempts, last_problem)
                if attempt < self._config.max_attempts:
                    await trio.sleep(backoff_s)  # backoff between attempts, not synchronization
                    backoff_s = min(backoff_s * 2, self._config.backoff_max_s)
            raise NotifyError(f"notify {flushed.key} -> {dest_zone} failed after {self._config.max_attempts} "
                              f"attempts: {last_problem}", retriable=True)
        finally:
            rtt_s = (answered or time.monotonic()) - begun
            self.metrics.notifications.labels(dest_zone=dest_zone, outcome=status).inc()
            self.metrics.rtt.labels(dest_zone=dest_zone).observe(rtt_s)
            self._audit.emit("notification", {
                "zone": self._zone, "ts_ms": int(time.time() * 1000),
                "dest_zone": dest_zone, "key": flushed.key, "entries": len(request.entries),
                "request_bytes": sent_bytes, "response_bytes": received_bytes, "rtt_ms": rtt_s * 1000,
                "status": status, "attempts": attempt,
            })

    def _slices(self, flushed: AnnouncedObject, dest_zone: str) -> Sequence[tuple[int, int, int]]:
        """(agent, first entry, end entry) per owner of the zone share. Raises NotifyError."""
        try:
            return self.agents.runs(flushed, dest_zone)
        except ValueError as exc:  # a writer not laying out by owner: our wiring is wrong
            raise NotifyError(f"cannot notify {flushed.key} -> {dest_zone}: {exc}", retriable=False) from exc

    def _encode(self, flushed: AnnouncedObject, dest_zone: str, agent: int,
                prefetch: bool = False, ordered: bool = False) -> tuple[p.NotifyRequest, bytes]:
        """The request for `agent`'s part of `dest_zone`'s share of `flushed` and its encoding;
        with `prefetch`, a prefetch of that range (no entry list); with `ordered`, one of a
        pipeline's (leader_notify/sender/pipeline.py). Raises NotifyError."""
        share = flushed.zones[dest_zone]
        count = self.agents.count(dest_zone)
        refs = share.entries
        zone_offset, zone_length, share_label = share.offset, share.length, ""
        if count > 1:
            part = [(lo, hi) for owner, lo, hi in self._slices(flushed, dest_zone) if owner == agent]
            if not part:
                raise NotifyError(f"{flushed.key} has no entries of agent {agent} of {dest_zone}", retriable=False)
            [(lo, hi)] = part
            refs = share.entries[lo:hi]
            if lo or hi != len(share.entries):  # the owner's run: from its first entry's head to its last batch's end
                zone_offset = refs[0].offset - entry_head_size(refs[0].topic)
                zone_length = refs[-1].offset + refs[-1].length - zone_offset
            share_label = share_name(dest_zone, agent, count)
        request = p.NotifyRequest(
            request_id=next(self._ids), source_zone=self._zone, dest_zone=dest_zone, proxy_id=self._proxy_id,
            epoch=self._epoch, bucket=self._bucket, key=flushed.key, zone_offset=zone_offset,
            zone_length=zone_length,
            entries=() if prefetch else tuple(
                p.NotifyEntry(e.topic, e.partition, e.offset, e.length, e.crc32c, e.record_count,
                              e.producer_id, e.producer_epoch, e.base_sequence) for e in refs),
            share=share_label, prefetch=prefetch, ordered=ordered)
        try:
            payload = p.encode_request(request)
            if len(payload) + p.FRAME_OVERHEAD_BYTES > p.MAX_FRAME_BYTES:
                raise ValueError(f"notification of {len(payload)} bytes exceeds MAX_FRAME_BYTES")
        except ValueError as exc:
            # A share with more entries than one frame carries: lower wal.max_bytes.
            raise NotifyError(f"cannot notify {flushed.key} -> {dest_zone}: {exc}", retriable=False) from exc
        return request, payload

    @property
    def pipeline_depth(self) -> int:
        return self._config.pipeline_depth

    @property
    def timeout_s(self) -> float:
        return self._config.timeout_s

    @property
    def max_idle_s(self) -> float:
        return self._config.max_idle_s

    def encode_ordered(self, flushed: AnnouncedObject, dest_zone: str, agent: int) -> tuple[p.NotifyRequest, bytes]:
        """A pipelined (ordered) request for `agent`'s part of `flushed`. Raises NotifyError."""
        return self._encode(flushed, dest_zone, agent, ordered=True)

    async def connect(self, dest_zone: str, agent: int) -> _Conn:
        """A connection to `agent` of `dest_zone` past its HELLO exchange, for the caller's own
        use (a pipeline; it is not returned to the pool). Raises OSError, trio.TooSlowError,
        ProtocolError."""
        address = self.agents.agents(dest_zone)[agent]
        with trio.fail_after(self._config.connect_timeout_s + self._config.timeout_s):
            return await self._checkout(address)

    def record(self, dest_zone: str, key: str, entries: int, *, sent_bytes: int, received_bytes: int,
               rtt_s: float, status: str) -> None:
        """Metrics and the `notification` audit record of one pipelined notification (one attempt)."""
        self.metrics.attempts.labels(dest_zone=dest_zone).inc()
        self.metrics.notifications.labels(dest_zone=dest_zone, outcome=status).inc()
        self.metrics.rtt.labels(dest_zone=dest_zone).observe(rtt_s)
        self._audit.emit("notification", {
            "zone": self._zone, "ts_ms": int(time.time() * 1000), "dest_zone": dest_zone, "key": key,
            "entries": entries, "request_bytes": sent_bytes, "response_bytes": received_bytes,
            "rtt_ms": rtt_s * 1000, "status": status, "attempts": 1,
        })

    def _zone_slots(self, address: str) -> trio.Semaphore:
        slots = self._slots.get(address)
        if slots is None:
            slots = self._slots[address] = trio.Semaphore(self._config.max_in_flight_per_zone)
        return slots

    async def _round_trip(self, address: str, request_id: int, payload: bytes,
                          started: Started | None = None,
                          timeout_s: float | None = None) -> tuple[p.NotifyResponse, int, int]:
        """One attempt: send a fresh frame (or finish `started`'s), await the answer within
        `timeout_s` (default notify.timeout_s), a new connection's HELLO included. Raises
        trio.TooSlowError past it."""
        deadline = trio.current_time() + (self._config.timeout_s if timeout_s is None else timeout_s)
        slots = self._zone_slots(address)
        if started is None:
            try:
                # Usually a slot is free: taking it without a checkpoint lets the frame leave in
                # this same scheduler step (a checkpoint here let every other runnable task go
                # first, ~0.1 ms on the notification's latency path).
                slots.acquire_nowait()
            except trio.WouldBlock:
                await slots.acquire()
        try:  # `started` holds its slot already
            if started is None:
                with trio.fail_at(deadline):  # a hung agent accepts the connection but never says HELLO
                    conn = await self._checkout(address)
                sent = conn.channel.send(p.MessageType.REQUEST, payload)
                frame_bytes, unsent = len(sent), sent
            else:
                conn, frame_bytes, unsent = started.conn, started.frame_bytes, started.unsent
            ok = False
            try:
                with trio.fail_at(deadline):
                    if unsent:
                        await conn.stream.send_all(unsent)
                    received = 0
                    while (frame := conn.channel.next_frame()) is None:
                        data = await conn.stream.receive_some(RECEIVE_CHUNK_BYTES)
                        if not data:
                            raise _ClosedByPeer("agent closed the connection")
                        received += len(data)
                        conn.channel.receive_data(data)
                if frame.type != p.MessageType.RESPONSE:
                    raise p.ProtocolError("agent sent a request frame")
                response = p.decode_response(frame.payload)
                # Refusals decided before the request was decoded carry request id 0.
                if response.request_id != request_id and not (
                        response.request_id == 0 and response.status != p.RequestStatus.OK):
                    raise p.ProtocolError(f"response for request {response.request_id}, expected {request_id}")
                ok = True
                return response, frame_bytes, received
            finally:
                if ok and not self._closed:
                    conn.idle_since = time.monotonic()
                    self._idle.setdefault(address, []).append(conn)
                else:
                    # Unknown stream position: never reuse. Its idle siblings probably went
                    # down with the same agent (restart), so drop them too.
                    conn.stream.socket.close()
                    for other in self._idle.pop(address, []):
                        other.stream.socket.close()
        finally:
            slots.release()

    async def _checkout(self, address: str) -> _Conn:
        """An idle connection, or a new one past its HELLO exchange. Raises OSError,
        trio.TooSlowError, ProtocolError (AuthError: the agent does not hold our keys)."""
        idle = self._idle.get(address)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if now - conn.idle_since <= self._config.max_idle_s:
                return conn
            conn.stream.socket.close()
        offer = self._versions.offer(address, time.monotonic())
        try:
            conn = await self._open(address, offer)
        except p.VersionMismatch as exc:
            if not isinstance(exc.outcome, p.Reconnect):  # every attempt meets it: a line a minute per agent
                allowed, held_back = self._version_log.allow(address, time.monotonic())
                if allowed:
                    log.warning("notification connection to %s: %s (logged once a minute per agent; %d held back)",
                                address, exc, held_back)
                raise
            # An agent of the previous release: it closes this connection; speak its version.
            fallback = exc.outcome.version
            self._versions.answered(address, offer, fallback, time.monotonic())
            log.info("notification connection to %s: the agent speaks notify protocol v%d only, offering it "
                     "(this proxy speaks up to v%d; ordered requests need v%d)", address, fallback,
                     p.PROTOCOL_VERSION, p.ORDERED_MIN_VERSION)
            offer = fallback
            conn = await self._open(address, offer)
        version = conn.channel.version
        assert version is not None
        self._versions.answered(address, offer, version, time.monotonic())
        self.metrics.protocol_connections.labels(dest_zone=self._zone_of.get(address, "?"),
                                                 protocol_version=str(version)).inc()
        return conn

    def pipelining_allowed(self, dest_zone: str, agent: int) -> bool:
        """False while `agent` of `dest_zone` is known to speak a protocol version without
        ordered (pipelined) requests (versions.py)."""
        return self._versions.pipelining_allowed(self.agents.agents(dest_zone)[agent], time.monotonic())

    async def _open(self, address: str, offer: int) -> _Conn:
        """A new connection past its HELLO exchange, offering `offer`. Raises OSError,
        trio.TooSlowError, ProtocolError (VersionMismatch: no version agreed on it)."""
        host, _, port = address.rpartition(":")
        with trio.fail_after(self._config.connect_timeout_s):
            stream = await self._open_stream(host, int(port))
        conn = _Conn(stream, p.Channel(self._keyring, p.Role.PROXY, os.urandom(p.CHALLENGE_BYTES), offer=offer))
        try:
            with trio.fail_after(self._config.timeout_s):
                await stream.send_all(conn.channel.hello())
                while not conn.channel.established:
                    data = await stream.receive_some(RECEIVE_CHUNK_BYTES)
                    if not data:
                        raise _ClosedByPeer("agent closed the connection before its HELLO")
                    conn.channel.receive_data(data)
                    if conn.channel.next_frame() is not None:  # only the HELLO may come unasked
                        raise p.ProtocolError("agent sent a frame before our first request")
        except BaseException:
            stream.socket.close()
            raise
        return conn


class _ClosedByPeer(Exception):
    pass
