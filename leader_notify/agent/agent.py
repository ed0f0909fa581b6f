"""The zone agent: serves notifications, reads its zone's share from S3, appends to leaders.

Concurrency model (asyncio, because aiokafka is asyncio):
- One task per connection reads frames and answers them one after another (the sender keeps
  one request in flight per connection and opens more connections for concurrency).
- Within a notification, each partition's entries are appended strictly in order, as one
  run (one batch per ProduceRequest, the next after the previous one is appended);
  different partitions run in parallel and share requests.
- Across notifications, per-partition order is arrival order: on arrival, before any await,
  a request takes a ticket per partition (`PartitionSequencer`); the S3 read runs
  concurrently, but appends wait for the previous ticket of the same partition.
- After the read, a partition's run starts once it is its turn and it holds an append slot
  (append_slots.py); both arrive by callback, so a waiting partition costs no task. Runs
  that start together go to the appender as one wave (Appender.append_runs: the
  notification's task wakes once for all of them): every partition at once when slots are
  free, else a wave per burst of slots that an answer frees.
- Bounds: `max_concurrent_reads` S3 reads, `max_in_flight_appends` partition runs (each has
  one batch in flight, an idempotent producer's up to `requests_in_flight_per_leader`; a
  run's slot is free again when it is through), and an LRU of applied entries
  (`applied_cache_entries`), so memory stays bounded.
- Connections: each opens with a HELLO each way (protocol.Channel: per-connection
  challenges under every MAC, so no replay cache is kept); the agent answers the proxy's
  HELLO in the highest protocol version both speak (this release's or the previous one). Before the peer's HELLO verifies
  the connection is unauthenticated: it may announce nothing but a HELLO-sized frame and
  must send it within `request_timeout_s`. Connections in total, per source address and
  unauthenticated are capped, and an authenticated connection idle for `idle_timeout_s` is
  closed (_limits.py); refusals and timeouts are counted and logged once per source per
  minute.

Exactly-once for batches without a producer id holds while the applied entry is in the
LRU (i.e. for re-sent notifications, the proxy's retries; a re-send arriving while the
notification it repeats still appends a partition waits for that run, `_apply_pending`,
and the map is consulted again at each run's turn); across an agent restart such
batches are at-least-once, as with Kafka's own non-idempotent producer. Idempotent batches
are deduplicated by the leader (DUPLICATE_SEQUENCE_NUMBER).

After the whole share of an object is applied and answered, the agent queues the object's
key for its next GC checkpoint: the checkpoint hook (wal_s3's `mark_applied_many(keys,
zone)`) writes one manifest per `checkpoint_interval_s`, or at once when
`checkpoint_max_keys` are waiting (wal_s3/checkpoint_manifest.py says why), off the
produce latency path; each manifest is audited as a `checkpoint_write` record.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import crc32c

from core.addresses import is_loopback
from core.audit import AuditSink, NullAuditSink
from core.audit_records import AgentApplyRecord
from core.errors import CORRUPT_MESSAGE, NETWORK_EXCEPTION
from core.log_limit import LogLimiter
from leader_notify import protocol as p
from leader_notify.agent._limits import ListenerLimits, admit, read_deadline
from leader_notify.agent.append_runs import AppendResult, PartitionRun
from leader_notify.agent.append_slots import AppendSlots
from leader_notify.agent.checkpoints import Checkpoint, CheckpointBatcher
from leader_notify.agent.ordered_runs import OrderedRuns
from leader_notify.agent.partition_order import Admission, AppliedEntries, EntryRun, PartitionSequencer, Ticket
from leader_notify.metrics import AgentMetrics
from wal_s3.agent_shares import zone_of_share

log = logging.getLogger(__name__)

READ_CHUNK_BYTES = 64 * 1024
WRITE_DRAIN_TIMEOUT_S = 10.0  # a peer that does not read its response within this is dropped
CLOSE_TIMEOUT_S = 5.0  # shutdown waits this long for the listener's connections to go
MAX_PIPELINED_REQUESTS = 32  # requests of one connection handled at once (notify.pipeline_depth is at most 16)
MAX_PENDING_CHECKPOINTS = 1024  # keys not yet in a written manifest; beyond this, answers wait for S3


class ZoneEntry(Protocol):
    """One entry of a zone share as the WAL reader returns it (wal_s3.format.WalEntry fits:
    read-only members, as a NamedTuple's fields are)."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...

    @property
    def batch(self) -> bytes | memoryview: ...


class ZoneReader(Protocol):
    """Reads and verifies a zone's share of a WAL object; raises on S3 or format errors."""

    async def read_zone(self, key: str, zone_offset: int, zone_length: int, *, source_zone: str,
                        expected_entries: int | None) -> Sequence[ZoneEntry]:
        """expected_entries: None for a prefetch, which lists no entries."""
        ...


class Appender(Protocol):
    async def append_runs(self, runs: Sequence[PartitionRun], on_through: Callable[[int], None] | None = None) -> None:
        """Append each run's batches in order, the runs concurrently, adding one result per
        batch to the run's `results` (also when cancelled) and stopping a run after its first
        batch that fails (its result last); calls `on_through(k)` once run k's results are
        final (not if cancelled before)."""
        ...

    async def probe(self) -> None:
        """One Metadata request to the cluster (readiness). Raises when it does not answer."""
        ...




@dataclass(frozen=True)
class AgentSettings:
    """What the agent needs from Config, flattened (built by the CLI or tests)."""

    zone: str
    bucket: str
    prefix: str
    keys: tuple[bytes, ...]
    max_concurrent_reads: int = 8
    max_in_flight_appends: int = 1024
    applied_cache_entries: int = 100_000
    checkpoint_interval_s: float = 1.0
    checkpoint_max_keys: int = 1_000
    limits: ListenerLimits = ListenerLimits()
    # S3 Express: the writer zone's directory bucket (wal.bucket_for); None: `bucket` for every zone.
    bucket_for_zone: Callable[[str], str] | None = None

    def allowed_bucket(self, source_zone: str) -> str:
        """The one bucket notifications from `source_zone` may name ("" if that zone has none)."""
        if self.bucket_for_zone is None:
            return self.bucket
        try:
            return self.bucket_for_zone(source_zone)
        except ValueError:
            return ""


class Agent:
    """Notification server of one zone. `await start()` listens; `await close()` stops."""

    def __init__(self, settings: AgentSettings, reader: ZoneReader, appender: Appender, *,
                 checkpoint: Checkpoint | None = None, metrics: AgentMetrics | None = None,
                 audit: AuditSink | None = None) -> None:
        self._s = settings
        self._audit = audit or NullAuditSink()
        self._keyring = p.Keyring(settings.keys)
        self._reader = reader
        self._appender = appender
        self.metrics = metrics or AgentMetrics()
        self._reads = asyncio.Semaphore(settings.max_concurrent_reads)
        self._appends = AppendSlots(settings.max_in_flight_appends)
        self.metrics.append_slots_free.set_function(lambda: self._appends.free)
        self.metrics.append_runs_waiting.set_function(lambda: self._appends.waiting)
        self._sequencer = PartitionSequencer()
        # (object key, topic, partition) -> done when the run of it that took a ticket first is
        # through: a re-send of the object waits for that, not for the requests behind it.
        self._running: dict[tuple[str, str, int], asyncio.Future[None]] = {}
        self._ordered = OrderedRuns()  # partitions held after a failed pipelined run
        self.applied = AppliedEntries(settings.applied_cache_entries)
        self._server: asyncio.base_events.Server | None = None
        self._conn_tasks: set[asyncio.Task[None]] = set()
        self._closing = False  # close() is cancelling the connections
        self._writers: set[asyncio.StreamWriter] = set()
        self._by_source: dict[str, int] = {}  # open connections per peer address
        self._unauthenticated = 0
        self._log_limiter = LogLimiter()
        # GC checkpoints, written after answering (leader_notify/agent/checkpoints.py); awaited on close.
        self._checkpoints = CheckpointBatcher(checkpoint, self._audit, settings.checkpoint_interval_s,
                                              settings.checkpoint_max_keys,
                                              max(MAX_PENDING_CHECKPOINTS, 2 * settings.checkpoint_max_keys)) \
            if checkpoint is not None else None

    # ------------------------------------------------------------ server

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen; returns the bound (host, port) (port 0 picks a free one)."""
        self._server = await asyncio.start_server(self._connection_until_closed, host, port)
        addr = self._server.sockets[0].getsockname()
        log.info("agent for zone %s listening on %s:%d", self._s.zone, addr[0], addr[1])
        return addr[0], addr[1]

    async def probe_brokers(self) -> None:
        """Readiness: one Metadata request to the zone's brokers (the appender's client).

        Raises what the appender raises (KafkaAppendUnavailable)."""
        await self._appender.probe()

    async def close(self) -> None:
        """Stop listening and cancel open connections (their pending requests get no answer;
        the sender retries them elsewhere or later)."""
        if self._server is not None:
            self._server.close()
        self._closing = True
        for task in list(self._conn_tasks):
            task.cancel()
        if self._conn_tasks:
            await asyncio.gather(*self._conn_tasks, return_exceptions=True)
        await self.drain_checkpoints()
        for writer in list(self._writers):
            writer.transport.abort()  # no lingering half-closed sockets keep wait_closed waiting
        if self._server is not None:
            try:
                async with asyncio.timeout(CLOSE_TIMEOUT_S):
                    await self._server.wait_closed()
            except TimeoutError:
                log.warning("agent for zone %s: connections still open after %.0f s", self._s.zone, CLOSE_TIMEOUT_S)
            self._server = None

    def _log_limited(self, source: str, msg: str, *args: object) -> None:
        allowed, held_back = self._log_limiter.allow(source, time.monotonic())
        if allowed:
            log.warning(msg + " (logged once per source per minute; %d held back)", *args, held_back)

    async def _connection_until_closed(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one connection; a cancellation by close() ends it like a return. Python 3.11's
        start_server calls task.exception() on the finished handler, which raises for a
        cancelled task: every connection open at shutdown logged a CancelledError traceback
        (3.12 checks task.cancelled() first)."""
        try:
            await self._on_connection(reader, writer)
        except asyncio.CancelledError:
            if not self._closing:
                raise

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        source = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        limits = self._s.limits
        refusal = admit(limits, total=len(self._writers), from_source=self._by_source.get(source, 0),
                        unauthenticated=self._unauthenticated, loopback=is_loopback(source))
        if refusal is not None:
            self.metrics.connections_refused.labels(reason=refusal.value).inc()
            self._log_limited(source, "notification connection from %s refused: %s", source, refusal.value)
            writer.transport.abort()
            return
        task = asyncio.current_task()
        assert task is not None  # asyncio runs each connection's handler in a task of its own
        self._conn_tasks.add(task)
        self._writers.add(writer)
        self._by_source[source] = self._by_source.get(source, 0) + 1
        self._unauthenticated += 1
        self.metrics.connections.labels(state="unauthenticated").inc()
        channel = p.Channel(self._keyring, p.Role.AGENT, os.urandom(p.CHALLENGE_BYTES))
        accepted_at = time.monotonic()
        frame_started_at: float | None = None
        loop = asyncio.get_running_loop()
        room = asyncio.Semaphore(MAX_PIPELINED_REQUESTS)
        answers: asyncio.Queue[asyncio.Task[tuple[bytes, AgentApplyRecord | None]] | None] = asyncio.Queue()
        responder = loop.create_task(self._respond(answers, room, channel, writer))
        try:
            while True:
                deadline, why = read_deadline(limits, now=time.monotonic(), accepted_at=accepted_at,
                                              established=channel.established, frame_started_at=frame_started_at)
                try:
                    async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                        data = await reader.read(READ_CHUNK_BYTES)
                except TimeoutError:
                    self.metrics.connections_closed.labels(reason=why).inc()
                    self._log_limited(source, "notification connection from %s closed: %s", source, why)
                    return
                if not data:
                    return
                if frame_started_at is None:
                    frame_started_at = time.monotonic()
                channel.receive_data(data)
                while True:
                    was_established = channel.established
                    try:
                        frame = channel.next_frame()
                    except p.AuthError:
                        self.metrics.auth_failures.labels(reason="bad_mac").inc()
                        self._log_limited(source, "notification from %s: bad MAC, replayed frame or unknown key "
                                          "id; closing", peer)
                        return
                    except p.ProtocolError as exc:
                        self.metrics.auth_failures.labels(reason="bad_frame").inc()
                        self._log_limited(source, "notification from %s: %s; closing", peer, exc)
                        return
                    if channel.established and not was_established:
                        # The proxy's HELLO verified: answer it in the version both speak.
                        writer.write(channel.hello())
                        self.metrics.protocol_connections.labels(protocol_version=str(channel.version)).inc()
                        self._unauthenticated -= 1
                        self.metrics.connections.labels(state="unauthenticated").dec()
                        self.metrics.connections.labels(state="authenticated").inc()
                    if frame is None:
                        break
                    # Handled concurrently, answered in order: a proxy pipelining objects keeps
                    # several in flight on this connection. The task's first step takes the
                    # request's tickets, and tasks start in creation order, so per partition
                    # the arrival order is the frames' order.
                    await room.acquire()
                    answers.put_nowait(loop.create_task(self.handle_frame(frame)))
                frame_started_at = time.monotonic() if channel.buffered_bytes else None
        except (TimeoutError, ConnectionError) as exc:
            # Before its HELLO a peer is a health probe or a scanner more often than a proxy.
            log.log(logging.INFO if channel.established else logging.DEBUG, "notification connection %s: %r",
                    peer, exc)
        finally:
            # Requests already read are applied to the end (their appends and the applied map
            # stay consistent) and answered if the peer still listens; a close() cancels them.
            answers.put_nowait(None)
            if self._closing:
                responder.cancel()
            try:
                await responder
            except asyncio.CancelledError:
                if not responder.cancelled():
                    raise
            except (TimeoutError, ConnectionError) as exc:
                log.log(logging.INFO if channel.established else logging.DEBUG, "notification connection %s: %r",
                        peer, exc)
            self._conn_tasks.discard(task)
            self._writers.discard(writer)
            left = self._by_source.get(source, 1) - 1
            if left:
                self._by_source[source] = left
            else:
                self._by_source.pop(source, None)
            if channel.established:
                self.metrics.connections.labels(state="authenticated").dec()
            else:
                self._unauthenticated -= 1
                self.metrics.connections.labels(state="unauthenticated").dec()
            writer.close()

    async def _respond(self, answers: asyncio.Queue[asyncio.Task[tuple[bytes, AgentApplyRecord | None]] | None],
                       room: asyncio.Semaphore, channel: p.Channel, writer: asyncio.StreamWriter) -> None:
        """Write a connection's answers in request order, each as soon as it and those before
        it are ready. Raises ConnectionError or TimeoutError when the peer stops reading; a
        cancellation cancels the requests not yet answered."""
        pending: asyncio.Task[tuple[bytes, AgentApplyRecord | None]] | None = None
        broken: BaseException | None = None  # the write that failed: later answers are not written
        try:
            while (pending := await answers.get()) is not None:
                payload, applied = await pending
                room.release()
                if applied is not None:  # audited once the answer is on its way, not before
                    self._audit.emit("agent_apply", applied)
                if broken is None and writer.transport.is_closing():
                    # The peer reset the connection while this request was applied (a proxy's
                    # deadline, a restart): its answer has nowhere to go. uvloop's write on a
                    # closed transport raises RuntimeError, not a ConnectionError.
                    broken = ConnectionResetError("the connection closed before its answer")
                if broken is not None:
                    continue  # applied to the end all the same (the applied map stays true)
                writer.write(channel.send(p.MessageType.RESPONSE, payload))
                try:
                    # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation
                    # that arrives as drain completes, and close() would then wait forever.
                    async with asyncio.timeout(WRITE_DRAIN_TIMEOUT_S):
                        await writer.drain()
                except (TimeoutError, ConnectionError) as exc:
                    broken = exc
                    writer.transport.abort()  # the reader stops too
        except asyncio.CancelledError:  # close(): the requests not answered yet are cancelled
            if pending is not None:
                pending.cancel()
            while not answers.empty():
                left = answers.get_nowait()
                if left is not None:
                    left.cancel()
            raise
        if broken is not None:
            raise broken

    async def handle_frame(self, frame: p.Frame) -> tuple[bytes, AgentApplyRecord | None]:
        """Answer one authenticated frame: the response payload (the connection signs it), and
        the `agent_apply` audit record of a decoded request (None for a refused frame)."""
        started = time.perf_counter()
        if frame.type != p.MessageType.REQUEST:
            return self._refuse(0, p.RequestStatus.MALFORMED, "expected a request"), None
        try:
            req = p.decode_request(frame.payload)
        except p.ProtocolError as exc:
            self.metrics.auth_failures.labels(reason="malformed").inc()
            log.warning("notification refused: %s", exc)
            return self._refuse(0, p.RequestStatus.MALFORMED, str(exc)), None
        times: dict[str, float] = {}
        try:
            resp = await self.handle_request(req, times=times)
        except Exception:  # noqa: BLE001 - our bug: answer retriably rather than drop the connection
            log.exception("notification %d for %s failed inside the agent", req.request_id, req.key)
            return self._refuse(req.request_id, p.RequestStatus.INTERNAL, "agent error"), None
        out = p.encode_response(resp)
        if req.prefetch:
            return out, None  # nothing applied: no agent_apply record (the read has its agent_read)
        return out, {
            "source_zone": req.source_zone, "key": req.key, "entries": len(req.entries),
            "status": resp.status.name.lower() if resp.status != p.RequestStatus.OK
            else ("ok" if p.results_all_ok(resp.results) else "entry_errors"),
            "read_ms": times.get("read_s", 0.0) * 1000, "append_ms": times.get("append_s", 0.0) * 1000,
            "handle_ms": (time.perf_counter() - started) * 1000,
        }

    def _refuse(self, request_id: int, status: p.RequestStatus, message: str) -> bytes:
        self.metrics.notifications.labels(outcome=status.name.lower()).inc()
        return p.encode_response(p.NotifyResponse(request_id, status, message, ()))

    # ------------------------------------------------------------ one notification

    async def handle_request(self, req: p.NotifyRequest, *, times: dict[str, float] | None = None) -> p.NotifyResponse:
        """Apply one notification; never raises for data or Kafka problems (they become codes).

        `times`, if given, gets "read_s" (S3 read, bridge included) and "append_s" (every
        append, waiting for earlier notifications' appends of the same partitions included).
        """
        times = {} if times is None else times
        if req.dest_zone != self._s.zone or (req.share and zone_of_share(req.share) != self._s.zone):
            return self._refused(req, p.RequestStatus.WRONG_ZONE, f"this agent serves {self._s.zone}")
        allowed_bucket = self._s.allowed_bucket(req.source_zone)
        if not allowed_bucket or not p.key_allowed(req.bucket, req.key, allowed_bucket, self._s.prefix):
            self.metrics.auth_failures.labels(reason="foreign_key").inc()
            log.warning("notification refused: object s3://%s/%s outside s3://%s/%s",
                        req.bucket, req.key, allowed_bucket, self._s.prefix)
            return self._refused(req, p.RequestStatus.FORBIDDEN_KEY, "object outside the WAL bucket/prefix")
        if req.prefetch:
            return await self._prefetch(req, times)
        results: list[p.EntryResult | None] = [None] * len(req.entries)
        for i in range(len(req.entries)):
            offset = self.applied.get(req.key, i)
            if offset is not None:
                results[i] = p.EntryResult(0, offset, duplicate=True)
                self.metrics.duplicates.labels(source="agent").inc()
        pending = [i for i, r in enumerate(results) if r is None]
        if pending:
            refusal = await self._apply_pending(req, pending, results, times)
            if refusal is not None:
                return refusal
        final = tuple(r if r is not None else p.EntryResult(NETWORK_EXCEPTION) for r in results)
        status_ok = p.results_all_ok(final)
        if status_ok and self._checkpoints is not None:
            await self._checkpoints.add(req.key, req.share or self._s.zone)
        self.metrics.notifications.labels(outcome="ok" if status_ok else "entry_errors").inc()
        return p.NotifyResponse(req.request_id, p.RequestStatus.OK, "", final)

    async def _apply_pending(self, req: p.NotifyRequest, pending: list[int], results: list[p.EntryResult | None],
                             times: dict[str, float]) -> p.NotifyResponse | None:
        """Append the entries of `req` not applied on arrival (`pending`); None, or the refusal
        to answer (the object could not be read).

        A partition that an earlier notification of the same object is still appending (the
        proxy re-sent it: its answer was late, or its connection broke) is not queued behind
        the requests that arrived since, which may be the objects the proxy had pipelined
        after it: this request waits for that run, answers what it appended from the applied
        map, and appends only the rest, at the partition's turn from then on (ordered_runs.py
        holds the later objects' runs of a partition whose run failed). So a re-send is
        answered as soon as its original is through, and never appends a batch twice."""
        by_partition = _by_partition(req, pending)
        joined = {tp: running for tp in by_partition
                  if (running := self._running.get((req.key, tp[0], tp[1]))) is not None}
        own = [i for i in pending if (req.entries[i].topic, req.entries[i].partition) not in joined]
        if own:  # its tickets are taken before the first await: arrival order
            refusal = await self._read_and_append(req, _by_partition(req, own), results, times)
            if refusal is not None:
                return refusal
        if not joined:
            return None
        waited = time.perf_counter()
        await asyncio.wait(set(joined.values()))  # (asyncio.wait does not cancel them if this request is)
        times["append_s"] = times.get("append_s", 0.0) + time.perf_counter() - waited
        left = [i for tp in joined for i in self._answer_applied(req, by_partition[tp], results)]
        if left:
            return await self._read_and_append(req, _by_partition(req, left), results, times)
        return None

    def _answer_applied(self, req: p.NotifyRequest, indexes: list[int], results: list[p.EntryResult | None]) -> list[int]:
        """Answer the leading entries of a partition's `indexes` that are in the applied map;
        returns the rest (a run stops at its first failure, so what it appended is a prefix)."""
        done = 0
        for i in indexes:
            offset = self.applied.get(req.key, i)
            if offset is None:
                break
            results[i] = p.EntryResult(0, offset, duplicate=True)
            self.metrics.duplicates.labels(source="agent").inc()
            done += 1
        return indexes[done:]

    async def _read_and_append(self, req: p.NotifyRequest, by_partition: dict[tuple[str, int], list[int]],
                               results: list[p.EntryResult | None],
                               times: dict[str, float]) -> p.NotifyResponse | None:
        """Take the partitions' tickets (before the first await: this fixes the arrival order
        per partition), read the object, append; None, or the refusal if the read failed."""
        tickets = {tp: self._sequencer.reserve(tp) for tp in by_partition}
        for tp, ticket in tickets.items():
            key = (req.key, tp[0], tp[1])
            if key not in self._running:  # what a re-send of the object arriving meanwhile waits for
                self._running[key] = ticket.finished
                ticket.finished.add_done_callback(functools.partial(self._not_running, key))
        try:
            read_started = time.perf_counter()
            try:
                async with self._reads:
                    zone_entries = await self._reader.read_zone(
                        req.key, req.zone_offset, req.zone_length, source_zone=req.source_zone,
                        expected_entries=len(req.entries))
            except Exception as exc:  # noqa: BLE001 - S3/format errors of any kind answer retriably
                log.warning("read of s3://%s/%s [%d+%d] failed: %r", req.bucket, req.key,
                            req.zone_offset, req.zone_length, exc)
                return self._refused(req, p.RequestStatus.INTERNAL, f"reading the WAL object failed: {exc}")
            append_started = time.perf_counter()
            times["read_s"] = times.get("read_s", 0.0) + append_started - read_started
            await self._append_partitions(req, by_partition, tickets, zone_entries, results)
            times["append_s"] = times.get("append_s", 0.0) + time.perf_counter() - append_started
        finally:
            for t in tickets.values():
                t.release()
        return None

    def _not_running(self, key: tuple[str, str, int], finished: asyncio.Future[None]) -> None:
        if self._running.get(key) is finished:
            del self._running[key]

    async def _prefetch(self, req: p.NotifyRequest, times: dict[str, float]) -> p.NotifyResponse:
        """Read the range into the reader's cache (its single-flight joins the notification's own
        read if that comes first); append nothing. A failure only costs the cache its entry."""
        started = time.perf_counter()
        try:
            async with self._reads:
                # A prefetch lists no entries (protocol v3): the range is verified, its count is
                # checked when the notification finds it cached.
                await self._reader.read_zone(req.key, req.zone_offset, req.zone_length, source_zone=req.source_zone,
                                             expected_entries=len(req.entries) or None)
        except Exception as exc:  # noqa: BLE001 - the notification itself reads again and reports
            log.info("prefetch of s3://%s/%s [%d+%d] failed: %r", req.bucket, req.key, req.zone_offset,
                     req.zone_length, exc)
            return self._refused(req, p.RequestStatus.INTERNAL, f"prefetch failed: {exc}")
        times["read_s"] = time.perf_counter() - started
        self.metrics.notifications.labels(outcome="prefetch").inc()
        return p.NotifyResponse(req.request_id, p.RequestStatus.OK, "", ())

    async def drain_checkpoints(self) -> None:
        """Write the waiting checkpoints now and wait for every manifest in flight."""
        if self._checkpoints is not None:
            await self._checkpoints.drain()

    def _refused(self, req: p.NotifyRequest, status: p.RequestStatus, message: str) -> p.NotifyResponse:
        self.metrics.notifications.labels(outcome=status.name.lower()).inc()
        return p.NotifyResponse(req.request_id, status, message, ())

    async def _append_partitions(self, req: p.NotifyRequest, by_partition: dict[tuple[str, int], list[int]],
                                 tickets: dict[tuple[str, int], Ticket], zone_entries: Sequence[ZoneEntry],
                                 results: list[p.EntryResult | None]) -> None:
        """Append each partition's entries of `req` in order, the partitions concurrently.

        A partition's run starts when it is its turn (no earlier notification still appending
        it) and it holds an append slot; both arrive by callback (Admission), so a partition
        waiting costs no task. The runs that start together go to the appender as one wave
        (`append_runs`: one wake-up for all of them): all of them at once in the common
        case, then a wave per burst of slots that one ProduceRequest's answer frees. A run's
        ticket is passed on as soon as that run is through, so the next notification's run
        of the partition starts while this one's other partitions still append (a failed
        ordered run first holds its partition, ordered_runs.py)."""
        admission = Admission(self._appends)
        for tp, indexes in by_partition.items():
            batches = self._matching_batches(req, indexes, zone_entries)
            if not batches:  # the first entry does not match the object: nothing to append
                self._settle(req, indexes, batches, None, results)
                self._run_through(req, tp, tickets, results[indexes[0]])
                continue
            admission.admit(tickets[tp], (indexes, PartitionRun(tp[0], tp[1], batches, [])),
                            functools.partial(self._at_turn, req, results))
        try:
            async with asyncio.TaskGroup() as tg:
                while admission.waiting or admission.started or admission.refused:
                    for indexes, run, code in admission.take_refused():
                        failed = p.EntryResult(code) if code else None  # 0: every entry was applied meanwhile
                        if failed is not None:
                            self._settle(req, indexes, [], failed, results)
                            self.metrics.errors.labels(error_code=str(code)).inc()
                        self._run_through(req, (run.topic, run.partition), tickets, failed)
                    wave = admission.take_started()
                    if not wave:
                        if admission.waiting:
                            await admission.next_start()
                    elif admission.waiting:
                        tg.create_task(self._append_ready(req, wave, results, tickets))
                    else:  # the last wave: no task needed
                        await self._append_ready(req, wave, results, tickets)
        finally:
            admission.close()

    def _at_turn(self, req: p.NotifyRequest, results: list[p.EntryResult | None], run: EntryRun) -> EntryRun | int:
        """A partition's run of `req` reached its turn: what to append, or a code (Admission).

        An error code if an earlier pipelined run of the partition failed (ordered_runs.py).
        Else the run less its leading entries that were applied since `req` arrived, answered
        from the applied map (0 if that is all of them): two re-sends of an object whose
        original failed part-way both queue for the rest (_apply_pending), and the second
        must not append what the first did."""
        indexes, batches = run
        code = self._ordered.turn((req.proxy_id, batches.topic, batches.partition), ordered=req.ordered)
        if code is not None:
            return code
        left = self._answer_applied(req, indexes, results)
        if len(left) == len(indexes):
            return run
        if not left:
            return 0
        done = len(indexes) - len(left)
        return left, batches._replace(batches=batches.batches[done:])

    def _run_through(self, req: p.NotifyRequest, tp: tuple[str, int], tickets: dict[tuple[str, int], Ticket],
                     failed: p.EntryResult | None) -> None:
        """A partition's run of `req` is final: hold the partition if an ordered run failed,
        then pass its turn on."""
        code = failed.error_code if failed is not None else 0
        self._ordered.finished((req.proxy_id, tp[0], tp[1]), ordered=req.ordered, error_code=code)
        tickets[tp].release()

    async def _append_ready(self, req: p.NotifyRequest, ready: list[EntryRun],
                            results: list[p.EntryResult | None],
                            tickets: dict[tuple[str, int], Ticket]) -> None:
        """Append the runs that hold a slot each, as one group; as soon as a run is through
        (the appender's `on_through`) its slot is free again, its results are recorded and
        its partition's turn is passed on, so neither partitions waiting for a slot nor the
        next notification's run of the partition wait for the whole group."""
        through_yet = [False] * len(ready)

        def through(k: int) -> None:
            if through_yet[k]:
                return
            through_yet[k] = True
            self._appends.release()
            indexes, run = ready[k]
            failure = self._record_appends(req, indexes, run.batches, run.results, results)
            self._settle(req, indexes, run.batches, failure, results)
            if failure is None and len(run.results) < len(run.batches):  # cancelled part-way
                failure = p.EntryResult(NETWORK_EXCEPTION)
            self._run_through(req, (run.topic, run.partition), tickets, failure)

        try:
            await self._appender.append_runs([run for _indexes, run in ready], through)
        finally:  # also when cancelled: what the leader has is remembered for a re-sent notification
            for k in range(len(ready)):
                through(k)

    @staticmethod
    def _matching_batches(req: p.NotifyRequest, indexes: list[int],
                          zone_entries: Sequence[ZoneEntry]) -> list[bytes | memoryview]:
        """The partition's batches up to the first that does not match the object."""
        batches: list[bytes | memoryview] = []
        for i in indexes:
            batch = _matching_batch(req.entries[i], i, zone_entries)
            if batch is None:
                break
            batches.append(batch)
        return batches

    def _settle(self, req: p.NotifyRequest, indexes: list[int], batches: Sequence[bytes | memoryview],
                failed: p.EntryResult | None, results: list[p.EntryResult | None]) -> None:
        """The results of a partition's entries that were not appended: the first entry that
        did not match the object, and every entry after a failed one."""
        if failed is None and len(batches) < len(indexes):
            i = indexes[len(batches)]
            log.warning("entry %d of %s does not match the WAL object (topic/partition/CRC)", i, req.key)
            results[i] = failed = p.EntryResult(CORRUPT_MESSAGE)
            self.metrics.errors.labels(error_code=str(CORRUPT_MESSAGE)).inc()
        if failed is not None:
            # An earlier batch of this partition failed: appending later ones would
            # reorder the log (or hit OUT_OF_ORDER_SEQUENCE); they fail alike.
            for i in indexes:
                if results[i] is None:
                    results[i] = p.EntryResult(failed.error_code)

    def _record_appends(self, req: p.NotifyRequest, indexes: list[int], batches: Sequence[bytes | memoryview],
                        appended: list[AppendResult], results: list[p.EntryResult | None]) -> p.EntryResult | None:
        """Results, applied map and metrics of a run's answers (in order; a failed one is
        last); returns the failed entry's result, if one failed."""
        count = size = 0
        for i, batch, res in zip(indexes, batches, appended, strict=False):
            self.metrics.append_latency.observe(res.latency_s)
            if res.error_code != 0:
                self.metrics.errors.labels(error_code=str(res.error_code)).inc()
                results[i] = failed = p.EntryResult(res.error_code)
                break
            if res.duplicate:
                self.metrics.duplicates.labels(source="leader").inc()
            else:
                count += 1
                size += len(batch)
            self.applied.put(req.key, i, res.base_offset)
            results[i] = p.EntryResult(0, res.base_offset, res.duplicate, round(res.latency_s * 1_000_000))
        else:
            failed = None
        if count:
            self.metrics.entries_appended.inc(count)
            self.metrics.appended_bytes.inc(size)
        return failed


def _by_partition(req: p.NotifyRequest, indexes: list[int]) -> dict[tuple[str, int], list[int]]:
    """`indexes` of `req`'s entries by (topic, partition), each in order."""
    by_partition: dict[tuple[str, int], list[int]] = {}
    for i in indexes:
        by_partition.setdefault((req.entries[i].topic, req.entries[i].partition), []).append(i)
    return by_partition


def _matching_batch(ref: p.NotifyEntry, index: int, zone_entries: Sequence[ZoneEntry]) -> bytes | memoryview | None:
    """The raw batch of entry `index` if the object's entry is the one the notification names
    (not copied: a memoryview of the GET body goes into the ProduceRequest as it is)."""
    if index >= len(zone_entries):
        return None
    entry = zone_entries[index]
    batch = entry.batch
    # wal_s3's parser verified the batch against its CRC and hands it over; recompute only
    # for readers that do not.
    crc = getattr(entry, "crc32c", None)
    if crc is None:
        crc = crc32c.crc32c(batch)
    if entry.topic != ref.topic or entry.partition != ref.partition or crc != ref.crc32c:
        return None
    return batch
