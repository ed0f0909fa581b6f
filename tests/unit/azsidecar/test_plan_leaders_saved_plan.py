"""`azsidecar plan leaders` over an in-memory cluster: the dry run saves the plan, `--apply --plan`
carries out exactly that file (a reviewer's edit included) and records each move, a second
apply of it is refused by partition, another cluster is refused, and the next run reports a
move a failover undid. The Kafka adapter under it: tests/integration/kafka/test_leader_placement_on_kafka.py."""

from __future__ import annotations

import gzip
import json
import time

import pytest

from azsidecar import cli
from core.audit import SCHEMA_VERSION  # the writer's: the test is about the move, not the version
from leader_placement.plan import PartitionPlacement
from tests.unit.leader_placement.memory_cluster import MemoryCluster

MB = 1_000_000
ZONES = {1: "use1-az1", 2: "use1-az2", 3: "use1-az3"}


def batch(ts_ms, zone, partition, size):
    return {"schema_version": 12, "kind": "produce_batch", "ts_ms": ts_ms, "zone": zone, "proxy_id": f"p-{zone}",
            "topic": "orders", "partition": partition, "route": "direct_cross", "bytes": size, "error_code": 0,
            "leader_zone": ""}


def write_audit(root):
    """60 s of traffic: orders-0 and -1 fed from use1-az1 (led in az2 and az3), orders-2 evenly."""
    records = [batch(1_000, "use1-az1", 0, 9 * MB), batch(61_000, "use1-az2", 0, MB),
               batch(1_000, "use1-az1", 1, 8 * MB), batch(61_000, "use1-az3", 1, MB),
               *[batch(1_000, ZONES[b], 2, 2 * MB) for b in ZONES]]
    part = root / "date=2026-11-26" / "hour=01" / "zone=use1-az1"
    part.mkdir(parents=True)
    with gzip.open(part / "proxy-1-0.jsonl.gz", "wt") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in records)
    return root


@pytest.fixture
def cluster(monkeypatch):
    parts = [PartitionPlacement("orders", 0, (2, 3, 1), 2, (1, 2, 3)),
             PartitionPlacement("orders", 1, (3, 1, 2), 3, (1, 2, 3)),
             PartitionPlacement("orders", 2, (2, 3, 1), 2, (1, 2, 3))]
    memory = MemoryCluster(parts, broker_zones=ZONES, cluster_id="cluster-a")
    monkeypatch.setattr("azsidecar.run_plan_leaders.KafkaLeaderAdmin", lambda servers, security: memory)
    return memory


def plan_leaders(*args):
    return cli.main(["plan", "leaders", "--bootstrap-servers", "b-1:9092", "--min-saving-bytes", str(MB), *args])


def leaders(cluster):
    return {p: s.leader for (_, p), s in sorted(cluster.parts.items())}


def leader_moves(root):
    return [r for path in sorted(root.rglob("*.jsonl.gz")) for r in map(json.loads, gzip.open(path, "rt"))
            if r["kind"] == "leader_move"]


