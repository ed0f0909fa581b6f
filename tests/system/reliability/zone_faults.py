"""Zone outages for the netns Kafka scenarios (tests/system/reliability/test_zone_outages.py) and
their campaign (bench/zone_campaign.py): when to break a zone, how to bring it back, and what
the audit says about the routes to it afterwards."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy.local.processes import DUMMY_CREDENTIALS
from deploy.local.sidecar_stack import to_toml
from deploy.local.zone_wire import LinkShape, WiredZone
from deploy.local.zones import S3_IF, Zone, ZoneEnv
from tests.system.reliability.harness import CampaignResult, TickContext


class Outage:
    """An on_tick: once `fault_at` of all records are acknowledged, `down(ctx)`; `outage_s`
    later, `up(ctx)`; then `after_up(ctx)` every tick (a supervisor's retries). Records the
    moments (monotonic and wall clock) and the acknowledged count at each."""

    def __init__(self, down: Callable[[TickContext], None], up: Callable[[TickContext], None], *,
                 outage_s: float, fault_at: float, after_up: Callable[[TickContext], None] | None = None) -> None:
        self.down, self.up, self.after_up = down, up, after_up
        self.outage_s, self.fault_at = outage_s, fault_at
        self.down_at: float | None = None
        self.up_at: float | None = None
        self.down_wall_ms = self.up_wall_ms = 0  # audit records carry wall-clock ts_ms
        self.acked_down = self.acked_up = 0
        self.started: float | None = None

    def __call__(self, ctx: TickContext) -> None:
        self.started = ctx.started
        if self.down_at is None and ctx.acked_fraction >= self.fault_at:
            self.down_at, self.acked_down, self.down_wall_ms = time.monotonic(), ctx.acked, int(time.time() * 1000)
            self.down(ctx)
        elif self.down_at is not None and self.up_at is None and time.monotonic() - self.down_at >= self.outage_s:
            self.acked_up = ctx.acked
            self.up(ctx)
            self.up_at, self.up_wall_ms = time.monotonic(), int(time.time() * 1000)
        elif self.up_at is not None and self.after_up is not None:
            self.after_up(ctx)


ELECTION_TIMEOUT_S = 90.0  # the returned broker catches up (joins the ISR) before its leaders can move back
ELECTION_RETRY_S = 1.0


@dataclass
class LeaderReturn:
    """Preferred-leader elections that move a returned zone's leaders back, as Kafka's
    auto.leader.rebalance.enable does within leader.imbalance.check.interval.seconds (300 s by
    default; the local cluster runs without it, so the moment is the scenario's). Started once
    (`start`), in a thread: each election is an admin round trip of a few seconds."""

    back_wall_ms: int | None = None  # the last election that moved any leader (wall clock)
    counts: dict[str, int] | None = None  # the last election's kafka_admin.elect_preferred counts
    error: str | None = None
    _thread: threading.Thread | None = None

    def start(self, env: ZoneEnv) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._elect_until_back, args=(env,), daemon=True)
            self._thread.start()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join(ELECTION_TIMEOUT_S + 60)

    def _elect_until_back(self, env: ZoneEnv) -> None:
        """Elections until no partition's preferred replica is still out of sync (bounded)."""
        assert env.kafka is not None
        deadline = time.monotonic() + ELECTION_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                counts = env.kafka.elect_preferred()
            except Exception as exc:  # noqa: BLE001 - reported with the cycle, not raised in a thread
                self.error = str(exc)[:300]
            else:
                self.counts = counts
                if counts["elected"]:
                    self.back_wall_ms = int(time.time() * 1000)
                if not counts["not_available"]:
                    return
            time.sleep(ELECTION_RETRY_S)  # paced retries while the broker catches up, bounded by the deadline


@dataclass
class ZoneRestart:
    """How the killed zone's sidecars came back (scenario a): still to be ready, when both were
    (seconds from the restart), and how many starts had to be tried again (a process that exited)."""

    pending: list[str] = field(default_factory=lambda: ["agent", "proxy"])
    ready_s: float | None = None
    respawns: int = 0


def whole_zone(env: ZoneEnv, zone: Zone, *, outage_s: float, fault_at: float,
               leaders: LeaderReturn | None = None) -> tuple[Outage, ZoneRestart]:
    """(a) the zone's Kafka node, agent and proxy killed with -9 together, then restarted all at
    once: the node, and the agent and proxy beside it, which wait for their zone's broker by
    themselves (upstream.startup_wait_s). A process that still exits is started again on the
    next tick, as a supervisor would. `leaders`: started once both are ready. Returns the
    outage and the restart's progress."""
    node = env.kafka.node_of_rack(zone.name)
    restart = ZoneRestart()

    def down(ctx: TickContext) -> None:
        env.kafka.kill_node(node.node_id)
        ctx.fleet.kill("agent", zone)
        ctx.fleet.kill("proxy", zone)

    def up(ctx: TickContext) -> None:
        env.kafka.start_node(node.node_id, wait=False)
        ctx.fleet.spawn("agent", zone)
        ctx.fleet.spawn("proxy", zone)

    def watch(ctx: TickContext) -> None:
        for role in list(restart.pending):
            state = ctx.fleet.state(role, zone)
            if state == "ready":
                restart.pending.remove(role)
            elif state == "exited":
                restart.respawns += 1
                ctx.fleet.spawn(role, zone)
        if not restart.pending and restart.ready_s is None and outage.up_at is not None:
            restart.ready_s = round(time.monotonic() - outage.up_at, 2)
            if leaders is not None:
                leaders.start(env)

    outage = Outage(down, up, outage_s=outage_s, fault_at=fault_at, after_up=watch)
    return outage, restart


def agents_gone(zone: Zone, *, outage_s: float, fault_at: float) -> Outage:
    """(e) the zone's agent killed with -9 and restarted outage_s later; its broker stays."""
    return Outage(lambda ctx: ctx.fleet.kill("agent", zone), lambda ctx: ctx.fleet.start_agent(zone),
                  outage_s=outage_s, fault_at=fault_at)


def audit_records(audit_dir: Path, kinds: frozenset[str]) -> list[dict[str, Any]]:
    """Every record of these kinds in the closed audit files, oldest first."""
    out: list[dict[str, Any]] = []
    for path in sorted(audit_dir.rglob("*.jsonl.gz")):
        if not path.name.startswith("."):
            with gzip.open(path, "rt") as f:
                out += [r for r in map(json.loads, f) if r["kind"] in kinds]
    return sorted(out, key=lambda r: r["ts_ms"])


def audit_batches(audit_dir: Path) -> list[dict[str, Any]]:
    """Every produce_batch record in the closed audit files, oldest first."""
    return audit_records(audit_dir, frozenset({"produce_batch"}))


def objects_for_zone(records: list[dict[str, Any]], zone: str, down_wall_ms: int, up_wall_ms: int,
                     from_zone: bool = False) -> dict[str, Any]:
    """The WAL objects other zones' proxies wrote for `zone` while it was out (`from_zone`: the
    objects `zone`'s own proxy wrote for the other zones meanwhile): durable PUTs between
    `down_wall_ms` and `up_wall_ms` (wal_flush records), and what became of them (agent_read
    records of the destination zones' agents):

    - objects: how many; put_requests: what their PUTs cost in requests;
    - last_put_s: seconds from the fault to the last of them (how long the proxies kept
      paying for objects that could not be read; None: none written);
    - unread: how many some destination zone's agents never read their share of (those
      batches reached the leader by another route; the objects are orphans for `azsidecar gc`).
    """
    read = {(r["key"], r["zone"]) for r in records if r["kind"] == "agent_read"}

    def ours(r: dict[str, Any]) -> bool:
        dests = r["zones"].split(",")
        return (r["zone"] == zone and any(d != zone for d in dests)) if from_zone else \
            (r["zone"] != zone and zone in dests)

    written = [r for r in records if r["kind"] == "wal_flush" and r["ok"] and down_wall_ms <= r["ts_ms"] <= up_wall_ms
               and ours(r)]

    def unread(r: dict[str, Any]) -> bool:
        dests = [d for d in r["zones"].split(",") if d != zone] if from_zone else [zone]
        return any((r["key"], d) not in read for d in dests)

    return {"objects": len(written), "put_requests": sum(r["put_requests"] for r in written),
            "last_put_s": round((written[-1]["ts_ms"] - down_wall_ms) / 1000, 2) if written else None,
            "unread": sum(map(unread, written))}


def wal_return_s(batches: list[dict[str, Any]], zone: str, up_wall_ms: int,
                 from_zone: bool = False) -> dict[str, float | None]:
    """Per proxy of another zone (`from_zone`: per leader zone of `zone`'s own proxy): seconds
    from `up_wall_ms` to its first WAL batch to `zone` (from `zone`) after it, when its last
    such batch went by the WAL too (None: not back on it)."""
    sender, leader = ("zone", "leader_zone") if not from_zone else ("leader_zone", "zone")
    out: dict[str, float | None] = {}
    for other in sorted({b[sender] for b in batches if b[leader] == zone and b[sender] != zone}):
        after = [b for b in batches if b[sender] == other and b[leader] == zone and b["ts_ms"] > up_wall_ms]
        if not after or after[-1]["route"] != "wal":
            out[other] = None
            continue
        out[other] = (next(b["ts_ms"] for b in after if b["route"] == "wal") - up_wall_ms) / 1000
    return out


def survivors_recovery_s(result: CampaignResult, outage: Outage, share: float, rate: float,
                         window_s: float = 1.0, fraction: float = 0.9) -> float | None:
    """Seconds from the fault until the acknowledgements (all producers' together) come at
    `fraction` of `share` x `rate` again over a `window_s` window: the surviving producers'
    normal throughput (share: the producers that can deliver, 2 when one zone's cannot, 3 when all can;
    rate: records/s per producer).
    None if that never happened before the producers finished."""
    if outage.down_at is None or outage.started is None:
        return None
    down_t = outage.down_at - outage.started
    samples = [s for s in result.samples if s["t_s"] >= down_t]
    for i, s in enumerate(samples):
        later = [x for x in samples[i:] if x["t_s"] - s["t_s"] >= window_s]
        if not later:
            return None
        x = later[0]
        if (x["acked"] - s["acked"]) / (x["t_s"] - s["t_s"]) >= fraction * share * rate:
            return round(s["t_s"] - down_t, 2)
    return None


def p99_during(result: CampaignResult, outage: Outage) -> float | None:
    """The highest per-second p99 produce latency (ms, any producer) between fault and recovery."""
    if outage.down_at is None or outage.started is None:
        return None
    down_t = outage.down_at - outage.started
    up_t = (outage.up_at - outage.started) if outage.up_at else float("inf")
    values = [s["lat_p99_ms"] for s in result.samples if down_t <= s["t_s"] <= up_t + 5 and s["lat_p99_ms"]]
    return max(values) if values else None


def s3_cut(env: ZoneEnv, zone: Zone, *, outage_s: float, fault_at: float) -> Outage:
    """(c) the zone's link to S3 (its `s3link` veth) taken down for outage_s, then up again:
    S3 unreachable from that zone only (packets dropped, so requests hang rather than fail)."""
    def link(state: str) -> Callable[[TickContext], None]:
        def act(ctx: TickContext) -> None:
            subprocess.run(["ip", "-n", zone.netns or "", "link", "set", S3_IF, state], check=True, timeout=10)
            ctx.fleet.events.append((time.monotonic(), f"s3link {state} {zone.name}"))
        return act

    return Outage(link("down"), link("up"), outage_s=outage_s, fault_at=fault_at)


def partition(env: ZoneEnv, zone: Zone, *, outage_s: float, fault_at: float,
              leaders: LeaderReturn | None = None) -> Outage:
    """(b) the zone cut off from the other zones: its inter-zone bridge port and its Kafka
    replication port taken down (root namespace ends of its veths) for outage_s, then up.
    Its own S3 link stays: the zone still reaches S3. `leaders`: started at the heal."""
    ports = [p for p in (zone.bridge_port, zone.replication_port) if p]

    def link(state: str) -> Callable[[TickContext], None]:
        def act(ctx: TickContext) -> None:
            for port in ports:
                subprocess.run(["ip", "link", "set", port, state], check=True, timeout=10)
            ctx.fleet.events.append((time.monotonic(), f"partition {'heal' if state == 'up' else 'cut'} {zone.name}"))
        return act

    return Outage(link("down"), link("up"), outage_s=outage_s, fault_at=fault_at,
                  after_up=(lambda ctx: leaders.start(env)) if leaders is not None else None)


GC_SUMMARY = re.compile(r"gc: scanned (\d+) objects, deleted (\d+) applied and (\d+) orphans, (\d+) orphans, "
                        r"(\d+) pending")


def gc_summary(output: str) -> dict[str, int]:
    """The counts of `azsidecar gc`'s summary line: scanned, deleted (all zones applied),
    orphans_deleted, orphans (reported, kept), pending, held (lines HELD), and left (not deleted).
    Raises ValueError without a summary line."""
    match = GC_SUMMARY.search(output)
    if match is None:
        raise ValueError(f"no gc summary line in: {output[-500:]!r}")
    scanned, deleted, orphans_deleted, orphans, pending = map(int, match.groups())
    return {"scanned": scanned, "deleted": deleted, "orphans_deleted": orphans_deleted, "orphans": orphans,
            "pending": pending, "held": output.count("\nHELD ") + output.startswith("HELD "),
            "left": scanned - deleted - orphans_deleted}


def collect_wal_objects(env: ZoneEnv, bucket: str, audit_dir: Path, name: str,
                        max_orphan_age_s: float = 1.0, timeout_s: float = 120.0) -> dict[str, int]:
    """One `azsidecar gc --once` pass over the WAL bucket from beside S3, deleting objects every
    zone applied and orphans older than `max_orphan_age_s` (objects no agent of some zone will
    read: written for a zone that was out). Its S3 requests go to `audit_dir` as the gc's
    s3_request records. Returns gc_summary of its output. Raises RuntimeError if it fails."""
    config = env.log_dir / f"{name}-gc.toml"
    config.write_text(to_toml({"zone": env.zones[0].name,
                               "wal": {"bucket": bucket, "region": "us-east-1", "endpoint_url": env.s3_local_endpoint},
                               "audit": {"output": str(audit_dir)}}))
    log_name = f"{name}-gc"
    proc = env.run_beside_s3([sys.executable, "-m", "azsidecar", "gc", "--once", "--config", str(config),
                              "--max-orphan-age-s", str(max_orphan_age_s)],
                             {**DUMMY_CREDENTIALS, "AWS_DEFAULT_REGION": "us-east-1"}, log_name=log_name)
    try:
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)
        raise RuntimeError(f"azsidecar gc did not finish within {timeout_s:.0f} s") from None
    output = proc.log_path.read_text(errors="replace")
    if code != 0:
        raise RuntimeError(f"azsidecar gc exited {code}: {output[-2000:]}")
    return gc_summary(output)


# (d): 40 ms +- 10 ms each way, 2 % of frames lost, the link stalled 0.8 s every 3 s, the
# zone's cross-zone connections reset every 4 s: a slow, lossy, flapping path that still works.
DEGRADED_LINK = LinkShape(latency_s=0.040, jitter_s=0.010, loss=0.02, stall_every_s=3.0, stall_s=0.8,
                          reset_every_s=4.0)


def degraded_link(wire: WiredZone, zone: Zone, *, outage_s: float, fault_at: float) -> Outage:
    """(d) the zone's inter-zone link degraded (see deploy/local/zone_wire.py; the wire must be
    running, healthy, from before the producers) for outage_s, then restored."""
    def act(state: str) -> Callable[[TickContext], None]:
        def signal_wire(ctx: TickContext) -> None:
            (wire.degrade if state == "degraded" else wire.restore)()
            ctx.fleet.events.append((time.monotonic(), f"link {state} {zone.name}"))
        return signal_wire

    return Outage(act("degraded"), act("restored"), outage_s=outage_s, fault_at=fault_at)


def link_figures(batches: list[dict[str, Any]], zone: str, down_wall_ms: int, up_wall_ms: int) -> dict[str, Any]:
    """(d) the batches crossing between `zone` and the others, before, during and after the
    degraded window: how many took each route (wal, or direct because the zone's WAL path was
    unhealthy) and the WAL batches' median notification round trip (ms)."""
    def phase(b: dict[str, Any]) -> str:
        return "before" if b["ts_ms"] < down_wall_ms else "during" if b["ts_ms"] <= up_wall_ms else "after"

    crossing = [b for b in batches if zone in (b["zone"], b["leader_zone"]) and b["zone"] != b["leader_zone"]]
    out: dict[str, Any] = {}
    for name in ("before", "during", "after"):
        mine = [b for b in crossing if phase(b) == name]
        rtts = sorted(b["notify_rtt_ms"] for b in mine if b["route"] == "wal" and b.get("notify_rtt_ms", -1) >= 0)
        out[name] = {"wal": sum(b["route"] == "wal" for b in mine),
                     "fallback_direct": sum(b["reason"] == "zone unhealthy, fallback direct" for b in mine),
                     "notify_rtt_p50_ms": rtts[len(rtts) // 2] if rtts else None}
    return out
