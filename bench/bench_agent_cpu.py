"""The agent's own CPU per MiB of appends, in-process, without S3, the proxy or the network frames.

Run:  .venv/bin/python bench/bench_agent_cpu.py [--total-mib 32] [--batch-kib 16] [--partitions 8]
                                                [--rounds 3] [--profile FILE [--profile-cpu-clock]]

One memory-backed Tansu broker on loopback. The record batches (`batch-kib` each, no
producer id) are laid out in ~8 MiB WAL objects (wal_s3 format) and parsed once, as the
agent's block cache holds them after a prefetch; an in-memory reader hands them over. Each
object is applied with `Agent.handle_request` (the agent's real per-notification path:
applied map, partition tickets, per-partition runs, metrics) and the real KafkaAppender
(ProduceRequests to Tansu). The collector is tuned as the agent process tunes it
(azsidecar/runtime.py). Printed per round: MiB/s and this process's CPU seconds per MiB
(user+system, and each apart from getrusage), which leaves out the broker's and S3's CPU
that bench_agent.py's shared figure mixes in: steadier on a busy host, and what the
agent's own code costs. With few partitions each ProduceRequest carries few batches (as
each of several agents per zone does), so the figure shows the cost per request.
`--profile` writes cProfile stats of the timed part, on the wall clock (whose time in
epoll and send is not CPU) or with `--profile-cpu-clock` on process time (a syscall per
event: slow, and heavier on functions called often).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import resource
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import crc32c  # noqa: E402

from azsidecar.runtime import tune_gc  # noqa: E402
from bench.bench_agent import MiB, build_batches, create_topic  # noqa: E402
from deploy.local.processes import start_tansu  # noqa: E402
from leader_notify import protocol as p  # noqa: E402
from leader_notify.agent.agent import Agent, AgentSettings  # noqa: E402
from leader_notify.agent.appender import KafkaAppender  # noqa: E402
from wal_s3.format import WalEntry, encode_object, parse_zone_range  # noqa: E402

OBJECT_BYTES = 8 * MiB


class MemoryReader:
    """Parsed zone ranges by key (what the block cache returns on a hit)."""

    def __init__(self) -> None:
        self.ranges: dict[str, list] = {}

    async def read_zone(self, key, zone_offset, zone_length, *, source_zone, expected_entries):
        return list(self.ranges[key])


def objects(topic: str, batches, reader: MemoryReader) -> list[p.NotifyRequest]:
    """~8 MiB objects of the batches, parsed into `reader`; one notification per object."""
    out: list[p.NotifyRequest] = []
    current: list[WalEntry] = []
    size = 0
    for partition, values, raw in [*batches, (None, None, None)]:
        if raw is None or (size + len(raw) > OBJECT_BYTES and current):
            enc = encode_object(writer_id="bench", epoch=1, sequence=len(out), created_ms=0,
                                entries_by_zone={"az2": current})
            share = enc.zones["az2"]
            key = f"wal/{uuid.uuid4().hex[:8]}/bench-{len(out)}"
            reader.ranges[key] = parse_zone_range(bytes(enc.data[share.offset:share.offset + share.length]),
                                                  len(current))
            out.append(p.NotifyRequest(len(out) + 1, "az1", "az2", "bench", 1, "bkt", key, share.offset,
                                       share.length, tuple(
                                           p.NotifyEntry(e.topic, e.partition, 0, len(e.batch), crc32c.crc32c(e.batch),
                                                         e.record_count, -1, -1, -1) for e in current)))
            current, size = [], 0
        if raw is not None:
            current.append(WalEntry(topic, partition, -1, -1, -1, len(values), raw))
            size += len(raw)
    return out


async def apply_all(agent: Agent, requests: list[p.NotifyRequest]) -> None:
    for req in requests:  # one notification at a time, as the proxy's notifier sends them
        resp = await agent.handle_request(req)
        bad = [r.error_code for r in resp.results if r.error_code]
        if resp.status != p.RequestStatus.OK or bad:
            raise RuntimeError(f"{req.key}: {resp.status.name} {resp.message} {bad[:3]}")


async def run_round(bootstrap: str, topic: str, batches,
                    profile: cProfile.Profile | None) -> tuple[float, float, float]:
    reader = MemoryReader()
    requests = objects(topic, batches, reader)
    async with KafkaAppender([bootstrap], client_id="bench-agent-cpu") as appender:
        agent = Agent(AgentSettings(zone="az2", bucket="bkt", prefix="wal/", keys=(b"k" * 32,)), reader, appender)
        await appender.append(topic, 0, batches[0][2])  # metadata and connection outside the timed part
        c0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        if profile is not None:
            profile.enable()
        await apply_all(agent, requests)
        if profile is not None:
            profile.disable()
        c1 = resource.getrusage(resource.RUSAGE_SELF)
        return time.perf_counter() - t0, c1.ru_utime - c0.ru_utime, c1.ru_stime - c0.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--total-mib", type=int, default=32)
    ap.add_argument("--batch-kib", type=int, default=16)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", type=Path, default=None)
    ap.add_argument("--profile-cpu-clock", action="store_true",
                    help="cProfile on process_time (what the CPU figure counts; a syscall per event, slow)")
    args = ap.parse_args()
    batches = build_batches(args.total_mib, args.batch_kib, args.partitions)
    mib = sum(len(raw) for _, _, raw in batches) / MiB
    profile = cProfile.Profile(time.process_time if args.profile_cpu_clock else time.perf_counter) if args.profile else None
    cpu_per_mib = []
    tune_gc()  # as the agent process does at start-up (azsidecar/cli.py)
    with start_tansu() as tansu:
        for r in range(args.rounds):
            topic = f"bench-agent-cpu-{r}-{uuid.uuid4().hex[:6]}"
            create_topic(tansu.bootstrap, topic, args.partitions)
            wall, user, system = asyncio.run(run_round(tansu.bootstrap, topic, batches, profile))
            cpu = user + system
            cpu_per_mib.append(cpu / mib)
            print(f"round {r}: {mib / wall:7.1f} MiB/s  agent CPU {cpu / mib:.5f} s/MiB "
                  f"(user {user / mib:.5f}, system {system / mib:.5f})")
    print(f"agent CPU s/MiB: median {sorted(cpu_per_mib)[len(cpu_per_mib) // 2]:.5f}, min {min(cpu_per_mib):.5f} "
          f"({len(batches)} batches of ~{args.batch_kib} KiB over {args.partitions} partitions, {mib:.1f} MiB)")
    if profile is not None:
        profile.dump_stats(args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
