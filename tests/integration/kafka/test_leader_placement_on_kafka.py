"""`azsidecar plan leaders` against Apache Kafka: partitions led in use1-az2 and use1-az3
whose (hand-made) audit says most produce bytes come from use1-az1 get use1-az1 leaders;
those whose bytes come evenly from the three zones stay. The dry run changes nothing, the
apply moves exactly the planned partitions with their replica sets and ISRs intact, the next
plan is empty, and a produce burst through the sidecar during the apply loses and
duplicates nothing."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient
from kafka.structs import TopicPartition

from tests.conftest import unique_name
from tests.integration.cluster.conftest import Delivery, produce, producer, read_back, wal_sidecars
from tests.integration.kafka.conftest import ZONES

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

PARTITIONS = 6
MB = 1_000_000
# p even: led by node 2 (use1-az2), p odd: node 3 (use1-az3); every partition has a replica in each zone
ASSIGNMENTS = {p: [2, 3, 1] if p % 2 == 0 else [3, 1, 2] for p in range(PARTITIONS)}
SKEWED = {0: 9 * MB, 1: 8 * MB, 2: 7 * MB}  # from use1-az1; 1 MB from each other zone
UNIFORM = (3, 4, 5)  # 2 MB from each zone


def write_audit(root: Path, topic: str) -> Path:
    """produce_batch records of three proxies (one per zone) over a 60 s window."""
    records = []
    for p in range(PARTITIONS):
        sizes = ({"use1-az1": SKEWED[p], "use1-az2": MB, "use1-az3": MB} if p in SKEWED
                 else dict.fromkeys(("use1-az1", "use1-az2", "use1-az3"), 2 * MB))
        for zone, size in sizes.items():
            for ts_ms in (1_000, 61_000):  # two batches of half the bytes, a minute apart
                records.append({"schema_version": 8, "kind": "produce_batch", "ts_ms": ts_ms, "zone": zone,
                                "proxy_id": f"proxy-{zone}", "leader_zone": "", "topic": topic, "partition": p,
                                "route": "local" if zone == ("use1-az2" if p % 2 == 0 else "use1-az3")
                                else "direct_cross",
                                "bytes": size // 2, "records": 100, "error_code": 0})
    part = root / "date=2026-11-29" / "hour=03" / "zone=use1-az1"
    part.mkdir(parents=True)
    with gzip.open(part / "proxy-1-0.jsonl.gz", "wt") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in records)
    return root


def plan_leaders(bootstrap: str, audit: Path, out: Path, *extra: str) -> list[str]:
    """The command; the plan file goes beside the reassignment file `out` (`out`.plan.json)."""
    return [sys.executable, "-m", "azsidecar.cli", "plan", "leaders", "--from-audit", str(audit),
            "--bootstrap-servers", bootstrap, "--out", str(out), "--plan-out", str(out.with_suffix(".plan.json")),
            "--min-saving-bytes", str(MB), *extra]


def run_plan(bootstrap: str, audit: Path, out: Path, *extra: str) -> tuple[dict, subprocess.CompletedProcess]:
    done = subprocess.run(plan_leaders(bootstrap, audit, out, "--format", "json", *extra), capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr + done.stdout
    return json.loads(done.stdout[:done.stdout.rindex("}") + 1]), done


def leaders_when_settled(cluster, topic: str, expected: dict[int, int], timeout_s: float = 30.0) -> dict[int, int]:
    """The partitions' leaders once they read as `expected`, or as last read after `timeout_s`:
    each read asks one broker, and a broker's metadata may lag an election for a moment."""
    deadline = time.monotonic() + timeout_s
    while (now := {p: s["leader"] for p, s in cluster.describe(topic).items()}) != expected \
            and time.monotonic() < deadline:
        time.sleep(0.5)  # polling the cluster's state
    return now


