"""core/counter_tally.py: a tallied counter serves exactly what prometheus-client's own
Counter serves for the same increments, byte for byte, whenever it is collected."""

from __future__ import annotations

import threading

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from core.counter_tally import TalliedCounter

INCREMENTS = [(("Produce", 9), 1), (("Produce", 9), 2), (("Metadata", 12), 1), (("Produce", 9), 1048576),
              (("Metadata", 12), 0)]


def _pair(monkeypatch: pytest.MonkeyPatch) -> tuple[CollectorRegistry, Counter, CollectorRegistry, TalliedCounter]:
    monkeypatch.setattr("time.time", lambda: 1796212345.25)  # the children's _created, alike in both
    plain_registry, tallied_registry = CollectorRegistry(), CollectorRegistry()
    plain = Counter("t_requests_total", "requests", ["api", "api_version"], registry=plain_registry)
    tallied = TalliedCounter("t_requests_total", "requests", ["api", "api_version"], registry=tallied_registry)
    return plain_registry, plain, tallied_registry, tallied


def test_the_exposition_is_the_librarys_byte_for_byte(monkeypatch):
    plain_registry, plain, tallied_registry, tallied = _pair(monkeypatch)
    for values, amount in INCREMENTS:
        plain.labels(*values).inc(amount)
        tallied.tally(*values).inc(amount)
    text = generate_latest(tallied_registry)
    assert text == generate_latest(plain_registry)
    assert b't_requests_total{api="Produce",api_version="9"} 1.048579e+06' in text  # 1 + 2 + 1048576


def test_every_collection_serves_what_was_counted_until_then(monkeypatch):
    _plain_registry, _plain, registry, tallied = _pair(monkeypatch)
    produce = tallied.tally("Produce", 9)
    produce.inc()
    assert registry.get_sample_value("t_requests_total", {"api": "Produce", "api_version": "9"}) == 1.0
    produce.inc(5)
    produce.inc(0)
    assert registry.get_sample_value("t_requests_total", {"api": "Produce", "api_version": "9"}) == 6.0
    assert registry.get_sample_value("t_requests_total", {"api": "Produce", "api_version": "9"}) == 6.0
    assert tallied.tally("Produce", 9) is produce  # made once per distinct label values


def test_a_negative_increment_is_refused_like_the_librarys():
    tallied = TalliedCounter("t_neg_total", "n", ["x"], registry=CollectorRegistry())
    with pytest.raises(ValueError, match="non-negative"):
        tallied.tally("a").inc(-1)


def test_scrapes_in_other_threads_never_lose_or_double_an_increment():
    registry = CollectorRegistry()
    tallied = TalliedCounter("t_race_total", "r", ["x"], registry=registry)
    tally = tallied.tally("a")
    stop = threading.Event()

    def scrape() -> None:
        while not stop.is_set():
            generate_latest(registry)

    scrapers = [threading.Thread(target=scrape) for _ in range(2)]
    for t in scrapers:
        t.start()
    try:
        for _ in range(200_000):
            tally.inc()
    finally:
        stop.set()
        for t in scrapers:
            t.join(10)
    assert registry.get_sample_value("t_race_total", {"x": "a"}) == 200_000.0
