"""The previous release's code, from this checkout's git history, for compatibility tests.

The previous release, for the notification protocol, is the last commit whose
`PROTOCOL_VERSION` was one less than today's: the parent of the commit that introduced
today's value (`git log -G`). Its tree is extracted with `git archive` under the test's
temporary directory and run from there (its packages first on PYTHONPATH); nothing of it
is vendored. Without git, or in a clone whose history does not reach that commit (a
shallow clone), the tests skip and say why.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from leader_notify import protocol as p
from tests.integration.leader_notify.helpers import KEYS

REPO = Path(__file__).resolve().parents[3]
GIT_TIMEOUT_S = 60.0
SCRIPT_TIMEOUT_S = 90.0


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, timeout=GIT_TIMEOUT_S, check=False)


def previous_release_commit() -> str:
    """The last commit whose notify protocol version was PROTOCOL_VERSION - 1. Skips the
    test when git or the history is not there."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed: the previous release's code comes from this checkout's history")
    checkout = _git("rev-parse", "--git-dir")
    if checkout.returncode != 0:
        pytest.skip(f"git cannot read {REPO} ({checkout.stderr.decode().strip()}): the previous release's code "
                    "comes from its history")
    version = p.PROTOCOL_VERSION
    found = _git("log", "--reverse", "--format=%H", "-G", rf"^PROTOCOL_VERSION = {version}( |$)", "--",
                 "leader_notify/protocol.py")
    introduced = found.stdout.decode().split()
    if not introduced:
        pytest.skip(f"no commit in this checkout's history sets PROTOCOL_VERSION = {version} (not committed yet?)")
    parent = _git("rev-parse", "--verify", "--quiet", f"{introduced[0]}^")
    if parent.returncode != 0:
        pytest.skip(f"the parent of {introduced[0][:12]} (which set PROTOCOL_VERSION = {version}) is not in this "
                    "clone (shallow?): fetch more history to run the previous release")
    return parent.stdout.decode().strip()


def extract_previous_release(dest: Path) -> Path:
    """The previous release's tree under `dest`; checks that it speaks PROTOCOL_VERSION - 1."""
    commit = previous_release_commit()
    archive = _git("archive", "--format=tar", commit)
    assert archive.returncode == 0, archive.stderr.decode()
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")
    text = (dest / "leader_notify" / "protocol.py").read_text()
    assert f"\nPROTOCOL_VERSION = {p.PROTOCOL_VERSION - 1}" in text, f"{commit} does not speak v{p.PROTOCOL_VERSION - 1}"
    (dest / "COMMIT").write_text(commit)
    return dest


# Run with the previous release's packages: its NotifySender and ZoneNotifier notify the
# objects described in argv[1] (JSON) to one agent, pipelined (notify.pipeline_depth 4),
# and print each object's results and how many pipelined answers applied every entry.
OLD_PROXY = r'''
import json, sys, types
import trio
from azsidecar.config import load_config
from core.audit import MemoryAuditSink
from leader_notify.sender.notifier import ZoneNotifier
from leader_notify.sender.pipeline import Pipeline
from leader_notify.sender.sender import NotifySender

args = json.loads(sys.argv[1])
zone = args["zone"]
config = load_config(None, {"wal.bucket": args["bucket"], "wal.region": "us-east-1", "notify.hmac_keys": args["keys"],
                            "notify.agents": {zone: args["agent"]}, "notify.pipeline_depth": 4,
                            "notify.timeout_s": 10.0})
piped = []  # per pipelined answer: did it apply every entry?


class CountingPipe:
    def __init__(self, *a):
        self.pipe = Pipeline(*a)

    async def send(self, flushed, on_answer):
        def answered(value):
            piped.append(not isinstance(value, Exception) and all(r.error_code == 0 for r in value))
            on_answer(value)
        await self.pipe.send(flushed, answered)


async def main():
    sender = NotifySender(config.notify, "az1", "proxy-old", 1, MemoryAuditSink(), bucket=args["bucket"])
    results = {}
    try:
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                notifier = ZoneNotifier(zone, sender, nursery, open_pipe=CountingPipe)
                for o in args["objects"]:
                    entries = tuple(types.SimpleNamespace(**e) for e in o["entries"])
                    share = types.SimpleNamespace(offset=o["offset"], length=o["length"], entries=entries)
                    flushed = types.SimpleNamespace(key=o["key"], zones={zone: share}, share_runs={})
                    notifier.announce(flushed)
                    for _ in entries:
                        notifier.on_result(o["key"], lambda v, k=o["key"]: results.__setitem__(
                            k, repr(v) if isinstance(v, Exception) else [[r.error_code, r.base_offset] for r in v]))
                await notifier.wait_idle()
                nursery.cancel_scope.cancel()
    finally:
        await sender.aclose()
    print(json.dumps({"results": results, "piped": piped}))


trio.run(main)
'''


def run_old_proxy(tree: Path, *, zone: str, agent: str, bucket: str, objects: list) -> dict:
    """Notify `objects` (put_object's Flushed) to `agent` with the previous release's proxy
    code, pipelined; its JSON report. Raises AssertionError if the script fails."""
    described = [{
        "key": o.key, "offset": o.zones[zone].offset, "length": o.zones[zone].length,
        "entries": [{f: getattr(e, f) for f in ("topic", "partition", "offset", "length", "crc32c", "record_count",
                                                "producer_id", "producer_epoch", "base_sequence")}
                    for e in o.zones[zone].entries],
    } for o in objects]
    args = json.dumps({"zone": zone, "agent": agent, "bucket": bucket, "keys": list(KEYS), "objects": described})
    done = subprocess.run([sys.executable, "-c", OLD_PROXY, args], cwd=tree, capture_output=True,
                          timeout=SCRIPT_TIMEOUT_S, env={**os.environ, "PYTHONPATH": str(tree)}, check=False)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return json.loads(done.stdout.decode().strip().splitlines()[-1])
