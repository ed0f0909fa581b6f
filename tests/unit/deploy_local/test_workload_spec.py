"""The workload spec the producers read (deploy/local/scenario.Workload.spec)."""

from __future__ import annotations

import pytest

from deploy.local.scenario import TopicSpec, Workload


def test_the_spec_carries_the_producers_requests_in_flight():
    topics = (TopicSpec("orders", 2, keyed=True),)
    assert Workload(topics=topics).spec(["a"], ["orders-x"])["max_in_flight"] == 3
    assert Workload(topics=topics, max_in_flight=5).spec(["a"], ["orders-x"])["max_in_flight"] == 5


@pytest.mark.parametrize("bad", [0, 6])
def test_requests_in_flight_beyond_what_an_idempotent_producer_allows_are_refused(bad):
    with pytest.raises(ValueError, match="max_in_flight: 1 to 5"):
        Workload(max_in_flight=bad)
