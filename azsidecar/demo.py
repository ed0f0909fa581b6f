"""`azsidecar demo`: the local three-zone system end to end, baseline against sidecar.

1. Three zones (network namespaces when root, else loopback), S3 (moto) on its own links,
   and a three-node Apache Kafka cluster, one node per zone with the zone as its rack
   (or, with --broker tansu, one Tansu broker per zone sharing one bucket).
2. Baseline: producers in each zone write straight to each partition's leader, which the
   brokers placed.
3. Sidecar run, same workload: producers write to 127.0.0.1:9092 in their own zone; the
   sidecar sends other zones' batches through S3 and the agents.
4. Both runs are verified record by record (exactly once, in per-partition order).
5. The Spark audit reads the components' audit records; a table compares metered
   cross-zone bytes and dollars. Everything is torn down on exit, Ctrl-C or failure.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from azsidecar import fleet_demo
from core.configload import ConfigError
from core.framing import Framing
from core.prices import Prices
from deploy.local.kafka_jars import KAFKA_VERSION
from deploy.local.scenario import RunResult, Workload, router_overrides, run_baseline, run_sidecar
from deploy.local.sidecar_stack import SidecarSettings, sidecar_starter
from deploy.local.zones import cleanup_leftovers, netns_available, set_link_mtu, three_zones
from spark_audit.run import run as run_audit

GB = 1_000_000_000
MB = 1_000_000
# The demo's meter counts Ethernet frames on the bridge ports; with offloads on, the veths
# carry GSO packets of up to 64 KB (one header each), with them off MTU-sized packets.
METER_LINK_HEADER_BYTES = 14
GSO_PACKET_BYTES = 65_535
VETH_MTU = 1500


def meter_framing(offloads: bool, link_mtu: int | None = None) -> Framing:
    """The path the demo's metered links are: what the audit estimates bytes on the wire for."""
    return Framing(path_mtu=GSO_PACKET_BYTES if offloads else link_mtu or VETH_MTU,
                   link_header_bytes=METER_LINK_HEADER_BYTES)


# A row of a report CSV (csv.DictReader): column -> text.
CsvRow = dict[str, str]


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


@dataclass
class DemoResult:
    mode: str
    baseline: RunResult
    sidecar: RunResult
    audit_tables: dict[str, list[CsvRow]] = field(default_factory=dict)
    run_dir: Path = Path()
    # More baseline runs after the sidecar run, each with the inter-zone links at this MTU.
    mtu_baselines: dict[int, RunResult] = field(default_factory=dict)

    @property
    def metered_reduction(self) -> float | None:
        """1 - sidecar/baseline metered cross-zone bytes, or None when unmetered."""
        b, s = self.baseline.reading.total_bytes, self.sidecar.reading.total_bytes
        return None if not b or s is None else 1 - s / b

    def audit_total(self, column: str) -> float | None:
        rows = self.audit_tables.get("savings", [])
        if not rows or column not in rows[0]:
            return None
        return _num(rows, column)


