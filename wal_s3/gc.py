"""Checkpoints (which zones applied which object) and garbage collection of WAL objects.

Strategy: checkpoints are written by each zone's agent after it appended every entry of
its share of an object, batched: one manifest object per agent flush names all the WAL
objects applied since the last one (wal_s3/checkpoint_manifest.py says why and how).
Writing one is idempotent (a new key, plain PUT) and needs no coordination between
agents. The older per-object layout, an empty object
`<prefix><checkpoint_prefix>/<wal key without prefix>/<zone>`, is still read. GC lists the
prefix once, reads the manifests it has not read before (one GET each; a looping GC keeps
them), groups checkpoints by object, reads each
candidate object's zone list from its S3 user metadata (`x-amz-meta-zones`, set by the
writer) with one HEAD, and deletes an object only when every zone in it has a
checkpoint (for a zone with several agents: every share listed, wal_s3/agent_shares.py).
An object with an unapplied zone is kept; it is reported as an orphan once
older than `orphan_report_age_s` and deleted once older than `max_orphan_age_s` (an
agent that has not applied it by then never will: the producer got an error or a
timeout long ago) - unless `acked_topic` says an unapplied zone holds an entry whose
producer was already answered (ack_mode wal): such an object is held, reported and never
deleted by GC, because it is the only copy of acknowledged records (leader_notify/sender/recovery.py and
`azsidecar recover` deliver it). Checkpoints are deleted after their object, a manifest once every object it
names is gone. A bucket lifecycle rule
expiring everything after a few days backs GC up (docs/wal-format.md).
"""

from __future__ import annotations

import logging
import math
import random
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

import anyio
import anyio.abc

from core.audit import AuditSink
from core.errors import SidecarError
from wal_s3 import metrics
from wal_s3.agent_shares import zone_of_share
from wal_s3.billing import S3RequestTally, delete_requests
from wal_s3.checkpoint_manifest import (
    ManifestError,
    decode_manifest,
    encode_manifest,
    is_manifest_path,
    manifest_key,
    manifest_zone,
)
from wal_s3.config import WalConfig
from wal_s3.format import WalFormatError, parse_object
from wal_s3.gc_plan import Ages, ManifestView, ObjectFate, checkpoints_to_delete, needs_head, object_fate
from wal_s3.object_keys import NAME_RE, OBJECT_KEY_RE
from wal_s3.retry import RetryArgs, with_retries
from wal_s3.s3 import Limiter, ListedObject, S3Client, S3Error, S3NotFound, S3Store

log = logging.getLogger(__name__)


class CheckpointError(SidecarError):
    """A checkpoint could not be written or read; retriable (S3 kept failing)."""


class GcError(SidecarError):
    """A GC pass failed part-way (S3 errors); a later pass picks up where it stopped."""


def _relative(config: WalConfig, key: str) -> str:
    if not key.startswith(config.prefix):
        raise ValueError(f"{key!r} is not under the WAL prefix {config.prefix!r}")
    return key[len(config.prefix):]


def checkpoint_key(config: WalConfig, wal_key: str, zone: str) -> str:
    """The checkpoint object recording that `zone` applied its share of `wal_key`."""
    if not NAME_RE.match(zone):
        raise ValueError(f"zone {zone!r} must match {NAME_RE.pattern}")
    return f"{config.prefix}{config.checkpoint_prefix}/{_relative(config, wal_key)}/{zone}"


