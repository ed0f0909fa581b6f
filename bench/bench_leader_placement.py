"""Leader placement against the WAL route, on the local Apache Kafka cluster: four runs, one table.

Strategy. One three-zone environment (network namespaces, a KRaft node per zone with the
zone as its rack, moto for S3; deploy/local/zones.py as `azsidecar demo` builds it) and one
skewed workload (SKEWED_TOPICS): topic `hot`'s producers are mostly in use1-az1, topic
`even` gets the same bytes from every zone. Four runs of it, each on fresh topics that
Kafka places itself:

  (a) direct:        producers write straight to the leaders (librdkafka finds them)
  (b) WAL route:     producers write to their zone's sidecar (policy wal)
  (c) leaders moved: `azsidecar plan leaders --apply` (planner and applier, in use1-az1's
                     namespace) moves the new topics' leaders to the zone the audit of (b)
                     says their bytes came from, then the producers write direct
  (d) moved + WAL:   the same moves, then the producers write to the sidecars: what
                     still crosses goes through S3

The plan reads (b)'s audit records with (b)'s topic names replaced by the run's own
(the same traffic on fresh topics). Every run is verified record by record. Measured per
run: the inter-zone client bytes (the bridge-port counters; Kafka's replication is on its
own links and left out: it is the same whichever replica leads), S3 requests (the run's
audit: wal_flush PUTs, checkpoint PUTs, agent_read GETs), the producers' produce-to-ack
latency (the worst producer's p50 and p99) and the cost at list prices: transfer at
$0.01/GB each way plus S3 Standard requests. Net saving = cost(a) - cost(run).

Usage (root; the machine otherwise idle for figures):
  .venv/bin/python bench/bench_leader_placement.py [--mb 40] [--skew 4] [--out bench-out]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.prices import Prices
from deploy.local.scenario import RunResult, TopicSpec, Workload, run_baseline, run_sidecar
from deploy.local.sidecar_stack import SidecarSettings, sidecar_starter
from deploy.local.zones import ZoneEnv, netns_available, three_zones
from leader_placement.audit_input import produce_bytes_by_zone, read_records

GB = 1_000_000_000
MB = 1_000_000
PLAN_TIMEOUT_S = 300.0  # planning and applying a handful of moves
# use1-az1 sends 8 of every 10 records to `hot`, the other zones 1 of 3; `even` gets 2 from each.
SKEWED_TOPICS = (TopicSpec("hot", 6, False, zone_weights=(8, 1, 1)),
                 TopicSpec("even", 3, False, zone_weights=(2, 2, 2)))


def skewed_workload(mb: float, record_bytes: int = 1000, records_per_s: float | None = None) -> Workload:
    return Workload(total_bytes=int(mb * MB), record_bytes=record_bytes, topics=SKEWED_TOPICS,
                    records_per_s=records_per_s)


@dataclass(frozen=True)
class Variant:
    """One run's measurements (None: not measured)."""

    name: str
    cross_zone_bytes: int | None
    put_requests: int = 0
    get_requests: int = 0
    p50_ms: float | None = None
    p99_ms: float | None = None
    moves: int = 0
    notes: tuple[str, ...] = field(default=())

    def cost_usd(self, prices: Prices) -> float | None:
        """Transfer (each crossing byte billed out and in) plus S3 Standard requests; None unmetered."""
        if self.cross_zone_bytes is None:
            return None
        store = prices.store("standard")
        return (self.cross_zone_bytes * 2 * prices.cross_az_per_gb_each_way / GB
                + self.put_requests * store.put_per_1000 / 1000 + self.get_requests * store.get_per_1000 / 1000)


