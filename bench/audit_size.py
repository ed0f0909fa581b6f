"""Audit records per GB and stored audit bytes per payload byte, one record per batch or object
against summed per interval, at 16 KiB batches on the WAL path, in one run.

    python bench/audit_size.py --batches 60000 --partitions 12 --object-bytes 1048576

The router's accounting of N batches (produce_batch and metadata_lookup fields as
router/audit_fields.py fills them, latencies drawn around 50 ms) and the WAL path's records
of the objects that carry them (`--object-bytes` each, for two destination zones: a
wal_flush, a notification per zone, the agents' agent_read and agent_apply per zone, one
checkpoint manifest per agent per second) go through the real audit writers
(spark_audit.writer.AuditWriter: gzip JSON lines; one for the proxy, one per agent) three
ways: everything one record per event (produce_detail "batch", object_detail "object");
produce summed, objects one by one (the default before schema v15); everything summed (the
default: router.summary_sink.SummarizingAuditSink and core.object_summary_sink.ObjectSummarySink),
intervals advanced by a virtual clock at `--batches-per-s`. Prints records per GB of payload
and the stored audit's share of the payload for each, and the WAL path's per-object kinds
alone. Seconds, no network.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.audit import OBJECT_SUMMARY_KINDS, AuditSink  # noqa: E402
from core.object_summary_sink import ObjectSummarySink  # noqa: E402
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


AGENT_ZONES = ("use1-az2", "use1-az3")
FORMS = {  # name: (produce summed, objects summed)
    "batch+object": (False, False),
    "summary+object": (True, False),
    "summary+summary": (True, True),
}
WAL_KINDS = frozenset(OBJECT_SUMMARY_KINDS) | frozenset(OBJECT_SUMMARY_KINDS.values())


def feed_objects(proxy: AuditSink, agents: dict[str, AuditSink], first: int, batches: int, batch_bytes: int,
                 object_bytes: int, tick: list[int], per_s: float, applied: dict[str, list[str]]) -> None:
    """The WAL path's records of the objects that the batches first..first+batches close."""
    per_object = max(1, object_bytes // batch_bytes)
    for i in range(first, first + batches):
        if (i + 1) % per_object:
            continue
        tick[0] = int(i * 1000 / per_s)
        sequence = i // per_object
        key = f"{sequence % 65536:04x}/wal/use1-az1/proxy-use1-az1/1/{sequence:016d}"
        proxy.emit("wal_flush", {
            "writer_id": "proxy-use1-az1", "epoch": 1, "sequence": sequence, "key": key,
            "bytes": per_object * batch_bytes + 300, "entries": per_object, "zones": ",".join(AGENT_ZONES),
            "reason": "size", "put_ms": 35.0, "attempts": 1, "put_requests": 1, "ok": True, "put_wait_ms": 0.4,
            "s3_request_ms": 33.0})
        for zone in AGENT_ZONES:
            share = per_object // len(AGENT_ZONES)
            proxy.emit("notification", {"dest_zone": zone, "key": key, "entries": share,
                                        "request_bytes": 180 + 61 * share, "response_bytes": 40 + 12 * share,
                                        "rtt_ms": 9.0, "status": "ok", "attempts": 1})
            agents[zone].emit("agent_read", {
                "source_zone": "use1-az1", "key": key, "bytes": share * batch_bytes, "gets": 1, "cache_hits": 0,
                "cache_misses": 1, "bytes_from_cache": 0, "latency_ms": 6.0, "get_ms": 5.0})
            agents[zone].emit("agent_apply", {"source_zone": "use1-az1", "key": key, "entries": share,
                                              "status": "ok", "read_ms": 6.0, "append_ms": 3.0, "handle_ms": 10.0})
            applied[zone].append(key)


def checkpoint(agents: dict[str, AuditSink], applied: dict[str, list[str]]) -> None:
    """One manifest per agent naming what it applied since the last (agent.checkpoint_interval_ms 1,000)."""
    for zone, keys in applied.items():
        if keys:
            agents[zone].emit("checkpoint_write", {"keys": len(keys), "wal_keys": ",".join(keys), "put_ms": 20.0,
                                                   "status": "ok"})
            keys.clear()


def measure(form: str, args: argparse.Namespace) -> tuple[int, int, int, int]:
    """(records, stored bytes, WAL-path records, their stored bytes estimated by their share of the lines)."""
    produce_summed, objects_summed = FORMS[form]
    out = Path(tempfile.mkdtemp(prefix=f"audit-size-{form}-"))
    writers = {"use1-az1": AuditWriter(AuditConfig(output=str(out)), "use1-az1", "proxy")}
    writers.update({zone: AuditWriter(AuditConfig(output=str(out)), zone, "agent") for zone in AGENT_ZONES})
    tick = [0]
    sinks: dict[str, AuditSink] = dict(writers)
    flushers: list[SummarizingAuditSink | ObjectSummarySink] = []
    try:
        if objects_summed:
            for zone, writer in writers.items():
                objects = ObjectSummarySink(writer, clock_ms=lambda: tick[0])
                flushers.append(objects)
                sinks[zone] = objects
        router: AuditSink = sinks["use1-az1"]
        if produce_summed:
            summaries = SummarizingAuditSink(sinks["use1-az1"], args.interval_s, clock_ms=lambda: tick[0])
            flushers.append(summaries)
            router = summaries
        agents = {zone: sinks[zone] for zone in AGENT_ZONES}
        applied: dict[str, list[str]] = {zone: [] for zone in AGENT_ZONES}
        interval_ms = int(args.interval_s * 1000)
        per_second = max(1, int(args.batches_per_s))
        next_interval_ms = interval_ms
        for start in range(0, args.batches, per_second):
            n = min(per_second, args.batches - start)
            feed(router, start, n, args.partitions, args.batch_bytes, args.seed + start, tick, args.batches_per_s)
            if args.object_bytes:
                feed_objects(sinks["use1-az1"], agents, start, n, args.batch_bytes, args.object_bytes, tick,
                             args.batches_per_s, applied)
                checkpoint(agents, applied)
            tick[0] = int((start + n) * 1000 / args.batches_per_s)
            if tick[0] >= next_interval_ms:
                for flusher in flushers:
                    flusher.flush()
                next_interval_ms += interval_ms
        for flusher in flushers:
            flusher.close()
    finally:
        for writer in writers.values():
            writer.close()
    files = list(out.rglob("*.jsonl.gz"))
    lines = [line for f in files for line in gzip.open(f, "rt")]
    wal_lines = [line for line in lines if json.loads(line)["kind"] in WAL_KINDS]
    stored = sum(f.stat().st_size for f in files)
    wal_stored = round(stored * sum(map(len, wal_lines)) / max(1, sum(map(len, lines))))
    return len(lines), stored, len(wal_lines), wal_stored


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=60_000)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--batch-bytes", type=int, default=16 * 1024)
    parser.add_argument("--batches-per-s", type=float, default=2_000.0)
    parser.add_argument("--interval-s", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--object-bytes", type=int, default=1024 * 1024,
                        help="WAL object size (0: the proxy's produce records alone)")
    args = parser.parse_args()
    payload = args.batches * args.batch_bytes
    print(f"{args.batches:,} batches of {args.batch_bytes:,} bytes ({payload / GB:.3f} GB) on {args.partitions} "
          f"partitions at {args.batches_per_s:,.0f} batches/s, interval {args.interval_s:g} s, "
          f"WAL objects of {args.object_bytes:,} bytes for {len(AGENT_ZONES)} zones")
    for form in FORMS:
        records, stored, wal_records, wal_stored = measure(form, args)
        print(f"{form:16s} all: {records:>9,} records {records * GB / payload:>11,.0f} per GB  "
              f"{stored:>11,} bytes {stored / payload:.4%} of payload | WAL path: {wal_records:>8,} records "
              f"{wal_records * GB / payload:>9,.0f} per GB {wal_stored / payload:.4%}")


if __name__ == "__main__":
    main()
