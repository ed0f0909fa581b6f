"""What an idle sidecar costs its host: CPU and wake-ups per second of a proxy and an agent
with nothing to do, from several source trees side by side.

Strategy: a fleet runs a proxy next to every producer and agents in every zone, most of them
idle much of the day, so their cost at rest is paid many times over: the CPU they take, and
how often they wake a core (each wake-up keeps a core from its deep idle states and a
vCPU's steal budget ticking). For each tree (`--trees OLD,NEW`, checkouts of the project,
e.g. `git worktree add /tmp/before <commit>`) one proxy and one agent run from that tree's
sources, in front of one Tansu broker and one moto, with the audit on (the default
configuration); once all have settled, every process is read over the same window, so the
host's drift is the same for all. CPU from the scheduler's per-thread counters (/proc/<pid>/task/*/schedstat), wake-ups as the voluntary
context switches of all the process's threads (/proc/<pid>/task/*/status): each is a thread
that blocked and was woken. The event loop's thread apart from the others, so the reader sees who wakes.

Prints per tree and component CPU ms per second and wake-ups per second (median over
rounds), the threads' shares, and each tree's ratio to the first.

Usage:
  .venv/bin/python bench/bench_idle.py --trees /tmp/before,. [--seconds 30] [--rounds 2] [--settle-seconds 10]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_proxy import sidecar_process  # noqa: E402
from deploy.local.processes import free_port, start_moto, start_tansu  # noqa: E402


@dataclass
class Sample:
    """A process's CPU seconds and its threads' voluntary context switches, at one moment."""

    cpu_s: float
    switches: dict[str, int] = field(default_factory=dict)  # "main" or "other threads" -> voluntary switches


def sample(pid: int) -> Sample:
    """CPU time (the scheduler's nanoseconds, not /proc/<pid>/stat's 10 ms ticks: an idle
    process takes a few ms a second) and voluntary switches of `pid`'s threads now, the
    event loop's ("main") apart from the others'. A thread that ended between two samples
    drops out of the second: an idle process starts none."""
    cpu_ns = 0
    switches = {"main": 0, "other threads": 0}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            cpu_ns += int((task / "schedstat").read_text().split()[0])
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    switches["main" if task.name == str(pid) else "other threads"] += int(line.split()[1])
        except FileNotFoundError:  # the thread ended between the listing and the read
            continue
    return Sample(cpu_ns / 1e9, switches)


def rates(before: Sample, after: Sample, seconds: float) -> tuple[float, float, dict[str, float]]:
    """CPU ms per second, wake-ups per second, and wake-ups per second by thread name."""
    by_thread = {name: (count - before.switches.get(name, 0)) / seconds for name, count in after.switches.items()}
    return (after.cpu_s - before.cpu_s) * 1000 / seconds, sum(by_thread.values()), by_thread


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trees", default=".", help="comma-separated checkouts; the first is the baseline")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of each measured window")
    parser.add_argument("--rounds", type=int, default=2, help="windows, one after the other")
    parser.add_argument("--settle-seconds", type=float, default=10.0,
                        help="wait after the last process started (start-up work is not idle)")
    args = parser.parse_args(argv)
    trees = [Path(t) for t in args.trees.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-idle-") as tmp, contextlib.ExitStack() as stack:
        log_dir = Path(tmp)
        moto = stack.enter_context(start_moto(log_dir=log_dir))
        bucket = "bench-idle"
        moto.create_bucket(bucket)
        tansu = stack.enter_context(start_tansu(log_dir=log_dir))
        wal = {"bucket": bucket, "region": "us-east-1", "prefix": "wal/", "endpoint_url": moto.endpoint_url}
        pids: dict[tuple[str, str], int] = {}
        for i, tree in enumerate(trees):
            label = f"{i}:{tree}"
            agent_port, proxy_port = free_port(), free_port()
            agent = stack.enter_context(sidecar_process("agent", {
                "zone": "use1-az2", "upstream": {"bootstrap_servers": [tansu.bootstrap]}, "wal": wal,
                "agent": {"listen_host": "127.0.0.1", "listen_port": agent_port},
                "audit": {"enabled": True, "output": str(log_dir / f"audit-agent-{i}")},
            }, log_dir, f"agent-{i}", agent_port, tree))
            proxy = stack.enter_context(sidecar_process("proxy", {
                "zone": "use1-az1", "upstream": {"bootstrap_servers": [tansu.bootstrap]}, "wal": wal,
                "proxy": {"listen_host": "127.0.0.1", "listen_port": proxy_port, "proxy_id": f"proxy-{i}"},
                "notify": {"agents": {"use1-az2": f"127.0.0.1:{agent_port}"}},
                "audit": {"enabled": True, "output": str(log_dir / f"audit-proxy-{i}")},
            }, log_dir, f"proxy-{i}", proxy_port, tree))
            pids[(label, "proxy")], pids[(label, "agent")] = proxy.pid, agent.pid
        time.sleep(args.settle_seconds)  # measurement, not synchronization: start-up is not idle
        results: dict[tuple[str, str], list[tuple[float, float, dict[str, float]]]] = {key: [] for key in pids}
        for round_no in range(args.rounds):
            before = {key: sample(pid) for key, pid in pids.items()}
            started = time.monotonic()
            time.sleep(args.seconds)  # the measured window
            seconds = time.monotonic() - started
            for key, pid in pids.items():
                results[key].append(rates(before[key], sample(pid), seconds))
            print(f"round {round_no + 1}: " + "; ".join(
                f"{label} {kind} {r[-1][0]:.2f} ms/s {r[-1][1]:.1f} wake-ups/s" for (label, kind), r in results.items()))
        print(f"\nidle, {args.rounds} windows of {args.seconds:.0f} s (medians):")
        first: dict[str, tuple[float, float]] = {}
        for (label, kind), rows in results.items():
            cpu = statistics.median(r[0] for r in rows)
            wakes = statistics.median(r[1] for r in rows)
            threads = {name: statistics.median(r[2].get(name, 0.0) for r in rows) for name in rows[-1][2]}
            split = ", ".join(f"{name} {rate:.1f}" for name, rate in sorted(threads.items(), key=lambda t: -t[1]) if rate)
            base = first.setdefault(kind, (cpu, wakes))
            ratio = f"  x{cpu / base[0]:.2f} CPU, x{wakes / base[1]:.2f} wake-ups" if base[0] and base[1] else ""
            print(f"  {label:<28} {kind:<6} {cpu:6.2f} ms CPU/s {wakes:6.1f} wake-ups/s ({split}){ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
