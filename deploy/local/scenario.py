"""Baseline and sidecar runs of one workload over the three zones, metered and verified.

Strategy. A run creates its own topics (names carry the run name and a random suffix, so
runs in one environment never mix), starts the producer processes of bench/workload.py
in every zone, reads the inter-zone meter around them, then verifies from zone 0 (its own
broker, so the check crosses no zone) that every record arrived exactly once and in
per-partition order.

- `run_baseline`: each producer writes straight to the broker of the partition's leader
  zone (leader_zone_of), across the bridge when that zone is another one.
- `run_sidecar`: the caller's `start_sidecar_fn(env, zone)` is entered for every zone
  first (a context manager that starts proxy + agent and returns once they listen on
  zone.sidecar_bootstrap); the producers then use only their zone's sidecar. The meter
  stops after the sidecars have exited, so traffic they drain at shutdown is counted.

Both take an optional `prepare(topic_names)`, called once the run's topics exist and before
any producer starts (the leader-placement bench moves leaders there). Topics may weigh
zones (`TopicSpec.zone_weights`): a skewed workload, whose zones produce different shares.

Both return a RunResult with the reading, the payload that would cross zones if sent
straight to the leaders, and the verifier's report.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy.local.zones import (
    CrossZoneReading,
    Zone,
    ZoneEnv,
    ZoneProcess,
    cleanup_leftovers,
    leader_zone_of,
    three_zones,
)

WORKLOAD_SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "workload.py"
MB = 1_000_000
ADMIN_TIMEOUT_S = 60.0  # creating a handful of topics
VERIFY_TIMEOUT_S = 900.0  # reading a few hundred MB back from one broker
PROGRESS_EVERY_S = 2.0  # how often the progress callback hears from a running run
LOG_TAIL_LINES = 15

Progress = Callable[[str], None]
StartSidecar = Callable[[ZoneEnv, Zone], AbstractContextManager[Any]]
Prepare = Callable[[Sequence[str]], None]  # called with the run's topic names once they exist, before producing
# The JSON document bench/workload.py reads (zones, topics, rates; leader zones on Kafka):
# built here and handed over as JSON, its values as varied as JSON's.
WorkloadSpec = dict[str, Any]


class ScenarioError(RuntimeError):
    """A producer, the topic creation or the verifier failed or timed out (message has its log tail)."""


@dataclass(frozen=True)
class TopicSpec:
    """`zone_weights`: how many records of every round a zone's producer sends to this topic
    (one weight per zone, in the environment's zone order); None: one each (every producer
    round-robins over every topic). A weight of 0 keeps the zone's producers off the topic."""

    name: str
    partitions: int
    keyed: bool
    zone_weights: tuple[int, ...] | None = None

    def weight(self, zone_index: int) -> int:
        return 1 if self.zone_weights is None else self.zone_weights[zone_index]


# Partition counts are multiples of 3 so every zone leads the same share.
DEFAULT_TOPICS = (TopicSpec("orders", 6, True), TopicSpec("clicks", 6, False), TopicSpec("metrics", 3, False))


