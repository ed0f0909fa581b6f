"""What TLS and SASL cost: on the client listener (plaintext vs TLS vs SASL_SSL with
SCRAM-SHA-512) and on the upstream connection (plaintext vs TLS to the brokers).

Strategy: one memory-backed Tansu broker and three `azsidecar proxy` processes in front of
it, identical but for the listener's security. The same confluent-kafka workload (1 KiB
records, acks=all, idempotence on, linger.ms=5, saturated) runs against each in turn,
several rounds in one run, so drift of a shared machine hits all three alike; ratios are
against plaintext. It also times logins: a fresh producer's first delivered record
(connect, TLS handshake, SASL exchange with 8192 PBKDF2 iterations, metadata, produce),
median of several. The proxy's CPU per record is read from /proc (steadier than wall time).
Upstream TLS is measured with a second proxy in front of the first (Tansu serves no TLS):
client -> proxy B (plaintext listener) -> proxy A (plaintext or TLS listener) -> Tansu,
where B's CPU per record is what TLS to the brokers costs the sidecar. librdkafka runs
with socket.nagle.disable=true: with Nagle on, its TLS writes wait for delayed ACKs and
halve TLS throughput, which is a client setting, not the proxy's cost.

Usage:
  .venv/bin/python -m bench.bench_security [--records 20000] [--rounds 3] [--logins 10]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer

from bench.bench_proxy import RECORD_BYTES, cpu_seconds, create_topic, percentile
from deploy.local.processes import free_port, start_tansu, stop_process, wait_for_port
from proxy.sasl import format_credential, scram_credential
from tests.integration.security._certs import make_certs

PARTITIONS = 6
FLUSH_TIMEOUT_S = 120.0
PROXY_STARTUP_TIMEOUT_S = 20.0
USER, PASSWORD = "bench", "bench-password-1"
EXTRA: dict = {"socket.nagle.disable": True}


def start_proxy(name: str, tansu_bootstrap: str, log_dir: Path, proxy_settings: str,
                upstream_settings: str = "") -> tuple[subprocess.Popen, int]:
    port = free_port()
    config = log_dir / f"{name}.toml"
    config.write_text(f'[audit]\nenabled = false\noutput = "{log_dir / "audit"}"\n[proxy]\n{proxy_settings}'
                      f'[upstream]\n{upstream_settings}')
    log_path = log_dir / f"{name}.log"
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "azsidecar", "proxy", "--listen", f"127.0.0.1:{port}", "--bootstrap-servers",
             tansu_bootstrap, "--zone", "use1-az1", "--log-level", "WARNING", "--config", str(config)],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    wait_for_port("127.0.0.1", port, proc, PROXY_STARTUP_TIMEOUT_S, f"proxy {name}", log_path)
    return proc, port


def saturated_round(settings: dict, topic: str, records: int, pid: int) -> tuple[float, list[float], float]:
    """(records/s, latencies ms, proxy CPU µs per record)."""
    producer = Producer({**settings, "acks": "all", "enable.idempotence": True, "linger.ms": 5, **EXTRA,
                         "queue.buffering.max.kbytes": 256 * 1024})
    producer.produce(topic, b"warm-up")
    assert producer.flush(30) == 0, "warm-up record not delivered"
    latencies: list[float] = []
    failures: list = []
    value = b"v" * RECORD_BYTES
    cpu_before = cpu_seconds(pid)
    started = time.perf_counter()
    for _ in range(records):
        sent_at = time.perf_counter()

        def delivered(err, _msg, t=sent_at) -> None:
            if err is not None:
                failures.append(err)
            latencies.append((time.perf_counter() - t) * 1000)

        while True:
            try:
                producer.produce(topic, value, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.001)  # local queue full: let deliveries drain
        producer.poll(0)
    assert producer.flush(FLUSH_TIMEOUT_S) == 0, "records left undelivered"
    elapsed = time.perf_counter() - started
    assert not failures, failures[:3]
    return records / elapsed, latencies, (cpu_seconds(pid) - cpu_before) / records * 1e6


def login_s(settings: dict, topic: str) -> float:
    """Seconds from a new producer to its first delivered record."""
    started = time.perf_counter()
    producer = Producer({**settings, "acks": "all"})
    producer.produce(topic, b"login")
    assert producer.flush(30) == 0, "login record not delivered"
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=20_000, help="records per saturated round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per listener (alternating)")
    parser.add_argument("--logins", type=int, default=10, help="fresh producers timed per listener")
    args = parser.parse_args(argv)

    log_dir = Path(tempfile.mkdtemp(prefix="bench-security-"))
    certs = make_certs(log_dir)
    users = log_dir / "users.toml"
    users.write_text(format_credential(USER, scram_credential(PASSWORD, "SCRAM-SHA-512")))
    users.chmod(0o600)  # the proxy refuses a users file others can read
    tls = f'tls_cert_file = "{certs.cert_file}"\ntls_key_file = "{certs.key_file}"\n'
    variants = {
        "plaintext": ("", {}),
        "tls": (tls, {"security.protocol": "SSL", "ssl.ca.location": str(certs.ca_file)}),
        "sasl_ssl": (tls + f'sasl_mechanisms = ["SCRAM-SHA-512"]\nsasl_users_file = "{users}"\n',
                     {"security.protocol": "SASL_SSL", "ssl.ca.location": str(certs.ca_file),
                      "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": USER, "sasl.password": PASSWORD}),
    }
    with start_tansu(log_dir=log_dir) as tansu:
        procs = {}
        try:
            targets = {}
            for name, (proxy_settings, client_settings) in variants.items():
                proc, port = start_proxy(name, tansu.bootstrap, log_dir, proxy_settings)
                procs[name] = proc
                targets[name] = ({"bootstrap.servers": f"127.0.0.1:{port}", **client_settings}, proc.pid)
            for name, front, upstream_settings in (
                    ("up_plain", "plaintext", ""),
                    ("up_tls", "tls", f'security_protocol = "SSL"\ntls_ca_file = "{certs.ca_file}"\n')):
                front_bootstrap = targets[front][0]["bootstrap.servers"]
                proc, port = start_proxy(name, front_bootstrap, log_dir, "", upstream_settings)
                procs[name] = proc
                targets[name] = ({"bootstrap.servers": f"127.0.0.1:{port}"}, proc.pid)
            print(f"{RECORD_BYTES} B records, acks=all, idempotence on, linger.ms=5, {PARTITIONS} partitions, "
                  f"{args.records} records x {args.rounds} rounds per listener, audit off")
            results: dict[str, list] = {name: [] for name in targets}
            for _ in range(args.rounds):
                for name, (settings, pid) in targets.items():
                    results[name].append(saturated_round(settings, create_topic(tansu.bootstrap, PARTITIONS),
                                                         args.records, pid))
            logins: dict[str, list[float]] = {name: [] for name in targets}
            login_topic = create_topic(tansu.bootstrap, 1)
            for _ in range(args.logins):
                for name, (settings, _pid) in targets.items():
                    logins[name].append(login_s(settings, login_topic))
        finally:
            for proc in procs.values():
                stop_process(proc)
    print("client listener (proxy in front of Tansu):")
    for name, rounds in results.items():
        if name == "up_plain":
            print("upstream (client -> proxy B -> proxy A -> Tansu; cpu is proxy B's):")
        rate = statistics.median(r[0] for r in rounds)
        lat = [x for r in rounds for x in r[1]]
        cpu = statistics.median(r[2] for r in rounds)
        login = statistics.median(logins[name])
        ref_name = "up_plain" if name.startswith("up_") else "plaintext"
        ref = statistics.median(r[0] for r in results[ref_name])
        base_login = statistics.median(logins[ref_name])
        print(f"  {name:9s} {rate:8.0f} rec/s ({rate / ref:5.3f} of plaintext)  p50 {percentile(lat, 0.5):6.2f} ms "
              f"p99 {percentile(lat, 0.99):7.2f} ms  proxy cpu {cpu:6.1f} us/rec  "
              f"first record {login * 1000:6.1f} ms ({login / base_login:4.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
