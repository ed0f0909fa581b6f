"""`azsidecar plan`: predicted monthly bill per deployment mode from a traffic profile.

Reads the profile (a CSV the user writes from their own metrics, or a run's audit records:
gzip JSON lines under a directory), the prices (`--prices`, as `azsidecar audit` reads them)
and the WAL settings, and prints direct / per-host sidecars / zone gateways per storage
class (planner/plan.py is the model) and each host's break-even rate. With `--compare` and
`--from-audit`, also the run's audited figures beside the prediction for its window. For a
shadow run's audit, first the split of its cross-zone bytes and a go / no-go line
(planner/verdict.py).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TextIO, TypedDict

from core.configload import ConfigError
from core.prices import Prices
from core.prices_file import load_prices
from planner.plan import (
    Bill,
    Flow,
    PlanError,
    Usage,
    WalSettings,
    closed_loop_requests_per_s,
    cross_byte_usd,
    host_verdicts,
    plan,
    storage_classes,
)
from planner.profile import Audited, audited_totals, flow_from_row, flows_from_produce_batches
from planner.replay import applies_from_records, arrivals_from_produce_batches, notify_sizes_from_records, replay_usage
from planner.shadow import ShadowSplit, shadow_split, without_shadow_direct
from planner.verdict import GO_MIN_NET_SHARE, ShadowVerdict, shadow_verdict

REQUIRED_COLUMNS = ("host", "zone", "leader_zone", "bytes_per_s")


class CompareRow(TypedDict):
    """One figure of `--compare`: the plan's prediction against what the audit records say."""

    figure: str
    predicted: float
    audited: float


def read_profile_csv(path: Path, batch_bytes: int, closed_loop: float | None = None) -> list[Flow]:
    """Flows from a CSV with a header row (`closed_loop`: request rate of rows without
    requests_per_s, planner.plan.closed_loop_requests_per_s). Raises ConfigError naming file,
    line and column."""
    try:
        with path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise ConfigError(f"{path}: missing column(s) {', '.join(missing)} "
                                  f"(header: {', '.join(REQUIRED_COLUMNS)}[, batches_per_s][, requests_per_s])")
            return [flow_from_row(row, batch_bytes, f"{path}:{n}: ", closed_loop)
                    for n, row in enumerate(reader, start=2)]
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror or exc}") from exc
    except PlanError as exc:
        raise ConfigError(str(exc)) from exc


def audit_records(root: Path) -> Iterator[dict[str, object]]:
    """Every record of every `*.jsonl.gz` under `root` (hidden in-progress files skipped)."""
    files = sorted(p for p in root.rglob("*.jsonl.gz") if not p.name.startswith("."))
    if not files:
        raise ConfigError(f"{root}: no *.jsonl.gz audit files")
    for path in files:
        with gzip.open(path, "rt") as fh:
            for line in fh:
                if line.strip():
                    yield json.loads(line)


def main(args: argparse.Namespace) -> int:
    if not args.profile and not args.from_audit:
        raise ConfigError("plan: give --profile CSV or --from-audit DIR (or `azsidecar plan leaders ...`)")
    prices = load_prices(args.prices)
    try:
        wal = WalSettings(linger_ms=args.linger_ms, max_bytes=args.max_bytes,
                          checkpoint_interval_ms=args.checkpoint_interval_ms, agents_per_zone=args.agents_per_zone,
                          writers_per_zone=args.writers_per_zone, policy=args.policy)
    except PlanError as exc:
        raise ConfigError(str(exc)) from exc
    audited: Audited | None = None
    replayed: dict[str, Usage] = {}
    audit_root = args.from_audit or getattr(args, "audited", None)
    if args.compare and not audit_root:
        raise ConfigError("--compare needs the run's audit records: --from-audit DIR, or --profile with --audited DIR")
    shadow = None
    if audit_root:
        root = Path(audit_root)
        try:
            shadow = shadow_split(audit_records(root))
            if shadow is not None and args.compare:
                raise ConfigError(f"{root}: a shadow run (router.shadow) sent nothing through the WAL, so there is "
                                  "no audited WAL bill to compare with; plan it without --compare")
            sizes = notify_sizes_from_records(audit_records(root))
            if sizes is not None:  # the run's own notification sizes (names, keys) for every figure
                wal = replace(wal, notify_bytes_per_share=sizes[0], notify_bytes_per_entry=sizes[1])
            if args.compare:
                audited = audited_totals(audit_records(root))
                arrivals = arrivals_from_produce_batches(audit_records(root))
                applied = applies_from_records(audit_records(root))
                # one writer per proxy id is the run's own mode: its agents' measured applications
                replayed = {"sidecar": replay_usage(arrivals, "sidecar", wal, applied=applied)[0],
                            "gateway": replay_usage(arrivals, "gateway", wal)[0]}
            if args.from_audit and shadow is not None and shadow.wal_bytes == 0:
                flows: list[Flow] = []  # the policy would have sent nothing through the WAL: nothing to price, the verdict says so
            elif args.from_audit:
                flows, window_s = flows_from_produce_batches(without_shadow_direct(audit_records(root)))
        except PlanError as exc:
            raise ConfigError(f"{root}: {exc}") from exc
    if not args.from_audit:
        try:
            closed_loop = (closed_loop_requests_per_s(args.wal_latency_ms, args.in_flight)
                           if getattr(args, "wal_latency_ms", None) is not None else None)
        except PlanError as exc:
            raise ConfigError(str(exc)) from exc
        flows = read_profile_csv(Path(args.profile), args.batch_bytes, closed_loop)
    bills = plan(flows, wal, prices)
    compare_mode = getattr(args, "compare_mode", "sidecar")
    if args.format == "json":
        out = as_json(flows, bills, wal, prices, audited, replayed, compare_mode)
        if shadow is not None:
            verdict = shadow_verdict(bills)
            out["shadow"] = {"wal_bytes": shadow.wal_bytes, "direct_bytes": shadow.direct_bytes,
                             "verdict": {"go": verdict.go, "mode": verdict.mode, "storage_class": verdict.storage_class,
                                         "net_usd_per_month": verdict.net_usd,
                                         "transfer_usd_per_month": verdict.transfer_usd,
                                         "min_net_share": GO_MIN_NET_SHARE, "line": verdict.line()}}
        json.dump(out, sys.stdout, indent=1)
        print()
    else:
        if shadow is not None:
            print_shadow(shadow, shadow_verdict(bills), sys.stdout)
        print_text(flows, bills, wal, prices, audited, replayed, sys.stdout, compare_mode)
    return 0


