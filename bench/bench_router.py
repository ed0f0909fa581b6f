"""End-to-end produce latency per route, side by side in one run.

Zone A's producer writes to partitions led in zone B. Compared, alternating rounds:
  direct      — the producer straight to zone B's broker (what a producer does today)
  sidecar/direct_cross — through zone A's sidecar with policy `direct`
  sidecar/wal — through zone A's sidecar with policy `wal` (S3 PUT, notification, agent)
each with S3 as is and with S3 latency injected in user space (PUT +30 ms, GET +15 ms by
default, deploy/local/s3_delay.py). Records are sent one at a time (produce, then wait
for the delivery report), so each figure is one record's full round trip.

  python bench/bench_router.py [--records 200] [--rounds 3] [--linger-ms 5]

"added" = p(wal) - p(direct) - linger_ms - one PUT - one ranged GET (S3's own service time,
measured in the same run, injected latency included): what the sidecar itself adds.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deploy.local.processes import DUMMY_CREDENTIALS, free_port, start_moto, start_tansu, stop_process  # noqa: E402
from deploy.local.sidecar_stack import to_toml  # noqa: E402

TOPIC = "bench-router"
PARTITIONS = 3
RECORD = b"r" * 1024


def wait_line(proc: subprocess.Popen, path: Path, needle: str, timeout_s: float = 30.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = path.read_text(errors="replace") if path.exists() else ""
        for line in text.splitlines():
            if needle in line:
                return line
        if proc.poll() is not None:
            raise RuntimeError(f"{path.name}: exited {proc.returncode}\n{text[-2000:]}")
        time.sleep(0.05)  # readiness polling, bounded
    raise RuntimeError(f"{path.name}: no '{needle}' within {timeout_s}s")


def spawn(argv: list[str], log: Path, env: dict) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **env},
                                start_new_session=True)


def measure(bootstrap: str, records: int) -> list[float]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 0})
    latencies: list[float] = []
    try:
        for i in range(records + 5):
            done: list = []
            started = time.perf_counter()
            producer.produce(TOPIC, RECORD, partition=i % PARTITIONS, on_delivery=lambda e, m: done.append(e))
            producer.flush(30)
            if not done or done[0] is not None:
                raise RuntimeError(f"delivery failed: {done}")
            if i >= 5:  # the first records pay for connections and InitProducerId
                latencies.append((time.perf_counter() - started) * 1000)
    finally:
        producer.flush(30)
    return latencies


def s3_times(endpoint: str, n: int = 50) -> tuple[float, float]:
    """Median ms of a 64 KiB PUT and of a 4 KiB ranged GET at `endpoint` (S3's own service time)."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                      aws_access_key_id=DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                      aws_secret_access_key=DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
    puts, gets = [], []
    body = b"w" * 65536
    for i in range(n):
        t = time.perf_counter()
        s3.put_object(Bucket="wal", Key=f"probe/{i}", Body=body)
        puts.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        s3.get_object(Bucket="wal", Key=f"probe/{i}", Range="bytes=0-4095")["Body"].read()
        gets.append((time.perf_counter() - t) * 1000)
    return statistics.median(puts), statistics.median(gets)


def pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[int(q) - 1] if len(xs) > 1 else xs[0]


@contextlib.contextmanager
def sidecar(work: Path, name: str, policy: str, broker: str, s3_endpoint: str, linger_ms: int, key: str):
    agent_port, proxy_port = free_port(), free_port()
    config = {
        "zone": "use1-az1",
        "proxy": {"listen_port": proxy_port, "proxy_id": f"bench-{name}"},
        "upstream": {"bootstrap_servers": [broker]},
        "router": {"policy": policy, "partition_zones": {f"{TOPIC}:*": "use1-az2"}},
        "wal": {"bucket": "wal", "endpoint_url": s3_endpoint, "linger_ms": linger_ms},
        "notify": {"agents": {"use1-az2": f"127.0.0.1:{agent_port}"}},
        "agent": {"listen_port": agent_port},
        "audit": {"enabled": False},
    }
    path = work / f"{name}.toml"
    path.write_text(to_toml(config))
    env = {**DUMMY_CREDENTIALS, "AZSIDECAR_NOTIFY_HMAC_KEYS": key, "AZSIDECAR_IMDS_ENDPOINT": "http://127.0.0.1:9"}
    agent = spawn([sys.executable, "-m", "azsidecar", "agent", "--config", str(path), "--zone", "use1-az2",
                   "--listen", f"127.0.0.1:{agent_port}"], work / f"{name}-agent.log", env)
    proxy = spawn([sys.executable, "-m", "azsidecar", "proxy", "--config", str(path)], work / f"{name}-proxy.log", env)
    try:
        wait_line(agent, work / f"{name}-agent.log", "listening=")
        wait_line(proxy, work / f"{name}-proxy.log", "listening on")
        yield f"127.0.0.1:{proxy_port}"
    finally:
        stop_process(proxy, 15)
        stop_process(agent, 15)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200, help="records per route per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--linger-ms", type=int, default=5, help="WAL linger of the sidecar")
    parser.add_argument("--put-ms", type=float, default=30.0)
    parser.add_argument("--get-ms", type=float, default=15.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-router-"))
    key = secrets.token_hex(24)
    results: dict[str, list[float]] = {}
    with start_moto(log_dir=work) as moto, start_tansu(log_dir=work) as tansu:
        moto.create_bucket("wal")
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=tansu.bootstrap)
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
        admin.close()
        delay = spawn([sys.executable, "-m", "deploy.local.s3_delay", "--upstream", f"127.0.0.1:{moto.port}",
                       "--put-ms", str(args.put_ms), "--get-ms", str(args.get_ms)], work / "s3-delay.log", {})
        try:
            delayed = "http://" + wait_line(delay, work / "s3-delay.log", "listening=").split("=", 1)[1]
            s3_plain = s3_times(moto.endpoint_url)
            s3_delayed = s3_times(delayed)
            setups = [("sidecar/direct_cross", "direct", moto.endpoint_url),
                      ("sidecar/wal", "wal", moto.endpoint_url),
                      ("sidecar/wal +S3 latency", "wal", delayed)]
            with contextlib.ExitStack() as stack:
                bootstraps = {"direct": tansu.bootstrap}
                for i, (name, policy, endpoint) in enumerate(setups):
                    bootstraps[name] = stack.enter_context(
                        sidecar(work, f"s{i}", policy, tansu.bootstrap, endpoint, args.linger_ms, key))
                for r in range(args.rounds):
                    for name, bootstrap in bootstraps.items():
                        results.setdefault(name, []).extend(measure(bootstrap, args.records))
                    print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
        finally:
            stop_process(delay)
    direct50, direct99 = pct(results["direct"], 50), pct(results["direct"], 99)
    print(f"S3 service time (median): PUT {s3_plain[0]:.2f} ms, GET {s3_plain[1]:.2f} ms; "
          f"with injection PUT {s3_delayed[0]:.2f} ms, GET {s3_delayed[1]:.2f} ms")
    print(f"{'route':28s} {'n':>5s} {'p50 ms':>8s} {'p99 ms':>8s} {'p50 added':>10s} {'p99 added':>10s}")
    for name, xs in results.items():
        s3 = s3_delayed if "S3 latency" in name else s3_plain
        fixed = (args.linger_ms + s3[0] + s3[1]) if "wal" in name else 0.0
        a50 = pct(xs, 50) - direct50 - fixed
        a99 = pct(xs, 99) - direct99 - fixed
        print(f"{name:28s} {len(xs):5d} {pct(xs, 50):8.2f} {pct(xs, 99):8.2f} {a50:10.2f} {a99:10.2f}")
    print(f"(added = p - p(direct) - linger {args.linger_ms} ms - one PUT - one GET (medians above); logs in {work})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
