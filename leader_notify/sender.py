"""The proxy side of the notification protocol (trio).

Strategy: one pool of TCP connections per destination zone; a connection carries one
request at a time, so `max_in_flight_per_zone` (a semaphore) bounds both the open
connections and the requests in flight. Each attempt builds a fresh signed frame (new
timestamp and nonce) around the same request id, waits for the response within
`timeout_s`, and checks its MAC and request id. A failed attempt closes its connection
(its stream position is unknown) and the next one waits with capped exponential backoff.
A notification is re-sent while the agent answers a retriable request status or any
entry carries a retriable Kafka error; re-sending is safe because the agent answers
already-applied entries from its applied map and leaders drop idempotent duplicates.
When attempts run out, `notify` raises NotifyError(retriable=True) and the proxy fails
the affected partitions with a retriable Kafka error.

Order: the caller awaits notifications to one zone one at a time, in WAL object order;
the agent keeps per-partition order in arrival order.

Gray agents (they hang instead of refusing): each zone keeps the round trips of its recent
successful attempts (wal_s3/latency.py). An attempt slower than max(gray_factor x p99 of the
last minute, gray_floor_s) is abandoned at once and reported through `on_gray(zone)` (the
router's breaker counts it); it is retried once, and while the zone stays gray only one
attempt at a time goes out (a probe) and every other notification fails at once, so the
partitions behind a hung agent fail retriably within about one deadline and can fall back.

`start` sends a notification's first frame from synchronous code (the WAL writer's release
callback) when a slot and an idle connection are at hand and the socket takes the whole
frame: the agent then starts on it before the proxy's event loop gets to the task that
awaits the answer (`notify(..., started=...)`). Only the caller that knows no other
notification of the zone is queued or in flight may use it (ZoneNotifier does).
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections.abc import Callable
from typing import Any

import trio

from leader_notify import protocol as p
from leader_notify.config import NotifyConfig
from leader_notify.metrics import SenderMetrics
from wal_s3.latency import Attempt, LatencyGuard

log = logging.getLogger(__name__)

RECEIVE_CHUNK_BYTES = 64 * 1024


class NotifyError(Exception):
    """A notification could not be completed. retriable=True: a later attempt may succeed
    (agent down, timeouts); False: configuration problem (no agent for the zone, refused key)."""

    def __init__(self, message: str, *, retriable: bool = True) -> None:
        super().__init__(message)
        self.retriable = retriable


class _Conn:
    def __init__(self, stream: trio.SocketStream, keyring: p.Keyring) -> None:
        self.stream = stream
        self.decoder = p.FrameDecoder(keyring)


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

    def __init__(self, config: NotifyConfig, zone: str, proxy_id: str, epoch: int, audit: Any, *,
                 bucket: str, metrics: SenderMetrics | None = None) -> None:
        """Raises ValueError if config.hmac_keys is empty or a key is too short."""
        self._config = config
        self._zone = zone
        self._proxy_id = proxy_id
        self._epoch = epoch
        self._audit = audit
        self._bucket = bucket
        self._keyring = p.Keyring(config.hmac_keys)
        self.metrics = metrics or SenderMetrics()
        self._ids = itertools.count(1)
        self._idle: dict[str, list[_Conn]] = {}
        self._slots: dict[str, trio.Semaphore] = {}
        self._started: set[Started] = set()  # started and not yet taken over by notify
        self._closed = False
        self._guards: dict[str, LatencyGuard] = {}
        # on_gray(zone): an attempt to the zone's agent was abandoned at its gray deadline.
        self.on_gray: Callable[[str], None] | None = None

    def guard(self, zone: str) -> LatencyGuard:
        """The zone's recent round trips and gray state."""
        guard = self._guards.get(zone)
        if guard is None:
            guard = self._guards[zone] = LatencyGuard(floor_s=self._config.gray_floor_s,
                                                       ceiling_s=self._config.timeout_s,
                                                       factor=self._config.gray_factor)
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

    def start(self, flushed: Any, dest_zone: str) -> Started | None:
        """Write the first attempt's frame for `flushed` -> `dest_zone` now, if that needs no
        waiting: a free slot, an idle connection, a socket that takes the frame. Returns what
        to pass to `notify(..., started=)`, or None (notify then does it all). Never raises.
        """
        if self._closed or dest_zone not in self._config.agents or self.guard(dest_zone).gray:
            return None
        idle = self._idle.get(dest_zone)
        if not idle:
            return None
        slots = self._zone_slots(dest_zone)
        try:
            slots.acquire_nowait()
        except trio.WouldBlock:
            return None
        try:
            request, payload = self._encode(flushed, dest_zone)
        except NotifyError:
            slots.release()
            return None  # notify raises it, with its audit record
        conn = idle.pop()
        frame = self._request_frame(payload)
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

    async def notify(self, flushed: Any, dest_zone: str, *, started: Started | None = None,
                     on_answer: Callable[[list[p.EntryResult]], None] | None = None) -> list[p.EntryResult]:
        """Tell `dest_zone`'s agent about its share of `flushed` (a wal_s3 FlushedObject).

        `started`: what `start` returned for it (its first attempt is then under way).
        `on_answer(results)` is called with the results it returns, as soon as they are
        known: before this sender's metrics and audit record.
        Returns one EntryResult per entry of the share, in order (error_code 0 with the
        base offset, or the Kafka error code after the last attempt). Raises NotifyError.
        """
        if started is not None:
            self._started.discard(started)
        elif self._closed:
            raise NotifyError("sender is closed")
        address = self._config.agents.get(dest_zone)
        if address is None:
            raise NotifyError(f"no agent configured for zone {dest_zone}", retriable=False)
        if started is not None:
            request, payload = started.request, started.payload
        else:
            request, payload = self._encode(flushed, dest_zone)
        begun = started.at if started is not None else time.monotonic()
        answered = 0.0
        sent_bytes = received_bytes = 0
        backoff_s = self._config.backoff_initial_s
        last_problem = "no attempt"
        status = "failed"
        attempt = 0
        guard = self.guard(dest_zone)
        try:
            for attempt in range(1, self._config.max_attempts + 1):
                now = trio.current_time()
                gate = guard.start(now)
                if gate is None:
                    if not (attempt == 1 and started is not None):
                        self.metrics.gray.labels(dest_zone=dest_zone, outcome="refused").inc()
                        status = "gray"
                        raise NotifyError(f"notify {flushed.key} -> {dest_zone}: not sent, the zone's agent is not "
                                          f"answering in time (a probe is out)", retriable=True)
                    gate = Attempt(now, probe=False, was_gray=True)  # its frame is on the wire already
                timeout_s = min(self._config.timeout_s, guard.attempt_timeout_s(now))
                self.metrics.attempts.labels(dest_zone=dest_zone).inc()
                try:
                    response, sent, received = await self._round_trip(
                        dest_zone, address, request.request_id, payload, started if attempt == 1 else None,
                        timeout_s)
                    sent_bytes += sent
                    received_bytes += received
                except trio.TooSlowError as exc:
                    gray = " (gray deadline)" if timeout_s < self._config.timeout_s else ""
                    last_problem = f"TooSlowError: no answer within {timeout_s:.2f} s{gray}"
                    give_up = guard.failed(gate, trio.current_time(), timed_out=True)
                    self.metrics.gray.labels(dest_zone=dest_zone, outcome="timed_out").inc()
                    if self.on_gray is not None:
                        self.on_gray(dest_zone)
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
                    if response.status == p.RequestStatus.OK:
                        if len(response.results) != len(request.entries):
                            last_problem = f"{len(response.results)} results for {len(request.entries)} entries"
                        else:
                            retriable = [r for r in response.results if r.error_code in p.RETRIABLE_ENTRY_CODES]
                            if not retriable or attempt == self._config.max_attempts:
                                status = "ok" if p.results_all_ok(response.results) else "entry_errors"
                                results = list(response.results)
                                answered = time.monotonic()  # the round trip ends here, not after on_answer
                                if on_answer is not None:
                                    on_answer(results)
                                return results
                            last_problem = f"{len(retriable)} entries with retriable errors"
                    elif response.status in p.RETRIABLE_STATUSES:
                        last_problem = f"agent answered {response.status.name}: {response.message}"
                    else:
                        status = response.status.name.lower()
                        raise NotifyError(f"agent of {dest_zone} refused {flushed.key}: {response.status.name} "
                                          f"{response.message}", retriable=False)
                log.info("notify %s -> %s attempt %d/%d: %s", flushed.key, dest_zone, attempt,
                         self._config.max_attempts, last_problem)
                if attempt < self._config.max_attempts:
                    await trio.sleep(backoff_s)  # backoff between attempts, not synchronization
                    backoff_s = min(backoff_s * 2, self._config.backoff_max_s)
            raise NotifyError(f"notify {flushed.key} -> {dest_zone} failed after {self._config.max_attempts} "
                              f"attempts: {last_problem}", retriable=True)
        finally:
            rtt_s = (answered or time.monotonic()) - begun
            self.metrics.notifications.labels(dest_zone=dest_zone, status=status).inc()
            self.metrics.rtt.labels(dest_zone=dest_zone).observe(rtt_s)
            self._audit.emit("notification", {
                "zone": self._zone, "ts_ms": int(time.time() * 1000),
                "dest_zone": dest_zone, "key": flushed.key, "entries": len(request.entries),
                "request_bytes": sent_bytes, "response_bytes": received_bytes, "rtt_ms": rtt_s * 1000,
                "status": status, "attempts": attempt,
            })

    def _encode(self, flushed: Any, dest_zone: str) -> tuple[p.NotifyRequest, bytes]:
        """The request for `dest_zone`'s share of `flushed` and its encoding. Raises NotifyError."""
        share = flushed.zones[dest_zone]
        request = p.NotifyRequest(
            request_id=next(self._ids), source_zone=self._zone, dest_zone=dest_zone, proxy_id=self._proxy_id,
            epoch=self._epoch, bucket=self._bucket, key=flushed.key, zone_offset=share.offset,
            zone_length=share.length,
            entries=tuple(p.NotifyEntry(e.topic, e.partition, e.offset, e.length, e.crc32c, e.record_count,
                                        e.producer_id, e.producer_epoch, e.base_sequence) for e in share.entries))
        try:
            payload = p.encode_request(request)
            if len(payload) + p.FRAME_OVERHEAD_BYTES > p.MAX_FRAME_BYTES:
                raise ValueError(f"notification of {len(payload)} bytes exceeds MAX_FRAME_BYTES")
        except ValueError as exc:
            # A share with more entries than one frame carries: lower wal.max_bytes.
            raise NotifyError(f"cannot notify {flushed.key} -> {dest_zone}: {exc}", retriable=False) from exc
        return request, payload

    def _request_frame(self, payload: bytes) -> bytes:
        """A new signed frame around `payload`: every attempt gets its own timestamp and nonce."""
        return p.encode_frame(self._keyring, p.MessageType.REQUEST, payload, int(time.time() * 1000),
                              os.urandom(p.NONCE_BYTES))

    def _zone_slots(self, zone: str) -> trio.Semaphore:
        slots = self._slots.get(zone)
        if slots is None:
            slots = self._slots[zone] = trio.Semaphore(self._config.max_in_flight_per_zone)
        return slots

    async def _round_trip(self, zone: str, address: str, request_id: int, payload: bytes,
                          started: Started | None = None,
                          timeout_s: float | None = None) -> tuple[p.NotifyResponse, int, int]:
        """One attempt: send a fresh frame (or finish `started`'s), await the answer within
        `timeout_s` (default notify.timeout_s). Raises trio.TooSlowError past it."""
        slots = self._zone_slots(zone)
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
                conn = await self._checkout(zone, address)
                frame = self._request_frame(payload)
                frame_bytes, unsent = len(frame), frame
            else:
                conn, frame_bytes, unsent = started.conn, started.frame_bytes, started.unsent
            ok = False
            try:
                with trio.fail_after(self._config.timeout_s if timeout_s is None else timeout_s):
                    if unsent:
                        await conn.stream.send_all(unsent)
                    received = 0
                    while (frame := conn.decoder.next_frame()) is None:
                        data = await conn.stream.receive_some(RECEIVE_CHUNK_BYTES)
                        if not data:
                            raise _ClosedByPeer("agent closed the connection")
                        received += len(data)
                        conn.decoder.receive_data(data)
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
                    self._idle.setdefault(zone, []).append(conn)
                else:
                    # Unknown stream position: never reuse. Its idle siblings probably went
                    # down with the same agent (restart), so drop them too.
                    conn.stream.socket.close()
                    for other in self._idle.pop(zone, []):
                        other.stream.socket.close()
        finally:
            slots.release()

    async def _checkout(self, zone: str, address: str) -> _Conn:
        idle = self._idle.get(zone)
        if idle:
            return idle.pop()
        host, _, port = address.rpartition(":")
        with trio.fail_after(self._config.connect_timeout_s):
            stream = await trio.open_tcp_stream(host, int(port))
        return _Conn(stream, self._keyring)


class _ClosedByPeer(Exception):
    pass
