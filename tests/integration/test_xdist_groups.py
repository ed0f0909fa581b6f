"""`make test` keeps each xdist group on one worker: the system tier runs one test after another
(its tests assert latency bounds that a second system beside them would eat into) and shared
clusters start once per group. This runs pytest-xdist the way `make test` does on a cheap file
of the system tier and checks where its tests ran."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHEAP_SYSTEM_FILE = "tests/system/deploy_local/test_free_port.py"  # 13 tests, no processes


def test_a_groups_tests_carry_its_name_and_run_on_one_worker():
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider",
                           "-p", "no:randomly", CHEAP_SYSTEM_FILE], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ran = re.findall(r"^\[(gw\d+)\] .*PASSED (\S+)", done.stdout, re.MULTILINE)
    assert len(ran) == 13, done.stdout[-3000:]
    assert all(nodeid.endswith("@system") for _, nodeid in ran), ran
    assert len({worker for worker, _ in ran}) == 1, ran
