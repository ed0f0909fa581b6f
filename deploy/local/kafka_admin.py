"""Admin operations on the local Apache Kafka cluster, through Kafka's own Admin API.

Strategy: each operation is one function over kafka-python's `KafkaAdminClient` that
runs to completion (with its bounded wait) and returns plain JSON-able values, so the
cluster library can run it in this process (loopback) or as `python -m
deploy.local.kafka_admin OP JSON` inside a zone's network namespace, where the brokers'
addresses are reachable (netns mode: the root namespace has no address on the zone
bridge). Leaders move the way an operator moves them: reorder the replica list with a
reassignment that keeps the replica set, then a preferred-leader election.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

POLL_S = 0.1  # between metadata reads while waiting for the cluster to reach a state
REQUEST_TIMEOUT_MS = 15_000

_T = TypeVar("_T")


class KafkaAdminError(RuntimeError):
    """The cluster refused an operation or did not reach the wanted state in time."""


@contextlib.contextmanager
def _admin(bootstrap: str, security: Mapping[str, Any] | None = None) -> Iterator[Any]:
    from kafka.admin import KafkaAdminClient  # noqa: PLC0415 - only the local environment needs it

    client = KafkaAdminClient(bootstrap_servers=bootstrap.split(","), client_id="azsidecar-local-admin",
                              request_timeout_ms=REQUEST_TIMEOUT_MS, reconnect_backoff_ms=50,
                              reconnect_backoff_max_ms=500, **dict(security or {}))
    try:
        yield client
    finally:
        client.close()


def _until(what: str, timeout_s: float, probe: Callable[[], _T | None]) -> _T:
    """Call probe until it returns a truthy value (returned); raise KafkaAdminError after timeout_s."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while True:
        try:
            value = probe()
        except Exception as exc:  # noqa: BLE001 - a broker still starting answers with errors
            value, last_error = None, exc
        if value:
            return value
        if time.monotonic() > deadline:
            raise KafkaAdminError(f"{what} not reached within {timeout_s:.0f} s"
                                  + (f" (last error: {last_error!r})" if last_error else ""))
        time.sleep(POLL_S)  # polling the cluster's metadata for a state, not synchronizing our own work


def wait_ready(bootstraps: Sequence[str], brokers: int, timeout_s: float,
               security: Mapping[str, Any] | None = None) -> dict[str, list[int]]:
    """Wait until every node in `bootstraps`, asked alone, lists `brokers` unfenced brokers.

    The answer is DescribeCluster's (the broker list Metadata carries, plus fencing).

    Returns {bootstrap: sorted broker ids}. Raises KafkaAdminError on timeout.
    """
    seen: dict[str, list[int]] = {}
    deadline = time.monotonic() + timeout_s
    for bootstrap in bootstraps:
        def listed(b: str = bootstrap) -> list[int] | None:
            with _admin(b, security) as admin:
                listed_brokers = admin.describe_cluster()["brokers"]
            ids = sorted(int(x["broker_id"]) for x in listed_brokers if not x.get("is_fenced", False))
            return ids if len(ids) >= brokers else None
        seen[bootstrap] = _until(f"{bootstrap} listing {brokers} brokers", max(1.0, deadline - time.monotonic()), listed)
    return seen


def create_topic(bootstrap: str, topic: str, partitions: int, replication_factor: int = 3,
                 configs: Mapping[str, str] | None = None,
                 assignments: Mapping[int, Sequence[int]] | None = None, timeout_s: float = 30.0,
                 security: Mapping[str, Any] | None = None) -> dict[int, dict[str, Any]]:
    """Create a topic and wait until every partition has a leader; returns describe_topic().

    With `assignments` ({partition: [broker ids]}, the first the preferred leader) the
    placement is given; without, the brokers place replicas (rack-aware). Raises KafkaAdminError.
    """
    spec: dict[str, Any] = {"configs": dict(configs or {})}
    if assignments:
        spec["assignments"] = {int(p): list(r) for p, r in assignments.items()}
    else:
        spec["num_partitions"] = partitions
        spec["replication_factor"] = replication_factor
    with _admin(bootstrap, security) as admin:
        try:
            admin.create_topics({topic: spec}, timeout_ms=int(timeout_s * 1000))
        except Exception as exc:
            raise KafkaAdminError(f"create topic {topic}: {exc}") from exc
    return _until(f"{topic}: a leader for each of {partitions} partitions", timeout_s,
                  lambda: _all_led(describe_topic(bootstrap, topic, security), partitions))


def delete_topics(bootstrap: str, keep: Sequence[str] = (), timeout_s: float = 30.0,
                  security: Mapping[str, Any] | None = None) -> list[str]:
    """Delete every topic but Kafka's internal ones (`__...`) and `keep`; returns the names
    deleted. A cluster shared by many tests sheds each test's topics: an idle partition still
    costs the leaders work on every follower fetch (a three-node cluster under the same light
    load spent 1.07 CPU-s/s with one 12-partition topic, 1.81 with 30 more idle ones,
    2026-11-30). Raises KafkaAdminError."""
    with _admin(bootstrap, security) as admin:
        try:
            names = sorted(t for t in admin.list_topics() if not t.startswith("__") and t not in set(keep))
            if names:
                admin.delete_topics(names, timeout_ms=int(timeout_s * 1000))
        except Exception as exc:
            raise KafkaAdminError(f"delete topics: {exc}") from exc
    return names