def print_shadow(shadow: ShadowSplit, verdict: ShadowVerdict, out: TextIO) -> None:
    """The head of a shadow run's plan: which part of its cross-zone bytes the plan prices,
    then the go / no-go line (planner/verdict.py has the rule)."""
    total = shadow.wal_bytes + shadow.direct_bytes
    share = f" ({100.0 * shadow.wal_bytes / total:.1f} %)" if total else ""
    print(f"shadow run: the policy would have sent {shadow.wal_bytes / 1e6:,.3f} MB{share} of the "
          f"{total / 1e6:,.3f} MB produced across zones through the WAL; the plan prices those, the rest "
          "crosses directly in every mode", file=out)
    print(verdict.line(), file=out)


def as_json(flows: list[Flow], bills: list[Bill], wal: WalSettings, prices: Prices, audited: Audited | None,
            replayed: dict[str, Usage], compare_mode: str = "sidecar") -> dict[str, object]:
    cls = storage_classes(prices)[0]
    out: dict[str, object] = {
        "bills": [{"mode": b.mode, "storage_class": b.storage_class, "writers": b.writers,
                   "transfer_usd": b.transfer_usd, "s3_put_requests": b.s3_put_requests,
                   "s3_get_requests": b.s3_get_requests, "s3_request_usd": b.s3_request_usd,
                   "s3_data_usd": b.s3_data_usd, "total_usd": b.total_usd,
                   "direct_transfer_usd": b.direct_transfer_usd, "net_savings_usd": b.net_savings_usd}
                  for b in bills],
        "hosts": [{"host": v.host, "zone": v.zone, "cross_bytes_per_s": v.cross_bytes_per_s,
                   "break_even_bytes_per_s": v.break_even_bytes_per_s, "sidecar_pays": v.sidecar_pays}
                  for v in host_verdicts(flows, wal, cls, prices)],
    }
    if audited is not None:
        out["compare"] = compare_rows(bills, audited, prices, replayed.get("sidecar"), compare_mode)
    return out


