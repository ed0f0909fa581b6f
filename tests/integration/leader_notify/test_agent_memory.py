"""An agent process's memory while objects stream through it: what it holds is its block
cache and the notifications in progress, not every share it has appended (real moto, real
Tansu, the real sender; RSS read from /proc)."""

from __future__ import annotations

import signal

import pytest
import trio

from core.audit import MemoryAuditSink
from leader_notify.sender.sender import NotifySender
from tests.conftest import create_topics, unique_name
from tests.integration.leader_notify.agent_process import AgentProcess
from tests.integration.leader_notify.helpers import config_for, make_batch, put_object
from wal_s3.format import WalEntry

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("dummy_aws_credentials")]

MiB = 1024 * 1024
CACHE_BYTES = 4 * MiB
BATCHES_PER_OBJECT = 12  # of 64 records of 4 KiB: a share of ~3 MiB
WARM_UP_OBJECTS = 4
MEASURED_OBJECTS = 28  # ~84 MiB through the agent after the warm-up
# The cache, a share being read and one being appended, and the heap's slack. A share kept
# after its notification was answered adds ~3 MiB each: 28 of them are ~84 MiB.
MAX_GROWTH_KIB = 24 * 1024


@pytest.fixture
def agent(s3_bucket, tansu, tmp_path):
    server, bucket = s3_bucket
    a = AgentProcess(tmp_path, "agent-memory", "az2", endpoint_url=server.endpoint_url, bucket=bucket,
                     bootstrap=tansu.bootstrap, wal={"cache_bytes": CACHE_BYTES})
    try:
        yield a.start(), server, bucket
    finally:
        a.stop(signal.SIGKILL)


def test_shares_are_freed_once_appended_not_kept_until_a_collection(agent, tansu):
    a, server, bucket = agent
    topic = unique_name("mem")
    create_topics(tansu.bootstrap, {topic: 4})
    batch = make_batch([bytes([i]) * 4096 for i in range(64)])
    s3 = server.client()
    objects = [put_object(s3, bucket, f"wal/mem/obj-{k}", {
        "az2": [WalEntry(topic, i % 4, -1, -1, -1, 64, batch) for i in range(BATCHES_PER_OBJECT)]}, sequence=k)
        for k in range(WARM_UP_OBJECTS + MEASURED_OBJECTS)]
    config = config_for(server.endpoint_url, bucket, tansu.bootstrap, agents={"az2": a.address},
                        **{"notify.timeout_s": 30.0})
    rss: list[int] = []

    async def main() -> list[list[int]]:
        sender = NotifySender(config.notify, "az1", "proxy-a", 1, MemoryAuditSink(), bucket=bucket)
        codes = []
        try:
            for k, obj in enumerate(objects):
                if k == WARM_UP_OBJECTS:
                    rss.append(a.rss_kib())
                with trio.fail_after(60):
                    results = await sender.notify(obj, "az2")
                codes.append([r.error_code for r in results])
        finally:
            await sender.aclose()
        rss.append(a.rss_kib())
        return codes

    codes = trio.run(main)
    assert codes == [[0] * BATCHES_PER_OBJECT] * len(objects)
    before, after = rss
    print(f"agent RSS KiB after the warm-up {before}, after {MEASURED_OBJECTS} more objects {after}")
    assert after - before < MAX_GROWTH_KIB, (before, after)
