"""Produce latency and per-partition throughput at the producer: direct vs WAL on S3 Standard vs
WAL on S3 Express One Zone, side by side in one run (issue 19).

Strategy: two zones in loopback mode (deploy/local/zones.py: moto and one Tansu broker per zone,
or with --broker kafka a two-node Apache Kafka cluster, one node per zone);
S3 behind the latency injector with a size-dependent profile (deploy/local/s3_delay.py
`--profile standard|express`), and for the Express setup the S3 Express front
(deploy/local/s3_express.py: directory buckets, sessions) behind the injector. Each setup
starts the sidecars (proxy + agent) of both zones; the producer is in use1-az1 and every
partition is led in use1-az2, so each batch crosses zones:
  direct        router.policy direct (the batch goes straight to the leader's zone)
  wal-standard  router.policy wal, wal.storage_class standard (linger 250 ms by default)
  wal-express   router.policy wal, wal.storage_class express (linger 20 ms by default)
A setup may name its own linger after an @ (`wal-express@5`), so one run can put the default
and a shorter linger side by side, may end in `+ackwal` (acknowledged once the WAL object is
in S3, `router.ack_modes`, instead of after the leader's append), and in `+arrival` or `+made`
(wal.linger_counts_producer_wait false / true; by default true for express, false for
standard): with `+made` the linger counts from when a batch's oldest record was made, with
`+arrival` from the batch's arrival at the proxy. Each WAL setup also reports the objects per second
its proxy wrote while the paced producer ran (what the latency costs in PUTs).

The injector runs with `--hold answer`: each S3 request is answered when the profile's time
has passed since it arrived, moto's own time included (not added on top of the profile).

Measured at the producer, through use1-az1's sidecar:
1. latency: librdkafka (confluent-kafka) paced at --rate records/s for --seconds, acks=all,
   batch.size 16384, linger.ms 5: p50/p99 from produce() to the delivery callback, after
   one warm-up record (the idempotent producer's start - connections, ProducerId, whose
   first attempt librdkafka retries after a 500 ms timer - held the first ~100 records
   for up to ~0.5 s, which was the whole p99 of a 20 s run, direct route included);
   with --stages, also where the time went per stage (bench/latency_stages.py, from the
   sidecars' audit records);
2. per-partition throughput of default-configured producers, --records records of
   --record-bytes to one partition as fast as the producer goes: kafka-python with every
   default, and librdkafka with batch.size 16 KiB and linger.ms 5.

Usage (the lead runs it for figures; tests only smoke it with tiny parameters):
  .venv/bin/python bench/bench_latency.py [--rate 200] [--seconds 20] [--records 20000]
      [--record-bytes 100] [--setups direct,wal-standard,wal-express,wal-express@5] [--stages] [--linger-ms express=5] [--brokers-own-s3] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from confluent_kafka import Producer
from kafka import KafkaProducer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/bench_latency.py` from the repo

from bench.latency_stages import named_stages, percentile, stage_summary
from bench.workload import create_topics
from deploy.local.fault_common import running_listener
from deploy.local.fleet import audit_lines
from deploy.local.s3_express import create_directory_bucket, running_front
from deploy.local.sidecar_stack import SidecarSettings, sidecar_starter
from deploy.local.zones import ZoneEnv, three_zones
from wal_s3.config import DEFAULT_LINGER_MS

ZONES = ("use1-az1", "use1-az2")
SETUPS = ("direct", "wal-standard", "wal-express")
FLUSH_TIMEOUT_S = 300.0
TOPIC_PREFIX = "lat-"


@contextlib.contextmanager
def s3_store(env: ZoneEnv, setup: str, work: Path) -> Iterator[tuple[str, str, str]]:
    """(storage class, endpoint URL, wal.bucket) of a fresh WAL store behind the latency injector.

    Express: the injector in front of the Express front (client -> injector -> front -> moto),
    so the front's own hop (parsing, SigV4 checks, its connection to moto) is inside the
    profile's latency, like moto's, rather than added to it.
    """
    storage_class = "express" if setup == "wal-express" else "standard"
    assert env.moto is not None
    moto = ("127.0.0.1", env.moto.port)
    base = f"wal-{uuid.uuid4().hex[:8]}"

    def injector(upstream: str) -> contextlib.AbstractContextManager[str]:
        argv = [sys.executable, "-m", "deploy.local.s3_delay", "--upstream", upstream,
                "--listen", "127.0.0.1:0", "--profile", storage_class, "--hold", "answer"]
        return running_listener(argv, work / f"s3-delay-{setup}.log", "S3 latency injector")

    if storage_class == "express":
        for zone in ZONES:
            create_directory_bucket(moto, f"{base}--{zone}--x-s3")
        with running_front(f"{moto[0]}:{moto[1]}", work / f"s3-express-{setup}.log") as front, \
                injector(front.removeprefix("http://")) as delayed:
            yield storage_class, f"http://{delayed}", base
    else:
        with injector(f"{moto[0]}:{moto[1]}") as delayed:
            env.create_bucket(base)
            yield storage_class, f"http://{delayed}", base


def paced_latency_ms(bootstrap: str, topic: str, rate: float, seconds: float) -> list[float]:
    """librdkafka at `rate` records/s: each record's produce() -> delivery time, in ms."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 16384,
                         "enable.idempotence": True})
    latencies: list[float] = []
    errors: list[str] = []

    def done(err, _msg, started: float) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            latencies.append((time.perf_counter() - started) * 1000)

    producer.produce(topic, value=b"w" * 100, partition=0)  # warm-up: not measured (module docstring)
    if producer.flush(FLUSH_TIMEOUT_S):
        raise RuntimeError(f"paced producer: the warm-up record undelivered after {FLUSH_TIMEOUT_S:g} s")
    total = max(1, int(rate * seconds))
    start = time.perf_counter()
    for i in range(total):
        due = start + i / rate
        while (now := time.perf_counter()) < due:
            producer.poll(min(due - now, 0.01))  # pacing the producer is the workload itself
        t = time.perf_counter()
        producer.produce(topic, value=b"x" * 100, partition=0, on_delivery=lambda e, m, t=t: done(e, m, t))
        producer.poll(0)
    if producer.flush(FLUSH_TIMEOUT_S):
        raise RuntimeError(f"paced producer: records undelivered after {FLUSH_TIMEOUT_S:g} s")
    if errors:
        raise RuntimeError(f"paced producer: {len(errors)} delivery errors, first {errors[0]}")
    return latencies


