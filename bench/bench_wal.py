"""WAL writer throughput vs plain boto3 put_object of equal-size objects, same moto, same run.

Run:  .venv/bin/python bench/bench_wal.py [--total-mib 512] [--batch-kib 16] [--rounds 4] [--warmup 128]
                                          [--plain-body bytes|bytearray]

Phase "wal": many concurrent appenders push `batch-kib` record batches through one
WalWriter at default settings (8 MiB / 250 ms / 4 PUTs in flight) until `total-mib` are
durable. Phase "plain": the same number of objects with exactly the sizes the writer
produced, uploaded with boto3 put_object from as many threads as the writer has PUTs in
flight. Phases alternate order between rounds (moto and the shared machine warm up and
cool down), after one uncounted warm-up phase per side; figures are sums over rounds. The bucket is emptied after every phase: moto
keeps objects in memory, and a phase that ran while moto held the other phase's 512 MiB
was measurably slower (ratio 0.77-0.81 against 0.87-0.91 in the same run).

Two ratios are printed. "whole run" divides by each phase's wall time, start to end.
"sustained" (the goal) counts, in each phase, the object bytes completed between the
first and the last full-size object completion: it leaves out the ramp-up and the
run's tail, where the writer's last partial objects wait for linger by design.
Also prints PUT requests per GB of payload (goal <= 130), and per phase this process's CPU
time and moto's (from /proc: the server's work per side should be the same).

The plain side passes `bytes` bodies by default, as most boto3 code does; botocore wraps
them in a BytesIO that http.client sends 8 KiB at a time. The writer hands botocore a
bytearray, which goes out in one sendall. `--plain-body bytearray` gives the plain side
that too: the stricter comparison.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import trio  # noqa: E402

from azsidecar.runtime import tune_gc  # noqa: E402
from deploy.local.processes import DUMMY_CREDENTIALS, start_moto  # noqa: E402
from wal_s3.config import WalConfig  # noqa: E402
from wal_s3.format import WalEntry  # noqa: E402
from wal_s3.s3 import make_s3_client  # noqa: E402
from wal_s3.writer import WalWriter  # noqa: E402

ZONES = ("use1-az2", "use1-az3")  # two destination zones, as from a proxy in use1-az1


class TimedAuditSink:
    """Keeps wal_flush records with the perf_counter time they were emitted (= completion)."""

    def __init__(self) -> None:
        self.flushes: list[tuple[float, dict[str, Any]]] = []

    def emit(self, kind: str, fields: Mapping[str, Any]) -> None:
        if kind == "wal_flush":
            self.flushes.append((time.perf_counter(), fields))


def sustained_rate(completions: list[tuple[float, int]]) -> float:
    """Bytes/s between the first and the last completion (the first object's bytes excluded)."""
    completions = sorted(completions)
    if len(completions) < 2:
        return float("nan")
    span = completions[-1][0] - completions[0][0]
    return sum(n for _, n in completions[1:]) / span


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (fields 14 and 15 of /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def count_puts(client) -> list[int]:
    counter = [0]

    def hook(**_kwargs):
        counter[0] += 1
    client.meta.events.register("before-send.s3.PutObject", hook)
    return counter


async def wal_phase(config: WalConfig, client, total_bytes: int, batch: bytes, appenders: int,
                    writer_id: str, moto_pid: int) -> dict[str, Any]:
    audit = TimedAuditSink()
    writer = WalWriter(config, "use1-az1", writer_id, client, audit)
    await writer.register_epoch()  # not part of the sustained rate
    per_task = total_bytes // len(batch) // appenders
    started = time.perf_counter()
    cpu = time.process_time()
    moto_cpu = cpu_s(moto_pid)
    async with writer.running():
        async def appender(i: int) -> None:
            for j in range(per_task):
                await writer.append(WalEntry("bench", i % 64, i, 0, j, 1, batch), ZONES[(i + j) % len(ZONES)])
        async with trio.open_nursery() as n:
            for i in range(appenders):
                n.start_soon(appender, i)
    elapsed = time.perf_counter() - started
    flushes = [f for _, f in audit.flushes]
    assert all(f["ok"] for f in flushes), "a flush failed during the benchmark"
    reasons = {r: sum(f["reason"] == r for f in flushes) for r in ("size", "linger", "shutdown")}
    put_ms = sorted(f["put_ms"] for f in flushes)
    print(f"  wal:   {elapsed:.2f}s wall, {time.process_time() - cpu:.2f}s CPU (moto {cpu_s(moto_pid) - moto_cpu:.2f}s), "
          f"flush reasons {reasons}, PUT ms median {put_ms[len(put_ms) // 2]:.0f}")
    return {
        "seconds": elapsed, "sizes": [f["bytes"] for f in flushes],
        "puts": sum(f["put_requests"] for f in flushes), "payload": per_task * appenders * len(batch),
        "sustained": sustained_rate([(t, f["bytes"]) for t, f in audit.flushes if f["reason"] == "size"]),
    }


def plain_phase(client, bucket: str, sizes: list[int], threads: int, tag: str, body_type: type,
                moto_pid: int) -> dict[str, Any]:
    body = body_type(os.urandom(max(sizes)))  # a slice is a copy of the same type

    def put(a: tuple[int, int]) -> tuple[float, int, float]:
        t = time.perf_counter()
        client.put_object(Bucket=bucket, Key=f"plain/{tag}/{a[0]}", Body=body[:a[1]])
        done = time.perf_counter()
        return done, a[1], (done - t) * 1000

    started = time.perf_counter()
    cpu = time.process_time()
    moto_cpu = cpu_s(moto_pid)
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(put, enumerate(sizes)))
    elapsed = time.perf_counter() - started
    put_ms = sorted(ms for _, _, ms in results)
    print(f"  plain: {elapsed:.2f}s wall, {time.process_time() - cpu:.2f}s CPU (moto {cpu_s(moto_pid) - moto_cpu:.2f}s), "
          f"PUT ms median {put_ms[len(put_ms) // 2]:.0f}")
    return {"seconds": elapsed, "bytes": sum(sizes), "sustained": sustained_rate([(t, n) for t, n, _ in results])}


def empty_bucket(client, bucket: str) -> None:
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--total-mib", type=int, default=512, help="payload per WAL phase")
    ap.add_argument("--batch-kib", type=int, default=16, help="record batch size")
    ap.add_argument("--appenders", type=int, default=4096, help="concurrent append callers")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--s3-transport", choices=("auto", "boto3"), default="auto",
                    help="the writer's wal.s3_transport (auto: h11 on the event loop, no SHA-256 of the body; "
                         "boto3: worker threads, botocore hashes bodies over http as the plain side does)")
    ap.add_argument("--plain-body", choices=("bytes", "bytearray"), default="bytes",
                    help="body type of the plain put_object calls")
    ap.add_argument("--warmup", type=int, default=128, metavar="MIB",
                    help="payload of one uncounted warm-up phase per side before the rounds (0: none)")
    ap.add_argument("--gc", choices=("azsidecar", "default"), default="azsidecar",
                    help="azsidecar: the collector settings every azsidecar process runs with "
                         "(azsidecar/runtime.py); default: CPython's")
    args = ap.parse_args()
    if args.gc == "azsidecar":
        tune_gc()
    os.environ.update(DUMMY_CREDENTIALS)
    batch = os.urandom(args.batch_kib * 1024)
    total = args.total_mib * 1024 * 1024
    body_type = bytes if args.plain_body == "bytes" else bytearray
    with start_moto() as moto:
        bucket = "bench-wal"
        moto.create_bucket(bucket)
        config = WalConfig(bucket=bucket, region="us-east-1", endpoint_url=moto.endpoint_url,  # default flush settings
                           s3_transport=args.s3_transport)
        client = make_s3_client(config)
        puts = count_puts(client)
        wal_runs, plain_runs = [], []
        sizes: list[int] = []
        if args.warmup:
            # Not counted: the process's first phase pays one-off costs (allocator arenas, moto's
            # first large allocations, connection setup) that the other side then skips.
            print(f"warm-up ({args.warmup} MiB per side, not counted):")
            warm = trio.run(wal_phase, config, client, args.warmup * 1024 * 1024, batch, args.appenders,
                            "warmup", moto.proc.pid)
            empty_bucket(client, bucket)
            plain_phase(client, bucket, warm["sizes"], config.max_in_flight_puts, "warmup", body_type, moto.proc.pid)
            empty_bucket(client, bucket)
        for r in range(args.rounds):
            print(f"round {r}:")
            plain = None
            if r % 2:  # odd rounds: plain first, with the sizes of the previous wal phase
                plain = plain_phase(client, bucket, sizes, config.max_in_flight_puts, str(r), body_type, moto.proc.pid)
                empty_bucket(client, bucket)
            before = puts[0]
            wal = trio.run(wal_phase, config, client, total, batch, args.appenders, f"bench{r}", moto.proc.pid)
            listed = [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
                      for o in page.get("Contents", []) if "/_epochs/" not in "/" + o["Key"]]
            assert len(listed) == len(wal["sizes"]), "objects in the bucket: one per flush"
            if args.s3_transport == "boto3":  # the hook sees boto3's requests only
                assert puts[0] - before == wal["puts"] + 1, "PUT count: data objects + one epoch marker"
            sizes = wal["sizes"]
            empty_bucket(client, bucket)
            if plain is None:
                plain = plain_phase(client, bucket, sizes, config.max_in_flight_puts, str(r), body_type, moto.proc.pid)
            print(f"  {len(sizes)} objects, mean {sum(sizes) / len(sizes) / 2**20:.2f} MiB; MB/s whole run "
                  f"wal {sum(sizes) / wal['seconds'] / 1e6:.1f} plain {plain['bytes'] / plain['seconds'] / 1e6:.1f}; "
                  f"sustained wal {wal['sustained'] / 1e6:.1f} plain {plain['sustained'] / 1e6:.1f} "
                  f"(ratio {wal['sustained'] / plain['sustained']:.2f})")
            empty_bucket(client, bucket)
            wal_runs.append(wal)
            plain_runs.append(plain)
        whole = (sum(sum(w["sizes"]) for w in wal_runs) / sum(w["seconds"] for w in wal_runs)) / \
            (sum(p["bytes"] for p in plain_runs) / sum(p["seconds"] for p in plain_runs))
        sustained = (sum(w["sustained"] for w in wal_runs) / len(wal_runs)) / \
            (sum(p["sustained"] for p in plain_runs) / len(plain_runs))
        payload = sum(w["payload"] for w in wal_runs)
        data_puts = sum(w["puts"] for w in wal_runs)
        print(f"throughput ratio wal/plain, sustained: {sustained:.3f}  (goal >= 0.9); whole run: {whole:.3f}")
        print(f"PUT requests per GB of payload: {data_puts / (payload / 1e9):.1f}  (goal <= 130; "
              f"{data_puts} PUTs for {payload / 1e9:.3f} GB)")
        print(f"settings: max_bytes={config.max_bytes} linger_ms={config.linger_ms} "
              f"max_in_flight_puts={config.max_in_flight_puts} batch={len(batch)} appenders={args.appenders} "
              f"plain body={args.plain_body} gc={args.gc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
