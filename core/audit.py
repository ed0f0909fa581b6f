"""Audit record kinds and their fields: the one contract between writers and Spark jobs.

Pure Python on purpose: the proxy, WAL writer and agent import this module without
importing pyspark. `spark_audit.schemas` turns these field lists into explicit StructTypes.
Every record carries `schema_version`, `kind`, `ts_ms` (epoch milliseconds, UTC) and
`zone` (the AZ id of the component that wrote it); partitions are date/hour/zone.

Versioning: add fields only at the end of a kind, with a default, and bump
SCHEMA_VERSION; readers fill missing fields with nulls so older records still read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The typed form of KINDS below (generated from it: core/audit_records_gen.py), re-exported:
# components name the sink type from here.
from core.audit_records import AuditSink as AuditSink

SCHEMA_VERSION = 15

# What each version added, so readers of older records know which fields will be null.
SCHEMA_HISTORY: dict[int, str] = {
    1: "initial kinds: produce_batch, wal_flush, agent_read, notification, metadata_lookup, audit_drop",
    2: "audit_drop.reason (queue_full | invalid); v1 drop records mean queue_full",
    3: "latency split: produce_batch.wal_key/linger_wait_ms, wal_flush.put_wait_ms/s3_request_ms, "
       "agent_read.get_ms, kind agent_apply",
    4: "kind checkpoint_write (one per checkpoint manifest PUT); from v4 an ok agent_apply no longer "
       "implies its own checkpoint PUT",
    5: "kind s3_request (the product's S3 requests outside WAL PUTs, agent GETs and manifests: epochs, "
       "GC, recovery); produce_batch.s3_put_ms no longer includes linger_wait_ms, direct_cross wire_bytes "
       "includes the per-partition Produce overhead, wal wire_bytes is the batch's share of its notification",
    6: "produce_batch.leader_append_ms on the WAL route: the agent's append time from its answer "
       "(notify protocol v3); -1 there before v6; notification records with status prefetch",
    7: "kind passthrough_bytes (requests the proxy forwarded to a broker - Fetch, ListOffsets, groups, admin - "
       "by broker zone and api key, aggregated per interval)",
    8: "produce_batch.producer_wait_ms: on the WAL route, what the batch's oldest record had waited in its "
       "producer as counted into the linger (wal.linger_counts_producer_wait; 0 when off), -1 elsewhere",
    9: "audit_drop reason torn_tail with salvaged and torn_bytes: the tail of a file a crashed writer left "
       "open, found when the next writer salvaged it (null for other reasons and before v9)",
    10: "produce_batch.shadow_route/shadow_reason: in shadow mode (router.shadow) the route and reason the "
       "policy would have chosen (the batch went `route`); \"\" otherwise",
    11: "produce_batch.principal: the Kafka principal of the client that sent the batch (User:<SASL user>, "
        "User:<certificate name>, User:ANONYMOUS); \"\" before v11",
    12: "kind leader_move (one per partition whose leader `azsidecar plan leaders --apply` moved and verified: "
        "topic, partition, from/to broker and zone, plan_id)",
    13: "kinds produce_summary and metadata_summary: the proxy's produce batches and leader-zone lookups "
        "aggregated per audit.interval_s and key (exact sums, a fixed-bucket latency histogram); "
        "produce_batch and metadata_lookup only with audit.produce_detail = \"batch\"",
    14: "kind fetch_bytes (record bytes of the Fetch answers the pass-through forwarded, per broker, topic and "
        "partition, whether the leader served them, aggregated per interval like passthrough_bytes)",
    15: "kinds wal_flush_summary, notification_summary, agent_read_summary, agent_apply_summary and "
        "checkpoint_summary: the per-object records summed per audit.interval_s and key where they are made "
        "(exact sums, object size classes, latency histograms); wal_flush, notification, agent_read, "
        "agent_apply and checkpoint_write only with audit.object_detail = \"object\"",
}

# Kinds that describe produce batches and leader-zone lookups: one record per event (v1..)
# or one per interval and key (v13). Readers take both; `batches` / `lookups` weigh a summary.
PRODUCE_KINDS = ("produce_batch", "produce_summary")
LOOKUP_KINDS = ("metadata_lookup", "metadata_summary")
# The per-object records of the WAL path (v1..) and their interval sums (v15), per kind:
# readers take both; the summary's count field (objects, notifications, ...) weighs it.
OBJECT_SUMMARY_KINDS: dict[str, str] = {
    "wal_flush": "wal_flush_summary", "notification": "notification_summary", "agent_read": "agent_read_summary",
    "agent_apply": "agent_apply_summary", "checkpoint_write": "checkpoint_summary",
}
FLUSH_KINDS = ("wal_flush", "wal_flush_summary")
NOTIFICATION_KINDS = ("notification", "notification_summary")
AGENT_READ_KINDS = ("agent_read", "agent_read_summary")
AGENT_APPLY_KINDS = ("agent_apply", "agent_apply_summary")
CHECKPOINT_KINDS = ("checkpoint_write", "checkpoint_summary")
# size_class of a notification_summary whose object's size the proxy did not see (a
# recovered object re-announced after a restart).
UNKNOWN_SIZE_CLASS = -1

# produce_summary.latency_hist: fixed buckets of produce latency_ms. Bucket i counts the
# batches with LATENCY_BUCKETS_MS[i-1] < latency_ms <= LATENCY_BUCKETS_MS[i] (bucket 0 from 0,
# the last bucket everything above the previous bound: its bound is infinite). Steps of at
# most ~1.5x from 0.25 ms to 60 s: a percentile read from them is within one step of the exact one.
LATENCY_BUCKETS_MS: tuple[float, ...] = (
    0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 40, 50, 60, 80, 100, 120, 150,
    200, 250, 300, 400, 500, 600, 800, 1000, 1500, 2000, 3000, 5000, 10000, 20000, 60000, float("inf"),
)

# produce_batch.reason of a batch the router sent across zones because the WAL path to its
# leader's zone (or agent) was unhealthy (router.fallback = "direct"): the audit's zone
# episodes (spark_audit.jobs.zone_trouble) are found by it.
FALLBACK_DIRECT_REASON = "zone unhealthy, fallback direct"

# Field types: "string", "long", "double", "boolean".
COMMON_FIELDS: tuple[tuple[str, str], ...] = (
    ("schema_version", "long"),
    ("kind", "string"),
    ("ts_ms", "long"),
    ("zone", "string"),
)

KINDS: dict[str, tuple[tuple[str, str], ...]] = {
    # One per partition batch the proxy handled. route: local | direct_cross | wal.
    # bytes = raw record batch bytes; wire_bytes = bytes this batch put on a cross-zone
    # link (direct_cross: request+response share; wal: 0, notifications are counted apart).
    "produce_batch": (
        ("proxy_id", "string"), ("leader_zone", "string"), ("topic", "string"),
        ("partition", "long"), ("route", "string"), ("reason", "string"),
        ("bytes", "long"), ("records", "long"), ("wire_bytes", "long"),
        ("error_code", "long"), ("latency_ms", "double"), ("queue_ms", "double"),
        ("s3_put_ms", "double"), ("notify_rtt_ms", "double"), ("leader_append_ms", "double"),
        ("wal_key", "string"), ("linger_wait_ms", "double"), ("producer_wait_ms", "double"),
        ("shadow_route", "string"), ("shadow_reason", "string"), ("principal", "string"),
    ),
    # One per WAL object PUT. reason: size | linger | cost | shutdown.
    "wal_flush": (
        ("writer_id", "string"), ("epoch", "long"), ("sequence", "long"), ("key", "string"),
        ("bytes", "long"), ("entries", "long"), ("zones", "string"), ("reason", "string"),
        ("put_ms", "double"), ("attempts", "long"), ("put_requests", "long"), ("ok", "boolean"),
        ("put_wait_ms", "double"), ("s3_request_ms", "double"),
    ),
    # One per agent read of a zone's share. source_zone = the proxy's zone.
    "agent_read": (
        ("source_zone", "string"), ("key", "string"), ("bytes", "long"), ("gets", "long"),
        ("cache_hits", "long"), ("cache_misses", "long"), ("bytes_from_cache", "long"),
        ("latency_ms", "double"), ("get_ms", "double"),
    ),
    # One per notification the agent applied (read and appended), with its time split.
    "agent_apply": (
        ("source_zone", "string"), ("key", "string"), ("entries", "long"), ("status", "string"),
        ("read_ms", "double"), ("append_ms", "double"), ("handle_ms", "double"),
    ),
    # One per checkpoint manifest an agent wrote (one S3 PUT, retries aside): wal_keys = the
    # WAL objects it names, comma separated (at most agent.checkpoint_max_keys); status ok | failed.
    "checkpoint_write": (
        ("keys", "long"), ("wal_keys", "string"), ("put_ms", "double"), ("status", "string"),
    ),
    # One per notification round trip, written by the sender. dest_zone = agent's zone.
    "notification": (
        ("dest_zone", "string"), ("key", "string"), ("entries", "long"),
        ("request_bytes", "long"), ("response_bytes", "long"), ("rtt_ms", "double"),
        ("status", "string"), ("attempts", "long"),
    ),
    # S3 requests not counted by another kind (epoch markers, GC, recovery), per call site
    # and outcome: operation PUT | LIST | GET | HEAD | DELETE; requests = attempts sent
    # (each billed, failed ones too); purpose epoch | epoch_check | gc | recovery.
    "s3_request": (
        ("operation", "string"), ("purpose", "string"), ("requests", "long"),
    ),
    # Requests the proxy passed through to one broker (proxy.broker_listeners), per api key,
    # aggregated over interval_ms: zone = the proxy's (the client's) zone, broker_zone = the
    # broker's ("" unknown); bytes are whole request and response frames between the proxy
    # and the broker. api_key -1: keys beyond the proxy's bound, counted together.
    "passthrough_bytes": (
        ("proxy_id", "string"), ("broker_id", "long"), ("broker_zone", "string"), ("api_key", "long"),
        ("requests", "long"), ("request_bytes", "long"), ("response_bytes", "long"), ("interval_ms", "long"),
    ),
    # Record bytes of the Fetch answers passed through from one broker (proxy.broker_listeners),
    # per topic and partition, aggregated over interval_ms: zone = the proxy's (the consumer's)
    # zone, broker_zone = the serving broker's ("" unknown). bytes = the partitions' `records`
    # fields as the broker sent them (record batches, a cut last batch included; no protocol
    # framing). from_leader: whether the broker led the partition in the proxy's metadata when
    # the answer came (null: unknown). partition -1: keys beyond the proxy's bound, counted
    # together per broker (topic ""); partition -2: answers the proxy could not scan (topic "",
    # bytes = their whole frames).
    "fetch_bytes": (
        ("proxy_id", "string"), ("broker_id", "long"), ("broker_zone", "string"), ("topic", "string"),
        ("partition", "long"), ("bytes", "long"), ("from_leader", "boolean"), ("interval_ms", "long"),
    ),
    # One per partition whose leader `azsidecar plan leaders --apply` moved, written once its
    # batch was verified (led by to_broker, same replica set, ISR not smaller). zone = where
    # the command ran (its --config's zone, "" without one); plan_id names the applied plan.
    "leader_move": (
        ("topic", "string"), ("partition", "long"), ("from_broker", "long"), ("from_zone", "string"),
        ("to_broker", "long"), ("to_zone", "string"), ("plan_id", "string"),
    ),
    # One per router leader-zone lookup. cache: hit | miss.
    "metadata_lookup": (
        ("topic", "string"), ("partition", "long"), ("leader_zone", "string"), ("cache", "string"),
    ),
    # The produce_batch records of one interval aggregated per key (proxy_id .. shadow_reason,
    # principal): batches, and the sums of bytes, records, wire_bytes and of each stage time
    # (<stage>_sum; values -1, "not applicable", add nothing). latency_hist: the batches per
    # LATENCY_BUCKETS_MS bucket, "index:count" pairs comma separated, empty buckets left out.
    # ts_ms = when the interval ended; first_ts_ms/last_ts_ms = the first and last batch's end.
    "produce_summary": (
        ("proxy_id", "string"), ("leader_zone", "string"), ("topic", "string"),
        ("partition", "long"), ("route", "string"), ("reason", "string"),
        ("error_code", "long"), ("principal", "string"), ("shadow_route", "string"), ("shadow_reason", "string"),
        ("batches", "long"), ("bytes", "long"), ("records", "long"), ("wire_bytes", "long"),
        ("latency_ms_sum", "double"), ("queue_ms_sum", "double"), ("s3_put_ms_sum", "double"),
        ("notify_rtt_ms_sum", "double"), ("leader_append_ms_sum", "double"), ("linger_wait_ms_sum", "double"),
        ("producer_wait_ms_sum", "double"), ("latency_max_ms", "double"), ("latency_hist", "string"),
        ("first_ts_ms", "long"), ("last_ts_ms", "long"), ("interval_ms", "long"),
    ),
    # The metadata_lookup records of one interval per (topic, partition, leader_zone, cache).
    "metadata_summary": (
        ("topic", "string"), ("partition", "long"), ("leader_zone", "string"), ("cache", "string"),
        ("lookups", "long"), ("interval_ms", "long"),
    ),
    # The wal_flush records of one interval summed per (writer_id, zones, reason, ok, size_class):
    # size_class = the objects' size rounded down to a power of two (0 for empty), the classes of
    # the break-even table. objects, and the exact sums of the wal_flush counts and times
    # (<time>_sum); put_hist = objects per LATENCY_BUCKETS_MS bucket of put_ms.
    "wal_flush_summary": (
        ("writer_id", "string"), ("zones", "string"), ("reason", "string"), ("ok", "boolean"),
        ("size_class", "long"), ("objects", "long"), ("bytes", "long"), ("entries", "long"), ("attempts", "long"),
        ("put_requests", "long"), ("put_ms_sum", "double"), ("put_wait_ms_sum", "double"),
        ("s3_request_ms_sum", "double"), ("put_max_ms", "double"), ("put_hist", "string"),
        ("first_ts_ms", "long"), ("last_ts_ms", "long"), ("interval_ms", "long"),
    ),
    # The notification records of one interval per (dest_zone, status, size_class of the object,
    # UNKNOWN_SIZE_CLASS when the proxy did not see its flush). request_packets/response_packets:
    # the sum over round trips of ceil(bytes / MSS) at path_mtu (audit.path_mtu), so the jobs count
    # whole packets as from single records; request_messages/response_messages: round trips with
    # bytes each way. entries_squared_sum, entries_bytes_sum: sums of entries^2 and of entries x
    # (request + response bytes), for the planner's fit of bytes per entry.
    "notification_summary": (
        ("dest_zone", "string"), ("status", "string"), ("size_class", "long"), ("notifications", "long"),
        ("entries", "long"), ("attempts", "long"), ("request_bytes", "long"), ("response_bytes", "long"),
        ("path_mtu", "long"), ("request_packets", "long"), ("response_packets", "long"),
        ("request_messages", "long"), ("response_messages", "long"),
        ("entries_squared_sum", "long"), ("entries_bytes_sum", "long"),
        ("rtt_ms_sum", "double"), ("rtt_max_ms", "double"), ("rtt_hist", "string"),
        ("first_ts_ms", "long"), ("last_ts_ms", "long"), ("interval_ms", "long"),
    ),
    # The agent_read records of one interval per source_zone: reads and the exact sums.
    "agent_read_summary": (
        ("source_zone", "string"), ("reads", "long"), ("bytes", "long"), ("gets", "long"), ("cache_hits", "long"),
        ("cache_misses", "long"), ("bytes_from_cache", "long"), ("latency_ms_sum", "double"),
        ("get_ms_sum", "double"), ("latency_max_ms", "double"), ("latency_hist", "string"),
        ("first_ts_ms", "long"), ("last_ts_ms", "long"), ("interval_ms", "long"),
    ),
    # The agent_apply records of one interval per (source_zone, status); handle_hist over handle_ms.
    "agent_apply_summary": (
        ("source_zone", "string"), ("status", "string"), ("applies", "long"), ("entries", "long"),
        ("read_ms_sum", "double"), ("append_ms_sum", "double"), ("handle_ms_sum", "double"),
        ("handle_max_ms", "double"), ("handle_hist", "string"),
        ("first_ts_ms", "long"), ("last_ts_ms", "long"), ("interval_ms", "long"),
    ),
    # The checkpoint_write records of one interval per (source_zone of the objects named, status):
    # keys = objects of that source zone named; manifest_puts = each manifest's one PUT shared
    # equally among the objects it names, summed over this source zone's (a manifest's shares add
    # up to 1 over its source zones: billed once); manifests and put_ms_sum count a manifest in
    # each source zone it names.
    "checkpoint_summary": (
        ("source_zone", "string"), ("status", "string"), ("manifests", "long"), ("keys", "long"),
        ("manifest_puts", "double"), ("put_ms_sum", "double"),
        ("first_ts_ms", "long"), ("last_ts_ms", "long"), ("interval_ms", "long"),
    ),
    # Records the writer had to drop (counted, never silent). reason: queue_full (the
    # bounded queue was full) | invalid (unknown field or a value of the wrong type) |
    # torn_tail (the end of a file a crashed writer left open: `dropped` torn records,
    # `salvaged` complete ones kept from that file, `torn_bytes` past the last complete one).
    "audit_drop": (
        ("dropped_kind", "string"), ("dropped", "long"), ("reason", "string"),
        ("salvaged", "long"), ("torn_bytes", "long"),
    ),
}


def fields_of(kind: str) -> tuple[tuple[str, str], ...]:
    """All fields of a kind, common ones first. Raises KeyError for an unknown kind."""
    return COMMON_FIELDS + KINDS[kind]


class NullAuditSink:
    """Discards records (tests of code above the audit writer, audit disabled)."""

    def emit(self, kind: str, fields: Mapping[str, Any]) -> None:
        return None


class MemoryAuditSink:
    """Keeps records in a list (unit tests that assert on what was audited)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, dict[str, Any]]] = []

    def emit(self, kind: str, fields: Mapping[str, Any]) -> None:
        if kind not in KINDS:
            raise KeyError(f"unknown audit record kind {kind!r}")
        self.records.append((kind, dict(fields)))

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [f for k, f in self.records if k == kind]

