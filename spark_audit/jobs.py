"""The audit metrics as pure transformations: DataFrame in, table DataFrame out.

Strategy: parsing JSON is most of the cost (caching the parsed rows costs twice the
parse again), so the files are read once into a `rollup`: the input lines grouped by
every key any table needs (status, kind, version, hour, zones, route, object key, cache
result, drop reason) with every count summed. At 10 M records the rollup holds a few
hundred thousand rows (one per WAL object and per zone pair and hour); the runner
caches it and every table except latency is a small query over it. Latency needs the
raw values for its percentiles and is the one table computed from the records.

Produce batches and leader-zone lookups come one record per event (produce_batch,
metadata_lookup) or one per proxy, interval and key (schema v13 produce_summary,
metadata_summary: core/audit.py). Both read alike: a summary's `batches` / `lookups`
weigh it (`events` in the rollup, 1 for every other line), its byte and record counts are
already sums, and latency percentiles come from the fixed-bucket histograms
(core.latency_histogram), a per-batch record counted into the bucket of its latency_ms.
The WAL path's per-object records (wal_flush, notification, agent_read, agent_apply,
checkpoint_write) come one per object or summed per process, interval and key (schema v15
*_summary kinds): the summary's count field weighs it in `events`, its sums are the same
sums, its notification packets are counted at the writer's MTU, and `break_even` reads its
objects' size class instead of joining by object key.

Money model (docs/audit-records.md, "How the savings are computed"):
- bytes are bytes on the wire, TCP/IP framing included, for the configured path MTU
  (`core.framing`): a direct produce of a cross-zone batch would have put at least
  `stream(bytes + PRODUCE_OVERHEAD_BYTES)` across (data packets' headers, no ACKs); a
  notification round trip at most whole packets each way and their ACKs;
- what did cross is the direct_cross batches (the same estimate as their direct
  equivalent, so they save nothing) plus every notification;
- a byte that crosses costs `2 * cross_az_per_gb_each_way / BYTES_PER_GB` (billed on
  both sides); S3 requests cost their list price per 1,000; same-region S3 bytes are free.
WAL PUT requests are shared equally among the destination zones named in the flush
record (an object holds one contiguous range per zone); GETs belong to the agent's zone;
the product's other S3 requests (epochs, GC, recovery: `s3_request` records) belong to
the zone that made them, under leader zone SHARED_ZONE.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from core.audit import (
    AGENT_APPLY_KINDS,
    AGENT_READ_KINDS,
    CHECKPOINT_KINDS,
    FALLBACK_DIRECT_REASON,
    FLUSH_KINDS,
    LATENCY_BUCKETS_MS,
    LOOKUP_KINDS,
    NOTIFICATION_KINDS,
    PRODUCE_KINDS,
)
from core.framing import ACKS_PER_MESSAGE, PRODUCE_OVERHEAD_BYTES, Framing
from core.prices import Prices
from kafka_protocol.api_names import API_NAMES

BYTES_PER_GB = 10**9  # AWS data-transfer "GB" as in docs/ARCHITECTURE's break-even (270 KB)
ROUTES = ("local", "direct_cross", "wal")
HOUR_FORMAT = "yyyy-MM-dd'T'HH':00Z'"  # session time zone must be UTC (see _io.spark_session)
MINUTE_FORMAT = "yyyy-MM-dd'T'HH:mm'Z'"
HOUR_MS = 3_600_000
STATUS_COLUMN = "_status"  # set by the reader: ok | corrupt | unknown_kind

# Rollup keys: what any table groups or joins by. `key` only for the kinds that name a WAL
# object, `drop_reason` only for audit_drop (other kinds' `reason` would split groups).
# `size_class` and `flush_ok` only for the summary kinds that carry them (schema v15).
ROLLUP_KEYS = ("_status", "kind", "schema_version", "hour_ms", "zone", "leader_zone", "dest_zone",
               "source_zone", "zones", "route", "cache", "key", "dropped_kind", "drop_reason", "operation",
               "purpose", "broker_zone", "api_key", "trouble", "trouble_minute_ms", "from_leader", "size_class",
               "flush_ok")
ROLLUP_SUMS = ("records", "bytes", "request_bytes", "response_bytes", "put_requests", "gets",
               "cache_hits", "cache_misses", "bytes_from_cache", "entries", "dropped", "requests")
# The record fields each input reads (besides kind and schema_version): the runner parses
# only these, the JSON parser skips the rest.
ROLLUP_COLUMNS = ("ts_ms", "zone", "leader_zone", "dest_zone", "source_zone", "zones", "route", "cache", "key",
                  "dropped_kind", "reason", "status", "wal_keys", "operation", "purpose", "broker_zone",
                  "api_key", "error_code", "from_leader", "batches", "lookups", "objects", "notifications",
                  "reads", "applies", "manifests", "manifest_puts", "size_class", "ok", "path_mtu", "request_packets",
                  "response_packets", "request_messages", "response_messages") + ROLLUP_SUMS
# The events a rollup row stands for: produce batches, lookups, WAL objects, notifications,
# agent reads and applies, checkpoint manifests (a summary's count field, 1 per event record),
# 1 per line of any other kind. `n` stays the line count.
EVENTS = "events"
# The field that counts the events of each summary kind (core/audit.py, v13 and v15).
SUMMARY_EVENTS = {"produce_summary": "batches", "metadata_summary": "lookups", "wal_flush_summary": "objects",
                  "notification_summary": "notifications", "agent_read_summary": "reads",
                  "agent_apply_summary": "applies", "checkpoint_summary": "manifests"}
# Notification bytes on the wire (framing.round_trip_wire_bytes), summed per line in the rollup
# because whole packets are counted per message.
NOTIFICATION_WIRE = "notification_wire_bytes"
# Zone trouble (`zone_trouble`): produce batches that fell back across zones
# (FALLBACK_DIRECT_REASON) or failed on the WAL route are kept per minute in the rollup
# (`trouble`, `trouble_minute_ms`; null for every other line, which adds no groups).
MINUTE_MS = 60_000
TROUBLE_FALLBACK = "fallback"
TROUBLE_WAL_FAILED = "wal_failed"
# Leader zone of S3 requests that serve no single zone pair (epochs, GC, recovery).
SHARED_ZONE = "(shared)"
# S3 request classes (list prices): LIST is billed as a PUT, HEAD as a GET, DELETE is free.
PUT_PRICED_OPERATIONS = ("PUT", "LIST", "POST", "COPY")
GET_PRICED_OPERATIONS = ("GET", "HEAD")
LATENCY_COLUMNS = ("route", "zone", "leader_zone", "error_code", "latency_ms", "batches", "latency_ms_sum",
                   "latency_max_ms", "latency_hist")
# What the leader-placement table reads from each produce_batch (a scan of its own, like latency:
# per partition it would multiply the rollup's rows by the partition count).
PLACEMENT_COLUMNS = ("topic", "partition", "zone", "leader_zone", "bytes", "error_code", "ts_ms", "batches",
                     "first_ts_ms", "last_ts_ms")
# What the per-topic and per-team split reads from each produce_batch (a scan of its own, for
# the same reason). principal: schema v11; null in older records.
TOPIC_COLUMNS = ("topic", "principal", "zone", "leader_zone", "route", "bytes", "batches")
# The kinds only agents write: their zones are the agents the compute cost counts.
AGENT_KINDS = (*AGENT_READ_KINDS, *AGENT_APPLY_KINDS, *CHECKPOINT_KINDS)
# What the comparison around the last applied leader plan reads: the leader_move records
# and the produce batches (a scan of its own, run only when the input has leader_move records).
LAST_APPLY_COLUMNS = (*PLACEMENT_COLUMNS, "from_zone", "to_zone", "plan_id")
LAST_APPLY_OUTPUT = ("plan_id", "applied_from_ms", "applied_to_ms", "window_ms", "topic", "partition", "from_zone",
                     "to_zone", "window", "source_zone", "leader_zone", "batches", "bytes")
_OBJECT_KINDS = ("wal_flush", "agent_read", "notification", "agent_apply")
# GC checkpoint PUTs, billed like the WAL PUT itself. Schema v4: one checkpoint_write record
# per manifest PUT, shared equally among the WAL objects it names (each object's source
# zone is in its key). Before v4 every ok agent_apply was one PUT of its own.
CHECKPOINT_PUTS = "checkpoint_puts"
_CHECKPOINT_KINDS = ("agent_apply", *CHECKPOINT_KINDS)
FIRST_MANIFEST_SCHEMA_VERSION = 4
# <hash4>/wal/<source zone>/... anywhere in a WAL key (wal_s3.writer.object_key)
_SOURCE_ZONE_IN_KEY = r"(?:^|/)[0-9a-f]{4}/wal/([A-Za-z0-9._-]+)/"


def _message_packets(column: str, framing: Framing) -> Column:
    size = _long(column)
    return F.when(size > 0, F.ceil(size / F.lit(framing.mss))).otherwise(0)


def _summed_packets(direction: str, framing: Framing) -> Column:
    """A notification_summary's packets one way (`direction`: request or response): exact, its
    own sum of ceil(bytes / MSS), when it was counted at `framing`'s MTU; else at most
    floor((bytes + messages x (MSS - 1)) / MSS), each message's ceil rounding up by < 1 packet
    (an upper bound, as the notification side of the framing model is)."""
    size, messages = _long(f"{direction}_bytes"), _long(f"{direction}_messages")
    bound = F.floor((size + messages * F.lit(framing.mss - 1)) / F.lit(framing.mss)).cast("long")
    return F.when(F.col("path_mtu") == F.lit(framing.path_mtu), _long(f"{direction}_packets")).otherwise(bound)


def notification_wire(framing: Framing) -> Column:
    """framing.round_trip_wire_bytes of one notification line, or the sum of it over the round
    trips of a notification_summary line, as a Spark expression."""
    request, response = _long("request_bytes"), _long("response_bytes")
    packets = (_message_packets("request_bytes", framing) + _message_packets("response_bytes", framing)
               + F.lit(ACKS_PER_MESSAGE) * ((request > 0).cast("long") + (response > 0).cast("long")))
    summed = (_summed_packets("request", framing) + _summed_packets("response", framing)
              + F.lit(ACKS_PER_MESSAGE) * (_long("request_messages") + _long("response_messages")))
    packets = F.when(F.col("kind") == "notification_summary", summed).otherwise(packets)
    return request + response + packets * F.lit(framing.packet_header_bytes)


def batch_weight() -> Column:
    """The batches a produce line stands for: a produce_summary's `batches`, else 1."""
    return F.when(F.col("kind") == "produce_summary", _long("batches")).otherwise(F.lit(1).cast("long"))


