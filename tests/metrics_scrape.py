"""Reading a process's /metrics in tests: one place that fetches and parses the exposition
(prometheus_client's own parser), and the two views the tests ask of it."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


def families(port: int, timeout_s: float = 10.0) -> list[Metric]:
    """Every metric family served at http://127.0.0.1:<port>/metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout_s) as response:
        text = response.read().decode()
    return list(text_string_to_metric_families(text))


def samples(port: int, timeout_s: float = 10.0) -> Iterator[Sample]:
    for family in families(port, timeout_s):
        yield from family.samples


def series(port: int, timeout_s: float = 10.0) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample name, sorted labels): value}."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for s in samples(port, timeout_s)}


def total(port: int, name: str, timeout_s: float = 10.0, **labels: str) -> float:
    """The sum of the samples of `name` that carry `labels` (any other labels too)."""
    return sum(s.value for s in samples(port, timeout_s)
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))