@dataclass(frozen=True)
class Workload:
    """What every run produces; total_bytes is split evenly over all producers in all zones."""

    total_bytes: int = 300 * MB
    record_bytes: int = 1000
    topics: tuple[TopicSpec, ...] = DEFAULT_TOPICS
    producers_per_zone: int = 1
    key_space: int = 1000
    linger_ms: int = 20
    # librdkafka's max.in.flight.requests.per.connection for the producers (its default is 5).
    # Its idempotent producer (2.16) spends 0.35-0.5 of a core per producer in its broker
    # threads with 4 or 5 requests in flight against ~0.05 with 3 (1,000 records/s, linger 20 ms,
    # acks all, on the local Apache Kafka cluster, 2026-11-30); three producers per three-zone
    # run made that a core of the host. 3 still pipelines (ordering across requests in flight
    # is exercised); runs that want librdkafka's default set 5.
    max_in_flight: int = 3
    timeout_s: float = 1800.0  # all producers of one run
    records_per_s: float | None = None  # per producer; None: as fast as it goes

    def __post_init__(self) -> None:
        if self.record_bytes < 32 or self.total_bytes < self.record_bytes:
            raise ValueError(f"record_bytes >= 32 and total_bytes >= record_bytes, got {self}")
        if not self.topics or any(t.partitions < 1 for t in self.topics):
            raise ValueError("at least one topic, each with >= 1 partition")
        if self.producers_per_zone < 1:
            raise ValueError("producers_per_zone >= 1")
        if not 1 <= self.max_in_flight <= 5:
            raise ValueError(f"max_in_flight: 1 to 5 (librdkafka's idempotent producer), got {self.max_in_flight}")
        if any(w < 0 for t in self.topics for w in (t.zone_weights or ())):
            raise ValueError("zone weights are >= 0")
        lengths = {len(t.zone_weights) for t in self.topics if t.zone_weights is not None}
        if len(lengths) > 1:
            raise ValueError(f"every topic's zone_weights names the same zones, got lengths {sorted(lengths)}")

    def zone_bytes(self, zones: int) -> list[int]:
        """Payload bytes each zone's producers send together: total_bytes split by the zones'
        summed topic weights (evenly without weights). Raises ValueError if the weights name
        another number of zones or are all 0."""
        weights = [sum(t.weight(z) for t in self.topics) for z in range(zones)]
        if any(t.zone_weights is not None and len(t.zone_weights) != zones for t in self.topics):
            raise ValueError(f"zone_weights must name {zones} zones")
        if sum(weights) == 0:
            raise ValueError("every zone weight is 0: nobody produces")
        return [self.total_bytes * w // sum(weights) for w in weights]

    @property
    def max_partitions(self) -> int:
        return max(t.partitions for t in self.topics)

    def spec(self, zones: Sequence[str], topic_names: Sequence[str]) -> WorkloadSpec:
        """The JSON spec bench/workload.py reads."""
        return {
            "zones": list(zones), "record_bytes": self.record_bytes, "key_space": self.key_space,
            "linger_ms": self.linger_ms, "max_in_flight": self.max_in_flight,
            **({} if self.records_per_s is None else {"records_per_s": self.records_per_s}),
            "topics": [{"name": n, "partitions": t.partitions, "keyed": t.keyed,
                        **({} if t.zone_weights is None else
                           {"zone_weights": dict(zip(zones, t.zone_weights, strict=True))})}
                       for n, t in zip(topic_names, self.topics, strict=True)],
        }


@dataclass(frozen=True)
class RunResult:
    name: str
    reading: CrossZoneReading
    payload_bytes: int  # keys + values produced, all zones
    cross_zone_payload_bytes: int  # of which the leader is in another zone than the producer
    records: int
    duration_s: float
    verification: Mapping[str, Any]
    topics: tuple[str, ...]
    summaries: tuple[Mapping[str, Any], ...] = field(repr=False)
    out_dir: Path = Path()
    # Kafka's replication and quorum between zones over the run (unmetered: Tansu or loopback).
    replication: CrossZoneReading | None = None

    @property
    def ok(self) -> bool:
        return bool(self.verification.get("ok"))

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "reading": self.reading.as_dict(), "payload_bytes": self.payload_bytes,
                "cross_zone_payload_bytes": self.cross_zone_payload_bytes, "records": self.records,
                "duration_s": self.duration_s, "verification": dict(self.verification),
                "topics": list(self.topics), "out_dir": str(self.out_dir),
                "replication": self.replication.as_dict() if self.replication else None}


def cross_zone_payload_bytes(summaries: Sequence[Mapping[str, Any]]) -> int:
    """Payload of the partitions whose leader zone differs from the producer's zone."""
    return sum(entry["bytes"] for s in summaries for entry in s["partitions"].values()
               if entry["leader_zone"] != s["zone"])


def _tail(path: Path) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:])
    except OSError:
        return "(no log)"


def _python(*args: str) -> list[str]:
    return [sys.executable, str(WORKLOAD_SCRIPT), *args]


def _run_step(env: ZoneEnv, zone: Zone, argv: list[str], timeout_s: float, log_name: str, what: str) -> None:
    try:
        code = env.run_to_completion(zone, argv, timeout_s, log_name=log_name)
    except subprocess.TimeoutExpired as exc:
        raise ScenarioError(f"{what} timed out after {timeout_s}s:\n{_tail(env.log_dir / f'{log_name}.log')}") from exc
    if code != 0:
        raise ScenarioError(f"{what} exited {code}:\n{_tail(env.log_dir / f'{log_name}.log')}")


def _wait_producers(procs: Sequence[tuple[str, ZoneProcess, Path]], total_records: int,
                    timeout_s: float, progress: Progress | None, name: str) -> None:
    deadline = time.monotonic() + timeout_s
    for pid, proc, _ in procs:
        while True:
            remaining_s = deadline - time.monotonic()
            if remaining_s <= 0:
                raise ScenarioError(f"{name}: producer {pid} still running after {timeout_s}s")
            try:
                proc.wait(timeout=min(PROGRESS_EVERY_S, remaining_s))
                break
            except subprocess.TimeoutExpired:
                if progress is not None:
                    progress(f"{name}: {_acked(procs)}/{total_records} records acked")
    failed = [(pid, proc) for pid, proc, _ in procs if proc.returncode != 0]
    if failed:
        pid, proc = failed[0]
        raise ScenarioError(f"{name}: {len(failed)} producer(s) failed; {pid} exited {proc.returncode}:\n"
                            f"{_tail(proc.log_path)}")