def rollup(records: DataFrame, framing: Framing | None = None) -> DataFrame:
    """Lines grouped by ROLLUP_KEYS with `n` (line count), EVENTS (the batches or lookups of
    summary lines, 1 per other line) and every ROLLUP_SUMS summed.

    `records` is the reader's output: the union schema plus STATUS_COLUMN. Corrupt and
    unknown-kind lines are kept (under their status) so the input summary comes from the
    same single scan. Missing counts (older schema versions) add 0. NOTIFICATION_WIRE sums
    each notification's bytes on the wire for `framing` (default: `Framing()`).

    Every line goes through plain column expressions only (no generator, no lambda: those
    stop Spark's code generation and cost per line); the checkpoint manifests, a handful of
    lines, are grouped by their whole `wal_keys` and shared among the objects they name
    after the grouping (`_share_manifests`).
    """
    framing = framing or Framing()
    kind = F.col("kind")
    ts = F.col("ts_ms")
    manifest = kind == "checkpoint_write"
    checkpoint_puts = (
        F.when(manifest, 1.0)
        .when(kind == "checkpoint_summary", F.coalesce(F.col("manifest_puts"), F.lit(0.0)))
        .when((kind == "agent_apply") & (F.col("status") == "ok")
              & (F.coalesce(F.col("schema_version"), F.lit(1)) < FIRST_MANIFEST_SCHEMA_VERSION), 1.0)
        .otherwise(0.0))
    produce = kind.isin(*PRODUCE_KINDS)
    events = F.lit(1).cast("long")
    for summary_kind, count in SUMMARY_EVENTS.items():
        events = F.when(kind == summary_kind, _long(count)).otherwise(events)
    trouble = (
        F.when(produce & (F.col("route") == "direct_cross") & (F.col("reason") == FALLBACK_DIRECT_REASON),
               F.lit(TROUBLE_FALLBACK))
        .when(produce & (F.col("route") == "wal") & (F.coalesce(F.col("error_code"), F.lit(0)) != 0),
              F.lit(TROUBLE_WAL_FAILED)))
    keyed = records.select(
        F.col(STATUS_COLUMN).alias("_status"), kind, "schema_version",
        trouble.alias("trouble"),
        F.when(trouble.isNotNull(), ts - F.pmod(ts, F.lit(MINUTE_MS))).alias("trouble_minute_ms"),
        (ts - F.pmod(ts, F.lit(HOUR_MS))).alias("hour_ms"),
        "zone", "leader_zone", "dest_zone", "source_zone", "zones", "route", "cache",
        F.when(kind.isin(*_OBJECT_KINDS), F.col("key")).when(manifest, F.col("wal_keys")).alias("key"),
        "dropped_kind",
        F.when(kind == "audit_drop", F.coalesce(F.col("reason"), F.lit("queue_full"))).alias("drop_reason"),
        "operation", "purpose", "broker_zone", "api_key", "ts_ms",
        F.when(kind == "fetch_bytes", F.col("from_leader")).alias("from_leader"),  # schema v14; null elsewhere
        F.when(kind.isin("wal_flush_summary", "notification_summary"), F.col("size_class")).alias("size_class"),
        F.when(kind == "wal_flush_summary", F.col("ok")).alias("flush_ok"),
        *[_long(c).alias(c) for c in ROLLUP_SUMS],
        checkpoint_puts.alias(CHECKPOINT_PUTS), events.alias(EVENTS),
        F.when(kind.isin(*NOTIFICATION_KINDS), notification_wire(framing)).otherwise(0).cast("long")
        .alias(NOTIFICATION_WIRE),
    )
    grouped = keyed.groupBy(*ROLLUP_KEYS).agg(
        F.count(F.lit(1)).alias("n"),
        *[F.sum(c).alias(c) for c in (*ROLLUP_SUMS, EVENTS, CHECKPOINT_PUTS, NOTIFICATION_WIRE)],
        F.min("ts_ms").alias("first_ts_ms"), F.max("ts_ms").alias("last_ts_ms"))
    return _share_manifests(grouped)


