"""End-to-end produce latency per route, side by side in one run.

Zone A's producer writes to partitions led in zone B. Compared, alternating rounds:
  direct      — the producer straight to zone B's broker (what a producer does today)
  sidecar/direct_cross — through zone A's sidecar with policy `direct`
  sidecar/wal — through zone A's sidecar with policy `wal` (S3 PUT, notification, agent)
each with S3 as is and with S3 latency injected in user space (PUT +30 ms, GET +15 ms by
default, deploy/local/s3_delay.py). Records are sent one at a time (produce, then wait
for the delivery report), so each figure is one record's full round trip.

  python bench/bench_router.py [--records 200] [--rounds 3] [--linger-ms 5] [--boto3-too]
                               [--transparent-too] [--hold-answer-too]

The sidecars send WAL PUTs and ranged GETs on their event loops (wal.s3_transport auto:
h11); --boto3-too adds the +S3 latency route once more with boto3 in worker threads.
The injector keeps the sidecars' connections open between requests, as S3 does (moto
closes after every answer); --transparent-too adds the +S3 latency route once more through
an injector that passes those closes on (a new connection per S3 request: the harness
of earlier versions).

Two ways to say what the sidecar itself adds on the WAL path:
- "added" (coarse, kept for comparison with older runs) = p(wal) - p(direct, paced) - linger_ms -
  median PUT - median ranged GET (S3 service times probed by this script). At p99 it
  charges S3's own tail, and the leader's, to the sidecar.
- the per-record decomposition: the sidecars write audit records (schema v3) that split
  each WAL batch's latency; joined to the client's measurement of the same record:
      overhead = end-to-end - PUT - GET - linger - p50(direct, paced)
  PUT = the request time of the PUT that carried the record, GET = of the ranged GET that
  served it (from taking a connection to the answer, injected latency included; signing
  is the sidecar's), linger = the record's wait for the flush trigger up to the
  configured linger_ms (a configured batching delay, reported apart; lateness beyond it
  counts as overhead), p50(direct, paced) = the producer's own round trip to the leader,
  which the agent's append replaces, measured at the WAL route's pace: the "direct,
  paced" route leaves --direct-gap-ms idle before each record, as a WAL round trip
  leaves the leader and the client idle (back to back the round trip is ~0.45 ms
  shorter: warm caches, busy-polling threads). The overhead against the back-to-back
  p50 is printed too. Time queued behind another object's PUT or notification is
  overhead. Then p50/p99 of that, and of each part of it.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
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


def measure(bootstrap: str, records: int, gap_s: float = 0.0) -> list[float]:
    """Latency (ms) of `records` records sent one at a time; `gap_s` of idle time before each."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 0})
    latencies: list[float] = []
    try:
        for i in range(records + 5):
            if gap_s:
                time.sleep(gap_s)  # pacing the workload (the gap a WAL round trip leaves), not synchronization
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
def sidecar(work: Path, name: str, policy: str, broker: str, s3_endpoint: str, linger_ms: int, key: str,
            s3_transport: str = "auto"):
    agent_port, proxy_port = free_port(), free_port()
    config = {
        "zone": "use1-az1",
        "proxy": {"listen_port": proxy_port, "proxy_id": f"bench-{name}"},
        "upstream": {"bootstrap_servers": [broker]},
        "router": {"policy": policy, "partition_zones": {f"{TOPIC}:*": "use1-az2"}},
        "wal": {"bucket": "wal", "region": "us-east-1", "endpoint_url": s3_endpoint, "linger_ms": linger_ms, "s3_transport": s3_transport},
        "notify": {"agents": {"use1-az2": f"127.0.0.1:{agent_port}"}},
        "agent": {"listen_port": agent_port},
        # one record per batch: the decomposition reads each batch's stages
        "audit": {"enabled": True, "output": str(work / f"{name}-audit"), "roll_seconds": 3600,
                  "produce_detail": "batch", "object_detail": "object"},
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
    parser.add_argument("--boto3-too", action="store_true",
                        help="also run the +S3 latency route with wal.s3_transport=boto3 (an A/B of the transports)")
    parser.add_argument("--direct-gap-ms", type=float, default=50.0,
                        help="idle time before each record of the 'direct, paced' route, whose p50 is the "
                             "leader round trip subtracted as the agent's append")
    parser.add_argument("--hold-answer-too", action="store_true",
                        help="also run the +S3 latency route through an injector that holds moto's answer "
                             "instead of the request (moto's and the injector's work then lands inside the "
                             "delay, as S3's costs the client's host none)")
    parser.add_argument("--transparent-too", action="store_true",
                        help="also run the +S3 latency route through the injector's transparent mode, where "
                             "moto's close after every answer reaches the sidecar (a new connection per S3 request)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-router-"))
    key = secrets.token_hex(24)
    results: dict[str, list[float]] = {}
    audit_dirs: dict[str, Path] = {}
    with start_moto(log_dir=work) as moto, start_tansu(log_dir=work) as tansu:
        moto.create_bucket("wal")
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=tansu.bootstrap)
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
        admin.close()
        injectors = {"keepalive": ["--mode", "keepalive"]}
        if args.transparent_too:
            injectors["transparent"] = ["--mode", "transparent"]
        if args.hold_answer_too:
            injectors["hold-answer"] = ["--mode", "keepalive", "--hold", "answer"]
        delays = {mode: spawn([sys.executable, "-m", "deploy.local.s3_delay", "--upstream", f"127.0.0.1:{moto.port}",
                               "--put-ms", str(args.put_ms), "--get-ms", str(args.get_ms), *flags],
                              work / f"s3-delay-{mode}.log", {})
                  for mode, flags in injectors.items()}
        try:
            delayed = {mode: "http://" + wait_line(proc, work / f"s3-delay-{mode}.log", "listening=").split("=", 1)[1]
                       for mode, proc in delays.items()}
            s3_plain = s3_times(moto.endpoint_url)
            s3_delayed = s3_times(delayed["keepalive"])
            setups = [("sidecar/direct_cross", "direct", moto.endpoint_url, "auto"),
                      ("sidecar/wal", "wal", moto.endpoint_url, "auto"),
                      ("sidecar/wal +S3 latency", "wal", delayed["keepalive"], "auto")]
            if args.boto3_too:
                setups.append(("sidecar/wal +S3 latency, boto3", "wal", delayed["keepalive"], "boto3"))
            if args.transparent_too:
                setups.append(("sidecar/wal +S3 latency, conn/req", "wal", delayed["transparent"], "auto"))
            if args.hold_answer_too:
                setups.append(("sidecar/wal +S3 latency, held answer", "wal", delayed["hold-answer"], "auto"))
            with contextlib.ExitStack() as stack:
                bootstraps = {"direct": tansu.bootstrap, "direct, paced": tansu.bootstrap}
                for i, (name, policy, endpoint, transport) in enumerate(setups):
                    bootstraps[name] = stack.enter_context(
                        sidecar(work, f"s{i}", policy, tansu.bootstrap, endpoint, args.linger_ms, key, transport))
                    audit_dirs[name] = work / f"s{i}-audit"
                for r in range(args.rounds):
                    for name, bootstrap in bootstraps.items():
                        gap_s = args.direct_gap_ms / 1000 if name == "direct, paced" else 0.0
                        results.setdefault(name, []).extend(measure(bootstrap, args.records, gap_s))
                    print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
        finally:
            for proc in delays.values():
                stop_process(proc)
    # The sidecars are stopped (their audit writers closed): join and decompose.
    # The agent's append replaces the producer's own round trip to the leader; at the WAL
    # route's pace (one record per 20-70 ms) that round trip meets an idle leader and idle
    # client threads, which costs more than back to back (the "direct, paced" route).
    paced50 = pct(results["direct, paced"], 50)
    parts = {name: decompose(results[name], audit_dirs[name], args.records, args.linger_ms, args.rounds, paced50)
             for name in results if "wal" in name}
    for name, rows in parts.items():  # per record, for looking at the tail's records
        (work / f"parts-{name.replace('/', '_').replace(' ', '_')}.json").write_text(json.dumps(rows))
    direct50 = pct(results["direct"], 50)
    print(f"S3 service time (median): PUT {s3_plain[0]:.2f} ms, GET {s3_plain[1]:.2f} ms; "
          f"with injection PUT {s3_delayed[0]:.2f} ms, GET {s3_delayed[1]:.2f} ms")
    print(f"{'route':35s} {'n':>5s} {'p50 ms':>8s} {'p99 ms':>8s} {'p50 added':>10s} {'p99 added':>10s}")
    for name, xs in results.items():
        s3 = s3_delayed if "S3 latency" in name else s3_plain
        fixed = (args.linger_ms + s3[0] + s3[1]) if "wal" in name else 0.0
        base = results["direct, paced" if "wal" in name else "direct"]
        a50 = pct(xs, 50) - pct(base, 50) - fixed
        a99 = pct(xs, 99) - pct(base, 99) - fixed
        print(f"{name:35s} {len(xs):5d} {pct(xs, 50):8.2f} {pct(xs, 99):8.2f} {a50:10.2f} {a99:10.2f}")
    print(f"(added = p - p(direct; paced for the wal routes) - linger {args.linger_ms} ms - one PUT - one GET "
          f"(medians above); direct, paced = {args.direct_gap_ms:g} ms idle before each record; logs in {work})")
    print()
    print(f"Per record, from the audit records (ms): overhead = e2e - PUT - GET - linger - p50(direct, paced "
          f"{paced50:.2f}); means of the * rows add up to the overhead's mean")
    names = list(parts)
    print(f"{'':42s} " + " | ".join(f"{n:^26s}" for n in names))
    print(f"{'part':42s} " + " | ".join(f"{'p50':>8s} {'p99':>8s} {'mean':>8s}" for _ in names))
    for part in PARTS:
        cells = [f"{pct(parts[n][part], 50):8.2f} {pct(parts[n][part], 99):8.2f} "
                 f"{statistics.fmean(parts[n][part]):8.2f}" for n in names]
        print(f"{part:42s} " + " | ".join(cells))
    shift = paced50 - direct50
    print(f"{'overhead, p50(direct) back to back':42s} " + " | ".join(
        f"{pct(parts[n]['overhead'], 50) + shift:8.2f} {pct(parts[n]['overhead'], 99) + shift:8.2f} "
        f"{statistics.fmean(parts[n]['overhead']) + shift:8.2f}" for n in names)
        + f"   (subtracting {direct50:.2f} ms, not {paced50:.2f})")
    return 0