def _acked(procs: Sequence[tuple[str, ZoneProcess, Path]]) -> int:
    acked = 0
    for _, _, out in procs:
        with contextlib.suppress(OSError, ValueError):
            acked += json.loads(out.with_suffix(".progress").read_text())["acked"]
    return acked


def spec_for(env: ZoneEnv, workload: Workload, topic_names: Sequence[str]) -> WorkloadSpec:
    """The workload's spec for this environment: on Kafka the brokers' replication factor."""
    spec = workload.spec(env.zone_names, topic_names)
    if env.kafka is not None:
        spec["replication_factor"] = -1  # the brokers' default: 3, one replica per rack
    return spec


def record_leader_zones(env: ZoneEnv, spec: WorkloadSpec) -> None:
    """On Kafka, after the topics exist: each partition's leader zone into the spec.

    The brokers placed the replicas across the racks; a leader's rack is its zone. The
    producers and the verifier read it (`leader_zones`) instead of the Tansu convention.
    """
    if env.kafka is None:
        return
    spec["leader_zones"] = {t["name"]: {str(p): zone for p, zone in env.kafka.leader_racks(t["name"]).items()}
                            for t in spec["topics"]}


def _run(env: ZoneEnv, workload: Workload, name: str, bootstraps_of: Callable[[Zone], dict[str, str]],
         enter_around: Callable[[contextlib.ExitStack], None], progress: Progress | None,
         prepare: Prepare | None = None) -> RunResult:
    suffix = uuid.uuid4().hex[:6]
    topic_names = [f"{t.name}-{name}-{suffix}" for t in workload.topics]
    spec = spec_for(env, workload, topic_names)
    out_dir = env.log_dir / f"{name}-{suffix}"
    out_dir.mkdir(parents=True)
    first = env.zones[0]
    _run_step(env, first, _python("create-topics", "--bootstrap", first.broker_bootstrap, "--spec", json.dumps(spec)),
              ADMIN_TIMEOUT_S, f"{name}-create-topics", f"{name}: creating topics")
    if prepare is not None:
        prepare(topic_names)
    if env.kafka is not None:
        record_leader_zones(env, spec)
        if progress is not None:
            led = [z for t in topic_names for z in spec["leader_zones"][t].values()]
            progress(f"{name}: leaders placed by Kafka: "
                     + ", ".join(f"{zone} {led.count(zone)}" for zone in env.zone_names))
    spec_json = json.dumps(spec)
    producers = len(env.zones) * workload.producers_per_zone
    share_bytes = [b // workload.producers_per_zone for b in workload.zone_bytes(len(env.zones))]
    total_records = workload.producers_per_zone * sum(b // workload.record_bytes for b in share_bytes)
    meter = env.meter()
    replication_meter = env.replication_meter()
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        enter_around(stack)
        if progress is not None:
            progress(f"{name}: {producers} producers, {total_records} records of {workload.record_bytes} B, "
                     f"topics {', '.join(topic_names)}")
        meter.start()
        replication_meter.start()
        procs = []
        for zone in env.zones:
            for k in range(workload.producers_per_zone):
                pid = f"{name}-z{zone.index}-p{k}"
                out = out_dir / f"{pid}.json"
                argv = _python("produce", "--spec", spec_json, "--producer-id", pid, "--zone", zone.name,
                               "--bootstraps", json.dumps(bootstraps_of(zone)), "--bytes", str(share_bytes[zone.index]),
                               "--out", str(out))
                procs.append((pid, env.run_in_zone(zone, argv, log_name=f"{name}-{suffix}-{pid}"), out))
        _wait_producers(procs, total_records, workload.timeout_s, progress, name)
    reading = meter.stop()
    replication = replication_meter.stop()
    duration_s = time.monotonic() - started
    summaries = tuple(json.loads(out.read_text()) for _, _, out in procs)
    if progress is not None:
        progress(f"{name}: produced in {duration_s:.1f}s; cross-zone bytes "
                 f"{reading.total_bytes if reading.metered else 'unmetered'}; verifying")
    verify_out = out_dir / "verify.json"
    verify_log = f"{name}-{suffix}-verify"
    try:
        env.run_to_completion(first, _python("verify", "--bootstrap", first.broker_bootstrap, "--out", str(verify_out),
                                             "--summaries", *[str(out) for _, _, out in procs]),
                              VERIFY_TIMEOUT_S, log_name=verify_log)
    except subprocess.TimeoutExpired as exc:
        raise ScenarioError(f"{name}: verification timed out:\n{_tail(env.log_dir / f'{verify_log}.log')}") from exc
    try:
        verification = json.loads(verify_out.read_text())
    except (OSError, ValueError) as exc:  # exit 1 with a report is a finding; no report is a crash
        raise ScenarioError(f"{name}: verifier wrote no report:\n{_tail(env.log_dir / f'{verify_log}.log')}") from exc
    return RunResult(
        name=name, reading=reading, payload_bytes=sum(s["payload_bytes"] for s in summaries),
        cross_zone_payload_bytes=cross_zone_payload_bytes(summaries), records=sum(s["records"] for s in summaries),
        duration_s=duration_s, verification=verification, topics=tuple(topic_names), summaries=summaries,
        out_dir=out_dir, replication=replication)


def run_baseline(env: ZoneEnv, workload: Workload, progress: Progress | None = None,
                 name: str = "baseline", prepare: Prepare | None = None) -> RunResult:
    """Producers write straight to each partition's leader. Raises ScenarioError.

    On Kafka a producer is an ordinary client of the cluster (it finds the leaders); on
    Tansu it writes to the leader zone's broker by the partition convention.
    Verification problems do not raise: they are in result.verification (result.ok).
    """
    if env.kafka is not None:
        return _run(env, workload, name, lambda zone: {zone.name: env.cluster_bootstrap}, lambda stack: None,
                    progress, prepare)
    leaders = {z.name: z.broker_bootstrap for z in env.zones}
    return _run(env, workload, name, lambda zone: leaders, lambda stack: None, progress, prepare)


def run_sidecar(env: ZoneEnv, workload: Workload, start_sidecar_fn: StartSidecar,
                progress: Progress | None = None, name: str = "sidecar", prepare: Prepare | None = None) -> RunResult:
    """Producers write to their own zone's sidecar only. Raises ScenarioError, or what start_sidecar_fn raises.

    start_sidecar_fn(env, zone) is a context manager per zone: on entry it starts the
    zone's proxy and agent (env.run_in_zone) and returns once zone.sidecar_bootstrap
    accepts connections; on exit it stops them after draining.
    """
    def enter(stack: contextlib.ExitStack) -> None:
        for zone in env.zones:
            if progress is not None:
                progress(f"{name}: starting sidecar in {zone.name}")
            stack.enter_context(start_sidecar_fn(env, zone))

    return _run(env, workload, name, lambda zone: {zone.name: zone.sidecar_bootstrap}, enter, progress, prepare)


def router_overrides(env: ZoneEnv, workload: Workload) -> dict[str, dict[str, str]]:
    """The router config section that makes it agree with the baseline's leaders.

    Kafka: none (the router reads the leaders' racks); Tansu: the partition convention.
    """
    if env.kafka is not None:
        return {"partition_zones": {}}
    return {"partition_zones": env.partition_zones(workload.max_partitions)}


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m deploy.local`: build the zones, run the baseline, print the result as JSON."""
    parser = argparse.ArgumentParser(prog="python -m deploy.local", description="three local zones: metered baseline run")
    parser.add_argument("--mb", type=float, default=100.0, help="total payload, MB (10^6 bytes)")
    parser.add_argument("--record-bytes", type=int, default=1000)
    parser.add_argument("--producers-per-zone", type=int, default=1)
    parser.add_argument("--mode", choices=("auto", "netns", "loopback"), default="auto")
    parser.add_argument("--segment-per-packet", action="store_true",
                        help="no GSO on the bridge links: header bytes as on a real wire")
    parser.add_argument("--offloads", choices=("on", "off"), default="on",
                        help="off: TSO, GSO and GRO off on both ends of the bridge links (ethtool): 1,500-byte "
                             "packets and their ACKs each way, as a real network carries them")
    parser.add_argument("--cleanup", action="store_true", help="only remove leftovers of dead runs, then exit")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.cleanup:
        for line in cleanup_leftovers():
            print("removed", line)
        return 0
    workload = Workload(total_bytes=int(args.mb * MB), record_bytes=args.record_bytes,
                        producers_per_zone=args.producers_per_zone)
    with three_zones(mode=args.mode, segment_per_packet=args.segment_per_packet,
                     offloads=args.offloads == "on") as env:
        result = run_baseline(env, workload, progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(json.dumps(result.as_dict(), indent=1))
    return 0 if result.ok else 1


__all__ = ["DEFAULT_TOPICS", "RunResult", "ScenarioError", "TopicSpec", "Workload", "cross_zone_payload_bytes",
           "leader_zone_of", "router_overrides", "run_baseline", "run_sidecar"]


if __name__ == "__main__":
    sys.exit(main())