def librdkafka_throughput(bootstrap: str, topic: str, records: int, record_bytes: int) -> float:
    """Seconds for `records` to one partition, librdkafka with batch.size 16 KiB, linger.ms 5."""
    producer = Producer({"bootstrap.servers": bootstrap, "batch.size": 16384, "linger.ms": 5})
    value = b"y" * record_bytes
    started = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value=value, partition=0)
                break
            except BufferError:
                producer.poll(0.05)  # the local queue is full: wait for deliveries
        producer.poll(0)
    if producer.flush(FLUSH_TIMEOUT_S):
        raise RuntimeError("librdkafka producer: records undelivered")
    return time.perf_counter() - started


def kafka_python_throughput(bootstrap: str, topic: str, records: int, record_bytes: int) -> float:
    """Seconds for `records` to one partition, kafka-python with every default."""
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    value = b"z" * record_bytes
    started = time.perf_counter()
    futures = [producer.send(topic, value=value, partition=0) for _ in range(records)]
    producer.flush(timeout=FLUSH_TIMEOUT_S)
    for f in futures:
        f.get(timeout=FLUSH_TIMEOUT_S)  # raises on a failed delivery
    elapsed = time.perf_counter() - started
    producer.close(timeout=10)
    return elapsed


LINGER_FROM = {"arrival": False, "made": True}  # setup suffix -> wal.linger_counts_producer_wait
ACK_AFTER_WAL = "ackwal"  # setup suffix: router.ack_modes answers once the WAL object is in S3


def parse_setup(text: str) -> tuple[str, int | None, bool | None, bool]:
    """"wal-express@5" -> ("wal-express", 5, None, False); "wal-standard+made" -> ("wal-standard",
    None, True, False); "wal-express+ackwal" -> ("wal-express", None, None, True); "direct" ->
    ("direct", None, None, False). The third: wal.linger_counts_producer_wait, None for the
    class's default; the fourth: acknowledged after the WAL PUT (router.ack_modes "wal")
    instead of after the leader's append. ValueError if unknown."""
    base, *modifiers = text.split("+")
    name, _, linger = base.partition("@")
    known = {*LINGER_FROM, ACK_AFTER_WAL}
    if (name not in SETUPS or (linger and (not linger.isdigit() or name == "direct"))
            or (modifiers and name == "direct") or any(m not in known for m in modifiers)
            or len(set(modifiers) & set(LINGER_FROM)) > 1 or len(modifiers) != len(set(modifiers))):
        raise ValueError(text)
    counts_wait = next((LINGER_FROM[m] for m in modifiers if m in LINGER_FROM), None)
    return name, int(linger) if linger else None, counts_wait, ACK_AFTER_WAL in modifiers