# Row names of the decomposition; `overhead` is the sum of the rows marked with *.
PARTS = (
    "end-to-end", "PUT (S3 request)", "GET (S3 request)", "linger (configured wait)",
    "overhead",
    "* client+proxy front door", "* proxy: received -> buffered", "* linger lateness",
    "* encode + PUT slot wait", "* PUT: sign, checksum, hand-off", "* release, notification queue, wake-ups",
    "* network + framing + HMAC", "* agent: read - GET (sign, cache, parse)",
    "* agent: other", "* agent append - p50(direct, paced)", "* proxy: result -> response",
)


def read_audit(root: Path) -> dict[str, list[dict]]:
    """Records of an audit directory by kind, each writer's records in the order written."""
    def file_order(path: Path) -> tuple:
        # <component>-<pid>-<run id>-<file seq> (spark_audit/writer.py); one run id per writer
        component, pid, run_id, seq = path.name[:-len(".jsonl.gz")].rsplit("-", 3)
        return component, int(pid), run_id, int(seq)

    by_kind: dict[str, list[dict]] = {}
    for path in sorted(root.rglob("*.jsonl.gz"), key=file_order):
        with gzip.open(path, "rt") as f:
            for line in f:
                record = json.loads(line)
                by_kind.setdefault(record["kind"], []).append(record)
    return by_kind