def _all_led(state: dict[int, dict[str, Any]], partitions: int) -> dict[int, dict[str, Any]] | None:
    if len(state) == partitions and all(s["leader"] >= 0 for s in state.values()):
        return state
    return None


def describe_topic(bootstrap: str, topic: str, security: Mapping[str, Any] | None = None,
                   timeout_s: float = 15.0) -> dict[int, dict[str, Any]]:
    """{partition: {"leader": id, "replicas": [ids], "isr": [ids]}}; {} if the topic is unknown.

    Retried within timeout_s: the client may first ask a broker that has just died.
    Raises KafkaAdminError when no broker answers in time.
    """
    def once() -> tuple[dict[int, dict[str, Any]]]:
        with _admin(bootstrap, security) as admin:
            described = admin.describe_topics([topic])
        out: dict[int, dict[str, Any]] = {}
        for t in described:
            if t.get("error_code", 0) != 0:
                return ({},)
            for p in t["partitions"]:
                out[int(p["partition_index"])] = {"leader": int(p["leader_id"]),
                                                  "replicas": list(p["replica_nodes"]), "isr": list(p["isr_nodes"])}
        return (out,)
    answer: tuple[dict[int, dict[str, Any]]] = _until(f"a description of {topic}", timeout_s, once)
    return answer[0]


def move_leader(bootstrap: str, topic: str, partition: int, broker_id: int, timeout_s: float = 30.0,
                security: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Make `broker_id` (a replica) the partition's leader: reorder, then preferred election.

    The replica set is unchanged; only its order. Returns the partition's new state.
    Raises KafkaAdminError if broker_id holds no replica or the move does not complete.
    """
    from kafka.structs import TopicPartition  # noqa: PLC0415

    state = describe_topic(bootstrap, topic, security).get(partition)
    if state is None:
        raise KafkaAdminError(f"{topic}-{partition} does not exist")
    if broker_id not in state["replicas"]:
        raise KafkaAdminError(f"broker {broker_id} holds no replica of {topic}-{partition} ({state['replicas']})")
    if state["leader"] == broker_id:
        return state
    order = [broker_id] + [r for r in state["replicas"] if r != broker_id]
    tp = TopicPartition(topic, partition)
    with _admin(bootstrap, security) as admin:
        admin.alter_partition_reassignments({tp: order}, timeout_ms=int(timeout_s * 1000))

        def reordered() -> bool:
            ongoing = admin.list_partition_reassignments({topic: [partition]})
            now = describe_topic(bootstrap, topic, security).get(partition, {})
            return not ongoing and now.get("replicas") == order
        _until(f"{topic}-{partition} replicas reordered to {order}", timeout_s, reordered)

        def elected() -> dict[str, Any] | None:
            with contextlib.suppress(Exception):  # ELECTION_NOT_NEEDED once it has happened
                admin.elect_leaders(0, {topic: [partition]}, timeout_ms=int(timeout_s * 1000))
            now = describe_topic(bootstrap, topic, security).get(partition, {})
            return now if now.get("leader") == broker_id else None
        result: dict[str, Any] = _until(f"{topic}-{partition} led by broker {broker_id}", timeout_s, elected)
    return result


def elect_preferred(bootstrap: str, timeout_s: float = 30.0,
                    security: Mapping[str, Any] | None = None) -> dict[str, int]:
    """A preferred-leader election over every partition of the cluster (what Kafka's
    auto.leader.rebalance.enable does every leader.imbalance.check.interval.seconds). Returns
    how many partitions moved ("elected"), were already led by their preferred replica
    ("not_needed") or could not move yet ("not_available": the preferred replica is not in
    sync, e.g. its broker is still catching up)."""
    with _admin(bootstrap, security) as admin:
        response = admin.elect_leaders(0, None, timeout_ms=int(timeout_s * 1000), raise_errors=False)
    counts = {"elected": 0, "not_needed": 0, "not_available": 0, "other": 0}
    for result in response.replica_election_results:
        for partition in result.partition_result:
            code = partition.error_code
            key = {0: "elected", 84: "not_needed", 80: "not_available"}.get(code, "other")
            counts[key] += 1
    return counts


OPERATIONS: dict[str, Callable[..., Any]] = {
    "wait_ready": wait_ready,
    "create_topic": create_topic,
    "delete_topics": delete_topics,
    "describe_topic": describe_topic,
    "move_leader": move_leader,
    "elect_preferred": elect_preferred,
}


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m deploy.local.kafka_admin OP JSON-KWARGS`: prints {"result": ...} or {"error": ...}."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] not in OPERATIONS:
        print(json.dumps({"error": f"usage: OP JSON with OP one of {sorted(OPERATIONS)}"}))
        return 2
    try:
        result = OPERATIONS[args[0]](**json.loads(args[1]))
    except KafkaAdminError as exc:
        print(json.dumps({"error": str(exc)}))
        return 1
    print(json.dumps({"result": result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
