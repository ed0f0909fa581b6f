"""Deliver acknowledged WAL entries that no agent applied: at proxy start, and on demand.

With `router.ack_modes` = `wal` for a topic, the producer has its answer once the object is
durable in S3; the append to the leader is the proxy's promise. If the proxy dies before
every zone applied its share (or the agent kept failing until the proxy gave up), the
object is still in S3 and the agents' checkpoints (wal_s3/gc.py) say which zones are
missing. A restarting proxy therefore, before it serves, lists its own objects of earlier
epochs and, for every zone without a checkpoint whose share holds an entry of an
ack_mode=wal topic, sends that share's notification again, in (epoch, sequence) order,
so a partition's batches still reach the leader in the order they were received and
before any batch the restarted proxy accepts.

The whole share is re-sent, not only the wal-mode entries: the agent matches a
notification's entries to the zone range one for one. Leader-mode entries in it were never
acknowledged; appending them now is harmless for idempotent producers (the leader answers
DUPLICATE_SEQUENCE_NUMBER to their re-send) and at-least-once for producers without an id,
as in Kafka. Objects with no wal-mode entry in an unapplied zone are left to GC.

A zone with several agents (docs/routing.md): each agent's run of the share is its own
share name (`<zone>.<i>of<n>`) with its own checkpoint; only the runs without one are
re-sent, each to its owner, so an agent that applied its run is not asked again. The runs
are read from the object's `share-entries` metadata (the owners when it was written, which
with notify.agent_ownership = "leader" followed the leaders then); an object without it
(written before, or by one agent per zone) is split by the current owners. (With
`notify.agents` changed since the object was written, an owner index may name another
agent or none; the sender then refuses it and it is reported.)

Shares that still fail are reported (log, metric, return value) and stay in S3; GC keeps
them (`acked_topic` in wal_s3.gc.run_gc) and `azsidecar recover` retries later.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import trio

from core import errors
from core.audit import AuditSink
from leader_notify.protocol import EntryResult
from leader_notify.sender.sender import AnnouncedObject, NotifyError
from wal_s3.agent_shares import parse_share_entries, share_name
from wal_s3.billing import S3RequestTally
from wal_s3.config import WalConfig
from wal_s3.format import EntryRef, ParsedObject, WalFormatError, ZoneShare, entry_encoded_size, parse_object
from wal_s3.gc import CheckpointError, Checkpoints
from wal_s3.object_keys import OBJECT_KEY_RE
from wal_s3.retry import RetryArgs, with_retries
from wal_s3.s3 import S3Client, S3Error, S3NotFound, S3Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RecoveryReport:
    scanned: int  # this writer's objects of earlier epochs
    delivered: tuple[tuple[str, str], ...] = ()  # (key, zone) re-sent and applied
    failed: tuple[tuple[str, str, str], ...] = ()  # (key, zone, why): still unapplied
    skipped: int = 0  # (key, zone) shares needing no delivery: applied, or no wal-mode entry

    def lines(self) -> list[str]:
        out = [f"delivered {key} -> {zone}" for key, zone in self.delivered]
        out += [f"FAILED {key} -> {zone}: {why}" for key, zone, why in self.failed]
        out.append(f"recovery: {self.scanned} objects of earlier epochs, {len(self.delivered)} shares delivered, "
                   f"{len(self.failed)} failed, {self.skipped} needed nothing")
        return out


@dataclass(frozen=True)
class _Recovered:
    """What NotifySender.notify reads of a flushed object: its key, zone shares and, where
    the metadata recorded them, each zone's runs by agent."""

    key: str
    zones: Mapping[str, ZoneShare] = field(default_factory=dict)
    share_runs: Mapping[str, tuple[tuple[int, int, int], ...]] = field(default_factory=dict)


class RecoverySender(Protocol):
    """What recovery asks of a sender (a NotifySender): one share, or one agent's run of it,
    delivered. A sender with an `agents` map (owners.AgentMap) has a zone's share split by agent."""

    async def notify(self, flushed: AnnouncedObject, dest_zone: str, *,
                     agent: int | None = None) -> list[EntryResult]: ...


