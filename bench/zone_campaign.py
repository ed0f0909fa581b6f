"""Zone-outage campaign on Apache Kafka in network namespaces: RPO and RTO per scenario.

Strategy. One three-zone netns environment (a Kafka node per zone, rack = zone; moto in its
own namespace) for the whole campaign; every cycle is one verified run of
tests/system/reliability/harness.run_campaign (three paced idempotent producers, one per zone,
through their zone's proxy, policy "wal") with one outage of a random zone
(tests/system/reliability/zone_faults.py). Per cycle it prints and records:

- rpo_records: acknowledged records lost (must be 0), and duplicates / reordered;
- survivors_rto_s: from the fault until the acknowledgements are back at 90 % of what the
  producers that can deliver should give (2 of 3 when a whole zone is down, 3 of 3 when only
  its agents are), over 1 s;
- p99_ms: the highest per-second p99 produce latency any producer reported from the fault
  until 5 s after the restart;
- zone_restart_s (a): from the restart until the zone's agent and proxy were ready again
  (started beside their Kafka node, they wait for it); respawns: starts tried again;
- election (a, b): once the zone is back (a: its sidecars ready; b: healed), preferred-leader
  elections move its leaders back (as auto.leader.rebalance.enable would, within 300 s by
  default); wal_return_s then counts from the last election that moved any;
- objects_for_zone (a, b, e): the WAL objects other zones' proxies wrote for the zone while
  it was out, the seconds from the fault to the last of them (how long they kept paying for
  objects the zone could not read), and how many no agent of the zone ever read;
  objects_from_zone: the same for the objects the zone's own proxy wrote for the others;
- gc: one `azsidecar gc --once` pass after the cycle (orphans older than 1 s deleted): what
  it deleted and what it left;
- link (d): the batches crossing between the zone and the others before, during and after
  the degraded window by route, and the WAL batches' median notification round trip;
- wal_return_s: per proxy of another zone, from the zone's return (a, b: the election that
  moved its leaders back; d: the link restored; e: the agent back) until its batches to the
  zone took the WAL path again, to the last; (c): for
  the cut-off zone's own proxy, from the S3 link's return until its batches to each other
  zone took the WAL path again (None: not back before the producers finished).

Scenarios:
  a   the zone's Kafka node, agent and proxy killed with -9 at once, restarted --outage-s later
  b   the zone cut off from the other zones (inter-zone and replication links down), its S3
      reachable, healed --outage-s later (use more than KRaft's 9 s broker session timeout
      to have its broker fenced and its leaders moved)
  c   the zone's link to S3 down (requests hang) for --outage-s
  d   the zone's inter-zone link degraded for --outage-s (every packet through a user-space
      wire: 40 ms +- 10 ms each way, 2 % loss, a 0.8 s stall every 3 s, resets every 4 s),
      then restored
  e   the zone's agent killed with -9, restarted --outage-s later; its broker keeps its leaders

Usage (from the repository root, as root):
  .venv/bin/python -m bench.zone_campaign --scenario a --cycles 20
  .venv/bin/python -m bench.zone_campaign --scenario e --cycles 20 --out zone-e.json
  .venv/bin/python -m bench.zone_campaign --scenario b --cycles 20 --seconds 40 --outage-s 12

With --report DIR the FinOps report (`azsidecar audit report`) runs over every cycle's audit
at the end: its "Zone episodes" section prices each outage.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from deploy.local.scenario import TopicSpec, Workload
from deploy.local.sidecar_stack import SidecarSettings
from deploy.local.zone_wire import wired_zone
from deploy.local.zones import netns_available, three_zones
from tests.system.reliability.harness import run_campaign
from tests.system.reliability.zone_faults import (
    DEGRADED_LINK,
    LeaderReturn,
    agents_gone,
    audit_batches,
    audit_records,
    collect_wal_objects,
    degraded_link,
    link_figures,
    objects_for_zone,
    p99_during,
    partition,
    s3_cut,
    survivors_recovery_s,
    wal_return_s,
    whole_zone,
)

TOPICS = (TopicSpec("orders", 6, keyed=True), TopicSpec("clicks", 6, keyed=False))
RECORD_BYTES = 100
# Producers that can deliver during the outage, of three: a whole zone down or cut off stops
# its own producer (its sidecar is gone or its leaders are fenced); S3 cut or agents gone, the
# zone's batches go direct and every producer delivers.
DELIVERING = {"a": 2, "b": 2, "c": 3, "d": 3, "e": 3}


def own_wal_return_s(batches: list[dict], zone: str, up_wall_ms: int) -> dict[str, float | None]:
    """Per other zone: seconds from `up_wall_ms` until `zone`'s own proxy sent a batch to it by
    the WAL again, when its last batch there went by the WAL too (None: not back on it)."""
    return wal_return_s(batches, zone, up_wall_ms, from_zone=True)


def cycle(env, scenario: str, rng: random.Random, rate: int, seconds: float, outage_s: float, tmp: Path,
          n: int) -> dict:
    zone = rng.choice(env.zones)
    records = int(rate * seconds)
    workload = Workload(total_bytes=3 * records * RECORD_BYTES, record_bytes=RECORD_BYTES, topics=TOPICS,
                        linger_ms=20, timeout_s=seconds + 240)
    settings = SidecarSettings(object_detail="object", wal_bucket="wal", audit_dir=tmp / "audit" / f"cycle-{n}", policy="wal",
                               extra={"audit": {"flush_seconds": 0.2}})
    fault_at = rng.uniform(0.05, 0.2)
    restart = None
    leaders = LeaderReturn()  # (a), (b): the zone's leaders moved back once it has returned
    with contextlib.ExitStack() as stack:
        if scenario == "a":
            outage, restart = whole_zone(env, zone, outage_s=outage_s, fault_at=fault_at, leaders=leaders)
        elif scenario == "b":
            outage = partition(env, zone, outage_s=outage_s, fault_at=fault_at, leaders=leaders)
        elif scenario == "c":
            outage = s3_cut(env, zone, outage_s=outage_s, fault_at=fault_at)
        elif scenario == "d":
            wire = stack.enter_context(wired_zone(zone.bridge_port or "", zone.netns, env.log_dir, DEGRADED_LINK,
                                                  seed=rng.randrange(1 << 30)))
            outage = degraded_link(wire, zone, outage_s=outage_s, fault_at=fault_at)
        else:
            outage = agents_gone(zone, outage_s=outage_s, fault_at=fault_at)
        started = time.monotonic()
        result = run_campaign(env, workload, settings, outage, name=f"zone-{scenario}-{n}", records_per_s=rate)
        wire_counts = wire.counts() if scenario == "d" else None
        leaders.join()
    v = result.verification
    row = {"cycle": n, "scenario": scenario, "zone": zone.name, "fault_at": round(fault_at, 3),
           "acknowledged": v["acknowledged"], "rpo_records": v["lost"], "duplicates": v["duplicates"],
           "reordered": v["reordered"],
           "survivors_rto_s": survivors_recovery_s(result, outage, DELIVERING[scenario], rate),
           "p99_ms": p99_during(result, outage), "peak_proxy_rss_mib": round(result.peak_proxy_rss_kib / 1024, 1),
           "peak_agent_rss_mib": round(max((v for x in result.samples for v in x["agent_rss_kib"].values()),
                                           default=0) / 1024, 1),
           "run_s": round(time.monotonic() - started, 1)}
    if restart is not None:
        row |= {"not_restarted": restart.pending, "zone_restart_s": restart.ready_s, "respawns": restart.respawns}
    if scenario in ("a", "b"):
        row |= {"election": leaders.counts, "election_error": leaders.error}
        if leaders.back_wall_ms is not None:  # from the election that moved the zone's leaders back
            row["wal_return_s"] = wal_return_s(audit_batches(settings.audit_dir), zone.name, leaders.back_wall_ms)
    if scenario != "c":
        records = audit_records(settings.audit_dir, frozenset({"wal_flush", "agent_read"}))
        row["objects_for_zone"] = objects_for_zone(records, zone.name, outage.down_wall_ms, outage.up_wall_ms)
        row["objects_from_zone"] = objects_for_zone(records, zone.name, outage.down_wall_ms, outage.up_wall_ms,
                                                    from_zone=True)
    row["gc"] = collect_wal_objects(env, "wal", settings.audit_dir, f"zone-{scenario}-{n}")
    if scenario == "d":
        row["wire"] = wire_counts
        row["link"] = link_figures(audit_batches(settings.audit_dir), zone.name, outage.down_wall_ms,
                                   outage.up_wall_ms)
        row["own_wal_return_s"] = wal_return_s(audit_batches(settings.audit_dir), zone.name, outage.up_wall_ms,
                                               from_zone=True)
    if scenario in ("d", "e"):
        row["wal_return_s"] = wal_return_s(audit_batches(settings.audit_dir), zone.name, outage.up_wall_ms)
    elif scenario == "c":
        row["wal_return_s"] = own_wal_return_s(audit_batches(settings.audit_dir), zone.name, outage.up_wall_ms)
    return row


def summary(rows: list[dict]) -> dict:
    def stats(values: list[float]) -> dict | None:
        values = [x for x in values if x is not None]
        if not values:
            return None
        return {"n": len(values), "median": round(statistics.median(values), 2), "max": round(max(values), 2)}

    returns = [x for r in rows for x in (r.get("wal_return_s") or {}).values()]
    objects = [r["objects_for_zone"] for r in rows if "objects_for_zone" in r]
    own = [r["objects_from_zone"] for r in rows if "objects_from_zone" in r]
    links = [r["link"] for r in rows if "link" in r]
    own_returns = [x for r in rows for x in (r.get("own_wal_return_s") or {}).values()]
    return {"cycles": len(rows), "records_lost": sum(r["rpo_records"] for r in rows),
            "duplicates": sum(r["duplicates"] for r in rows), "reordered": sum(r["reordered"] for r in rows),
            "survivors_rto_s": stats([r["survivors_rto_s"] for r in rows]),
            "survivors_never_recovered": sum(r["survivors_rto_s"] is None for r in rows),
            "p99_ms": stats([r["p99_ms"] for r in rows]),
            "wal_return_s": stats(returns), "wal_not_back": sum(x is None for x in returns),
            "zone_restart_s": stats([r.get("zone_restart_s") for r in rows]),
            "own_wal_return_s": stats(own_returns), "own_wal_not_back": sum(x is None for x in own_returns),
            "link": {phase: {"wal": sum(x[phase]["wal"] for x in links),
                             "fallback_direct": sum(x[phase]["fallback_direct"] for x in links),
                             "notify_rtt_p50_ms": stats([x[phase]["notify_rtt_p50_ms"] for x in links])}
                     for phase in ("before", "during", "after")} if links else None,
            "respawns": sum(r.get("respawns", 0) for r in rows),
            "objects_for_zone_out": stats([o["objects"] for o in objects]),
            "last_put_for_zone_out_s": stats([o["last_put_s"] for o in objects]),
            "unread_objects": sum(o["unread"] for o in objects),
            "objects_from_zone_out": stats([o["objects"] for o in own]),
            "last_put_from_zone_out_s": stats([o["last_put_s"] for o in own]),
            "unread_objects_from_zone_out": sum(o["unread"] for o in own),
            "gc_orphans_deleted": sum(r["gc"]["orphans_deleted"] for r in rows),
            "gc_left": sum(r["gc"]["left"] for r in rows), "gc_held": sum(r["gc"]["held"] for r in rows),
            "load_average": os.getloadavg()}


def report(audit_root: Path, out: Path) -> None:
    """`azsidecar audit report` over every cycle's audit; prints its summary lines."""
    done = subprocess.run([sys.executable, "-m", "azsidecar", "audit", "report", "--input", str(audit_root),
                           "--output", str(out)], capture_output=True, text=True, timeout=900)
    print(done.stdout, end="", flush=True)
    if done.returncode != 0:
        print(f"zone_campaign: the report exited {done.returncode}: {done.stderr[-2000:]}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=("a", "b", "c", "d", "e"), required=True)
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--rate", type=int, default=500, help="records/s per producer (3 producers)")
    parser.add_argument("--seconds", type=float, default=30.0, help="production per cycle")
    parser.add_argument("--outage-s", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None, help="write the rows and summary as JSON here too")
    parser.add_argument("--report", type=Path, default=None,
                        help="run the FinOps report over every cycle's audit into this directory at the end")
    args = parser.parse_args(argv)
    if not netns_available():
        print("zone_campaign: needs root and iproute2 (network namespaces)", file=sys.stderr)
        return 2
    if args.cycles < 1 or args.rate < 1 or args.seconds <= args.outage_s:
        print("zone_campaign: --cycles and --rate >= 1, --seconds > --outage-s", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="zone-campaign-") as tmp, \
            three_zones(mode="netns", broker="kafka", log_dir=Path(tmp) / "zones") as env:
        env.create_bucket("wal")
        print(f"zone campaign: scenario {args.scenario}, {args.cycles} cycles, seed {seed}, "
              f"{args.rate} records/s x 3 for {args.seconds:.0f} s per cycle, outage {args.outage_s:.0f} s", flush=True)
        for n in range(args.cycles):
            row = cycle(env, args.scenario, rng, args.rate, args.seconds, args.outage_s, Path(tmp), n)
            rows.append(row)
            print(json.dumps(row), flush=True)
        if args.report:
            report(Path(tmp) / "audit", args.report)
    result = {"seed": seed, "args": {k: str(v) for k, v in vars(args).items()}, "rows": rows, "summary": summary(rows)}
    print(json.dumps(result["summary"], indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    bad = result["summary"]["records_lost"] or result["summary"]["duplicates"] or result["summary"]["reordered"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
