"""An in-memory cluster behind `leader_placement.apply.LeaderAdmin`, for the tests of the code above
the Kafka adapter (the adapter itself is tested on Apache Kafka in
tests/integration/kafka/test_leader_placement_on_kafka.py)."""

from __future__ import annotations

import dataclasses

from leader_placement.apply import Reassignment
from leader_placement.plan import Placement


class MemoryCluster:
    """Reassignments finish after `reassign_polls` reads of the batch's; elections make the first
    replica lead; `ongoing` are reassignments someone else started; `refuse_cancel` answers cancels."""

    def __init__(self, parts, reassign_polls=1, shrink_isr=False, ignored_elections=0, ongoing=None,
                 refuse_cancel=None, broker_zones=None, cluster_id="memory-cluster"):
        self.broker_zones = dict(broker_zones or {})
        self.id = cluster_id
        self.parts = {(s.topic, s.partition): s for s in parts}
        self.ignored_elections = ignored_elections  # accepted, yet the leader stays (target not eligible yet)
        self.pending_reads: dict = {}
        self.reassign_polls = reassign_polls
        self.shrink_isr = shrink_isr
        self.ongoing = dict(ongoing or {})
        self.refuse_cancel = dict(refuse_cancel or {})
        self.calls: list[str] = []

    def describe(self, keys):
        return {k: self.parts[k] for k in keys if k in self.parts}

    def reassign(self, orders):
        self.calls.append(f"reassign {sorted(orders)}")
        for k, order in orders.items():
            self.parts[k] = dataclasses.replace(self.parts[k], replicas=tuple(order))
            self.pending_reads[k] = self.reassign_polls
        return {}

    def reassignments(self, keys=None):
        if keys is None:
            return dict(self.ongoing)
        out = {}
        for k in keys:
            if self.pending_reads.get(k, 0) > 0:
                self.pending_reads[k] -= 1
                out[k] = Reassignment(self.parts[k].replicas, (), ())
        return out

    def cancel(self, keys):
        self.calls.append(f"cancel {sorted(keys)}")
        return {k: why for k, why in self.refuse_cancel.items() if k in keys}

    def elect_preferred(self, keys):
        self.calls.append(f"elect {sorted(keys)}")
        if self.ignored_elections > 0:
            self.ignored_elections -= 1
            return {}
        for k in keys:
            s = self.parts[k]
            isr = s.isr[:-1] if self.shrink_isr else s.isr
            self.parts[k] = dataclasses.replace(s, leader=s.replicas[0], isr=isr)
        return {}

    # -- what `azsidecar plan leaders` asks beyond the loop (leader_placement.admin.KafkaLeaderAdmin)

    def placement(self, topics):
        parts = tuple(s for k, s in sorted(self.parts.items()) if k[0] in topics)
        known = {t for t, _ in self.parts}
        return Placement(parts, self.broker_zones), [t for t in topics if t not in known]

    def cluster_id(self):
        return self.id

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None