def placement(cluster, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    return {p: (s["leader"], s["replicas"], sorted(s["isr"])) for p, s in cluster.describe(topic).items()}


def test_plan_then_apply_moves_exactly_the_skewed_partitions_to_use1_az1(kafka, tmp_path):
    topic = unique_name("placed")
    kafka.create_topic(topic, PARTITIONS, assignments=ASSIGNMENTS)
    before = placement(kafka, topic)
    assert {p: s[0] for p, s in before.items()} == {p: ASSIGNMENTS[p][0] for p in range(PARTITIONS)}
    assert all(s[2] == [1, 2, 3] for s in before.values()), before
    audit = write_audit(tmp_path / "window-audit", topic)
    out = tmp_path / "reassignment.json"

    started = time.monotonic()
    plan, _ = run_plan(kafka.bootstrap, audit, out)
    dry_run_s = time.monotonic() - started
    # the skewed partitions, biggest saving first: 9-1, 8-1, 7-1 MB over the 60 s window;
    # the cap is ceil(6 / 3) + 1 = 3, exactly what use1-az1's broker takes
    assert [(m["partition"], m["from_broker"], m["to_broker"], m["to_zone"], m["saving_bytes"])
            for m in plan["moves"]] == [(0, 2, 1, "use1-az1", 8 * MB), (1, 3, 1, "use1-az1", 7 * MB),
                                        (2, 2, 1, "use1-az1", 6 * MB)]
    assert plan["leader_cap"] == 3 and plan["held"] == []
    assert plan["saving_bytes"] == 21 * MB
    # the audit's cross-zone bytes went direct: 2e-11 USD a byte, 4.2e-4 USD over the 60 s window,
    # x 2,628,000 / 60 = 18.396 USD a month
    assert plan["window_s"] == 60.0
    assert plan["saving_usd"] == pytest.approx(4.2e-4)
    assert plan["saving_usd_per_month"] == pytest.approx(18.396)
    assert json.loads(out.read_text()) == {"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [1, 2, 3]},
        {"topic": topic, "partition": 1, "replicas": [1, 3, 2]},
        {"topic": topic, "partition": 2, "replicas": [1, 2, 3]}]}
    text = subprocess.run(plan_leaders(kafka.bootstrap, audit, tmp_path / "text.json"), capture_output=True,
                          text=True, timeout=240)
    assert text.returncode == 0, text.stderr
    print(text.stdout)
    lines = text.stdout.splitlines()
    assert lines[0] == ("audit window 60.0 s; a cross-zone byte costs 0.0200 USD/GB; "
                        "a broker may lead at most 3 of these partitions")
    assert lines[1] == ("3 leader moves, saving 21,000,000 cross-zone bytes (0.000420 USD) over the window, "
                        "18.40 USD a month at this rate:")
    assert f"  {topic}-0: broker 2 (use1-az2) -> 1 (use1-az1), saves 8,000,000 bytes, replicas [2, 3, 1] -> [1, 2, 3]" \
        in lines
    assert lines[-1].startswith(f"reassignment file: {tmp_path / 'text.json'} (dry run: nothing changed")
    assert placement(kafka, topic) == before  # the dry runs changed nothing

    started = time.monotonic()
    applied, done = run_plan(kafka.bootstrap, audit, out, "--apply", "--batch-size", "2", "--throttle-s", "0.5")
    apply_s = time.monotonic() - started
    assert [m["partition"] for m in applied["moves"]] == [0, 1, 2]
    assert "applied 3 moves" in done.stdout
    after = placement(kafka, topic)
    for p in range(PARTITIONS):
        leader, replicas, isr = after[p]
        assert sorted(replicas) == sorted(before[p][1])  # the replica set is unchanged
        assert isr == [1, 2, 3]  # ISR intact
        if p in SKEWED:
            assert leader == 1 and replicas == json.loads(out.read_text())["partitions"][p]["replicas"]
        else:
            assert (leader, replicas) == before[p][:2]  # uniform: left alone

    again, _ = run_plan(kafka.bootstrap, audit, tmp_path / "again.json")
    assert again["moves"] == [] and again["held"] == []
    # the apply's leader_move records went to the audit directory: all three still hold
    assert again["applied_moves_seen"] == 3 and again["undone"] == []
    assert json.loads((tmp_path / "again.json").read_text()) == {"version": 1, "partitions": []}
    print(f"dry run {dry_run_s:.1f} s, apply of 3 moves in 2 batches {apply_s:.1f} s")