class Checkpoints:
    """Agents call mark_applied_many(keys, zone) once their shares of those objects are in Kafka.

    A manifest goes into the bucket of the objects it names, so GC of that bucket sees it: with
    S3 Express (one directory bucket per zone) keys are grouped by the zone that wrote them
    (`<hash>/wal/<writer zone>/...`), one manifest per bucket. Reads use `bucket` (default
    wal.bucket)."""

    def __init__(self, config: WalConfig, s3_client: S3Client, *, limiter: Limiter | None = None,
                 bucket: str | None = None) -> None:
        self.config = config
        self._s3_client, self._limiter = s3_client, limiter
        self._stores: dict[str, S3Store] = {}
        self._store = self._store_of(bucket or config.bucket)
        self._rng = random.Random()

    def _store_of(self, bucket: str) -> S3Store:
        store = self._stores.get(bucket)
        if store is None:
            store = self._stores[bucket] = S3Store(self._s3_client, bucket, self._limiter,
                                                   default_threads=self.config.max_s3_threads)
        return store

    def _bucket_of(self, key: str) -> str:
        """The bucket holding WAL object `key`; raises ValueError for a key of no writer zone (express)."""
        if self.config.storage_class != "express":
            return self.config.bucket
        match = OBJECT_KEY_RE.match(_relative(self.config, key))
        if match is None:
            raise ValueError(f"{key!r} is not a WAL object key (no writer zone to find its bucket by)")
        return self.config.bucket_for(match["zone"])

    def _retry_args(self) -> RetryArgs:
        return {"max_attempts": self.config.max_attempts, "base_ms": self.config.retry_base_ms,
                "max_ms": self.config.retry_max_ms, "rng": self._rng}

    async def mark_applied(self, key: str, zone: str) -> None:
        """Record that zone applied its share of key. Raises CheckpointError, ValueError."""
        await self.mark_applied_many([key], zone)

    async def mark_applied_many(self, keys: list[str], zone: str) -> None:
        """Record, with one manifest PUT, that zone applied its shares of `keys` (idempotent).

        Raises CheckpointError (S3 kept failing), ValueError (a key outside the WAL prefix,
        a zone that cannot be a key segment).
        """
        if not NAME_RE.match(zone):
            raise ValueError(f"zone {zone!r} must match {NAME_RE.pattern}")
        by_bucket: dict[str, list[str]] = {}
        for k in keys:
            by_bucket.setdefault(self._bucket_of(k), []).append(_relative(self.config, k))
        for bucket, relative in by_bucket.items():
            body = encode_manifest(zone, relative)
            ck = manifest_key(self.config.prefix, self.config.checkpoint_prefix, zone, int(time.time() * 1000),
                              secrets.token_hex(8))
            store = self._store_of(bucket)

            # A def, not a lambda: the type checker infers no lambda with defaults.
            def put(_n: int, store: S3Store = store, ck: str = ck, body: bytes = body) -> Awaitable[None]:
                return store.put(ck, body)
            try:
                await with_retries(put, **self._retry_args())
            except S3Error as exc:
                raise CheckpointError(f"checkpoint manifest {bucket}/{ck}: {exc}") from exc

    async def applied_index(self, tally: S3RequestTally | None = None) -> dict[str, set[str]]:
        """WAL key (without prefix) -> zones that applied it, from every checkpoint and manifest.

        One LIST (per 1,000 keys) and one GET per manifest, counted in `tally`. Raises CheckpointError.
        """
        tally = tally or S3RequestTally()
        prefix = f"{self.config.prefix}{self.config.checkpoint_prefix}/"
        try:
            listed = await with_retries(tally.each_attempt("LIST", lambda _n: self._store.list_objects(prefix)),
                                        **self._retry_args())
            tally.listed(len(listed))
            found = await read_checkpoints(self.config, self._store, listed, self._retry_args(), {}, tally)
        except S3Error as exc:
            raise CheckpointError(f"reading checkpoints under {prefix}: {exc}") from exc
        return {rel: {zone for zone, _ in zs} for rel, zs in found.applied.items()}

    async def applied_zones(self, key: str) -> set[str]:
        """Zones that marked key applied (reads every checkpoint: for one-off use). Raises CheckpointError."""
        return (await self.applied_index()).get(_relative(self.config, key), set())


@dataclass(frozen=True)
class _Manifest:
    key: str
    zone: str
    relative_keys: tuple[str, ...]
    modified_s: float