def earlier_objects(keys: Iterable[str], prefix: str, writer_id: str, current_epoch: int) -> list[str]:
    """Keys of `writer_id`'s objects from epochs before `current_epoch`, in (epoch, sequence) order."""
    found = []
    for key in keys:
        m = OBJECT_KEY_RE.match(key[len(prefix):]) if key.startswith(prefix) else None
        if m and m["writer_id"] == writer_id and int(m["epoch"]) < current_epoch:
            found.append((int(m["epoch"]), int(m["sequence"]), key))
    return [key for _, _, key in sorted(found)]


def zone_shares(parsed: ParsedObject) -> dict[str, ZoneShare]:
    """Each zone's range and entry references, as the writer's encoder produced them.

    An entry is its head (topic, fixed fields, head CRC) followed by the raw batch, so a
    batch starts `entry_encoded_size - len(batch)` bytes into its entry.
    """
    shares = {}
    for zone, index in parsed.header.zones.items():
        refs = []
        pos = index.offset
        for e in parsed.zones[zone]:
            assert e.crc32c is not None  # a parsed entry carries it (verified)
            size = entry_encoded_size(e)
            batch_len = len(e.batch)
            refs.append(EntryRef(e.topic, e.partition, pos + size - batch_len, batch_len, e.crc32c, e.record_count,
                                 e.producer_id, e.producer_epoch, e.base_sequence))
            pos += size
        shares[zone] = ZoneShare(index.offset, index.length, tuple(refs))
    return shares


def holds_acknowledged(share: ZoneShare, acked_topic: Callable[[str], bool]) -> bool:
    return any(acked_topic(ref.topic) for ref in share.entries)


async def recover_acknowledged(config: WalConfig, s3_client: S3Client, sender: RecoverySender, writer_id: str, current_epoch: int,
                               acked_topic: Callable[[str], bool], *,
                               limiter: trio.CapacityLimiter | None = None, bucket: str | None = None,
                               audit: AuditSink | None = None) -> RecoveryReport:
    """Re-send every unapplied share holding an ack_mode=wal entry of `writer_id`'s earlier epochs.

    `sender`: a leader_notify NotifySender. `audit` gets the S3 requests (LIST, GET) as
    s3_request records (purpose recovery). Never raises for one object's trouble (it is
    reported in `failed`); raises S3Error only if the listing itself keeps failing. `bucket`:
    where the writer wrote (default wal.bucket; with S3 Express its zone's directory bucket).
    """
    tally = S3RequestTally()
    try:
        return await _recover(config, s3_client, sender, writer_id, current_epoch, acked_topic, limiter, tally,
                              bucket or config.bucket)
    finally:
        tally.emit(audit, "recovery")


