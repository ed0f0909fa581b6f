"""Prometheus metrics of the proxy (served on proxy.metrics_port at /metrics)."""

from collections.abc import Callable

from prometheus_client import Counter, Gauge, Histogram

from core.counter_tally import CounterTally, TalliedCounter
from core.metric_children import Children

LATENCY_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

# `api` is Kafka's name of the API (Produce, Metadata, ...; kafka_protocol/api_names.py).
REQUESTS = TalliedCounter("azsidecar_proxy_requests_total", "Client requests by API", ["api", "api_version"])
REQUEST_LATENCY = Histogram(
    "azsidecar_proxy_request_latency_seconds", "Time from request read to response queued", ["api"],
    buckets=LATENCY_BUCKETS_S)
# Every request counts in both: their children by label values, made once, the counter tallied
# (core/counter_tally.py, core/metric_children.py).
REQUESTS_BY: Callable[..., CounterTally] = REQUESTS.tally
REQUEST_LATENCY_BY: Children[Histogram] = Children(REQUEST_LATENCY)
# The per-route produce series (azsidecar_proxy_produce_latency_seconds, _received_bytes_total,
# _sent_bytes_total) are counted where the route is known: router/metrics.py.
ERRORS = Counter("azsidecar_proxy_errors_total", "Kafka error codes returned to clients", ["error_code"])
PROTOCOL_ERRORS = Counter("azsidecar_proxy_protocol_errors_total", "Connections closed for bad input", ["reason"])
CONNECTIONS = Gauge("azsidecar_proxy_open_connections", "Open client connections")
MEMORY_TRIMS = Counter("azsidecar_proxy_memory_trims_total",
                       "Free heap memory returned to the OS after a burst of connections or bytes")
CONNECTIONS_LIMITED = Counter(
    "azsidecar_proxy_connections_limited_total",
    "Connections refused or closed by a listener limit (proxy/limits.py reasons)", ["reason"])
RECEIVE_BUFFERED_BYTES = Gauge("azsidecar_proxy_receive_buffered_bytes",
                               "Bytes held for requests still arriving, all connections (proxy.max_receive_buffer_bytes)")
RECEIVE_BUDGET_WAITS = Counter("azsidecar_proxy_receive_budget_waits_total",
                               "Reads that waited for room in proxy.max_receive_buffer_bytes (backpressure)")
# Authorization per client principal (authz.source): refusals by API and resource type, and the rules in force.
AUTHZ_DENIALS = Counter("azsidecar_proxy_authz_denials_total", "Requests or topics refused by the ACLs, by API and resource",
                        ["api", "resource_type"])
AUTHZ_ACLS = Gauge("azsidecar_proxy_authz_acl_bindings", "ACL bindings in force (authz.source cluster or file)")
AUTHZ_REFRESH_FAILURES = Counter("azsidecar_proxy_authz_refresh_failures_total",
                                 "DescribeAcls refreshes that failed (authz.source cluster)")
# Produce request bytes by client principal (bounded: proxy.max_principal_labels, then "other").
PRINCIPAL_PRODUCE_BYTES = TalliedCounter("azsidecar_proxy_principal_produce_bytes_total",
                                         "Produce request bytes received, by client principal", ["principal"])
PRINCIPAL_PRODUCE_BYTES_BY: Callable[..., CounterTally] = PRINCIPAL_PRODUCE_BYTES.tally
# Produce quotas per client principal (quotas.*): requests answered with a throttle time, and the time.
QUOTA_THROTTLED = Counter("azsidecar_proxy_quota_throttled_requests_total",
                          "Produce requests answered with throttle_time_ms > 0 (quotas), by client principal", ["principal"])
QUOTA_THROTTLE_TIME = Counter("azsidecar_proxy_quota_throttle_seconds_total",
                              "Throttle time given to clients over their produce quota (their connection is muted as long), "
                              "by client principal", ["principal"])