def _share_manifests(grouped: DataFrame) -> DataFrame:
    """Rollup rows of checkpoint manifests (`key` = the comma-separated WAL keys they name)
    become one row per named object: its key, its source zone (read from the key) and an
    equal share of the manifests' PUTs; the line count and other sums stay on the first.
    A manifest naming nothing keeps one row with a null key; other rows pass unchanged.

    One generator over the grouped rows, not a filter and a union: Spark pushes a filter on
    a grouping key below the aggregation, which would read the input twice.
    """
    is_manifest = F.coalesce(F.col("kind") == "checkpoint_write", F.lit(False))
    named = F.array_remove(F.split(F.coalesce(F.col("key"), F.lit("")), ","), "")
    exploded = (grouped.withColumn("_named", F.when(is_manifest & (F.size(named) > 0), named))
                .select("*", F.posexplode_outer("_named").alias("_pos", "_one")))
    first = F.coalesce(F.col("_pos"), F.lit(0)) == 0
    columns = []
    for c in grouped.columns:
        if c == "key":
            columns.append(F.when(is_manifest, F.col("_one")).otherwise(F.col(c)).alias(c))
        elif c == "source_zone":
            columns.append(F.when(F.col("_one").isNotNull(), F.regexp_extract(F.col("_one"), _SOURCE_ZONE_IN_KEY, 1))
                           .otherwise(F.col(c)).alias(c))
        elif c == CHECKPOINT_PUTS:
            columns.append(F.when(F.col("_named").isNotNull(), F.col(c) / F.size("_named"))
                           .otherwise(F.col(c)).alias(c))
        elif c in ("n", EVENTS, NOTIFICATION_WIRE) or c in ROLLUP_SUMS:
            columns.append(F.when(first, F.col(c)).otherwise(F.lit(0).cast(grouped.schema[c].dataType)).alias(c))
        else:
            columns.append(F.col(c))
    return exploded.select(*columns)


def cross_byte_usd(prices: Prices) -> float:
    """Dollars per byte that crosses a zone boundary (charged to both sides)."""
    return 2 * prices.cross_az_per_gb_each_way / BYTES_PER_GB


def _hour_text(column: str = "hour_ms", text_format: str = HOUR_FORMAT) -> Column:
    return F.date_format(F.timestamp_millis(F.col(column)), text_format)


def _long(name: str) -> Column:
    """A count field read as 0 when absent (older schema version) or null."""
    return F.coalesce(F.col(name), F.lit(0)).cast("long")


def _kind(frame: DataFrame, kind: str) -> DataFrame:
    """Valid lines of one kind (rollup or records: both carry the status column)."""
    return frame.filter((F.col(STATUS_COLUMN) == "ok") & (F.col("kind") == kind))


def _kinds(frame: DataFrame, kinds: tuple[str, ...]) -> DataFrame:
    return frame.filter((F.col(STATUS_COLUMN) == "ok") & F.col("kind").isin(*kinds))


def _sorted(frame: DataFrame, *columns: str) -> DataFrame:
    """`frame` in one partition, sorted by `columns`: result tables are small, and a global
    `orderBy` would run a sampling job of its own to range-partition a few hundred rows."""
    return frame.coalesce(1).sortWithinPartitions(*columns)


def _ratio(num: Column, den: Column) -> Column:
    return F.when(den != 0, num / den)


_SAVINGS_SUMS = (
    [f"batches_{r}" for r in ROUTES] + [f"records_{r}" for r in ROUTES] + [f"bytes_{r}" for r in ROUTES]
    + ["_wal_wire", "_direct_cross_wire", "notification_bytes", "s3_put_requests", "s3_get_requests"]
)
_DOUBLE_SUMS = {"s3_put_requests", "_wal_wire", "_direct_cross_wire"}


def _zero_except(**columns: Column) -> list[Column]:
    out = []
    for name in _SAVINGS_SUMS:
        value = columns.get(name, F.lit(0))
        out.append(value.cast("double" if name in _DOUBLE_SUMS else "long").alias(name))
    return out


def _direct_produce_wire(route: str, framing: Framing) -> Column:
    """framing.direct_produce_wire_bytes of the rollup row's batches on `route` (else 0)."""
    payload = F.col("bytes") + F.col(EVENTS) * PRODUCE_OVERHEAD_BYTES
    return F.when(F.col("route") == route, payload * F.lit(framing.stream_factor)).otherwise(0.0)


def savings(rolled: DataFrame, prices: Prices, framing: Framing | None = None,
            storage_class: str = "standard") -> DataFrame:
    """Per hour x source zone x leader zone: traffic per route, bytes and dollars saved.

    `rolled` is `rollup(records, framing)`, with the same `framing` (default `Framing()`).
    Columns: hour, source_zone, leader_zone, batches_/records_/bytes_<route> for local,
    direct_cross and wal; then bytes on the wire (TCP/IP framing included; what a direct
    produce would send at least, what the notifications sent at most):
    direct_equivalent_bytes (what a direct produce of every cross-zone batch puts across,
    rounded down), direct_cross_wire_bytes (the direct_cross batches' share of it: they
    crossed, so they save nothing), notification_bytes; s3_put_requests (the WAL PUT,
    fractional: shared among an object's zones, plus its checkpoint PUTs; under leader zone
    SHARED_ZONE the product's other PUT-priced requests: epochs, GC LISTs), s3_get_requests,
    crossed_bytes, cross_bytes_avoided, direct_transfer_usd, transfer_avoided_usd,
    s3_put_usd, s3_get_usd, net_savings_usd, savings_ratio (net savings over what direct
    produce would have cost; null when nothing would have crossed).
    Requests are priced in `storage_class`; with S3 Express its per-byte charges are added,
    upload to s3_put_usd and retrieval to s3_get_usd, on bytes_wal (each WAL byte is
    uploaded once and read once, by its zone's agent; agent cache hits are not subtracted).
    """
    framing = framing or Framing()
    byte_usd = cross_byte_usd(prices)
    store = prices.store(storage_class)
    keys = ("hour_ms", "source_zone", "leader_zone")
    route = F.col("route")
    n, records_, bytes_ = F.col(EVENTS), F.col("records"), F.col("bytes")
    per_route: dict[str, Column] = {}
    for r in ROUTES:
        per_route[f"batches_{r}"] = F.when(route == r, n).otherwise(0)
        per_route[f"records_{r}"] = F.when(route == r, records_).otherwise(0)
        per_route[f"bytes_{r}"] = F.when(route == r, bytes_).otherwise(0)
    # One pass over the rollup: each row is attributed to its (source zone, leader zone)
    # pair(s) - a WAL object to each destination zone it names, with an equal share of its
    # PUT - and every sum is a CASE on the kind (rather than a union of one scan per kind).
    kind = F.col("kind")
    agent_kinds = (*AGENT_READ_KINDS, *_CHECKPOINT_KINDS)
    # zones: the destination zones of one WAL object (or of a summary's objects), comma
    # separated ("use1-az2,use1-az3").
    zones = F.filter(F.split(F.coalesce(F.col("zones"), F.lit("")), r"[,;\s]+"), lambda z: z != "")
    leader_zones = (
        F.when(kind.isin(*PRODUCE_KINDS), F.array(F.col("leader_zone")))
        .when(kind.isin(*NOTIFICATION_KINDS), F.array(F.col("dest_zone")))
        .when(kind.isin(*FLUSH_KINDS), F.when(F.size(zones) > 0, zones).otherwise(F.array(F.lit("unknown"))))
        .when(kind.isin(*agent_kinds), F.array(F.col("zone")))
        .otherwise(F.array(F.lit(SHARED_ZONE))))  # s3_request: epochs, GC, recovery
    operation = F.upper(F.coalesce(F.col("operation"), F.lit("")))
    is_request = kind == "s3_request"
    attributed = (
        _kinds(rolled, (*PRODUCE_KINDS, *NOTIFICATION_KINDS, *FLUSH_KINDS, "s3_request", *agent_kinds))
        .withColumn("_leaders", leader_zones)
        .select("*", F.explode("_leaders").alias("_leader"))
    )
    grouped = (
        attributed.select(
            "hour_ms",
            F.when(kind.isin(*agent_kinds), F.col("source_zone")).otherwise(F.col("zone")).alias("source_zone"),
            F.col("_leader").alias("leader_zone"),
            *_zero_except(
                **per_route,
                _wal_wire=_direct_produce_wire("wal", framing),
                _direct_cross_wire=_direct_produce_wire("direct_cross", framing),
                notification_bytes=F.when(kind.isin(*NOTIFICATION_KINDS), F.col(NOTIFICATION_WIRE)).otherwise(0),
                s3_put_requests=(
                    F.when(kind.isin(*FLUSH_KINDS), F.col("put_requests") / F.size("_leaders"))
                    .when(kind.isin(*_CHECKPOINT_KINDS), F.col(CHECKPOINT_PUTS))
                    .when(is_request & operation.isin(*PUT_PRICED_OPERATIONS), F.col("requests"))
                    .otherwise(0)),
                s3_get_requests=(
                    F.when(kind.isin(*AGENT_READ_KINDS), F.col("gets"))
                    .when(is_request & operation.isin(*GET_PRICED_OPERATIONS), F.col("requests"))
                    .otherwise(0)),
            ),
        )
        .groupBy(*keys)
        .agg(*[F.sum(name).alias(name) for name in _SAVINGS_SUMS])
    )
    wal_equivalent = F.floor(F.col("_wal_wire"))
    return (
        grouped
        .withColumn("direct_equivalent_bytes",
                    F.floor(F.col("_wal_wire") + F.col("_direct_cross_wire")).cast("long"))
        # the direct_cross batches' share: exactly what they add to the direct equivalent
        .withColumn("direct_cross_wire_bytes", (F.col("direct_equivalent_bytes") - wal_equivalent).cast("long"))
        .withColumn("crossed_bytes", F.col("direct_cross_wire_bytes") + F.col("notification_bytes"))
        .withColumn("cross_bytes_avoided", F.col("direct_equivalent_bytes") - F.col("crossed_bytes"))
        .withColumn("direct_transfer_usd", F.col("direct_equivalent_bytes") * F.lit(byte_usd))
        .withColumn("transfer_avoided_usd", F.col("cross_bytes_avoided") * F.lit(byte_usd))
        .withColumn("s3_put_usd", F.col("s3_put_requests") * F.lit(store.put_per_1000 / 1000)
                    + F.col("bytes_wal") * F.lit(store.upload_per_byte))
        .withColumn("s3_get_usd", F.col("s3_get_requests") * F.lit(store.get_per_1000 / 1000)
                    + F.col("bytes_wal") * F.lit(store.retrieval_per_byte))
        .withColumn("net_savings_usd",
                    F.col("transfer_avoided_usd") - F.col("s3_put_usd") - F.col("s3_get_usd"))
        .withColumn("savings_ratio", _ratio(F.col("net_savings_usd"), F.col("direct_transfer_usd")))
        .transform(lambda f: _sorted(f, *keys))
        .select(_hour_text().alias("hour"), "source_zone", "leader_zone",
                *[c for c in grouped.columns if c.startswith(("batches_", "records_", "bytes_"))],
                "direct_equivalent_bytes", "direct_cross_wire_bytes", "notification_bytes",
                "s3_put_requests", "s3_get_requests",
                "crossed_bytes", "cross_bytes_avoided", "direct_transfer_usd", "transfer_avoided_usd",
                "s3_put_usd", "s3_get_usd", "net_savings_usd", "savings_ratio")
    )