async def _recover(config: WalConfig, s3_client: S3Client, sender: RecoverySender, writer_id: str, current_epoch: int,
                   acked_topic: Callable[[str], bool], limiter: trio.CapacityLimiter | None,
                   tally: S3RequestTally, bucket: str) -> RecoveryReport:
    limiter = limiter or trio.CapacityLimiter(config.max_s3_threads)
    store = S3Store(s3_client, bucket, limiter)
    checkpoints = Checkpoints(config, s3_client, limiter=limiter, bucket=bucket)
    retry: RetryArgs = {"max_attempts": config.max_attempts, "base_ms": config.retry_base_ms,
                        "max_ms": config.retry_max_ms}
    listed = await with_retries(tally.each_attempt("LIST", lambda _n: store.list_objects(config.prefix)), **retry)
    tally.listed(len(listed))
    keys = earlier_objects((o.key for o in listed), config.prefix, writer_id, current_epoch)
    delivered: list[tuple[str, str]] = []
    failed: list[tuple[str, str, str]] = []
    skipped = 0
    index: dict[str, set[str]] | None = None  # relative key -> zones applied; read once, if needed
    for key in keys:
        # A def, not a lambda: the type checker infers no lambda with defaults.
        def get(_n: int, key: str = key) -> Awaitable[bytes]:
            return store.get(key)
        try:
            if index is None:
                index = await checkpoints.applied_index(tally)
            applied = index.get(key[len(config.prefix):], set())
            parsed = parse_object(await with_retries(tally.each_attempt("GET", get), **retry))
        except S3NotFound:
            continue  # GC removed it since the listing: every zone had applied it
        except (S3Error, CheckpointError, WalFormatError) as exc:
            failed.append((key, "*", f"{type(exc).__name__}: {exc}"))
            continue
        layout: dict[str, tuple[tuple[int, int, int], ...]] | None = None  # read once, if a zone has several agents
        for zone, share in zone_shares(parsed).items():
            if zone in applied or not holds_acknowledged(share, acked_topic):
                skipped += 1
                continue
            agents = getattr(sender, "agents", None)  # leader_notify.sender.owners.AgentMap
            recorded: Mapping[str, tuple[tuple[int, int, int], ...]] = {}
            if agents is None or agents.count(zone) <= 1:
                runs: list[tuple[int | None, str]] = [(None, zone)]
            else:
                if layout is None:
                    layout = await recorded_layout(store, key, tally, retry)
                recorded = {zone: layout[zone]} if zone in layout else {}
                try:
                    owners = [owner for owner, _first, _end in agents.runs(_Recovered(key, {zone: share}, recorded), zone)]
                except ValueError:
                    owners = []
                runs = [(o, share_name(zone, o, agents.count(zone))) for o in owners if o < agents.count(zone)]
                for o in owners:
                    if o >= agents.count(zone):  # written for a longer notify.agents list
                        failed.append((key, f"{zone} agent {o + 1}", f"notify.agents lists {agents.count(zone)}"))
                if not owners:
                    runs = [(None, zone)]
            for agent, name in runs:
                if name in applied:
                    skipped += 1
                    continue
                why = await _deliver(sender, _Recovered(key, {zone: share}, recorded), zone, agent)
                if why is None:
                    delivered.append((key, name))
                else:
                    failed.append((key, name, why))
    report = RecoveryReport(len(keys), tuple(delivered), tuple(failed), skipped)
    for line in report.lines():
        (log.error if line.startswith("FAILED") else log.info)("%s", line)
    return report


async def recorded_layout(store: S3Store, key: str, tally: S3RequestTally,
                           retry: RetryArgs) -> dict[str, tuple[tuple[int, int, int], ...]]:
    """zone -> runs by agent from the object's `share-entries` metadata ({} without it, or if
    it cannot be read: the share is then split by the current owners)."""
    try:
        meta = await with_retries(tally.each_attempt("HEAD", lambda _n: store.head_metadata(key)), **retry)
    except S3Error as exc:
        log.warning("recovery: metadata of %s unreadable (%s); splitting by the current owners", key, exc)
        return {}
    zones, counts = meta.get("zones", ""), meta.get("share-entries")
    if counts is None:
        return {}
    try:
        return parse_share_entries(zones, counts)
    except ValueError as exc:
        log.warning("recovery: %s: %s; splitting by the current owners", key, exc)
        return {}


async def _deliver(sender: RecoverySender, obj: _Recovered, zone: str, agent: int | None = None) -> str | None:
    """None once every entry of the share is in Kafka; otherwise why not."""
    try:
        results = await sender.notify(obj, zone) if agent is None else await sender.notify(obj, zone, agent=agent)
    except NotifyError as exc:
        return f"notify: {exc}"
    bad = [r.error_code for r in results
           if r.error_code not in (errors.NONE, errors.DUPLICATE_SEQUENCE_NUMBER) and not r.duplicate]
    return f"{len(bad)} entries failed (error codes {sorted(set(bad))})" if bad else None
