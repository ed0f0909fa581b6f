"""Every metric the product registers follows one naming rule and one label vocabulary
(the Prometheus naming guide, https://prometheus.io/docs/practices/naming/), and every
`azsidecar_*` family is served by some component's /metrics.

The rule is written here by hand, not derived from the code: base units (`seconds`,
`bytes`) as the name's suffix (before `_total` on a counter), counters and only counters
ending in `_total`, histograms measuring a unit, and label names from VOCABULARY, each with
one meaning. The registry walked is prometheus_client's default one after importing every
module that declares collectors and building the per-process agent and sender metrics: what
`azsidecar proxy`, `agent` and `gc` serve.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("azsidecar", "core", "kafka_protocol", "kafka_upstream", "leader_notify", "leader_placement", "planner",
           "proxy", "router", "spark_audit", "wal_s3")
DECLARES = re.compile(r"^from prometheus_client import .*\b(Counter|Gauge|Histogram|Summary|Info|Enum)\b", re.M)

NAME = re.compile(r"^azsidecar_[a-z][a-z0-9]*(_[a-z0-9]+)*$")
BASE_UNITS = {"seconds", "bytes"}
# Units that are not base units, and words that stand for a unit: never in a name.
NOT_BASE_UNITS = {"ms", "msec", "millis", "milliseconds", "us", "micros", "microseconds", "ns", "nanoseconds",
                  "minutes", "hours", "days", "kb", "kib", "mb", "mib", "gb", "gib", "percent", "latency_ms"}
RESERVED_SUFFIXES = ("_count", "_sum", "_bucket", "_created")  # what prometheus_client adds to histograms/counters

# The label vocabulary: one name per meaning, one meaning per name.
VOCABULARY = {
    "api": "Kafka's name of a request's API (Produce, Metadata, ...)",
    "api_version": "the request's API version",
    "component": "which process serves the series: proxy, agent or gc (added at /metrics)",
    "condition": "a zone's current condition (healthy, agent_slow, ...): one series is 1",
    "dest_zone": "the zone a series is about (the leader's zone), never the process's own",
    "error_code": "a Kafka error code, as its number",
    "item": "what one unit of a price is (a request, a byte moved)",
    "kind": "which sort of thing is counted (an audit record kind, a configuration warning)",
    "operation": "the request that was made or abandoned (s3_put, notify, put, get)",
    "outcome": "how an operation ended (ok, hit, miss, refused, timed_out, a status name)",
    "protocol_version": "the notification protocol version a connection agreed on",
    "principal": "a client's Kafka principal (User:alice), bounded by proxy.max_principal_labels, then other",
    "python": "the Python version of the build",
    "reason": "why it happened: the cause of a decision, a flush, a refusal, a close, a deletion",
    "resource_type": "a Kafka ACL resource type (topic, group, transactional_id, cluster)",
    "route": "the path a batch took or would take (local, direct_cross, wal)",
    "source": "who said so (leader, agent)",
    "state": "a connection's state (authenticated or not)",
    "version": "the azsidecar version of the build (a protocol's version is protocol_version)",
    "zone": "the serving process's own zone (added at /metrics)",
}
# Names a reader may reach for, and the vocabulary's word for the same meaning.
INSTEAD = {"code": "error_code", "status": "outcome", "result": "outcome", "why": "reason", "cause": "reason",
           "op": "operation", "cache": "outcome", "type": "kind", "leader_zone": "dest_zone"}
ADDED_AT_EXPOSITION = {"zone"}  # azsidecar/exposition.py sets it; a collector declaring it would be overwritten


def name_problems(kind: str, exposed: str) -> list[str]:
    """What is wrong with a series name `exposed` (a counter's with its `_total`) of a
    collector of type `kind` (counter, gauge, histogram, summary, info)."""
    problems = []
    if not NAME.match(exposed):
        problems.append("not azsidecar_ and snake_case")
    tokens = exposed.split("_")
    body = tokens[:-1] if kind == "counter" else tokens
    if kind == "counter" and tokens[-1] != "total":
        problems.append("a counter ends in _total")
    if kind != "counter" and tokens[-1] == "total":
        problems.append("only counters end in _total")
    if exposed.endswith(RESERVED_SUFFIXES):
        problems.append("ends in a suffix Prometheus clients add")
    bad_units = [t for t in tokens if t in NOT_BASE_UNITS]
    if bad_units:
        problems.append(f"{'/'.join(bad_units)}: use a base unit (seconds, bytes)")
    misplaced = [t for t in body[:-1] if t in BASE_UNITS]
    if misplaced:
        problems.append(f"{misplaced[0]}: the unit is the name's suffix (..._{misplaced[0]}"
                        f"{'_total' if kind == 'counter' else ''})")
    if kind in ("histogram", "summary") and body[-1] not in BASE_UNITS:
        problems.append("a histogram observes a quantity: end in its base unit")
    return problems


def label_problems(labels: tuple[str, ...]) -> list[str]:
    problems = []
    for label in labels:
        if label in INSTEAD:
            problems.append(f"label {label!r}: the vocabulary says {INSTEAD[label]!r}")
        elif label not in VOCABULARY:
            problems.append(f"label {label!r} is not in the vocabulary (add it with its one meaning)")
        elif label in ADDED_AT_EXPOSITION:
            problems.append(f"label {label!r} is added when served; declare dest_zone for a zone a series is about")
    return problems


@pytest.mark.parametrize(("kind", "name", "expected"), [
    ("counter", "azsidecar_proxy_received_bytes_total", []),
    ("counter", "azsidecar_proxy_quota_throttle_seconds_total", []),
    ("counter", "azsidecar_router_decisions_total", []),
    ("gauge", "azsidecar_wal_buffered_bytes", []),
    ("histogram", "azsidecar_wal_put_seconds", []),
    ("gauge", "azsidecar_build_info", []),
    ("counter", "azsidecar_proxy_bytes_in_total", ["bytes: the unit is the name's suffix (..._bytes_total)"]),
    ("counter", "azsidecar_agent_bytes_appended_total", ["bytes: the unit is the name's suffix (..._bytes_total)"]),
    ("counter", "azsidecar_agent_notifications", ["a counter ends in _total"]),
    ("gauge", "azsidecar_wal_flushes_total", ["only counters end in _total"]),
    ("histogram", "azsidecar_notify_rtt_ms", ["ms: use a base unit (seconds, bytes)",
                                              "a histogram observes a quantity: end in its base unit"]),
    ("histogram", "azsidecar_wal_flush_size", ["a histogram observes a quantity: end in its base unit"]),
    ("gauge", "azsidecar_cache_mib", ["mib: use a base unit (seconds, bytes)"]),
    ("gauge", "azsidecarProxyConnections", ["not azsidecar_ and snake_case"]),
    ("gauge", "proxy_open_connections", ["not azsidecar_ and snake_case"]),
])
def test_the_naming_rule_itself(kind, name, expected):
    assert name_problems(kind, name) == expected


def test_the_label_rule_itself():
    assert label_problems(("dest_zone", "outcome")) == []
    assert label_problems(("code",)) == ["label 'code': the vocabulary says 'error_code'"]
    assert label_problems(("status", "why")) == ["label 'status': the vocabulary says 'outcome'",
                                                 "label 'why': the vocabulary says 'reason'"]
    assert label_problems(("colour",)) == ["label 'colour' is not in the vocabulary (add it with its one meaning)"]
    assert len(label_problems(("zone",))) == 1


def _declaring_modules() -> list[str]:
    out = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            if DECLARES.search(path.read_text()):
                out.append(".".join(path.relative_to(ROOT).with_suffix("").parts))
    return out


def _registered() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Exposed name -> (type, label names) of every azsidecar collector on the default registry."""
    for module in _declaring_modules():
        importlib.import_module(module)
    from leader_notify.metrics import process_agent_metrics, process_sender_metrics

    process_agent_metrics()  # what `azsidecar agent` registers at start-up
    process_sender_metrics()  # and the proxy's notification sender
    out = {}
    # The collectors themselves (prometheus_client keeps them in this private map): a labelled
    # collector with no series yet yields no samples, so its label names are only here.
    for collector in list(REGISTRY._collector_to_names):  # noqa: SLF001
        name, kind = getattr(collector, "_name", None), getattr(collector, "_type", None)
        if not name or not name.startswith("azsidecar_"):
            continue
        exposed = name + "_total" if kind == "counter" else name
        out[exposed] = (kind, tuple(collector._labelnames))  # noqa: SLF001
    return out


def test_the_walk_finds_every_component_s_metrics():
    registered = _registered()
    for name in ("azsidecar_proxy_requests_total", "azsidecar_router_decisions_total", "azsidecar_wal_put_seconds",
                 "azsidecar_agent_appended_bytes_total", "azsidecar_notify_rtt_seconds", "azsidecar_ready",
                 "azsidecar_audit_dropped_records_total", "azsidecar_wal_gc_orphans", "azsidecar_build_info"):
        assert name in registered, name
    assert registered["azsidecar_agent_append_errors_total"] == ("counter", ("error_code",))
    assert len(registered) >= 60


def test_every_registered_metric_name_follows_the_rule():
    problems = {name: p for name, (kind, _) in _registered().items() if (p := name_problems(kind, name))}
    assert problems == {}


def test_every_registered_label_is_in_the_vocabulary():
    problems = {name: p for name, (_, labels) in _registered().items() if (p := label_problems(labels))}
    assert problems == {}


def test_every_registered_family_is_served_by_a_component():
    from azsidecar.exposition import OWNED_BY, SHARED

    served = tuple(prefix for prefixes in OWNED_BY.values() for prefix in prefixes) + SHARED
    assert [name for name in _registered() if not name.startswith(served)] == []


def test_every_registered_metric_is_in_docs_metrics_md_with_its_type_and_labels():
    doc = (ROOT / "docs" / "metrics.md").read_text()
    rows = {name: (kind, tuple(re.findall(r"`(\w+)`", labels)))
            for name, kind, labels in re.findall(r"^\| `(azsidecar_\w+)` \| (\w+) \| ([^|]*) \|", doc, re.M)}
    assert rows["azsidecar_router_decisions_total"] == ("counter", ("route", "reason"))  # the scan itself works
    assert {name: rows.get(name) for name in _registered()} == _registered()
    assert set(rows) - set(_registered()) == set()  # and no row for a metric that is gone


def test_the_label_table_of_docs_metrics_md_is_the_vocabulary():
    doc = (ROOT / "docs" / "metrics.md").read_text()
    labels = doc.partition("## Labels")[2].partition("## Every metric")[0]
    documented = {name for cell in re.findall(r"^\| (`[^|]*`) \|", labels, re.M) for name in re.findall(r"`(\w+)`", cell)}
    assert documented == set(VOCABULARY)