def _ratio(value: float | None, base: float | None) -> str:
    if value is None or base is None:
        return "-"
    if base == 0:
        return "-" if value else "1.00"
    return f"{value / base:.2f}"


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def format_table(variants: Sequence[Variant], prices: Prices) -> str:
    """The runs side by side, each with its ratio to the first (the direct run)."""
    base = variants[0]
    base_cost = base.cost_usd(prices)
    head = (f"{'run':<18} {'moves':>5} {'cross-zone MB':>13} {'x(a)':>5} {'S3 PUT':>7} {'S3 GET':>7} "
            f"{'p50 ms':>8} {'x(a)':>5} {'p99 ms':>8} {'x(a)':>5} {'cost $':>10} {'x(a)':>5} {'net saving $':>12}")
    lines = [head, "-" * len(head)]
    for v in variants:
        cost = v.cost_usd(prices)
        saving = None if cost is None or base_cost is None else base_cost - cost
        cross_mb = None if v.cross_zone_bytes is None else v.cross_zone_bytes / MB
        lines.append(
            f"{v.name:<18} {v.moves:>5} {_num(cross_mb, '.2f'):>13} {_ratio(v.cross_zone_bytes, base.cross_zone_bytes):>5} "
            f"{v.put_requests:>7} {v.get_requests:>7} {_num(v.p50_ms, '.1f'):>8} {_ratio(v.p50_ms, base.p50_ms):>5} "
            f"{_num(v.p99_ms, '.1f'):>8} {_ratio(v.p99_ms, base.p99_ms):>5} {_num(cost, '.6f'):>10} "
            f"{_ratio(cost, base_cost):>5} {_num(saving, '+.6f'):>12}")
    return "\n".join(lines)


def worst_latency(summaries: Iterable[Mapping[str, Any]]) -> tuple[float | None, float | None]:
    """The highest p50 and the highest p99 over the producers' summaries (None: none reported)."""
    p50s = [s["latency"]["lat_p50_ms"] for s in summaries if s.get("latency")]
    p99s = [s["latency"]["lat_p99_ms"] for s in summaries if s.get("latency")]
    return (max(p50s) if p50s else None, max(p99s) if p99s else None)


def renamed(records: Iterable[dict[str, Any]], names: Mapping[str, str]) -> Iterator[dict[str, Any]]:
    """The records with their `topic` replaced by names[topic] (other topics dropped from
    produce_batch and produce_summary records; records without a topic kept as they are)."""
    for r in records:
        topic = r.get("topic")
        if topic is None:
            yield r
        elif topic in names:
            yield {**r, "topic": names[topic]}


def write_records(records: Iterable[dict[str, Any]], root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    with gzip.open(root / "renamed.jsonl.gz", "wt") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in records)
    return root


def s3_requests(audit_dir: Path) -> tuple[int, int]:
    traffic = produce_bytes_by_zone(read_records(audit_dir))
    return traffic.put_requests, traffic.get_requests


def variant(name: str, run: RunResult, audit_dir: Path | None = None, moves: int = 0) -> Variant:
    puts, gets = s3_requests(audit_dir) if audit_dir is not None else (0, 0)
    p50, p99 = worst_latency(run.summaries)
    return Variant(name, run.reading.total_bytes, puts, gets, p50, p99, moves)


