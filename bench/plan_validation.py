"""The planner against measured runs: `azsidecar plan` predictions beside the audited figures.

For each audited run (a default `azsidecar demo` run directory, or the logs directory of an
`azsidecar demo --fleet` run with its fleet-sidecars-* and fleet-gateways-* runs) this prints,
per figure the planner prints (WAL objects, S3 PUTs and GETs, transfer, S3 request and net
savings dollars), the audit, the replay of the run's own arrivals (`--from-audit --compare`)
and the mean-rate model fed a CSV profile of the same byte rates (what a user writes from
their producers' byte-rate metrics: host, zone, leader_zone, bytes_per_s) with
`--wal-latency-ms` set to the run's mean produce latency through the WAL (a proxy metric).
It writes those CSV profiles next to its output so the same comparison can be run with the CLI:

    azsidecar plan --profile P.csv --audited RUN/audit --compare --compare-mode sidecar|gateway \\
        --policy wal --wal-latency-ms L

Usage: python -m bench.plan_validation [--demo RUN_DIR ...] [--fleet LOGS_DIR ...] --out DIR
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from azsidecar.run_plan import audit_records, compare_rows, read_profile_csv
from core.prices import Prices
from planner.plan import Flow, WalSettings, closed_loop_requests_per_s, plan
from planner.profile import audited_totals, flows_from_produce_batches
from planner.replay import applies_from_records, arrivals_from_produce_batches, notify_sizes_from_records, replay_usage

FIGURES = ("WAL objects", "S3 PUT requests", "S3 GET requests", "transfer USD", "S3 request USD", "net savings USD")


@dataclass(frozen=True)
class Case:
    name: str
    audit: Path
    mode: str  # the audited run's mode: "sidecar" (a proxy per host) or "gateway" (a proxy per zone)
    profile: list[Flow]  # the producers' byte rates over the run's window


def wal_latency_ms(records: Iterable[dict]) -> float:
    """Mean produce latency of the batches routed through the WAL (the proxy's histogram: sum / count),
    from produce_batch records or produce_summary sums."""
    total = count = 0.0
    for r in records:
        if r.get("route") != "wal":
            continue
        if r.get("kind") == "produce_batch":
            total, count = total + float(r["latency_ms"]), count + 1
        elif r.get("kind") == "produce_summary":
            total, count = total + float(r["latency_ms_sum"]), count + int(r["batches"])
    if count == 0:
        raise statistics.StatisticsError("no WAL batches in the audit")
    return total / count


def write_profile(path: Path, flows: Sequence[Flow]) -> None:
    with path.open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["host", "zone", "leader_zone", "bytes_per_s"])
        out.writerows([f.host, f.zone, f.leader_zone, f"{f.bytes_per_s:.1f}"] for f in flows)


def cases(demos: Sequence[Path], fleets: Sequence[Path]) -> list[Case]:
    out = []
    for run in demos:  # one sidecar per zone, one producer per zone: the proxies are the hosts
        flows, _ = flows_from_produce_batches(audit_records(run / "audit"))
        out.append(Case(f"demo {run.name}", run / "audit", "sidecar", flows))
    for logs in fleets:
        [sidecars] = sorted(p for p in logs.glob("fleet-sidecars-*") if p.is_dir())
        [gateways] = sorted(p for p in logs.glob("fleet-gateways-*") if p.is_dir())
        flows, window_s = flows_from_produce_batches(audit_records(sidecars / "audit"))
        out.append(Case(f"fleet sidecars {logs.parent.name}", sidecars / "audit", "sidecar", flows))
        # the same producers (paced, the same bytes each) over the gateways run's window
        _, window_g = flows_from_produce_batches(audit_records(gateways / "audit"))
        scale = window_s / window_g
        out.append(Case(f"fleet gateways {logs.parent.name}", gateways / "audit", "gateway",
                        [replace(f, bytes_per_s=f.bytes_per_s * scale) for f in flows]))
    return out


def compare(case: Case, out_dir: Path, prices: Prices) -> list[tuple[str, float, float, float]]:
    """(figure, audited, replay, mean-rate) per figure of FIGURES."""
    records = list(audit_records(case.audit))
    wal = WalSettings(policy="wal")
    sizes = notify_sizes_from_records(records)
    if sizes is not None:
        wal = replace(wal, notify_bytes_per_share=sizes[0], notify_bytes_per_entry=sizes[1])
    audited = audited_totals(records)
    applied = applies_from_records(records)
    replay = replay_usage(arrivals_from_produce_batches(records), "sidecar", wal, applied=applied)[0]
    latency = wal_latency_ms(records)
    profile = out_dir / (case.name.replace(" ", "-") + ".csv")
    write_profile(profile, case.profile)
    flows = read_profile_csv(profile, 16384, closed_loop_requests_per_s(latency))
    rows = {r["figure"]: r for r in compare_rows(plan(flows, wal, prices), audited, prices, replay, case.mode)}
    print(f"{case.name}: {case.mode} run, window {audited.window_s:.1f} s, mean WAL latency {latency:.0f} ms; "
          f"profile {profile}")
    result = []
    for figure in FIGURES:
        mean_rate, replayed = rows[figure], rows.get(f"replay: {figure}")
        audited_value = mean_rate["audited"]
        replay_value = replayed["predicted"] if replayed else _replay_figure(figure, rows)
        result.append((figure, audited_value, replay_value, mean_rate["predicted"]))
        print(f"  {figure:18s} audited {audited_value:12.6g}  replay {replay_value:12.6g} {_pct(replay_value, audited_value)}"
              f"  CSV mean-rate {mean_rate['predicted']:12.6g} {_pct(mean_rate['predicted'], audited_value)}")
    return result


def _replay_figure(figure: str, rows: dict) -> float:
    """Transfer and S3 request dollars of the replay, from its counts (compare_rows prints the net only)."""
    prices = Prices()
    if figure == "transfer USD":
        return rows["replay: cross-zone bytes"]["predicted"] * 2 * prices.cross_az_per_gb_each_way / 1e9
    puts, gets = rows["replay: S3 PUT requests"]["predicted"], rows["replay: S3 GET requests"]["predicted"]
    return puts * prices.s3_put_per_1000 / 1000 + gets * prices.s3_get_per_1000 / 1000


def _pct(predicted: float, audited: float) -> str:
    return f"({100.0 * (predicted / audited - 1):+6.1f} %)" if audited else "(     -  )"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo", type=Path, nargs="*", default=[], help="azsidecar demo run directories (run-*)")
    ap.add_argument("--fleet", type=Path, nargs="*", default=[], help="azsidecar demo --fleet logs directories")
    ap.add_argument("--out", type=Path, required=True, help="where the CSV profiles are written")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for case in cases(args.demo, args.fleet):
        compare(case, args.out, Prices())
    return 0


if __name__ == "__main__":
    sys.exit(main())
