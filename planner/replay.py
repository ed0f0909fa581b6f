"""A run replayed: the partition batches the proxies received (audit produce_batch, or
produce_summary spread over its interval: planner.audit_batches), sealed into objects by the
writer's rules, priced per mode - the planner's check against what the audit measured (pure).

From summaries the arrivals are a timeline at interval resolution: a key's batches of one
interval come evenly paced from its first to its last batch, so a replay sees the objects of
that pace (the same bytes and batch counts; how they bunched within the interval is lost)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from core.audit import NOTIFICATION_KINDS
from planner.audit_batches import field_number, record_ts_ms, successful_batches
from planner.plan import NOTIFY_BYTES_PER_ENTRY, PRODUCE_OVERHEAD_BYTES, PlanError, Usage, WalSettings
from wal_s3.flush_policy import linger_due


@dataclass(frozen=True)
class Arrival:
    """One partition batch as a proxy received it (its end less its latency)."""

    t_s: float
    host: str
    zone: str
    leader_zone: str
    nbytes: int
    waited_s: float = 0.0  # what its oldest record had waited in the producer, counted into the linger


def arrivals_from_produce_batches(records: Iterable[Mapping[str, object]]) -> list[Arrival]:
    """Successful produce batches (produce_batch or produce_summary records) as arrivals, in time order."""
    out = [Arrival(b.received_s, b.proxy_id, b.zone, b.leader_zone, b.nbytes, b.producer_wait_ms / 1000.0)
           for b in successful_batches(records)]
    out.sort(key=lambda a: a.t_s)
    return out


@dataclass(frozen=True)
class ReplayedObject:
    sealed_s: float
    nbytes: int
    entries_by_zone: dict[str, int]


def replay_writer(arrivals: Sequence[Arrival], linger_ms: int, max_bytes: int) -> list[ReplayedObject]:
    """The objects one WAL writer makes of these cross-zone arrivals (time order), flushing as
    wal_s3/writer.py does: an object opens with its first entry and is sealed `linger_ms` after
    its earliest-due entry (wal_s3.flush_policy.linger_due: the linger counts what an entry's
    records had waited in the producer), or before an entry that would take it past
    `max_bytes`, or once it reaches `max_bytes`."""
    linger_s = linger_ms / 1000.0
    objects: list[ReplayedObject] = []
    due = 0.0
    nbytes = 0
    entries: dict[str, int] = {}

    def seal(at: float) -> None:
        nonlocal nbytes, entries
        if entries:
            objects.append(ReplayedObject(at, nbytes, entries))
        nbytes, entries = 0, {}

    for a in arrivals:
        if entries and a.t_s > due:
            seal(due)
        if entries and nbytes + a.nbytes > max_bytes:
            seal(a.t_s)
        entry_due = linger_due(a.t_s, linger_s, a.waited_s)
        due = entry_due if not entries else min(due, entry_due)
        nbytes += a.nbytes
        entries[a.leader_zone] = entries.get(a.leader_zone, 0) + 1
        if nbytes >= max_bytes or due <= a.t_s:
            seal(a.t_s)
    if entries:
        seal(due)
    return objects


def notify_sizes_from_records(records: Iterable[Mapping[str, object]]) -> tuple[float, float] | None:
    """(bytes per share, bytes per entry) of a run's notifications (request + response bytes
    against entries, least squares over the `notification` records with status ok: the key, topic
    and zone names of a deployment make them differ from the defaults); None without any. With a
    single entry count, the per-entry default is kept and the per-share figure fitted. A
    `notification_summary` (schema v15) adds its round trips to the same fit exactly: it carries
    the sums the least squares need (count, entries, bytes, entries^2, entries x bytes).

    Prefetches (status "prefetch": the objects queued behind the one in flight, announced
    early so the agent reads ahead) cross zones too, as often as notifications queue up, which
    the replay cannot know; their bytes are spread over the run's shares."""
    n = sx = sy = sxx = sxy = 0.0
    prefetch_bytes = 0.0
    for r in records:
        kind = r.get("kind")
        if kind not in NOTIFICATION_KINDS:
            continue
        size = field_number(r, "request_bytes") + field_number(r, "response_bytes")
        status = r.get("status", "ok")
        if status == "prefetch":
            prefetch_bytes += size
        elif status != "ok":
            continue
        elif kind == "notification":
            entries = field_number(r, "entries")
            n, sx, sy, sxx, sxy = n + 1, sx + entries, sy + size, sxx + entries * entries, sxy + entries * size
        else:
            n += field_number(r, "notifications")
            sx += field_number(r, "entries")
            sy += size
            sxx += field_number(r, "entries_squared_sum")
            sxy += field_number(r, "entries_bytes_sum")
    if n == 0:
        return None
    mx, my = sx / n, sy / n
    var_x = sxx - n * mx * mx  # sum of (x - mx)^2
    cov = sxy - n * mx * my  # sum of (x - mx)(y - my)
    # one entry count: var_x is 0 up to rounding (sums of squares of equal counts)
    per_entry = cov / var_x if var_x > 1e-9 * max(sxx, 1.0) else float(NOTIFY_BYTES_PER_ENTRY)
    return max(my - per_entry * mx, 0.0) + prefetch_bytes / n, max(per_entry, 0.0)


