"""What the status port's /metrics serves: the process's own collectors, labelled with its
zone and component, and `azsidecar_build_info`.

Prometheus users filter by `zone` (the dashboard does); a zone a metric is *about* is
`dest_zone` (router, sender), so `zone` stays the scrape target's own. A process imports
modules that declare another component's metrics (the agent imports proxy and WAL writer
modules at start-up, the proxy the WAL reader's): those would only ever serve zeros, so
each component serves the `azsidecar_*` families it owns (OWNED_BY) and drops the rest.
"""

from __future__ import annotations

import platform
from collections.abc import Iterator, Mapping

from prometheus_client import REGISTRY, CollectorRegistry, Gauge
from prometheus_client.metrics_core import Metric

from azsidecar import __version__

# Metric name prefixes each component updates (the Grafana dashboard's panels follow them).
OWNED_BY: dict[str, tuple[str, ...]] = {
    "proxy": ("azsidecar_proxy_", "azsidecar_router_", "azsidecar_notify_", "azsidecar_wal_flush",
              "azsidecar_wal_put_", "azsidecar_wal_buffered_", "azsidecar_wal_gray_"),
    "agent": ("azsidecar_agent_", "azsidecar_wal_cache_", "azsidecar_wal_gray_"),  # gray: PUTs / GETs
    "gc": ("azsidecar_wal_gc_",),
}
# Every component's: the build, /readyz as last probed (azsidecar/health.py), the audit writer's drops.
SHARED = ("azsidecar_build_info", "azsidecar_ready", "azsidecar_audit_")

BUILD_INFO = Gauge("azsidecar_build_info", "1, labelled with the running build", ["version", "python"])


class LabelledRegistry:
    """A registry's collectors as one collector whose samples carry `labels` too, keeping the
    `azsidecar_*` families `component` owns (and every non-azsidecar one: process, Python)."""

    def __init__(self, component: str, labels: Mapping[str, str], registry: CollectorRegistry = REGISTRY) -> None:
        self._labels = {**labels, "component": component}
        self._own = OWNED_BY[component] + SHARED
        self._registry = registry
        BUILD_INFO.labels(__version__, platform.python_version()).set(1)

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            if family.name.startswith("azsidecar_") and not family.name.startswith(self._own):
                continue
            out = Metric(family.name, family.documentation, family.type, family.unit)
            for s in family.samples:
                out.add_sample(s.name, {**s.labels, **self._labels}, s.value, s.timestamp, s.exemplar)
            yield out
