"""The pilot's topic globs and shadow mode: pure decisions, then the backend above fakes."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from prometheus_client import REGISTRY

from core.audit import MemoryAuditSink
from core.configload import ConfigError
from core.prices import Prices
from router.backend import RoutingBackend
from router.config import RouterConfig
from router.decide import ObjectShape, Path, Route, ZoneView, decide, shadow
from router.pilot import EXCLUDED, NOT_PILOTED, wal_refusal
from tests.unit.router.test_backend import FakeDirect, FakeMetadata, FakeSender, FakeWriter, item, send
from tests.unit.router.wal_wiring import wal_route
from wal_s3.config import WalConfig


@pytest.mark.parametrize(("topic", "include", "exclude", "expected"), [
    ("orders", ("*",), (), None),                          # the default: every topic may
    ("orders", ("orders",), (), None),                     # one piloted topic
    ("payments", ("orders",), (), NOT_PILOTED),            # ...and only that one
    ("orders.eu", ("orders.*",), (), None),
    ("orders", ("orders.*",), (), NOT_PILOTED),            # a glob, not a prefix
    ("Orders", ("orders",), (), NOT_PILOTED),              # topic names are case-sensitive
    ("orders", ("*",), ("orders",), EXCLUDED),
    ("orders", ("orders",), ("ord*",), EXCLUDED),          # an exclude wins over an include
    ("logs.debug", ("logs.*", "orders"), ("*.debug",), EXCLUDED),
    ("logs.info", ("logs.*", "orders"), ("*.debug",), None),
    ("orders", (), (), NOT_PILOTED),                       # an empty include list pilots nothing
])
def test_wal_refusal_table(topic, include, exclude, expected):
    assert wal_refusal(topic, include, exclude) == expected


HEALTHY_CROSS = ZoneView("use1-az1", "use1-az2", True, "direct")


@pytest.mark.parametrize(("policy", "view", "refusal", "expected"), [
    ("wal", HEALTHY_CROSS, None, Route(Path.WAL, "policy wal")),
    ("wal", HEALTHY_CROSS, NOT_PILOTED, Route(Path.DIRECT_CROSS, NOT_PILOTED)),
    ("wal", HEALTHY_CROSS, EXCLUDED, Route(Path.DIRECT_CROSS, EXCLUDED)),
    ("cost", HEALTHY_CROSS, NOT_PILOTED, Route(Path.DIRECT_CROSS, NOT_PILOTED)),
    # a refused topic led in our own zone is still local, not direct_cross
    ("wal", ZoneView("use1-az1", "use1-az1", True, "direct"), NOT_PILOTED, Route(Path.LOCAL, "same zone")),
    # unhealthy with fallback fail: a refused topic goes direct, it never waits on the WAL
    ("wal", ZoneView("use1-az1", "use1-az2", False, "fail"), NOT_PILOTED, Route(Path.DIRECT_CROSS, NOT_PILOTED)),
])
def test_decide_with_a_topic_refusal(policy, view, refusal, expected):
    big = ObjectShape(8_000_000, 4_000_000)
    assert decide(policy, view, None, big, Prices(), topic_refusal=refusal) == expected


@pytest.mark.parametrize(("would", "taken"), [
    (Route(Path.WAL, "policy wal"), Route(Path.DIRECT_CROSS, "shadow")),
    (Route(Path.WAL, "cost: wal cheaper"), Route(Path.DIRECT_CROSS, "shadow")),
    (Route(Path.DIRECT_CROSS, "cost: objects too small"), Route(Path.DIRECT_CROSS, "cost: objects too small")),
    (Route(Path.LOCAL, "same zone"), Route(Path.LOCAL, "same zone")),
])
def test_shadow_never_takes_the_wal(would, taken):
    assert shadow(would) == taken


@pytest.mark.parametrize("field", ["wal_topics", "wal_exclude_topics"])
def test_an_empty_glob_is_refused(field):
    with pytest.raises(ConfigError, match=f"router.{field}: an empty topic glob"):
        RouterConfig(**{field: ("orders", " ")})


@pytest.fixture
def autojump_clock():
    return trio.testing.MockClock(autojump_threshold=0)


@pytest.mark.trio
async def test_only_the_piloted_topic_takes_the_wal(autojump_clock):
    log: list = []
    audit = MemoryAuditSink()
    async with trio.open_nursery() as nursery:
        wal, circuits = wal_route(FakeWriter(log), FakeSender(), nursery)
        config = RouterConfig(policy="wal", partition_zones={"*:*": "az2"}, wal_topics=("orders",))
        backend = RoutingBackend("az1", config, WalConfig(), FakeDirect(log), FakeMetadata(), wal, nursery, audit,
                                 circuits=circuits)
        assert (await send(backend, item("orders", 0, 100)))[("orders", 0)].base_offset == 500  # the agent's offset
        assert (await send(backend, item("payments", 0, 100)))[("payments", 0)].base_offset == 100  # the leader's
        nursery.cancel_scope.cancel()
    assert [(r, p) for r, p, _t in log] == [("wal", 0), ("direct", 0)]
    batches = [(f["topic"], f["route"], f["reason"], f["shadow_route"]) for k, f in audit.records
               if k == "produce_batch"]
    assert batches == [("orders", "wal", "policy wal", ""), ("payments", "direct_cross", NOT_PILOTED, "")]


def _shadow_sample(route: str) -> float:
    return REGISTRY.get_sample_value("azsidecar_router_shadow_bytes_total", {"route": route}) or 0.0


@pytest.mark.trio
async def test_shadow_mode_routes_direct_without_a_wal_path_and_audits_the_would_be_route(autojump_clock):
    log: list = []
    audit = MemoryAuditSink()
    before_wal, before_direct = _shadow_sample("wal"), _shadow_sample("direct_cross")
    async with trio.open_nursery() as nursery:
        config = RouterConfig(policy="wal", partition_zones={"*:*": "az2", "mine:*": "az1"},
                              wal_exclude_topics=("audit.*",), shadow=True)
        # Shadow mode needs no WAL path: the proxy builds none (azsidecar/sidecar.py wal_enabled).
        backend = RoutingBackend("az1", config, WalConfig(), FakeDirect(log), FakeMetadata(), None, nursery, audit)
        for topic, size in (("orders", 1000), ("audit.log", 300), ("mine", 50)):
            assert (await send(backend, item(topic, 0, size)))[(topic, 0)].base_offset == 100
        nursery.cancel_scope.cancel()
    assert [r for r, _p, _t in log] == ["direct", "direct", "direct"]
    batches = [(f["topic"], f["route"], f["reason"], f["shadow_route"], f["shadow_reason"])
               for k, f in audit.records if k == "produce_batch"]
    assert batches == [
        ("orders", "direct_cross", "shadow", "wal", "policy wal"),
        ("audit.log", "direct_cross", EXCLUDED, "direct_cross", EXCLUDED),
        ("mine", "local", "same zone", "local", "same zone"),
    ]
    assert _shadow_sample("wal") - before_wal == 1000
    assert _shadow_sample("direct_cross") - before_direct == 300
