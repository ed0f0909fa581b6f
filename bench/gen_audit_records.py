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

`--form summary --batches N`: the same traffic of N produce batches as the proxies write it
by default (audit schema v13): per zone, every INTERVAL_MS, one produce_summary per key
(topic, partition, leader zone, route, error code) and one metadata_summary per lookup key,
beside the per-object records (wal_flush, notification, agent_read), which do not shrink:

    python bench/gen_audit_records.py --form summary --batches 100000000 --output /tmp/audit-100m-batches
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.audit import LATENCY_BUCKETS_MS

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

    def lines(self, zone: str, ts_ms: int) -> list[str]:
        out = []
        for (topic, leader, partition, route, reason, err), s in sorted(self.produce.items()):
            hist = ",".join(f"{b}:{n}" for b, n in sorted(s[6].items()))
            out.append(
                f'{{"schema_version":13,"kind":"produce_summary","ts_ms":{ts_ms},"zone":"{zone}",'
                f'"proxy_id":"proxy-{zone}","leader_zone":"{leader}","topic":"{topic}","partition":{partition},'
                f'"route":"{route}","reason":"{reason}","error_code":{err},"principal":"","shadow_route":"",'
                f'"shadow_reason":"","batches":{s[0]},"bytes":{s[1]},"records":{s[2]},"wire_bytes":{s[3]},'
                f'"latency_ms_sum":{s[4]:.3f},"latency_max_ms":{s[5]:.3f},"latency_hist":"{hist}",'
                f'"first_ts_ms":{s[7]},"last_ts_ms":{s[8]},"interval_ms":{INTERVAL_MS}}}')
        for (topic, partition, leader, cache), n in sorted(self.lookups.items()):
            out.append(
                f'{{"schema_version":13,"kind":"metadata_summary","ts_ms":{ts_ms},"zone":"{zone}",'
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
    total = sum(wal_bytes.values())
    entries = sum(wal_entries.values())
    out.append(
        f'{{"schema_version":{vsn},"kind":"wal_flush","ts_ms":{ts_ms + 100},"zone":"{zone}",'
        f'"writer_id":"proxy-{zone}","epoch":1,"sequence":{seq},"key":"{key}","bytes":{total + 64 * entries},'
        f'"entries":{entries},"zones":"{",".join(others)}","reason":"size","put_ms":35.5,"attempts":1,'
        f'"put_requests":1,"ok":true}}'
    )
    for dest in others:
        n = wal_entries[dest]
        out.append(
            f'{{"schema_version":{vsn},"kind":"notification","ts_ms":{ts_ms + 101},"zone":"{zone}",'
            f'"dest_zone":"{dest}","key":"{key}","entries":{n},"request_bytes":{120 + 40 * n},'
            f'"response_bytes":{30 + 12 * n},"rtt_ms":{rng.random() * 3:.3f},"status":"ok","attempts":1}}'
        )
        hits = rng.randint(0, 4)
        blocks = max(1, wal_bytes[dest] // 1_048_576 + 1)
        out.append(
            f'{{"schema_version":{vsn},"kind":"agent_read","ts_ms":{ts_ms + 140},"zone":"{dest}",'
            f'"source_zone":"{zone}","key":"{key}","bytes":{wal_bytes[dest]},"gets":1,'
            f'"cache_hits":{min(hits, blocks)},"cache_misses":{max(0, blocks - min(hits, blocks))},'
            f'"bytes_from_cache":{0 if hits == 0 else wal_bytes[dest] // 2},"latency_ms":{20 + rng.random() * 30:.3f}}}'
        )
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


def generate(records: int, output: Path, seed: int = 7, form: str = "batch", batches: int | None = None) -> int:
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
                        help="produce batches one record each, or summed per interval (audit v13)")
    parser.add_argument("--batches", type=int, default=None, help="with --form summary: produce batches to describe")
    args = parser.parse_args()
    if args.form == "summary" and not args.batches:
        parser.error("--form summary needs --batches")
    t0 = time.monotonic()
    n = generate(args.records, args.output, args.seed, args.form, args.batches)
    print(f"wrote {n} records to {args.output} in {time.monotonic() - t0:.1f} s")


if __name__ == "__main__":
    main()
