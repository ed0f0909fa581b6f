"""`azsidecar demo --fleet`: many small producers and two heavy ones, per-host sidecars vs zone gateways.

Both runs share one three-zone environment (network namespaces when root, so cross-zone
bytes are metered on the zone links; loopback otherwise), the router policy (`--policy`,
default wal: every cross-zone batch through S3, so the runs compare object sizes) and the
same paced workload (deploy/local/fleet.py). Per run: records verified exactly once and in
order, metered cross-zone bytes, and from the audit records the S3 requests and the net
savings against direct produce, beside what `azsidecar plan` predicts from the same records.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

from core.configload import ConfigError
from core.prices import Prices
from deploy.local.fleet import Fleet, FleetRun, audit_lines, run_fleet
from deploy.local.sidecar_stack import SidecarSettings
from deploy.local.zones import cleanup_leftovers, netns_available, three_zones
from planner.plan import PlanError, Usage, WalSettings, storage_classes
from planner.profile import audited_totals
from planner.replay import applies_from_records, arrivals_from_produce_batches, notify_sizes_from_records, replay_usage

MB = 1_000_000


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def main(args: argparse.Namespace) -> int:
    try:
        fleet = Fleet(small_per_zone=args.small_per_zone, small_bytes_per_s=args.small_kbps * 1000,
                      heavy=args.heavy, heavy_bytes_per_s=args.heavy_mbps * MB, duration_s=args.duration_s,
                      record_bytes=args.record_bytes)
    except ValueError as exc:  # the flags' combination (each flag alone is checked by argparse)
        raise ConfigError(f"--small-per-zone, --heavy, --small-kbps, --heavy-mbps, --duration-s: {exc}") from exc
    mode = args.mode if args.mode != "auto" else ("netns" if netns_available() else "loopback")
    if mode == "netns":
        cleanup_leftovers()
    else:
        say("not root: running on loopback; cross-zone bytes are NOT metered")
    out = Path(args.out).resolve() / time.strftime("fleet-%Y%m%d-%H%M%S")
    policy = args.policy
    runs: list[FleetRun] = []
    with three_zones(mode=mode, log_dir=out / "logs") as env:
        env.create_bucket("azsidecar-wal")
        settings = SidecarSettings(wal_bucket="azsidecar-wal", audit_dir=out, policy=policy, linger_ms=250)
        for run_mode in ("sidecars", "gateways"):
            run = run_fleet(env, fleet, run_mode, settings, say)
            if not run.ok:
                raise SystemExit(f"fleet {run_mode} failed verification: {run.verification.get('problems')}")
            say(f"fleet {run_mode}: {run.records} records verified exactly once, in per-partition order")
            runs.append(run)
    table = result_table(runs, policy, Prices())
    print(table)
    (out / "result.txt").write_text(table)
    return 0


def _sized(wal: WalSettings, sizes: tuple[float, float] | None) -> WalSettings:
    """`wal` with a run's measured notification sizes, if it has any."""
    if sizes is None:
        return wal
    return replace(wal, notify_bytes_per_share=sizes[0], notify_bytes_per_entry=sizes[1])


def result_table(runs: list[FleetRun], policy: str, prices: Prices) -> str:
    cls = storage_classes(prices)[0]
    wal = WalSettings(linger_ms=250, policy="wal")  # replay: every cross-zone batch through the WAL
    lines = ["", "=" * 100, f"azsidecar fleet demo (router policy {policy}, linger 250 ms)", "=" * 100,
             f"{'':34s}" + "".join(f"{r.mode:>22s}" for r in runs)]

    def row(label: str, values: list[str]) -> None:
        lines.append(f"{label:34s}" + "".join(f"{v:>22s}" for v in values))

    audited = []
    replayed: list[Usage | None] = []  # None: the run's arrivals could not be replayed
    arrivals_of = []
    applies_of = []
    sizes_of = []
    for r in runs:
        records = list(audit_lines(r.audit_dir))
        audited.append(audited_totals(records))
        arrivals_of.append(arrivals_from_produce_batches(records))
        applies_of.append(applies_from_records(records))
        sizes_of.append(notify_sizes_from_records(records))
    for arrivals, applied, sizes in zip(arrivals_of, applies_of, sizes_of):
        try:  # the run's own arrivals through its own mode; the gateways also from the sidecars' arrivals
            replayed.append(replay_usage(arrivals, "sidecar", _sized(wal, sizes), applied=applied)[0])
        except PlanError:
            replayed.append(None)
    row("proxies", [str(r.proxies) for r in runs])
    row("records (verified once, in order)", [str(r.records) for r in runs])
    row("payload MB", [f"{r.payload_bytes / MB:.2f}" for r in runs])
    row("metered cross-zone MB", [f"{r.reading.total_bytes / MB:.3f}" if r.reading.total_bytes is not None
                                  else "unmetered" for r in runs])
    row("audit: direct produce would cross MB", [f"{a.direct_equivalent_bytes / MB:.3f}" for a in audited])
    row("audit: crossed MB", [f"{a.crossed_bytes / MB:.3f}" for a in audited])
    row("audit: WAL objects", [str(a.wal_objects) for a in audited])
    row("audit: S3 PUT / GET", [f"{a.put_requests:.0f} / {a.get_requests:.0f}" for a in audited])
    bills = [a.bill(prices, cls) for a in audited]
    row("audit: transfer $", [f"{b[0]:.8f}" for b in bills])
    row("audit: S3 request $", [f"{b[1]:.8f}" for b in bills])
    row("audit: net savings $", [f"{b[2]:.8f}" for b in bills])
    row("audit: net savings / direct", [f"{b[2] / (a.direct_equivalent_bytes * 2e-11):.1%}"
                                        if a.direct_equivalent_bytes else "-" for a, b in zip(audited, bills)])
    byte_usd = 2 * prices.cross_az_per_gb_each_way / 1e9

    def net(u: Usage) -> float:
        return (u.direct_equivalent_bytes - u.crossed_bytes) * byte_usd - ((u.objects + u.checkpoints) * cls.put
                                                                          + u.shares * cls.get)

    row("plan replay: WAL objects", [f"{u.objects:.0f}" if u else "-" for u in replayed])
    row("plan replay: S3 PUT / GET", [f"{u.objects + u.checkpoints:.0f} / {u.shares:.0f}" if u else "-" for u in replayed])
    row("plan replay: net savings $", [f"{net(u):.8f}" if u else "-" for u in replayed])
    if [r.mode for r in runs] == ["sidecars", "gateways"] and arrivals_of[0]:
        g = replay_usage(arrivals_of[0], "gateway", _sized(wal, sizes_of[0]))[0]
        lines.append(f"plan: the sidecars run's arrivals through one gateway per zone: {g.objects:.0f} WAL objects, "
                     f"{g.objects + g.checkpoints:.0f} PUTs, {g.shares:.0f} GETs, net savings ${net(g):.8f} "
                     f"(the gateways run audited {audited[1].wal_objects} objects, "
                     f"{audited[1].put_requests:.0f} PUTs, {audited[1].get_requests:.0f} GETs)")
    for r, a in zip(runs, audited):
        month = 730 * 3600 / a.window_s
        lines.append(f"{r.mode}: net savings at this rate for a month ${a.bill(prices, cls)[2] * month:,.2f}")
    lines.append("=" * 100)
    return "\n".join(lines)