def break_even(rolled: DataFrame, prices: Prices, framing: Framing | None = None,
               storage_class: str = "standard") -> DataFrame:
    """Net savings of WAL objects by object size (power-of-two buckets).

    `rolled` is `rollup(records, framing)`, with the same `framing` (default `Framing()`).
    Per-object records: each wal_flush is joined by `key` to the GETs of its agent reads, the
    checkpoint PUTs of its agents (counted in put_requests) and its notifications; keys
    without a wal_flush are left out. Summed records (schema v15): a wal_flush_summary's
    size_class is the bucket, with the exact sums of its objects' bytes, entries and PUTs,
    and a notification_summary's bytes on the wire go to its objects' size class; the agents'
    GETs and checkpoint PUTs (the agent does not know an object's size) and notifications of
    objects whose size the proxy had not seen are shared among all objects in proportion to
    their zone shares (an object for two zones weighs two; an object whose PUT failed, none), which is exact in total and,
    per class, as exact as those requests are equal per zone share (one GET per share and
    manifest PUTs already shared equally per object, as the per-object form shares them).
    Per object, on the wire: transfer avoided = (stream(bytes + entries *
    PRODUCE_OVERHEAD_BYTES) - notification bytes on the wire) * byte price; request cost =
    PUTs and GETs at list price. Every column is a sum per bucket, so the two forms mix.
    Columns: size_bucket_bytes (lower bound), objects, mean_object_bytes, entries,
    put_requests, get_requests, notification_bytes (on the wire), transfer_avoided_usd,
    request_usd, net_savings_usd, net_savings_usd_per_object, break_even_object_bytes (object
    size at which this bucket's per-object requests and notifications cost what they save).
    Requests are priced in `storage_class`; with S3 Express request_usd also holds the
    per-byte upload and retrieval of the object's bytes (each read once), and the break-even
    size solves fixed + size * per_byte = (stream(size + overhead) - notifications) * byte
    price (null when the per-byte charges alone exceed what a byte saves on the wire).
    """
    framing = framing or Framing()
    factor = F.lit(framing.stream_factor)
    byte_usd = cross_byte_usd(prices)
    store = prices.store(storage_class)
    put_usd = store.put_per_1000 / 1000
    get_usd = store.get_per_1000 / 1000
    per_byte_usd = store.upload_per_byte + store.retrieval_per_byte
    saved_per_byte_usd = framing.stream_factor * byte_usd  # one payload byte's transfer, on the wire
    margin_usd = max(saved_per_byte_usd - per_byte_usd, 1e-300)  # beyond its own S3 charges
    kind = F.col("kind")
    sums = ("objects", "object_bytes", "entries", "put_requests", "get_requests", "notification_bytes", "shares")

    def of(kinds: tuple[str, ...], column: str) -> Column:
        return F.coalesce(F.sum(F.when(kind.isin(*kinds), F.col(column))), F.lit(0))

    def zone_shares(objects: Column) -> Column:
        named = F.size(F.filter(F.split(F.coalesce(F.col("zones"), F.lit("")), r"[,;\s]+"), lambda z: z != ""))
        return objects * F.greatest(named, F.lit(1))

    # Per-object records: one aggregation by object key over every kind that names one (not
    # one per kind and three joins): what each object cost and carried.
    by_key = (
        _kinds(rolled, ("wal_flush", "agent_read", "notification", "agent_apply", "checkpoint_write")).groupBy("key")
        .agg(of(("wal_flush",), "n").alias("_flushes"),
             of(("wal_flush",), "bytes").alias("object_bytes"), of(("wal_flush",), "entries").alias("entries"),
             (of(("wal_flush",), "put_requests") + of(_CHECKPOINT_KINDS, CHECKPOINT_PUTS)).alias("put_requests"),
             of(("agent_read",), "gets").alias("get_requests"),
             of(("notification",), NOTIFICATION_WIRE).alias("notification_bytes"),
             F.coalesce(F.sum(F.when(kind == "wal_flush", zone_shares(F.lit(1)))), F.lit(0)).alias("shares"))
    )
    per_object = (
        by_key.filter(F.col("_flushes") > 0)
        # log2(bytes + 0.5): keeps exact powers of two in their own bucket despite
        # floating-point log (log2(8) may come out as 2.9999999999999996).
        .withColumn("size_bucket_bytes",
                    F.when(F.col("object_bytes") > 0,
                           F.pow(F.lit(2), F.floor(F.log2(F.col("object_bytes") + 0.5))).cast("long"))
                    .otherwise(F.lit(0)))
        .groupBy("size_bucket_bytes")
        .agg(F.count(F.lit(1)).alias("objects"), *[F.sum(c).alias(c) for c in sums[1:]])
    )
    summary_flush = (
        _kind(rolled, "wal_flush_summary")
        .groupBy(F.coalesce(F.col("size_class"), F.lit(0)).alias("size_bucket_bytes"))
        .agg(F.sum(EVENTS).alias("objects"), F.sum("bytes").alias("object_bytes"), F.sum("entries").alias("entries"),
             F.sum("put_requests").cast("double").alias("put_requests"), F.lit(0).alias("get_requests"),
             F.lit(0).alias("notification_bytes"),
             # only durable objects were read: a failed PUT's object takes no share of the agents' requests
             F.sum(F.when(F.col("flush_ok"), zone_shares(F.col(EVENTS))).otherwise(0)).alias("shares"))
    )
    sized_notifications = (
        _kind(rolled, "notification_summary").filter(F.col("size_class") >= 0)
        .groupBy(F.col("size_class").alias("size_bucket_bytes"))
        .agg(*[F.lit(0).alias(c) for c in sums[:5]], F.sum(NOTIFICATION_WIRE).alias("notification_bytes"),
             F.lit(0).alias("shares"))
    )
    classes = (
        per_object.select("size_bucket_bytes", *sums)
        .unionByName(summary_flush.select("size_bucket_bytes", *sums))
        .unionByName(sized_notifications.select("size_bucket_bytes", *sums))
        .groupBy("size_bucket_bytes").agg(*[F.sum(c).alias(c) for c in sums])
        .filter(F.col("objects") > 0)
    )
    # What no object's size says, shared by zone shares: the summed agents' GETs and manifest
    # PUTs, the summed notifications of objects of unknown size and, when objects were summed
    # (their keys unknown), the per-object agents' and notifications' records of no flushed key.
    unsized = (
        _kinds(rolled, ("agent_read_summary", "checkpoint_summary", "notification_summary"))
        .filter(F.coalesce(F.col("size_class"), F.lit(-1)) < 0)
        .agg(F.coalesce(F.sum(F.when(kind == "checkpoint_summary", F.col(CHECKPOINT_PUTS))), F.lit(0.0))
             .alias("_pool_puts"),
             F.coalesce(F.sum(F.when(kind == "agent_read_summary", F.col("gets"))), F.lit(0)).alias("_pool_gets"),
             F.coalesce(F.sum(F.when(kind == "notification_summary", F.col(NOTIFICATION_WIRE))),
                        F.lit(0)).alias("_pool_notes"))
    )
    unkeyed = by_key.filter(F.col("_flushes") == 0).agg(
        F.coalesce(F.sum("put_requests"), F.lit(0.0)).alias("_orphan_puts"),
        F.coalesce(F.sum("get_requests"), F.lit(0)).alias("_orphan_gets"),
        F.coalesce(F.sum("notification_bytes"), F.lit(0)).alias("_orphan_notes"))
    totals = classes.agg(F.sum("shares").alias("_all_shares"))
    summed_shares = summary_flush.agg(F.coalesce(F.sum("shares"), F.lit(0)).alias("_summed_shares"))
    orphans_count = F.when(F.col("_summed_shares") > 0, F.lit(1.0)).otherwise(F.lit(0.0))
    share = F.when(F.col("_all_shares") > 0, F.col("shares") / F.col("_all_shares")).otherwise(F.lit(0.0))
    shared = (
        classes.crossJoin(F.broadcast(unsized)).crossJoin(F.broadcast(unkeyed)).crossJoin(F.broadcast(totals))
        .crossJoin(F.broadcast(summed_shares))
        .withColumn("put_requests", F.col("put_requests")
                    + (F.col("_pool_puts") + F.col("_orphan_puts") * orphans_count) * share)
        .withColumn("get_requests", F.col("get_requests")
                    + (F.col("_pool_gets") + F.col("_orphan_gets") * orphans_count) * share)
        .withColumn("notification_bytes", F.col("notification_bytes")
                    + (F.col("_pool_notes") + F.col("_orphan_notes") * orphans_count) * share)
    )
    avoided = ((F.col("object_bytes") + F.col("entries") * PRODUCE_OVERHEAD_BYTES) * factor
               - F.col("notification_bytes")) * F.lit(byte_usd)
    fixed = F.col("put_requests") * F.lit(put_usd) + F.col("get_requests") * F.lit(get_usd)
    return (
        shared.select(
            "size_bucket_bytes", F.col("objects").cast("long").alias("objects"),
            (F.col("object_bytes") / F.col("objects")).alias("mean_object_bytes"),
            F.col("entries").cast("long").alias("entries"),
            F.col("put_requests").cast("double").alias("put_requests"),
            F.col("get_requests").cast("double").alias("get_requests"),
            F.col("notification_bytes").cast("double").alias("notification_bytes"),
            avoided.alias("transfer_avoided_usd"),
            (fixed + F.col("object_bytes") * F.lit(per_byte_usd)).alias("request_usd"),
            fixed.alias("_fixed_usd"))
        .withColumn("net_savings_usd", F.col("transfer_avoided_usd") - F.col("request_usd"))
        .withColumn("net_savings_usd_per_object", F.col("net_savings_usd") / F.col("objects"))
        # solve fixed + size * per_byte = ((size + entries * 41) * factor - notifications) * byte price
        .withColumn("break_even_object_bytes",
                    F.when(F.lit(saved_per_byte_usd > per_byte_usd),
                           (F.col("_fixed_usd") / F.lit(margin_usd)
                            + (F.col("notification_bytes")
                               - F.col("entries") * PRODUCE_OVERHEAD_BYTES * factor) * F.lit(byte_usd / margin_usd))
                           / F.col("objects")))
        .drop("_fixed_usd")
        .transform(lambda f: _sorted(f, "size_bucket_bytes"))
    )


