"""Seconds each pytest-xdist group of the suite took in a measured `make test` run, so the
run can start the longest groups first (tests/conftest.py, pytest_xdist_make_scheduler).

pytest-xdist hands out groups largest first by number of tests; a group of few but slow tests
(a module that starts its own Kafka cluster) then starts late and runs alone at the end while
the other workers idle: in one run the last five minutes used 1.3-1.6 of the two cores
against ~1.85 before (2026-11-30). The figures are hints only: a group that is missing (new)
counts DEFAULT_TEST_S per test, and a stale figure only changes the order.

Refresh from a run's JUnit report:
    .venv/bin/python -m pytest ... -n 3 --dist loadgroup --junitxml=/tmp/run.xml tests
    .venv/bin/python -m tests.group_seconds /tmp/run.xml
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

FILE = Path(__file__).with_name("group_seconds.json")
DEFAULT_TEST_S = 2.0


def load() -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(FILE.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def expected_s(group: str, tests: int, measured: dict[str, float]) -> float:
    return measured.get(group, tests * DEFAULT_TEST_S)


def from_junit(path: str) -> dict[str, float]:
    """Group -> seconds: xdist appends "@group" to each test's name in the report."""
    seconds: Counter[str] = Counter()
    for case in ET.parse(path).iter("testcase"):
        name = case.get("name", "")
        if "@" in name:
            seconds[name.rsplit("@", 1)[1]] += float(case.get("time") or 0)
    return {group: round(s, 1) for group, s in sorted(seconds.items())}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.group_seconds JUNIT.xml")
    FILE.write_text(json.dumps(from_junit(sys.argv[1]), indent=1, sort_keys=True) + "\n")
    print(f"wrote {FILE}")