def test_a_produce_burst_through_the_sidecar_during_the_apply_loses_and_duplicates_nothing(kafka, moto_server,
                                                                                         tmp_path):
    bucket = unique_name("wal")
    moto_server.create_bucket(bucket)
    topic = unique_name("placing")
    kafka.create_topic(topic, PARTITIONS, assignments=ASSIGNMENTS)
    audit = write_audit(tmp_path / "window-audit", topic)  # not wal_sidecars' own tmp_path / "audit"
    records: list[tuple[int, int]] = []
    delivery = Delivery()
    rate_per_s, after_n = 200, 400  # paced; 2 s more once the apply is done
    with wal_sidecars(kafka, moto_server, bucket, tmp_path) as sidecars:
        p = producer(sidecars.proxy, acks="all")
        log = (tmp_path / "apply.log").open("w")
        apply: subprocess.Popen | None = None
        started = time.monotonic()
        last = None
        i = 0
        while last is None or i < last:
            if apply is None and len(delivery.acked) == PARTITIONS:  # every partition acked on its first route
                apply = subprocess.Popen(plan_leaders(kafka.bootstrap, audit, tmp_path / "r.json", "--apply",
                                                      "--batch-size", "1", "--throttle-s", "1"),
                                         stdout=log, stderr=subprocess.STDOUT, text=True)
            if last is None and apply is not None and apply.poll() is not None:
                last = i + after_n
            while (ahead := started + i / rate_per_s - time.monotonic()) > 0:
                p.poll(max(ahead, 0.001))  # poll() counts whole ms: a shorter wait would spin
            records.append((i % PARTITIONS, i))
            produce(p, topic, [records[-1]], delivery)
            i += 1
            assert time.monotonic() - started < 180, "the apply did not finish"
        assert p.flush(60) == 0
        log.close()
    assert apply is not None and apply.returncode == 0, (tmp_path / "apply.log").read_text()
    assert "applied 3 moves" in (tmp_path / "apply.log").read_text()
    expected = {0: 1, 1: 1, 2: 1, 3: 3, 4: 2, 5: 3}
    assert leaders_when_settled(kafka, topic, expected) == expected
    assert not delivery.failed, delivery.failed[:5]
    want: dict[int, list[int]] = {}
    for partition, value in records:
        want.setdefault(partition, []).append(value)
    assert delivery.acked == want
    assert read_back(kafka.bootstrap, topic, PARTITIONS, len(records)) == want  # once each, in order
    ok = [r for path in sidecars.audit_dir.rglob("*.jsonl.gz") for r in map(json.loads, gzip.open(path, "rt"))
          if r["kind"] == "produce_batch" and r["error_code"] == 0 and r["topic"] == topic]
    # the moved partitions' batches went by the WAL to use1-az2/az3, then, once led here, locally
    for q in SKEWED:
        assert {(b["leader_zone"], b["route"]) for b in ok if b["partition"] == q} == \
            {(("use1-az2" if q % 2 == 0 else "use1-az3"), "wal"), ("use1-az1", "local")}, q
    print(f"{len(records)} records through the sidecar while 3 leaders moved")