def objects_per_s(records: list[dict], zone: str, start_ms: int, end_ms: int) -> float:
    """WAL objects `zone`'s proxy wrote per second between start_ms and end_ms (wal_flush records)."""
    n = sum(1 for r in records if r.get("kind") == "wal_flush" and r.get("zone") == zone
            and start_ms <= int(r["ts_ms"]) <= end_ms)
    return n / max((end_ms - start_ms) / 1000.0, 0.001)


def run_setup(env: ZoneEnv, setup: str, args: argparse.Namespace, work: Path) -> dict:
    kind, linger_override, counts_wait, ack_after_wal = parse_setup(setup)
    with s3_store(env, kind, work) as (storage_class, endpoint, bucket):
        linger_ms = linger_override if linger_override is not None else args.linger_ms.get(
            storage_class, DEFAULT_LINGER_MS[storage_class])
        settings = SidecarSettings(  # one audit record per batch: the stage percentiles need each one
            produce_detail="batch", object_detail="object", wal_bucket=bucket, audit_dir=work / f"audit-{setup.replace('@', '-').replace('+', '-')}",
            policy="direct" if kind == "direct" else "wal",
            linger_ms=linger_ms, partition_zones={f"{TOPIC_PREFIX}*:*": ZONES[1]},
            extra={"wal": {"storage_class": storage_class, "endpoint_url": endpoint,
                           **({} if counts_wait is None else {"linger_counts_producer_wait": counts_wait})},
                   **({"router": {"ack_modes": {f"{TOPIC_PREFIX}*": "wal"}}} if ack_after_wal else {})})
        start = sidecar_starter(env, settings)
        with contextlib.ExitStack() as stack:
            for zone in env.zones:
                stack.enter_context(start(env, zone))
            bootstrap = env.zone(ZONES[0]).sidecar_bootstrap
            tag = setup.replace("@", "-").replace("+", "-")
            topics = {t: f"{TOPIC_PREFIX}{tag}-{t}-{uuid.uuid4().hex[:6]}" for t in ("paced", "rdk", "kp")}
            if env.kafka is not None:  # led by use1-az2's node, its follower in use1-az1
                leader = env.kafka.node_of_rack(ZONES[1]).node_id
                for t in topics.values():
                    env.kafka.create_topic(t, 1, assignments={0: [leader] + [n for n in env.kafka.nodes if n != leader]})
            else:
                create_topics(env.zone(ZONES[0]).broker_bootstrap,
                              {"topics": [{"name": t, "partitions": 1} for t in topics.values()]})
            paced_from_ms = int(time.time() * 1000)
            latencies = paced_latency_ms(bootstrap, topics["paced"], args.rate, args.seconds)
            paced_to_ms = int(time.time() * 1000)
            rdk_s = librdkafka_throughput(bootstrap, topics["rdk"], args.records, args.record_bytes)
            kp_s = kafka_python_throughput(bootstrap, topics["kp"], args.records, args.record_bytes)
    # The sidecars have stopped: their audit files are complete.
    records = list(audit_lines(settings.audit_dir))
    stages = stage_summary(records, topics["paced"])
    mb = args.records * args.record_bytes / 1e6
    return {"setup": setup, "storage_class": storage_class, "linger_ms": settings.linger_ms,
            "objects_per_s": objects_per_s(records, ZONES[0], paced_from_ms, paced_to_ms),
            "p50_ms": percentile(latencies, 0.50), "p99_ms": percentile(latencies, 0.99), "paced_records": len(latencies),
            "librdkafka_s": rdk_s, "librdkafka_mb_s": mb / rdk_s, "kafka_python_s": kp_s, "kafka_python_mb_s": mb / kp_s, "stages": stages}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=200.0, help="paced producer: records per second")
    parser.add_argument("--seconds", type=float, default=20.0, help="paced producer: how long")
    parser.add_argument("--records", type=int, default=20_000, help="throughput: records per producer")
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--setups", default=",".join(SETUPS), help=f"comma-separated subset of {','.join(SETUPS)}")
    parser.add_argument("--json", help="also write the results as JSON here")
    parser.add_argument("--linger-ms", action="append", default=[], metavar="CLASS=MS",
                        help="wal.linger_ms for a storage class instead of its default (e.g. express=5); repeatable")
    parser.add_argument("--stages", action="store_true",
                        help="also print the paced producer's batches per stage (p50/p99 ms, from the audit)")
    parser.add_argument("--brokers-own-s3", action="store_true",
                        help="the Tansu brokers store their logs in a moto of their own, not in the WAL's moto "
                             "(without it a broker's append queues in one moto process behind the WAL's requests)")
    parser.add_argument("--broker", choices=("tansu", "kafka"), default="tansu",
                        help="one Tansu broker per zone, or a node per zone of an Apache Kafka cluster "
                             "(replication factor 2 over the two zones)")
    parser.add_argument("--log-dir", help="keep the processes' logs here (default: a temporary directory)")
    args = parser.parse_args(argv)
    if args.broker == "kafka" and args.brokers_own_s3:
        parser.error("--brokers-own-s3: Tansu brokers only")
    try:
        args.linger_ms = {cls: int(ms) for cls, ms in (item.split("=", 1) for item in args.linger_ms)}
    except ValueError:
        parser.error("--linger-ms: CLASS=MS, e.g. express=5")
    if set(args.linger_ms) - set(DEFAULT_LINGER_MS):
        parser.error(f"--linger-ms: the class is one of {', '.join(DEFAULT_LINGER_MS)}")
    setups = [s for s in args.setups.split(",") if s]
    try:
        for s in setups:
            parse_setup(s)
    except ValueError as exc:
        parser.error(f"--setups: {exc} is not one of {','.join(SETUPS)} "
                     "(a WAL setup may add @LINGER_MS and end in +arrival or +made and +ackwal)")
    if not setups:
        parser.error(f"--setups: a comma-separated subset of {','.join(SETUPS)}")
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-latency-") as tmp:
        work = Path(args.log_dir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        with three_zones(ZONES, mode="loopback", log_dir=work, brokers_own_s3=args.brokers_own_s3,
                         broker=args.broker) as env:
            for setup in setups:
                results.append(run_setup(env, setup, args, work))
    direct = next((r for r in results if r["setup"] == "direct"), None)
    print(f"{'setup':<22}{'linger':>7}{'p50 ms':>9}{'p99 ms':>9}{'objects/s':>10}{'librdkafka MB/s':>17}"
          f"{'kafka-python MB/s':>19}{'rdk vs direct':>15}{'kp vs direct':>14}")
    for r in results:
        ratio = r["librdkafka_mb_s"] / direct["librdkafka_mb_s"] if direct else float("nan")
        kp_ratio = r["kafka_python_mb_s"] / direct["kafka_python_mb_s"] if direct else float("nan")
        print(f"{r['setup']:<22}{r['linger_ms']:>7}{r['p50_ms']:>9.1f}{r['p99_ms']:>9.1f}{r['objects_per_s']:>10.1f}"
              f"{r['librdkafka_mb_s']:>17.3f}{r['kafka_python_mb_s']:>19.3f}{ratio:>15.2f}{kp_ratio:>14.2f}")
    wal = [r for r in results if r["setup"] != "direct" and r["stages"]]
    if wal:
        # Where a WAL batch's time goes (the proxy's and the agent's audit records of the paced
        # topic), next to what the producer saw above the direct route in the same run.
        columns = list(named_stages({}))
        print(f"\n{'stages, ms (p50 / p99)':<22}{'added p50':>10}{'added p99':>10}"
              + "".join(f"{c:>15}" for c in columns))
        for r in wal:
            p50, p99 = named_stages(r["stages"], "p50"), named_stages(r["stages"], "p99")
            added = ((r["p50_ms"] - direct["p50_ms"], r["p99_ms"] - direct["p99_ms"]) if direct
                     else (float("nan"), float("nan")))
            print(f"{r['setup']:<22}{added[0]:>10.1f}{added[1]:>10.1f}"
                  + "".join(f"{p50[c]:>7.1f} /{p99[c]:>6.1f}" for c in columns))
    if args.stages:
        for r in results:
            print(f"\n{r['setup']}: the paced topic's batches per stage (ms; records per batch)")
            for name, v in r["stages"].items():
                print(f"  {name:<32} n={v['n']:<6} p50={v['p50']:8.1f} p99={v['p99']:8.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