class Bench:
    def __init__(self, env: ZoneEnv, workload: Workload, out: Path, args: argparse.Namespace) -> None:
        self.env, self.workload, self.out, self.args = env, workload, out, args
        self.wal_audit: Path | None = None
        self.wal_topics: tuple[str, ...] = ()

    def sidecars(self, audit_dir: Path):
        settings = SidecarSettings(wal_bucket="azsidecar-wal", audit_dir=audit_dir, policy="wal",
                                   linger_ms=self.args.wal_linger_ms)
        return sidecar_starter(self.env, settings)

    def move_leaders(self, label: str, moved: list[int]):
        """A `prepare` for the scenario: plan from (b)'s audit on this run's topics, apply."""
        def prepare(topic_names: Sequence[str]) -> None:
            assert self.wal_audit is not None
            audit = write_records(renamed(read_records(self.wal_audit), dict(zip(self.wal_topics, topic_names, strict=True))),
                                  self.out / f"plan-audit-{label}")
            reassignment = self.out / f"reassignment-{label}.json"
            argv = [sys.executable, "-m", "azsidecar.cli", "plan", "leaders", "--from-audit", str(audit),
                    "--bootstrap-servers", self.env.cluster_bootstrap, "--out", str(reassignment),
                    "--plan-out", str(self.out / f"plan-{label}.json"), "--apply",
                    "--skew", str(self.args.skew), "--min-saving-bytes", str(max(1, self.workload.total_bytes // 100)),
                    "--batch-size", "10", "--throttle-s", "0", "--timeout-s", "60"]
            code = self.env.run_to_completion(self.env.zones[0], argv, PLAN_TIMEOUT_S, log_name=f"plan-leaders-{label}")
            log = (self.env.log_dir / f"plan-leaders-{label}.log").read_text(errors="replace")
            print(log, flush=True)
            if code != 0:
                raise SystemExit(f"azsidecar plan leaders --apply exited {code} (log above)")
            moved.append(len(json.loads(reassignment.read_text())["partitions"]))
        return prepare

    def run(self) -> list[Variant]:
        env, w = self.env, self.workload
        direct = run_baseline(env, w, progress=say, name="a-direct")
        check(direct)
        self.wal_audit = self.out / "audit-b"
        wal = run_sidecar(env, w, self.sidecars(self.wal_audit), progress=say, name="b-wal")
        check(wal)
        self.wal_topics = wal.topics
        moved_c: list[int] = []
        moved = run_baseline(env, w, progress=say, name="c-moved", prepare=self.move_leaders("c", moved_c))
        check(moved)
        moved_d: list[int] = []
        both = run_sidecar(env, w, self.sidecars(self.out / "audit-d"), progress=say, name="d-moved-wal",
                           prepare=self.move_leaders("d", moved_d))
        check(both)
        return [variant("(a) direct", direct), variant("(b) WAL route", wal, self.wal_audit),
                variant("(c) leaders moved", moved, moves=moved_c[0]),
                variant("(d) moved + WAL", both, self.out / "audit-d", moves=moved_d[0])]


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def check(run: RunResult) -> None:
    if not run.ok:
        raise SystemExit(f"{run.name} failed verification: {run.verification.get('problems')}")
    say(f"{run.name}: {run.records} records verified exactly once, in per-partition order")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=40.0, help="payload per run, MB (10^6 bytes; default 40)")
    parser.add_argument("--record-bytes", type=int, default=1000)
    parser.add_argument("--skew", type=int, default=4,
                        help="plan leaders --skew: a broker may lead ceil(9 / 3) + SKEW of the 9 partitions (default 4: "
                             "room for every hot partition on use1-az1's broker)")
    parser.add_argument("--wal-linger-ms", type=int, default=50)
    parser.add_argument("--records-per-s", type=float, default=None,
                        help="pace each producer (default: as fast as it goes, so latency is mostly queueing)")
    parser.add_argument("--out", default="bench-out/leader-placement")
    args = parser.parse_args(argv)
    if not netns_available():
        print("bench_leader_placement: needs root and `ip` (network namespaces: the meter counts the bridge)",
              file=sys.stderr)
        return 2
    workload = skewed_workload(args.mb, args.record_bytes, args.records_per_s)
    out = Path(args.out).resolve() / time.strftime("run-%Y%m%d-%H%M%S")
    out.mkdir(parents=True)
    load = os.getloadavg()
    # cleanup_first=False: on a shared machine the leftovers of others' runs are theirs to remove
    with three_zones(mode="netns", log_dir=out / "logs", broker="kafka", cleanup_first=False) as env:
        env.create_bucket("azsidecar-wal")
        variants = Bench(env, workload, out, args).run()
    table = format_table(variants, Prices())
    header = (f"leader placement bench: {args.mb:g} MB per run, {args.record_bytes} B records, topics "
              + ", ".join(f"{t.name} ({t.partitions} partitions, zone weights {t.zone_weights})" for t in SKEWED_TOPICS)
              + f"; plan --skew {args.skew}; producers {'paced at ' + format(args.records_per_s, 'g') + ' rec/s each' if args.records_per_s else 'unpaced'}; load average before {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, "
              f"after {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    text = f"{header}\n{table}\n"
    print(text)
    (out / "result.txt").write_text(text)
    (out / "result.json").write_text(json.dumps([vars(v) for v in variants], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