@dataclass
class FoundCheckpoints:
    # relative WAL key -> [(zone, when the checkpoint or manifest was written)]
    applied: dict[str, list[tuple[str, float]]]
    per_object: dict[str, list[tuple[str, float]]]  # the older layout, by relative WAL key
    manifests: list[_Manifest]


async def read_checkpoints(config: WalConfig, store: S3Store, listed: Iterable[ListedObject], retry: RetryArgs,
                           cache: dict[str, tuple[str, tuple[str, ...]]],
                           tally: S3RequestTally | None = None) -> FoundCheckpoints:
    """Checkpoints among `listed` (objects under the WAL prefix, or under the checkpoint prefix).

    Manifests are read with one GET each unless `cache` has them (it is filled, and pruned to
    the manifests listed). A manifest that is not ours or unreadable is logged and skipped;
    one deleted since the listing is skipped. `tally` counts the GETs. Raises S3Error if S3
    keeps failing.
    """
    tally = tally or S3RequestTally()
    cp_root = f"{config.prefix}{config.checkpoint_prefix}/"
    found = FoundCheckpoints({}, {}, [])
    listed_manifests: set[str] = set()
    for o in listed:
        if not o.key.startswith(cp_root):
            continue
        rest = o.key[len(cp_root):]
        if is_manifest_path(rest):
            zone = manifest_zone(rest)
            if zone is None:
                log.error("checkpoint manifests: ignoring %s (not a manifest name)", o.key)
                continue
            listed_manifests.add(o.key)
            content = cache.get(o.key)
            if content is None:
                def get(_n: int, key: str = o.key) -> Awaitable[bytes]:
                    return store.get(key)
                try:
                    data = await with_retries(tally.each_attempt("GET", get), **retry)
                    content = decode_manifest(data)
                except S3NotFound:
                    continue  # deleted since the listing (another GC pass)
                except ManifestError as exc:
                    log.error("checkpoint manifest %s ignored: %s", o.key, exc)
                    continue
                cache[o.key] = content
            manifest = _Manifest(o.key, content[0], content[1], o.last_modified_s)
            found.manifests.append(manifest)
            for rel in manifest.relative_keys:
                found.applied.setdefault(rel, []).append((manifest.zone, manifest.modified_s))
        else:
            wal_rel, _, zone = rest.rpartition("/")
            found.per_object.setdefault(wal_rel, []).append((zone, o.last_modified_s))
            found.applied.setdefault(wal_rel, []).append((zone, o.last_modified_s))
    for key in [k for k in cache if k not in listed_manifests]:
        del cache[key]  # bounded by what is in the bucket
    return found


@dataclass(frozen=True)
class Orphan:
    key: str
    age_s: float
    unapplied_zones: tuple[str, ...]  # empty if the object's zones are unknown (no metadata)


@dataclass(frozen=True)
class GcReport:
    scanned: int  # WAL objects seen
    deleted: tuple[str, ...]  # every zone applied
    orphans: tuple[Orphan, ...]  # unapplied zone, older than the report age (includes deleted ones)
    orphans_deleted: tuple[str, ...]  # older than max_orphan_age_s
    pending: int  # unapplied zone, younger than the report age: normal in-flight work
    checkpoints_deleted: int
    dry_run: bool
    held: tuple[str, ...] = ()  # older than max_orphan_age_s but holding acknowledged entries: kept

    def lines(self) -> list[str]:
        """Human-readable summary, one action per line (what `azsidecar gc` prints)."""
        verb = "would delete" if self.dry_run else "deleted"
        out = [f"{verb} {k} (all zones applied)" for k in self.deleted]
        out += [f"orphan {o.key} age {o.age_s:.0f}s unapplied {','.join(o.unapplied_zones) or '(zones unknown)'}"
                for o in self.orphans]
        out += [f"{verb} orphan {k}" for k in self.orphans_deleted]
        out += [f"HELD {k}: unapplied acknowledged (ack_mode wal) entries; run `azsidecar recover`" for k in self.held]
        out.append(f"gc: scanned {self.scanned} objects, {verb} {len(self.deleted)} applied and "
                   f"{len(self.orphans_deleted)} orphans, {len(self.orphans)} orphans, {self.pending} pending, "
                   f"{verb} {self.checkpoints_deleted} checkpoints")
        return out


