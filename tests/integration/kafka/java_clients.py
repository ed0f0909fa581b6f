"""Apache Kafka's own Java clients, run from the cached jars: console producer and
consumer, and ProducerPerformance. Options are the ones both 3.9 and 4.x accept
(`--producer-property`, `--property`; 4.x names them anew and keeps the old names)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from deploy.local.kafka_cluster import java_command

JAVA_TIMEOUT_S = 120.0
CLIENT_HEAP_MB = 256


def run_java(version: str, main_class: str, args: Sequence[str], *, stdin: bytes | None = None,
             timeout_s: float = JAVA_TIMEOUT_S, log_dir: Path | None = None) -> subprocess.CompletedProcess:
    argv = java_command(version, main_class, *args, heap_mb=CLIENT_HEAP_MB, log_dir=log_dir)
    return subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout_s)


def console_producer_class(version: str) -> str:
    # The console producer moved from the broker's Scala code to kafka-tools in 4.0.
    return "kafka.tools.ConsoleProducer" if version.startswith("3.") else "org.apache.kafka.tools.ConsoleProducer"


def _props(flag: str, props: Mapping[str, str]) -> list[str]:
    out: list[str] = []
    for k, v in props.items():
        out += [flag, f"{k}={v}"]
    return out


def console_produce(version: str, bootstrap: str, topic: str, lines: Iterable[bytes],
                    props: Mapping[str, str], key_separator: str | None = None) -> subprocess.CompletedProcess:
    """kafka-console-producer: one record per line (key|value with key_separator). Raises AssertionError on failure."""
    args = ["--bootstrap-server", bootstrap, "--topic", topic, *_props("--producer-property", props)]
    if key_separator is not None:
        args += ["--property", "parse.key=true", "--property", f"key.separator={key_separator}"]
    done = run_java(version, console_producer_class(version), args, stdin=b"\n".join(lines) + b"\n")
    err = done.stderr.decode(errors="replace")
    assert done.returncode == 0 and "ERROR" not in err, f"console producer (exit {done.returncode}): {err[-3000:]}"
    return done


def producer_performance(version: str, bootstrap: str, topic: str, records: int,
                         props: Mapping[str, str]) -> str:
    """kafka-producer-perf-test with monotonic payloads ("0", "1", ...); returns its stdout.

    It exits 0 even when sends fail: the caller checks the `N records sent` line.
    """
    args = ["--topic", topic, "--num-records", str(records), "--throughput", "-1", "--payload-monotonic",
            "--producer-props", f"bootstrap.servers={bootstrap}", *(f"{k}={v}" for k, v in props.items())]
    done = run_java(version, "org.apache.kafka.tools.ProducerPerformance", args)
    out = done.stdout.decode(errors="replace")
    assert done.returncode == 0, f"ProducerPerformance (exit {done.returncode}): {done.stderr.decode()[-3000:]}"
    return out


def console_consume(version: str, bootstrap: str, topic: str, max_messages: int,
                    props: Mapping[str, str] | None = None, timeout_ms: int = 60_000) -> list[tuple[int, str]]:
    """kafka-console-consumer from the beginning: [(partition, value)] in the order it printed them."""
    args = ["--bootstrap-server", bootstrap, "--topic", topic, "--from-beginning",
            "--max-messages", str(max_messages), "--timeout-ms", str(timeout_ms),
            "--property", "print.partition=true", "--property", "print.value=true",
            *_props("--consumer-property", props or {})]
    done = run_java(version, "org.apache.kafka.tools.consumer.ConsoleConsumer", args,
                    timeout_s=timeout_ms / 1000 + JAVA_TIMEOUT_S)
    out: list[tuple[int, str]] = []
    for line in done.stdout.decode(errors="replace").splitlines():
        head, _, value = line.partition("\t")
        if head.startswith("Partition:"):
            out.append((int(head.split(":", 1)[1]), value))
    return out


def reassign_partitions(version: str, bootstrap: str, topic: str, replicas: Mapping[int, Sequence[int]],
                        work_dir: Path) -> None:
    """kafka-reassign-partitions --execute: each partition's replica list, in this order."""
    plan = {"version": 1, "partitions": [{"topic": topic, "partition": p, "replicas": list(r)}
                                         for p, r in replicas.items()]}
    path = work_dir / f"reassign-{topic}.json"
    path.write_text(json.dumps(plan))
    done = run_java(version, "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
                    ["--bootstrap-server", bootstrap, "--reassignment-json-file", str(path), "--execute"])
    out = done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")
    assert done.returncode == 0 and "Successfully started" in out, out[-3000:]


def elect_preferred_leaders(version: str, bootstrap: str, topic: str, partitions: Iterable[int],
                            work_dir: Path) -> str:
    """kafka-leader-election --election-type PREFERRED for these partitions; returns its output."""
    plan = {"partitions": [{"topic": topic, "partition": p} for p in partitions]}
    path = work_dir / f"elect-{topic}.json"
    path.write_text(json.dumps(plan))
    done = run_java(version, "org.apache.kafka.tools.LeaderElectionCommand",
                    ["--bootstrap-server", bootstrap, "--election-type", "PREFERRED", "--path-to-json-file", str(path)])
    out = done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")
    assert done.returncode == 0, out[-3000:]
    return out
