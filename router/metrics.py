"""Prometheus metrics of routing decisions (served with the proxy's /metrics).

A zone these metrics are about is `dest_zone` (the leader's zone), as in the notification
sender's metrics: `zone` is left to the scrape target (the proxy's own zone), which the
dashboards filter by.
"""

from collections.abc import Callable

from prometheus_client import Counter, Gauge, Histogram

from core.counter_tally import CounterTally, TalliedCounter
from core.metric_children import Children

# The proxy's request-latency buckets (proxy/metrics.py), so the per-route series compare with them.
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

DECISIONS = TalliedCounter("azsidecar_router_decisions_total", "Partition batches routed, by path and reason",
                           ["route", "reason"])
METADATA_LOOKUPS = TalliedCounter("azsidecar_router_metadata_lookups_total", "Leader-zone lookups by cache outcome (hit, miss)",
                                  ["outcome"])
ZONE_OPEN = Gauge("azsidecar_router_zone_circuit_open", "1 while the WAL path to a zone is avoided",
                  ["dest_zone"])
ZONE_CAUSES = ("healthy", "agent_slow", "agent_gone", "zone_partitioned", "s3_unreachable")  # router/zone_health.Cause
ZONE_CONDITION = Gauge("azsidecar_router_zone_condition",
                       "1 for a zone's current condition (healthy while its circuit is closed; else the cause "
                       "the circuit follows: agent_slow | agent_gone | zone_partitioned | s3_unreachable)",
                       ["dest_zone", "condition"])
GRAY_FAILURES = Counter("azsidecar_router_gray_failures_total",
                        "WAL PUTs or notifications abandoned at their gray deadline (breaker failures)",
                        ["dest_zone", "operation"])
RESENDS = TalliedCounter("azsidecar_router_resent_batches_total",
                         "Partition batches refused because their leader moved (source: the old leader, or the agent of "
                         "the zone it left) and sent again by the new leader's route", ["route", "source"])

# Per partition batch, from the request's submission to the partition's result, by the path
# it took (local, direct_cross, wal): what the WAL route adds is the difference. Named
# azsidecar_proxy_* since they were first served: dashboards and alerts query these names.
PRODUCE_LATENCY = Histogram(
    "azsidecar_proxy_produce_latency_seconds", "Partition batch from submission to its result, by route",
    ["route"], buckets=LATENCY_BUCKETS_S)
BYTES_IN = TalliedCounter("azsidecar_proxy_received_bytes_total", "Record batch bytes received, by route", ["route"])
BYTES_OUT = TalliedCounter("azsidecar_proxy_sent_bytes_total", "Record batch bytes sent on, by route", ["route"])
SHADOW_DECISIONS = TalliedCounter("azsidecar_router_shadow_decisions_total",
                                  "Shadow mode: partition batches by the path and reason the policy would have chosen",
                                  ["route", "reason"])
SHADOW_BYTES = TalliedCounter("azsidecar_router_shadow_bytes_total",
                              "Shadow mode: record batch bytes by the path the policy would have chosen", ["route"])
# The local route's forward path (router/forwarded_round.py): requests sent on as the client's
# bytes, by how their answer came back, and requests it declined, by reason.
FORWARDED = TalliedCounter("azsidecar_router_forwarded_requests_total",
                           "Produce requests sent to their local leader as the client's bytes, by outcome: bytes (every "
                           "partition succeeded, the answer passed on as it came) or decoded (settled like any request)",
                           ["outcome"])
FORWARD_DECLINED = TalliedCounter("azsidecar_router_forward_declined_total",
                                  "Produce requests the local forward path left to the decoding path, by reason (version, "
                                  "metadata, route, switch, gap, connection)", ["reason"])

# Counted for every partition batch: their children by label values, made once, the counters
# tallied (core/counter_tally.py, core/metric_children.py).
DECISIONS_BY: Callable[..., CounterTally] = DECISIONS.tally
METADATA_LOOKUPS_BY: Callable[..., CounterTally] = METADATA_LOOKUPS.tally
PRODUCE_LATENCY_BY: Children[Histogram] = Children(PRODUCE_LATENCY)
BYTES_IN_BY: Callable[..., CounterTally] = BYTES_IN.tally
BYTES_OUT_BY: Callable[..., CounterTally] = BYTES_OUT.tally
SHADOW_DECISIONS_BY: Callable[..., CounterTally] = SHADOW_DECISIONS.tally
SHADOW_BYTES_BY: Callable[..., CounterTally] = SHADOW_BYTES.tally
RESENDS_BY: Callable[..., CounterTally] = RESENDS.tally
FORWARDED_BY: Callable[..., CounterTally] = FORWARDED.tally
FORWARD_DECLINED_BY: Callable[..., CounterTally] = FORWARD_DECLINED.tally