def decompose(e2e: list[float], audit_dir: Path, records: int, linger_ms: float, rounds: int,
              direct50: float) -> dict[str, list[float]]:
    """Per measured record, its latency parts (see PARTS), joined to the audit by order and key.

    Records reach the proxy one at a time, so its produce_batch records are in the order the
    client measured them; each measure() call's first 5 records were not measured. Raises
    RuntimeError if the join does not line up.
    """
    audit = read_audit(audit_dir)
    batches = [r for r in audit.get("produce_batch", []) if r["route"] == "wal"]
    per_call = records + 5
    if len(batches) != per_call * rounds or any(b["error_code"] for b in batches):
        raise RuntimeError(f"{audit_dir}: {len(batches)} wal produce_batch records, expected {per_call * rounds}")
    measured = [b for i, b in enumerate(batches) if i % per_call >= 5]
    flush = {r["key"]: r for r in audit.get("wal_flush", [])}
    notes = {r["key"]: r for r in audit.get("notification", [])}
    reads: dict[str, float] = {}
    for r in audit.get("agent_read", []):
        reads[r["key"]] = reads.get(r["key"], 0.0) + r["get_ms"]
    applies = {r["key"]: r for r in audit.get("agent_apply", [])}
    out: dict[str, list[float]] = {part: [] for part in PARTS}
    for total, b in zip(e2e, measured, strict=True):
        if b["latency_ms"] > total:
            raise RuntimeError(f"join out of line: proxy {b['latency_ms']:.2f} ms > client {total:.2f} ms")
        k = b["wal_key"]
        f, n, a = flush[k], notes[k], applies[k]
        get = reads[k]
        linger = min(b["linger_wait_ms"], linger_ms)
        # seal -> durable and released; before schema v5 s3_put_ms also held the linger wait
        put_from_seal = b["s3_put_ms"] if b["schema_version"] >= 5 else b["s3_put_ms"] - b["linger_wait_ms"]
        row = {
            "end-to-end": total, "PUT (S3 request)": f["s3_request_ms"], "GET (S3 request)": get,
            "linger (configured wait)": linger,
            "* client+proxy front door": total - b["latency_ms"],
            "* proxy: received -> buffered": b["queue_ms"],
            "* linger lateness": b["linger_wait_ms"] - linger,
            "* encode + PUT slot wait": f["put_wait_ms"],
            "* PUT: sign, checksum, hand-off": f["put_ms"] - f["s3_request_ms"],
            # PUT done -> notification sent, and agent's answer -> the batch's result: releasing
            # objects in sequence order, waiting behind earlier objects' notifications, and
            # the task wake-ups in between (one row: the notification may leave before the
            # batch's own task notices its object is durable).
            "* release, notification queue, wake-ups": (put_from_seal + b["notify_rtt_ms"]
                                                        - f["put_wait_ms"] - f["put_ms"] - n["rtt_ms"]),
            "* network + framing + HMAC": n["rtt_ms"] - a["handle_ms"],
            "* agent: read - GET (sign, cache, parse)": a["read_ms"] - get,
            "* agent: other": a["handle_ms"] - a["read_ms"] - a["append_ms"],
            "* agent append - p50(direct, paced)": a["append_ms"] - direct50,
            "* proxy: result -> response": (b["latency_ms"] - b["queue_ms"] - b["linger_wait_ms"] - put_from_seal
                                            - b["notify_rtt_ms"]),
        }
        row["overhead"] = total - f["s3_request_ms"] - get - linger - direct50
        for part, value in row.items():
            out[part].append(value)
    return out


if __name__ == "__main__":
    sys.exit(main())
