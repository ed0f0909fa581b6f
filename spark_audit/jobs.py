"""The audit metrics as pure transformations: DataFrame in, table DataFrame out.

Strategy: parsing JSON is most of the cost (caching the parsed rows costs twice the
parse again), so the files are read once into a `rollup`: the input lines grouped by
every key any table needs (status, kind, version, hour, zones, route, object key, cache
result, drop reason) with every count summed. At 10 M records the rollup holds a few
hundred thousand rows (one per WAL object and per zone pair and hour); the runner
caches it and every table except latency is a small query over it. Latency needs the
raw values for its percentiles and is the one table computed from the records.

Money model (docs/audit-records.md, "How the savings are computed"):
- a direct produce of a cross-zone batch would have put `bytes + PRODUCE_OVERHEAD_BYTES`
  on the zone boundary;
- what did cross is the wire bytes of batches routed direct_cross plus every
  notification request and response;
- a byte that crosses costs `2 * cross_az_per_gb_each_way / BYTES_PER_GB` (billed on
  both sides); S3 requests cost their list price per 1,000; same-region S3 bytes are free.
WAL PUT requests are shared equally among the destination zones named in the flush
record (an object holds one contiguous range per zone); GETs belong to the agent's zone.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from core.prices import Prices

# Kafka Produce overhead per partition batch a direct produce would add on top of the raw
# batch, counting only the per-partition entries (ProduceRequest v9: partition_index 4 +
# records length varint <= 3 + tagged fields 1 = 8; ProduceResponse v9: partition_index 4
# + error_code 2 + base_offset 8 + log_append_time_ms 8 + log_start_offset 8 + empty
# record_errors 1 + null error_message 1 + tagged fields 1 = 33). Topic entries, headers
# and TCP/IP framing are left out, so this is a lower bound and never overstates savings.
PRODUCE_OVERHEAD_BYTES = 41
BYTES_PER_GB = 10**9  # AWS data-transfer "GB" as in docs/ARCHITECTURE's break-even (270 KB)
ROUTES = ("local", "direct_cross", "wal")
LATENCY_ACCURACY = 10_000  # percentile_approx: rank error <= n/10000; exact for n <= 10000
HOUR_FORMAT = "yyyy-MM-dd'T'HH':00Z'"  # session time zone must be UTC (see _io.spark_session)
HOUR_MS = 3_600_000
STATUS_COLUMN = "_status"  # set by the reader: ok | corrupt | unknown_kind

# Rollup keys: what any table groups or joins by. `key` only for the kinds that name a WAL
# object, `drop_reason` only for audit_drop (other kinds' `reason` would split groups).
ROLLUP_KEYS = ("_status", "kind", "schema_version", "hour_ms", "zone", "leader_zone", "dest_zone",
               "source_zone", "zones", "route", "cache", "key", "dropped_kind", "drop_reason")
ROLLUP_SUMS = ("records", "bytes", "wire_bytes", "request_bytes", "response_bytes", "put_requests", "gets",
               "cache_hits", "cache_misses", "bytes_from_cache", "entries", "dropped")
# The record fields each input reads (besides kind and schema_version): the runner parses
# only these, the JSON parser skips the rest.
ROLLUP_COLUMNS = ("ts_ms", "zone", "leader_zone", "dest_zone", "source_zone", "zones", "route", "cache", "key",
                  "dropped_kind", "reason", "status", "wal_keys") + ROLLUP_SUMS
LATENCY_COLUMNS = ("route", "zone", "leader_zone", "error_code", "latency_ms")
_OBJECT_KINDS = ("wal_flush", "agent_read", "notification", "agent_apply")
# GC checkpoint PUTs, billed like the WAL PUT itself. Schema v4: one checkpoint_write record
# per manifest PUT, shared equally among the WAL objects it names (each object's source
# zone is in its key). Before v4 every ok agent_apply was one PUT of its own.
CHECKPOINT_PUTS = "checkpoint_puts"
_CHECKPOINT_KINDS = ("agent_apply", "checkpoint_write")
FIRST_MANIFEST_SCHEMA_VERSION = 4
# <hash4>/wal/<source zone>/... anywhere in a WAL key (wal_s3.writer.object_key)
_SOURCE_ZONE_IN_KEY = r"(?:^|/)[0-9a-f]{4}/wal/([A-Za-z0-9._-]+)/"


def rollup(records: DataFrame) -> DataFrame:
    """Lines grouped by ROLLUP_KEYS with `n` (line count) and every ROLLUP_SUMS summed.

    `records` is the reader's output: the union schema plus STATUS_COLUMN. Corrupt and
    unknown-kind lines are kept (under their status) so the input summary comes from the
    same single scan. Missing counts (older schema versions) add 0.
    """
    kind = F.col("kind")
    ts = F.col("ts_ms")
    manifest = kind == "checkpoint_write"
    named = F.filter(F.split(F.coalesce(F.col("wal_keys"), F.lit("")), ","), lambda k: k != "")
    # A manifest becomes one row per object it names (null keys: one row, as every other line).
    exploded = (records.withColumn("_named", F.when(manifest & (F.size(named) > 0), named))
                .select("*", F.posexplode_outer("_named").alias("_named_pos", "_named_key")))
    checkpoint_puts = (
        F.when(manifest, F.when(F.col("_named").isNotNull(), 1.0 / F.size("_named")).otherwise(1.0))
        .when((kind == "agent_apply") & (F.col("status") == "ok")
              & (F.coalesce(F.col("schema_version"), F.lit(1)) < FIRST_MANIFEST_SCHEMA_VERSION), 1.0)
        .otherwise(0.0))
    keyed = exploded.select(
        F.col(STATUS_COLUMN).alias("_status"), kind, "schema_version",
        (ts - F.pmod(ts, F.lit(HOUR_MS))).alias("hour_ms"),
        "zone", "leader_zone", "dest_zone",
        F.when(manifest, F.regexp_extract(F.col("_named_key"), _SOURCE_ZONE_IN_KEY, 1))
        .otherwise(F.col("source_zone")).alias("source_zone"),
        "zones", "route", "cache",
        F.when(kind.isin(*_OBJECT_KINDS), F.col("key")).when(manifest, F.col("_named_key")).alias("key"),
        "dropped_kind",
        F.when(kind == "audit_drop", F.coalesce(F.col("reason"), F.lit("queue_full"))).alias("drop_reason"),
        *[_long(c).alias(c) for c in ROLLUP_SUMS],
        checkpoint_puts.cast("double").alias(CHECKPOINT_PUTS),
        # `n` counts input lines: a manifest's line once, not once per object it names
        F.when(F.coalesce(F.col("_named_pos"), F.lit(0)) == 0, 1).otherwise(0).alias("_line"),
    )
    return keyed.groupBy(*ROLLUP_KEYS).agg(
        F.sum("_line").cast("long").alias("n"), *[F.sum(c).alias(c) for c in (*ROLLUP_SUMS, CHECKPOINT_PUTS)])


def cross_byte_usd(prices: Prices) -> float:
    """Dollars per byte that crosses a zone boundary (charged to both sides)."""
    return 2 * prices.cross_az_per_gb_each_way / BYTES_PER_GB


def _hour_text(column: str = "hour_ms") -> Column:
    return F.date_format(F.timestamp_millis(F.col(column)), HOUR_FORMAT)


def _long(name: str) -> Column:
    """A count field read as 0 when absent (older schema version) or null."""
    return F.coalesce(F.col(name), F.lit(0)).cast("long")


def _kind(frame: DataFrame, kind: str) -> DataFrame:
    """Valid lines of one kind (rollup or records: both carry the status column)."""
    return frame.filter((F.col(STATUS_COLUMN) == "ok") & (F.col("kind") == kind))


def _kinds(frame: DataFrame, kinds: tuple[str, ...]) -> DataFrame:
    return frame.filter((F.col(STATUS_COLUMN) == "ok") & F.col("kind").isin(*kinds))


def _ratio(num: Column, den: Column) -> Column:
    return F.when(den != 0, num / den)


_SAVINGS_SUMS = (
    [f"batches_{r}" for r in ROUTES] + [f"records_{r}" for r in ROUTES] + [f"bytes_{r}" for r in ROUTES]
    + ["direct_equivalent_bytes", "direct_cross_wire_bytes", "notification_bytes",
       "s3_put_requests", "s3_get_requests"]
)


def _zero_except(**columns: Column) -> list[Column]:
    double_sums = {"s3_put_requests"}
    out = []
    for name in _SAVINGS_SUMS:
        value = columns.get(name, F.lit(0))
        out.append(value.cast("double" if name in double_sums else "long").alias(name))
    return out


def savings(rolled: DataFrame, prices: Prices, storage_class: str = "standard") -> DataFrame:
    """Per hour x source zone x leader zone: traffic per route, bytes and dollars saved.

    `rolled` is `rollup(records)`. Columns: hour, source_zone, leader_zone,
    batches_/records_/bytes_<route> for local, direct_cross and wal,
    direct_equivalent_bytes, direct_cross_wire_bytes, notification_bytes, s3_put_requests
    (the WAL PUT, fractional: shared among an object's zones, plus each zone's checkpoint
    PUT), s3_get_requests, crossed_bytes,
    cross_bytes_avoided, direct_transfer_usd, transfer_avoided_usd, s3_put_usd,
    s3_get_usd, net_savings_usd, savings_ratio (net savings over what direct produce
    would have cost; null when nothing would have crossed).
    Requests are priced in `storage_class`; with S3 Express its per-byte charges are added,
    upload to s3_put_usd and retrieval to s3_get_usd, on bytes_wal (each WAL byte is
    uploaded once and read once, by its zone's agent; agent cache hits are not subtracted).
    """
    byte_usd = cross_byte_usd(prices)
    store = prices.store(storage_class)
    keys = ("hour_ms", "source_zone", "leader_zone")
    route = F.col("route")
    n, records_, bytes_ = F.col("n"), F.col("records"), F.col("bytes")
    per_route: dict[str, Column] = {}
    for r in ROUTES:
        per_route[f"batches_{r}"] = F.when(route == r, n).otherwise(0)
        per_route[f"records_{r}"] = F.when(route == r, records_).otherwise(0)
        per_route[f"bytes_{r}"] = F.when(route == r, bytes_).otherwise(0)
    produce = _kind(rolled, "produce_batch").select(
        "hour_ms", F.col("zone").alias("source_zone"), F.col("leader_zone"),
        *_zero_except(
            **per_route,
            direct_equivalent_bytes=F.when(route != "local", bytes_ + n * PRODUCE_OVERHEAD_BYTES).otherwise(0),
            direct_cross_wire_bytes=F.when(route == "direct_cross", F.col("wire_bytes")).otherwise(0),
        ),
    )
    notifications = _kind(rolled, "notification").select(
        "hour_ms", F.col("zone").alias("source_zone"), F.col("dest_zone").alias("leader_zone"),
        *_zero_except(notification_bytes=F.col("request_bytes") + F.col("response_bytes")),
    )
    # zones: the destination zones of one WAL object, comma separated ("use1-az2,use1-az3").
    flushes = (
        _kind(rolled, "wal_flush")
        .withColumn("_zones", F.filter(F.split(F.coalesce(F.col("zones"), F.lit("")), r"[,;\s]+"),
                                       lambda z: z != ""))
        .withColumn("_zones", F.when(F.size("_zones") > 0, F.col("_zones")).otherwise(F.array(F.lit("unknown"))))
        .select(
            "hour_ms", F.col("zone").alias("source_zone"), F.explode("_zones").alias("leader_zone"),
            *_zero_except(s3_put_requests=F.col("put_requests") / F.size("_zones")),
        )
    )
    reads = _kind(rolled, "agent_read").select(
        "hour_ms", F.col("source_zone"), F.col("zone").alias("leader_zone"),
        *_zero_except(s3_get_requests=F.col("gets")),
    )
    checkpoints = _kinds(rolled, _CHECKPOINT_KINDS).select(
        "hour_ms", F.col("source_zone"), F.col("zone").alias("leader_zone"),
        *_zero_except(s3_put_requests=F.col(CHECKPOINT_PUTS)),
    )
    grouped = (
        produce.unionByName(notifications).unionByName(flushes).unionByName(reads).unionByName(checkpoints)
        .groupBy(*keys)
        .agg(*[F.sum(name).alias(name) for name in _SAVINGS_SUMS])
    )
    return (
        grouped
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
        .orderBy(*keys)
        .select(_hour_text().alias("hour"), *[c for c in grouped.columns if c != "hour_ms"],
                "crossed_bytes", "cross_bytes_avoided", "direct_transfer_usd", "transfer_avoided_usd",
                "s3_put_usd", "s3_get_usd", "net_savings_usd", "savings_ratio")
    )


def break_even(rolled: DataFrame, prices: Prices, storage_class: str = "standard") -> DataFrame:
    """Net savings of WAL objects by object size (power-of-two buckets).

    `rolled` is `rollup(records)`. Each wal_flush is joined by `key` to the GETs of its
    agent reads, the checkpoint PUTs of its agents (counted in put_requests) and the bytes of
    its notifications. Per object: transfer avoided =
    (bytes + entries * PRODUCE_OVERHEAD_BYTES - notification bytes) * byte price; request
    cost = PUTs and GETs at list price. Columns: size_bucket_bytes (lower bound), objects,
    mean_object_bytes, entries, put_requests, get_requests, notification_bytes,
    transfer_avoided_usd, request_usd, net_savings_usd, net_savings_usd_per_object,
    break_even_object_bytes (object size at which this bucket's per-object requests and
    notifications cost what they save).
    Requests are priced in `storage_class`; with S3 Express request_usd also holds the
    per-byte upload and retrieval of the object's bytes (each read once), and the break-even
    size solves fixed + size * per_byte = (size + overhead - notifications) * byte price
    (null when the per-byte charges alone exceed the transfer price).
    """
    byte_usd = cross_byte_usd(prices)
    store = prices.store(storage_class)
    put_usd = store.put_per_1000 / 1000
    get_usd = store.get_per_1000 / 1000
    per_byte_usd = store.upload_per_byte + store.retrieval_per_byte
    margin_usd = max(byte_usd - per_byte_usd, 1e-300)  # what a byte saves beyond its own S3 charges
    gets = _kind(rolled, "agent_read").groupBy("key").agg(F.sum("gets").alias("get_requests"))
    checkpoints = (_kinds(rolled, _CHECKPOINT_KINDS).groupBy("key")
                   .agg(F.sum(CHECKPOINT_PUTS).alias("checkpoint_puts")))
    notes = (_kind(rolled, "notification").groupBy("key")
             .agg(F.sum(F.col("request_bytes") + F.col("response_bytes")).alias("notification_bytes")))
    objects = (
        _kind(rolled, "wal_flush").groupBy("key")
        .agg(F.sum("bytes").alias("object_bytes"), F.sum("entries").alias("entries"),
             F.sum("put_requests").alias("put_requests"))
        .join(gets, "key", "left").join(notes, "key", "left").join(checkpoints, "key", "left")
        .fillna(0, subset=["get_requests", "notification_bytes", "checkpoint_puts"])
        .withColumn("put_requests", F.col("put_requests") + F.col("checkpoint_puts"))
        # log2(bytes + 0.5): keeps exact powers of two in their own bucket despite
        # floating-point log (log2(8) may come out as 2.9999999999999996).
        .withColumn("size_bucket_bytes",
                    F.when(F.col("object_bytes") > 0,
                           F.pow(F.lit(2), F.floor(F.log2(F.col("object_bytes") + 0.5))).cast("long"))
                    .otherwise(F.lit(0)))
    )
    per_object_avoided = (F.col("object_bytes") + F.col("entries") * PRODUCE_OVERHEAD_BYTES
                          - F.col("notification_bytes")) * F.lit(byte_usd)
    per_object_fixed = F.col("put_requests") * F.lit(put_usd) + F.col("get_requests") * F.lit(get_usd)
    per_object_requests = per_object_fixed + F.col("object_bytes") * F.lit(per_byte_usd)
    return (
        objects.groupBy("size_bucket_bytes").agg(
            F.count(F.lit(1)).alias("objects"),
            F.avg("object_bytes").alias("mean_object_bytes"),
            F.sum("entries").alias("entries"),
            F.sum("put_requests").alias("put_requests"),
            F.sum("get_requests").alias("get_requests"),
            F.sum("notification_bytes").alias("notification_bytes"),
            F.sum(per_object_avoided).alias("transfer_avoided_usd"),
            F.sum(per_object_requests).alias("request_usd"),
            F.sum(per_object_fixed).alias("_fixed_usd"),
        )
        .withColumn("net_savings_usd", F.col("transfer_avoided_usd") - F.col("request_usd"))
        .withColumn("net_savings_usd_per_object", F.col("net_savings_usd") / F.col("objects"))
        .withColumn("break_even_object_bytes",
                    F.when(F.lit(byte_usd > per_byte_usd),
                           (F.col("_fixed_usd") / F.lit(margin_usd)
                            + (F.col("notification_bytes") - F.col("entries") * PRODUCE_OVERHEAD_BYTES)
                            * F.lit(byte_usd / margin_usd)) / F.col("objects")))
        .drop("_fixed_usd")
        .orderBy("size_bucket_bytes")
    )


def agent_cache(rolled: DataFrame) -> DataFrame:
    """Agents' block cache per hour x agent zone, from `rollup(records)`.

    Columns: hour, zone, reads, cache_hits, cache_misses, lookups, hit_rate (hits over
    lookups), bytes, bytes_from_cache, byte_hit_rate, gets.
    """
    return (
        _kind(rolled, "agent_read")
        .groupBy("hour_ms", "zone").agg(
            F.sum("n").alias("reads"), F.sum("cache_hits").alias("cache_hits"),
            F.sum("cache_misses").alias("cache_misses"), F.sum("bytes").alias("bytes"),
            F.sum("bytes_from_cache").alias("bytes_from_cache"), F.sum("gets").alias("gets"))
        .withColumn("lookups", F.col("cache_hits") + F.col("cache_misses"))
        .withColumn("hit_rate", _ratio(F.col("cache_hits"), F.col("lookups")))
        .withColumn("byte_hit_rate", _ratio(F.col("bytes_from_cache"), F.col("bytes")))
        .orderBy("hour_ms", "zone")
        .select(_hour_text().alias("hour"), "zone", "reads", "cache_hits", "cache_misses", "lookups", "hit_rate",
                "bytes", "bytes_from_cache", "byte_hit_rate", "gets")
    )


def metadata_cache(rolled: DataFrame) -> DataFrame:
    """Router leader-zone cache per hour x proxy zone, from `rollup(records)`.

    Columns: hour, zone, lookups, hits, misses, hit_rate (hits over lookups).
    """
    cache = F.col("cache")
    return (
        _kind(rolled, "metadata_lookup")
        .groupBy("hour_ms", "zone").agg(
            F.sum("n").alias("lookups"),
            F.sum(F.when(cache == "hit", F.col("n")).otherwise(0)).alias("hits"),
            F.sum(F.when(cache == "miss", F.col("n")).otherwise(0)).alias("misses"))
        .withColumn("hit_rate", _ratio(F.col("hits"), F.col("lookups")))
        .orderBy("hour_ms", "zone")
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
        .orderBy("zone", "dropped_kind", "reason")
    )


def latency(records: DataFrame) -> DataFrame:
    """Produce latency per route x source zone x leader zone, over successful batches.

    `records` is the reader's output (one row per line), not the rollup.
    Percentiles by `percentile_approx` with accuracy LATENCY_ACCURACY: each is a value
    from the data whose rank is within n / LATENCY_ACCURACY of the exact one (exact for
    up to that many batches per group). Columns: route, source_zone, leader_zone,
    batches (all), errors (error_code != 0), p50_ms, p95_ms, p99_ms, mean_ms, max_ms.
    """
    ok = F.coalesce(F.col("error_code"), F.lit(0)) == 0
    ok_latency = F.when(ok, F.col("latency_ms"))
    return (
        _kind(records, "produce_batch")
        .groupBy("route", F.col("zone").alias("source_zone"), "leader_zone")
        .agg(
            F.count(F.lit(1)).alias("batches"),
            F.sum(F.when(ok, 0).otherwise(1)).cast("long").alias("errors"),
            F.percentile_approx(ok_latency, [0.5, 0.95, 0.99], LATENCY_ACCURACY).alias("_p"),
            F.avg(ok_latency).alias("mean_ms"),
            F.max(ok_latency).alias("max_ms"),
        )
        .select("route", "source_zone", "leader_zone", "batches", "errors",
                F.col("_p")[0].alias("p50_ms"), F.col("_p")[1].alias("p95_ms"), F.col("_p")[2].alias("p99_ms"),
                "mean_ms", "max_ms")
        .orderBy("route", "source_zone", "leader_zone")
    )
