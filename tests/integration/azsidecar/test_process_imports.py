"""Each process loads only its own event loop's libraries: the agent (asyncio) no trio, the
proxy (trio) no asyncio. Importing the other's cost every start ~0.1 s of CPU (trio in the
agent, through the shared monitor, the WAL store's limiter types and the object-key regexes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def loaded_after_import(module: str, candidates: list[str]) -> list[str]:
    """Which of `candidates` a fresh interpreter has in sys.modules after importing `module`."""
    code = (f"import json, sys; import {module}; "
            f"print(json.dumps([m for m in {candidates!r} if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


@pytest.mark.parametrize(("runner", "foreign"), [
    ("azsidecar.run_agent", ["trio", "trio._core"]),
    ("azsidecar.run_proxy", ["asyncio", "aiokafka", "uvloop"]),
])
def test_a_process_runner_does_not_load_the_other_event_loop(runner, foreign):
    assert loaded_after_import(runner, foreign) == []


def test_the_check_sees_what_a_runner_does_load():
    assert loaded_after_import("azsidecar.run_agent", ["asyncio", "aiokafka"]) == ["asyncio", "aiokafka"]
    assert loaded_after_import("azsidecar.run_proxy", ["trio"]) == ["trio"]
