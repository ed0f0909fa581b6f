"""The planner's input from audit records: produce bytes per partition and producer zone,
and the bytes consumers fetched from the leader per partition and consumer zone.

Strategy. One pass over the records of a window (`produce_bytes_by_zone`, pure, over dicts
as core/audit.py defines them) sums the `bytes` of every successful `produce_batch` (or
`produce_summary`, the same traffic summed per interval) by
(topic, partition) and the proxy's `zone` (where the producer runs), keeps the window
(first to last produce_batch `ts_ms`) and what the WAL route cost: its S3 requests
(wal_flush PUTs, agent_read GETs, one PUT per checkpoint_write), S3 Express byte charges
and the notifications' bytes across zones. `leader_prices` turns that into the price of a
cross-zone byte the planner uses. `read_records` is the thin reader of the gzip JSON lines.

Consumer bytes come from `fetch_bytes` records (schema v14, written by the pass-through):
the record bytes of a partition served to consumers in the proxy's `zone`. Only those the
leader served (`from_leader` true) depend on where the leader is; a follower's (false) are
summed apart for the report, and those the proxy could not attribute (null: no leader in
its metadata, or the bootstrap listener) likewise, so the CLI can say how much it left out.

With `proxy.bypass_same_zone` the batches to leaders in the proxy's zone are not audited
(docs/audit-records.md), so the current leader's zone looks emptier than it is;
`AuditedTraffic.local_bytes == 0` is the hint the CLI warns on.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.audit import AGENT_READ_KINDS, FLUSH_KINDS, NOTIFICATION_KINDS, PRODUCE_KINDS
from core.prices import GIB, Prices
from leader_placement.plan import GB, LeaderPrices, PartitionKey


class AuditInputError(ValueError):
    """The audit directory holds no records, or a line that is not a JSON record."""


@dataclass
class AuditedTraffic:
    bytes_by_zone: dict[PartitionKey, dict[str, int]] = field(default_factory=dict)
    first_ms: int | None = None
    last_ms: int | None = None
    local_bytes: int = 0
    direct_cross_bytes: int = 0
    wal_bytes: int = 0
    put_requests: float = 0.0  # WAL objects and checkpoint manifests (a summary's manifest shares: fractions)
    get_requests: int = 0
    put_body_bytes: int = 0
    get_body_bytes: int = 0
    notify_bytes: int = 0
    fetch_bytes_by_zone: dict[PartitionKey, dict[str, int]] = field(default_factory=dict)  # leader-served
    follower_fetch_bytes: int = 0
    unknown_fetch_bytes: int = 0  # from_leader null: not attributed to the leader or a follower

    @property
    def window_s(self) -> float:
        if self.first_ms is None or self.last_ms is None:
            return 0.0
        return (self.last_ms - self.first_ms) / 1000.0

    @property
    def topics(self) -> list[str]:
        return sorted({t for t, _ in self.bytes_by_zone} | {t for t, _ in self.fetch_bytes_by_zone})

    @property
    def leader_fetch_bytes(self) -> int:
        return sum(sum(z.values()) for z in self.fetch_bytes_by_zone.values())


def produce_bytes_by_zone(records: Iterable[Mapping[str, Any]]) -> AuditedTraffic:
    """Sum the records (any kinds; the relevant ones are read). Batches that failed
    (error_code != 0) or name no partition are left out: they put nothing on a leader; so
    are fetch_bytes rows that name no partition (the proxy's overflow and unscanned answers)."""
    out = AuditedTraffic()
    for r in records:
        kind = r.get("kind")
        if kind in PRODUCE_KINDS:
            topic, partition, size = r.get("topic") or "", r.get("partition"), int(r.get("bytes") or 0)
            if r.get("error_code", 0) != 0 or not topic or partition is None or int(partition) < 0:
                continue
            zones = out.bytes_by_zone.setdefault((topic, int(partition)), {})
            zones[r.get("zone") or ""] = zones.get(r.get("zone") or "", 0) + size
            route = r.get("route")
            if route == "local":
                out.local_bytes += size
            elif route == "wal":
                out.wal_bytes += size
            elif route == "direct_cross":
                out.direct_cross_bytes += size
            ts = int(r.get("ts_ms") or 0)
            # a produce_summary spans its interval: its first and last batch's end
            start, end = int(r.get("first_ts_ms") or ts), int(r.get("last_ts_ms") or ts)
            out.first_ms = start if out.first_ms is None else min(out.first_ms, start)
            out.last_ms = end if out.last_ms is None else max(out.last_ms, end)
        elif kind in FLUSH_KINDS:  # one object, or a summary's sums (schema v15)
            out.put_requests += int(r.get("put_requests") or 0)
            out.put_body_bytes += int(r.get("bytes") or 0)
        elif kind == "checkpoint_write":
            out.put_requests += 1
        elif kind == "checkpoint_summary":  # each manifest's PUT shared among its source zones
            out.put_requests += float(r.get("manifest_puts") or 0.0)
        elif kind in AGENT_READ_KINDS:
            out.get_requests += int(r.get("gets") or 0)
            out.get_body_bytes += int(r.get("bytes") or 0) - int(r.get("bytes_from_cache") or 0)
        elif kind in NOTIFICATION_KINDS:
            out.notify_bytes += int(r.get("request_bytes") or 0) + int(r.get("response_bytes") or 0)
        elif kind == "fetch_bytes":
            _add_fetch(out, r)
    return out


def _add_fetch(out: AuditedTraffic, r: Mapping[str, Any]) -> None:
    topic, partition, size = r.get("topic") or "", r.get("partition"), int(r.get("bytes") or 0)
    if not topic or partition is None or int(partition) < 0:  # the overflow and unscanned answers
        return
    from_leader = r.get("from_leader")
    if from_leader is True:
        zones = out.fetch_bytes_by_zone.setdefault((topic, int(partition)), {})
        zones[r.get("zone") or ""] = zones.get(r.get("zone") or "", 0) + size
    elif from_leader is False:
        out.follower_fetch_bytes += size
    else:
        out.unknown_fetch_bytes += size


def leader_prices(audited: AuditedTraffic, prices: Prices, storage_class: str = "standard") -> LeaderPrices:
    """The price of a byte produced across zones: transfer for the direct share, and for the
    WAL share what the audited WAL route cost per byte it carried (requests, S3 Express bytes,
    notifications across zones). Without WAL bytes in the audit, or without the WAL's own
    records (wal_flush: an audit of produce_batch records alone), transfer alone.
    Raises ValueError for an unknown storage class."""
    direct = 2 * prices.cross_az_per_gb_each_way / GB
    if audited.wal_bytes <= 0 or audited.put_requests <= 0:  # no WAL bytes, or no record of what they cost
        return LeaderPrices(direct_usd_per_byte=direct)
    store = prices.store(storage_class)
    wal_usd = (audited.put_requests * store.put_per_1000 / 1000 + audited.get_requests * store.get_per_1000 / 1000
               + audited.put_body_bytes * store.upload_per_gb / GIB
               + audited.get_body_bytes * store.retrieval_per_gb / GIB + audited.notify_bytes * direct)
    share = audited.wal_bytes / (audited.wal_bytes + audited.direct_cross_bytes)
    return LeaderPrices(direct_usd_per_byte=direct, wal_usd_per_byte=wal_usd / audited.wal_bytes, wal_share=share)


def read_records(root: Path) -> Iterator[dict[str, Any]]:
    """Every record of every `*.jsonl.gz` under `root` (hidden in-progress files skipped).

    Raises AuditInputError when there is no file, or a line is not JSON (naming file and line);
    OSError when a file cannot be read.
    """
    files = sorted(p for p in root.rglob("*.jsonl.gz") if not any(part.startswith(".") for part in p.relative_to(root).parts))
    if not files:
        raise AuditInputError(f"{root}: no *.jsonl.gz audit files")
    for path in files:
        with gzip.open(path, "rt") as fh:
            for n, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except ValueError as exc:
                    raise AuditInputError(f"{path}:{n}: not a JSON record ({exc})") from exc
                if not isinstance(record, dict):
                    raise AuditInputError(f"{path}:{n}: not a JSON object")
                yield record
