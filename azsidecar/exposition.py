"""What the status port's /metrics serves: every collector of the process, labelled with the
process's zone and component, empty families left out, and `azsidecar_build_info`.

Prometheus users filter by `zone` (the dashboard does); a zone a metric is *about* is
`dest_zone` (router, sender), so `zone` stays the scrape target's own. A family with no
sample (a labelled metric nobody has touched, a feature that is off) is not served: a
series that stays empty forever is noise in every query that lists names.
"""

from __future__ import annotations

import platform
from collections.abc import Iterator, Mapping

from prometheus_client import REGISTRY, CollectorRegistry, Gauge
from prometheus_client.metrics_core import Metric

from azsidecar import __version__

BUILD_INFO = Gauge("azsidecar_build_info", "1, labelled with the running build", ["version", "python"])


class LabelledRegistry:
    """A registry's collectors as one collector whose samples carry `labels` too."""

    def __init__(self, labels: Mapping[str, str], registry: CollectorRegistry = REGISTRY) -> None:
        self._labels = dict(labels)
        self._registry = registry
        BUILD_INFO.labels(__version__, platform.python_version()).set(1)

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            if not family.samples:
                continue
            out = Metric(family.name, family.documentation, family.type, family.unit)
            for s in family.samples:
                out.add_sample(s.name, {**s.labels, **self._labels}, s.value, s.timestamp, s.exemplar)
            yield out
