"""The fleet scenario: many small producers and a few heavy ones, per-host sidecars vs zone gateways.

The same paced workload (bench/workload.py with records_per_s per producer) runs twice on
one ZoneEnv: once with one proxy per producer host ("sidecars"), once with one proxy per
zone that every producer of the zone connects to ("gateways"). Each run has its own agents,
topics and audit directory; both are verified record by record (exactly once, per-partition
order), metered on the zone links in netns mode, and their audit records are totalled the
way the audit's savings job counts them (planner/plan.py `audited_totals`), beside what the
planner predicts from the same records.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from deploy.local.processes import DUMMY_CREDENTIALS, free_port, stop_process
from deploy.local.scenario import (
    ADMIN_TIMEOUT_S,
    VERIFY_TIMEOUT_S,
    ScenarioError,
    Workload,
    _python,
    _run_step,
    _wait_producers,
    record_leader_zones,
    router_overrides,
    spec_for,
)
from deploy.local.sidecar_stack import (
    READY_LINES,
    READY_TIMEOUT_S,
    STOP_GRACE_S,
    SidecarSettings,
    _log_size,
    _wait_for_log_line,
    agent_addresses,
    to_toml,
    zone_config,
)
from deploy.local.zones import CrossZoneReading, Zone, ZoneEnv

MODES = ("sidecars", "gateways")


@dataclass(frozen=True)
class FleetProducer:
    name: str
    zone: int  # index into env.zones
    bytes_per_s: float


@dataclass(frozen=True)
class Fleet:
    """Who produces how fast. Defaults fit a 2-core machine in a few minutes."""

    small_per_zone: int = 2
    small_bytes_per_s: float = 150_000.0
    heavy: int = 2
    heavy_bytes_per_s: float = 1_000_000.0
    duration_s: float = 20.0
    record_bytes: int = 1000

    def __post_init__(self) -> None:
        if self.small_per_zone < 0 or self.heavy < 0 or self.small_per_zone + self.heavy == 0:
            raise ValueError("at least one producer")
        if min(self.small_bytes_per_s, self.heavy_bytes_per_s) <= 0 or self.duration_s <= 0:
            raise ValueError("rates and duration must be > 0")

    def producers(self, zones: int) -> list[FleetProducer]:
        small = [FleetProducer(f"small-z{z}-{k}", z, self.small_bytes_per_s)
                 for z in range(zones) for k in range(self.small_per_zone)]
        return small + [FleetProducer(f"heavy-{k}", k % zones, self.heavy_bytes_per_s) for k in range(self.heavy)]


@dataclass
class FleetRun:
    mode: str
    reading: CrossZoneReading
    records: int
    payload_bytes: int
    duration_s: float
    verification: Mapping[str, Any]  # the verifier's JSON answer
    audit_dir: Path
    proxies: int
    summaries: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)  # the producers' JSON summaries

    @property
    def ok(self) -> bool:
        return bool(self.verification.get("ok"))


def audit_lines(root: Path) -> Iterator[dict[str, object]]:
    for path in sorted(root.rglob("*.jsonl.gz")):
        if not path.name.startswith("."):
            with gzip.open(path, "rt") as fh:
                yield from (json.loads(line) for line in fh if line.strip())


def run_fleet(env: ZoneEnv, fleet: Fleet, mode: str, settings: SidecarSettings,
              progress: Callable[[str], None] | None = None) -> FleetRun:
    """One run of the fleet in `mode` ("sidecars" or "gateways"). Raises ScenarioError."""
    if mode not in MODES:
        raise ValueError(f"mode: one of {MODES}")
    say = progress or (lambda _m: None)
    suffix = uuid.uuid4().hex[:6]
    workload = Workload(total_bytes=fleet.record_bytes, record_bytes=fleet.record_bytes)
    topic_names = [f"{t.name}-{mode}-{suffix}" for t in workload.topics]
    base_spec = spec_for(env, workload, topic_names)  # on Kafka: the brokers' replication factor
    out_dir = env.log_dir / f"fleet-{mode}-{suffix}"
    out_dir.mkdir(parents=True)
    audit_dir = out_dir / "audit"
    # Tansu: the partition convention; Kafka: none, the router reads each leader's rack.
    settings = replace(settings, audit_dir=audit_dir,
                       partition_zones=router_overrides(env, workload)["partition_zones"])
    audit_dir.mkdir()
    first = env.zones[0]
    _run_step(env, first, _python("create-topics", "--bootstrap", first.broker_bootstrap, "--spec",
                                  json.dumps(base_spec)), ADMIN_TIMEOUT_S, f"fleet-{mode}-create-topics",
              f"fleet {mode}: creating topics")
    record_leader_zones(env, base_spec)  # on Kafka: each partition's leader zone, for producers and verifier
    producers = fleet.producers(len(env.zones))
    agents = agent_addresses(env)
    process_env = {**DUMMY_CREDENTIALS, "AZSIDECAR_NOTIFY_HMAC_KEYS": settings.hmac_key,
                   "AZSIDECAR_IMDS_ENDPOINT": "http://127.0.0.1:9", "AWS_DEFAULT_REGION": "us-east-1"}
    with contextlib.ExitStack() as stack:
        _wait_ready([_launch(env, zone, settings, agents, process_env, stack, "agent", f"fleet-{mode}-{zone.name}-agent")
                     for zone in env.zones])
        # who serves whom: per-host proxies, or one per zone
        owners = ({p.name: (p.zone, f"sc-{p.name}") for p in producers} if mode == "sidecars"
                  else {p.name: (p.zone, f"gw-{env.zones[p.zone].name}") for p in producers})
        proxy_ids = sorted(set(owners.values()))
        addresses = dict(zip((proxy_id for _, proxy_id in proxy_ids), _wait_ready([
            _launch(env, env.zones[zone_index], settings, agents, process_env, stack, "proxy",
                    f"fleet-{mode}-{proxy_id}", proxy_id) for zone_index, proxy_id in proxy_ids]), strict=True))
        say(f"fleet {mode}: {len(addresses)} proxies, {len(producers)} producers "
            f"({fleet.small_per_zone} x {fleet.small_bytes_per_s / 1e3:.0f} KB/s per zone, "
            f"{fleet.heavy} x {fleet.heavy_bytes_per_s / 1e6:.2f} MB/s) for {fleet.duration_s:.0f} s")
        meter = env.meter()
        meter.start()
        started = time.monotonic()
        procs = []
        total_records = 0
        for p in producers:
            zone = env.zones[p.zone]
            spec = {**base_spec, "records_per_s": p.bytes_per_s / fleet.record_bytes}
            nbytes = int(p.bytes_per_s * fleet.duration_s)
            total_records += nbytes // fleet.record_bytes
            out = out_dir / f"{p.name}.json"
            argv = _python("produce", "--spec", json.dumps(spec), "--producer-id", f"{mode}-{p.name}",
                           "--zone", zone.name, "--bootstraps", json.dumps({zone.name: addresses[owners[p.name][1]]}),
                           "--bytes", str(nbytes), "--out", str(out))
            procs.append((p.name, env.run_in_zone(zone, argv, log_name=f"fleet-{mode}-{suffix}-{p.name}"), out))
        _wait_producers(procs, total_records, fleet.duration_s * 10 + 120, say, f"fleet {mode}")
        reading = meter.stop()
        duration_s = time.monotonic() - started
    # proxies and agents stopped (drained, audit files closed) before verifying
    summaries = tuple(json.loads(out.read_text()) for _, _, out in procs)
    verify_out = out_dir / "verify.json"
    try:
        env.run_to_completion(first, _python("verify", "--bootstrap", first.broker_bootstrap, "--out", str(verify_out),
                                             "--summaries", *[str(out) for _, _, out in procs]),
                              VERIFY_TIMEOUT_S, log_name=f"fleet-{mode}-{suffix}-verify")
        verification = json.loads(verify_out.read_text())
    except Exception as exc:  # noqa: BLE001 - any failure to verify is reported with the log
        raise ScenarioError(f"fleet {mode}: verification failed to run: {exc}") from exc
    return FleetRun(mode, reading, sum(s["records"] for s in summaries), sum(s["payload_bytes"] for s in summaries),
                    duration_s, verification, audit_dir, len(addresses), summaries)


@dataclass(frozen=True)
class _Starting:
    """A process launched and not yet known to be ready (_launch, then _wait_ready)."""

    proc: Any
    ready: str
    what: str
    offset: int
    address: str


def _launch(env: ZoneEnv, zone: Zone, settings: SidecarSettings, agents: dict[str, str], process_env: dict[str, str],
            stack: contextlib.ExitStack, role: str, log_name: str, proxy_id: str = "") -> _Starting:
    """Start one agent or proxy in `zone`, not waiting for it; registered in `stack` to stop
    (drain) on exit. Several start side by side: each spends a second or two importing."""
    config = zone_config(env, zone, settings, agents)
    if role == "proxy":
        port = free_port()
        config["proxy"] = {"listen_host": zone.sidecar_host, "listen_port": port, "proxy_id": proxy_id}
        address = f"{zone.sidecar_host}:{port}"
    else:
        address = agents[zone.name]
    path = env.log_dir / f"{log_name}.toml"
    path.write_text(to_toml(config))
    offset = _log_size(env, log_name)
    proc = env.run_in_zone(zone, [sys.executable, "-m", "azsidecar", role, "--config", str(path)], process_env,
                           log_name=log_name)
    stack.callback(stop_process, proc, STOP_GRACE_S)
    return _Starting(proc, READY_LINES[role], f"{role} {log_name}", offset, address)


def _wait_ready(starting: list[_Starting]) -> list[str]:
    """Wait for each launched process's ready line (READY_TIMEOUT_S each); their addresses."""
    for s in starting:
        _wait_for_log_line(s.proc, s.proc.log_path, s.ready, READY_TIMEOUT_S, s.what, s.offset)
    return [s.address for s in starting]