def run_demo(out: Path, mb: float, record_bytes: int = 1000, policy: str = "wal", mode: str = "auto",
             audit: bool = True, progress: Callable[[str], None] | None = None, offloads: bool = True,
             broker: str = "kafka", kafka_version: str | None = None,
             sidecar_config: dict[str, dict[str, object]] | None = None, link_mtu: int | None = None,
             capture_frames: bool = False, more_baseline_mtus: Sequence[int] = (),
             audit_job: str = "all") -> DemoResult:
    """Baseline and sidecar runs of the same workload, verified, and (optionally) audited.

    sidecar_config: more settings for the sidecars' config files ({section: {key: value}}).
    link_mtu: the inter-zone links' MTU (netns; default 1,500). capture_frames: the meter
    also takes the frames apart (RunResult.reading.frames; deploy/local/frame_tally.py).
    more_baseline_mtus (netns): after the sidecar run, one more baseline run with the links
    at each of these MTUs (DemoResult.mtu_baselines); the audit stays the first MTU's.
    audit_job: which Spark job the audit runs (spark_audit.catalog.JOBS; "all" is the report).

    Raises SystemExit when a run fails verification, ScenarioError/ZoneSetupError when the
    environment cannot be set up.
    """
    progress = progress or say
    mode = mode if mode != "auto" else ("netns" if netns_available() else "loopback")
    if mode == "loopback":
        progress("not root: running on loopback; cross-zone bytes are NOT metered (no bridge to count)")
    removed = cleanup_leftovers() if netns_available() else []
    if removed:
        progress(f"removed leftovers of an earlier run: {', '.join(removed)}")
    workload = Workload(total_bytes=int(mb * MB), record_bytes=record_bytes)
    run_dir = out / time.strftime("run-%Y%m%d-%H%M%S")
    what = f"Apache Kafka {kafka_version or KAFKA_VERSION}, a node per zone" if broker == "kafka" else "Tansu"
    progress(f"starting three zones ({mode}, {what}); logs in {run_dir}")
    with three_zones(mode=mode, log_dir=run_dir / "logs", offloads=offloads, broker=broker,
                     kafka_version=kafka_version, link_mtu=link_mtu, capture_frames=capture_frames) as env:
        wal_bucket = "azsidecar-wal"
        env.create_bucket(wal_bucket)
        progress(f"zones up: {', '.join(f'{z.name}@{z.address}' for z in env.zones)}"
                 + (f"; Kafka ready in {env.kafka.started_in_s:.1f} s" if env.kafka else ""))
        baseline = run_baseline(env, workload, progress=progress)
        _check(baseline, "baseline", progress)
        settings = SidecarSettings(wal_bucket=wal_bucket, audit_dir=run_dir / "audit", policy=policy,
                                   linger_ms=250, partition_zones=router_overrides(env, workload)["partition_zones"],
                                   extra=dict(sidecar_config or {}))
        sidecar = run_sidecar(env, workload, sidecar_starter(env, settings), progress=progress)
        _check(sidecar, "sidecar", progress)
        mtu_baselines = {}
        for mtu in more_baseline_mtus:
            set_link_mtu(env, mtu)
            mtu_baselines[mtu] = run_baseline(env, workload, progress=progress, name=f"baseline-mtu{mtu}")
            _check(mtu_baselines[mtu], f"baseline at MTU {mtu}", progress)
    result = DemoResult(mode, baseline, sidecar, run_dir=run_dir, mtu_baselines=mtu_baselines)
    if audit:
        progress(f"running the Spark audit (local[*], {audit_job}) over the sidecar run's audit records")
        code = run_audit(audit_job, str(settings.audit_dir), str(run_dir / "report"), Prices(), out=sys.stdout,
                         framing=meter_framing(offloads, link_mtu))
        if code != 0:
            raise SystemExit(f"the audit failed with exit code {code}")
        result.audit_tables = {p.stem: list(csv.DictReader(p.open())) for p in (run_dir / "report").glob("*.csv")}
    return result


def main(args: argparse.Namespace) -> int:
    if args.fleet:
        return fleet_demo.main(args)
    if int(args.mb * MB) < args.record_bytes:
        raise ConfigError(f"--mb {args.mb}: less than one record of --record-bytes {args.record_bytes}")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.mode == "netns" and not netns_available():
        print("azsidecar demo: --mode netns needs root and the `ip` tool", file=sys.stderr)
        return 2
    result = run_demo(out, args.mb, args.record_bytes, args.policy, args.mode, audit=not args.skip_audit,
                      offloads=args.offloads == "on", broker=args.broker, kafka_version=args.kafka_version)
    table = result_table(result.baseline, result.sidecar, result.audit_tables)
    print(table)
    (result.run_dir / "result.txt").write_text(table)
    (result.run_dir / "result.json").write_text(json.dumps(
        {"baseline": result.baseline.as_dict(), "sidecar": result.sidecar.as_dict()}, indent=1, default=str))
    if (result.run_dir / "report" / "report.html").exists():
        say(f"HTML report: {result.run_dir / 'report' / 'report.html'}")
    return 0


def replication_lines(baseline: RunResult, sidecar: RunResult) -> list[str]:
    """Kafka's replication between zones, named apart: neither savings nor the sidecar's cost.

    Followers copy every produced byte to the other racks whichever way the producer
    reached the leader, so both runs carry it alike. Self-managed Kafka on EC2 pays it as
    cross-zone transfer; MSK does not bill replication between its brokers.
    """
    b, s = getattr(baseline, "replication", None), getattr(sidecar, "replication", None)
    if b is None or s is None or not b.metered or not s.metered:
        return []
    return [f"replication between zones, baseline {b.total_bytes / MB:10.2f} MB (metered apart; not savings)",
            f"replication between zones, sidecar  {s.total_bytes / MB:10.2f} MB (the same copies, either way)",
            "  who pays it: self-managed Kafka on EC2 at $0.02/GB; MSK does not bill replication"]