def compare_rows(bills: list[Bill], audited: Audited, prices: Prices, replay: Usage | None = None,
                 mode: str = "sidecar") -> list[CompareRow]:
    """Predicted against audited: the mean-rate model (the bill of `mode` on Standard, scaled to
    the audited window) and, if given, the replay of the run's own arrivals (totals)."""
    cls = storage_classes(prices)[0]
    sidecar = next(b for b in bills if b.mode == mode and b.storage_class == cls.name)
    u, w = sidecar.usage, audited.window_s
    transfer, requests, net = audited.bill(prices, cls)
    predicted_puts = (u.objects + u.checkpoints) * w
    predicted_gets = u.shares * w
    byte_usd = cross_byte_usd(prices)
    p_transfer = u.crossed_bytes * w * byte_usd
    p_requests = predicted_puts * cls.put + predicted_gets * cls.get
    p_net = u.direct_equivalent_bytes * w * byte_usd - p_transfer - p_requests
    rows: list[CompareRow] = [
        {"figure": "WAL objects", "predicted": u.objects * w, "audited": audited.wal_objects},
        {"figure": "S3 PUT requests", "predicted": predicted_puts, "audited": audited.put_requests},
        {"figure": "S3 GET requests", "predicted": predicted_gets, "audited": audited.get_requests},
        {"figure": "bytes a direct produce sends", "predicted": u.direct_equivalent_bytes * w,
         "audited": audited.direct_equivalent_bytes},
        {"figure": "cross-zone bytes", "predicted": u.crossed_bytes * w, "audited": audited.crossed_bytes},
        {"figure": "transfer USD", "predicted": p_transfer, "audited": transfer},
        {"figure": "S3 request USD", "predicted": p_requests, "audited": requests},
        {"figure": "net savings USD", "predicted": p_net, "audited": net},
    ]
    if replay is not None:
        r_transfer = replay.crossed_bytes * byte_usd
        r_requests = (replay.objects + replay.checkpoints) * cls.put + replay.shares * cls.get
        rows += [
            {"figure": "replay: WAL objects", "predicted": replay.objects, "audited": audited.wal_objects},
            {"figure": "replay: S3 PUT requests", "predicted": replay.objects + replay.checkpoints,
             "audited": audited.put_requests},
            {"figure": "replay: S3 GET requests", "predicted": replay.shares, "audited": audited.get_requests},
            {"figure": "replay: cross-zone bytes", "predicted": replay.crossed_bytes, "audited": audited.crossed_bytes},
            {"figure": "replay: net savings USD",
             "predicted": replay.direct_equivalent_bytes * byte_usd - r_transfer - r_requests, "audited": net},
        ]
    return rows


def _usd(x: float) -> str:
    return f"{x:12,.2f}"


def _rate(bps: float | None) -> str:
    if bps is None:
        return "never"
    return f"{bps / 1e6:.3f} MB/s" if bps >= 1e6 else f"{bps / 1e3:.1f} KB/s"


def print_text(flows: list[Flow], bills: list[Bill], wal: WalSettings, prices: Prices, audited: Audited | None,
               replayed: dict[str, Usage], out: TextIO, compare_mode: str = "sidecar") -> None:
    hosts = {(f.host, f.zone) for f in flows}
    cross = sum(f.bytes_per_s for f in flows if f.cross)
    print(f"profile: {len(hosts)} producer hosts, {sum(f.bytes_per_s for f in flows) / 1e6:.3f} MB/s "
          f"({cross / 1e6:.3f} MB/s led in another zone); policy {wal.policy}, linger {wal.linger_ms} ms, "
          f"max_bytes {wal.max_bytes}, {wal.writers_per_zone} gateway writer(s) per zone", file=out)
    print("predicted per month (730 h), USD:", file=out)
    print(f"{'mode':10s} {'class':9s} {'writers':>7s} {'transfer':>12s} {'PUTs':>12s} {'GETs':>12s} "
          f"{'S3 requests':>12s} {'S3 data':>12s} {'total':>12s} {'net savings':>12s}", file=out)
    for b in bills:
        print(f"{b.mode:10s} {b.storage_class:9s} {b.writers:7d} {_usd(b.transfer_usd)} {b.s3_put_requests:12,.0f} "
              f"{b.s3_get_requests:12,.0f} {_usd(b.s3_request_usd)} {_usd(b.s3_data_usd)} {_usd(b.total_usd)} "
              f"{_usd(b.net_savings_usd)}", file=out)
    if len({b.storage_class for b in bills if b.mode != "direct"}) == 1:
        print("(S3 Express: no prices for it in router.prices; planned on S3 Standard only)", file=out)
    cls = storage_classes(prices)[0]
    print("break-even per producer host (its own sidecar, policy wal, S3 Standard):", file=out)
    for v in host_verdicts(flows, wal, cls, prices):
        verdict = "sidecar pays" if v.sidecar_pays else "gateway (or direct)"
        print(f"  {v.host:24s} {v.zone:10s} cross-zone {_rate(v.cross_bytes_per_s):>14s}  "
              f"break-even {_rate(v.break_even_bytes_per_s):>14s}  -> {verdict}", file=out)
    if audited is not None:
        print(f"prediction for the audited run ({audited.window_s:.1f} s window, {compare_mode} mode) vs audit:",
              file=out)
        for row in compare_rows(bills, audited, prices, replayed.get("sidecar"), compare_mode):
            p, a = row["predicted"], row["audited"]
            diff = f"{100.0 * (p / a - 1):+8.1f} %" if a else "       -"
            print(f"  {row['figure']:30s} predicted {p:16,.6g}  audited {a:16,.6g}  {diff}", file=out)
        g = replayed.get("gateway")
        if g is not None:
            print(f"replay of these arrivals through one gateway per zone (policy wal): {g.objects:.0f} WAL objects, "
                  f"{g.objects + g.checkpoints:.0f} PUTs, {g.shares:.0f} GETs", file=out)
