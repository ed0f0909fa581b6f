"""`azsidecar demo`: the local three-zone system end to end, baseline against sidecar.

1. Three zones (network namespaces when root, else loopback), S3 (moto) on its own links,
   one Tansu broker per zone sharing one bucket.
2. Baseline: producers in each zone write straight to each partition's leader zone.
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
from dataclasses import dataclass, field
from pathlib import Path

GB = 1_000_000_000
MB = 1_000_000


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("demo", help="run the local three-zone system: baseline vs sidecar, audited",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=float, default=200.0, help="payload per run in MB (default 200)")
    p.add_argument("--record-bytes", type=int, default=1000, help="record value size (default 1000)")
    p.add_argument("--policy", choices=("wal", "cost", "direct"), default="wal",
                   help="router policy of the sidecar run (default wal: every cross-zone batch via S3)")
    p.add_argument("--mode", choices=("auto", "netns", "loopback"), default="auto",
                   help="netns (root: metered bridge) or loopback (unmetered); auto picks netns when root")
    p.add_argument("--out", default="demo-out", help="directory for logs, audit records and the report")
    p.add_argument("--skip-audit", action="store_true", help="do not run the Spark audit")
    p.set_defaults(func=main)


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


@dataclass
class DemoResult:
    mode: str
    baseline: object  # deploy.local.scenario.RunResult
    sidecar: object
    audit_tables: dict[str, list[dict]] = field(default_factory=dict)
    run_dir: Path = Path()

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
             audit: bool = True, progress=None) -> DemoResult:
    """Baseline and sidecar runs of the same workload, verified, and (optionally) audited.

    Raises SystemExit when a run fails verification, ScenarioError/ZoneSetupError when the
    environment cannot be set up.
    """
    from deploy.local.scenario import Workload, router_overrides, run_baseline, run_sidecar  # noqa: PLC0415
    from deploy.local.sidecar_stack import SidecarSettings, sidecar_starter  # noqa: PLC0415
    from deploy.local.zones import cleanup_leftovers, netns_available, three_zones  # noqa: PLC0415

    progress = progress or say
    mode = mode if mode != "auto" else ("netns" if netns_available() else "loopback")
    if mode == "loopback":
        progress("not root: running on loopback; cross-zone bytes are NOT metered (no bridge to count)")
    removed = cleanup_leftovers() if netns_available() else []
    if removed:
        progress(f"removed leftovers of an earlier run: {', '.join(removed)}")
    workload = Workload(total_bytes=int(mb * MB), record_bytes=record_bytes)
    run_dir = out / time.strftime("run-%Y%m%d-%H%M%S")
    progress(f"starting three zones ({mode}); logs in {run_dir}")
    with three_zones(mode=mode, log_dir=run_dir / "logs") as env:
        wal_bucket = "azsidecar-wal"
        env.create_bucket(wal_bucket)
        progress(f"zones up: {', '.join(f'{z.name}@{z.address}' for z in env.zones)}")
        baseline = run_baseline(env, workload, progress=progress)
        _check(baseline, "baseline", progress)
        settings = SidecarSettings(wal_bucket=wal_bucket, audit_dir=run_dir / "audit", policy=policy,
                                   linger_ms=250, partition_zones=router_overrides(env, workload)["partition_zones"])
        sidecar = run_sidecar(env, workload, sidecar_starter(env, settings), progress=progress)
        _check(sidecar, "sidecar", progress)
    result = DemoResult(mode, baseline, sidecar, run_dir=run_dir)
    if audit:
        progress("running the Spark audit (local[*]) over the sidecar run's audit records")
        from router.config import Prices  # noqa: PLC0415
        from spark_audit.run import run as run_audit  # noqa: PLC0415

        code = run_audit("all", str(settings.audit_dir), str(run_dir / "report"), Prices(), out=sys.stdout)
        if code != 0:
            raise SystemExit(f"the audit failed with exit code {code}")
        result.audit_tables = {p.stem: list(csv.DictReader(p.open())) for p in (run_dir / "report").glob("*.csv")}
    return result


def main(args: argparse.Namespace) -> int:
    from deploy.local.zones import netns_available  # noqa: PLC0415

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.mode == "netns" and not netns_available():
        print("azsidecar demo: --mode netns needs root and the `ip` tool", file=sys.stderr)
        return 2
    result = run_demo(out, args.mb, args.record_bytes, args.policy, args.mode, audit=not args.skip_audit)
    table = result_table(result.baseline, result.sidecar, result.audit_tables)
    print(table)
    (result.run_dir / "result.txt").write_text(table)
    (result.run_dir / "result.json").write_text(json.dumps(
        {"baseline": result.baseline.as_dict(), "sidecar": result.sidecar.as_dict()}, indent=1, default=str))
    if (result.run_dir / "report" / "report.html").exists():
        say(f"HTML report: {result.run_dir / 'report' / 'report.html'}")
    return 0


def _check(result, name: str, progress=say) -> None:
    v = result.verification
    if not v.get("ok"):
        raise SystemExit(f"{name} run failed verification: {v.get('problems')}")
    progress(f"{name}: {v['records']} records verified exactly once, in per-partition order")


def _num(rows: list[dict], column: str) -> float:
    return sum(float(r[column]) for r in rows if r.get(column) not in (None, ""))


def result_table(baseline, sidecar, tables: dict[str, list[dict]]) -> str:
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
        cols = savings[0].keys()
        def pick(*names):
            return next((n for n in names if n in cols), None)
        for label, names in (("S3 PUT requests", ("s3_puts", "put_requests")),
                             ("S3 GET requests", ("s3_gets", "get_requests")),
                             ("S3 request $", ("s3_request_usd", "s3_usd")),
                             ("transfer $ avoided (audit)", ("transfer_usd_avoided", "avoided_usd")),
                             ("net savings $ (audit)", ("net_savings_usd", "net_usd")),
                             ("cross-zone bytes direct would send (audit)", ("direct_equivalent_bytes",)),
                             ("cross-zone bytes that crossed (audit)", ("crossed_bytes",))):
            col = pick(*names)
            if col:
                value = _num(savings, col)
                lines.append(f"{label:38s}{value:14.6f}" if "$" in label else f"{label:38s}{value:14.0f}")
        est = pick("direct_equivalent_bytes")
        if est and b_bytes:
            lines.append(f"audit estimate vs metered baseline    {100.0 * (_num(savings, est) / b_bytes - 1):+10.2f} %")
    for row in tables.get("cache_agent", [])[:6]:
        lines.append("agent cache " + ", ".join(f"{k}={v}" for k, v in row.items()))
    for row in tables.get("latency", [])[:9]:
        lines.append("latency " + ", ".join(f"{k}={v}" for k, v in row.items()))
    lines.append(f"baseline produce time {baseline.duration_s:.1f}s, sidecar {sidecar.duration_s:.1f}s "
                 f"(includes starting the sidecars)")
    lines.append("=" * 78)
    return "\n".join(lines)
