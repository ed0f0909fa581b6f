"""Audit records per GB and stored audit bytes per payload byte, one record per batch against
summed per interval, at 16 KiB batches, in one run.

    python bench/audit_size.py --batches 60000 --partitions 12

The router's accounting of N batches (produce_batch and metadata_lookup fields as
router/audit_fields.py fills them, latencies drawn around 50 ms) goes through the real
audit writer (spark_audit.writer.AuditWriter: gzip JSON lines) twice: straight, as with
audit.produce_detail = "batch", and through router.summary_sink.SummarizingAuditSink, as by
default, its intervals advanced by a virtual clock at `--batches-per-s`. Prints records per
GB of payload and the stored audit's share of the payload for both. Seconds, no network.
"""

from __future__ import annotations

import argparse
import gzip
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.audit import AuditSink  # noqa: E402
from router.summary_sink import SummarizingAuditSink  # noqa: E402
from spark_audit.config import AuditConfig  # noqa: E402
from spark_audit.writer import AuditWriter  # noqa: E402

GB = 10**9


def feed(sink: AuditSink, first: int, batches: int, partitions: int, batch_bytes: int, seed: int,
         tick: list[int], per_s: float) -> None:
    rng = random.Random(seed)
    for i in range(first, first + batches):
        tick[0] = int(i * 1000 / per_s)
        partition = i % partitions
        sink.emit("metadata_lookup", {"topic": "orders", "partition": partition, "leader_zone": "use1-az2",
                                      "cache": "hit"})
        sink.emit("produce_batch", {
            "proxy_id": "proxy-use1-az1", "leader_zone": "use1-az2", "topic": "orders", "partition": partition,
            "route": "wal", "reason": "cost", "bytes": batch_bytes, "records": 16, "wire_bytes": 70,
            "error_code": 0, "latency_ms": rng.lognormvariate(3.9, 0.3), "queue_ms": 0.2, "s3_put_ms": 30.0,
            "notify_rtt_ms": 8.0, "leader_append_ms": 2.0, "wal_key": f"a1b2/wal/use1-az1/proxy/1/{i // 60}",
            "linger_wait_ms": 10.0, "producer_wait_ms": -1.0, "shadow_route": "", "shadow_reason": "",
            "principal": "User:orders-app"})


def measure(form: str, args: argparse.Namespace) -> tuple[int, int]:
    out = Path(tempfile.mkdtemp(prefix=f"audit-size-{form}-"))
    writer = AuditWriter(AuditConfig(output=str(out)), "use1-az1", "proxy")
    tick = [0]
    try:
        sink: AuditSink = writer
        summaries = None
        if form == "summary":
            summaries = SummarizingAuditSink(writer, args.interval_s, clock_ms=lambda: tick[0])
            sink = summaries
        interval_ms = int(args.interval_s * 1000)
        per_interval = max(1, int(args.batches_per_s * args.interval_s))
        for start in range(0, args.batches, per_interval):
            n = min(per_interval, args.batches - start)
            feed(sink, start, n, args.partitions, args.batch_bytes, args.seed + start, tick, args.batches_per_s)
            tick[0] = (start // per_interval + 1) * interval_ms
            if summaries is not None:
                summaries.flush()
        if summaries is not None:
            summaries.close()
    finally:
        writer.close()
    files = list(out.rglob("*.jsonl.gz"))
    records = sum(1 for f in files for _ in gzip.open(f, "rt"))
    return records, sum(f.stat().st_size for f in files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=60_000)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--batch-bytes", type=int, default=16 * 1024)
    parser.add_argument("--batches-per-s", type=float, default=2_000.0)
    parser.add_argument("--interval-s", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    payload = args.batches * args.batch_bytes
    print(f"{args.batches:,} batches of {args.batch_bytes:,} bytes ({payload / GB:.3f} GB) on {args.partitions} "
          f"partitions at {args.batches_per_s:,.0f} batches/s, interval {args.interval_s:g} s")
    for form in ("batch", "summary"):
        records, stored = measure(form, args)
        print(f"{form:8s} {records:>9,} records  {records * GB / payload:>11,.0f} per GB  "
              f"{stored:>11,} bytes stored  {stored / payload:.4%} of payload")


if __name__ == "__main__":
    main()
