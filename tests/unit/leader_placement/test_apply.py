"""The apply loop's steps and checks, over an in-memory cluster (the Kafka adapter is tested on
Apache Kafka in tests/integration/kafka/test_leader_placement_on_kafka.py)."""

from __future__ import annotations

import dataclasses

import pytest

from leader_placement.apply import Reassignment, anomaly, apply_moves, batches, preflight, stale
from leader_placement.plan import Move, PartitionPlacement
from tests.unit.leader_placement.memory_cluster import MemoryCluster


def move(p: int, before=(2, 3, 1), to=1) -> Move:
    after = (to,) + tuple(r for r in before if r != to)
    return Move("t", p, before[0], "z", to, "use1-az1", 100, 2e-9, tuple(before), after)


def state(p: int, replicas=(2, 3, 1), leader=None, isr=None) -> PartitionPlacement:
    return PartitionPlacement("t", p, tuple(replicas), replicas[0] if leader is None else leader,
                              tuple(replicas if isr is None else isr))


class Clock:
    def __init__(self):
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self):
        return self.now

    def sleep(self, s):
        self.sleeps.append(s)
        self.now += s


def run(cluster, moves, clock, **kw):
    lines: list[str] = []
    args = {"batch_size": 2, "throttle_s": 5.0, "timeout_s": 30.0, "poll_s": 0.5} | kw
    recorded: list = []
    result = apply_moves(cluster, moves, clock=clock, sleep=clock.sleep, report=lines.append,
                         record=recorded.append, **args)
    assert [(m.topic, m.partition) for m in recorded] == [(m.topic, m.partition) for m in result.moved]
    return result, lines


def test_batches_in_plan_order():
    moves = [move(p) for p in range(5)]
    assert [[m.partition for m in b] for b in batches(moves, 2)] == [[0, 1], [2, 3], [4]]
    with pytest.raises(ValueError):
        batches(moves, 0)


def test_moves_batch_by_batch_with_the_throttle_between_batches():
    cluster = MemoryCluster([state(p) for p in range(3)])
    clock = Clock()
    result, lines = run(cluster, [move(p) for p in range(3)], clock)
    assert result.ok and [m.partition for m in result.moved] == [0, 1, 2]
    assert {k: (s.leader, s.replicas) for k, s in cluster.parts.items()} == {("t", p): (1, (1, 2, 3)) for p in range(3)}
    assert cluster.calls == ["reassign [('t', 0), ('t', 1)]", "elect [('t', 0), ('t', 1)]",
                             "reassign [('t', 2)]", "elect [('t', 2)]"]
    assert clock.sleeps == [0.5, 5.0, 0.5]  # one poll per batch while pending, one throttle between the two
    assert lines[0] == "moved t-0: broker 2 (z) -> 1 (use1-az1), ISR [1, 2, 3]"


def test_a_shrunken_isr_stops_the_run_after_the_first_batch():
    cluster = MemoryCluster([state(p) for p in range(3)], shrink_isr=True)
    result, _ = run(cluster, [move(p) for p in range(3)], Clock())
    assert not result.ok and result.moved == ()
    assert result.error == "t-0: ISR shrank from [1, 2, 3] to [2, 3]"
    assert len([c for c in cluster.calls if c.startswith("reassign")]) == 1


def test_an_accepted_election_that_leaves_the_leader_is_asked_again_every_five_seconds():
    cluster = MemoryCluster([state(0)], ignored_elections=2)
    clock = Clock()
    result, _ = run(cluster, [move(0)], clock)
    assert result.ok and cluster.parts[("t", 0)].leader == 1
    assert cluster.calls == ["reassign [('t', 0)]"] + ["elect [('t', 0)]"] * 3
    assert clock.now == 0.5 + 10.0  # one poll while the reassignment is pending, then two 5 s rounds of 0.5 s polls


def test_an_election_that_never_moves_the_leader_stops_the_run_at_the_timeout():
    cluster = MemoryCluster([state(0)], ignored_elections=10**6)
    clock = Clock()
    result, _ = run(cluster, [move(0)], clock, timeout_s=12.0)
    assert result.error == "t-0: led by broker 2 after the election, not 1"
    assert cluster.calls.count("elect [('t', 0)]") == 3  # at 0 s, 5 s and 10 s of the 12 s wait


def test_a_reassignment_that_never_completes_is_cancelled_and_the_run_stops():
    cluster = MemoryCluster([state(p) for p in range(4)], reassign_polls=10**6)
    result, lines = run(cluster, [move(p) for p in range(4)], Clock(), timeout_s=3.0)
    assert result.error == ("batch 1: the reassignment did not complete within 3 s; cancelled the reassignment "
                            "of t-0, t-1 (AlterPartitionReassignments with no target); stopped")
    assert result.started and result.moved == () and lines == []
    # the second batch is never asked for, the first is cancelled, nothing is elected
    assert cluster.calls == ["reassign [('t', 0), ('t', 1)]", "cancel [('t', 0), ('t', 1)]"]


