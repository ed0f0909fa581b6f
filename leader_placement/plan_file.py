"""The reviewed plan, saved: what a dry run of `plan leaders` writes and `--apply --plan FILE` carries out.

Strategy. The dry run writes every move with what it saw of the partition (the leader, the
replica order) and the id of the cluster it read. The apply reads the file back, refuses
another cluster (`other_cluster`), and its loop refuses partitions that no longer are as the
file says (leader_placement.apply.preflight and stale): what is applied is exactly what was
reviewed, or nothing. A hand-edited file is the reviewed one too, so the moves are checked
for what a move must be (the same replica set, the target first) rather than for a checksum.
The plan id (the plan's UTC time and 8 hex digits of a SHA-256 of the cluster id and the
moves) names the plan in the `leader_move` audit records.

Pure: JSON documents in and out; the command reads and writes the file.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from leader_placement.plan import Move

PLAN_FORMAT = "azsidecar-leader-plan"  # the file's "format", so another JSON file is refused by name
PLAN_FILE_VERSION = 1


class PlanFileError(ValueError):
    """The plan file is not one this command wrote, or a move in it is not a leader move."""


@dataclass(frozen=True)
class SavedPlan:
    plan_id: str
    created_ms: int  # epoch milliseconds, UTC
    cluster_id: str  # DescribeCluster's, of the cluster the plan read
    bootstrap_servers: tuple[str, ...]
    window_s: float  # the audited window the savings are over
    moves: tuple[Move, ...]


def make_plan_id(moves: Sequence[Move], cluster_id: str, created_ms: int) -> str:
    """`YYYYMMDDTHHMMSSZ-xxxxxxxx`: when the plan was made, and a digest of what it moves where."""
    digest = hashlib.sha256(json.dumps([cluster_id, [_move_json(m) for m in moves]], sort_keys=True).encode())
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(created_ms / 1000)) + "-" + digest.hexdigest()[:8]


def plan_document(plan: SavedPlan) -> dict[str, Any]:
    return {"format": PLAN_FORMAT, "version": PLAN_FILE_VERSION, "plan_id": plan.plan_id,
            "created_ms": plan.created_ms, "cluster_id": plan.cluster_id,
            "bootstrap_servers": list(plan.bootstrap_servers), "window_s": plan.window_s,
            "moves": [_move_json(m) for m in plan.moves]}


def parse_plan(doc: Any) -> SavedPlan:
    """The plan a `plan_document` holds. Raises PlanFileError naming what is wrong (and the move)."""
    if not isinstance(doc, Mapping) or doc.get("format") != PLAN_FORMAT:
        raise PlanFileError(f"not a leader plan (no \"format\": \"{PLAN_FORMAT}\"); write one with a dry run "
                            "of `azsidecar plan leaders`")
    if doc.get("version") != PLAN_FILE_VERSION:
        raise PlanFileError(f"plan file version {doc.get('version')!r}; this command reads {PLAN_FILE_VERSION}")
    try:
        moves = tuple(_move(i, m) for i, m in enumerate(doc["moves"]))
        plan = SavedPlan(str(doc["plan_id"]), int(doc["created_ms"]), str(doc["cluster_id"]),
                         tuple(str(b) for b in doc["bootstrap_servers"]), float(doc["window_s"]), moves)
    except PlanFileError:
        raise
    except KeyError as exc:
        raise PlanFileError(f"missing {exc}") from exc
    except (TypeError, ValueError) as exc:  # int("x"), a number where a list belongs
        raise PlanFileError(f"a value of the wrong type: {exc}") from exc
    keys = [(m.topic, m.partition) for m in moves]
    twice = sorted({f"{t}-{p}" for t, p in keys if keys.count((t, p)) > 1})
    if twice:
        raise PlanFileError(f"partitions moved twice: {', '.join(twice)}")
    return plan


def other_cluster(plan: SavedPlan, cluster_id: str) -> str | None:
    """Why the plan must not be applied to the cluster `cluster_id`, or None."""
    if plan.cluster_id != cluster_id:
        return f"plan {plan.plan_id} was made for cluster {plan.cluster_id!r}; this is cluster {cluster_id!r}"
    return None


def _move_json(m: Move) -> dict[str, Any]:
    return {"topic": m.topic, "partition": m.partition, "from_broker": m.from_broker, "from_zone": m.from_zone,
            "to_broker": m.to_broker, "to_zone": m.to_zone, "saving_bytes": m.saving_bytes,
            "saving_usd": m.saving_usd, "replicas_before": list(m.replicas_before),
            "replicas_after": list(m.replicas_after), "fetch_saving_bytes": m.fetch_saving_bytes}


def _move(i: int, m: Any) -> Move:
    if not isinstance(m, Mapping):
        raise PlanFileError(f"moves[{i}]: not an object")
    try:
        move = Move(str(m["topic"]), int(m["partition"]), int(m["from_broker"]), str(m["from_zone"]),
                    int(m["to_broker"]), str(m["to_zone"]), int(m["saving_bytes"]), float(m["saving_usd"]),
                    tuple(int(b) for b in m["replicas_before"]), tuple(int(b) for b in m["replicas_after"]),
                    int(m.get("fetch_saving_bytes", 0)))  # absent from plans made before consumer bytes
    except KeyError as exc:
        raise PlanFileError(f"moves[{i}]: missing {exc}") from exc
    name = f"moves[{i}] ({move.topic}-{move.partition})"
    if sorted(move.replicas_after) != sorted(move.replicas_before) or len(set(move.replicas_before)) != len(
            move.replicas_before):
        raise PlanFileError(f"{name}: replicas_after {list(move.replicas_after)} is not a new order of "
                            f"replicas_before {list(move.replicas_before)}")
    if move.replicas_after[:1] != (move.to_broker,) or move.to_broker == move.from_broker:
        raise PlanFileError(f"{name}: replicas_after must start with to_broker {move.to_broker}, "
                            f"another broker than from_broker {move.from_broker}")
    if move.from_broker not in move.replicas_before:
        raise PlanFileError(f"{name}: from_broker {move.from_broker} is not one of {list(move.replicas_before)}")
    return move