def _check(result: RunResult, name: str, progress: Callable[[str], None] = say) -> None:
    v = result.verification
    if not v.get("ok"):
        raise SystemExit(f"{name} run failed verification: {v.get('problems')}")
    progress(f"{name}: {v['records']} records verified exactly once, in per-partition order")


def _num(rows: list[CsvRow], column: str) -> float:
    return sum(float(r[column]) for r in rows if r.get(column) not in (None, ""))


def result_table(baseline: RunResult, sidecar: RunResult, tables: dict[str, list[CsvRow]]) -> str:
    lines = ["", "=" * 78, "azsidecar demo result", "=" * 78]
    b_bytes = baseline.reading.total_bytes
    s_bytes = sidecar.reading.total_bytes
    lines.append(f"payload produced per run          {baseline.payload_bytes / MB:12.1f} MB "
                 f"({baseline.cross_zone_payload_bytes / MB:.1f} MB led in another zone)")
    lines.append(f"records per run                   {baseline.records:12d} (each verified exactly once, in order)")
    if b_bytes is None or s_bytes is None:
        lines.append("cross-zone bytes                  not metered (loopback mode; run as root for netns)")
    else:
        reduction = 100.0 * (1 - s_bytes / b_bytes) if b_bytes else 0.0
        lines.append(f"cross-zone bytes, baseline (metered)  {b_bytes / MB:10.2f} MB")
        lines.append(f"cross-zone bytes, sidecar  (metered)  {s_bytes / MB:10.2f} MB")
        lines.append(f"reduction                             {reduction:10.2f} %")
        lines.append(f"transfer $ at $0.02/GB, baseline      {b_bytes / GB * 0.02:10.6f}")
        lines.append(f"transfer $ at $0.02/GB, sidecar       {s_bytes / GB * 0.02:10.6f}")
    savings = tables.get("savings", [])
    if savings:
        put, get = _num(savings, "s3_put_requests"), _num(savings, "s3_get_requests")
        lines.append(f"S3 requests (audit)                   {put:10.1f} PUT  {get:10.1f} GET")
        lines.append(f"S3 request $                          {_num(savings, 's3_put_usd') + _num(savings, 's3_get_usd'):10.6f}")
        lines.append(f"transfer $ avoided (audit)            {_num(savings, 'transfer_avoided_usd'):10.6f}")
        lines.append(f"net savings $ (audit)                 {_num(savings, 'net_savings_usd'):10.6f}")
        estimate = _num(savings, "direct_equivalent_bytes")
        lines.append(f"audit: bytes a direct produce sends   {estimate / MB:10.2f} MB")
        lines.append(f"audit: bytes that crossed             {_num(savings, 'crossed_bytes') / MB:10.4f} MB")
        if b_bytes:
            lines.append(f"audit estimate vs metered baseline    {100.0 * (estimate / b_bytes - 1):+10.2f} %")
    for row in tables.get("cache_agent", []):
        lines.append(f"agent block cache {row['zone']}: hit rate {float(row['hit_rate']):.1%} "
                     f"({row['cache_hits']}/{row['lookups']}), bytes from cache {float(row['byte_hit_rate']):.1%}")
    for row in tables.get("cache_metadata", []):
        lines.append(f"router metadata cache {row['zone']}: hit rate {float(row['hit_rate']):.1%} "
                     f"({row['hits']}/{row['lookups']})")
    by_route: dict[str, list[CsvRow]] = {}
    for row in tables.get("latency", []):
        by_route.setdefault(row["route"], []).append(row)
    for route, rows in sorted(by_route.items()):
        p50 = max(float(r["p50_ms"]) for r in rows)
        p99 = max(float(r["p99_ms"]) for r in rows)
        lines.append(f"latency {route:12s} worst zone pair: p50 {p50:8.1f} ms  p99 {p99:8.1f} ms")
    lines.extend(replication_lines(baseline, sidecar))
    lines.append(f"baseline produce time {baseline.duration_s:.1f}s, sidecar {sidecar.duration_s:.1f}s "
                 f"(includes starting the sidecars)")
    lines.append("=" * 78)
    return "\n".join(lines)
