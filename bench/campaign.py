"""The long reliability campaign, on demand: crash cycles, S3 faults, cross-zone faults, soak, fuzz.

Strategy. Every scenario is one verified run of tests/system/reliability/harness.run_campaign:
three paced idempotent producers (one per zone, through their zone's proxy, policy "wal")
produce for as long as the cycles need, and `--cycles` faults land at random moments
(uniform over the run, at least MIN_GAP_S apart, a random zone each). After the run every
acknowledged record must be present exactly once, in per-partition order; records whose
delivery failed are counted separately. One run per scenario keeps the machine cost low
and makes every later cycle run on state the earlier ones left behind.

Scenarios:
  proxy-kill    kill -9 a proxy, restart it on the same port after 0-2 s (a new WAL epoch)
  agent-kill    kill -9 an agent, restart it after 0-2 s
  broker-kill   kill -9 a broker (Apache Kafka: the zone's KRaft node), restart it on the same port
  broker-term   SIGTERM a broker (Kafka: a controlled shutdown; Tansu serves open connections
                up to 5 s, then stops whatever it is doing), restart it on the same port
  agent-down    kill -9 an agent and keep it down 3-8 s (router.fallback=direct), restart
  agent-pause   SIGSTOP an agent for 1-6 s, then SIGCONT: notifications delayed and timing out
  s3-faults     no cycles: S3 behind deploy/local/s3_faults.py for the whole run (500, 503
                SlowDown, resets, 2 s stalls), producers unpaced; proxy memory sampled
  notify-faults no cycles: every proxy -> agent link behind deploy/local/notify_faults.py for
                the whole run (requests dropped, responses dropped, requests delayed past
                the sender's timeout, connections reset); producers paced, --cycles x 10 s
  s3-hang       the WAL endpoint (deploy/local/s3_faults.py, passing everything) SIGSTOPped
                5-15 s, then SIGCONT: S3 that hangs instead of refusing (gray failure); the
                brokers keep their own endpoint, so the direct path stays healthy
  agent-hang    SIGSTOP an agent 5-15 s (longer than its zone's gray deadline and breaker
                window), then SIGCONT
  degraded-link every proxy -> agent link through deploy/local/notify_faults.py, degraded 5-15 s
                per cycle (40 ms each way on every frame, 3 % of requests stalled 1.5 s, 2 % of
                connections reset), then restored: a slow, lossy inter-zone path, not a dead one;
                per cycle the notification round trips and the batches that fell back direct
  flood         1,100 hostile connections against a random zone's proxy for 4 s: 30 announce
                16 MiB frames and send 8 MiB of them, 70 send 3 bytes (slowloris), 1,000 idle;
                proxy budget 64 MiB; its RSS before, at peak and after is recorded per cycle

`--broker kafka` (the default) runs on three Apache Kafka KRaft nodes, one per zone with its
rack (RF 3, min.insync.replicas 2, leaders placed by the brokers); `--broker tansu` on three
Tansu brokers sharing one bucket. `--control` also runs broker-kill/broker-term with the producers straight to the brokers (no
sidecar), to tell the broker's own behaviour from ours. `--soak-minutes M` runs a steady paced
workload for M minutes (optionally with S3 faults) and plots proxy memory and produce
latency over time to a PNG. `--fuzz N` runs N mutated inputs through each codec.

Usage (from the repository root):
  .venv/bin/python bench/campaign.py --scenario all --cycles 20
  .venv/bin/python bench/campaign.py --scenario broker-kill --cycles 5 --control
  .venv/bin/python bench/campaign.py --soak-minutes 30 --plot soak.png
  .venv/bin/python bench/campaign.py --fuzz 1000000
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import random
import signal
import struct
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.audit import FALLBACK_DIRECT_REASON  # noqa: E402
from deploy.local.scenario import TopicSpec, Workload, router_overrides  # noqa: E402
from deploy.local.sidecar_stack import SidecarSettings  # noqa: E402
from deploy.local.zones import three_zones  # noqa: E402
from tests.system.reliability.flood import flood, trims_logged  # noqa: E402
from tests.system.reliability.harness import (  # noqa: E402
    CampaignResult,
    TickContext,
    fault_counts,
    fault_proxy,
    notify_fault_proxy,
    run_campaign,
)

TOPICS = (TopicSpec("orders", 6, keyed=True), TopicSpec("clicks", 6, keyed=False))
SCENARIOS = ("proxy-kill", "agent-kill", "broker-kill", "broker-term", "agent-down", "agent-pause", "s3-faults",
             "notify-faults", "s3-hang", "agent-hang", "degraded-link", "flood")
HANG_SCENARIOS = ("s3-hang", "agent-hang")  # SIGSTOP now, SIGCONT on a later tick (sampling goes on)
# Faults that last (a hang, a degraded link): each up to 15 s, ended on a later tick.
LASTING_SCENARIOS = (*HANG_SCENARIOS, "degraded-link")
DEGRADED_LINK = {"latency_ms": 40, "rate_delay": 0.03, "delay_s": 1.5, "rate_reset": 0.02}
FLOOD_PROXY = {"max_receive_buffer_bytes": 64 * 1024 * 1024, "max_frame_bytes": 16 * 1024 * 1024}
BROKER_SCENARIOS = ("broker-kill", "broker-term")  # --control repeats these without the sidecars
MIN_GAP_S = 4.0  # between two faults: a restart plus librdkafka's reconnect fit in it
LEAD_IN_S = 3.0  # steady production before the first fault
TAIL_S = 5.0  # steady production after the last one
RECORD_BYTES = 100
S3_FAULTS = {"rate_500": 0.02, "rate_503": 0.10, "rate_reset": 0.05, "rate_stall": 0.02, "stall_s": 2.0}
NOTIFY_FAULTS = {"rate_drop_request": 0.02, "rate_drop_response": 0.02, "rate_delay": 0.02, "rate_reset": 0.02,
                 "delay_s": 1.5}
NOTIFY_TIMEOUT_S = 1.0  # the sender's per-attempt timeout in notify-faults: a delayed request arrives after it
WAL_LIMITS = {"max_buffered_bytes": 16 * 1024 * 1024, "max_bytes": 2 * 1024 * 1024, "max_in_flight_puts": 4}


def fault_times(cycles: int, rng: random.Random) -> list[float]:
    """Random moments, seconds from the start, MIN_GAP_S apart: uniform gaps in [MIN_GAP_S, 2 MIN_GAP_S]."""
    t = LEAD_IN_S
    out = []
    for _ in range(cycles):
        t += rng.uniform(MIN_GAP_S, 2 * MIN_GAP_S)
        out.append(t)
    return out


def cycle_action(scenario: str, rng: random.Random, targets: dict | None = None) -> Callable[[TickContext], str]:
    """targets: what a scenario acts on beyond the fleet (s3-hang: "s3" -> the WAL endpoint's Popen)."""
    def act(ctx: TickContext) -> str:
        zone = rng.choice(ctx.env.zones)
        if scenario == "degraded-link":
            pid = targets["relay"].pid
            down_s = rng.uniform(5, 15)
            os.kill(pid, signal.SIGUSR1)  # the relay degrades every link until SIGUSR2
            ctx.state["resume"] = (pid, time.monotonic() + down_s, signal.SIGUSR2)
            ctx.state.setdefault("windows", []).append([time.time(), time.time() + down_s])
            return f"links degraded for {down_s:.1f}s"
        if scenario in HANG_SCENARIOS:
            pid = targets["s3"].pid if scenario == "s3-hang" else ctx.fleet.agents[zone.name].pid
            down_s = rng.uniform(5, 15)
            os.kill(pid, signal.SIGSTOP)
            ctx.state["resume"] = (pid, time.monotonic() + down_s)  # `scheduled` sends SIGCONT then
            return f"{scenario} {'s3' if scenario == 's3-hang' else zone.name} for {down_s:.1f}s"
        if scenario == "flood":
            host, port = zone.sidecar_bootstrap.rsplit(":", 1)
            proxy = ctx.fleet.proxies[zone.name]
            result = flood(host, int(port), proxy.pid, hold_s=4.0, trims=trims_logged(proxy.log_path)).as_dict()
            ctx.state.setdefault("floods", []).append({"zone": zone.name, **result})
            return f"flood {zone.name}: {result}"
        if scenario == "proxy-kill":
            ctx.fleet.kill("proxy", zone)
            down_s = rng.uniform(0, 2)
            time.sleep(down_s)  # the outage itself
            ctx.fleet.start_proxy(zone)
        elif scenario == "agent-kill":
            ctx.fleet.kill("agent", zone)
            down_s = rng.uniform(0, 2)
            time.sleep(down_s)  # the outage itself
            ctx.fleet.start_agent(zone)
        elif scenario == "agent-down":
            ctx.fleet.kill("agent", zone)
            down_s = rng.uniform(3, 8)
            time.sleep(down_s)  # the outage itself; the breaker should route around it
            ctx.fleet.start_agent(zone)
        elif scenario == "agent-pause":
            proc = ctx.fleet.agents[zone.name]
            down_s = rng.uniform(1, 6)
            os.kill(proc.pid, signal.SIGSTOP)
            try:
                time.sleep(down_s)  # the pause itself: connections open, nothing answered
            finally:
                os.kill(proc.pid, signal.SIGCONT)
        elif scenario in BROKER_SCENARIOS and ctx.env.kafka is not None:
            node = ctx.env.kafka.node_of_rack(zone.name)
            stopping = time.monotonic()
            if scenario == "broker-kill":
                ctx.env.kafka.kill_node(node.node_id)
            else:
                ctx.env.kafka.stop_node(node.node_id)  # SIGTERM: a controlled shutdown, kill -9 after its timeout
            down_s = time.monotonic() - stopping
            ctx.env.kafka.start_node(node.node_id)  # back as a follower: waits until it lists every broker
        elif scenario in BROKER_SCENARIOS:
            broker = ctx.env.brokers[zone.name]
            stopping = time.monotonic()
            broker.stop(kill=scenario == "broker-kill")  # broker-term: SIGTERM, SIGKILL after 5 s
            down_s = time.monotonic() - stopping
            broker.start()
        else:
            raise ValueError(scenario)
        return f"{scenario} {zone.name} down {down_s:.1f}s"
    return act


def scheduled(times: list[float], action: Callable[[TickContext], str], log) -> Callable[[TickContext], None]:
    def on_tick(ctx: TickContext) -> None:
        done = ctx.state.setdefault("done", [])
        resume = ctx.state.get("resume")
        if resume is not None:  # a hang is on: end it when due; no other fault meanwhile
            if time.monotonic() < resume[1]:
                return
            os.kill(resume[0], resume[2] if len(resume) > 2 else signal.SIGCONT)
            del ctx.state["resume"]
        if len(done) < len(times) and ctx.elapsed_s >= times[len(done)]:
            what = action(ctx)
            done.append(what)
            log(f"  cycle {len(done)}/{len(times)} at {ctx.elapsed_s:.1f}s, {ctx.acked} acked: {what}")
    return on_tick


def summarize(scenario: str, result: CampaignResult, cycles_done: int, extra: dict | None = None) -> dict:
    v = result.verification
    return {"scenario": scenario, "cycles": cycles_done, "ok": result.ok, "acknowledged": v["acknowledged"],
            "lost": v["lost"], "unread": v["unread"], "duplicates": v["duplicates"], "reordered": v["reordered"],
            "corrupt": v["corrupt"], "foreign": v["foreign"], "failed_then_present": v["unacked_present"],
            "failed_and_absent": v["unacked_absent"], "peak_proxy_rss_mib": round(result.peak_proxy_rss_kib / 1024, 1),
            "unverified_of_dead_producers": v["unverified"], "producer_fatal": dict(result.producer_fatal),
            "lost_runs": v["lost_runs"][:5],
            "duration_s": round(result.duration_s, 1), "producer_errors": dict(result.producer_errors),
            "problems": list(v["problems"][:5]), "log_dir": str(result.out_dir), **(extra or {})}


def run_scenario(env, scenario: str, cycles: int, rate: int, rng: random.Random, tmp: Path, log,
                 through_sidecars: bool = True) -> dict:
    extra_settings: dict = {"router": {"fallback": "direct"}}
    label = scenario if through_sidecars else f"{scenario}-control"
    if scenario == "s3-faults":
        records = max(cycles, 1) * 10_000  # 1000-byte records, unpaced: 10 MB per "cycle"
        workload = Workload(total_bytes=records * 1000, record_bytes=1000, topics=TOPICS, timeout_s=1800)
        with fault_proxy(env, seed=rng.randrange(1 << 30), **S3_FAULTS) as (endpoint, stats):
            settings = SidecarSettings(produce_detail="batch", wal_bucket="wal", audit_dir=tmp / f"audit-{label}", policy="wal",
                                       partition_zones=router_overrides(env, workload)["partition_zones"],
                                       extra={**extra_settings, "wal": {"endpoint_url": endpoint, **WAL_LIMITS}})
            result = run_campaign(env, workload, settings, name=label, log=log)
            faults = fault_counts(stats)
        first = next((s["rss_kib"] for s in result.samples if len(s["rss_kib"]) == 3), {})
        growth = max((kib - first.get(z, kib) for s in result.samples for z, kib in s["rss_kib"].items()), default=0)
        return summarize(label, result, 0, {"s3_faults_met": faults, "peak_rss_growth_mib": round(growth / 1024, 1)})
    if scenario == "notify-faults":
        per_producer = max(cycles, 1) * 10 * rate
        workload = Workload(total_bytes=3 * per_producer * RECORD_BYTES, record_bytes=RECORD_BYTES, topics=TOPICS,
                            timeout_s=per_producer / rate + 600)
        with notify_fault_proxy(env, seed=rng.randrange(1 << 30), **NOTIFY_FAULTS) as (agents, via, stats):
            settings = SidecarSettings(produce_detail="batch", wal_bucket="wal", audit_dir=tmp / f"audit-{label}", policy="wal",
                                       partition_zones=router_overrides(env, workload)["partition_zones"],
                                       notify_via=via,
                                       extra={**extra_settings, "notify": {"timeout_s": NOTIFY_TIMEOUT_S}})
            result = run_campaign(env, workload, settings, name=label, records_per_s=rate, log=log, agents=agents)
            faults = fault_counts(stats)
        return summarize(label, result, 0, {"notify_faults_met": faults})
    times = fault_times(cycles, rng)
    if scenario in LASTING_SCENARIOS:  # each hang lasts up to 15 s and the next waits for it
        times = [t + 15.0 * i for i, t in enumerate(times)]
    seconds = times[-1] + TAIL_S if times else LEAD_IN_S + TAIL_S
    if scenario in LASTING_SCENARIOS and times:
        seconds += 15.0  # the last hang ends while the producers still run
    per_producer = int(seconds * rate)
    workload = Workload(total_bytes=3 * per_producer * RECORD_BYTES, record_bytes=RECORD_BYTES, topics=TOPICS,
                        timeout_s=seconds + 600)
    if scenario == "flood":
        extra_settings = {**extra_settings, "proxy": FLOOD_PROXY}
    targets: dict = {}
    box: dict = {}
    with contextlib.ExitStack() as stack:
        if scenario == "s3-hang":
            procs: list = []
            endpoint, _stats = stack.enter_context(fault_proxy(env, process_out=procs))
            targets["s3"] = procs[0]
            stack.callback(_resume_if_stopped, procs[0])
            extra_settings = {**extra_settings, "wal": {"endpoint_url": endpoint}}
        notify_via, agents = None, None
        if scenario == "degraded-link":
            relays: list = []
            agents, notify_via, stats = stack.enter_context(notify_fault_proxy(
                env, process_out=relays, start_healthy=True, seed=rng.randrange(1 << 30), **DEGRADED_LINK))
            targets["relay"] = relays[0]
        settings = SidecarSettings(wal_bucket="wal", audit_dir=tmp / f"audit-{label}", policy="wal",
                                   partition_zones=router_overrides(env, workload)["partition_zones"],
                                   notify_via=notify_via, extra=extra_settings)
        on_tick = scheduled(times, cycle_action(scenario, rng, targets), log)

        def recording(ctx: TickContext) -> None:
            on_tick(ctx)
            box["done"] = len(ctx.state.get("done", []))
            box["state"] = ctx.state

        try:
            result = run_campaign(env, workload, settings, recording, name=label, records_per_s=rate, log=log,
                                  through_sidecars=through_sidecars, agents=agents)
        finally:
            resume = box.get("state", {}).pop("resume", None)
            if resume is not None:  # the run ended mid-hang: never leave a process stopped
                with contextlib.suppress(ProcessLookupError):  # the fleet's stop may have killed it
                    os.kill(resume[0], signal.SIGCONT)
        if scenario == "degraded-link":
            faults = fault_counts(stats)
    worst = max((s["lat_max_ms"] or 0 for s in result.samples), default=0)
    extra = {"worst_produce_latency_ms": worst}
    if scenario == "flood":
        extra["floods"] = box.get("state", {}).get("floods", [])
    if scenario == "degraded-link":
        extra.update(degraded_link_figures(settings.audit_dir, box.get("state", {}).get("windows", [])))
        extra["notify_faults_met"] = faults
    return summarize(label, result, box.get("done", 0), extra)


def degraded_link_figures(audit_dir: Path, windows: list[list[float]]) -> dict:
    """From the proxies' audit: WAL batches' notification round trips (median, p99) and the
    batches that fell back direct (their payload bytes and transfer at the default $0.02 per
    GB crossed), inside the degraded windows (wall-clock [start, end]) and outside them."""
    inside: dict = {"rtt": [], "fallback": 0, "fallback_bytes": 0}
    outside: dict = {"rtt": [], "fallback": 0, "fallback_bytes": 0}
    for path in audit_dir.rglob("*.jsonl.gz"):
        with gzip.open(path, "rt") as f:
            for r in map(json.loads, f):
                if r["kind"] != "produce_batch":
                    continue
                t = r["ts_ms"] / 1000
                side = inside if any(start <= t <= end for start, end in windows) else outside
                if r["route"] == "wal" and r["error_code"] == 0 and r["notify_rtt_ms"] >= 0:
                    side["rtt"].append(r["notify_rtt_ms"])
                elif r["reason"] == FALLBACK_DIRECT_REASON:
                    side["fallback"] += 1
                    side["fallback_bytes"] += r["bytes"]

    def described(side: dict) -> dict:
        rtt = sorted(side["rtt"])
        return {"wal_batches": len(rtt), "notify_rtt_p50_ms": round(rtt[len(rtt) // 2], 1) if rtt else None,
                "notify_rtt_p99_ms": round(rtt[min(len(rtt) - 1, -(-99 * len(rtt) // 100) - 1)], 1) if rtt else None,
                "fallback_batches": side["fallback"], "fallback_bytes": side["fallback_bytes"],
                "fallback_transfer_usd": side["fallback_bytes"] * 2e-11}
    return {"degraded_windows_s": [round(end - start, 1) for start, end in windows],
            "while_degraded": described(inside), "otherwise": described(outside)}


def _resume_if_stopped(proc) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGCONT)  # harmless if it runs; stop_process needs it running


def soak(env, minutes: float, rate: int, faults: bool, plot: Path, tmp: Path, log) -> dict:
    records = int(minutes * 60 * rate)
    workload = Workload(total_bytes=3 * records * RECORD_BYTES, record_bytes=RECORD_BYTES, topics=TOPICS,
                        timeout_s=minutes * 60 + 900)

    def go(endpoint: str | None) -> CampaignResult:
        wal = {"endpoint_url": endpoint, **WAL_LIMITS} if endpoint else {}
        settings = SidecarSettings(wal_bucket="wal", audit_dir=tmp / "audit-soak", policy="wal",
                                   partition_zones=router_overrides(env, workload)["partition_zones"],
                                   extra={"wal": wal} if wal else {})
        return run_campaign(env, workload, settings, name="soak", records_per_s=rate, log=log)

    if faults:
        with fault_proxy(env, seed=7, **S3_FAULTS) as (endpoint, _stats):
            result = go(endpoint)
    else:
        result = go(None)
    _plot(result, plot, f"soak {minutes:g} min, {3 * rate} records/s{' with S3 faults' if faults else ''}")
    samples = [s for s in result.samples if len(s["rss_kib"]) == 3]
    quarter = max(1, len(samples) // 4)
    mean_rss = lambda ss: sum(sum(s["rss_kib"].values()) / 3 for s in ss) / len(ss) / 1024  # noqa: E731
    p99s = sorted(s["lat_p99_ms"] for s in result.samples if s["lat_p99_ms"] is not None)
    p50s = sorted(s["lat_p50_ms"] for s in result.samples if s["lat_p50_ms"] is not None)
    return summarize("soak", result, 0, {
        "minutes": minutes, "mean_rss_first_quarter_mib": round(mean_rss(samples[:quarter]), 1) if samples else None,
        "mean_rss_last_quarter_mib": round(mean_rss(samples[-quarter:]), 1) if samples else None,
        "median_of_p50_ms": p50s[len(p50s) // 2] if p50s else None,
        "median_of_p99_ms": p99s[len(p99s) // 2] if p99s else None, "max_p99_ms": p99s[-1] if p99s else None,
        "plot": str(plot)})


def _plot(result: CampaignResult, path: Path, title: str) -> None:
    import matplotlib  # noqa: PLC0415
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    zones = sorted({z for s in result.samples for z in s["rss_kib"]})
    for z in zones:
        pts = [(s["t_s"] / 60, s["rss_kib"][z] / 1024) for s in result.samples if z in s["rss_kib"]]
        ax1.plot([p[0] for p in pts], [p[1] for p in pts], label=f"proxy {z}")
    ax1.set_ylabel("proxy RSS (MiB)")
    ax1.legend()
    for key, label in (("lat_p50_ms", "p50"), ("lat_p99_ms", "p99")):
        pts = [(s["t_s"] / 60, s[key]) for s in result.samples if s[key] is not None]
        ax2.plot([p[0] for p in pts], [p[1] for p in pts], label=f"produce->ack {label} (worst producer)")
    ax2.set_ylabel("latency (ms)")
    ax2.set_xlabel("minutes")
    ax2.set_yscale("log")
    ax2.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


# --- fuzzing ---------------------------------------------------------------------------

def _mutate(seed: bytes, rng: random.Random) -> bytes:
    """A few random edits of a valid input: flips, random bytes, truncation, insertion, splicing, int edges."""
    data = bytearray(seed)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(7)
        if op == 0 and data:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif op == 1 and data:
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif op == 2 and data:
            del data[rng.randrange(len(data)):]
        elif op == 3:
            pos = rng.randrange(len(data) + 1)
            data[pos:pos] = rng.randbytes(rng.randint(1, 16))
        elif op == 4 and len(data) > 4:
            a = rng.randrange(len(data))
            b = rng.randrange(a, min(len(data), a + 64) + 1)
            del data[a:b]
        elif op == 5 and len(data) >= 4:  # an interesting integer where a length or count may be
            pos = rng.randrange(len(data) - 3)
            data[pos:pos + 4] = struct.pack(">i", rng.choice((0, -1, 1, 0x7FFFFFFF, -0x80000000, 0xFFFF, 256)))
        elif op == 6 and len(data) >= 2:
            pos = rng.randrange(len(data) - 1)
            data[pos:pos + 2] = struct.pack(">h", rng.choice((0, -1, 0x7FFF, -0x8000, 1)))
    return bytes(data)


def _kafka_target():
    from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest  # noqa: PLC0415
    from kafka.protocol.producer import ProduceRequest  # noqa: PLC0415
    from kafka.protocol.producer.transaction import InitProducerIdRequest  # noqa: PLC0415

    from kafka_protocol.kafka_codec import NEED_DATA, ProtocolError, ServerCodec, UnsupportedRequest, decode_request  # noqa: PLC0415

    served = {0: 12, 3: 12, 18: 4, 22: 5}  # what the proxy decodes: api_key -> max version

    def encoded(request, version: int) -> bytes:
        request.with_header(correlation_id=1, client_id="fuzz")
        return bytes(request.encode(version=version, header=True, framed=True))

    batch = bytes(range(80))
    seeds = [encoded(ProduceRequest(transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[
        ProduceRequest.TopicProduceData(name="t", partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch)])]), v) for v in (3, 8, 9, 12)]
    seeds += [encoded(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t")],
                                      allow_auto_topic_creation=False), v) for v in (0, 4, 9, 12)]
    seeds += [encoded(ApiVersionsRequest(client_software_name="x", client_software_version="1"), v) for v in (0, 3)]
    seeds += [encoded(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1, producer_id=-1,
                                            producer_epoch=-1), v) for v in (0, 2, 4)]

    def run(data: bytes) -> None:
        codec = ServerCodec(max_frame_bytes=1 << 20)
        codec.receive_data(data)
        while True:
            frame = codec.next_frame()
            if frame is NEED_DATA:
                return
            try:
                decode_request(frame, served)
            except UnsupportedRequest:
                pass  # documented: the server answers UNSUPPORTED_VERSION and goes on

    return "kafka_protocol.kafka_codec ServerCodec+decode_request", seeds, run, (ProtocolError,)


def _wal_targets():
    from wal_s3.format import WalEntry, WalFormatError, encode_object, parse_object, parse_zone_range  # noqa: PLC0415

    objects = []
    for n in (1, 3):
        entries = {z: [WalEntry(topic=f"t{i}", partition=i, producer_id=1000 + i, producer_epoch=0, base_sequence=i * 5,
                                record_count=5, batch=bytes([i]) * (61 + 13 * i)) for i in range(n)]
                   for z in ("use1-az1", "use1-az2")}
        objects.append(encode_object(writer_id="proxy-a", epoch=3, sequence=n, created_ms=1_700_000_000_000,
                                     entries_by_zone=entries))
    object_seeds = [o.data for o in objects]
    range_seeds = [o.data[s.offset:s.offset + s.length] for o in objects for s in o.zones.values()]

    def run_object(data: bytes) -> None:
        parse_object(data)

    def run_range(data: bytes) -> None:
        parse_zone_range(data)

    return [("wal_s3.format.parse_object", object_seeds, run_object, (WalFormatError,)),
            ("wal_s3.format.parse_zone_range", range_seeds, run_range, (WalFormatError,))]


def _notify_targets():
    from leader_notify import protocol as p  # noqa: PLC0415

    keyring = p.Keyring([b"k" * 32])
    req = p.NotifyRequest(request_id=7, source_zone="use1-az1", dest_zone="use1-az2", proxy_id="proxy-a", epoch=3,
                          bucket="wal", key="wal/use1-az1/proxy-a/3/1", zone_offset=100, zone_length=400,
                          entries=tuple(p.NotifyEntry(topic="t", partition=i, offset=100 + 80 * i, length=80,
                                                      crc32c=12345 + i, record_count=5, producer_id=1000, producer_epoch=0,
                                                      base_sequence=5 * i) for i in range(3)))
    resp = p.NotifyResponse(request_id=7, status=p.RequestStatus.OK, message="",
                            results=(p.EntryResult(0, 10), p.EntryResult(0, 15, duplicate=True), p.EntryResult(6)))
    # What an agent receives on one connection: the proxy's HELLO, then signed requests. The
    # challenges are fixed so the seeds replay; a mutated byte must fail cleanly.
    agent_c, proxy_c = b"a" * p.CHALLENGE_BYTES, b"p" * p.CHALLENGE_BYTES
    proxy = p.Channel(keyring, p.Role.PROXY, proxy_c)
    hello = proxy.hello()
    answering = p.Channel(keyring, p.Role.AGENT, agent_c)
    answering.receive_data(hello)
    answering.next_frame()
    proxy.receive_data(answering.hello())
    proxy.next_frame()
    frames = [hello + proxy.send(p.MessageType.REQUEST, p.encode_request(req)),
              hello + proxy.send(p.MessageType.REQUEST, p.encode_request(req))]

    def run_frames(data: bytes) -> None:
        decoder = p.Channel(keyring, p.Role.AGENT, agent_c)
        decoder.receive_data(data)
        while decoder.next_frame() is not None:
            pass

    def run_request(data: bytes) -> None:
        p.decode_request(data)

    def run_response(data: bytes) -> None:
        p.decode_response(data)

    return [("leader_notify.protocol Channel", frames, run_frames, (p.ProtocolError,)),
            ("leader_notify.protocol decode_request (behind the MAC)", [p.encode_request(req)], run_request,
             (p.ProtocolError,)),
            ("leader_notify.protocol decode_response (behind the MAC)", [p.encode_response(resp)], run_response,
             (p.ProtocolError,))]


def fuzz_targets() -> list[tuple]:
    """(name, valid seed inputs, run(bytes), documented exception types) per codec entry point."""
    return [_kafka_target(), *_wal_targets(), *_notify_targets()]


def fuzz(n: int, seed: int, log, targets: list[tuple] | None = None) -> list[dict]:
    """n mutated inputs per target; a crash is any exception other than the target's documented ones."""
    targets = fuzz_targets() if targets is None else targets
    out = []
    for name, seeds, run, allowed in targets:
        rng = random.Random(seed)
        counts = {"target": name, "inputs": 0, "accepted": 0, "rejected": 0, "crashes": 0, "crash_examples": []}
        started = time.monotonic()
        for i in range(n):
            data = _mutate(rng.choice(seeds), rng) if i % 50 else rng.randbytes(rng.randint(0, 64))
            counts["inputs"] += 1
            try:
                run(data)
                counts["accepted"] += 1
            except allowed:
                counts["rejected"] += 1
            except Exception:  # noqa: BLE001 - the point: anything undocumented is a crash
                counts["crashes"] += 1
                if len(counts["crash_examples"]) < 3:
                    counts["crash_examples"].append({"input_hex": data[:200].hex(),
                                                     "error": traceback.format_exc(limit=3)[-600:]})
        counts["seconds"] = round(time.monotonic() - started, 1)
        log(f"fuzz {name}: {counts['inputs']} inputs, {counts['crashes']} crashes, {counts['seconds']}s")
        out.append(counts)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=(*SCENARIOS, "all"), action="append")
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--rate", type=int, default=1000, help="records/s per producer (3 producers)")
    parser.add_argument("--control", action="store_true", help="broker-kill/-term also straight to the brokers")
    parser.add_argument("--broker", choices=("kafka", "tansu"), default="kafka",
                        help="the local cluster: Apache Kafka (three KRaft nodes with racks) or Tansu")
    parser.add_argument("--soak-minutes", type=float, default=0.0)
    parser.add_argument("--soak-faults", action="store_true", help="S3 faults during the soak")
    parser.add_argument("--plot", type=Path, default=Path("soak.png"))
    parser.add_argument("--fuzz", type=int, default=0, help="inputs per codec")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here too")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    log(f"seed {seed}")
    report: dict = {"seed": seed, "broker": args.broker, "runs": [], "fuzz": []}
    if args.fuzz:
        report["fuzz"] = fuzz(args.fuzz, seed, log)
    scenarios = [s for choice in (args.scenario or []) for s in (SCENARIOS if choice == "all" else (choice,))]
    if scenarios or args.soak_minutes:
        tmp = Path(tempfile.mkdtemp(prefix="azs-campaign-"))
        with three_zones(mode="loopback", log_dir=tmp, broker=args.broker) as env:
            env.create_bucket("wal")
            for scenario in scenarios:
                log(f"{scenario}: {args.cycles} cycles")
                report["runs"].append(run_scenario(env, scenario, args.cycles, args.rate, rng, tmp, log))
                log(json.dumps(report["runs"][-1]))
                if scenario in BROKER_SCENARIOS and args.control:
                    report["runs"].append(run_scenario(env, scenario, args.cycles, args.rate, rng, tmp, log,
                                                       through_sidecars=False))
                    log(json.dumps(report["runs"][-1]))
            if args.soak_minutes:
                report["runs"].append(soak(env, args.soak_minutes, args.rate, args.soak_faults, args.plot, tmp, log))
        report["log_dir"] = str(tmp)
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text)
    runs_ok = all(r["ok"] for r in report["runs"])
    return 0 if runs_ok and not any(f["crashes"] for f in report["fuzz"]) else 1


if __name__ == "__main__":
    sys.exit(main())