def agent_cache(rolled: DataFrame) -> DataFrame:
    """Agents' block cache per hour x agent zone, from `rollup(records)`.

    Columns: hour, zone, reads, cache_hits, cache_misses, lookups, hit_rate (hits over
    lookups), bytes, bytes_from_cache, byte_hit_rate, gets.
    """
    return (
        _kinds(rolled, AGENT_READ_KINDS)
        .groupBy("hour_ms", "zone").agg(
            F.sum(EVENTS).alias("reads"), F.sum("cache_hits").alias("cache_hits"),
            F.sum("cache_misses").alias("cache_misses"), F.sum("bytes").alias("bytes"),
            F.sum("bytes_from_cache").alias("bytes_from_cache"), F.sum("gets").alias("gets"))
        .withColumn("lookups", F.col("cache_hits") + F.col("cache_misses"))
        .withColumn("hit_rate", _ratio(F.col("cache_hits"), F.col("lookups")))
        .withColumn("byte_hit_rate", _ratio(F.col("bytes_from_cache"), F.col("bytes")))
        .transform(lambda f: _sorted(f, "hour_ms", "zone"))
        .select(_hour_text().alias("hour"), "zone", "reads", "cache_hits", "cache_misses", "lookups", "hit_rate",
                "bytes", "bytes_from_cache", "byte_hit_rate", "gets")
    )