async def run_gc(config: WalConfig, s3_client: S3Client, *, dry_run: bool = False, now_s: float | None = None,
                 limiter: anyio.CapacityLimiter | None = None,
                 acked_topic: Callable[[str], bool] | None = None,
                 manifest_cache: dict[str, tuple[str, tuple[str, ...]]] | None = None,
                 bucket: str | None = None, audit: AuditSink | None = None) -> GcReport:
    """One GC pass over `bucket` (default config.bucket; with S3 Express one zone's directory
    bucket, config.bucket_for(zone)) under config.prefix. Raises GcError if S3 keeps failing.

    audit: gets the pass's S3 requests (LIST, GET, HEAD, DELETE) as s3_request records
    (purpose gc), failed passes too.

    acked_topic(topic) -> True for topics acknowledged on durability (ack_mode wal): an old
    orphan with such an entry in an unapplied zone is held instead of deleted.
    manifest_cache: checkpoint manifests read by earlier passes (manifests are immutable);
    pass the same dict to every pass to read each manifest once.
    """
    tally = S3RequestTally()
    try:
        return await _gc_pass(config, s3_client, dry_run, now_s, limiter, acked_topic, manifest_cache, tally,
                              bucket or config.bucket)
    finally:
        tally.emit(audit, "gc")


async def _gc_pass(config: WalConfig, s3_client: S3Client, dry_run: bool, now_s: float | None,
                   limiter: anyio.CapacityLimiter | None, acked_topic: Callable[[str], bool] | None,
                   manifest_cache: dict[str, tuple[str, tuple[str, ...]]] | None,
                   tally: S3RequestTally, bucket: str) -> GcReport:
    store = S3Store(s3_client, bucket, limiter, default_threads=config.max_s3_threads)
    rng = random.Random()
    retry: RetryArgs = {"max_attempts": config.max_attempts, "base_ms": config.retry_base_ms,
                        "max_ms": config.retry_max_ms, "rng": rng}
    now_s = time.time() if now_s is None else now_s
    ages = Ages.of(config.orphan_report_age_s, config.max_orphan_age_s)
    try:
        listed = await with_retries(tally.each_attempt("LIST", lambda _n: store.list_objects(config.prefix)),
                                    **retry)
    except S3Error as exc:
        raise GcError(f"listing {bucket}/{config.prefix}: {exc}") from exc
    tally.listed(len(listed))

    wal: dict[str, float] = {}  # relative key -> last modified
    for o in listed:
        rel = o.key[len(config.prefix):]
        if OBJECT_KEY_RE.match(rel):
            wal[rel] = o.last_modified_s
    try:
        found = await read_checkpoints(config, store, listed, retry, {} if manifest_cache is None else manifest_cache,
                                       tally)
    except S3Error as exc:
        raise GcError(f"reading checkpoint manifests in {bucket}/{config.prefix}: {exc}") from exc

    deleted: list[str] = []
    orphans: list[Orphan] = []
    orphans_deleted: list[str] = []
    held: list[str] = []
    pending = 0
    try:
        for rel, modified in sorted(wal.items()):
            key = config.prefix + rel
            age_s = now_s - modified
            applied = {z for z, _ in found.applied.get(rel, ())}
            if not needs_head(age_s, applied, ages):
                pending += 1
                continue
            def head(_n: int, key: str = key) -> Awaitable[dict[str, str]]:
                return store.head_metadata(key)
            try:
                meta = await with_retries(tally.each_attempt("HEAD", head), **retry)
            except S3NotFound:
                continue  # deleted since the listing (another GC, lifecycle)
            zones = [z for z in meta.get("zones", "").split(",") if z]
            fate, unapplied = object_fate(age_s, zones, applied, ages)
            if fate is ObjectFate.PENDING:
                pending += 1
            elif fate is ObjectFate.APPLIED:
                deleted.append(key)
            else:
                orphans.append(Orphan(key, age_s, unapplied))
                if fate is ObjectFate.EXPIRED:
                    if acked_topic is not None and await _holds_acknowledged(store, key, unapplied, acked_topic,
                                                                             retry, tally):
                        held.append(key)
                    else:
                        orphans_deleted.append(key)
        to_delete = deleted + orphans_deleted
        manifests = [ManifestView(m.key, m.relative_keys, m.modified_s) for m in found.manifests]
        cp_delete = checkpoints_to_delete(found.per_object, manifests, set(wal),
                                          {k[len(config.prefix):] for k in to_delete}, now_s, ages,
                                          f"{config.prefix}{config.checkpoint_prefix}/")
        if not dry_run:
            # Objects first, checkpoints after: a crash in between leaves only checkpoints.
            if to_delete:
                await with_retries(tally.each_attempt("DELETE", lambda _n: store.delete_many(to_delete),
                                                      delete_requests(len(to_delete))), **retry)
            if cp_delete:
                await with_retries(tally.each_attempt("DELETE", lambda _n: store.delete_many(cp_delete),
                                                      delete_requests(len(cp_delete))), **retry)
    except S3Error as exc:
        raise GcError(f"gc pass on {bucket}/{config.prefix}: {exc}") from exc

    if not dry_run:
        metrics.GC_DELETED.labels("applied").inc(len(deleted))
        metrics.GC_DELETED.labels("orphan").inc(len(orphans_deleted))
    metrics.GC_ORPHANS.set(len(orphans))
    for key in held:
        log.error("GC holds %s: acknowledged (ack_mode wal) entries never applied; run `azsidecar recover`", key)
    return GcReport(len(wal), tuple(deleted), tuple(orphans), tuple(orphans_deleted), pending,
                    len(cp_delete), dry_run, tuple(held))


