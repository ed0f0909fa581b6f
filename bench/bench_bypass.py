"""Same-zone produce: direct to the broker vs through the proxy with the bypass vs without it.

Strategy: one memory-backed Tansu broker, placed in the proxy's zone (use1-az1) with
`router.broker_zones`, and two `azsidecar proxy` processes in front of it: one with
`proxy.broker_listeners` and `proxy.bypass_same_zone` (its Metadata names the broker at
its real address, so the producer's batches go to Tansu itself), one as configured by
default (every batch through Python). The same confluent-kafka workload as
bench/bench_proxy.py (1 KiB records, acks=all, idempotence on, linger.ms=5; a fresh
6-partition topic per round) runs against the three targets in alternating rounds in one
run, so machine drift hits all alike. Two phases: saturated (throughput) and paced (the
latency added to an unhurried producer). Per target: median records/s, p50/p99 delivery
latency, the ratio to direct and the p50 added, against the goal (>= 0.95x, <= 1 ms);
and the CPU time per record of the process the producer was pointed at (Tansu for direct,
the proxy otherwise: near zero with the bypass, because the batches do not pass it).

Before measuring it checks that the bypass is in effect: the bypassing proxy's Metadata
names Tansu's own port.

Usage:
  .venv/bin/python bench/bench_bypass.py [--records 300000] [--rounds 5] [--paced-rate 2000]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka.admin import AdminClient

from bench.bench_proxy import PARTITIONS, RECORD_BYTES, RoundResult, percentile, run_phases
from deploy.local.processes import free_port, start_tansu, stop_process, wait_for_port

PROXY_STARTUP_TIMEOUT_S = 30.0
ZONE = "use1-az1"
GOAL_RATIO = 0.95
GOAL_P50_ADDED_MS = 1.0
TARGETS = ("direct", "bypass", "proxy")


def broker_node_id(bootstrap: str) -> int:
    brokers = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).brokers
    if len(brokers) != 1:
        raise SystemExit(f"expected one Tansu broker, Metadata names {sorted(brokers)}")
    return next(iter(brokers))


def start_proxy(log_dir: Path, name: str, bootstrap: str, extra_toml: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    config = log_dir / f"{name}.toml"
    config.write_text(f'zone = "{ZONE}"\n[upstream]\nbootstrap_servers = ["{bootstrap}"]\n'
                      f'[proxy]\nlisten_host = "127.0.0.1"\nlisten_port = {port}\nproxy_id = "bench-{name}"\n'
                      f'{extra_toml}[audit]\noutput = "{log_dir / f"audit-{name}"}"\n')
    log = log_dir / f"{name}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "azsidecar", "proxy", "--config", str(config),
                                 "--log-level", "WARNING"], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        wait_for_port("127.0.0.1", port, proc, PROXY_STARTUP_TIMEOUT_S, f"azsidecar proxy ({name})", log)
    except BaseException:
        stop_process(proc)
        raise
    return proc, port


def check_bypass(proxy_bootstrap: str, tansu_bootstrap: str) -> None:
    """Raises SystemExit unless the bypassing proxy names the broker at its own address."""
    brokers = AdminClient({"bootstrap.servers": proxy_bootstrap}).list_topics(timeout=10).brokers
    named = {f"{b.host}:{b.port}" for b in brokers.values()}
    if named != {tansu_bootstrap}:
        raise SystemExit(f"the bypass is not in effect: the proxy names {named}, Tansu is {tansu_bootstrap}")


def summarize(results: list[RoundResult], target: str) -> dict[str, float]:
    mine = [r for r in results if r.target == target]
    latencies = [x for r in mine for x in r.latencies_ms]
    return {"records_per_s": statistics.median(r.records_per_s for r in mine),
            "mb_per_s": statistics.median(r.mb_per_s for r in mine),
            "p50_ms": percentile(latencies, 0.50), "p99_ms": percentile(latencies, 0.99),
            "cpu_us_per_record": statistics.median(r.server_cpu_s / r.records * 1e6 for r in mine)}


def report(phase: str, results: list[RoundResult]) -> dict[str, dict[str, float]]:
    out = {t: summarize(results, t) for t in TARGETS}
    print(f"\n== {phase} ==")
    for r in results:
        print(f"  {r.target:6s} {r.records:7d} records {r.elapsed_s:7.2f}s  {r.records_per_s:9.0f} rec/s "
              f"p50 {percentile(list(r.latencies_ms), 0.5):7.2f} ms  p99 {percentile(list(r.latencies_ms), 0.99):7.2f} ms")
    d = out["direct"]
    for t, s in out.items():
        line = (f"  {t:6s} median {s['records_per_s']:9.0f} rec/s {s['mb_per_s']:7.2f} MB/s  p50 {s['p50_ms']:7.2f} ms "
                f"p99 {s['p99_ms']:7.2f} ms  cpu {s['cpu_us_per_record']:6.1f} us/rec")
        if t != "direct":
            ratio = s["records_per_s"] / d["records_per_s"]
            added = s["p50_ms"] - d["p50_ms"]
            met = ratio >= GOAL_RATIO and added <= GOAL_P50_ADDED_MS
            line += (f"  | {ratio:.3f}x direct, p50 added {added:+.2f} ms "
                     f"(goal >= {GOAL_RATIO}x, <= {GOAL_P50_ADDED_MS:.0f} ms: {'met' if met else 'NOT met'})")
        print(line)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=300_000, help="records per saturated round (a round of ~1 s at least: shorter ones are start-up noise)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per target and phase (alternating)")
    parser.add_argument("--paced-rate", type=float, default=2000.0, help="records/s in the paced phase (0 = skip)")
    parser.add_argument("--paced-records", type=int, default=6000, help="records per paced round")
    args = parser.parse_args(argv)

    log_dir = Path(tempfile.mkdtemp(prefix="bench-bypass-"))
    with start_tansu(log_dir=log_dir) as tansu:
        node_id = broker_node_id(tansu.bootstrap)
        bypass_toml = (f'broker_listeners = true\nbypass_same_zone = true\n'
                       f'[router.broker_zones]\n"{node_id}" = "{ZONE}"\n')
        proxies = {"bypass": start_proxy(log_dir, "bypass", tansu.bootstrap, bypass_toml)}
        try:
            proxies["proxy"] = start_proxy(log_dir, "proxy", tansu.bootstrap, "")
            targets = {"direct": (tansu.bootstrap, tansu.proc.pid),
                       **{name: (f"127.0.0.1:{port}", proc.pid) for name, (proc, port) in proxies.items()}}
            check_bypass(targets["bypass"][0], tansu.bootstrap)
            print(f"tansu {tansu.bootstrap} (node {node_id}, placed in {ZONE}); bypass proxy {targets['bypass'][0]}, "
                  f"proxy {targets['proxy'][0]}; {RECORD_BYTES} B records, acks=all, idempotence on, linger.ms=5, "
                  f"{PARTITIONS} partitions, {args.rounds} rounds per target")
            run_phases(tansu.bootstrap, targets, args, report)
        finally:
            for proc, _port in proxies.values():
                stop_process(proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
