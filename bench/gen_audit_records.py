"""Generate N synthetic audit records in the writer's layout, for the audit benchmarks.

    python bench/gen_audit_records.py --records 10000000 --output /tmp/audit-10m

The mix imitates three zones of proxies and agents: per "cycle" of one source zone,
100 produce batches (about 1/3 local, 3/5 via the WAL, the rest direct cross-zone),
one WAL object holding the WAL batches for the two other zones, one notification and one
agent read per destination zone, and a few router metadata lookups (mostly cache hits);
about 108 records per cycle, 93% produce_batch. Batch sizes vary from 1 KB to 64 KB, but
one cycle in five has 100 B - 2 KB batches, so some objects are small enough to lose
money (the break-even table has both sides).
Files are gzip JSON lines under date=/hour=/zone= (one day, 72 partitions), at most
RECORDS_PER_FILE records each, written with string templates (json.dumps is several
times slower at this volume).

`--form summary --batches N`: the same traffic of N produce batches as the proxies and agents
write it by default (audit schema v15), all of it summed per zone and interval
(INTERVAL_MS, audit.interval_s):
- each proxy's produce_summary per key (topic, partition, leader zone, route, error code)
  and metadata_summary per lookup key (v13);
- the WAL path (v15): each proxy's wal_flush_summary per (writer, zones, reason, ok, size
  class) and notification_summary per (dest zone, status, size class), each agent's
  agent_read_summary per source zone, written under the agent's zone. They are made by the
  product's own accumulator (core.object_summary.ObjectSummaries, one per proxy and one
  per agent, what core.object_summary_sink drives) from the per-object records the cycles
  would have written, each counted in the interval of its own ts_ms; so they cannot drift
  from what the product writes. The objects have no agent_apply or checkpoint_write
  (neither form writes them), so there are no agent_apply_summary or checkpoint_summary.

    python bench/gen_audit_records.py --form summary --batches 100000000 --output /tmp/audit-100m-v15

`--object-detail object` writes the WAL path one record per object instead (wal_flush,
notification, agent_read; produce summaries as v13): the form before v15, the same traffic
draw for draw. Both carry the same objects, bytes, entries, PUTs, GETs and notification
bytes per zone pair (tests/unit/test_bench_gen_audit_records.py); the savings job counts a
summary in the hour of its ts_ms (its interval's end), so an object of an hour's last
interval moves to the next hour's row, and the totals agree exactly (`azsidecar audit savings`
on both forms of --batches 1000000: every column of savings.csv sums the same, break_even.csv
is identical).
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402  (in the dev lock; the summary form draws its batches in blocks)

from core.audit import LATENCY_BUCKETS_MS, SCHEMA_VERSION  # noqa: E402
from core.object_summary import ObjectSummaries  # noqa: E402

ZONES = ("use1-az1", "use1-az2", "use1-az4")
RECORDS_PER_FILE = 250_000  # ~40 files at 10 M: enough gzip files for every core
GZIP_LEVEL = 1  # generation speed matters more than size here
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SPAN_MS = 24 * 3600 * 1000  # records spread over one day: 24 hours x 3 zones of partitions
TOPICS = ("orders", "payments", "clicks", "inventory")
RECORDS_PER_CYCLE = 108  # 100 produce + 1 flush + 2 notifications + 2 reads + 3 lookups


INTERVAL_MS = 10_000  # audit.interval_s default
SummaryKey = tuple[str, str, int, str, str, int]  # topic, leader zone, partition, route, reason, error code


class Summaries:
    """One zone's produce and lookup sums of the current interval (the proxy's aggregator, in short)."""

    def __init__(self) -> None:
        self.produce: dict[SummaryKey, list] = {}
        self.lookups: dict[tuple[str, int, str, str], int] = {}

    def add(self, key: SummaryKey, size: int, records: int, wire: int, latency: float, ts_ms: int) -> None:
        sums = self.produce.get(key)
        if sums is None:
            sums = self.produce[key] = [0, 0, 0, 0, 0.0, 0.0, {}, ts_ms, ts_ms]
        sums[0] += 1
        sums[1] += size
        sums[2] += records
        sums[3] += wire
        sums[4] += latency
        sums[5] = max(sums[5], latency)
        bucket = bisect.bisect_left(LATENCY_BUCKETS_MS, latency)
        sums[6][bucket] = sums[6].get(bucket, 0) + 1
        sums[8] = ts_ms

    def add_sums(self, key: SummaryKey, batches: int, size: int, records: int, wire: int, latency_sum: float,
                 latency_max: float, hist: dict[int, int], first_ts: int, last_ts: int) -> None:
        """What `add` does for many batches of one key at once (the vectorized generator)."""
        sums = self.produce.get(key)
        if sums is None:
            sums = self.produce[key] = [0, 0, 0, 0, 0.0, 0.0, {}, first_ts, last_ts]
        sums[0] += batches
        sums[1] += size
        sums[2] += records
        sums[3] += wire
        sums[4] += latency_sum
        sums[5] = max(sums[5], latency_max)
        for bucket, n in hist.items():
            sums[6][bucket] = sums[6].get(bucket, 0) + n
        sums[7] = min(sums[7], first_ts)
        sums[8] = max(sums[8], last_ts)

    def lines(self, zone: str, ts_ms: int, vsn: int = 13) -> list[str]:
        out = []
        for (topic, leader, partition, route, reason, err), s in sorted(self.produce.items()):
            hist = ",".join(f"{b}:{n}" for b, n in sorted(s[6].items()))
            out.append(
                f'{{"schema_version":{vsn},"kind":"produce_summary","ts_ms":{ts_ms},"zone":"{zone}",'
                f'"proxy_id":"proxy-{zone}","leader_zone":"{leader}","topic":"{topic}","partition":{partition},'
                f'"route":"{route}","reason":"{reason}","error_code":{err},"principal":"","shadow_route":"",'
                f'"shadow_reason":"","batches":{s[0]},"bytes":{s[1]},"records":{s[2]},"wire_bytes":{s[3]},'
                f'"latency_ms_sum":{s[4]:.3f},"latency_max_ms":{s[5]:.3f},"latency_hist":"{hist}",'
                f'"first_ts_ms":{s[7]},"last_ts_ms":{s[8]},"interval_ms":{INTERVAL_MS}}}')
        for (topic, partition, leader, cache), n in sorted(self.lookups.items()):
            out.append(
                f'{{"schema_version":{vsn},"kind":"metadata_summary","ts_ms":{ts_ms},"zone":"{zone}",'
                f'"topic":"{topic}","partition":{partition},"leader_zone":"{leader}","cache":"{cache}",'
                f'"lookups":{n},"interval_ms":{INTERVAL_MS}}}')
        self.produce, self.lookups = {}, {}
        return out


def cycle(rng: random.Random, zone: str, ts_ms: int, seq: int, vsn: int,
          summaries: Summaries | None = None) -> list[str]:
    """One cycle's lines; with `summaries`, its produce batches and lookups are added there instead."""
    out = []
    others = [z for z in ZONES if z != zone]
    wal_bytes = {z: 0 for z in others}
    wal_entries = {z: 0 for z in others}
    key = f"{seq % 997:03x}/{zone}/proxy-{zone}/1/{seq}"
    for i in range(100):
        leader = ZONES[(seq + i) % 3]
        size = rng.randint(100, 2_000) if seq % 5 == 0 else rng.randint(1_000, 64_000)
        records = max(1, size // 200)
        topic = TOPICS[i % 4]
        latency = rng.lognormvariate(1.0, 0.5)
        if leader == zone:
            route, wire = "local", 0
        elif i % 10 == 0:
            route, wire = "direct_cross", size + 120
            latency += 1.5
        else:
            route, wire = "wal", 0
            wal_bytes[leader] += size
            wal_entries[leader] += 1
            latency += 40 + rng.random() * 60
        err = 0 if rng.random() > 0.001 else 6
        if summaries is not None:
            summaries.add((topic, leader, i % 12, route, "cost", err), size, records, wire, latency, ts_ms + i)
            continue
        out.append(
            f'{{"schema_version":{vsn},"kind":"produce_batch","ts_ms":{ts_ms + i},"zone":"{zone}",'
            f'"proxy_id":"proxy-{zone}","leader_zone":"{leader}","topic":"{topic}","partition":{i % 12},'
            f'"route":"{route}","reason":"cost","bytes":{size},"records":{records},"wire_bytes":{wire},'
            f'"error_code":{err},"latency_ms":{latency:.3f},"queue_ms":0.2,"s3_put_ms":0.0,'
            f'"notify_rtt_ms":0.0,"leader_append_ms":1.1}}'
        )
    out.extend(object_lines(rng, zone, ts_ms, seq, vsn, key, wal_bytes, wal_entries))
    for j in range(3):
        cache = "hit" if rng.random() < 0.97 else "miss"
        if summaries is not None:
            lookup = (TOPICS[j], j, ZONES[j], cache)
            summaries.lookups[lookup] = summaries.lookups.get(lookup, 0) + 1
            continue
        out.append(
            f'{{"schema_version":{vsn},"kind":"metadata_lookup","ts_ms":{ts_ms + 1},"zone":"{zone}",'
            f'"topic":"{TOPICS[j]}","partition":{j},"leader_zone":"{ZONES[j]}","cache":"{cache}"}}'
        )
    return out


# One per-object record of the WAL path: (kind, ts_ms, zone of the process that made it, fields).
ObjectRecord = tuple[str, int, str, dict]


def object_records(rng: random.Random, zone: str, ts_ms: int, seq: int, key: str,
                   wal_bytes: dict[str, int], wal_entries: dict[str, int]) -> list[ObjectRecord]:
    """A cycle's WAL object: its wal_flush (the proxy of `zone`), and a notification (that
    proxy) and an agent read (the agent of the destination zone) per other zone. Times are
    rounded to the 3 decimals the per-object lines carry, so both forms hold the same values."""
    others = [z for z in ZONES if z != zone]
    total = sum(wal_bytes.values())
    entries = sum(wal_entries.values())
    out: list[ObjectRecord] = [("wal_flush", ts_ms + 100, zone, {
        "ts_ms": ts_ms + 100, "writer_id": f"proxy-{zone}", "epoch": 1, "sequence": seq, "key": key,
        "bytes": total + 64 * entries, "entries": entries, "zones": ",".join(others), "reason": "size",
        "put_ms": 35.5, "attempts": 1, "put_requests": 1, "ok": True})]
    for dest in others:
        n = wal_entries[dest]
        out.append(("notification", ts_ms + 101, zone, {
            "ts_ms": ts_ms + 101, "dest_zone": dest, "key": key, "entries": n, "request_bytes": 120 + 40 * n,
            "response_bytes": 30 + 12 * n, "rtt_ms": round(rng.random() * 3, 3), "status": "ok", "attempts": 1}))
        hits = rng.randint(0, 4)
        blocks = max(1, wal_bytes[dest] // 1_048_576 + 1)
        out.append(("agent_read", ts_ms + 140, dest, {
            "ts_ms": ts_ms + 140, "source_zone": zone, "key": key, "bytes": wal_bytes[dest], "gets": 1,
            "cache_hits": min(hits, blocks), "cache_misses": max(0, blocks - min(hits, blocks)),
            "bytes_from_cache": 0 if hits == 0 else wal_bytes[dest] // 2,
            "latency_ms": round(20 + rng.random() * 30, 3)}))
    return out


def object_line(vsn: int, record: ObjectRecord) -> str:
    """The per-object record's line (audit.object_detail = "object"), fields in the writer's order."""
    kind, ts_ms, zone, f = record
    if kind == "wal_flush":
        return (
            f'{{"schema_version":{vsn},"kind":"wal_flush","ts_ms":{ts_ms},"zone":"{zone}",'
            f'"writer_id":"{f["writer_id"]}","epoch":1,"sequence":{f["sequence"]},"key":"{f["key"]}",'
            f'"bytes":{f["bytes"]},"entries":{f["entries"]},"zones":"{f["zones"]}","reason":"size","put_ms":35.5,'
            f'"attempts":1,"put_requests":1,"ok":true}}')
    if kind == "notification":
        return (
            f'{{"schema_version":{vsn},"kind":"notification","ts_ms":{ts_ms},"zone":"{zone}",'
            f'"dest_zone":"{f["dest_zone"]}","key":"{f["key"]}","entries":{f["entries"]},'
            f'"request_bytes":{f["request_bytes"]},"response_bytes":{f["response_bytes"]},'
            f'"rtt_ms":{f["rtt_ms"]:.3f},"status":"ok","attempts":1}}')
    return (
        f'{{"schema_version":{vsn},"kind":"agent_read","ts_ms":{ts_ms},"zone":"{zone}",'
        f'"source_zone":"{f["source_zone"]}","key":"{f["key"]}","bytes":{f["bytes"]},"gets":1,'
        f'"cache_hits":{f["cache_hits"]},"cache_misses":{f["cache_misses"]},'
        f'"bytes_from_cache":{f["bytes_from_cache"]},"latency_ms":{f["latency_ms"]:.3f}}}')


def object_lines(rng: random.Random, zone: str, ts_ms: int, seq: int, vsn: int, key: str,
                 wal_bytes: dict[str, int], wal_entries: dict[str, int]) -> list[str]:
    """A cycle's WAL object as per-object lines (`object_records`, one line each)."""
    return [object_line(vsn, r) for r in object_records(rng, zone, ts_ms, seq, key, wal_bytes, wal_entries)]


class WalPathSummaries:
    """The WAL path's audit as the processes write it by default (audit.object_detail =
    "summary", schema v15): each zone's proxy and agent has the product's own accumulator
    (core.object_summary.ObjectSummaries, what core.object_summary_sink drives), fed that
    process's per-object records in time order and taken at the end of every INTERVAL_MS.
    A record counts in the interval of its own ts_ms, so an object flushed just before an
    interval's end has its agent reads in the next one, as in a running agent."""

    def __init__(self) -> None:
        self.proxies = {zone: ObjectSummaries() for zone in ZONES}
        self.agents = {zone: ObjectSummaries() for zone in ZONES}
        self.pending: list[ObjectRecord] = []

    def add(self, records: list[ObjectRecord]) -> None:
        self.pending.extend(records)

    def take_until(self, end_ms: int) -> list[tuple[str, str, list[str]]]:
        """Sum the pending records made before `end_ms` (a multiple of INTERVAL_MS after
        START_MS, or later) and take every interval they fall in: (hour directory of the
        interval's start, zone, summary lines), the summaries with ts_ms = the interval's end."""
        self.pending.sort(key=lambda r: r[1])  # stable: a cycle's records keep their order
        cut = bisect.bisect_left([r[1] for r in self.pending], end_ms)
        due, self.pending = self.pending[:cut], self.pending[cut:]
        out: list[tuple[str, str, list[str]]] = []
        i = 0
        while i < len(due):
            interval_end = START_MS + ((due[i][1] - START_MS) // INTERVAL_MS + 1) * INTERVAL_MS
            while i < len(due) and due[i][1] < interval_end:
                kind, ts_ms, zone, fields = due[i]
                (self.agents if kind == "agent_read" else self.proxies)[zone].add(kind, fields, ts_ms)
                i += 1
            hour_dir = hour_dir_of(interval_end - INTERVAL_MS)
            for zone in ZONES:
                lines = self._lines(zone, self.proxies[zone], interval_end) \
                    + self._lines(zone, self.agents[zone], interval_end)
                if lines:
                    out.append((hour_dir, zone, lines))
        return out

    @staticmethod
    def _lines(zone: str, summaries: ObjectSummaries, now_ms: int) -> list[str]:
        if summaries.empty:
            return []
        taken = summaries.take(now_ms)
        records = [("wal_flush_summary", r) for r in taken.flushes] \
            + [("notification_summary", r) for r in taken.notifications] \
            + [("agent_read_summary", r) for r in taken.reads] \
            + [("agent_apply_summary", r) for r in taken.applies] \
            + [("checkpoint_summary", r) for r in taken.checkpoints]
        # The audit writer's layout (spark_audit/writer.py): the fields, then the writer's own.
        return [json.dumps({**fields, "schema_version": SCHEMA_VERSION, "kind": kind, "zone": zone},
                           separators=(",", ":")) for kind, fields in records]


ROUTES = ("local", "direct_cross", "wal")
_BOUNDS = np.array(LATENCY_BUCKETS_MS, dtype=float)


def block_batches(nrng: np.random.Generator, zone_index: int, seqs: np.ndarray, ts: np.ndarray,
                  summaries: Summaries) -> tuple[np.ndarray, np.ndarray]:
    """The produce batches of cycles `seqs` of one zone (the same draws `cycle` makes, in
    arrays), summed into `summaries`; returns each cycle's WAL bytes and entries per leader
    zone (shape cycles x 3)."""
    k = len(seqs)
    i = np.arange(100)
    leader = (seqs[:, None] + i[None, :]) % 3
    small = (seqs % 5 == 0)[:, None]
    size = np.where(small, nrng.integers(100, 2_001, (k, 100)), nrng.integers(1_000, 64_001, (k, 100)))
    records = np.maximum(1, size // 200)
    local = leader == zone_index
    direct = ~local & (i % 10 == 0)[None, :]
    wal = ~local & ~direct
    route = np.where(local, 0, np.where(direct, 1, 2))
    wire = np.where(direct, size + 120, 0)
    latency = nrng.lognormal(1.0, 0.5, (k, 100)) + np.where(direct, 1.5, 0.0) \
        + np.where(wal, 40 + nrng.random((k, 100)) * 60, 0.0)
    failed = nrng.random((k, 100)) <= 0.001
    code = ((((i % 12)[None, :] * 3 + leader) * 3 + route) * 2 + failed).ravel()
    keys, inv = np.unique(code, return_inverse=True)
    n = len(keys)
    batch_ts = (ts[:, None] + i[None, :]).ravel()
    flat_latency = latency.ravel()
    counts = np.bincount(inv, minlength=n)
    sizes = np.bincount(inv, weights=size.ravel(), minlength=n)
    recs = np.bincount(inv, weights=records.ravel(), minlength=n)
    wires = np.bincount(inv, weights=wire.ravel(), minlength=n)
    lat_sum = np.bincount(inv, weights=flat_latency, minlength=n)
    lat_max = np.full(n, -np.inf)
    np.maximum.at(lat_max, inv, flat_latency)
    first = np.full(n, np.iinfo(np.int64).max)
    np.minimum.at(first, inv, batch_ts)
    last = np.zeros(n, dtype=np.int64)
    np.maximum.at(last, inv, batch_ts)
    buckets = np.searchsorted(_BOUNDS, flat_latency, side="left")
    nb = len(_BOUNDS) + 1
    hist = np.bincount(inv * nb + buckets, minlength=n * nb).reshape(n, nb)
    for j, c in enumerate(keys.tolist()):
        err = 6 if c % 2 else 0
        c //= 2
        r = c % 3
        c //= 3
        lead = c % 3
        partition = c // 3
        row = hist[j]
        summaries.add_sums((TOPICS[partition % 4], ZONES[lead], partition, ROUTES[r], "cost", err),
                           int(counts[j]), int(sizes[j]), int(recs[j]), int(wires[j]), float(lat_sum[j]),
                           float(lat_max[j]), {int(b): int(row[b]) for b in np.nonzero(row)[0]},
                           int(first[j]), int(last[j]))
    wal_bytes = np.stack([np.where(wal & (leader == z), size, 0).sum(axis=1) for z in range(3)], axis=1)
    wal_entries = np.stack([(wal & (leader == z)).sum(axis=1) for z in range(3)], axis=1)
    return wal_bytes, wal_entries


class HourFiles:
    """Lines buffered per (hour directory, zone), written as gzip files of at most
    RECORDS_PER_FILE lines; an hour's buffers are written once time moves past it."""

    def __init__(self, output: Path) -> None:
        self.output = output
        self.buffers: dict[tuple[str, str], list[str]] = {}
        self.files = 0
        self.hour = ""

    def add(self, hour_dir: str, zone: str, lines: list[str]) -> None:
        if hour_dir != self.hour:
            self.close()
            self.hour = hour_dir
        buffer = self.buffers.setdefault((hour_dir, zone), [])
        buffer.extend(lines)
        if len(buffer) >= RECORDS_PER_FILE:
            self._write((hour_dir, zone))

    def close(self) -> None:
        for partition in list(self.buffers):
            if self.buffers[partition]:
                self._write(partition)
        self.buffers.clear()

    def _write(self, partition: tuple[str, str]) -> None:
        hour_dir, zone = partition
        d = self.output / hour_dir / f"zone={zone}"
        d.mkdir(parents=True, exist_ok=True)
        self.files += 1
        with gzip.open(d / f"bench-0-{self.files}.jsonl.gz", "wt", compresslevel=GZIP_LEVEL) as f:
            f.write("\n".join(self.buffers[partition]))
            f.write("\n")
        self.buffers[partition] = []


def hour_dir_of(ts_ms: int) -> str:
    t = time.gmtime(ts_ms / 1000)
    return f"date={t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}/hour={t.tm_hour:02d}"


def generate_summaries(batches: int, output: Path, seed: int = 7, object_detail: str = "summary",
                       span_ms: int = SPAN_MS) -> int:
    """The audit of `batches` produce batches as the proxies and agents write it by default
    (schema v15): per zone and interval, the produce_summary and metadata_summary records of
    that interval's cycles, and the WAL path's summaries of their objects (`WalPathSummaries`).
    object_detail "object": the WAL path one record per object instead (wal_flush,
    notification, agent_read: the v13 form, what audit.object_detail = "object" writes), the
    same traffic draw for draw. The cycles spread evenly over `span_ms` from START_MS. Their
    batches are drawn in arrays per zone and interval (`block_batches`), so 100 M batches
    take minutes, not hours. Returns the records written."""
    per_object = object_detail == "object"
    vsn = 13 if per_object else SCHEMA_VERSION
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    cycles = max(1, batches // 100)
    step_ms = max(1, span_ms // cycles)
    files = HourFiles(output)
    wal_path = WalPathSummaries()
    written = 0

    def add_wal_path(end_ms: int) -> None:
        nonlocal written
        for hour_dir, zone, lines in wal_path.take_until(end_ms):
            files.add(hour_dir, zone, lines)
            written += len(lines)

    c = 0
    while c < cycles:
        interval_start = START_MS + ((START_MS + c * step_ms - START_MS) // INTERVAL_MS) * INTERVAL_MS
        interval_end = interval_start + INTERVAL_MS
        add_wal_path(interval_start)  # objects of earlier intervals that had no cycle of their own
        c_end = min(cycles, -(-(interval_end - START_MS) // step_ms))
        block = np.arange(c, c_end)
        hour_dir = hour_dir_of(interval_start)
        for zi, zone in enumerate(ZONES):
            seqs = block[block % 3 == zi]
            if not len(seqs):
                continue
            ts = START_MS + seqs * step_ms
            sums = Summaries()
            wal_bytes, wal_entries = block_batches(nrng, zi, seqs, ts, sums)
            others = [(di, z) for di, z in enumerate(ZONES) if z != zone]
            hits = nrng.random((len(seqs), 3)) < 0.97
            lines: list[str] = []
            for row, seq in enumerate(seqs.tolist()):
                key = f"{seq % 997:03x}/{zone}/proxy-{zone}/1/{seq}"
                records = object_records(rng, zone, int(ts[row]), seq, key,
                                         {z: int(wal_bytes[row, di]) for di, z in others},
                                         {z: int(wal_entries[row, di]) for di, z in others})
                if per_object:
                    lines.extend(object_line(1 if seq % 10 == 0 else 2, r) for r in records)
                else:
                    wal_path.add(records)
                for j in range(3):
                    lookup = (TOPICS[j], j, ZONES[j], "hit" if hits[row, j] else "miss")
                    sums.lookups[lookup] = sums.lookups.get(lookup, 0) + 1
            lines.extend(sums.lines(zone, interval_end, vsn))
            files.add(hour_dir, zone, lines)
            written += len(lines)
        add_wal_path(interval_end)
        c = c_end
    add_wal_path(START_MS + span_ms + 2 * INTERVAL_MS)  # the last objects' agent reads
    files.close()
    return written


def generate(records: int, output: Path, seed: int = 7, form: str = "batch", batches: int | None = None,
             object_detail: str = "summary") -> int:
    """Write about `records` records (whole cycles) under `output`; returns the count.
    form "summary": the cycles of `batches` produce batches (100 per cycle), their produce
    batches and lookups written as per-interval summaries (the records written are fewer)."""
    rng = random.Random(seed)
    buffers: dict[tuple[str, str], list[str]] = {}
    files = 0
    written = 0

    def flush(partition: tuple[str, str]) -> None:
        nonlocal files
        hour_dir, zone = partition
        d = output / hour_dir / f"zone={zone}"
        d.mkdir(parents=True, exist_ok=True)
        files += 1
        with gzip.open(d / f"bench-0-{files}.jsonl.gz", "wt", compresslevel=GZIP_LEVEL) as f:
            f.write("\n".join(buffers.pop(partition)))
            f.write("\n")

    summary = form == "summary"
    if summary:
        return generate_summaries(batches or 0, output, seed, object_detail)
    cycles = max(1, (batches or 0) // 100 if summary else records // RECORDS_PER_CYCLE)
    step_ms = max(1, SPAN_MS // cycles)
    current_hour = ""
    sums = {zone: Summaries() for zone in ZONES}
    interval_end = START_MS + INTERVAL_MS
    for c in range(cycles):
        zone = ZONES[c % 3]
        ts = START_MS + c * step_ms
        t = time.gmtime(ts / 1000)
        hour_dir = f"date={t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}/hour={t.tm_hour:02d}"
        if summary and ts >= interval_end:  # the interval ended: each zone's summaries, in the hour they ended
            for z in ZONES:
                ended = sums[z].lines(z, interval_end)
                buffers.setdefault((current_hour or hour_dir, z), []).extend(ended)
                written += len(ended)
            interval_end += INTERVAL_MS * ((ts - interval_end) // INTERVAL_MS + 1)
        if hour_dir != current_hour:  # time only moves forward: the last hour's files are complete
            for partition in list(buffers):
                flush(partition)
            current_hour = hour_dir
        # One cycle in ten is written as schema v1 (what older writers produce).
        lines = cycle(rng, zone, ts, c, vsn=1 if c % 10 == 0 else 2, summaries=sums[zone] if summary else None)
        buffers.setdefault((hour_dir, zone), []).extend(lines)
        written += len(lines)
        if len(buffers[(hour_dir, zone)]) >= RECORDS_PER_FILE:
            flush((hour_dir, zone))
    if summary:
        for z in ZONES:
            lines = sums[z].lines(z, interval_end)
            buffers.setdefault((current_hour, z), []).extend(lines)
            written += len(lines)
    for partition in list(buffers):
        if buffers[partition]:
            flush(partition)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--form", choices=("batch", "summary"), default="batch",
                        help="produce batches one record each, or summed per interval (audit v15)")
    parser.add_argument("--batches", type=int, default=None, help="with --form summary: produce batches to describe")
    parser.add_argument("--object-detail", choices=("summary", "object"), default="summary",
                        help="with --form summary: the WAL path summed per interval (v15, the default) or "
                             "one record per object (v13)")
    args = parser.parse_args()
    if args.form == "summary" and not args.batches:
        parser.error("--form summary needs --batches")
    t0 = time.monotonic()
    n = generate(args.records, args.output, args.seed, args.form, args.batches, args.object_detail)
    print(f"wrote {n} records to {args.output} in {time.monotonic() - t0:.1f} s")


if __name__ == "__main__":
    main()