def metadata_cache(rolled: DataFrame) -> DataFrame:
    """Router leader-zone cache per hour x proxy zone, from `rollup(records)`.

    Columns: hour, zone, lookups, hits, misses, hit_rate (hits over lookups).
    """
    cache = F.col("cache")
    return (
        _kinds(rolled, LOOKUP_KINDS)
        .groupBy("hour_ms", "zone").agg(
            F.sum(EVENTS).alias("lookups"),
            F.sum(F.when(cache == "hit", F.col(EVENTS)).otherwise(0)).alias("hits"),
            F.sum(F.when(cache == "miss", F.col(EVENTS)).otherwise(0)).alias("misses"))
        .withColumn("hit_rate", _ratio(F.col("hits"), F.col("lookups")))
        .transform(lambda f: _sorted(f, "hour_ms", "zone"))
        .select(_hour_text().alias("hour"), "zone", "lookups", "hits", "misses", "hit_rate")
    )


def writer_drops(rolled: DataFrame) -> DataFrame:
    """Records the writers dropped, per zone x dropped kind x reason, from `rollup(records)`.

    A v1 drop record (no reason field) means queue_full. Columns: zone, dropped_kind,
    reason, dropped.
    """
    return (
        _kind(rolled, "audit_drop")
        .groupBy("zone", "dropped_kind", F.col("drop_reason").alias("reason"))
        .agg(F.sum("dropped").alias("dropped"))
        .transform(lambda f: _sorted(f, "zone", "dropped_kind", "reason"))
    )


ZONE_TROUBLE_COUNTS = ("fallback_batches", "fallback_bytes", "fallback_wire_bytes", "failed_wal_batches",
                       "unread_objects", "unread_put_requests")


def zone_trouble(rolled: DataFrame, prices: Prices, framing: Framing | None = None,
                 storage_class: str = "standard") -> DataFrame:
    """Per minute x source zone x destination zone in which the WAL path to that zone was in
    trouble, what the trouble cost, from `rollup(records, framing)`; minutes without trouble
    have no row. Trouble is any of: batches the router sent across zones because the path was
    unhealthy (FALLBACK_DIRECT_REASON), batches that failed on the WAL route (their producer
    retries them), WAL objects for that zone that none of its agents read (a failed PUT, an
    object written for a zone that went away; an object read after the input's window ends
    counts too, so the window's last minute may show one).

    Columns: minute, source_zone, dest_zone, fallback_batches, fallback_bytes,
    fallback_wire_bytes (what the fallback put across, estimated as `savings` estimates
    direct_cross: the framing's stream factor on bytes + PRODUCE_OVERHEAD_BYTES per batch,
    rounded down), failed_wal_batches, unread_objects (by the minute of their PUT;
    of summed flushes, schema v15, only those whose PUT failed: a summary names no object),
    unread_put_requests (their PUTs, shared equally among the zones an object holds entries
    for, as in `savings`), fallback_transfer_usd, unread_put_usd (in `storage_class`), cost_usd.
    """
    framing = framing or Framing()
    keys = ("minute_ms", "source_zone", "dest_zone")
    fallback = F.col("trouble") == TROUBLE_FALLBACK
    produce = (
        _kinds(rolled, PRODUCE_KINDS).filter(F.col("trouble").isNotNull())
        .groupBy(F.col("trouble_minute_ms").alias("minute_ms"), F.col("zone").alias("source_zone"),
                 F.coalesce(F.col("leader_zone"), F.lit("")).alias("dest_zone"))
        .agg(F.sum(F.when(fallback, F.col(EVENTS)).otherwise(0)).alias("fallback_batches"),
             F.sum(F.when(fallback, F.col("bytes")).otherwise(0)).alias("fallback_bytes"),
             F.sum(F.when(fallback, (F.col("bytes") + F.col(EVENTS) * PRODUCE_OVERHEAD_BYTES)
                          * F.lit(framing.stream_factor)).otherwise(0.0)).alias("_fallback_wire"),
             F.sum(F.when(fallback, 0).otherwise(F.col(EVENTS))).alias("failed_wal_batches"))
        .withColumn("fallback_wire_bytes", F.floor(F.col("_fallback_wire")).cast("long"))
        .drop("_fallback_wire")
    )
    zones = F.filter(F.split(F.coalesce(F.col("zones"), F.lit("")), r"[,;\s]+"), lambda z: z != "")
    flushed = (
        _kind(rolled, "wal_flush").filter(F.col("key").isNotNull())
        .select("key", F.col("zone").alias("source_zone"), "put_requests",
                (F.col("first_ts_ms") - F.pmod(F.col("first_ts_ms"), F.lit(MINUTE_MS))).alias("minute_ms"),
                F.size(zones).alias("_shares"), F.explode(zones).alias("dest_zone"))
    )
    read = _kind(rolled, "agent_read").select("key", F.col("zone").alias("dest_zone")).distinct()
    # Summed flushes (schema v15) name no object, so which one an agent read is not known: of
    # them only the objects whose PUT failed count (no agent can read those).
    failed = (
        _kind(rolled, "wal_flush_summary").filter(F.col("flush_ok") == F.lit(False))
        .select(F.col("zone").alias("source_zone"), F.col(EVENTS).alias("_objects"), "put_requests",
                (F.col("first_ts_ms") - F.pmod(F.col("first_ts_ms"), F.lit(MINUTE_MS))).alias("minute_ms"),
                F.size(zones).alias("_shares"), F.explode(zones).alias("dest_zone"))
    )
    unread = (
        flushed.join(read, ["key", "dest_zone"], "left_anti").drop("key")
        .withColumn("_objects", F.lit(1).cast("long"))
        .unionByName(failed)
        .groupBy(*keys)
        .agg(F.sum("_objects").alias("unread_objects"),
             F.sum(F.col("put_requests") / F.col("_shares")).alias("unread_put_requests"))
    )
    store = prices.store(storage_class)
    return (
        produce.join(unread, list(keys), "full_outer")
        .fillna(0, subset=list(ZONE_TROUBLE_COUNTS))
        .withColumn("unread_put_requests", F.col("unread_put_requests").cast("double"))
        .withColumn("fallback_transfer_usd", F.col("fallback_wire_bytes") * F.lit(cross_byte_usd(prices)))
        .withColumn("unread_put_usd", F.col("unread_put_requests") * F.lit(store.put_per_1000 / 1000))
        .withColumn("cost_usd", F.col("fallback_transfer_usd") + F.col("unread_put_usd"))
        .transform(lambda f: _sorted(f, *keys))
        .select(_hour_text("minute_ms", MINUTE_FORMAT).alias("minute"), "minute_ms", "source_zone", "dest_zone",
                *[F.col(c).cast("double" if c == "unread_put_requests" else "long").alias(c)
                  for c in ZONE_TROUBLE_COUNTS],
                "fallback_transfer_usd", "unread_put_usd", "cost_usd")
    )