def test_a_refused_cancel_is_named_with_what_to_look_at():
    cluster = MemoryCluster([state(0)], reassign_polls=10**6, refuse_cancel={("t", 0): "NoReassignmentInProgressError"})
    result, _ = run(cluster, [move(0)], Clock(), timeout_s=3.0)
    assert result.error == ("batch 1: the reassignment did not complete within 3 s (t-0 pending); cancelling failed "
                            "for t-0: NoReassignmentInProgressError; see kafka-reassign-partitions --list; stopped")


def test_a_stale_plan_is_refused_before_anything_is_asked():
    cluster = MemoryCluster([state(0), state(1, leader=3), state(2, replicas=(2, 3, 4))])
    result, _ = run(cluster, [move(0), move(1), move(2)], Clock())
    assert not result.started and result.moved == ()
    assert result.error == ("the cluster no longer matches the plan: t-1: leader moved: led by broker 3, the plan "
                            "saw 2; t-2: replica set changed: replicas are [2, 3, 4], the plan saw [2, 3, 1]; "
                            "plan again and review")
    assert cluster.calls == []


def test_reassignments_already_in_progress_are_named_and_nothing_is_asked():
    ongoing = {("other", 3): Reassignment((1, 2, 4), (4,), (3,)), ("t", 9): Reassignment((3, 1, 2), (), ())}
    cluster = MemoryCluster([state(0)], ongoing=ongoing)
    result, _ = run(cluster, [move(0)], Clock())
    assert not result.started
    assert result.error == ("reassignments already in progress on the cluster: other-3 (replicas [1, 2, 4], "
                            "adding [4], removing [3]); t-9 (replicas [3, 1, 2], adding [], removing []); let them "
                            "finish (kafka-reassign-partitions --verify) or cancel them, then apply")
    assert cluster.calls == []


@pytest.mark.parametrize(("now", "why"), [
    (None, "t-0: no longer exists"),
    (state(0, replicas=(2, 3, 4)), "t-0: replica set changed: replicas are [2, 3, 4], the plan saw [2, 3, 1]"),
    (state(0, leader=3), "t-0: leader moved: led by broker 3, the plan saw 2"),
    (state(0, replicas=(1, 2, 3)), "t-0: leader already moved: led by broker 1, the plan's target; the plan saw 2"),
    (state(0, replicas=(2, 1, 3)), "t-0: replica order changed: [2, 1, 3], the plan saw [2, 3, 1]"),
    (state(0, isr=(2, 3)), "t-0: broker 1 is not in the ISR [2, 3]; not moving the leader there"),
    (state(0), None),
])
def test_stale(now, why):
    assert stale(move(0), now) == why


def test_preflight_passes_a_cluster_as_the_plan_saw_it():
    assert preflight([move(0), move(1)], {("t", 0): state(0), ("t", 1): state(1)}, {}) is None


@pytest.mark.parametrize(("after", "why"), [
    (state(0, replicas=(1, 2, 3)), None),
    (state(0, replicas=(1, 2, 3), leader=2), "t-0: led by broker 2 after the election, not 1"),
    (state(0, replicas=(1, 2, 4)), "t-0: replica set changed from [1, 2, 3] to [1, 2, 4]"),
    (state(0, replicas=(1, 2, 3), isr=(1, 2)), "t-0: ISR shrank from [1, 2, 3] to [1, 2]"),
    (None, "t-0: disappeared during the move"),
])
def test_anomaly(after, why):
    assert anomaly(move(0), state(0), after) == why


class LaggingReplicaCluster(MemoryCluster):
    """Every read after the one that first showed the new leaders comes from a broker whose
    metadata still names the old leader (KRaft brokers apply the controller's log each at
    its own pace; kafka-python's admin asks any of them)."""

    def __init__(self, parts):
        super().__init__(parts)
        self.old = dict(self.parts)
        self.seen_new = False

    def describe(self, keys):
        current = super().describe(keys)
        if self.seen_new:
            return {k: dataclasses.replace(current[k], leader=self.old[k].leader) for k in current}
        if any(current[k].leader != self.old[k].leader for k in current):
            self.seen_new = True
        return current


def test_a_move_is_judged_on_the_read_that_showed_the_target_leading_not_on_a_lagging_one():
    cluster = LaggingReplicaCluster([state(0)])
    result, lines = run(cluster, [move(0)], Clock())
    assert result.ok, result.error
    assert [m.partition for m in result.moved] == [0]
    assert lines == ["moved t-0: broker 2 (z) -> 1 (use1-az1), ISR [1, 2, 3]"]


class LeaderTakenMidRun(MemoryCluster):
    """After the first batch's election, someone moves the leader of partition 2 to broker 3."""

    def elect_preferred(self, keys):
        answer = super().elect_preferred(keys)
        self.parts[("t", 2)] = dataclasses.replace(self.parts[("t", 2)], leader=3)
        return answer


def test_a_partition_that_changes_during_the_run_stops_it_at_its_batch_and_only_verified_moves_are_recorded():
    cluster = LeaderTakenMidRun([state(p) for p in range(3)])
    result, lines = run(cluster, [move(p) for p in range(3)], Clock())  # run() checks record == moved
    assert result.started and [m.partition for m in result.moved] == [0, 1]
    assert result.error == "t-2: leader moved: led by broker 3, the plan saw 2"
    assert len(lines) == 2
