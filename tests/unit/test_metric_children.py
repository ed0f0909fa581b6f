"""core/metric_children.py: the cached child is the metric's own, and counts where labels() would."""

from prometheus_client import CollectorRegistry, Counter

from core.metric_children import Children


def test_children_are_the_metrics_own_and_made_once():
    registry = CollectorRegistry()
    requests = Counter("t_requests_total", "requests", ["api", "api_version"], registry=registry)
    by = Children(requests)

    by("Produce", 9).inc()
    by("Produce", 9).inc(2)
    by("Metadata", 12).inc()

    assert by("Produce", 9) is requests.labels("Produce", "9")  # labels() stringifies: the same child
    assert registry.get_sample_value("t_requests_total", {"api": "Produce", "api_version": "9"}) == 3.0
    assert registry.get_sample_value("t_requests_total", {"api": "Metadata", "api_version": "12"}) == 1.0
    assert len(by._made) == 2  # noqa: SLF001 - one entry per distinct label values
