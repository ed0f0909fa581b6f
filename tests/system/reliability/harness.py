"""Fault campaigns over the three local zones: run the idempotent workload, break things, check.

Strategy. deploy.local.scenario.run_sidecar treats any producer failure as fatal and its
verifier wants every record sent exactly once; a fault campaign needs more leeway and
more control, so this module drives the same pieces itself:

- `Fleet` starts each zone's agent and proxy (configs from deploy.local.sidecar_stack)
  and can kill -9, stop and restart either on the same address, sample the proxies'
  resident memory, and finally stop everything gracefully (proxies drain first).
- `run_campaign` creates topics, starts bench/workload.py producers in every zone (their
  message.timeout.ms gives them two minutes to ride through an outage), calls the
  caller's `on_tick(ctx)` every TICK_S while they run (that is where faults happen),
  tolerates producers that exit with delivery errors, stops the fleet and verifies.
- `verify_acknowledged` reads every partition back and, per (partition, producer),
  rebuilds the exact sequence numbers the producer sent there (the workload's partition
  choice is deterministic). Every acknowledged record must be present exactly once, in
  send order, byte for byte; a record whose delivery failed (the summary lists them) may
  be present at most once. Anything else is a problem: lost, duplicate, reordered,
  corrupt or foreign.

Used by tests/system/reliability (short runs) and bench/campaign.py (many cycles, soak).
"""

from __future__ import annotations

import contextlib
import gzip
import importlib.util
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy.local.processes import DUMMY_CREDENTIALS, stop_process
from deploy.local.scenario import WORKLOAD_SCRIPT, Workload, record_leader_zones, spec_for
from deploy.local.sidecar_stack import (
    READY_LINES,
    SidecarSettings,
    _wait_for_log_line,
    agent_addresses,
    to_toml,
    zone_config,
)
from deploy.local.zones import Zone, ZoneEnv

TICK_S = 0.2  # how often on_tick runs and memory is sampled while producers run
READY_TIMEOUT_S = 120.0  # a proxy or agent (re)start: imports plus binding, on a loaded 2-core host
STOP_GRACE_S = 20.0  # a proxy drains in-flight requests and the WAL writer flushes (S3 faults slow it)
ADMIN_TIMEOUT_S = 60.0
UNTIL_TIMEOUT_S = 60.0  # how long a campaign waits after its producers for what the test waits on (until)
VERIFY_IDLE_TIMEOUT_S = 30.0  # no new record for this long while acknowledged ones are missing: give up
VERIFY_MIN_S = 300.0  # reading back a short run
VERIFY_MIN_RECORDS_PER_S = 200  # Tansu serves tiny paced batches slowly: allow this rate at least
DRAIN_TIMEOUT_S = 3.0  # past the expected end, an empty poll this long means the log has no more
MAX_PROBLEMS = 30  # the first few problems say enough