def test_the_reviewed_plan_is_applied_exactly_recorded_and_its_undoing_reported(cluster, tmp_path, capsys):
    audit = write_audit(tmp_path / "audit")
    plan, out = tmp_path / "plan.json", tmp_path / "reassignment.json"
    assert plan_leaders("--from-audit", str(audit), "--plan-out", str(plan), "--out", str(out)) == 0
    dry = capsys.readouterr().out
    saved = json.loads(plan.read_text())
    plan_id = saved["plan_id"]
    assert [(m["partition"], m["from_broker"], m["to_broker"], m["replicas_before"], m["replicas_after"])
            for m in saved["moves"]] == [(0, 2, 1, [2, 3, 1], [1, 2, 3]), (1, 3, 1, [3, 1, 2], [1, 3, 2])]
    assert saved["cluster_id"] == "cluster-a"
    assert json.loads(out.read_text()) == {"version": 1, "partitions": [
        {"topic": "orders", "partition": 0, "replicas": [1, 2, 3]},
        {"topic": "orders", "partition": 1, "replicas": [1, 3, 2]}]}
    assert f"plan file: {plan} (plan {plan_id})" in dry.splitlines()
    assert cluster.calls == [] and leaders(cluster) == {0: 2, 1: 3, 2: 2}  # a dry run

    # The reviewer strikes orders-1; the apply carries out the file, not a new plan of the audit.
    saved["moves"] = saved["moves"][:1]
    plan.write_text(json.dumps(saved))
    assert plan_leaders("--apply", "--plan", str(plan), "--from-audit", str(audit), "--throttle-s", "0") == 0
    applied = capsys.readouterr().out.splitlines()
    assert applied[0].startswith(f"plan {plan_id} from {plan}: made ") and applied[0].endswith(
        "for cluster cluster-a; 1 leader moves")
    assert applied[-2:] == ["1 leader_move records written to " + str(audit), f"applied 1 moves of plan {plan_id}"]
    assert leaders(cluster) == {0: 1, 1: 3, 2: 2}
    [moved] = leader_moves(audit)
    assert {k: moved[k] for k in ("topic", "partition", "from_broker", "from_zone", "to_broker", "to_zone",
                                  "plan_id", "schema_version", "zone")} == {
        "topic": "orders", "partition": 0, "from_broker": 2, "from_zone": "use1-az2", "to_broker": 1,
        "to_zone": "use1-az1", "plan_id": plan_id, "schema_version": SCHEMA_VERSION, "zone": ""}
    assert abs(moved["ts_ms"] / 1000 - time.time()) < 60

    # The same file again: the cluster no longer is as the plan saw it.
    assert plan_leaders("--apply", "--plan", str(plan), "--from-audit", str(audit)) == 1
    assert capsys.readouterr().err.strip() == (
        "azsidecar: leader placement refused, nothing changed: the cluster no longer matches the plan: orders-0: "
        "leader already moved: led by broker 1, the plan's target; the plan saw 2; plan again and review")

    assert plan_leaders("--from-audit", str(audit), "--plan-out", str(tmp_path / "p2.json"),
                        "--out", str(tmp_path / "r2.json")) == 0
    assert ("earlier applies: 1 partitions moved, each still led by the broker it was moved to"
            in capsys.readouterr().out.splitlines())

    cluster.parts[("orders", 0)] = PartitionPlacement("orders", 0, (1, 2, 3), 2, (2, 3))  # broker 1 failed
    assert plan_leaders("--from-audit", str(audit), "--plan-out", str(tmp_path / "p3.json"),
                        "--out", str(tmp_path / "r3.json")) == 0
    lines = capsys.readouterr().out.splitlines()
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(moved["ts_ms"] / 1000))
    assert lines[-2:] == [
        "placement undone: 1 of 1 partitions moved by earlier applies are no longer led by the broker they were "
        "moved to:",
        f"  orders-0: moved to broker 1 (use1-az1) by plan {plan_id} at {when}; now led by broker 2 (use1-az2)"]
    assert plan_leaders("--from-audit", str(audit), "--plan-out", str(tmp_path / "p4.json"),
                        "--out", str(tmp_path / "r4.json"), "--format", "json") == 0
    as_json = json.loads(capsys.readouterr().out)
    assert as_json["undone"] == [{"topic": "orders", "partition": 0, "plan_id": plan_id, "applied_ms": moved["ts_ms"],
                                  "to_broker": 1, "to_zone": "use1-az1", "leader": 2, "leader_zone": "use1-az2"}]
    assert as_json["applied_moves_seen"] == 1 and as_json["plan_file"] == str(tmp_path / "p4.json")


def test_a_plan_made_on_another_cluster_is_refused(cluster, tmp_path, capsys):
    audit = write_audit(tmp_path / "audit")
    plan = tmp_path / "plan.json"
    assert plan_leaders("--from-audit", str(audit), "--plan-out", str(plan), "--out", str(tmp_path / "r.json")) == 0
    plan_id = json.loads(plan.read_text())["plan_id"]
    capsys.readouterr()
    cluster.id = "cluster-b"
    assert plan_leaders("--apply", "--plan", str(plan), "--audit-out", str(tmp_path / "moves")) == 1
    assert capsys.readouterr().err.strip() == (f"azsidecar: leader placement refused: plan {plan_id} was made for "
                                               "cluster 'cluster-a'; this is cluster 'cluster-b'")
    assert cluster.calls == [] and not (tmp_path / "moves").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--plan", "plan.json", "--from-audit", "a"], "--plan FILE is carried out with --apply"),
    (["--apply", "--plan", "plan.json"], "give --audit-out DIR|s3://bucket/prefix (or --from-audit DIR)"),
    (["--apply", "--plan", "plan.json", "--audit-out", "x", "--format", "json"], "with --apply --plan the plan is"),
    (["--apply"], "give --from-audit DIR (or --apply --plan FILE)"),
    (["--apply", "--plan", "/nonexistent/plan.json", "--audit-out", "x"],
     "--plan /nonexistent/plan.json: No such file or directory"),
])
def test_bad_combinations_are_refused_before_any_cluster_is_asked(cluster, args, message, capsys):
    assert plan_leaders(*args) == 2
    assert message in capsys.readouterr().err
    assert cluster.calls == []