def passthrough_bytes(rolled: DataFrame, prices: Prices, framing: Framing | None = None) -> DataFrame:
    """Requests the proxies passed through to brokers (consumers, admin clients) per client
    zone x broker zone x API, from `rollup(records)` (schema v7 `passthrough_bytes`).

    Columns: zone (the proxy's, i.e. the client's), broker_zone ("" unknown), api_key, api
    (Kafka's name), requests, request_bytes, response_bytes (whole frames), wire_bytes (both
    directions on the wire, at least: `framing.stream_factor` per byte, rounded),
    cross_zone (null when the broker's zone is unknown), transfer_usd (wire bytes x the
    cross-zone price both sides pay; 0 in-zone, null unknown).
    """
    framing = framing or Framing()
    names = F.create_map(*[F.lit(x) for key, name in sorted(API_NAMES.items()) for x in (key, name)])
    cross = F.when(F.col("broker_zone") != "", F.col("zone") != F.col("broker_zone"))
    return (
        _kind(rolled, "passthrough_bytes")
        .withColumn("broker_zone", F.coalesce(F.col("broker_zone"), F.lit("")))
        .groupBy("zone", "broker_zone", "api_key").agg(
            F.sum("requests").alias("requests"), F.sum("request_bytes").alias("request_bytes"),
            F.sum("response_bytes").alias("response_bytes"))
        .withColumn("api", F.coalesce(names[F.col("api_key")], F.col("api_key").cast("string")))
        .withColumn("wire_bytes", F.round((F.col("request_bytes") + F.col("response_bytes"))
                                          * F.lit(framing.stream_factor)).cast("long"))
        .withColumn("cross_zone", cross)
        .withColumn("transfer_usd", F.when(cross, F.col("wire_bytes") * F.lit(cross_byte_usd(prices)))
                    .when(~cross, F.lit(0.0)))
        .transform(lambda f: _sorted(f, "zone", "broker_zone", "api_key"))
        .select("zone", "broker_zone", "api_key", "api", "requests", "request_bytes", "response_bytes",
                "wire_bytes", "cross_zone", "transfer_usd")
    )


def _first_ts() -> Column:
    """When a produce line's first batch ended: a summary's first_ts_ms, else ts_ms."""
    return F.coalesce(F.when(F.col("kind") == "produce_summary", F.col("first_ts_ms")), F.col("ts_ms"))


def _last_ts() -> Column:
    """When a produce line's last batch ended: a summary's last_ts_ms, else ts_ms."""
    return F.coalesce(F.when(F.col("kind") == "produce_summary", F.col("last_ts_ms")), F.col("ts_ms"))


def latency_buckets() -> Column:
    """A produce line's latency histogram as an array of (bucket, batches) structs: a
    summary's latency_hist parsed ("index:count,..."), a produce_batch's one batch in the
    bucket of its latency_ms (the number of bounds below it, as core.latency_histogram)."""
    bounds = F.array(*[F.lit(float(b)) for b in LATENCY_BUCKETS_MS[:-1]])
    latency = F.greatest(F.coalesce(F.col("latency_ms"), F.lit(0.0)), F.lit(0.0))
    one = F.array(F.struct(F.size(F.filter(bounds, lambda b: b < latency)).alias("bucket"),
                           F.lit(1).cast("long").alias("count")))
    pairs = F.filter(F.split(F.coalesce(F.col("latency_hist"), F.lit("")), ","), lambda p: p != "")
    parsed = F.transform(pairs, lambda p: F.struct(F.split(p, ":")[0].cast("int").alias("bucket"),
                                                   F.split(p, ":")[1].cast("long").alias("count")))
    return F.when(F.col("kind") == "produce_summary", parsed).otherwise(one)


LATENCY_QUANTILES = {"p50_ms": 0.5, "p95_ms": 0.95, "p99_ms": 0.99}


def fetch_bytes(rolled: DataFrame) -> DataFrame:
    """Record bytes of the Fetch answers the proxies passed through, per consumer zone x
    broker zone x who served them, from `rollup(records)` (schema v14 `fetch_bytes`).

    Columns: zone (the proxy's, the consumer's), broker_zone ("" unknown), served_by
    (`leader`, `follower`, `unknown`: the record's from_leader), bytes (the partitions'
    record bytes; the rows of answers the proxy could not scan, partition -2, are whole
    frames and counted too), cross_zone (null when the broker's zone is unknown). These bytes
    are part of passthrough_bytes' Fetch response bytes, not more: no price here, so the
    report never counts them twice; what it shows is the share a leader move could change.
    """
    cross = F.when(F.col("broker_zone") != "", F.col("zone") != F.col("broker_zone"))
    served = F.when(F.col("from_leader"), F.lit("leader")).when(~F.col("from_leader"), F.lit("follower")) \
        .otherwise(F.lit("unknown"))
    return (
        _kind(rolled, "fetch_bytes")
        .withColumn("broker_zone", F.coalesce(F.col("broker_zone"), F.lit("")))
        .withColumn("served_by", served)
        .groupBy("zone", "broker_zone", "served_by").agg(F.sum("bytes").cast("long").alias("bytes"))
        .withColumn("cross_zone", cross)
        .transform(lambda f: _sorted(f, "zone", "broker_zone", "served_by"))
        .select("zone", "broker_zone", "served_by", "bytes", "cross_zone")
    )


def latency(records: DataFrame) -> DataFrame:
    """Produce latency per route x source zone x leader zone, over successful batches.

    `records` is the reader's output (one row per line), not the rollup: produce_batch and
    produce_summary lines alike. Percentiles are read from the fixed-bucket histograms
    (`latency_buckets`, core.latency_histogram): the upper bound of the bucket that holds
    rank ceil(q * n), capped at the group's max; never below the exact percentile, at most
    one bucket step (<= 1.5x) above it. mean_ms and max_ms are exact (a summary carries its
    latency_ms_sum and latency_max_ms). Columns: route, source_zone, leader_zone, batches
    (all), errors (batches with error_code != 0), p50_ms, p95_ms, p99_ms, mean_ms, max_ms.
    """
    keys = ("route", "source_zone", "leader_zone")
    ok = F.coalesce(F.col("error_code"), F.lit(0)) == 0
    weight = batch_weight()
    summary = F.col("kind") == "produce_summary"
    lines = (_kinds(records, PRODUCE_KINDS)
             .select("route", F.col("zone").alias("source_zone"), "leader_zone", ok.alias("_ok"),
                     weight.alias("_batches"),
                     F.when(summary, F.col("latency_ms_sum")).otherwise(F.col("latency_ms")).alias("_sum"),
                     F.when(summary, F.col("latency_max_ms")).otherwise(F.col("latency_ms")).alias("_max"),
                     latency_buckets().alias("_buckets")))
    okay = F.col("_ok")
    totals = lines.groupBy(*keys).agg(
        F.sum("_batches").cast("long").alias("batches"),
        F.sum(F.when(okay, 0).otherwise(F.col("_batches"))).cast("long").alias("errors"),
        F.sum(F.when(okay, F.col("_batches"))).alias("_ok_batches"),
        F.sum(F.when(okay, F.col("_sum"))).alias("_ok_sum"),
        F.max(F.when(okay, F.col("_max"))).alias("max_ms"))
    per_bucket = (lines.filter(okay).select(*keys, F.explode("_buckets").alias("_b"))
                  .groupBy(*keys, F.col("_b.bucket").alias("bucket")).agg(F.sum("_b.count").alias("count")))
    group = Window.partitionBy(*keys)
    cumulative = (per_bucket
                  .withColumn("_seen", F.sum("count").over(group.orderBy("bucket")
                                                           .rowsBetween(Window.unboundedPreceding, Window.currentRow)))
                  .withColumn("_n", F.sum("count").over(group)))
    quantile_buckets = cumulative.groupBy(*keys).agg(*[
        F.min(F.when(F.col("_seen") >= F.ceil(F.col("_n") * F.lit(q) - F.lit(1e-9)), F.col("bucket"))).alias(name)
        for name, q in LATENCY_QUANTILES.items()])
    bound = F.array(*[F.lit(float(b)) for b in LATENCY_BUCKETS_MS])
    joined = totals.alias("t").join(quantile_buckets.alias("q"),
                                    [F.col(f"t.{k}").eqNullSafe(F.col(f"q.{k}")) for k in keys], "left")
    return (
        joined.select(*[F.col(f"t.{k}").alias(k) for k in keys], "batches", "errors",
                      *[F.least(F.element_at(bound, F.col(f"q.{name}") + 1), F.col("max_ms")).alias(name)
                        for name in LATENCY_QUANTILES],
                      (F.col("_ok_sum") / F.col("_ok_batches")).alias("mean_ms"), "max_ms")
        .transform(lambda f: _sorted(f, *keys))
    )