def _load_workload_module():
    spec = importlib.util.spec_from_file_location("azsidecar_bench_workload", WORKLOAD_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


workload_module = _load_workload_module()


def rss_kib(pid: int) -> int | None:
    """Resident set size of a process, KiB (None once it has exited)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


class Fleet:
    """Agents and proxies of every zone as real processes, restartable on the same addresses."""

    def __init__(self, env: ZoneEnv, settings: SidecarSettings, agents: Mapping[str, str] | None = None) -> None:
        """agents: each zone's agent listen address (default: fresh ones from agent_addresses)."""
        self.env = env
        self.settings = settings
        settings.audit_dir.mkdir(parents=True, exist_ok=True)
        agents = dict(agents) if agents is not None else agent_addresses(env)
        self.configs: dict[str, Path] = {}
        for zone in env.zones:
            path = env.log_dir / f"{zone.name}-sidecar-{uuid.uuid4().hex[:6]}.toml"
            path.write_text(to_toml(zone_config(env, zone, settings, agents)))
            self.configs[zone.name] = path
        self.process_env = {**DUMMY_CREDENTIALS, "AZSIDECAR_NOTIFY_HMAC_KEYS": settings.hmac_key,
                            "AZSIDECAR_IMDS_ENDPOINT": "http://127.0.0.1:9", "AWS_DEFAULT_REGION": "us-east-1"}
        self.proxies: dict[str, subprocess.Popen] = {}
        self.agents: dict[str, subprocess.Popen] = {}
        self.events: list[tuple[float, str]] = []  # (monotonic time, what happened)
        self._offsets: dict[int, int] = {}  # pid of a spawned process -> where its log's new lines begin

    def _spawn(self, zone: Zone, role: str) -> tuple[subprocess.Popen, int]:
        """Start the zone's proxy or agent; (the process, where its log's new lines begin)."""
        log_name = f"{zone.name}-{role}"
        log_path = self.env.log_dir / f"{log_name}.log"
        offset = log_path.stat().st_size if log_path.exists() else 0
        proc = self.env.run_in_zone(zone, [sys.executable, "-m", "azsidecar", role, "--config",
                                           str(self.configs[zone.name])], self.process_env, log_name=log_name)
        return proc, offset

    def _started(self, role: str, zones: Sequence[Zone]) -> None:
        """Start `role` in every zone at once, then wait for each to be ready (one start-up
        after another cost ~1 s of interpreter start and imports each)."""
        ready = READY_LINES[role]
        spawned = [(zone, *self._spawn(zone, role)) for zone in zones]
        for zone, proc, _offset in spawned:
            (self.agents if role == "agent" else self.proxies)[zone.name] = proc
        for zone, proc, offset in spawned:
            _wait_for_log_line(proc, proc.log_path, ready, READY_TIMEOUT_S, f"{role} of {zone.name}", offset)
            self.events.append((time.monotonic(), f"start {role} {zone.name}"))

    def spawn(self, role: str, zone: Zone) -> None:
        """Start the zone's proxy or agent without waiting for it (see `state`)."""
        proc, offset = self._spawn(zone, role)
        (self.agents if role == "agent" else self.proxies)[zone.name] = proc
        self._offsets[proc.pid] = offset
        self.events.append((time.monotonic(), f"spawn {role} {zone.name}"))

    def state(self, role: str, zone: Zone) -> str:
        """"ready" (its ready line is in the log since it was spawned), "exited" or "starting"."""
        proc = (self.agents if role == "agent" else self.proxies)[zone.name]
        offset = self._offsets.get(proc.pid, 0)
        text = proc.log_path.read_bytes()[offset:].decode(errors="replace") if proc.log_path.exists() else ""
        if READY_LINES[role] in text:
            return "ready"
        return "exited" if proc.poll() is not None else "starting"

    def start_agent(self, zone: Zone) -> None:
        """Start (or restart) the zone's agent. Raises RuntimeError if it does not come up."""
        self._started("agent", [zone])

    def start_proxy(self, zone: Zone) -> None:
        """Start (or restart) the zone's proxy. Raises RuntimeError if it does not come up."""
        self._started("proxy", [zone])

    def start_all(self) -> None:
        """Every zone's agent, then every zone's proxy (a proxy's first notification finds its agent)."""
        self._started("agent", self.env.zones)
        self._started("proxy", self.env.zones)

    def kill(self, role: str, zone: Zone) -> None:
        """kill -9 the zone's proxy or agent and reap it."""
        proc = (self.proxies if role == "proxy" else self.agents)[zone.name]
        proc.kill()
        proc.wait(timeout=10)
        self.events.append((time.monotonic(), f"kill -9 {role} {zone.name}"))

    def proxy_rss_kib(self) -> dict[str, int]:
        return self.rss_kib("proxy")

    def rss_kib(self, role: str) -> dict[str, int]:
        """Resident set size (KiB) of each zone's running proxy or agent."""
        out = {}
        for name, proc in (self.proxies if role == "proxy" else self.agents).items():
            value = rss_kib(proc.pid) if proc.poll() is None else None
            if value is not None:
                out[name] = value
        return out

    def stop_all(self) -> None:
        """Proxies first (they drain into the WAL and notify the agents), then agents."""
        for proc in self.proxies.values():
            stop_process(proc, STOP_GRACE_S)
        for proc in self.agents.values():
            stop_process(proc, STOP_GRACE_S)


@dataclass
class TickContext:
    """What on_tick sees: the fleet, the environment and the producers' progress."""

    env: ZoneEnv
    fleet: Fleet
    started: float
    total_records: int
    acked: int = 0
    sent: int = 0
    errors: int = 0
    state: dict = field(default_factory=dict)  # on_tick's own memory between calls

    @property
    def acked_fraction(self) -> float:
        return self.acked / self.total_records if self.total_records else 1.0

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started


@dataclass(frozen=True)
class CampaignResult:
    name: str
    verification: Mapping[str, Any]
    producer_exit_codes: Mapping[str, int | None]
    producer_errors: Mapping[str, str | None]  # first delivery error per producer
    producer_fatal: Mapping[str, str]  # producers that died without a summary -> their fatal log line
    peak_proxy_rss_kib: int
    samples: tuple[Mapping[str, Any], ...]  # per tick: t_s, proxy and agent rss per zone, acked, latency
    events: tuple[tuple[float, str], ...]  # (seconds since start, what happened)
    duration_s: float
    out_dir: Path
    acked_by_zone: Mapping[str, int] = field(default_factory=dict)  # records acknowledged to each zone's producers

    @property
    def ok(self) -> bool:
        return bool(self.verification["ok"])


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def run_campaign(env: ZoneEnv, workload: Workload, settings: SidecarSettings,
                 on_tick: Callable[[TickContext], None] = lambda ctx: None, name: str = "campaign",
                 records_per_s: float | None = None, message_timeout_ms: int = 120_000,
                 log: Callable[[str], None] | None = None, through_sidecars: bool = True,
                 agents: Mapping[str, str] | None = None, until: Callable[[], bool] | None = None,
                 until_timeout_s: float = UNTIL_TIMEOUT_S) -> CampaignResult:
    """One workload run with faults from on_tick; verified with verify_acknowledged.

    through_sidecars=False is the control: no fleet, each producer writes straight to the
    leader zone's broker (as deploy.local.scenario.run_baseline), under the same faults.
    agents: the agents' listen addresses per zone (to put notify_faults in front of them).
    until: once the producers are done, the ticks go on (the fleet still up) until it holds or
    until_timeout_s has passed: a restart the test checks is waited for by its readiness, not
    by how long the producers happened to run.
    Producers exiting non-zero (delivery errors) are tolerated and reported. Raises
    RuntimeError when the fleet cannot start or a producer does not finish within
    workload.timeout_s (it is killed first).
    """
    suffix = uuid.uuid4().hex[:6]
    topic_names = [f"{t.name}-{name}-{suffix}" for t in workload.topics]
    spec = spec_for(env, workload, topic_names)
    spec["message_timeout_ms"] = message_timeout_ms
    if records_per_s:
        spec["records_per_s"] = records_per_s
    out_dir = env.log_dir / f"{name}-{suffix}"
    out_dir.mkdir(parents=True)
    first = env.zones[0]
    code = env.run_to_completion(first, [sys.executable, str(WORKLOAD_SCRIPT), "create-topics", "--bootstrap",
                                         first.broker_bootstrap, "--spec", json.dumps(spec)],
                                 ADMIN_TIMEOUT_S, log_name=f"{name}-{suffix}-create-topics")
    if code != 0:
        raise RuntimeError(f"{name}: creating topics exited {code}")
    record_leader_zones(env, spec)
    producers_n = len(env.zones) * workload.producers_per_zone
    share_bytes = workload.total_bytes // producers_n
    total_records = producers_n * (share_bytes // workload.record_bytes)
    fleet = Fleet(env, settings, agents)
    samples: list[dict] = []
    procs: list[tuple[str, subprocess.Popen, Path]] = []
    started = time.monotonic()
    try:
        if through_sidecars:
            fleet.start_all()
        leaders = ({env.zones[0].name: env.cluster_bootstrap} if env.kafka is not None
                   else {z.name: z.broker_bootstrap for z in env.zones})
        for zone in env.zones:
            for k in range(workload.producers_per_zone):
                pid = f"{name}-z{zone.index}-p{k}"
                out = out_dir / f"{pid}.json"
                argv = [sys.executable, str(WORKLOAD_SCRIPT), "produce", "--spec", json.dumps(spec),
                        "--producer-id", pid, "--zone", zone.name, "--bootstraps",
                        json.dumps({zone.name: zone.sidecar_bootstrap} if through_sidecars else leaders),
                        "--bytes", str(share_bytes),
                        "--out", str(out)]
                procs.append((pid, env.run_in_zone(zone, argv, log_name=f"{name}-{suffix}-{pid}"), out))
        # Fault moments count from the producers' start, not the fleet's.
        ctx = TickContext(env=env, fleet=fleet, started=time.monotonic(), total_records=total_records)
        deadline = started + workload.timeout_s
        while any(p.poll() is None for _, p, _ in procs):
            if time.monotonic() > deadline:
                for _, p, _ in procs:
                    p.kill()
                raise RuntimeError(f"{name}: producers still running after {workload.timeout_s}s")
            progress = [_read_json(out.with_suffix(".progress")) or {} for _, _, out in procs]
            ctx.acked = sum(p.get("acked", 0) for p in progress)
            ctx.sent = sum(p.get("sent", 0) for p in progress)
            ctx.errors = sum(p.get("errors", 0) for p in progress)
            rss = fleet.proxy_rss_kib()
            p99s = [p["lat_p99_ms"] for p in progress if "lat_p99_ms" in p]
            p50s = [p["lat_p50_ms"] for p in progress if "lat_p50_ms" in p]
            maxes = [p["lat_max_ms"] for p in progress if "lat_max_ms" in p]
            samples.append({"t_s": round(ctx.elapsed_s, 2), "rss_kib": rss, "agent_rss_kib": fleet.rss_kib("agent"),
                            "acked": ctx.acked,
                            "lat_p50_ms": max(p50s) if p50s else None, "lat_p99_ms": max(p99s) if p99s else None,
                            "lat_max_ms": max(maxes) if maxes else None})
            on_tick(ctx)
            time.sleep(TICK_S)  # the sampling period; producers run on their own
        until_deadline = time.monotonic() + until_timeout_s
        while until is not None and not until() and time.monotonic() < until_deadline:
            on_tick(ctx)
            time.sleep(TICK_S)  # polled: the processes become ready on their own
        if log is not None:
            log(f"{name}: producers done in {time.monotonic() - started:.1f}s; stopping the fleet")
    finally:
        fleet.stop_all()
    duration_s = time.monotonic() - started
    summaries = {pid: _read_json(out) for pid, _, out in procs}
    missing = [pid for pid, s in summaries.items() if s is None]
    # A producer without a summary died (e.g. librdkafka's fatal idempotence error): which of
    # its records were acknowledged is unknown, so its records are counted, not judged.
    fatal = {pid: _fatal_line(p.log_path) for pid, p, _ in procs if pid in missing}  # type: ignore[attr-defined]
    present = [s for s in summaries.values() if s is not None]
    if env.mode == "netns":  # the brokers are reachable from the zones only
        verification = _verify_in_zone(env, first, spec, workload.record_bytes, present, missing, out_dir)
    else:
        verification = verify_acknowledged(first.broker_bootstrap, spec, workload.record_bytes, present,
                                           unknown_producers=missing)
    if missing:
        verification = {**verification, "ok": False,
                        "problems": [*verification["problems"], f"producers died without a summary: {fatal}"]}
    (out_dir / "verification.json").write_text(json.dumps(verification, indent=1))
    (out_dir / "events.json").write_text(json.dumps([(round(t - started, 2), what) for t, what in fleet.events]))
    peak = max((v for s in samples for v in s["rss_kib"].values()), default=0)
    return CampaignResult(
        name=name, verification=verification,
        producer_exit_codes={pid: p.returncode for pid, p, _ in procs},
        producer_errors={pid: (s or {}).get("first_error") for pid, s in summaries.items()},
        producer_fatal=fatal,
        peak_proxy_rss_kib=peak, samples=tuple(samples),
        events=tuple((round(t - started, 2), what) for t, what in fleet.events), duration_s=duration_s,
        out_dir=out_dir, acked_by_zone=_acked_by_zone(env, procs, summaries))


def _verify_in_zone(env: ZoneEnv, zone: Zone, spec: Mapping[str, Any], record_bytes: int, summaries: list[dict],
                    missing: list[str], out_dir: Path) -> dict[str, Any]:
    """verify_acknowledged in the zone's namespace (tests/system/reliability/verify_in_zone.py)."""
    args, result = out_dir / "verify-args.json", out_dir / "verify-result.json"
    args.write_text(json.dumps({"bootstrap": zone.broker_bootstrap, "spec": spec, "record_bytes": record_bytes,
                                "summaries": summaries, "unknown_producers": missing}))
    code = env.run_to_completion(zone, [sys.executable, "-m", "tests.system.reliability.verify_in_zone", str(args),
                                        str(result)], VERIFY_MIN_S + 60, log_name=f"{out_dir.name}-verify")
    if code != 0:
        raise RuntimeError(f"verification in {zone.name} exited {code} (log {out_dir.name}-verify.log)")
    return json.loads(result.read_text())


def _acked_by_zone(env: ZoneEnv, procs: Sequence[tuple[str, subprocess.Popen, Path]],
                   summaries: Mapping[str, dict | None]) -> dict[str, int]:
    """Records acknowledged to the producers of each zone (producer ids are '<name>-z<index>-p<k>')."""
    out = {zone.name: 0 for zone in env.zones}
    for pid, _, _ in procs:
        s = summaries.get(pid)
        if s is None:
            continue
        index = int(pid.rsplit("-z", 1)[1].split("-p", 1)[0])
        out[env.zones[index].name] += s["records"] - len(s.get("failed_records", []))
    return out


def audited_produce_records(audit_dir: Path) -> dict[str, Any]:
    """What the audit under audit_dir says the proxies answered: records of produce_batch
    records with error_code 0 per proxy zone, torn_tail drops, and in-progress files left.
    Only closed files count (as the Spark jobs read them)."""
    ok_records: dict[str, int] = {}
    torn: list[dict] = []
    for path in sorted(audit_dir.rglob("*.jsonl.gz")):
        if path.name.startswith("."):
            continue
        with gzip.open(path, "rt") as f:
            for line in f:
                r = json.loads(line)
                if r["kind"] == "produce_batch" and r["error_code"] == 0:
                    ok_records[r["zone"]] = ok_records.get(r["zone"], 0) + r["records"]
                elif r["kind"] == "audit_drop" and r.get("reason") == "torn_tail":
                    torn.append(r)
    return {"ok_records": ok_records, "torn_tail": torn,
            "inprogress": sorted(str(p) for p in audit_dir.rglob(".*.inprogress"))}


def _fatal_line(log_path: Path) -> str:
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    fatal = [line for line in lines if "|FATAL|" in line]  # librdkafka's own line names the cause
    fatal = fatal or [line for line in lines if "Fatal" in line or "FATAL" in line]
    return (fatal or lines or ["(empty log)"])[0 if "|FATAL|" in (fatal or [""])[0] else -1][:400]


def expected_sequences(spec: Mapping[str, Any], records: int) -> dict[str, list[int]]:
    """topic:partition -> the sequence numbers one producer sent there, in send order (as bench/workload.py)."""
    topics = spec["topics"]
    key_space = spec.get("key_space", 1000)
    per_topic_n = [0] * len(topics)
    out: dict[str, list[int]] = {}
    for seq in range(records):
        t = seq % len(topics)
        topic = topics[t]
        key = workload_module.key_of(seq, key_space) if topic.get("keyed") else None
        partition = workload_module.partition_of(topic, per_topic_n[t], key)
        per_topic_n[t] += 1
        out.setdefault(f"{topic['name']}:{partition}", []).append(seq)
    return out


def verify_acknowledged(bootstrap: str, spec: Mapping[str, Any], record_bytes: int,
                        summaries: Sequence[Mapping[str, Any]], timeout_s: float | None = None,
                        unknown_producers: Sequence[str] = ()) -> dict:
    """Read every partition back; every acknowledged record exactly once, in order, intact.

    Records of `unknown_producers` (no summary) are only counted ("unverified"). A partition
    not read to its end before the deadline (default: VERIFY_MIN_S, or longer for many
    records) has its missing records counted as "unread", not lost, and the result is not ok.
    Returns counts (acknowledged, found, lost, duplicates, reordered, corrupt, foreign,
    unverified, unacked_present, unacked_absent) and "ok" with the first problems; nothing is raised
    for a delivery problem.
    """
    from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415

    expected: dict[tuple[str, str], list[int]] = {}
    failed: dict[tuple[str, str], set[int]] = {}
    for s in summaries:
        pid = s["producer_id"]
        for tp, seqs in expected_sequences(spec, s["records"]).items():
            expected[(tp, pid)] = seqs
        for tp, seq in s.get("failed_records", []):
            failed.setdefault((tp, pid), set()).add(seq)
        if s.get("unflushed"):
            raise ValueError(f"{pid}: {s['unflushed']} records neither acknowledged nor failed; cannot verify")
    position = {key: {seq: i for i, seq in enumerate(seqs)} for key, seqs in expected.items()}
    tps = sorted({tp for tp, _ in expected})
    counts = dict.fromkeys(("found", "duplicates", "reordered", "corrupt", "foreign", "unverified"), 0)
    unknown = set(unknown_producers)
    problems: list[str] = []

    def problem(text: str) -> None:
        if len(problems) < MAX_PROBLEMS:
            problems.append(text)

    # Tansu's high watermark can lag the log, so at least every acknowledged record is expected.
    high = dict.fromkeys(tps, 0)
    for (tp, pid), seqs in expected.items():
        high[tp] += len(seqs) - len(failed.get((tp, pid), ()))
    if timeout_s is None:
        timeout_s = max(VERIFY_MIN_S, sum(high.values()) / VERIFY_MIN_RECORDS_PER_S)
    seen: dict[tuple[str, str], set[int]] = {}
    last_index: dict[tuple[str, str], int] = {}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"verify-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        for tp in tps:
            topic, p = tp.rsplit(":", 1)
            _, watermark = consumer.get_watermark_offsets(TopicPartition(topic, int(p)), timeout=30)
            high[tp] = max(high[tp], watermark)
        consumer.assign([TopicPartition(tp.rsplit(":", 1)[0], int(tp.rsplit(":", 1)[1]), 0) for tp in tps])
        next_offset = dict.fromkeys(tps, 0)
        deadline = time.monotonic() + timeout_s
        last_record = time.monotonic()
        draining = False
        while True:
            if not draining and all(next_offset[tp] >= high[tp] for tp in tps):
                draining = True
            now = time.monotonic()
            if not draining and (now > deadline or now - last_record > VERIFY_IDLE_TIMEOUT_S):
                break  # what is missing is counted as lost below
            batch = consumer.consume(num_messages=1000, timeout=DRAIN_TIMEOUT_S if draining else 1.0)
            if draining and not batch:
                break
            for msg in batch:
                if msg.error():
                    problem(f"consume error: {msg.error()}")
                    continue
                tp = f"{msg.topic()}:{msg.partition()}"
                last_record = time.monotonic()
                next_offset[tp] = msg.offset() + 1
                counts["found"] += 1
                value = msg.value()
                try:
                    pid, seq = workload_module.parse_value(value)
                except ValueError as exc:
                    counts["foreign"] += 1
                    problem(f"{tp}@{msg.offset()}: {exc}")
                    continue
                if pid in unknown:
                    counts["unverified"] += 1
                    continue
                key = (tp, pid)
                index = position.get(key, {}).get(seq)
                if index is None:
                    counts["foreign"] += 1
                    problem(f"{tp}@{msg.offset()}: {pid} seq {seq} was never sent to this partition")
                    continue
                if value != workload_module.value_of(pid, seq, record_bytes):
                    counts["corrupt"] += 1
                    problem(f"{tp}@{msg.offset()}: {pid} seq {seq} value differs from what was sent")
                got = seen.setdefault(key, set())
                if seq in got:
                    counts["duplicates"] += 1
                    problem(f"{tp}@{msg.offset()}: duplicate {pid} seq {seq}")
                    continue
                got.add(seq)
                if index < last_index.get(key, -1):
                    counts["reordered"] += 1
                    problem(f"{tp}@{msg.offset()}: {pid} seq {seq} after a later record")
                last_index[key] = max(index, last_index.get(key, -1))
    finally:
        consumer.close()
    incomplete = {tp for tp in tps if next_offset[tp] < high[tp]}
    acknowledged = lost = unread = unacked_present = unacked_absent = 0
    lost_runs: list[list] = []  # [topic:partition, producer, first lost seq, last, count]: where losses cluster
    for key, seqs in expected.items():
        got = seen.get(key, set())
        bad = failed.get(key, set())
        run: list | None = None
        for seq in seqs:
            if seq in bad:
                if seq in got:
                    unacked_present += 1
                else:
                    unacked_absent += 1
                continue
            acknowledged += 1
            if seq in got:
                run = None
                continue
            if key[0] in incomplete:
                unread += 1  # the read stopped before this partition's end: not judged
                continue
            lost += 1
            problem(f"{key[0]} {key[1]}: acknowledged seq {seq} lost")
            if run is None and len(lost_runs) < MAX_PROBLEMS:
                run = [key[0], key[1], seq, seq, 0]
                lost_runs.append(run)
            if run is not None:
                run[3] = seq
                run[4] += 1
    if incomplete:
        problem(f"verification stopped before the end of {len(incomplete)} partitions: {unread} records unread")
    result = {"acknowledged": acknowledged, "lost": lost, "unread": unread, "unacked_present": unacked_present,
              "unacked_absent": unacked_absent, **counts, "partitions": len(tps), "lost_runs": lost_runs}
    result["ok"] = not problems and not any(result[k] for k in ("lost", "duplicates", "reordered", "corrupt",
                                                                 "foreign"))
    result["problems"] = problems
    return result


def _listening_lines(proc: subprocess.Popen, count: int, what: str) -> list[str]:
    """The first `count` "listening=HOST:PORT" addresses of a helper process's log (bounded wait)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        text = proc.log_path.read_text(errors="replace") if proc.log_path.exists() else ""
        lines = [line.removeprefix("listening=") for line in text.splitlines() if line.startswith("listening=")]
        if len(lines) >= count:
            return lines[:count]
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start:\n{text[-2000:]}")
        time.sleep(0.05)  # polling its log for readiness, bounded by the deadline


def _rate_args(rates: Mapping[str, float]) -> list[str]:
    return [arg for name, value in rates.items() for arg in (f"--{name.replace('_', '-')}", str(value))]


@contextlib.contextmanager
def fault_proxy(env: ZoneEnv, log_name: str = "s3-faults", process_out: list | None = None,
                **rates: float) -> Iterator[tuple[str, Path]]:
    """deploy/local/s3_faults.py in front of moto (loopback mode): yields (endpoint_url, stats_path).

    rates: rate_500, rate_503, rate_reset, rate_stall, stall_s, delay_ms, seed. `process_out`
    gets the injector's Popen (to SIGSTOP it: S3 that hangs). Raises RuntimeError.
    """
    if env.mode != "loopback":
        raise ValueError("the fault proxy runs beside the zones in loopback mode only")
    log_name = f"{log_name}-{uuid.uuid4().hex[:6]}"  # a fresh log: its "listening=" line is this run's
    stats = env.log_dir / f"{log_name}.json"
    argv = [sys.executable, "-m", "deploy.local.s3_faults", "--upstream",
            env.s3_local_endpoint.removeprefix("http://"), "--listen", "127.0.0.1:0", "--stats", str(stats)]
    proc = env.run_beside_s3(argv + _rate_args(rates), log_name=log_name)
    if process_out is not None:
        process_out.append(proc)
    try:
        (address,) = _listening_lines(proc, 1, "s3 fault proxy")
        yield "http://" + address, stats
    finally:
        stop_process(proc)


@contextlib.contextmanager
def notify_fault_proxy(env: ZoneEnv, log_name: str = "notify-faults", process_out: list | None = None,
                       start_healthy: bool = False,
                       **rates: float) -> Iterator[tuple[dict[str, str], dict[str, str], Path]]:
    """deploy/local/notify_faults.py in front of every zone's agent (loopback mode).

    Yields (agents, notify_via, stats_path): the agents' own listen addresses (for
    run_campaign's `agents`) and the injector's address per zone (SidecarSettings.notify_via).
    rates: rate_drop_request, rate_drop_response, rate_delay, rate_reset, delay_s, latency_ms,
    seed. `start_healthy`: inject nothing until the injector gets SIGUSR1 (SIGUSR2 restores);
    `process_out` gets its Popen, to send those.
    """
    if env.mode != "loopback":
        raise ValueError("the notification fault proxy runs on loopback mode only")
    agents = agent_addresses(env)
    log_name = f"{log_name}-{uuid.uuid4().hex[:6]}"
    stats = env.log_dir / f"{log_name}.json"
    argv = [sys.executable, "-m", "deploy.local.notify_faults", "--stats", str(stats)]
    for zone in env.zone_names:
        argv += ["--route", f"127.0.0.1:0={agents[zone]}"]
    if start_healthy:
        argv.append("--start-healthy")
    proc = env.run_beside_s3(argv + _rate_args(rates), log_name=log_name)
    if process_out is not None:
        process_out.append(proc)
    try:
        addresses = _listening_lines(proc, len(env.zone_names), "notification fault proxy")
        yield agents, dict(zip(env.zone_names, addresses, strict=True)), stats
    finally:
        stop_process(proc)


def fault_counts(stats_path: Path) -> dict[str, int]:
    return _read_json(stats_path) or {}