def test_a_file_that_is_not_a_plan_is_refused_by_name(cluster, tmp_path, capsys):
    reassignment = tmp_path / "reassignment.json"
    reassignment.write_text(json.dumps({"version": 1, "partitions": []}))
    assert plan_leaders("--apply", "--plan", str(reassignment), "--audit-out", str(tmp_path)) == 2
    assert f"--plan {reassignment}: not a leader plan" in capsys.readouterr().err


def test_a_moved_partition_of_a_topic_without_traffic_in_the_window_is_still_checked(cluster, tmp_path, capsys):
    audit = write_audit(tmp_path / "audit")
    part = audit / "date=2026-11-26" / "hour=00" / "zone="
    part.mkdir(parents=True)
    with gzip.open(part / "plan-leaders-1-0.jsonl.gz", "wt") as fh:  # an apply of last night, another topic
        fh.write(json.dumps({"schema_version": 12, "kind": "leader_move", "ts_ms": 1_795_651_200_000, "zone": "",
                             "topic": "payments", "partition": 0, "from_broker": 3, "from_zone": "use1-az3",
                             "to_broker": 1, "to_zone": "use1-az1", "plan_id": "p0"}) + "\n")
    cluster.parts[("payments", 0)] = PartitionPlacement("payments", 0, (1, 3, 2), 3, (2, 3))
    assert plan_leaders("--from-audit", str(audit), "--plan-out", str(tmp_path / "p.json"),
                        "--out", str(tmp_path / "r.json")) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "  payments-0: moved to broker 1 (use1-az1) by plan p0 at 2026-11-26 00:00:00 UTC; now led by broker 3 "
        "(use1-az3)")
    assert json.loads((tmp_path / "p.json").read_text())["moves"][0]["topic"] == "orders"  # payments is not planned


def fetched(zone, partition, size, from_leader):
    return {"schema_version": 14, "kind": "fetch_bytes", "ts_ms": 30_000, "zone": zone, "proxy_id": f"p-{zone}",
            "broker_id": 2, "broker_zone": "use1-az2", "topic": "orders", "partition": partition, "bytes": size,
            "from_leader": from_leader, "interval_ms": 10_000}


def test_consumer_bytes_a_leader_served_enter_the_plan_and_show_beside_produce_bytes(cluster, tmp_path, capsys):
    audit = write_audit(tmp_path / "audit")
    # orders-2 is produced evenly (no produce saving anywhere); its leader (broker 2, az2) served
    # 3 MB to consumers in az3; a follower served 5 MB, and 1 MB had no known leader
    extra = [fetched("use1-az3", 2, 3 * MB, True), fetched("use1-az1", 2, 5 * MB, False),
             fetched("use1-az1", 2, MB, None)]
    more = audit / "date=2026-11-26" / "hour=01" / "zone=use1-az3"
    more.mkdir(parents=True)
    with gzip.open(more / "proxy-3-0.jsonl.gz", "wt") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in extra)
    plan = tmp_path / "plan.json"
    assert plan_leaders("--from-audit", str(audit), "--plan-out", str(plan), "--out", str(tmp_path / "r.json")) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == ("consumer bytes through the pass-through: 3,000,000 served by leaders (planned with), "
                        "5,000,000 by followers and 1,000,000 unattributed (left out: the leader's place does not "
                        "change them, or no leader was known)")
    # 8 + 7 MB of produce bytes (orders-0 and -1 to az1) and 3 MB of consumer bytes (orders-2 to az3):
    # 18 MB x 2e-11 = 3.6e-4 USD in 60 s, x 2,628,000 / 60 = 15.768 USD a month
    assert lines[2] == ("3 leader moves, saving 18,000,000 cross-zone bytes (15,000,000 produce, 3,000,000 consumer) "
                        "(0.000360 USD) over the window, 15.77 USD a month at this rate:")
    assert ("  orders-2: broker 2 (use1-az2) -> 3 (use1-az3), saves 3,000,000 bytes (0 produce, 3,000,000 consumer), "
            "replicas [2, 3, 1] -> [3, 2, 1]") in lines
    assert ("  orders-0: broker 2 (use1-az2) -> 1 (use1-az1), saves 8,000,000 bytes (8,000,000 produce, 0 consumer), "
            "replicas [2, 3, 1] -> [1, 2, 3]") in lines
    saved = json.loads(plan.read_text())
    assert [(m["partition"], m["saving_bytes"], m["fetch_saving_bytes"]) for m in saved["moves"]] == [
        (0, 8 * MB, 0), (1, 7 * MB, 0), (2, 3 * MB, 3 * MB)]
