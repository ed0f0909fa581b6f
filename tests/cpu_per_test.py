"""CPU seconds per test: what each test costs the machine, beside how long it took.

The suite is CPU-bound on a 2-core host (about 1.8 of the 2 cores through a run), so its
length follows the CPU its tests spend, and wall seconds (`--durations`, group_seconds.py)
do not say which tests spend it: a test waiting out a time-out costs nothing, one that
drives three zones of brokers, proxies and agents costs a core.

Opt in with the plugin and a path prefix:

    AZSIDECAR_CPU_PER_TEST=/tmp/cpu .venv/bin/python -m pytest -p tests.cpu_per_test ... tests
    .venv/bin/python -m tests.cpu_per_test /tmp/cpu-*.jsonl

Each pytest process (each xdist worker) appends one JSON line per test to
`<prefix>-<worker>.jsonl`: the test's node id, its wall seconds and the CPU seconds (user +
system) its worker's process tree spent meanwhile: the worker itself, every live descendant
(a shared environment's brokers, moto and Spark JVM included: they work for the test that
runs) and the children reaped meanwhile (counted by their parents in /proc). A process that
left the tree (re-parented to init) is missed.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path

ENV = "AZSIDECAR_CPU_PER_TEST"
TICKS_PER_S = os.sysconf("SC_CLK_TCK")

# pid -> (parent pid, its own CPU ticks, the ticks of the children it reaped)
Snapshot = Mapping[int, tuple[int, int, int]]


def parse_stat(text: str) -> tuple[int, int, int, int]:
    """(pid, parent pid, own ticks, reaped children's ticks) from a /proc/<pid>/stat line.
    The command name may hold spaces and parentheses: the fields follow its last ')'."""
    pid = int(text[: text.index(" ")])
    fields = text[text.rindex(")") + 2 :].split()
    # fields[0] is the state (stat's 3rd field): ppid is the 4th, utime..cstime the 14th-17th
    return pid, int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])


def snapshot(proc: Path = Path("/proc")) -> dict[int, tuple[int, int, int]]:
    """Every process's (parent, own ticks, reaped ticks) now; processes that end meanwhile are skipped."""
    out: dict[int, tuple[int, int, int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            pid, ppid, own, reaped = parse_stat((entry / "stat").read_text())
        except (OSError, ValueError, IndexError):
            continue
        out[pid] = (ppid, own, reaped)
    return out


def tree_ticks(processes: Snapshot, root: int) -> int:
    """CPU ticks of `root` and all its descendants, each with the children it reaped."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _own, _reaped) in processes.items():
        children.setdefault(ppid, []).append(pid)
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        if pid in processes:
            _ppid, own, reaped = processes[pid]
            total += own + reaped
        stack.extend(children.get(pid, ()))
    return total


def by_file(rows: Iterable[Mapping[str, object]]) -> list[tuple[str, float, float, int]]:
    """(test file, CPU s, wall s, tests) per file, most CPU first."""
    cpu: Counter[str] = Counter()
    wall: Counter[str] = Counter()
    tests: Counter[str] = Counter()
    for row in rows:
        path = str(row["nodeid"]).split("::", 1)[0]
        cpu[path] += float(row["cpu_s"])  # type: ignore[arg-type]
        wall[path] += float(row["wall_s"])  # type: ignore[arg-type]
        tests[path] += 1
    return [(path, round(cpu[path], 1), round(wall[path], 1), tests[path]) for path, _ in cpu.most_common()]


_started: dict[str, tuple[float, int]] = {}


def _out_path() -> Path | None:
    prefix = os.environ.get(ENV)
    if not prefix:
        return None
    return Path(f"{prefix}-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.jsonl")


def pytest_runtest_logstart(nodeid: str, location: object) -> None:
    if _out_path() is not None:
        _started[nodeid] = (time.monotonic(), tree_ticks(snapshot(), os.getpid()))


def pytest_runtest_logfinish(nodeid: str, location: object) -> None:
    out = _out_path()
    start = _started.pop(nodeid, None)
    if out is None or start is None:
        return
    wall_s = time.monotonic() - start[0]
    cpu_s = (tree_ticks(snapshot(), os.getpid()) - start[1]) / TICKS_PER_S
    with out.open("a") as f:
        f.write(json.dumps({"nodeid": nodeid, "wall_s": round(wall_s, 2), "cpu_s": round(cpu_s, 2)}) + "\n")


def main(paths: list[str]) -> int:
    if not paths:
        print("usage: python -m tests.cpu_per_test <prefix>-*.jsonl", file=sys.stderr)
        return 2
    rows = [json.loads(line) for path in paths for line in Path(path).read_text().splitlines() if line]
    table = by_file(rows)
    print(f"{len(rows)} tests, {sum(r[1] for r in table):.0f} CPU-s, {sum(r[2] for r in table):.0f} test-s")
    print(f"{'CPU s':>8} {'wall s':>8} {'tests':>5}  file")
    for path, cpu_s, wall_s, tests in table:
        print(f"{cpu_s:8.1f} {wall_s:8.1f} {tests:5d}  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