def wait_for(what: str, probe, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while not (value := probe()):
        assert time.monotonic() < deadline, what
        time.sleep(0.5)  # polling the cluster's state
    return value


def test_a_saved_plan_is_refused_while_the_cluster_differs_then_applied_exactly_and_its_undoing_reported(
        own_kafka, tmp_path):
    """The reviewed file, not a new plan: refused while a reassignment is in progress and while a
    failover has moved a planned leader, carried out exactly once the cluster is as it saw it,
    each move recorded; a broker failure afterwards is reported as the placement undone."""
    topic, stuck = unique_name("saved"), unique_name("stuck")
    own_kafka.create_topic(topic, PARTITIONS, assignments=ASSIGNMENTS)
    audit = write_audit(tmp_path / "window-audit", topic)
    plan_file = tmp_path / "r.plan.json"
    dry, _ = run_plan(own_kafka.bootstrap, audit, tmp_path / "r.json")
    saved = json.loads(plan_file.read_text())
    assert saved["plan_id"] == dry["plan_id"]
    assert [(m["partition"], m["from_broker"], m["to_broker"], m["replicas_before"]) for m in saved["moves"]] == [
        (0, 2, 1, [2, 3, 1]), (1, 3, 1, [3, 1, 2]), (2, 2, 1, [2, 3, 1])]

    def apply(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "azsidecar.cli", "plan", "leaders", "--apply", "--plan",
                               str(plan_file), "--bootstrap-servers", own_kafka.bootstrap, "--audit-out", str(audit),
                               "--throttle-s", "0", *extra], capture_output=True, text=True, timeout=240)

    # Broker 3 stops: a reassignment adding it to a partition cannot finish, and topic-1 (led by
    # 3, replicas [3, 1, 2]) fails over to broker 1, the plan's target.
    own_kafka.create_topic(stuck, 1, replication_factor=2, assignments={0: [1, 2]})
    own_kafka.stop_node(3)
    wait_for("topic-1 failed over", lambda: own_kafka.leaders(topic)[1] == 1)
    admin = KafkaAdminClient(bootstrap_servers=own_kafka.bootstrap.split(","), request_timeout_ms=30_000)
    try:
        assert admin.alter_partition_reassignments({TopicPartition(stuck, 0): [1, 2, 3]}) == {
            TopicPartition(stuck, 0): None}
        refused = apply()
        assert refused.returncode == 1, refused.stderr + refused.stdout
        assert (f"azsidecar: leader placement refused, nothing changed: reassignments already in progress on the "
                f"cluster: {stuck}-0 (replicas [1, 2, 3], adding [3], removing [])") in refused.stderr

        own_kafka.start_node(3)
        wait_for("the reassignment to finish", lambda: not admin.list_partition_reassignments())
    finally:
        if admin.list_partition_reassignments():
            admin.alter_partition_reassignments({TopicPartition(stuck, 0): None})  # leave the cluster as found
        admin.close()
    refused = apply()
    assert refused.returncode == 1, refused.stderr + refused.stdout
    assert refused.stderr.strip() == (
        "azsidecar: leader placement refused, nothing changed: the cluster no longer matches the plan: "
        f"{topic}-1: leader already moved: led by broker 1, the plan's target; the plan saw 3; plan again and review")
    assert own_kafka.leaders(topic)[0] == 2 and own_kafka.leaders(topic)[2] == 2  # nothing moved

    own_kafka.elect_preferred()  # the leaders the plan saw, back
    expected = {p: ASSIGNMENTS[p][0] for p in range(PARTITIONS)}
    assert leaders_when_settled(own_kafka, topic, expected) == expected
    done = apply()
    assert done.returncode == 0, done.stderr + done.stdout
    assert f"applied 3 moves of plan {saved['plan_id']}" in done.stdout
    expected = {0: 1, 1: 1, 2: 1, 3: 3, 4: 2, 5: 3}
    assert leaders_when_settled(own_kafka, topic, expected) == expected
    records = [r for path in audit.rglob("*.jsonl.gz") for r in map(json.loads, gzip.open(path, "rt"))
               if r["kind"] == "leader_move"]
    assert sorted((r["partition"], r["from_broker"], r["to_broker"], r["to_zone"], r["plan_id"]) for r in records) == [
        (0, 2, 1, "use1-az1", saved["plan_id"]), (1, 3, 1, "use1-az1", saved["plan_id"]),
        (2, 2, 1, "use1-az1", saved["plan_id"])]

    own_kafka.stop_node(1)  # use1-az1's broker fails: its partitions fail over to their next replica
    wait_for("the moved partitions failed over", lambda: all(own_kafka.leaders(topic)[p] != 1 for p in (0, 1, 2)))
    after, _ = run_plan(own_kafka.bootstrap, audit, tmp_path / "after.json")
    applied_ms = {r["partition"]: r["ts_ms"] for r in records}
    # replicas [1, 2, 3], [1, 3, 2], [1, 2, 3] since the apply: broker 2, 3 and 2 lead now
    assert after["undone"] == [
        {"topic": topic, "partition": p, "plan_id": saved["plan_id"], "applied_ms": applied_ms[p], "to_broker": 1,
         "to_zone": "use1-az1", "leader": leader, "leader_zone": ZONES[leader]}
        for p, leader in ((0, 2), (1, 3), (2, 2))]


def test_a_replica_out_of_the_isr_is_not_made_leader_until_it_has_caught_up(own_kafka, tmp_path):
    topic = unique_name("isr")
    own_kafka.create_topic(topic, PARTITIONS, assignments=ASSIGNMENTS)
    audit = write_audit(tmp_path / "window-audit", topic)
    own_kafka.stop_node(1)  # use1-az1's broker: its replicas leave every ISR
    deadline = time.monotonic() + 60
    while any(1 in s["isr"] for s in own_kafka.describe(topic).values()):
        assert time.monotonic() < deadline, own_kafka.describe(topic)
        time.sleep(0.5)  # polling the cluster's state
    before = placement(own_kafka, topic)
    plan, done = run_plan(own_kafka.bootstrap, audit, tmp_path / "r.json", "--apply")
    assert plan["moves"] == []
    assert [(h["partition"], h["to_zone"], h["saving_bytes"], h["reason"]) for h in plan["held"]] == [
        (0, "use1-az1", 8 * MB, "the replica in its producers' (or consumers') zone is not in the ISR"),
        (1, "use1-az1", 7 * MB, "the replica in its producers' (or consumers') zone is not in the ISR"),
        (2, "use1-az1", 6 * MB, "the replica in its producers' (or consumers') zone is not in the ISR")]
    assert "moved " not in done.stdout and "leader_move records written" not in done.stdout  # nothing applied
    assert placement(own_kafka, topic) == before  # nothing moved to a second-best zone

    own_kafka.start_node(1)
    deadline = time.monotonic() + 120
    while not all(sorted(s["isr"]) == [1, 2, 3] for s in own_kafka.describe(topic).values()):
        assert time.monotonic() < deadline, own_kafka.describe(topic)
        time.sleep(0.5)  # polling the cluster's state
    plan, _ = run_plan(own_kafka.bootstrap, audit, tmp_path / "r.json")
    assert [m["partition"] for m in plan["moves"]] == [0, 1, 2] and plan["held"] == []