def applies_from_records(records: Iterable[Mapping[str, object]]) -> dict[str, list[float]]:
    """Per agent zone, the times (s, sorted) its agent applied a WAL share, from audit records
    (`agent_apply` with status ok: emitted once the answer is on its way, when the object's key
    has joined the next checkpoint manifest). An `agent_apply_summary` (schema v15) keeps only
    its interval's first and last apply: its `applies` are spread evenly between them (the
    manifests the replay counts from them are then at interval resolution)."""
    times: dict[str, list[float]] = {}
    for r in records:
        if r.get("status", "ok") != "ok":
            continue
        if r.get("kind") == "agent_apply":
            times.setdefault(str(r.get("zone")), []).append(record_ts_ms(r) / 1000.0)
        elif r.get("kind") == "agent_apply_summary":
            count = int(field_number(r, "applies"))
            first = field_number(r, "first_ts_ms") or record_ts_ms(r)
            last = field_number(r, "last_ts_ms") or record_ts_ms(r)
            step = (last - first) / (count - 1) if count > 1 else 0.0
            times.setdefault(str(r.get("zone")), []).extend((first + i * step) / 1000.0 for i in range(count))
    return {z: sorted(ts) for z, ts in times.items()}


def manifests(applied_s: Sequence[float], wal: WalSettings) -> int:
    """Checkpoint manifests one agent writes for shares applied at these times (sorted): a timer
    of `checkpoint_interval_ms` from the first key waiting, or at once at `checkpoint_max_keys`
    (leader_notify/agent/agent.py), the same rule as the writer's linger and max_bytes."""
    keys = [Arrival(t, "agent", "-", "-", 1) for t in applied_s]
    return len(replay_writer(keys, wal.checkpoint_interval_ms, wal.checkpoint_max_keys))


def replay_usage(arrivals: Sequence[Arrival], mode: str, wal: WalSettings,
                 applied: Mapping[str, Sequence[float]] | None = None) -> tuple[Usage, float]:
    """Usage totals (not rates) and the window in seconds if these arrivals had been served in
    `mode` ("sidecar": a writer per host; "gateway": `writers_per_zone` per zone, hosts
    assigned round robin) with every cross-zone batch through the WAL (policy wal).

    Checkpoint manifests: from `applied` (per agent zone, the measured times its agent applied
    shares: only right for the run's own mode) if given; else each replayed share is applied at
    its object's seal (a constant delay would not change the count; applications that bunch
    behind slow appends, as on a loaded machine, make fewer manifests than this).
    Raises PlanError for an unknown mode or no arrivals."""
    if mode not in ("sidecar", "gateway"):
        raise PlanError(f"replay mode: sidecar or gateway, got {mode!r}")
    if not arrivals:
        raise PlanError("no arrivals to replay")
    window_s = max(arrivals[-1].t_s - arrivals[0].t_s, 0.001)
    hosts = sorted({(a.zone, a.host) for a in arrivals})
    writer_of = {}
    for i, (zone, host) in enumerate(hosts):
        writer_of[(zone, host)] = (zone, host) if mode == "sidecar" else (zone, str(i % wal.writers_per_zone))
    streams: dict[tuple[str, str], list[Arrival]] = {}
    direct_eq = 0.0
    for a in arrivals:
        if a.zone == a.leader_zone:
            continue
        direct_eq += a.nbytes + PRODUCE_OVERHEAD_BYTES
        streams.setdefault(writer_of[(a.zone, a.host)], []).append(a)
    objects: list[ReplayedObject] = []
    for stream in streams.values():
        objects += replay_writer(stream, wal.linger_ms, wal.max_bytes)
    shares = sum(len(o.entries_by_zone) for o in objects)
    entries = sum(sum(o.entries_by_zone.values()) for o in objects)
    if applied is None:  # each zone's agent (agents_per_zone 1) applies a share at its object's seal
        replayed: dict[str, list[float]] = {}
        for o in objects:
            for z in o.entries_by_zone:
                replayed.setdefault(z, []).append(o.sealed_s)
        applied = {z: sorted(ts) for z, ts in replayed.items()}
    checkpoints = sum(manifests(sorted(ts), wal) for ts in applied.values())
    wal_bytes = sum(o.nbytes for o in objects)
    crossed = shares * wal.notify_bytes_per_share + entries * wal.notify_bytes_per_entry
    return Usage(crossed_bytes=crossed, direct_equivalent_bytes=direct_eq, wal_bytes=wal_bytes,
                 objects=len(objects), shares=shares, checkpoints=checkpoints, share_bytes=wal_bytes), window_s
