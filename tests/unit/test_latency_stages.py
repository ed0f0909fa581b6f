"""bench/latency_stages.py: per-stage percentiles of one topic's WAL batches from audit records."""

from __future__ import annotations

import math

from bench.latency_stages import named_stages, percentile, stage_summary


def test_percentile_takes_the_value_at_rank_q_times_n():
    assert percentile([5.0, 1.0, 3.0, 2.0, 4.0], 0.5) == 3.0  # rank int(2.5) = 2 of [1..5]
    assert percentile([5.0, 1.0, 3.0, 2.0, 4.0], 0.99) == 5.0  # rank int(4.95) = 4
    assert math.isnan(percentile([], 0.5))


def test_summary_keeps_the_topics_batches_and_their_objects_only():
    records = [
        {"kind": "produce_batch", "topic": "t", "wal_key": "k1", "latency_ms": 40.0, "linger_wait_ms": 20.0,
         "s3_put_ms": 5.0, "notify_rtt_ms": 12.0, "queue_ms": 0.1, "records": 3},
        {"kind": "produce_batch", "topic": "t", "wal_key": "k2", "latency_ms": 60.0, "linger_wait_ms": 19.0,
         "s3_put_ms": 6.0, "notify_rtt_ms": 30.0, "queue_ms": 0.2, "records": 5},
        {"kind": "produce_batch", "topic": "other", "wal_key": "k9", "latency_ms": 999.0},
        # a direct batch of `t` has -1.0 ("did not happen") in the WAL fields
        {"kind": "produce_batch", "topic": "t", "wal_key": "", "latency_ms": 10.0, "linger_wait_ms": -1.0},
        {"kind": "wal_flush", "key": "k1", "put_ms": 4.5, "put_wait_ms": 0.2},
        {"kind": "wal_flush", "key": "k9", "put_ms": 500.0, "put_wait_ms": 9.0},
        {"kind": "agent_read", "key": "k2", "get_ms": 3.5},
        {"kind": "agent_apply", "key": "k2", "append_ms": 8.0, "handle_ms": 12.0},
    ]
    summary = stage_summary(records, "t")
    assert summary["produce_batch.latency_ms"] == {"n": 3, "p50": 40.0, "p99": 60.0}  # 10, 40, 60
    assert summary["produce_batch.linger_wait_ms"] == {"n": 2, "p50": 20.0, "p99": 20.0}  # 19, 20
    assert summary["wal_flush.put_ms"] == {"n": 1, "p50": 4.5, "p99": 4.5}  # k9 is another topic's
    assert summary["agent_read.get_ms"] == {"n": 1, "p50": 3.5, "p99": 3.5}
    assert summary["agent_apply.append_ms"] == {"n": 1, "p50": 8.0, "p99": 8.0}
    assert "produce_batch.leader_append_ms" not in summary


def test_named_stages_pick_the_five_stages_and_the_notifications_wait():
    stages = {
        "produce_batch.linger_wait_ms": {"n": 2, "p50": 19.0, "p99": 20.0},
        "wal_flush.put_ms": {"n": 1, "p50": 4.5, "p99": 4.5},
        "produce_batch.notify_rtt_ms": {"n": 2, "p50": 12.0, "p99": 30.0},
        "agent_apply.append_ms": {"n": 1, "p50": 8.0, "p99": 8.0},
        "agent_apply.handle_ms": {"n": 1, "p50": 10.0, "p99": 12.0},
    }
    p50 = named_stages(stages)
    assert {k: v for k, v in p50.items() if k != "GET"} == {
        "linger": 19.0, "PUT": 4.5, "notification": 12.0, "append": 8.0, "notify wait": 2.0}  # 12 - 10
    assert math.isnan(p50["GET"])  # no agent_read in this run
    assert named_stages(stages, "p99")["notify wait"] == 18.0  # 30 - 12
    assert list(p50) == ["linger", "PUT", "notification", "GET", "append", "notify wait"]
