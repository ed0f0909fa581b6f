"""Prometheus metrics of routing decisions (served with the proxy's /metrics).

A zone these metrics are about is `dest_zone` (the leader's zone), as in the notification
sender's metrics: `zone` is left to the scrape target (the proxy's own zone), which the
dashboards filter by.
"""

from prometheus_client import Counter, Gauge

DECISIONS = Counter("azsidecar_router_decisions_total", "Partition batches routed, by path and reason",
                    ["route", "reason"])
METADATA_LOOKUPS = Counter("azsidecar_router_metadata_lookups_total", "Leader-zone lookups by cache outcome",
                           ["cache"])
ZONE_OPEN = Gauge("azsidecar_router_zone_circuit_open", "1 while the WAL path to a zone is avoided",
                  ["dest_zone"])
GRAY_FAILURES = Counter("azsidecar_router_gray_failures_total",
                        "WAL PUTs or notifications abandoned at their gray deadline (breaker failures)",
                        ["dest_zone", "kind"])
SHADOW_DECISIONS = Counter("azsidecar_router_shadow_decisions_total",
                           "Shadow mode: partition batches by the path and reason the policy would have chosen",
                           ["route", "reason"])
SHADOW_BYTES = Counter("azsidecar_router_shadow_bytes_total",
                       "Shadow mode: record batch bytes by the path the policy would have chosen", ["route"])