def leader_traffic(records: DataFrame) -> DataFrame:
    """Produce bytes per topic x partition x source zone x leader zone, over successful batches.

    `records` is the reader's output (one row per line), not the rollup. A partition whose
    leader moved within the period has a row per leader zone (the zone its batches named
    when they were produced), with the first and last timestamp of each (a summary's first and
    last batch: interval resolution), so the report can
    tell the period before a move from the one after. Batches without a topic or partition
    are left out. Columns: topic, partition, source_zone, leader_zone ("" unknown), batches,
    bytes, first_ts_ms, last_ts_ms.
    """
    ok = F.coalesce(F.col("error_code"), F.lit(0)) == 0
    return (
        _kinds(records, PRODUCE_KINDS)
        .filter(ok & F.col("topic").isNotNull() & (F.col("topic") != "") & (F.col("partition") >= 0))
        .groupBy("topic", "partition", F.coalesce(F.col("zone"), F.lit("")).alias("source_zone"),
                 F.coalesce(F.col("leader_zone"), F.lit("")).alias("leader_zone"))
        .agg(F.sum(batch_weight()).alias("batches"), F.sum(_long("bytes")).alias("bytes"),
             F.min(_first_ts()).alias("first_ts_ms"), F.max(_last_ts()).alias("last_ts_ms"))
        .transform(lambda f: _sorted(f, "topic", "partition", "source_zone", "leader_zone"))
    )


def topic_traffic(records: DataFrame) -> DataFrame:
    """Produce batches and bytes per source zone x leader zone x topic x principal, by route.

    `records` is the reader's output (one row per line), not the rollup: per topic and
    principal the rollup would grow by their count. Every produce_batch counts, failed ones
    too, as in `savings`, so the bytes per route add up to that table's. The report apportions
    the savings table's dollars to topics and teams by these bytes (`spark_audit.cost_split`).
    Columns: source_zone, leader_zone (as the batch named them; null when absent, as in
    `savings`), topic ("" when absent), principal ("" for records before schema v11, which
    have none), batches, bytes_local, bytes_direct_cross, bytes_wal.
    """
    route = F.col("route")
    return (
        _kinds(records, PRODUCE_KINDS)
        .groupBy(F.col("zone").alias("source_zone"), "leader_zone", F.coalesce(F.col("topic"), F.lit("")).alias("topic"),
                 F.coalesce(F.col("principal"), F.lit("")).alias("principal"))
        .agg(F.sum(batch_weight()).alias("batches"),
             *[F.sum(F.when(route == r, _long("bytes")).otherwise(0)).cast("long").alias(f"bytes_{r}") for r in ROUTES])
        .transform(lambda f: _sorted(f, "topic", "principal", "source_zone", "leader_zone"))
    )


def agent_zones(rolled: DataFrame) -> DataFrame:
    """The zones agents wrote records in (AGENT_KINDS), from `rollup(records)`: the agents the
    report's compute cost counts. The records name no agent, only its zone.

    Columns: zone, records, first_ts_ms, last_ts_ms.
    """
    return (
        _kinds(rolled, AGENT_KINDS)
        .groupBy("zone")
        .agg(F.sum("n").alias("records"), F.min("first_ts_ms").alias("first_ts_ms"),
             F.max("last_ts_ms").alias("last_ts_ms"))
        .transform(lambda f: _sorted(f, "zone"))
    )


def last_apply(records: DataFrame) -> DataFrame:
    """The produce bytes of the partitions the last applied leader plan moved, in the window
    after the apply and in the same-length window before it.

    `records` is the reader's output (one row per line), not the rollup. The last apply is
    the plan (`plan_id`) of the latest `leader_move` record; it ran from its first record
    (applied_from_ms) to its last (applied_to_ms). The windows are as long as both fit in the
    audit (window_ms: the shorter of first produce batch to applied_from_ms and applied_to_ms
    to the last produce batch): before = [applied_from_ms - window_ms, applied_from_ms),
    after = [applied_to_ms, applied_to_ms + window_ms]; the batches during the apply are in
    neither; a produce_summary counts in the window of its ts_ms (the end of its interval).
    Successful batches that name a partition, per moved partition x window x source
    zone (the proxy's) x leader zone (as the batch named it, "" unknown). A moved partition
    with no batch in either window has one row with a null window, so every move is listed.
    Columns: LAST_APPLY_OUTPUT.
    """
    ts = F.col("ts_ms")
    moves = _kind(records, "leader_move").filter(F.col("topic").isNotNull() & F.col("partition").isNotNull())
    last_plan = moves.orderBy(F.desc("ts_ms"), F.desc("plan_id")).limit(1).select("plan_id")
    moved = moves.join(last_plan, "plan_id")
    span = moved.agg(F.min("ts_ms").alias("applied_from_ms"), F.max("ts_ms").alias("applied_to_ms"))
    ok = F.coalesce(F.col("error_code"), F.lit(0)) == 0
    produce = (_kinds(records, PRODUCE_KINDS)
               .filter(ok & F.col("topic").isNotNull() & (F.col("topic") != "") & (F.col("partition") >= 0)))
    audited = produce.agg(F.min(_first_ts()).alias("_first_ms"), F.max(_last_ts()).alias("_last_ms"))
    windows = span.crossJoin(audited).select(
        "applied_from_ms", "applied_to_ms",
        F.greatest(F.least(F.col("_last_ms") - F.col("applied_to_ms"), F.col("applied_from_ms") - F.col("_first_ms")),
                   F.lit(0)).alias("window_ms"))
    window = (F.when((ts >= F.col("applied_to_ms")) & (ts <= F.col("applied_to_ms") + F.col("window_ms")), "after")
              .when((ts >= F.col("applied_from_ms") - F.col("window_ms")) & (ts < F.col("applied_from_ms")), "before"))
    # A plan moves a partition once; should a record be written twice (a retried batch), the latest names it.
    partitions = (moved.groupBy("plan_id", "topic", "partition")
                  .agg(F.max_by("from_zone", "ts_ms").alias("from_zone"), F.max_by("to_zone", "ts_ms").alias("to_zone")))
    traffic = (produce.join(F.broadcast(partitions.select("topic", "partition")), ["topic", "partition"])
               .crossJoin(F.broadcast(windows))
               .filter(F.col("window_ms") > 0)
               .withColumn("window", window)
               .filter(F.col("window").isNotNull())
               .groupBy("topic", "partition", "window", F.coalesce(F.col("zone"), F.lit("")).alias("source_zone"),
                        F.coalesce(F.col("leader_zone"), F.lit("")).alias("leader_zone"))
               .agg(F.sum(batch_weight()).alias("batches"), F.sum(_long("bytes")).alias("bytes")))
    return (partitions.crossJoin(windows)
            .join(traffic, ["topic", "partition"], "left")
            .select(*LAST_APPLY_OUTPUT)
            .transform(lambda f: _sorted(f, "topic", "partition", "window", "source_zone", "leader_zone")))
