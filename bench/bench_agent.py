"""Agent append throughput (S3 -> Tansu) vs a plain aiokafka producer, same batches, same run.

Run:  .venv/bin/python bench/bench_agent.py [--total-mib 32] [--batch-kib 16] [--partitions 8] [--rounds 2]

Setup: one moto server and one memory-backed Tansu broker on loopback. The record batches
(`batch-kib` each, 1 KiB records, no producer id) are built once.

Phase "agent": the batches sit in WAL objects of ~8 MiB (wal_s3 format, PUT before the
clock starts). The trio NotifySender notifies the in-process agent one object after the
other, as the proxy does for one destination zone; the agent does one ranged GET per
object (wal_s3.WalReader), verifies CRCs and appends every raw batch with one
ProduceRequest per batch, partitions in parallel. Timed: first notification sent to last
response received.

Phase "producer": a plain AIOKafkaProducer (acks=all) sends the same records grouped in the
same batches (create_batch/send_batch), to a fresh topic. Timed: first send to last ack.
Also printed: CPU time of this process per batch in each phase (sender + agent threads,
or the producer), steadier than wall clock on a shared host.

Phases alternate for `rounds` rounds; figures are sums over rounds. Prints MiB/s of
record-batch bytes for each and the ratio agent/producer.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import trio  # noqa: E402

from azsidecar.config import load_config  # noqa: E402
from core.audit import NullAuditSink  # noqa: E402
from deploy.local.processes import DUMMY_CREDENTIALS, start_moto, start_tansu  # noqa: E402
from wal_s3.format import WalEntry, encode_object  # noqa: E402

MiB = 1024 * 1024
OBJECT_BYTES = 8 * MiB  # the WAL writer's default flush size
RECORD_BYTES = 1024
KEYS = ("bench-notify-key-0123456789",)


@dataclass(frozen=True)
class Flushed:
    key: str
    zones: Any


def build_batches(total_mib: int, batch_kib: int, partitions: int) -> list[tuple[int, list[bytes], bytes]]:
    """[(partition, record values, raw batch)] round-robin over partitions."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    per_batch = max(1, batch_kib * 1024 // RECORD_BYTES)
    count = total_mib * MiB // (per_batch * RECORD_BYTES)
    out = []
    now_ms = int(time.time() * 1000)
    for i in range(count):
        values = [os.urandom(RECORD_BYTES // 2).hex().encode() for _ in range(per_batch)]
        b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 24)
        for j, v in enumerate(values):
            b.append(j, now_ms, None, v, [])
        out.append((i % partitions, values, bytes(b.build())))
    return out


def put_objects(s3, bucket: str, topic: str, batches) -> list[Flushed]:
    objs, current, size, seq = [], [], 0, 0
    for partition, values, raw in [*batches, (None, None, None)]:
        if raw is None or (size + len(raw) > OBJECT_BYTES and current):
            enc = encode_object(writer_id="bench", epoch=1, sequence=seq, created_ms=int(time.time() * 1000),
                                entries_by_zone={"az2": current})
            key = f"wal/{uuid.uuid4().hex[:8]}/bench-{seq}"
            s3.put_object(Bucket=bucket, Key=key, Body=enc.data)
            objs.append(Flushed(key, enc.zones))
            current, size, seq = [], 0, seq + 1
        if raw is not None:
            current.append(WalEntry(topic, partition, -1, -1, -1, len(values), raw))
            size += len(raw)
    return objs


class AgentThread:
    def __init__(self, config) -> None:
        self.config = config
        self.ready = threading.Event()
        self.port = 0
        self.loop = None
        self.stop_event = None
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _main(self) -> None:
        from leader_notify._run import running_agent

        self.loop = asyncio.get_running_loop()
        self.stop_event = asyncio.Event()
        async with running_agent(self.config, "az2", tuple(k.encode() for k in KEYS), audit=NullAuditSink(),
                                 checkpoint=None) as (_agent, port):
            self.port = port
            self.ready.set()
            await self.stop_event.wait()

    def __enter__(self) -> AgentThread:
        self.thread.start()
        if not self.ready.wait(30):
            raise RuntimeError("agent did not start")
        return self

    def __exit__(self, *exc) -> None:
        self.loop.call_soon_threadsafe(self.stop_event.set)
        self.thread.join(30)


async def run_agent_phase(config, objs, bucket: str) -> float:
    from leader_notify.sender import NotifySender

    sender = NotifySender(config.notify, "az1", "bench", 1, NullAuditSink(), bucket=bucket)
    try:
        started = time.perf_counter()
        for obj in objs:
            results = await sender.notify(obj, "az2")
            bad = [r for r in results if r.error_code]
            if bad:
                raise RuntimeError(f"{len(bad)} entries failed: {bad[0]}")
        return time.perf_counter() - started
    finally:
        await sender.aclose()


async def run_producer_phase(bootstrap: str, topic: str, batches) -> float:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", max_batch_size=1 << 24,
                                enable_idempotence=False)
    await producer.start()
    try:
        await producer.client._wait_on_metadata(topic)  # metadata outside the timed part, as for the agent
        now_ms = int(time.time() * 1000)
        started = time.perf_counter()
        futures = []
        for partition, values, _raw in batches:
            b = producer.create_batch()
            for v in values:
                b.append(key=None, value=v, timestamp=now_ms)
            futures.append(await producer.send_batch(b, topic, partition=partition))
        await asyncio.gather(*futures)
        return time.perf_counter() - started
    finally:
        await producer.stop()


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--total-mib", type=int, default=32)
    ap.add_argument("--batch-kib", type=int, default=16)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    os.environ.update(DUMMY_CREDENTIALS)  # boto3 in this process talks to moto

    batches = build_batches(args.total_mib, args.batch_kib, args.partitions)
    batch_bytes = sum(len(raw) for _, _, raw in batches)
    print(f"{len(batches)} batches of ~{args.batch_kib} KiB over {args.partitions} partitions, "
          f"{batch_bytes / MiB:.1f} MiB per phase, {args.rounds} rounds")
    with start_moto() as moto, start_tansu() as tansu:
        bucket = "bench-agent"
        moto.create_bucket(bucket)
        s3 = moto.client()
        base = {"wal.bucket": bucket, "wal.prefix": "wal/", "wal.endpoint_url": moto.endpoint_url,
                "upstream.bootstrap_servers": [tansu.bootstrap], "agent.listen_port": 0,
                "notify.hmac_keys": list(KEYS), "notify.timeout_s": 120.0}
        with AgentThread(load_config(None, base)) as agent:
            config = load_config(None, {**base, "notify.agents": {"az2": f"127.0.0.1:{agent.port}"}})
            t_agent = t_producer = cpu_agent = cpu_producer = 0.0
            for r in range(args.rounds):
                topic_a, topic_p = f"bench-agent-{r}-{uuid.uuid4().hex[:6]}", f"bench-prod-{r}-{uuid.uuid4().hex[:6]}"
                create_topic(tansu.bootstrap, topic_a, args.partitions)
                create_topic(tansu.bootstrap, topic_p, args.partitions)
                objs = put_objects(s3, bucket, topic_a, batches)
                c0 = time.process_time()  # this process: sender + agent threads, or the producer
                ta = trio.run(run_agent_phase, config, objs, bucket)
                c1 = time.process_time()
                tp = asyncio.run(run_producer_phase(tansu.bootstrap, topic_p, batches))
                cpu_agent += c1 - c0
                cpu_producer += time.process_time() - c1
                print(f"round {r}: agent {batch_bytes / MiB / ta:7.1f} MiB/s ({len(objs)} objects)   "
                      f"producer {batch_bytes / MiB / tp:7.1f} MiB/s")
                t_agent += ta
                t_producer += tp
    total = batch_bytes * args.rounds / MiB
    agent_rate, producer_rate = total / t_agent, total / t_producer
    print(f"agent (S3 GET + append):  {agent_rate:7.1f} MiB/s  {len(batches) * args.rounds / t_agent:8.0f} batches/s")
    print(f"plain aiokafka producer:  {producer_rate:7.1f} MiB/s  {len(batches) * args.rounds / t_producer:8.0f} batches/s")
    n = len(batches) * args.rounds
    print(f"ratio agent/producer: {agent_rate / producer_rate:.2f}")
    print(f"cpu µs per batch (this process): agent+sender {cpu_agent / n * 1e6:.0f}, "
          f"producer {cpu_producer / n * 1e6:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