async def _holds_acknowledged(store: S3Store, key: str, unapplied: tuple[str, ...],
                              acked_topic: Callable[[str], bool], retry: RetryArgs, tally: S3RequestTally) -> bool:
    """Does an unapplied zone of `key` (all zones, if unknown) hold an acknowledged entry?

    An object that cannot be parsed holds nothing deliverable; it goes like any orphan.
    """
    try:
        parsed = parse_object(await with_retries(tally.each_attempt("GET", lambda _n: store.get(key)), **retry))
    except S3NotFound:
        return False
    except WalFormatError:
        log.error("GC: %s is not a valid WAL object; deleting it as an orphan", key)
        return False
    # A share of a zone with several agents names the zone it is part of (agent_shares.py);
    # the whole zone range is checked for it: holding a little long is the safe side.
    zones = {zone_of_share(z) for z in unapplied} if unapplied else set(parsed.zones)
    return any(acked_topic(e.topic) for zone in zones for e in parsed.zones.get(zone, ()))


async def run_gc_periodically(config: WalConfig, s3_client: S3Client, *, interval_s: float | None = None,
                              dry_run: bool = False, passes: float = math.inf,
                              acked_topic: Callable[[str], bool] | None = None,
                              audit: AuditSink | None = None,
                              task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    """Run GC every interval_s (default config.gc_interval_s) inside the caller's nursery.

    A failed pass is logged and retried at the next interval; never raises GcError.
    """
    interval_s = config.gc_interval_s if interval_s is None else interval_s
    limiter = anyio.CapacityLimiter(config.max_s3_threads)  # shared by every pass
    manifests: dict[str, tuple[str, tuple[str, ...]]] = {}  # read once, kept while listed
    task_status.started()
    done = 0
    while done < passes:
        try:
            report = await run_gc(config, s3_client, dry_run=dry_run, limiter=limiter, acked_topic=acked_topic,
                                  manifest_cache=manifests, audit=audit)
            for line in report.lines():
                log.info("%s", line)
        except GcError as exc:
            log.warning("%s", exc)
        done += 1
        if done < passes:
            await anyio.sleep(interval_s)
